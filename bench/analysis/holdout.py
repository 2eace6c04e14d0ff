"""Split-half coverage: do the printed 95 % intervals hold on conversations the recommender never saw?

For a run's per-question rows (one dataset, ``questions.parquet``): split its G conversations into a half A
of floor(G/2) conversations and the rest B; run the recommender on A (``recommend.analyse`` for every
configuration, ``recommend.best_flags`` for the best), read the interval it prints for the primary metric of
the best point, and score B at the same configuration and threshold (the question-weighted macro mean the
recommender uses). A trial is covered when B's value lies inside the interval. Two intervals are checked:
the prediction interval (``{metric}_pred_lo/_pred_hi``, for a new corpus of |B| conversations like these:
the one that should cover B 95 % of the time) and the CI (``{metric}_lo/_hi``, about the mean of
conversations like these: it need not cover a finite B). Every split is tried when there are at most
``max_trials`` (LoCoMo: C(10, 5) = 252, its 126 splits in both directions); otherwise ``max_trials``
distinct halves drawn with ``seed``. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.analysis.choose import setting_index
from bench.analysis.recommend import CONFIG_KEYS, M, RecommendConfig, analyse, best_flags, build_grids, one_format
from bench.analysis.stats import cluster_sums, ratio

NAN = float("nan")
MAX_TRIALS = 252


@dataclass(frozen=True)
class Coverage:
    metric: str  # the objective's primary metric
    n_trials: int  # trials with a best point and a held-out value
    pred: float  # share of those inside the prediction interval (NaN when no trial has one)
    ci: float  # share inside the CI
    trials: pd.DataFrame  # one row per trial (TRIAL_COLUMNS)


TRIAL_COLUMNS = ["trial", "train", "test", *CONFIG_KEYS, "threshold", "metric", "estimate", "lo", "hi", "pred_lo", "pred_hi",
                 "held_out", "in_ci", "in_pred"]


def halves(n: int, *, max_trials: int = MAX_TRIALS, seed: int = 0) -> list[tuple[int, ...]]:
    """Index sets of the half A (n // 2 of ``n`` conversations): every one when there are at most ``max_trials``,
    else ``max_trials`` distinct ones drawn with ``seed`` (sorted)."""
    k = n // 2
    if k < 1:
        return []
    if math.comb(n, k) <= max_trials:
        return list(itertools.combinations(range(n), k))
    rng = np.random.default_rng(seed)
    seen: set[tuple[int, ...]] = set()
    while len(seen) < max_trials:
        seen.add(tuple(sorted(rng.choice(n, size=k, replace=False).tolist())))
    return sorted(seen)


def _inside(x: float, lo: float, hi: float) -> bool:
    return bool(lo <= x <= hi)  # False when any is NaN


def split_half(rows: pd.DataFrame, cfg: RecommendConfig | None = None, *, max_trials: int = MAX_TRIALS, seed: int = 0,
               never_best: frozenset = frozenset()) -> Coverage:
    """The split-half coverage of the recommender's printed intervals on ``rows`` (one dataset's per-question rows)."""
    cfg = cfg or RecommendConfig.defaults()
    rows = one_format(rows)
    datasets = rows["dataset"].unique().tolist() if "dataset" in rows else []
    if len(datasets) != 1:
        raise ValueError(f"split_half: rows must hold one dataset (got {datasets})")
    grids = build_grids(rows)
    labels = np.unique(np.concatenate([g.conversations for g in grids])) if grids else np.empty(0, str)
    p = cfg.primary
    out = []
    for t, a_idx in enumerate(halves(len(labels), max_trials=max_trials, seed=seed)):
        train = labels[list(a_idx)]
        test = np.setdiff1d(labels, train)
        c = dataclasses.replace(cfg, new_conversations=len(test))  # the interval printed for a corpus the size of B
        points = pd.DataFrame([analyse(g, c, np.isin(g.conversations, train))[0] for g in grids])
        best = best_flags(points, c, never_best)
        if not best.any():
            continue
        i = int(np.flatnonzero(best.to_numpy())[0])
        b, g = points.iloc[i], grids[i]
        j = 0 if not g.thresholded else setting_index(g.thresholds, b["threshold"])  # A's choice, scored on B
        on_b = np.isin(g.conversations, test)
        _, s, n = cluster_sums(g.values[on_b][:, M[p], j], g.conversations[on_b])
        held = float(ratio(s.sum(), n.sum()))
        if math.isnan(held):
            continue
        out.append({"trial": t, "train": ",".join(train), "test": ",".join(test), **{k: b[k] for k in CONFIG_KEYS},
                    "threshold": b["threshold"], "metric": p, "estimate": b[p], "lo": b[f"{p}_lo"], "hi": b[f"{p}_hi"],
                    "pred_lo": b[f"{p}_pred_lo"], "pred_hi": b[f"{p}_pred_hi"], "held_out": held,
                    "in_ci": _inside(held, b[f"{p}_lo"], b[f"{p}_hi"]), "in_pred": _inside(held, b[f"{p}_pred_lo"], b[f"{p}_pred_hi"])})
    trials = pd.DataFrame(out, columns=TRIAL_COLUMNS)

    def share(col: str, lo: str) -> float:
        ok = trials[lo].notna()
        return float(trials.loc[ok, col].mean()) if ok.any() else NAN

    return Coverage(metric=p, n_trials=len(trials), pred=share("in_pred", "pred_lo"), ci=share("in_ci", "lo"), trials=trials)
