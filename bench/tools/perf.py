"""``make bench`` (``python -m bench.tools.perf``): the performance ratios, each with its target and PASS/FAIL.

This machine is shared and noisy, so every figure is a ratio of two things measured in the same
run (interleaved where they are short), never an absolute time held against a constant in a test.

P1  wall time of a job (``bench.cli.sweep.run_job`` + its report) with the 17-threshold grid / the same
    job with one threshold; all strategies, the default store, warm embedding cache, fresh temporary
    store/trace/job caches. Timed by pieces so that load swings on a shared machine do not decide
    it: one cold job measures the trace (the store, queried once per role set), then warm jobs
    reusing that trace time the post-processing of 17 vs 1 threshold, interleaved, best of each:
    (trace + post 17) / (trace + post 1). Target <= 1.1: thresholds are post-processing.
P2  harness overhead per query / the exact store's own search time, on the synthetic corpus at
    14,726 memories (``bench.trace.build_trace``: wall time of the query loop minus the summed
    store calls). Target <= 5 %. Printed beside it, as information (P2/info): the exact reference pass after the
    loop (trace ``exact_scores`` + fidelity), itself an exact search, relative to the same store time.
P3a wall time of a warm-cache LoCoMo multirun over every embedded store of ``configs/backend/`` x the
    main strategies (the joblib launcher with 2 jobs when installed), stores queried. Target <= 60 s (issue 17).
    Printed beside it, as information (P3a/traces): the same multirun once more with the trace
    cache warm as well (a re-sweep with other strategies or thresholds: no store queried).
P3b cold-cache embedding throughput (``CachedEmbedder(MiniLMEmbedder)`` on an empty cache) / a
    hand-written loop over the raw onnxruntime session on the same texts (same tokenizer, batch 64,
    length-sorted). Best of interleaved repeats. Target >= 0.9.
P4  per store: adapter ``search`` time / the store's own hand-written reference query
    (``Backend.reference_query``: the same client and collection, same filter and k), both timed by
    ``bench.backends.session``, alternated query by query on one synthetic LoCoMo-shaped workload.
    Every store that runs here (``bench.backends.catalog``; local servers started by
    ``bench.backends.servers``); cloud stores are skipped with the reason. Target <= 1.2.
P5  peak RSS of the whole pipeline (CLI subprocess, ``dataset=synthetic`` at 100,000 memories,
    ``embedder=synthetic``): the process's VmHWM and the summed RSS of its whole process tree (store
    servers included), sampled from /proc. Not ``os.wait4``'s ru_maxrss: Linux keeps it across exec,
    so it includes this launcher's own RSS at fork time. Target < 4 GB.
PL  per store (seekdb, chroma): a question's query in the per-conversation layout (its conversation's
    collection, ``bench.backends.layout``) / an unfiltered query on the shared layout's one collection,
    the store holding both layouts at once, alternated query by query on the P4 workload, k=1000;
    ratio of p50s (``filtered_over_unfiltered``). Target <= 1.3. Printed beside it, as information
    (PL/<store>/shared): the shared layout's conversation-filtered query / the unfiltered one.

P6  CPU seconds of a warm exact LoCoMo run, report included (``python -m bench dataset=locomo backend=exact``, warm
    embedding and trace caches, a child process) / ``bench.tools.minimal`` (numpy + tiktoken, ~150 lines) computing the
    same 36 summary rows from the same cached vectors (a child process); interleaved repeats, best of each. The rows
    must agree to 1e-9, else the ratio is not reported. Target <= 2. Printed beside it, as information: P6/deferred,
    the same run with ``defer_report=true``, and P6/imports, a child process that only imports the libraries a run
    with its full report needs (``REPORT_LIBRARIES``), both over the same minimal script's CPU.
P7  the run's sweep stage in-process (``bench.sweep.sweep`` + the format side table + ``summarise`` over the cached
    trace) / the minimal script's sweep stage, CPU seconds, best of interleaved repeats. Target <= 1.2.
PE  embedding LongMemEval-sized long turns (synthetic, 35 % past 256 tokens; ``--pe-texts``, default 23,614) with
    MiniLM through our path (``CachedEmbedder`` + ``bench.trace.embed_texts``) vs the raw onnxruntime loop, a child
    process each: our peak RSS (VmHWM, target <= 1.5 GB) and our throughput / raw (target >= 0.9); the raw loop's
    peak RSS beside them (information).

PC  split-half coverage of the printed intervals on LoCoMo (``bench.analysis.holdout.split_half``): the warm exact
    LoCoMo run's per-question rows (MiniLM, the default strategies; the exact store's rows equal seekdb's); all 252
    ways of choosing with the recommender on 5 of the 10 conversations, the other 5 scored at that configuration and
    threshold: the share of trials whose held-out F1 lies inside the printed 95 % prediction interval (for a new corpus
    of 5 conversations like these). Target >= 90 %. Printed beside it, as information: the same trials against the CI
    about the mean (PC/ci) and against the interval the recommender printed before issue 23, a percentile cluster
    bootstrap (PC/bootstrap: 69.0 % on 2026-12-02). Not a speed: a statistical property, measured here because it
    needs the real corpus.

PS1-PS4 (issue 29) take the dataset by name (``--ps-dataset``, default locomo; ``longmemeval_s`` at full size):
PS1 a cold run (empty caches; MiniLM, exact store, default strategies, report included; a child process, wall) / the raw
    ONNX session embedding the run's distinct texts alone at the same thread count (all cores). Target <= 1.15.
PS2 the same run again with every cache warm (report included), wall. Target <= 90 s.
PS3 the cold run's peak RSS (VmHWM and the process tree). Target <= 3 GB. PS1-PS3 are one cold run: ``--only``, not
    in the default parts (hours at LongMemEval_S size on 2 cores).
PS4 the sweep stage (``sweep`` + ``format_tokens_table`` + ``summarise``, sharing one preparation as ``run_job`` does) /
    ``bench.tools.minimal_sweep`` (an independent numpy script: the same per-question rows and their means) on the same
    trace, in-process CPU, best of interleaved repeats; rows must agree to 1e-9. Measured on the dataset's warm exact
    trace and on a synthetic LongMemEval_S-sized trace (``--ps4-synthetic``, default 500 questions x 500 candidates,
    ``PS4/synthetic``). Target <= 2.

Results are printed and written to ``<out>/perfbench.json`` and ``<out>/perfbench.md``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench.cli.common import entry, parser, reports_dir, setup_logging, work_dir
from bench.output import write_atomic
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


# ----------------------------------------------------------------------------- helpers


def compose(overrides: Sequence[str] = ()):
    """The config of ``python -m bench`` (``bench.cli.config.compose``; paths.root = repo)."""
    from bench.cli import config

    return config.compose([f"paths.root={REPO}", *overrides])


def cached_embedder(overrides: Sequence[str], cache_dir: Path):
    """(corpus, CachedEmbedder) of the configured dataset and embedder, every text of the corpus in the cache."""
    from bench.cli.config import build
    from bench.embedders.auto import resolve
    from bench.embedders.cache import CachedEmbedder

    cfg = compose(overrides)
    corpus = build(cfg.dataset)
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


# ----------------------------------------------------------------------------- P1


def all_strategies() -> str:
    return "[" + ",".join(sorted(p.stem for p in (CONFIGS / "strategy").glob("*.yaml"))) + "]"


def _timed_job(cfg, out_dir: Path) -> tuple[float, float]:
    """(wall s, CPU s of this process) of one in-process job: ``bench.pipeline.run`` + its report (``finish_run``)."""
    from dataclasses import replace

    from bench import pipeline
    from bench.cli.sweep import finish_run, plain_job

    inputs, settings = plain_job(cfg)
    ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    pipeline.run(inputs, replace(settings, resume=False, keep=False, record=None), out_dir)
    finish_run(out_dir, None)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter() - t0, (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)


def p1_threshold_sweep(*, backend: str | None, strategies: str, data: list[str], repeats: int = 1,
                       embeddings_dir: Path | None = None) -> Ratio:
    """Trace measured once, then the post-processing of 17 thresholds vs 1, interleaved (see the module docstring)."""
    common = [*data, f"strategy={strategies}", "progress=false", "publish_latest=false"] + ([f"backend={backend}"] if backend else [])
    real = embeddings_dir or REPO / "reports" / "cache" / "embeddings"
    warmed = warm_embeddings(common, real)
    single = ["thresholds.start=0.5", "thresholds.stop=0.5"]
    with temp_cache(real) as (tmp, cache):
        paths = [f"paths.cache={cache}"]
        cold, _ = _timed_job(compose([*common, *single, *paths, "trace_cache=true"]), tmp / "cold")  # queries the store
        rest: dict[str, list[tuple[float, float]]] = {"grid17": [], "single": []}
        for i in range(repeats):  # the trace is reused from the cache: these time the sweep, tables and report only
            for label, grid in (("grid17", []), ("single", single)):
                rest[label].append(_timed_job(compose([*common, *grid, *paths, "trace_cache=true"]), tmp / f"{label}{i}"))
        metas = json.loads((tmp / "cold" / "meta.json").read_text()).get("traces", [])
    r17, r1 = min(w for w, _ in rest["grid17"]), min(w for w, _ in rest["single"])
    trace_s = max(cold - r1, 0.0)
    value = (trace_s + r17) / (trace_s + r1)
    return Ratio("P1", "17-threshold all-strategy run / single-threshold run (store queried once per role set)", value, "<=", 1.1,
                 method=("in-process `bench.cli.sweep.run_job` + report: one cold single-threshold job measures the trace (store "
                         "queried once per role set; trace cost = cold job - warm single job), then warm jobs reusing that "
                         f"trace for 17 thresholds (0.10..0.90 step 0.05) and 1 threshold (0.50), interleaved x{repeats}, "
                         "best of each; ratio = (trace + warm 17) / (trace + warm 1)"),
                 details={"trace_s": trace_s, "cold_single_job_s": cold, "warm_grid17_s": r17, "warm_single_s": r1,
                          "cpu_grid17_s": min(c for _, c in rest["grid17"]), "cpu_single_s": min(c for _, c in rest["single"]),
                          "traces": len(metas), "store_search_s": sum(m.get("store_search_seconds") or 0 for m in metas),
                          "strategies": strategies, "backend": backend or "config default", "texts_embedded_to_warm": warmed})


# ----------------------------------------------------------------------------- P2


def harness_ratio(meta: dict, n_questions: int) -> tuple[float, float, float]:
    """(loop overhead / store time, exact reference pass / store time, store ns per query) from a trace's meta."""
    store_ns = meta["store_search_seconds"] * 1e9
    if not store_ns or not n_questions:
        return float("nan"), float("nan"), float("nan")
    per_q_store = store_ns / n_questions
    return meta["harness_ns_per_query"] / per_q_store, meta["postprocess_ns_per_query"] / per_q_store, per_q_store


