"""What every figure of ``make bench`` shares: the ``Ratio`` record and its verdict line, the config and caches of a run
(``compose``, ``cached_embedder``, ``temp_cache``), the subprocess runner with its memory sampler (``run_measured``: wall
time, CPU, the process's VmHWM and its process tree's RSS from /proc), and the side-by-side runners several figures
measure with (``alternate``, ``best_ratio``, the raw ONNX loop ``RawOnnx``).

This machine is shared and noisy, so every figure is a ratio of two things measured in the same run (interleaved where
they are short), never an absolute time held against a constant in a test.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.cli.common import work_dir
from bench.resources import configs_dir


log = logging.getLogger("bench.tools.perf")
REPO = work_dir()  # where the command runs (the sweep's paths.root): reports/ and caches go there, never into the package
CONFIGS = configs_dir()
SEARCH_DEPTH = 1000  # k of the P2 and P4 searches (LoCoMo's largest conversation holds ~700 turns)
MAIN_STRATEGIES = "[limit,threshold,hybrid,full_context]"
OPS: dict[str, Callable[[float, float], bool]] = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b}


@dataclass(frozen=True)
class Ratio:
    """One measured figure against its target."""

    key: str  # "P1", "P3a", "P4/seekdb", ...
    what: str
    value: float
    op: str  # "<=", "<" or ">="
    limit: float
    unit: str = ""  # "" for a plain ratio, "%", "s", "GB"
    method: str = ""
    details: dict = field(default_factory=dict)
    info: bool = False  # printed for context, not a target: never fails the run

    @property
    def passed(self) -> bool:
        return self.info or check(self.value, self.op, self.limit)

    def line(self) -> str:
        return format_line(self)


def check(value: float, op: str, limit: float) -> bool:
    """value <op> limit; a NaN (not measured) never passes."""
    if op not in OPS:
        raise ValueError(f"perfbench: unknown comparison {op!r} (use one of {sorted(OPS)})")
    return value == value and OPS[op](value, limit)


def _fmt(value: float, unit: str) -> str:
    if value != value:
        return "n/a"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "s":
        return f"{value:.1f} s"
    if unit == "GB":
        return f"{value:.2f} GB"
    return f"{value:.3f}"


def format_line(r: Ratio) -> str:
    if r.info:
        return f"{r.key:<14} {_fmt(r.value, r.unit):>10}   {'(information, no target)':<28}  {r.what}"
    verdict = "PASS" if r.passed else ("FAIL" if r.value == r.value else "NOT MEASURED")
    return f"{r.key:<14} {_fmt(r.value, r.unit):>10}   target {r.op} {_fmt(r.limit, r.unit):<9} {verdict:<5}  {r.what}"


def compose(overrides: Sequence[str] = ()):
    """The config of ``python -m bench`` (``bench.cli.config.compose``; paths.root = repo)."""
    from bench.cli import config

    return config.compose([f"paths.root={REPO}", *overrides])


def cached_embedder(overrides: Sequence[str], cache_dir: Path):
    """(corpus, CachedEmbedder) of the configured dataset (with its ``memory`` units) and embedder, every text of the
    corpus in the cache."""
    from bench.cli.config import build
    from bench.embedders.auto import resolve
    from bench.embedders.cache import CachedEmbedder

    from bench.data.units import apply_units, check_spec
    from bench.cli.config import to_plain

    cfg = compose(overrides)
    corpus = apply_units(build(cfg.dataset), check_spec(to_plain(cfg.memory) if cfg.get("memory") is not None else None))
    emb = CachedEmbedder(resolve(build(cfg.embedder), [t.text for t in corpus.turns()] + [q.text for q in corpus.questions]), cache_dir)
    emb.embed_documents([t.text for t in corpus.turns()])
    emb.embed_queries([q.text for q in corpus.questions])
    return corpus, emb


def warm_embeddings(overrides: Sequence[str], cache_dir: Path) -> int:
    """Embed every text of the configured dataset into the embedding cache; returns texts embedded now."""
    return cached_embedder(overrides, cache_dir)[1].embedded


@contextlib.contextmanager
def temp_cache(real_embeddings: Path | None):
    """A temporary ``paths.cache`` (stores, traces, jobs) sharing the real embedding cache."""
    with tempfile.TemporaryDirectory(prefix="rb-perf-") as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        if real_embeddings is not None:
            real_embeddings.mkdir(parents=True, exist_ok=True)
            (cache / "embeddings").symlink_to(real_embeddings.resolve(), target_is_directory=True)
        yield Path(tmp), cache


def tree_rss_bytes(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants now (Linux /proc; 0 when it is gone)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            with open(f"/proc/{d}/statm") as f:
                pages = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
        rss[int(d)] = pages * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


@dataclass(frozen=True)
class Proc:
    returncode: int
    wall_s: float
    maxrss_bytes: int  # os.wait4 ru_maxrss: kept across exec, so it includes the launcher's RSS at fork (not used for P5)
    tree_peak_bytes: int  # sampled peak RSS of the process tree (store servers included)
    stderr_tail: str
    hwm_bytes: int = 0  # sampled VmHWM of the process: the kernel's peak RSS of its own address space since exec
    cpu_s: float = 0.0  # user + system CPU seconds of the process and its waited-for children (os.wait4)


def vm_hwm_bytes(pid: int) -> int:
    """VmHWM (peak resident set of the current address space) of ``pid`` from /proc; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_measured(cmd: Sequence[str], *, env: dict | None = None, cwd: Path = REPO, sample_s: float = 0.2,
                 timeout_s: float = 3600.0) -> Proc:
    """Run ``cmd``; its wall time, sampled peak RSS (VmHWM) and process-tree peak RSS, and wait4's ru_maxrss."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        peak, hwm, stop = [0], [0], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], tree_rss_bytes(proc.pid))
                hwm[0] = max(hwm[0], vm_hwm_bytes(proc.pid))  # a high-water mark: only the last sample_s can be missed
                stop.wait(sample_s)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        deadline = t0 + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        stop.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read()[-3000:].decode("utf-8", "replace")
    return Proc(proc.returncode, wall, usage.ru_maxrss * 1024, peak[0], tail, hwm[0], usage.ru_utime + usage.ru_stime)


def bench_cmd(*overrides: str, multirun: bool = False, trace_cache: bool = False) -> list[str]:
    return [sys.executable, "-m", "bench", *(["-m"] if multirun else []), "progress=false", "publish_latest=false",
            "resume=false", f"trace_cache={str(trace_cache).lower()}", *overrides]


def _failed(proc: Proc, what: str) -> str:
    return f"{what} exited {proc.returncode}: {proc.stderr_tail.strip().splitlines()[-1] if proc.stderr_tail.strip() else ''}"


def alternate(adapter: Callable[[int], int], raw: Callable[[int], int], n: int, *, warmup: int = 10) -> tuple[list[int], list[int]]:
    """``adapter(i)`` and ``raw(i)`` (each returns the ns of its store call) for i in 0..n-1, alternating which goes first;
    ``warmup`` pairs first, discarded."""
    for i in range(min(warmup, n)):
        adapter(i)
        raw(i)
    a, b = [], []
    for i in range(n):
        if i % 2 == 0:
            a.append(adapter(i))
            b.append(raw(i))
        else:
            b.append(raw(i))
            a.append(adapter(i))
    return a, b


def best_ratio(ours: Sequence[float], base: Sequence[float]) -> float:
    """Best (smallest) of ``ours`` / best of ``base``: each side's least disturbed repeat (NaN when either is empty)."""
    if not len(ours) or not len(base):
        return float("nan")
    return min(ours) / min(base)


