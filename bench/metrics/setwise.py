"""Set metrics of a selection (pure functions) and their aggregation: precision, recall, F1, hit, abstention.

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


def with_abstention(f1, abstained, adversarial) -> np.ndarray:
    """F1 with abstention credited, vectorised: an adversarial question's value is its ``abstained``, any other's its
    ``f1`` (arrays of equal shape; the recommender's ``max_f1_abstain``)."""
    return np.where(np.asarray(adversarial, dtype=bool), abstained, f1)


def f1_abstain(*, selected: Collection[str], gold: Collection[str], adversarial: bool) -> float:
    """One question's F1 with abstention credited (``with_abstention``)."""
    return float(with_abstention(f1(selected=selected, gold=gold), abstained(selected=selected), adversarial))


def tokens(*, items, encoding: str | None = None) -> float:
    """Injected tokens of the selected memories, (role, text) pairs as injected (``bench.data.tokens.count_injected_tokens``;
    the sweep counts them per injection format with ``bench.selection.formats``). Lower is better."""
    from bench.data.tokens import DEFAULT_ENCODING, count_injected_tokens

    return float(count_injected_tokens(items, encoding or DEFAULT_ENCODING))


def percentile_ms(latencies_ns: np.ndarray, q: float) -> float:
    """The ``q``-th percentile of store latencies (ns in, ms out), NaN skipped; NaN when there is none. Lower is better."""
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


def series_mean(v: np.ndarray):
    """``pd.Series(v).mean()`` (NaN skipped), bit for bit, for float, int and bool arrays without building a Series:
    pandas fills NaN with 0, sums (floats in their own dtype, ints in float64, bools in int64; numpy's pairwise sum)
    and divides by the count of the others."""
    kind = v.dtype.kind
    if kind == "f":
        mask = np.isnan(v)
        n_nan = int(mask.sum())
        if n_nan:
            v = np.where(~mask, v, 0)
        dt = np.dtype(np.float64) if v.dtype == np.float16 else v.dtype
        count = dt.type(v.size - n_nan)
        return v.sum(dtype=dt) / count if count > 0 else np.nan
    if kind in "iub":
        count = np.float64(v.size)
        return v.sum(dtype=np.int64 if kind == "b" else np.float64) / count if count > 0 else np.nan
    return pd.Series(v).mean()


def group_rows(rows: pd.DataFrame, keys: list[str]) -> list[np.ndarray]:
    """Row positions of each ``rows.groupby(keys, dropna=False, sort=False)`` group, in the groupby's order."""
    codes = rows.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(int(codes.max(initial=-1)) + 2))
    return [order[bounds[g] : bounds[g + 1]] for g in range(len(bounds) - 1)]


def aggregate(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Summarise per-question rows into one row per ``keys`` group.

    ``rows`` columns: question_id, adversarial, n_gold, n_selected, n_correct, precision, recall,
    f1, hit, empty, tokens_injected, tokens_full, latency_ns. Quality columns use the scored
    questions only (``scored``: non-adversarial with gold; ``n_questions`` counts them);
    ``n_excluded`` counts the non-adversarial questions without gold; ``adversarial_abstain_rate``
    uses adversarial ones only; latency percentiles use every row of the group.
    ``n_scored`` (questions with F1 defined) equals ``n_questions`` and is kept for older readers.
    Computed on numpy arrays per group (``group_rows``, ``series_mean``): the same numbers as pandas per group.
    """
    need = ["adversarial", "n_gold", "n_selected", "n_correct", "precision", "recall", "f1", "hit", "empty",
            "tokens_injected", "tokens_full", "latency_ns"]
    mask = scored(rows).to_numpy()
    adv_all = rows["adversarial"].astype(bool).to_numpy()
    excluded = ~adv_all & ~mask
    col = {c: rows[c].to_numpy() for c in need}
    key_cols = [rows[k].to_numpy() for k in keys]
    out = []
    for idx in group_rows(rows, keys):
        main = idx[mask[idx]]
        adv = idx[adv_all[idx]]
        n_main = len(main)
        mp, mr, mf = (float(x) for x in prf(col["n_selected"][main].sum(), col["n_correct"][main].sum(), col["n_gold"][main].sum()))
        full = series_mean(col["tokens_full"][main]) if n_main else NAN
        inj = series_mean(col["tokens_injected"][main]) if n_main else NAN
        f1 = col["f1"][main]
        lat = col["latency_ns"][idx]
        out.append({
            **{k: kc[idx[0]] for k, kc in zip(keys, key_cols)},
            "n_questions": n_main,
            "n_excluded": int(excluded[idx].sum()),
            "n_scored": int((~pd.isna(f1)).sum()),
            "precision": series_mean(col["precision"][main]),
            "precision_n": int((~pd.isna(col["precision"][main])).sum()),
            "recall": series_mean(col["recall"][main]),
            "f1": series_mean(f1),
            "micro_precision": mp,
            "micro_recall": mr,
            "micro_f1": NAN if math.isnan(mp) else mf,  # pooled counts; undefined when the group selected nothing
            "hit_rate": series_mean(col["hit"][main]),
            "empty_rate": series_mean(col["empty"][main]) if n_main else NAN,
            "selected_mean": series_mean(col["n_selected"][main]) if n_main else NAN,
            "tokens_injected_mean": inj,
            "tokens_full_mean": full,
            "token_savings": 1 - inj / full if full else NAN,
            "n_adversarial": len(adv),
            "adversarial_abstain_rate": series_mean(col["empty"][adv]) if len(adv) else NAN,
            "latency_p50_ms": percentile_ms(lat, 50),
            "latency_p95_ms": percentile_ms(lat, 95),
            "latency_p99_ms": percentile_ms(lat, 99),
        })
    return pd.DataFrame(out)