def p2_harness(n_memories: int = 14_726, *, depth: int = SEARCH_DEPTH, questions_per_conversation: int = 40) -> list[Ratio]:
    from bench.backends.exact import ExactBackend
    from bench.data.synthetic import generate
    from bench.embedders.synthetic import SyntheticEmbedder
    from bench.trace import build_trace

    corpus = generate(n_memories, questions_per_conversation=questions_per_conversation)
    trace = build_trace(corpus, SyntheticEmbedder(), ExactBackend(), depth=depth, progress=False)
    loop, post, per_q = harness_ratio(trace.meta, len(trace.table))
    details = {"queries": len(trace.table), "store_us_per_query": per_q / 1e3,
               "loop_overhead_us_per_query": trace.meta["harness_ns_per_query"] / 1e3,
               "reference_pass_us_per_query": trace.meta["postprocess_ns_per_query"] / 1e3}
    workload = f"synthetic corpus, exact store, conversation + time filter, k={depth}"
    return [
        Ratio("P2", f"harness overhead per query / exact store search time ({n_memories:,} memories)", 100 * loop, "<=", 5.0, "%",
              method=(f"bench.trace.build_trace ({workload}): (wall time of the query loop - summed store calls) / summed "
                      "store calls; the loop (bench.backends.session.Session.search_all) times the call and keeps the hits"),
              details=details),
        Ratio("P2/info", "exact reference pass (trace exact_scores + fidelity) / exact store search time", 100 * post, "<=", 100.0, "%",
              method=("after the timed loop, one pass recomputes every question's exact ranking from the cached vectors (a "
                      "second, reference search by design) to fill exact_scores and fidelity; not part of the per-query "
                      "harness overhead and not a target: against the exact store, which does the same brute-force work, it "
                      "cannot be ~0"),
              details=details, info=True),
    ]


# ----------------------------------------------------------------------------- P3


def p3_locomo_sweep(*, stores: Sequence[str], n_jobs: int, data: list[str]) -> list[Ratio]:
    real = REPO / "reports" / "cache" / "embeddings"
    warm_embeddings(data, real)
    launcher = []
    if n_jobs > 1 and _has_joblib_launcher():
        launcher = ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}"]
    args = [*data, f"backend={','.join(stores)}", f"strategy={MAIN_STRATEGIES}", *launcher]
    with temp_cache(real) as (tmp, cache):
        runs = {}
        for label, warm in (("cold", False), ("warm", True)):  # the first run saves its traces; the second reuses them
            sweep_dir = tmp / f"multirun_{label}"
            proc = run_measured(bench_cmd(*args, f"paths.cache={cache}", f"hydra.sweep.dir={sweep_dir}", multirun=True,
                                          trace_cache=warm))
            failed = sorted(str(p.parent.name) for p in sweep_dir.glob("*/failed.json"))
            ok = proc.returncode == 0 and (sweep_dir / "report.md").exists() and not failed
            runs[label] = (proc.wall_s if ok else float("nan"), {
                "wall_s": proc.wall_s, "failed_jobs": failed, "jobs": job_breakdown(sweep_dir),
                "report_s": _report_seconds(sweep_dir), "error": "" if proc.returncode == 0 else _failed(proc, "multirun")})
    how = f"with the joblib launcher, n_jobs={n_jobs}" if launcher else "with the basic (sequential) launcher"
    cmd = f"`python -m bench -m backend={','.join(stores)} strategy={MAIN_STRATEGIES}` {how}"
    common = {"launcher": "joblib" if launcher else "basic", "n_jobs": n_jobs if launcher else 1}
    return [
        Ratio("P3a", f"warm-cache LoCoMo multirun: {' + '.join(stores)} x main strategies, every store queried", runs["cold"][0],
              "<=", 60.0, "s", method=(f"{cmd}; warm embedding cache, empty trace cache (every store ingested and queried "
                                        "once per question), merged report included"),
              details={**common, **runs["cold"][1]}),
        Ratio("P3a/traces", "the same multirun again: trace cache warm too (a re-sweep: no store queried)", runs["warm"][0],
              "<=", 120.0, "s", method=f"{cmd} trace_cache=true right after P3a, on the traces P3a saved", details={**common, **runs["warm"][1]},
              info=True),
    ]


def _report_seconds(sweep_dir: Path) -> float | None:
    """Seconds from the last job's results to the merged report (the launching process's share at the end)."""
    ends = [p.stat().st_mtime for p in sweep_dir.glob("job*/meta.json")]
    report = sweep_dir / "report.md"
    return round(report.stat().st_mtime - max(ends), 1) if ends and report.exists() else None


def job_breakdown(sweep_dir: Path) -> list[dict]:
    """Per job of a multirun: store, and seconds spent ingesting, waiting for the index, searching, in the store calls."""
    out = []
    for meta_path in sorted(sweep_dir.glob("job*/meta.json")):
        meta = json.loads(meta_path.read_text())
        traces = meta.get("traces") or [meta]
        row = {"job": meta_path.parent.name, "backend": meta.get("backend")}
        for key in ("ingest_seconds", "ready_seconds", "search_loop_seconds", "store_search_seconds"):
            vals = [t.get(key) for t in traces if t.get(key) is not None]
            if vals:
                row[key] = round(sum(vals), 3)
        stamps = _log_stamps(meta_path.parent / "cli.log")
        if stamps:
            row["job_wall_s"] = round(stamps[1] - stamps[0], 3)  # first to last log line of the job
        out.append(row)
    return out


