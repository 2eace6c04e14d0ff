"""P1: does the threshold grid cost more than one threshold?

Times: the wall time of a job (``bench.pipeline.run`` + its report) with the 17-threshold grid; all strategies, the
default store, warm embedding cache, fresh temporary store/trace/job caches.
Reference: the same job with one threshold.
Target: <= 1.1 (thresholds are post-processing).

Timed by pieces so that load swings on a shared machine do not decide it: one cold job measures the trace (the store,
queried once per role set), then warm jobs reusing that trace time the post-processing of 17 vs 1 threshold,
interleaved, best of each: (trace + post 17) / (trace + post 1).
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

from bench.tools.perf.common import CONFIGS, REPO, Ratio, compose, temp_cache, warm_embeddings


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
                 method=("in-process `bench.pipeline.run` + report: one cold single-threshold job measures the trace (store "
                         "queried once per role set; trace cost = cold job - warm single job), then warm jobs reusing that "
                         f"trace for 17 thresholds (0.10..0.90 step 0.05) and 1 threshold (0.50), interleaved x{repeats}, "
                         "best of each; ratio = (trace + warm 17) / (trace + warm 1)"),
                 details={"trace_s": trace_s, "cold_single_job_s": cold, "warm_grid17_s": r17, "warm_single_s": r1,
                          "cpu_grid17_s": min(c for _, c in rest["grid17"]), "cpu_single_s": min(c for _, c in rest["single"]),
                          "traces": len(metas), "store_search_s": sum(m.get("store_search_seconds") or 0 for m in metas),
                          "strategies": strategies, "backend": backend or "config default", "texts_embedded_to_warm": warmed})


def run(args, ctx) -> list[Ratio]:
    strategies = all_strategies() if args.p1_strategies == "all" else args.p1_strategies
    return [p1_threshold_sweep(backend=args.p1_backend, strategies=strategies, data=[], repeats=args.p1_repeats)]
