"""P5: peak memory of the whole pipeline at 100,000 memories.

Measures: the peak RSS of the whole pipeline (CLI subprocess, ``dataset=synthetic`` at 100,000 memories,
``embedder=synthetic``): the process's VmHWM and the summed RSS of its whole process tree (store servers included),
sampled from /proc (``common.run_measured``). Not ``os.wait4``'s ru_maxrss: Linux keeps it across exec, so it includes
this launcher's own RSS at fork time.
Reference: none: a budget in GB.
Target: < 4 GB.
"""

from __future__ import annotations

from bench.tools.perf.common import Ratio, _failed, bench_cmd, run_measured, temp_cache


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


def run(args, ctx) -> list[Ratio]:
    return [p5_peak_rss(args.p5_memories, backend=b) for b in [s for s in args.p5_backends.split(",") if s]]
