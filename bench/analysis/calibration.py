"""Score calibration: where an embedder+store puts relevant (gold) and irrelevant candidates.

Owns splitting a trace's candidate similarities into gold and non-gold (gold = the question's
evidence turns; non-adversarial questions with gold only), their summary (quantiles, the band
where the central ranges overlap, AUC = P(gold scores above non-gold), pass rates per threshold)
and the sentence the report prints. Pure functions; the plots live in ``bench.report.plots``.
Scores are the store's similarity (what a threshold is applied to). A gold memory the store did
not return has no score: it is counted in ``gold_unreturned``, never imputed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.strategies.vector import lowest_passing

NAN = float("nan")
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


@dataclass(frozen=True)
class ScoreSplit:
    gold: np.ndarray  # similarity of every returned gold candidate
    nongold: np.ndarray  # similarity of every returned non-gold candidate
    n_questions: int  # questions that contributed (non-adversarial, with gold)
    gold_unreturned: int  # gold memories the store did not return (no score)


@dataclass(frozen=True)
class Calibration:
    n_questions: int
    n_gold: int
    n_nongold: int
    gold_unreturned: int
    coverage: float  # central share used for the ranges (0.9 -> 5th..95th percentile)
    gold_q: dict  # quantile -> score
    nongold_q: dict
    gold_range: tuple[float, float]
    nongold_range: tuple[float, float]
    overlap: tuple[float, float]  # (NaN, NaN) when the central ranges do not overlap
    auc: float  # P(random gold > random non-gold), ties count half; NaN when a side is empty


def split_scores(table: pd.DataFrame, gold: Mapping[str, Sequence[str]], *, skip: set[str] = frozenset(),
                 score: str = "hit_scores") -> ScoreSplit:
    """Candidate similarities of a trace (columns question_id, hit_ids, ``score``) split by gold.

    ``gold`` maps question_id -> gold memory keys; questions without gold or in ``skip``
    (adversarial) are left out.
    """
    g_parts, n_parts, n_q, unret = [], [], 0, 0
    for qid, ids, scores in zip(table["question_id"], table["hit_ids"], table[score]):
        want = set(gold.get(qid, ()))
        if not want or qid in skip:
            continue
        n_q += 1
        ids = np.asarray(ids, dtype=object)
        sc = np.asarray(scores, dtype=np.float64)
        is_gold = np.fromiter((i in want for i in ids), dtype=bool, count=len(ids))
        g_parts.append(sc[is_gold])
        n_parts.append(sc[~is_gold])
        unret += len(want - set(ids.tolist()))
    cat = lambda parts: np.concatenate(parts) if parts else np.empty(0)  # noqa: E731
    return ScoreSplit(cat(g_parts), cat(n_parts), n_q, unret)


def ecdf(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Fraction of ``values`` <= each x."""
    v = np.sort(np.asarray(values, np.float64))
    if not v.size:
        return np.full(np.shape(x), NAN)
    return np.searchsorted(v, np.asarray(x, np.float64), side="right") / v.size


def pass_rates(split: ScoreSplit, thresholds: Sequence[float]) -> pd.DataFrame:
    """Per threshold: share of returned gold and of non-gold candidates with similarity >= threshold (``passes``)."""
    t = np.asarray(thresholds, np.float64)

    def share(v: np.ndarray) -> np.ndarray:
        v = np.sort(v)
        return (v.size - np.searchsorted(v, lowest_passing(t), side="left")) / v.size if v.size else np.full(t.shape, NAN)

    return pd.DataFrame({"threshold": t, "gold_pass": share(split.gold), "nongold_pass": share(split.nongold)})


def auc(gold: np.ndarray, nongold: np.ndarray) -> float:
    """Mann-Whitney U / (n_gold * n_nongold): the chance a gold candidate outscores a non-gold one."""
    from scipy import stats

    if not len(gold) or not len(nongold):
        return NAN
    return float(stats.mannwhitneyu(gold, nongold, alternative="two-sided").statistic / (len(gold) * len(nongold)))


def calibrate(split: ScoreSplit, *, coverage: float = 0.9) -> Calibration:
    if not 0 < coverage < 1:
        raise ValueError(f"calibrate: coverage must be in (0, 1) (got {coverage})")
    a = (1 - coverage) / 2

    def q(v: np.ndarray, p: float) -> float:
        return float(np.quantile(v, p)) if v.size else NAN

    g_rng = (q(split.gold, a), q(split.gold, 1 - a))
    n_rng = (q(split.nongold, a), q(split.nongold, 1 - a))
    lo, hi = max(g_rng[0], n_rng[0]), min(g_rng[1], n_rng[1])
    overlap = (lo, hi) if lo < hi else (NAN, NAN)  # NaN compares False: no data -> no band
    return Calibration(
        n_questions=split.n_questions, n_gold=int(split.gold.size), n_nongold=int(split.nongold.size),
        gold_unreturned=split.gold_unreturned, coverage=coverage,
        gold_q={p: q(split.gold, p) for p in QUANTILES}, nongold_q={p: q(split.nongold, p) for p in QUANTILES},
        gold_range=g_rng, nongold_range=n_rng, overlap=overlap, auc=auc(split.gold, split.nongold),
    )


def describe(cal: Calibration, split: ScoreSplit, thresholds: Sequence[float] = (0.7,)) -> str:
    """One paragraph: where relevant and irrelevant scores live, and what given thresholds keep."""
    if not cal.n_gold:
        return "No gold candidate was returned, so relevant scores cannot be described."
    pct = int(round(cal.coverage * 100))
    out = [f"Relevant (gold) memories score {cal.gold_range[0]:.2f}–{cal.gold_range[1]:.2f} (central {pct} %, "
           f"median {cal.gold_q[0.5]:.2f}); irrelevant ones {cal.nongold_range[0]:.2f}–{cal.nongold_range[1]:.2f} "
           f"(median {cal.nongold_q[0.5]:.2f})."]
    if math.isnan(cal.overlap[0]):
        out.append("Their central ranges do not overlap: a threshold between them separates them.")
    else:
        out.append(f"They overlap on {cal.overlap[0]:.2f}–{cal.overlap[1]:.2f}: any threshold there trades recall for noise.")
    out.append(f"AUC {cal.auc:.3f} (chance that a gold candidate outscores a non-gold one).")
    rates = pass_rates(split, thresholds)
    for r in rates.itertuples(index=False):
        out.append(f"At {r.threshold:.2f}, {r.gold_pass:.1%} of gold and {r.nongold_pass:.2%} of non-gold candidates pass.")
    if cal.gold_unreturned:
        out.append(f"{cal.gold_unreturned} gold memories were not returned by the store at all (no score).")
    return " ".join(out)
