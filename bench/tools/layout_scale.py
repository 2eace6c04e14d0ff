"""Per-user layout at scale: N two-turn synthetic conversations in one store's ``per_conversation`` layout.

Ingests ``--conversations`` conversations of two turns each (a user and an assistant turn, 384-d unit vectors), then asks
one question per conversation (filtered to it), through the store session like a run does. Prints one JSON line: wall
seconds of ingest and search, peak RSS (VmHWM), the most file descriptors open at once (sampled from /proc/self/fd
after every batch and every 100 searches), the store's disk bytes and collections, or the error line.

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


def run(store: str, conversations: int, *, dim: int = 384, batch: int = 1000, seed: int = 0, workdir: str | None = None) -> dict:
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
    with tempfile.TemporaryDirectory(prefix="rb-layout-", dir=workdir) as tmp:
        t0 = time.perf_counter()
        try:
            backend = load_backend(store, stores_dir=Path(tmp), collection="scale", layout="per_conversation")

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
                out["ingest_rows_per_s"] = n / ing.add_seconds if ing.add_seconds else float("nan")
        except Exception as exc:  # noqa: BLE001  (the measurement reports the failure as its result)
            out["error"] = f"{type(exc).__name__}: {exc}"[:400]
        out["wall_s"] = time.perf_counter() - t0
    out["peak_rss_gb"] = vm_hwm() / 1e9
    out["peak_open_fds"] = max(peak_fds)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tools.layout_scale", description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="sqlite_vec")
    ap.add_argument("--conversations", type=int, default=5000)
    ap.add_argument("--workdir", default=None, help="where the temporary store directory goes (default: the system temp dir)")
    args = ap.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(run(args.store, args.conversations, workdir=args.workdir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
