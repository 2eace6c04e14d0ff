"""Per-question recall metrics (pure functions) and their aggregation.

A metric returns a float per question; NaN where it is undefined, never a silent zero.
Conventions fixed here (they decide which threshold looks best):
- precision = |selected & gold| / |selected|; NaN when nothing is selected.
- recall = |selected & gold| / |gold|; NaN when the question has no gold.
- F1 = 0 when there is gold and nothing is selected (so recalling nothing never wins);
  NaN when there is no gold; else the harmonic mean (0 when nothing correct).
- Adversarial questions (correct recall = nothing) are excluded from these and scored by
  ``abstained`` (1 when nothing is selected).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import pandas as pd

NAN = float("nan")


@dataclass(frozen=True, slots=True)
class MetricInfo:
    name: str
    higher_is_better: bool
    unit: str


METRICS = {
    m.name: m
    for m in (
        MetricInfo("precision", True, "fraction"),
        MetricInfo("recall", True, "fraction"),
        MetricInfo("f1", True, "fraction"),
        MetricInfo("hit", True, "fraction"),
        MetricInfo("empty", False, "fraction"),
        MetricInfo("abstained", True, "fraction"),
        MetricInfo("tokens_injected", False, "tokens"),
        MetricInfo("token_savings", True, "fraction"),
        MetricInfo("latency_ms", False, "ms"),
    )
}


def precision(*, selected: Collection[str], gold: Collection[str]) -> float:
    if not selected:
        return NAN
    return len(set(selected) & set(gold)) / len(set(selected))


def recall(*, selected: Collection[str], gold: Collection[str]) -> float:
    if not gold:
        return NAN
    return len(set(selected) & set(gold)) / len(set(gold))


def f1(*, selected: Collection[str], gold: Collection[str]) -> float:
    if not gold:
        return NAN
    if not selected:
        return 0.0
    p, r = precision(selected=selected, gold=gold), recall(selected=selected, gold=gold)
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def hit(*, selected: Collection[str], gold: Collection[str]) -> float:
    """1 when at least one gold memory is selected; NaN without gold."""
    if not gold:
        return NAN
    return 1.0 if set(selected) & set(gold) else 0.0


def abstained(*, selected: Collection[str]) -> float:
    """For adversarial questions: 1 when nothing is recalled."""
    return 1.0 if not selected else 0.0


def percentile_ms(latencies_ns: np.ndarray, q: float) -> float:
    lat = np.asarray(latencies_ns, dtype=np.float64)
    lat = lat[~np.isnan(lat)]
    return float(np.percentile(lat, q) / 1e6) if lat.size else NAN


def _safe_div(a: float, b: float) -> float:
    return a / b if b else NAN


def aggregate(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Summarise per-question rows into one row per ``keys`` group.

    ``rows`` columns: question_id, adversarial, n_gold, n_selected, n_correct, precision, recall,
    f1, hit, empty, tokens_injected, tokens_full, latency_ns. Main metrics use non-adversarial
    questions only; ``adversarial_abstain_rate`` uses adversarial ones only.
    """
    out = []
    for key, g in rows.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        main = g[~g["adversarial"]]
        adv = g[g["adversarial"]]
        sel, cor, gold = main["n_selected"].sum(), main["n_correct"].sum(), main["n_gold"].sum()
        mp, mr = _safe_div(cor, sel), _safe_div(cor, gold)
        full = main["tokens_full"].mean() if len(main) else NAN
        inj = main["tokens_injected"].mean() if len(main) else NAN
        out.append({
            **dict(zip(keys, key)),
            "n_questions": len(main),
            "n_scored": int(main["f1"].notna().sum()),
            "precision": main["precision"].mean(),
            "precision_n": int(main["precision"].notna().sum()),
            "recall": main["recall"].mean(),
            "f1": main["f1"].mean(),
            "micro_precision": mp,
            "micro_recall": mr,
            "micro_f1": NAN if math.isnan(mp) or math.isnan(mr) else (0.0 if mp + mr == 0 else 2 * mp * mr / (mp + mr)),
            "hit_rate": main["hit"].mean(),
            "empty_rate": main["empty"].mean() if len(main) else NAN,
            "selected_mean": main["n_selected"].mean() if len(main) else NAN,
            "tokens_injected_mean": inj,
            "tokens_full_mean": full,
            "token_savings": 1 - inj / full if full else NAN,
            "n_adversarial": len(adv),
            "adversarial_abstain_rate": adv["empty"].mean() if len(adv) else NAN,
            "latency_p50_ms": percentile_ms(g["latency_ns"].to_numpy(), 50),
            "latency_p95_ms": percentile_ms(g["latency_ns"].to_numpy(), 95),
            "latency_p99_ms": percentile_ms(g["latency_ns"].to_numpy(), 99),
        })
    return pd.DataFrame(out)
