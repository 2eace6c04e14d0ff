"""PC: split-half coverage of the printed intervals on LoCoMo. Not a speed: a statistical property, measured here because
it needs the real corpus.

Measures: on the warm exact LoCoMo run's per-question rows (MiniLM, the default strategies; the exact store's rows equal
seekdb's), all 252 ways of choosing with the recommender on 5 of the 10 conversations
(``bench.analysis.holdout.split_half``), the other 5 scored at that configuration and threshold: the share of trials
whose held-out F1 lies inside the printed 95 % prediction interval (for a new corpus of 5 conversations like these).
Reference: the held-out halves themselves.
Target: >= 90 %.

Printed beside it, as information: the same trials against the CI about the mean (PC/ci) and against the interval the
recommender printed before issue 23, a percentile cluster bootstrap (PC/bootstrap: 69.0 % on 2026-12-02).
"""

from __future__ import annotations

import time

from bench.tools.perf.common import REPO, WARM_RUN, Ratio, _failed, bench_cmd, run_measured, temp_cache, warm_embeddings


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


def run(args, ctx) -> list[Ratio]:
    if not ctx.has_locomo:
        ctx.notes.append(f"PC not measured: no LoCoMo under {ctx.data_dir} (set BENCH_DATA_DIR)")
        return []
    return pc_coverage()
