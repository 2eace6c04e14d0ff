"""P6: a warm exact LoCoMo run against a minimal script that computes the same rows.

Times: CPU seconds of a warm exact LoCoMo run, report included (``python -m bench dataset=locomo backend=exact``, warm
embedding and trace caches, a child process).
Reference: ``bench.tools.minimal`` (numpy + tiktoken, ~150 lines) computing the same 36 summary rows from the same cached
vectors (a child process); interleaved repeats, best of each. The rows must agree to 1e-9, else the ratio is not
reported.
Target: <= 2.

Printed beside it, as information: P6/deferred, the same run with ``defer_report=true``, and P6/imports, a child process
that only imports the libraries a run with its full report needs (``REPORT_LIBRARIES``), both over the same minimal
script's CPU. P7 (``bench.tools.perf.p7``) is measured on the trace this figure's warm-up run caches: ``--only P7`` runs
this module and keeps P7 alone.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.tools.perf.common import (
    REPO,
    WARM_RUN,
    Ratio,
    _failed,
    bench_cmd,
    best_ratio,
    cached_embedder,
    run_measured,
    temp_cache,
)
from bench.tools.perf.p7 import p7_sweep_stage


REPORT_LIBRARIES = ("numpy", "pandas", "pyarrow.parquet", "hydra", "tiktoken", "matplotlib.pyplot", "scipy.stats")


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
    seconds, best of interleaved repeats. P7: the run's sweep stage in-process (``bench.selection.sweep.sweep`` + the format side
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
        p7 = p7_sweep_stage(tmp / "warmup", corpus, emb, common, repeats=sweep_repeats)
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


def run(args, ctx) -> list[Ratio]:
    """P6 and P7 (the caller keeps the ones asked for)."""
    if not ctx.has_locomo:
        ctx.notes.append(f"P6/P7 not measured: no LoCoMo under {ctx.data_dir} (set BENCH_DATA_DIR)")
        return []
    return p6_p7(ctx.data_dir, repeats=args.p6_repeats, sweep_repeats=args.p7_repeats)
