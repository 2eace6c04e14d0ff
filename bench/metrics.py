"""Per-question recall metrics (pure functions) and their aggregation.

A metric returns a float per question; NaN where it is undefined, never a silent zero.
Conventions fixed here (they decide which threshold looks best):
- precision = |selected & gold| / |selected|; NaN when nothing is selected.
- recall = |selected & gold| / |gold|; NaN when the question has no gold.
- F1 = 0 when there is gold and nothing is selected (so recalling nothing never wins);
  NaN when there is no gold; else the harmonic mean (0 when nothing correct).
- Adversarial questions (correct recall = nothing) are excluded from these and scored by
  ``abstained`` (1 when nothing is selected).
``prf`` owns these rules: it computes all three from counts, vectorised; the sweep calls it per
question, ``aggregate`` on each group's pooled counts (micro metrics), and ``precision``/``recall``/
``f1`` are its one-question wrappers.

Which questions are counted (the same words as README "Metric conventions"):
- Questions counted: a question is *scored* when it is not adversarial and has at least one gold
  memory. `n_questions` counts the scored questions, and every quality column (precision, recall,
  F1, hit rate, empty rate, selected and noise per question, injected and full-context tokens, token
  savings, the micro metrics) is computed over them only. A non-adversarial question without gold
  cannot be scored: it is left out of every quality column and counted in `n_excluded`.
  Adversarial questions are counted in `n_adversarial` and scored only by
  `adversarial_abstain_rate` (nothing recalled = correct). Store latency percentiles use every query
  of the trace (scored, excluded and adversarial alike): latency is a property of the store, not of
  a question's gold. The recommender's curves, intervals and paired tests use the same scored
  questions (and the adversarial ones for abstention), so their `n_questions` equals the summary's.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import numpy as np
import pandas as pd

NAN = float("nan")


def prf(n_selected, n_correct, n_gold) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Precision, recall and F1 from counts (arrays or scalars of equal shape), as float arrays, with the
    NaN rules above: precision NaN when nothing is selected, recall and F1 NaN without gold, F1 0 when
    there is gold and nothing is selected (and when nothing selected is correct)."""
    n_sel = np.asarray(n_selected, dtype=np.float64)
    n_cor = np.asarray(n_correct, dtype=np.float64)
    n_gold = np.asarray(n_gold, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(n_sel > 0, n_cor / np.maximum(n_sel, 1), NAN)
        r = np.where(n_gold > 0, n_cor / np.maximum(n_gold, 1), NAN)
        f1 = np.where(n_gold > 0, np.where(n_sel > 0, np.where(p + r > 0, 2 * p * r / (p + r), 0.0), 0.0), NAN)
    return p, r, f1


def _counts(selected: Collection[str], gold: Collection[str]) -> tuple[int, int, int]:
    sel, g = set(selected), set(gold)
    return len(sel), len(sel & g), len(g)


def precision(*, selected: Collection[str], gold: Collection[str]) -> float:
    return float(prf(*_counts(selected, gold))[0])


def recall(*, selected: Collection[str], gold: Collection[str]) -> float:
    return float(prf(*_counts(selected, gold))[1])


def f1(*, selected: Collection[str], gold: Collection[str]) -> float:
    return float(prf(*_counts(selected, gold))[2])


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


def scored(rows: pd.DataFrame) -> pd.Series:
    """Boolean mask of the scored questions of per-question ``rows``: not adversarial, with gold.

    Gold is read from ``n_gold`` (> 0); rows without that column fall back to ``recall``, then
    ``f1``, being defined, which is the same thing (both are NaN exactly when there is no gold).
    """
    adv = rows["adversarial"].astype(bool)
    if "n_gold" in rows:
        gold = rows["n_gold"].fillna(0).astype(float) > 0
    elif "recall" in rows or "f1" in rows:
        gold = rows["recall" if "recall" in rows else "f1"].notna()
    else:
        raise ValueError("scored: rows need column 'n_gold' (or 'recall' or 'f1') to tell questions without gold")
    return ~adv & gold


def excluded(rows: pd.DataFrame) -> pd.Series:
    """Boolean mask of non-adversarial questions without gold (left out of every quality column)."""
    return ~rows["adversarial"].astype(bool) & ~scored(rows)


def aggregate(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Summarise per-question rows into one row per ``keys`` group.

    ``rows`` columns: question_id, adversarial, n_gold, n_selected, n_correct, precision, recall,
    f1, hit, empty, tokens_injected, tokens_full, latency_ns. Quality columns use the scored
    questions only (``scored``: non-adversarial with gold; ``n_questions`` counts them);
    ``n_excluded`` counts the non-adversarial questions without gold; ``adversarial_abstain_rate``
    uses adversarial ones only; latency percentiles use every row of the group.
    ``n_scored`` (questions with F1 defined) equals ``n_questions`` and is kept for older readers.
    """
    need = ["adversarial", "n_gold", "n_selected", "n_correct", "precision", "recall", "f1", "hit", "empty",
            "tokens_injected", "tokens_full", "latency_ns"]
    mask = scored(rows).to_numpy()
    # only the columns used below: a group's boolean take then skips the string columns
    rows = rows[list(dict.fromkeys(keys + need))].assign(_scored=mask, _excluded=~rows["adversarial"].astype(bool).to_numpy() & ~mask)
    out = []
    for key, g in rows.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        main = g[g["_scored"]]
        adv = g[g["adversarial"].astype(bool)]
        mp, mr, mf = (float(x) for x in prf(main["n_selected"].sum(), main["n_correct"].sum(), main["n_gold"].sum()))
        full = main["tokens_full"].mean() if len(main) else NAN
        inj = main["tokens_injected"].mean() if len(main) else NAN
        out.append({
            **dict(zip(keys, key)),
            "n_questions": len(main),
            "n_excluded": int(g["_excluded"].sum()),
            "n_scored": int(main["f1"].notna().sum()),
            "precision": main["precision"].mean(),
            "precision_n": int(main["precision"].notna().sum()),
            "recall": main["recall"].mean(),
            "f1": main["f1"].mean(),
            "micro_precision": mp,
            "micro_recall": mr,
            "micro_f1": NAN if math.isnan(mp) else mf,  # pooled counts; undefined when the group selected nothing
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