class RawOnnx:
    """The minimal hand-written loop over the raw onnxruntime session: tokenise, run, mean-pool, normalise; the same
    session options and the same batches (``bench.embedders.minilm.token_batches``) as the embedder."""

    def __init__(self, batch_size: int = 64, threads: int = 0) -> None:
        import onnxruntime as ort

        from bench.embedders.minilm import DIM, load_tokenizer, session_options, verified_model_path

        self.session = ort.InferenceSession(verified_model_path(), sess_options=session_options(threads),
                                            providers=["CPUExecutionProvider"])
        self.tokenizer = load_tokenizer()
        self.batch_size = batch_size
        self.dim = DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from bench.embedders.minilm import token_batches

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        encs = self.tokenizer.encode_batch(list(texts))
        lengths = np.array([sum(e.attention_mask) for e in encs])
        for rows in token_batches(lengths, self.batch_size):  # the embedder's batches: same rows per session call
            w = int(lengths[rows].max())
            ids = np.array([encs[i].ids[:w] for i in rows], dtype=np.int64)
            mask = np.array([encs[i].attention_mask[:w] for i in rows], dtype=np.int64)
            (hidden,) = self.session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
            out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out


WARM_RUN = ("dataset=locomo", "backend=exact")  # the default strategies (limit5, threshold, hybrid5, full_context), 17 thresholds
PS_STRATEGIES = MAIN_STRATEGIES


def ps_overrides(dataset: str) -> list[str]:
    return [f"dataset={dataset}", "embedder=minilm", "backend=exact", f"strategy={PS_STRATEGIES}"]


_WORDS = ("the memory agent recalls what user said about work family travel plans music books weekend hiking city "
          "garden dinner project deadline meeting doctor school friend birthday movie coffee morning evening because "
          "really think maybe later yesterday tomorrow important remember favourite new old small large quiet").split()


@dataclass(frozen=True)
class Context:
    """What ``main`` hands every figure's ``run(args, ctx)``: where the corpora are, and the notes printed at the end."""

    data_dir: Path
    has_locomo: bool  # LoCoMo found under data_dir (P3a, P6/P7 and PC need it)
    notes: list[str]
