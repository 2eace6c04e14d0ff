"""Embedders compared: per embedder, each strategy's operating point beside where its scores lie.

One tidy table (``analysis/embedders.csv``): one row per (dataset, store, embedder, strategy) with the
strategy's chosen threshold and its F1 / recall / tokens with their CIs about the mean of conversations like these
and F1's prediction interval for a new corpus (``bench.analysis.recommend``'s points: same objective, same intervals), and the embedder's score bands on that store (the
unfiltered trace's gold and non-gold candidate similarities, ``bench.analysis.calibration``):
p10 / p50 / p90 of each, AUC, and at the often-quoted 0.7 the share of gold and non-gold candidates
that pass and the share of passing candidates that are gold ("> 0.7 usually indicates high relevance",
checked per model). ``for_results`` is False for plumbing embedders (hashing, synthetic). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from bench.strategies.vector import passes

NAN = float("nan")
BANDS = (0.1, 0.5, 0.9)
REFERENCE = 0.7
POINT_COLUMNS = ["threshold", "f1", "f1_lo", "f1_hi", "f1_pred_lo", "f1_pred_hi", "recall", "recall_lo", "recall_hi", "tokens", "tokens_lo", "tokens_hi",
                 "n_questions", "feasible"]


def bands(gold: np.ndarray, nongold: np.ndarray, auc: float, *, reference: float = REFERENCE) -> dict:
    """Quantiles of gold and non-gold similarities, AUC, and what ``reference`` keeps of each."""
    gold, nongold = np.asarray(gold, np.float64), np.asarray(nongold, np.float64)
    out = {}
    for name, v in (("gold", gold), ("nongold", nongold)):
        for q in BANDS:
            out[f"{name}_p{round(q * 100)}"] = float(np.quantile(v, q)) if v.size else NAN
    g, n = int(passes(gold, reference).sum()), int(passes(nongold, reference).sum())
    tag = f"{reference:.2f}"
    out.update({"auc": auc, "n_gold": int(gold.size), "n_nongold": int(nongold.size),
                f"gold_pass_{tag}": g / gold.size if gold.size else NAN,
                f"nongold_pass_{tag}": n / nongold.size if nongold.size else NAN,
                f"gold_share_above_{tag}": g / (g + n) if g + n else NAN})
    return out


def table(points: pd.DataFrame, calibrations: Sequence, for_results: Mapping[str, bool] | None = None) -> pd.DataFrame:
    """One row per (dataset, backend, embedder, strategy) of ``points`` (``Recommendation.points``) with the
    score bands of the (dataset, embedder, backend)'s unfiltered trace (``ScoreCalibration``s, roles "all")."""
    cal = {(c.dataset, c.embedder, c.backend): bands(c.split.gold, c.split.nongold, c.cal.auc)
           for c in calibrations if c.roles == "all"}
    empty = bands(np.empty(0), np.empty(0), NAN)
    out = []
    for _, p in points.iterrows():
        key = (p["dataset"], p["embedder"], p["backend"])
        out.append({"dataset": p["dataset"], "backend": p["backend"], "embedder": p["embedder"],
                    "for_results": bool((for_results or {}).get(p["embedder"], True)), "strategy": p["strategy"],
                    **{c: p.get(c, NAN) for c in POINT_COLUMNS}, **cal.get(key, empty)})
    return pd.DataFrame(out)
