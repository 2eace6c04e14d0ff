"""Per-user layout at scale: N two-turn synthetic conversations in one store's ``per_conversation`` layout.

Ingests ``--conversations`` conversations of two turns each (a user and an assistant turn, 384-d unit vectors), then asks
one question per conversation (filtered to it), through the store session like a run does. Prints one JSON line: wall
seconds of ingest and search, peak RSS (VmHWM), the most file descriptors open at once (sampled from /proc/self/fd
after every batch), the same two with the process's descendants (``Peak``: an embedded seekdb server holds the store's
files and memory in a child), the store's disk bytes, collections, ``max_open`` and reopens, or the error line.

Run: ``python -m bench.tools.layout_scale --store sqlite_vec --conversations 5000`` (under ``ulimit -n 1024`` to see the
open-file limit).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def vm_hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def descendants(pid: int | None = None) -> list[int]:
    """Process ids of every descendant of ``pid`` (this process by default), e.g. an embedded seekdb server (Linux /proc)."""
    out, todo = [], [pid or os.getpid()]
    while todo:
        p = todo.pop()
        try:
            kids = [int(c) for t in os.listdir(f"/proc/{p}/task") for c in open(f"/proc/{p}/task/{t}/children").read().split()]
        except OSError:
            continue
        out += kids
        todo += kids
    return out


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(x.split()[1]) * 1024 for x in f if x.startswith("VmRSS:")), 0)
    except OSError:
        return 0


class Peak:
    """Peak resources of a block: ``fds``, the most file descriptors open at once in this process and its descendants
    (an embedded server holds the store's files), sampled every ``every`` seconds by a thread; ``rss_bytes``, this
    process's peak RSS within the block (VmHWM, reset on entry through /proc/self/clear_refs where the kernel allows it)
    plus the largest summed RSS of its descendants seen; ``start_bytes``, the same sum on entry. ``reset``: whether VmHWM
    could be reset (else it is the process's peak since it started)."""

    def __init__(self, every: float = 0.2) -> None:
        self.every, self.fds, self.children_rss, self.reset = every, 0, 0, False
        self._stop = None

    def sample(self) -> None:
        kids = descendants()
        self.fds = max(self.fds, open_fds() + sum(map(_fds, kids)))
        self.children_rss = max(self.children_rss, sum(map(_rss, kids)))

    def __enter__(self) -> "Peak":
        import threading

        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
            self.reset = True
        except OSError:
            self.reset = False
        self._stop = threading.Event()

        def loop():
            while not self._stop.wait(self.every):
                self.sample()

        self.sample()
        self.start_bytes = _rss(os.getpid()) + self.children_rss  # what the block starts from
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        self.rss_bytes = vm_hwm() + self.children_rss


def run(store: str, conversations: int, *, dim: int = 384, batch: int = 1000, seed: int = 0, workdir: str | None = None,
        max_open: int | None = None) -> dict:
    from bench.backends.session import open_session
    from bench.backends.catalog import load_backend
    from bench.replay.trace import disk_bytes
    from bench.types import MemoryBatch, Where

    rng = np.random.default_rng(seed)
    n = 2 * conversations
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    conv = [f"user{i // 2}" for i in range(n)]
    roles = ["user" if i % 2 == 0 else "assistant" for i in range(n)]
    peak_fds = [open_fds()]
    out = {"store": store, "layout": "per_conversation", "conversations": conversations, "rows": n,
           "nofile_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}
    with tempfile.TemporaryDirectory(prefix="rb-layout-", dir=workdir) as tmp, Peak() as peak:
        t0 = time.perf_counter()
        try:
            backend = load_backend(store, stores_dir=Path(tmp), collection="scale", layout="per_conversation",
                                   **({"max_open": max_open} if max_open else {}))
            out["max_open"] = getattr(backend, "max_open", None)

            def batches():
                for lo in range(0, n, batch):
                    hi = min(lo + batch, n)
                    yield MemoryBatch(ids=tuple(f"m{i}" for i in range(lo, hi)), vectors=vecs[lo:hi], conversation_ids=tuple(conv[lo:hi]),
                                      roles=tuple(roles[lo:hi]), timestamps=tuple(float(i) for i in range(lo, hi)))
                    peak_fds.append(open_fds())

            with open_session(backend, dim=dim, fresh=True) as s:
                ing = s.ingest(batches(), total=-(-n // batch), progress=False)
                out["ingest_s"] = time.perf_counter() - t0
                peak_fds.append(open_fds())
                q = vecs[0::2] + 0.1 * rng.standard_normal((conversations, dim)).astype(np.float32)
                q /= np.linalg.norm(q, axis=1, keepdims=True)
                t1 = time.perf_counter()
                timed = s.search_all(q, [Where(conversation_id=f"user{i}") for i in range(conversations)], k=10, warmup=0, progress=False)
                out["search_s"] = time.perf_counter() - t1
                out["p50_ms"] = float(np.percentile(timed.latency_ns, 50) / 1e6)
                out["p99_ms"] = float(np.percentile(timed.latency_ns, 99) / 1e6)
                out["own_hit_rate"] = float(np.mean([bool(h.ids) and h.ids[0] == f"m{2 * i}" for i, h in enumerate(timed.hits)]))
                peak_fds.append(open_fds())
                out["disk_mb"] = (disk_bytes(getattr(backend, "path", None)) or 0) / 1e6
                out["collections"] = getattr(backend, "n_collections", 1)
                out["reopened"] = getattr(backend, "reopened", 0)
                out["ingest_rows_per_s"] = n / ing.add_seconds if ing.add_seconds else float("nan")
        except Exception as exc:  # noqa: BLE001  (the measurement reports the failure as its result)
            out["error"] = f"{type(exc).__name__}: {exc}"[:400]
        out["wall_s"] = time.perf_counter() - t0
    out["peak_rss_gb"] = vm_hwm() / 1e9  # this process
    out["peak_open_fds"] = max(peak_fds)  # this process
    out["peak_rss_gb_with_children"] = peak.rss_bytes / 1e9  # + its descendants (an embedded seekdb server)
    out["peak_open_fds_with_children"] = peak.fds
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tools.layout_scale", description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="sqlite_vec")
    ap.add_argument("--conversations", type=int, default=5000)
    ap.add_argument("--workdir", default=None, help="where the temporary store directory goes (default: the system temp dir)")
    ap.add_argument("--max-open", type=int, default=None, help="backend.max_open (default: the layout's, bench.backends.layout)")
    args = ap.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(run(args.store, args.conversations, workdir=args.workdir, max_open=args.max_open)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