def _log_stamps(path: Path) -> tuple[float, float] | None:
    """(first, last) time of a Hydra job log's ``[YYYY-mm-dd HH:MM:SS,mmm]`` lines, in seconds."""
    import datetime as dt

    if not path.is_file():
        return None
    times = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("[") and len(line) > 24 and line[24] == "]":
            with contextlib.suppress(ValueError):
                times.append(dt.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return (min(times), max(times)) if times else None


def _has_joblib_launcher() -> bool:
    """Is Hydra's joblib launcher installed (looked up, not imported: Hydra stays in bench/cli)?"""
    try:
        return importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is not None
    except ModuleNotFoundError:  # no hydra_plugins namespace at all
        return False


def throughput(embed: Callable[[Sequence[str]], object], texts: Sequence[str]) -> float:
    """Texts per second of one call of ``embed(texts)``."""
    t0 = time.perf_counter()
    embed(texts)
    return len(texts) / (time.perf_counter() - t0)


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


def p3_embedding(texts: Sequence[str], *, repeats: int = 5) -> Ratio:
    from bench.embedders.cache import CachedEmbedder
    from bench.embedders.minilm import MiniLMEmbedder

    inner = MiniLMEmbedder(progress=False)
    inner.embed(["warm up the session"])  # model load is start-up, not throughput
    raw = RawOnnx()
    raw.embed(["warm up the session"])
    ours, base = [], []

    def cold() -> float:
        with tempfile.TemporaryDirectory(prefix="rb-emb-") as tmp:  # an empty cache every time
            return throughput(CachedEmbedder(inner, tmp).embed_documents, texts)

    for i in range(repeats):  # interleaved, alternating which goes first: drift and load swings hit both
        if i % 2 == 0:
            ours.append(cold())
            base.append(throughput(raw.embed, texts))
        else:
            base.append(throughput(raw.embed, texts))
            ours.append(cold())
    value = max(ours) / max(base)
    return Ratio("P3b", f"cold-cache embedding throughput / raw ONNX session ({len(texts)} texts)", value, ">=", 0.9,
                 method=("CachedEmbedder(MiniLMEmbedder) on an empty cache vs a hand-written tokenise+run+pool loop on the same "
                         f"session options, batch 64, length-sorted; best of {repeats} interleaved repeats each"),
                 details={"ours_texts_per_s": max(ours), "raw_texts_per_s": max(base), "all_ours": ours, "all_raw": base})


def locomo_texts(data_dir: Path, n: int) -> list[str] | None:
    path = data_dir / "locomo" / "locomo10.json"
    if not path.is_file():
        return None
    from bench.data.locomo import load_locomo

    turns = load_locomo(path=path, name="locomo").turns()
    step = max(1, len(turns) // n)
    return [t.text for t in turns[::step][:n]]


# ----------------------------------------------------------------------------- P4


def embedded_stores() -> list[str]:
    """The embedded stores (no server to start), approximate ones first: the slowest, as joblib dispatches in order."""
    from bench.backends.catalog import EMBEDDED, capabilities, store_names

    return sorted(store_names(EMBEDDED), key=lambda n: (capabilities(n).exact, n))


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


def p4_adapter(name: str, corpus, tv: np.ndarray, qv: np.ndarray, *, stores_dir: Path, depth: int = SEARCH_DEPTH,
               overrides: dict | None = None) -> Ratio:
    from bench.backends.catalog import load_backend
    from bench.backends.session import INGEST_BATCH, open_session
    from bench.trace import batches, question_filter

    backend = load_backend(name, stores_dir=stores_dir, collection=f"perf_{name}", **(overrides or {}))
    k = min(depth, backend.capabilities.max_k)
    qs = corpus.questions
    wheres = [question_filter(q) for q in qs]
    with open_session(backend, dim=int(tv.shape[1]), fresh=True) as s:
        s.ingest(batches(corpus.turns(), tv, INGEST_BATCH), timeout_s=600)
        a, b = alternate(lambda i: s.timed_search(qv[i], k=k, where=wheres[i])[1],
                         lambda i: s.timed_reference(qv[i], k=k, where=wheres[i])[1], len(qs))
        same = sum(len(s.backend.search(qv[i], k=k, where=wheres[i])) == len(s.backend.reference_query(qv[i], k=k, where=wheres[i])[0])
                   for i in range(min(20, len(qs))))
    value = sum(a) / sum(b)
    return Ratio(f"P4/{name}", f"{name} adapter search / its hand-written reference query on the same client", value, "<=", 1.2,
                 method=(f"{len(qs)} queries (conversation + time filter, k={k}) on {len(tv):,} synthetic memories, adapter search "
                         "and Backend.reference_query alternated query by query (bench.backends.session times the store call "
                         "alone), 10 warm-up pairs discarded; ratio of summed times"),
                 details={"adapter_median_ms": statistics.median(a) / 1e6, "raw_median_ms": statistics.median(b) / 1e6,
                          "queries": len(qs), "k": k, "same_result_sizes_of_20": same})


def p4_all(stores: Sequence[str] | None = None, *, n_memories: int = 6000) -> list[Ratio]:
    """P4 for ``stores`` (default: every configured one); local servers are started, cloud stores skipped with the reason."""
    from bench.backends.catalog import split_runnable
    from bench.backends.servers import started_servers
    from bench.data.synthetic import generate
    from bench.embedders.synthetic import SyntheticEmbedder
    from bench.trace import embed_corpus

    stores, skipped = split_runnable(stores)
    for reason in skipped:
        log.warning("P4 skipped %s", reason)
    corpus = generate(n_memories, questions_per_conversation=30, seed=4)
    tv, qv, _ = embed_corpus(corpus, SyntheticEmbedder())
    out = []
    with tempfile.TemporaryDirectory(prefix="rb-p4-") as tmp, started_servers(stores, Path(tmp)) as servers:
        for name in stores:
            log.info("P4: %s", name)
            try:
                overrides = servers[name].overrides() if name in servers else None
                out.append(p4_adapter(name, corpus, tv, qv, stores_dir=Path(tmp), overrides=overrides))
            except Exception as exc:  # a store that cannot run here is reported, the others still run
                log.error("P4 %s failed: %s", name, exc)
                out.append(Ratio(f"P4/{name}", f"{name} adapter search / its hand-written reference query on the same client",
                                 float("nan"), "<=", 1.2, details={"error": f"{type(exc).__name__}: {exc}"[:300]}))
    return out


# ----------------------------------------------------------------------------- PL (store layout)

LAYOUT_STORES = ("seekdb", "chroma")


def filtered_over_unfiltered(filtered_ns: Sequence[int], unfiltered_ns: Sequence[int]) -> float:
    """p50 of the conversation-filtered query times / p50 of the unfiltered query times (NaN when either is empty)."""
    if not len(filtered_ns) or not len(unfiltered_ns):
        return float("nan")
    return float(np.median(filtered_ns) / np.median(unfiltered_ns))


def pl_layout(name: str, corpus, tv: np.ndarray, qv: np.ndarray, *, stores_dir: Path, k: int = SEARCH_DEPTH,
              overrides: dict | None = None) -> list[Ratio]:
    """One store in both layouts at once (``bench.backends.layout``): the per-conversation layout's query for a question's
    conversation against the shared layout's unfiltered query, alternated query by query; the shared layout's
    conversation-filtered query beside them (information: the layout recallbench measured before)."""
    from bench.backends.catalog import load_backend
    from bench.backends.session import INGEST_BATCH, open_session
    from bench.trace import batches
    from bench.types import Where

    qs = corpus.questions
    conv = [Where(conversation_id=q.conversation_id) for q in qs]
    sessions, ingest = {}, {}
    with contextlib.ExitStack() as stack:
        for layout in ("shared", "per_conversation"):
            b = load_backend(name, stores_dir=stores_dir, collection=f"perf_layout_{layout}", **{**(overrides or {}), "layout": layout})
            s = stack.enter_context(open_session(b, dim=int(tv.shape[1]), fresh=True))
            ing = s.ingest(batches(corpus.turns(), tv, INGEST_BATCH), timeout_s=600)
            sessions[layout] = s
            ingest[layout] = {"add_s": ing.add_seconds, "ready_s": ing.ready_seconds,
                              "collections": getattr(b, "n_collections", 1)}
        kk = min(k, sessions["shared"].backend.capabilities.max_k)
        per, shared = sessions["per_conversation"], sessions["shared"]
        pc, unf = alternate(lambda i: per.timed_search(qv[i], k=kk, where=conv[i])[1],
                            lambda i: shared.timed_search(qv[i], k=kk, where=Where())[1], len(qs))
        shf, unf2 = alternate(lambda i: shared.timed_search(qv[i], k=kk, where=conv[i])[1],
                              lambda i: shared.timed_search(qv[i], k=kk, where=Where())[1], len(qs))
        same = sum(set(per.backend.search(qv[i], k=kk, where=conv[i]).ids) == set(shared.backend.search(qv[i], k=kk, where=conv[i]).ids)
                   for i in range(min(20, len(qs))))
    def ms(ns, q):
        return float(np.percentile(ns, q) / 1e6)

    method = (f"{len(qs)} queries, k={kk}, {len(tv):,} synthetic memories in {ingest['per_conversation']['collections']} conversations; "
              "the store in both layouts at once (bench.backends.layout), per-conversation query (its conversation's collection) "
              "and unfiltered query on the shared collection alternated query by query, 10 warm-up pairs discarded; ratio of p50s")
    details = {"per_conversation_p50_ms": ms(pc, 50), "per_conversation_p99_ms": ms(pc, 99), "unfiltered_p50_ms": ms(unf, 50),
               "unfiltered_p99_ms": ms(unf, 99), "shared_filtered_p50_ms": ms(shf, 50), "shared_filtered_p99_ms": ms(shf, 99),
               "ingest": ingest, "same_ids_as_shared_filtered_of_20": same, "k": kk}
    return [Ratio(f"PL/{name}", f"{name}: per-conversation layout query / unfiltered query on the same store",
                  filtered_over_unfiltered(pc, unf), "<=", 1.3, method=method, details=details),
            Ratio(f"PL/{name}/shared", f"{name}: shared layout conversation-filtered query / unfiltered (the old layout)",
                  filtered_over_unfiltered(shf, unf2), "<=", 1.3, info=True, method="same run, same queries, alternated")]


def pl_all(stores: Sequence[str] = LAYOUT_STORES, *, n_memories: int = 6000, k: int = SEARCH_DEPTH) -> list[Ratio]:
    from bench.data.synthetic import generate
    from bench.embedders.synthetic import SyntheticEmbedder
    from bench.trace import embed_corpus

    corpus = generate(n_memories, questions_per_conversation=30, seed=4)
    tv, qv, _ = embed_corpus(corpus, SyntheticEmbedder())
    out = []
    with tempfile.TemporaryDirectory(prefix="rb-pl-") as tmp:
        for name in stores:
            log.info("PL: %s", name)
            try:
                out += pl_layout(name, corpus, tv, qv, stores_dir=Path(tmp), k=k)
            except Exception as exc:  # a store that cannot run here is reported, the others still run
                log.error("PL %s failed: %s", name, exc)
                out.append(Ratio(f"PL/{name}", f"{name}: per-conversation layout query / unfiltered query on the same store",
                                 float("nan"), "<=", 1.3, details={"error": f"{type(exc).__name__}: {exc}"[:300]}))
    return out


# ----------------------------------------------------------------------------- P6, P7 (lean run vs a minimal script)

REPORT_LIBRARIES = ("numpy", "pandas", "pyarrow.parquet", "hydra", "tiktoken", "matplotlib.pyplot", "scipy.stats")
WARM_RUN = ("dataset=locomo", "backend=exact")  # the default strategies (limit5, threshold, hybrid5, full_context), 17 thresholds


def best_ratio(ours: Sequence[float], base: Sequence[float]) -> float:
    """Best (smallest) of ``ours`` / best of ``base``: each side's least disturbed repeat (NaN when either is empty)."""
    if not len(ours) or not len(base):
        return float("nan")
    return min(ours) / min(base)


def rows_max_diff(summary, minimal_rows: Sequence[dict]) -> float:
    """Largest |difference| between a run's format-A summary and the minimal script's rows over the compared columns
    (inf when the rows or their NaNs do not line up)."""
    from bench.tools.minimal import COLUMNS

    ours = summary[summary["format"] == "A"].reset_index(drop=True) if "format" in summary else summary.reset_index(drop=True)
    if len(ours) != len(minimal_rows) or [str(x) for x in ours["strategy"]] != [r["strategy"] for r in minimal_rows]:
        return float("inf")
    worst = 0.0
    for c in COLUMNS[2:]:
        a = ours[c].to_numpy(dtype=float)
        b = np.array([float(r[c]) for r in minimal_rows])
        if not np.array_equal(np.isnan(a), np.isnan(b)):
            return float("inf")
        both = ~np.isnan(a)
        worst = max(worst, float(np.max(np.abs(a[both] - b[both]), initial=0.0)))
    return worst


def minimal_cmd(locomo: Path, emb, out_csv: Path, encoding: str = "cl100k_base") -> list[str]:
    return [sys.executable, "-m", "bench.tools.minimal", "--locomo", str(locomo), "--model-dir", str(emb.dir), "--encoding", encoding,
            "--query-prefix", emb.query_prefix, "--document-prefix", emb.document_prefix, "--out", str(out_csv)]


def p6_p7(data_dir: Path, *, repeats: int = 3, sweep_repeats: int = 5, extra: Sequence[str] = ()) -> list[Ratio]:
    """P6: the warm exact LoCoMo run (a CLI child process, report included) / the minimal script (a child process), CPU
    seconds, best of interleaved repeats. P7: the run's sweep stage in-process (``bench.sweep.sweep`` + the format side
    table + ``summarise`` over the trace the run cached) / the script's sweep stage on the same vectors."""
    import pandas as pd

    overrides = [*WARM_RUN, *extra]
    real = REPO / "reports" / "cache" / "embeddings"
    corpus, emb = cached_embedder(overrides, real)
    locomo = data_dir / "locomo" / "locomo10.json"
    with temp_cache(real) as (tmp, cache):
        common = [*overrides, f"paths.cache={cache}"]
        first = run_measured(bench_cmd(*common, f"hydra.run.dir={tmp / 'warmup'}", trace_cache=True))  # measures and caches the trace
        if first.returncode != 0:
            err = _failed(first, "warm-up run")
            return [Ratio("P6", "warm exact LoCoMo run / minimal script", float("nan"), "<=", 2.0, details={"error": err}),
                    Ratio("P7", "sweep + summary / minimal script's sweep", float("nan"), "<=", 1.2, details={"error": err})]
        runs, mins, lean, imports = [], [], [], []
        for i in range(repeats):  # interleaved, alternating which goes first
            pair = [(runs, lambda: run_measured(bench_cmd(*common, f"hydra.run.dir={tmp / f'run{i}'}", trace_cache=True))),
                    (mins, lambda: run_measured(minimal_cmd(locomo, emb, tmp / f"min{i}.csv"))),
                    (lean, lambda: run_measured(bench_cmd(*common, f"hydra.run.dir={tmp / f'lean{i}'}", "defer_report=true",
                                                          trace_cache=True))),
                    (imports, lambda: run_measured([sys.executable, "-c", f"import {', '.join(REPORT_LIBRARIES)}"]))]
            for out, fn in pair if i % 2 == 0 else pair[::-1]:
                out.append(fn())
        bad = [p for p in runs + mins + lean + imports if p.returncode != 0]
        import csv

        with open(tmp / "min0.csv", newline="") as f:
            min_rows = [{k: (float(v) if k != "strategy" else v) for k, v in r.items()} for r in csv.DictReader(f)]
        diff = rows_max_diff(pd.read_csv(tmp / "run0" / "summary.csv"), min_rows)
        p7 = _p7(tmp / "warmup", corpus, emb, common, repeats=sweep_repeats)
    cpu_run, cpu_min = [p.cpu_s for p in runs], [p.cpu_s for p in mins]
    value = best_ratio(cpu_run, cpu_min) if not bad and diff <= 1e-9 else float("nan")
    details = {"run_cpu_s": cpu_run, "minimal_cpu_s": cpu_min, "run_wall_s": [p.wall_s for p in runs],
               "minimal_wall_s": [p.wall_s for p in mins], "wall_ratio": best_ratio([p.wall_s for p in runs], [p.wall_s for p in mins]),
               "summary_rows_max_abs_diff": diff, "error": "; ".join(_failed(p, "child") for p in bad)}
    return [Ratio("P6", "warm exact LoCoMo run, report included / minimal numpy+tiktoken script, same cached vectors", value, "<=", 2.0,
                  method=(f"`python -m bench {' '.join(overrides)}` (warm embedding and trace caches, resume=false, report included) "
                          "vs `python -m bench.tools.minimal` on the same embedding cache, child processes, user+system CPU "
                          f"(os.wait4), {repeats} interleaved repeats, best of each; the script's 36 rows must equal the run's "
                          "format-A summary to 1e-9 or the ratio is not reported"), details=details),
            Ratio("P6/deferred", "the same run with defer_report=true (short report; `recallbench report` writes the rest later) "
                  "/ minimal script", best_ratio([p.cpu_s for p in lean], cpu_min) if not bad else float("nan"), "<=", 2.0, info=True,
                  method="as P6, with defer_report=true", details={"run_cpu_s": [p.cpu_s for p in lean]}),
            Ratio("P6/imports", f"importing the libraries a run with its full report needs ({', '.join(REPORT_LIBRARIES)}) / minimal "
                  "script", best_ratio([p.cpu_s for p in imports], cpu_min) if not bad else float("nan"), "<=", 2.0, info=True,
                  method="`python -c 'import ...'`, a child process, CPU; the floor no change to recallbench's own code lowers",
                  details={"cpu_s": [p.cpu_s for p in imports], "minimal_cpu_s": cpu_min}),
            p7]


def _p7(run_dir: Path, corpus, emb, overrides: Sequence[str], *, repeats: int) -> Ratio:
    from bench import formats as F
    from bench import tokens
    from bench.cli.config import build_strategies
    from bench.strategies.spec import threshold_grid
    from bench.sweep import format_tokens_table, summarise, sweep
    from bench.tools import minimal as M
    from bench.trace import Trace

    cfg = compose(overrides)
    specs = build_strategies(cfg.strategy)
    grid = threshold_grid(cfg.thresholds.start, cfg.thresholds.stop, cfg.thresholds.step)
    trace = Trace.load(run_dir / "trace")
    table = F.token_table(corpus.turns(), lambda texts: tokens.count_tokens_many(texts, cfg.tokens.encoding), F.FORMATS)
    counts = dict(table.memory["A"])
    turns = corpus.turns()
    tv = M.vectors_of(M.load_vectors(emb.dir), [t.text for t in turns], emb.document_prefix)
    qv = M.vectors_of(M.load_vectors(emb.dir), [q.text for q in corpus.questions], emb.query_prefix)
    ranked = M.rank(corpus, tv, qv)
    enc = tokens.get_encoding(cfg.tokens.encoding)
    lines = [f"{t.role}: {t.text}" for t in turns]
    alone, joined, safe = M.price_rows(enc, lines)
    keys = np.array([t.key for t in turns], dtype=object)

    def ours() -> dict:
        t = [time.process_time()]
        rows = sweep(trace, corpus, specs, grid, counts, embedder=emb.model_id, formats=("A",), format_tokens=table)
        t.append(time.process_time())
        format_tokens_table(trace, corpus, specs, counts, table, embedder=emb.model_id)
        t.append(time.process_time())
        summarise(rows)
        t.append(time.process_time())
        return {"sweep": t[1] - t[0], "format_table": t[2] - t[1], "summarise": t[3] - t[2], "total": t[3] - t[0]}

    def theirs() -> float:
        t0 = time.process_time()
        M.sweep(ranked, keys, alone, joined, safe, enc, lines)
        return time.process_time() - t0

    a, b = [], []
    for i in range(repeats):
        if i % 2 == 0:
            a.append(ours())
            b.append(theirs())
        else:
            b.append(theirs())
            a.append(ours())
    best = min(a, key=lambda x: x["total"])
    return Ratio("P7", "the run's sweep stage (sweep + format side table + summarise) / the minimal script's sweep stage",
                 best_ratio([x["total"] for x in a], b), "<=", 1.2,
                 method=("in-process CPU time (time.process_time) over the trace the warm run cached: bench.sweep.sweep (format A, "
                         "the default strategies, 17 thresholds) + format_tokens_table (the B/C side table run_job computes) + "
                         "summarise, vs bench.tools.minimal.sweep over its own ranking of the same vectors; "
                         f"{repeats} interleaved repeats, best of each"),
                 details={"ours_best_s": best, "minimal_s": b, "ours_totals_s": [x["total"] for x in a]})


# ----------------------------------------------------------------------------- PE (embedding memory on long texts)

_WORDS = ("the memory agent recalls what user said about work family travel plans music books weekend hiking city "
          "garden dinner project deadline meeting doctor school friend birthday movie coffee morning evening because "
          "really think maybe later yesterday tomorrow important remember favourite new old small large quiet").split()


def long_texts(n: int, *, long_share: float = 0.35, seed: int = 0) -> list[str]:
    """``n`` synthetic chat turns, ``long_share`` of them 300-600 words (well past MiniLM's 256 tokens), the rest 5-40 words,
    shuffled (a LongMemEval-sized haystack is 23,614 turns, 35 % longer than 256 tokens)."""
    rng = np.random.default_rng(seed)
    n_long = int(round(n * long_share))
    sizes = np.concatenate([rng.integers(300, 601, n_long), rng.integers(5, 41, n - n_long)])
    rng.shuffle(sizes)
    words = np.array(_WORDS)
    return [" ".join(words[rng.integers(0, len(words), k)]) + "." for k in sizes.tolist()]


def embed_child(which: str, n: int) -> dict:
    """Run in a child process: embed ``long_texts(n)`` with ``which`` ("ours": ``CachedEmbedder(MiniLMEmbedder)`` through
    ``bench.trace.embed_texts`` on an empty cache, as a run does; "raw": ``RawOnnx``); texts/s and this process's VmHWM."""
    texts = long_texts(n)
    if which == "ours":
        from bench.embedders.cache import CachedEmbedder
        from bench.embedders.minilm import MiniLMEmbedder
        from bench.trace import embed_texts

        inner = MiniLMEmbedder(progress=False)
        inner.embed(["warm up the session"])
        tmp = tempfile.TemporaryDirectory(prefix="rb-pe-")
        emb = CachedEmbedder(inner, tmp.name)

        def fn(x):
            return embed_texts(emb, x, side="documents")
    elif which == "raw":
        raw = RawOnnx()
        raw.embed(["warm up the session"])
        fn = raw.embed
    else:
        raise ValueError(f"embed_child: unknown side {which!r} (ours or raw)")
    t0 = time.perf_counter()
    fn(texts)
    elapsed = time.perf_counter() - t0
    return {"texts": n, "texts_per_s": n / elapsed, "seconds": elapsed, "vm_hwm_bytes": vm_hwm_bytes(os.getpid())}


def _embed_in_child(which: str, n: int) -> dict:
    code = f"import json; from bench.tools.perf import embed_child; print(json.dumps(embed_child({which!r}, {int(n)})))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=7200)
    if proc.returncode != 0:
        raise RuntimeError(f"embedding child ({which}) exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pe_embedding_memory(n: int = 23_614) -> list[Ratio]:
    """Peak RSS of our embedding path on long turns, and its throughput against the raw session, a child process each."""
    ours, raw = _embed_in_child("ours", n), _embed_in_child("raw", n)
    method = (f"{n:,} synthetic turns (35 % of 300-600 words, past MiniLM's 256 tokens; bench.tools.perf.long_texts), one child "
              "process per side: CachedEmbedder(MiniLMEmbedder) through bench.trace.embed_texts on an empty cache vs the "
              "hand-written RawOnnx loop; peak RSS = the child's VmHWM at the end")
    details = {"ours": ours, "raw": raw}
    return [Ratio("PE/rss", "peak RSS embedding LongMemEval-sized long turns (MiniLM, our path)", ours["vm_hwm_bytes"] / 1e9, "<=", 1.5,
                  "GB", method=method, details=details),
            Ratio("PE/throughput", "our embedding throughput / raw ONNX session on the same long turns",
                  ours["texts_per_s"] / raw["texts_per_s"], ">=", 0.9, method=method, details=details),
            Ratio("PE/raw_rss", "peak RSS of the raw ONNX session on the same turns", raw["vm_hwm_bytes"] / 1e9, "<=", 1.5, "GB",
                  method=method, details=details, info=True)]


# ----------------------------------------------------------------------------- P5


def p5_peak_rss(n_memories: int = 100_000, *, backend: str = "exact") -> Ratio:
    with temp_cache(None) as (tmp, cache):
        proc = run_measured(bench_cmd("dataset=synthetic", f"dataset.n_memories={n_memories}", "embedder=synthetic",
                                      f"backend={backend}", f"paths.cache={cache}", f"hydra.run.dir={tmp / 'run'}"), sample_s=0.05)
    peak = max(proc.hwm_bytes, proc.tree_peak_bytes) / 1e9
    return Ratio("P5" if backend == "exact" else f"P5/{backend}", f"peak RSS, {n_memories:,} memories end to end ({backend} store)",
                 peak if proc.returncode == 0 else float("nan"), "<", 4.0, "GB",
                 method=("`python -m bench dataset=synthetic embedder=synthetic` in a subprocess (trace, sweep, report); max of "
                         "the process's VmHWM (its kernel peak RSS since exec) and the summed RSS of its process tree, sampled every "
                         "0.05 s from /proc; not wait4's ru_maxrss, which keeps the launching process's RSS from before exec"),
                 details={"vm_hwm_gb": proc.hwm_bytes / 1e9, "wait4_maxrss_gb": proc.maxrss_bytes / 1e9, "tree_peak_gb": proc.tree_peak_bytes / 1e9, "wall_s": proc.wall_s,
                          "error": "" if proc.returncode == 0 else _failed(proc, "run")})


# ----------------------------------------------------------------------------- PC


def pc_coverage() -> list[Ratio]:
    """PC: the split-half coverage of the printed 95 % intervals on the warm exact LoCoMo run's rows."""
    import pandas as pd

    from bench.analysis.holdout import split_half
    from bench.analysis.recommend import RecommendConfig

    real = REPO / "reports" / "cache" / "embeddings"
    warm_embeddings(list(WARM_RUN), real)
    with temp_cache(real) as (tmp, cache):
        proc = run_measured(bench_cmd(*WARM_RUN, f"paths.cache={cache}", f"hydra.run.dir={tmp / 'run'}", "defer_report=true"))
        if proc.returncode != 0:
            return [Ratio("PC", "printed 95 % intervals cover held-out halves of LoCoMo", float("nan"), ">=", 90.0, "%",
                          details={"error": _failed(proc, "LoCoMo run")})]
        rows = pd.read_parquet(tmp / "run" / "questions.parquet")
    t0 = time.perf_counter()
    cov = split_half(rows)
    seconds = time.perf_counter() - t0
    old = split_half(rows, RecommendConfig.defaults(ci_method="percentile"))
    chosen = cov.trials.groupby(["strategy", "threshold"], dropna=False).size()
    details = {"trials": cov.n_trials, "metric": cov.metric, "misses_below": int((cov.trials["held_out"] < cov.trials["pred_lo"]).sum()),
               "misses_above": int((cov.trials["held_out"] > cov.trials["pred_hi"]).sum()),
               "mean_pred_width": float((cov.trials["pred_hi"] - cov.trials["pred_lo"]).mean()),
               "chosen": {f"{k[0]} @ {k[1]}": int(v) for k, v in chosen.items()}, "split_half_seconds": seconds}
    method = (f"`python -m bench {' '.join(WARM_RUN)}` (warm embedding cache) -> questions.parquet; bench.analysis.holdout.split_half: "
              f"{cov.n_trials} trials (every half A of 5 of the 10 conversations), recommend on A, read the best point's "
              f"{cov.metric} interval, score B at the same configuration and threshold; share of trials inside")
    return [Ratio("PC", "printed 95 % prediction intervals (a new corpus of 5 conversations) cover held-out halves of LoCoMo",
                  100 * cov.pred, ">=", 90.0, "%", method=method, details=details),
            Ratio("PC/ci", "the same trials against the 95 % CI about the mean of conversations like these (t)", 100 * cov.ci,
                  ">=", 90.0, "%", method=method + "; the CI is about the population mean, not a finite new half", info=True),
            Ratio("PC/bootstrap", "the same trials against the interval printed before issue 23 (percentile cluster bootstrap)",
                  100 * old.ci, ">=", 90.0, "%", method=method + "; recommend.ci_method=percentile", info=True)]


# ----------------------------------------------------------------------------- main


# ----------------------------------------------------------------------------- PS1-PS4 (issue 29: a full-size corpus)
# Each takes the dataset by name (``--ps-dataset``; configs/dataset/<name>.yaml), so the same figures run on LoCoMo now and
# on dataset=longmemeval_s once it is there.

PS_STRATEGIES = MAIN_STRATEGIES


def ps_overrides(dataset: str) -> list[str]:
    return [f"dataset={dataset}", "embedder=minilm", "backend=exact", f"strategy={PS_STRATEGIES}"]


def distinct_texts(dataset: str) -> list[str]:
    """Every distinct model input of a run on ``dataset`` with MiniLM (a symmetric model: turns and questions share keys)."""
    from bench.cli.config import build

    corpus = build(compose(ps_overrides(dataset)).dataset)
    return list(dict.fromkeys([t.text for t in corpus.turns()] + [q.text for q in corpus.questions]))


def raw_distinct_child(dataset: str) -> dict:
    """Run in a child process: embed the distinct texts of ``dataset`` with the raw ONNX session (``RawOnnx``, all cores,
    the embedder's batches); seconds of the embedding alone (loading the corpus and the model excluded)."""
    texts = distinct_texts(dataset)
    raw = RawOnnx()
    raw.embed(["warm up the session"])
    t0 = time.perf_counter()
    for lo in range(0, len(texts), 16_384):  # bounded working memory, as the embedder's parts
        raw.embed(texts[lo : lo + 16_384])
    elapsed = time.perf_counter() - t0
    return {"texts": len(texts), "seconds": elapsed, "texts_per_s": len(texts) / elapsed, "vm_hwm_bytes": vm_hwm_bytes(os.getpid())}


def ps1_ps3(dataset: str, *, timeout_s: float = 6 * 3600.0) -> list[Ratio]:
    """PS1: a cold run (empty embedding and trace caches, report included) / the raw ONNX session embedding the distinct
    texts alone, both at all cores; PS2: the same run again with every cache warm (<= 90 s); PS3: the cold run's peak RSS."""
    with temp_cache(None) as (tmp, cache):
        cmd = [*ps_overrides(dataset), f"paths.cache={cache}"]
        cold = run_measured(bench_cmd(*cmd, f"hydra.run.dir={tmp / 'cold'}", trace_cache=True), timeout_s=timeout_s)
        warm = run_measured(bench_cmd(*cmd, f"hydra.run.dir={tmp / 'warm'}", trace_cache=True), timeout_s=timeout_s) \
            if cold.returncode == 0 else cold
        code = f"import json; from bench.tools.perf import raw_distinct_child; print(json.dumps(raw_distinct_child({dataset!r})))"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        raw = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr.strip()[-300:]}
        raw["cpu_s_with_loading"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        log_lines = _cache_lines(tmp / "cold")
    err = "" if cold.returncode == 0 else _failed(cold, "cold run")
    peak = max(cold.hwm_bytes, cold.tree_peak_bytes) / 1e9
    cmd_text = f"python -m bench {' '.join(bench_cmd(*ps_overrides(dataset), trace_cache=True)[3:])} paths.cache=<empty>"
    return [
        Ratio("PS1", f"cold {dataset} run (MiniLM, exact, report included) / raw ONNX session embedding its distinct texts alone",
              cold.wall_s / raw["seconds"] if not err and "seconds" in raw else float("nan"), "<=", 1.15,
              method=(f"`{cmd_text}` in a child process (wall) vs `bench.tools.perf.raw_distinct_child('{dataset}')` in another "
                      "(RawOnnx over every distinct turn and question text, all cores, loading excluded)"),
              details={"cold_wall_s": cold.wall_s, "cold_cpu_s": cold.cpu_s, "raw": raw, "error": err, "cache_log": log_lines}),
        Ratio("PS1/cpu", "the same, CPU seconds (the raw child's include loading the corpus and the model)",
              cold.cpu_s / raw["cpu_s_with_loading"] if not err and raw.get("cpu_s_with_loading") else float("nan"), "<=", 1.15,
              info=True, method="user+system CPU of each child (os.wait4 / RUSAGE_CHILDREN): less sensitive to a shared machine's load",
              details={"cold_cpu_s": cold.cpu_s, "raw_cpu_s": raw.get("cpu_s_with_loading")}),
        Ratio("PS2", f"warm full {dataset} rerun (every cache hot, exact store, default strategies, report included)",
              warm.wall_s if warm.returncode == 0 else float("nan"), "<=", 90.0, "s",
              method="the PS1 command again on the cache the cold run filled (embeddings and trace hot; resume=false), wall",
              details={"wall_s": warm.wall_s, "cpu_s": warm.cpu_s, "error": "" if warm.returncode == 0 else _failed(warm, "warm run")}),
        Ratio("PS3", f"peak RSS of the cold {dataset} run", peak if not err else float("nan"), "<=", 3.0, "GB",
              method="max of the cold run's VmHWM and its process tree's summed RSS, sampled from /proc every 0.2 s",
              details={"vm_hwm_gb": cold.hwm_bytes / 1e9, "tree_peak_gb": cold.tree_peak_bytes / 1e9}),
    ]


def _cache_lines(run_dir: Path) -> list[str]:
    """The embedding cache's progress and summary lines of a run's log (rate and ETA as the run printed them)."""
    path = run_dir / "cli.log"
    if not path.is_file():
        return []
    return [ln.strip()[-200:] for ln in path.read_text(errors="replace").splitlines()
            if "embedding cache" in ln or "bench.progress" in ln and "embed" in ln][-12:]


def synthetic_trace(n_questions: int = 500, n_candidates: int = 500, *, seed: int = 0):
    """(corpus, trace) sized like LongMemEval_S: one conversation per question (its haystack) of ``n_candidates`` turns, every
    turn a candidate, scores sorted best first, 1-3 gold turns, an answer from a gold turn's words; no asked_at."""
    import pandas as pd

    from bench.trace import TRACE_COLUMNS, Trace
    from bench.types import Conversation, Corpus, Question, Turn

    rng = np.random.default_rng(seed)
    words = np.array(_WORDS)
    convs, questions, rows = [], [], []
    for qi in range(n_questions):
        cid = f"u{qi}"
        gold = sorted(rng.choice(n_candidates, size=int(rng.integers(1, 4)), replace=False).tolist())
        answer = f"item{qi} model{qi % 97}"  # a specific answer, said in the first gold turn (LongMemEval's answers are specific)
        turns = tuple(Turn(cid, f"t{j}", "user" if j % 2 == 0 else "assistant", "user" if j % 2 == 0 else "assistant",
                           " ".join(words[rng.integers(0, len(words), int(rng.integers(5, 40)))]) + (f" {answer}." if j == gold[0] else "."),
                           None, j, j // 10)
                      for j in range(n_candidates))
        adversarial = bool(rng.random() < 0.06)
        questions.append(Question(f"q{qi}", cid, f"what did I say about {answer}?", None, tuple(f"t{g}" for g in gold),
                                  "synthetic", adversarial, answer))
        convs.append(Conversation(cid, turns))
        order = rng.permutation(n_candidates)
        scores = np.sort(rng.uniform(-0.1, 0.95, n_candidates))[::-1]
        rows.append({"question_id": f"q{qi}", "conversation_id": cid, "latency_ns": 1000,
                     "hit_ids": np.array([turns[j].key for j in order], dtype=object), "hit_scores": scores,
                     "exact_scores": scores, "gold_ids": [turns[g].key for g in gold], "gold_exact_ranks": [0] * len(gold)})
    corpus = Corpus("synthetic_ps4", tuple(convs), tuple(questions), source="bench.tools.perf.synthetic_trace")
    trace = Trace(pd.DataFrame(rows, columns=TRACE_COLUMNS), {"dataset": corpus.name, "backend": "exact", "embedder": "synthetic",
                                                               "layout": "per_conversation", "roles": None})
    return corpus, trace


def sweep_pair(corpus, trace, *, repeats: int = 3, encoding: str = "cl100k_base") -> dict:
    """CPU seconds of our sweep stage (``sweep`` + ``format_tokens_table`` + ``summarise``, as ``run_job`` calls them) and of
    ``bench.tools.minimal_sweep`` (``rows`` + ``summary``) on one trace, best of interleaved repeats, and the largest difference
    between their per-question rows (format A)."""
    from bench import formats as F
    from bench import tokens
    from bench.cli.config import build_strategies
    from bench.strategies.spec import threshold_grid
    from bench.sweep import format_tokens_table, summarise, sweep
    from bench.tools import minimal_sweep as M

    cfg = compose(["dataset=locomo", f"strategy={PS_STRATEGIES}"])  # the default strategies and grid; the corpus is given
    specs = build_strategies(cfg.strategy)
    grid = threshold_grid(cfg.thresholds.start, cfg.thresholds.stop, cfg.thresholds.step)
    table = F.token_table(corpus.turns(), lambda texts: tokens.count_tokens_many(texts, encoding), F.FORMATS)
    counts = dict(table.memory["A"])
    inp = M.inputs_from(corpus, trace, table)

    def ours():
        t0 = time.process_time()
        shared: dict = {}
        rows = sweep(trace, corpus, specs, grid, counts, embedder="e", formats=("A",), format_tokens=table, shared=shared)
        format_tokens_table(trace, corpus, specs, counts, table, embedder="e", shared=shared)
        summarise(rows)
        return time.process_time() - t0, rows

    def theirs():
        t0 = time.process_time()
        out = M.rows(inp, thresholds=tuple(float(t) for t in grid))
        M.summary(out, inp.adversarial)
        return time.process_time() - t0, out

    a, b = [], []
    for i in range(repeats):
        for fn, acc in ((ours, a), (theirs, b)) if i % 2 == 0 else ((theirs, b), (ours, a)):
            acc.append(fn())
    diff = rows_diff(a[0][1], b[0][1], [q.question_id for q in corpus.questions], list(trace.table["question_id"]))
    return {"ours_s": [x[0] for x in a], "minimal_s": [x[0] for x in b], "rows_max_abs_diff": diff,
            "questions": len(trace.table), "rows": len(a[0][1])}


def rows_diff(ours, minimal: dict, corpus_order: list[str], trace_order: list[str]) -> float:
    """Largest |difference| between our format-A per-question rows and the minimal script's over n_selected, n_correct, n_gold,
    precision, recall, f1, tokens_injected, tokens_full (inf when the rows or their NaNs do not line up)."""
    ours = ours[ours["format"] == "A"] if "format" in ours else ours
    if len(ours) != len(minimal["q"]) or [str(x) for x in ours["strategy"]] != [str(x) for x in minimal["strategy"]]:
        return float("inf")
    if list(ours["question_id"]) != [trace_order[i] for i in minimal["q"]]:
        return float("inf")
    worst = 0.0
    for c in ("n_selected", "n_correct", "n_gold", "precision", "recall", "f1", "tokens_injected", "tokens_full"):
        x, y = ours[c].to_numpy(dtype=float), np.asarray(minimal[c], dtype=float)
        if not np.array_equal(np.isnan(x), np.isnan(y)):
            return float("inf")
        ok = ~np.isnan(x)
        worst = max(worst, float(np.max(np.abs(x[ok] - y[ok]), initial=0.0)))
    return worst


def ps4_sweep(dataset: str, *, repeats: int = 3, synthetic: tuple[int, int] | None = (500, 500)) -> list[Ratio]:
    """PS4: our sweep stage / the minimal numpy script on one trace of ``dataset`` (a warm exact run's, embeddings from the
    real cache) and on a synthetic LongMemEval_S-sized trace; the rows must agree to 1e-9 or the ratio is not reported."""
    from bench.cli.config import build
    from bench.trace import Trace

    out = []
    method = ("in-process CPU (time.process_time): bench.sweep.sweep (format A, default strategies, 17 thresholds) + "
              "format_tokens_table + summarise with one shared preparation, as run_job calls them, vs bench.tools.minimal_sweep "
              f"rows + summary on the same trace and token pieces; best of {repeats} interleaved repeats each; per-question rows "
              "must agree to 1e-9")
    with temp_cache(REPO / "reports" / "cache" / "embeddings") as (tmp, cache):
        proc = run_measured(bench_cmd(*ps_overrides(dataset), f"paths.cache={cache}", f"hydra.run.dir={tmp / 'run'}", trace_cache=True))
        if proc.returncode != 0:
            out.append(Ratio("PS4", f"sweep stage / minimal numpy script ({dataset} trace)", float("nan"), "<=", 2.0,
                             method=method, details={"error": _failed(proc, "run")}))
        else:
            corpus = build(compose(ps_overrides(dataset)).dataset)
            got = sweep_pair(corpus, Trace.load(tmp / "run" / "trace"), repeats=repeats)
            out.append(_ps4_ratio("PS4", f"sweep + format table + summarise / minimal numpy script ({dataset} trace, "
                                  f"{got['questions']:,} questions)", got, method))
    if synthetic:
        corpus, trace = synthetic_trace(*synthetic)
        got = sweep_pair(corpus, trace, repeats=repeats)
        out.append(_ps4_ratio("PS4/synthetic", f"the same on a synthetic LongMemEval_S-sized trace ({synthetic[0]:,} questions x "
                              f"{synthetic[1]:,} candidates)", got, method + "; bench.tools.perf.synthetic_trace"))
    return out


def _ps4_ratio(key: str, what: str, got: dict, method: str) -> Ratio:
    value = best_ratio(got["ours_s"], got["minimal_s"]) if got["rows_max_abs_diff"] <= 1e-9 else float("nan")
    return Ratio(key, what, value, "<=", 2.0, method=method, details=got)


PARTS = ("P1", "P2", "P3", "P4", "P5", "PL", "P6", "P7", "PE", "PC", "PS1", "PS2", "PS3", "PS4")
SUBPARTS = {"P3A": "P3", "P3B": "P3"}  # --only P3a / P3b runs one half of P3
DEFAULT_PARTS = ("P1", "P2", "P3", "P4", "P5", "PL", "P6", "P7", "PE", "PC", "PS4")  # PS1-PS3 run a full cold corpus: --only


def write_results(results: Sequence[Ratio], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(r), "passed": r.passed} for r in results]
    write_atomic(out / "perfbench.json", lambda p: p.write_text(json.dumps(rows, indent=2, default=str)))
    lines = ["# make bench", "", "Ratios measured within one run (the machine is shared: absolute times drift).", "", "```",
             *(r.line() for r in results), "```", ""]
    for r in results:
        lines += [f"- **{r.key}**: {r.method}", f"  details: `{json.dumps(r.details, default=str)}`"]
    write_atomic(out / "perfbench.md", lambda p: p.write_text("\n".join(lines) + "\n"))


def main(argv: list[str] | None = None) -> int:
    ap = parser("bench", __doc__.splitlines()[0].split(": ", 1)[-1],
                examples=["recallbench bench                 # every part (P1-P7, PL, PE, PC)",
                          "recallbench bench --only PC       # split-half coverage of the printed intervals (LoCoMo)",
                          "recallbench bench --only P6,P7  # warm LoCoMo run vs the minimal script",
                          "recallbench bench --only P3a      # one part",
                          "recallbench bench --only P4 --p4-stores exact,sqlite_vec"])
    ap.add_argument("--only", default=",".join(DEFAULT_PARTS),
                    help="comma-separated subset of P1,P2,P3 (or P3a, P3b),P4,P5,PL,P6,P7,PE,PC,PS1,PS2,PS3,PS4 (PS1-PS3: a cold run of "
                         "--ps-dataset, hours at LongMemEval_S size; not in the default)")
    ap.add_argument("--ps-dataset", default="locomo", help="dataset of PS1-PS4 (configs/dataset/<name>.yaml), e.g. longmemeval_s")
    ap.add_argument("--ps4-repeats", type=int, default=3, help="interleaved sweep-stage pairs of PS4 (best of each)")
    ap.add_argument("--ps4-synthetic", default="500x500", help="questions x candidates of PS4's synthetic trace ('' to skip)")
    ap.add_argument("--p1-backend", default=None, help="store of the P1 runs (default: the config's default store)")
    ap.add_argument("--p1-strategies", default="all", help="'all' (every configs/strategy/*.yaml) or a Hydra list")
    ap.add_argument("--p1-repeats", type=int, default=1, help="interleaved warm 17-vs-1 pairs in P1 (best of each)")
    ap.add_argument("--p3-stores", default=None, help="stores of the P3a multirun (default: every embedded store)")
    ap.add_argument("--n-jobs", type=int, default=2, help="joblib launcher jobs for P3a (needs hydra-joblib-launcher)")
    ap.add_argument("--p4-stores", default=None,
                    help="stores of P4 (default: all; local servers are started here, cloud stores skipped with the reason)")
    ap.add_argument("--pl-stores", default=",".join(LAYOUT_STORES), help="stores of PL (per-conversation layout / unfiltered)")
    ap.add_argument("--pl-k", type=int, default=SEARCH_DEPTH, help="k of the PL queries")
    ap.add_argument("--p5-backends", default="exact", help="stores of the 100k end-to-end run(s), e.g. exact,seekdb")
    ap.add_argument("--p5-memories", type=int, default=100_000)
    ap.add_argument("--embed-texts", type=int, default=600, help="texts of the P3b throughput comparison (x5 each way)")
    ap.add_argument("--p6-repeats", type=int, default=3, help="interleaved run / minimal script pairs of P6 (best of each)")
    ap.add_argument("--p7-repeats", type=int, default=5, help="interleaved sweep-stage pairs of P7 (best of each)")
    ap.add_argument("--pe-texts", type=int, default=23_614, help="synthetic long turns of PE (LongMemEval-sized: 23,614)")
    ap.add_argument("--out", default=str(reports_dir("runs", "perfbench")), help="default reports/runs/perfbench")
    args = ap.parse_args(argv)
    setup_logging()
    only = {p.strip().upper() for p in args.only.split(",") if p.strip()}
    unknown = only - set(PARTS) - set(SUBPARTS)
    if unknown:
        ap.error(f"--only: unknown part(s) {sorted(unknown)} (known: {', '.join(PARTS)})")
    data_dir = Path(os.environ.get("BENCH_DATA_DIR", work_dir() / "datasets")).resolve()  # the rule of paths.datasets
    has_locomo = (data_dir / "locomo" / "locomo10.json").is_file()
    results: list[Ratio] = []
    notes: list[str] = [f"load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores"]
    if "P1" in only:
        strategies = all_strategies() if args.p1_strategies == "all" else args.p1_strategies
        results.append(p1_threshold_sweep(backend=args.p1_backend, strategies=strategies, data=[], repeats=args.p1_repeats))
    if "P2" in only:
        results += p2_harness()
    if "P3" in only or "P3A" in only:
        if has_locomo:
            p3 = [s for s in args.p3_stores.split(",") if s] if args.p3_stores else embedded_stores()
            results += p3_locomo_sweep(stores=p3, n_jobs=args.n_jobs, data=[])
        else:
            notes.append(f"P3a not measured: no LoCoMo under {data_dir} (set BENCH_DATA_DIR)")
    if "P3" in only or "P3B" in only:
        texts = locomo_texts(data_dir, args.embed_texts) if has_locomo else None
        if texts is None:
            from bench.data.synthetic import generate

            texts = [t.text for t in generate(args.embed_texts).turns()]
            notes.append("P3b ran on synthetic texts (no LoCoMo found)")
        results.append(p3_embedding(texts))
    if "P4" in only:
        results += p4_all([s for s in args.p4_stores.split(",") if s] if args.p4_stores else None)
    if "PL" in only:
        results += pl_all([s for s in args.pl_stores.split(",") if s], k=args.pl_k)
    if "P6" in only or "P7" in only:
        if has_locomo:
            results += [r for r in p6_p7(data_dir, repeats=args.p6_repeats, sweep_repeats=args.p7_repeats) if r.key.split("/")[0] in only]
        else:
            notes.append(f"P6/P7 not measured: no LoCoMo under {data_dir} (set BENCH_DATA_DIR)")
    if "PE" in only:
        results += pe_embedding_memory(args.pe_texts)
    if "PC" in only:
        if has_locomo:
            results += pc_coverage()
        else:
            notes.append(f"PC not measured: no LoCoMo under {data_dir} (set BENCH_DATA_DIR)")
    if only & {"PS1", "PS2", "PS3"}:
        results += [r for r in ps1_ps3(args.ps_dataset) if r.key.split("/")[0] in only]
    if "PS4" in only:
        syn = tuple(int(x) for x in args.ps4_synthetic.lower().split("x")) if args.ps4_synthetic else None
        results += ps4_sweep(args.ps_dataset, repeats=args.ps4_repeats, synthetic=syn)
    if "P5" in only:
        for b in [s for s in args.p5_backends.split(",") if s]:
            results.append(p5_peak_rss(args.p5_memories, backend=b))
    print("\nmake bench: ratios measured within this run (targets from issues 7, 17 and 23)\n")
    for r in results:
        print(r.line())
        print(f"{'':<16}method: {r.method}")
        print(f"{'':<16}details: {json.dumps(r.details, default=str)}")
    notes.append(f"load average at end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for n in notes:
        print(f"note: {n}")
    write_results(results, Path(args.out))
    print(f"\nwritten: {Path(args.out) / 'perfbench.md'}")
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(entry(main))
