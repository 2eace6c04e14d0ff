"""Label noise, visible: two label releases of one corpus (same conversations, different questions or gold,
e.g. LoCoMo and its 2025 label-corrected release) in one run, and how far the recommendation moves.

``release_pairs`` finds them (equal ``bench.run.turns_digest``, different ``labels_digest``); ``moves`` puts
each release's recommendation side by side and scores the first release's choice on the second's labels.
Pure: inputs are the recommendation rows and the summary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from bench.analysis.choose import setting_index

KEYS = ["embedder", "backend", "strategy"]


def release_pairs(digests: Mapping[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """(A, B) dataset pairs, in the run's order, whose turns digests are equal and labels digests differ.
    ``digests``: dataset -> (turns digest, labels digest)."""
    names = list(digests)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
            if digests[a][0] == digests[b][0] and digests[a][1] != digests[b][1]]


def _at(summary: pd.DataFrame, dataset: str, point: Mapping) -> pd.Series | None:
    s = summary[summary["dataset"] == dataset]
    for k in KEYS:
        s = s[s[k] == point[k]]
    t = point["threshold"]
    if t is None or (isinstance(t, float) and math.isnan(t)):
        s = s[s["threshold"].isna()]
        return s.iloc[0] if len(s) else None
    j = setting_index(s["threshold"].to_numpy(np.float64), t)  # A's choice lined up with B's settings
    return s.iloc[j] if j >= 0 else None


def moves(pairs: Sequence[tuple[str, str]], best: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Per pair: each release's recommended (strategy, threshold) with its F1/recall, the threshold shift, and A's
    choice scored on B's labels (``a_on_b_f1``) against B's own best (``regret`` = B best F1 − A's choice on B)."""
    out = []
    for a, b in pairs:
        pa, pb = best[best["dataset"] == a], best[best["dataset"] == b]
        if pa.empty or pb.empty:
            continue
        pa, pb = pa.iloc[0], pb.iloc[0]
        cross = _at(summary, b, pa)
        out.append({"release_a": a, "release_b": b,
                    "a_choice": f"{pa['strategy']} @ {pa['threshold']:.2f}" if not math.isnan(pa["threshold"]) else pa["strategy"],
                    "b_choice": f"{pb['strategy']} @ {pb['threshold']:.2f}" if not math.isnan(pb["threshold"]) else pb["strategy"],
                    "a_f1": pa["f1"], "b_f1": pb["f1"], "a_recall": pa["recall"], "b_recall": pb["recall"],
                    "threshold_shift": pb["threshold"] - pa["threshold"],
                    "same_choice": bool(all(pa[k] == pb[k] for k in KEYS) and (
                        (math.isnan(pa["threshold"]) and math.isnan(pb["threshold"])) or abs(pa["threshold"] - pb["threshold"]) < 1e-9)),
                    "a_on_b_f1": float(cross["f1"]) if cross is not None else math.nan,
                    "a_on_b_recall": float(cross["recall"]) if cross is not None else math.nan,
                    "regret": pb["f1"] - float(cross["f1"]) if cross is not None else math.nan})
    return pd.DataFrame(out)
