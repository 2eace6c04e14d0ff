"""Offline sweep: a stored trace x strategies x thresholds -> tidy per-question rows and a summary.

Never touches a store. Thresholds are exact decimals (labels "0.10" .. "0.90"), generated with
``Decimal`` so no float drift reaches a label.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pandas as pd

from bench import metrics
from bench.runner import Trace, question_filter, visible
from bench.types import Corpus, Hit, memory_key

SUMMARY_KEYS = ["dataset", "embedder", "backend", "strategy", "threshold"]


@dataclass(frozen=True)
class StrategySpec:
    name: str
    fn: Callable[..., tuple[Hit, ...]]
    thresholded: bool
    uses_store: bool = True  # False: a baseline that ignores the trace (full context)
    roles: tuple[str, ...] | None = None  # role filter pushed down to the store (its own trace)


def threshold_grid(start: float | str, stop: float | str, step: float | str) -> tuple[float, ...]:
    """Inclusive grid of exact decimals, e.g. (0.10, 0.90, 0.05) -> 17 values."""
    a, b, s = Decimal(str(start)), Decimal(str(stop)), Decimal(str(step))
    if s <= 0 or a > b:
        raise ValueError(f"threshold grid: need start <= stop and step > 0 (got {start}, {stop}, {step})")
    out, x = [], a
    while x <= b:
        if not Decimal(0) <= x <= Decimal(1):
            raise ValueError(f"threshold {x} outside [0, 1]")
        out.append(float(x))
        x += s
    return tuple(out)


def sweep(
    trace: Trace,
    corpus: Corpus,
    strategies: Sequence[StrategySpec],
    thresholds: Sequence[float],
    token_counts: Mapping[str, int],
    *,
    separator_tokens: int = 0,
    embedder: str | None = None,
) -> pd.DataFrame:
    """One row per (strategy, threshold, question).

    ``token_counts`` maps memory key -> tokens of its injected line ("role: message"); the
    injected tokens of a selection are the sum of its lines plus ``separator_tokens`` per newline.
    Default 0: BPE merges the newline with the end of the line (".\n" is one cl100k token); on
    LoCoMo this sum equals the exact count of the joined text for 99 % of 5-memory selections
    and is otherwise 1 token short.
    """
    questions = {q.question_id: q for q in corpus.questions}
    by_conv = {c.conversation_id: c.turns for c in corpus.conversations}
    roles = tuple(trace.meta["roles"]) if trace.meta.get("roles") else None

    def tokens(ids: Sequence[str]) -> int:
        return sum(token_counts[i] for i in ids) + separator_tokens * max(len(ids) - 1, 0)

    rows = []
    for rec in trace.table.itertuples(index=False):
        q = questions[rec.question_id]
        where = question_filter(q, roles=roles)
        eligible = tuple(t for t in by_conv[q.conversation_id] if visible(t, where))
        gold = {memory_key(q.conversation_id, e) for e in q.evidence}
        hits = [Hit(i, float(s)) for i, s in zip(rec.hit_ids, rec.hit_scores)]
        full = tokens([t.key for t in eligible])
        for spec in strategies:
            for t in thresholds if spec.thresholded else (None,):
                chosen = spec.fn(hits, question=q, eligible=eligible, threshold=t)
                ids = [h.id for h in chosen]
                sel = set(ids)
                rows.append({
                    "strategy": spec.name,
                    "threshold": np.nan if t is None else t,
                    "question_id": q.question_id,
                    "conversation_id": q.conversation_id,
                    "category": q.category,
                    "adversarial": q.adversarial,
                    "n_gold": len(gold),
                    "n_selected": len(sel),
                    "n_correct": len(sel & gold),
                    "precision": metrics.precision(selected=sel, gold=gold),
                    "recall": metrics.recall(selected=sel, gold=gold),
                    "f1": metrics.f1(selected=sel, gold=gold),
                    "hit": metrics.hit(selected=sel, gold=gold),
                    "empty": float(not sel),
                    "tokens_injected": tokens(ids),
                    "tokens_full": full,
                    "latency_ns": float(rec.latency_ns) if spec.uses_store else np.nan,
                    "depth_saturated": spec.uses_store and len(hits) > 0 and len(ids) == len(hits) and len(hits) < len(eligible),
                })
    out = pd.DataFrame(rows)
    out.insert(0, "backend", trace.meta["backend"])
    out.insert(0, "embedder", embedder or trace.meta["embedder"])
    out.insert(0, "dataset", trace.meta["dataset"])
    return out


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, embedder, backend, strategy, threshold), in sweep order."""
    summary = metrics.aggregate(rows, SUMMARY_KEYS)
    sat = rows.groupby(SUMMARY_KEYS, dropna=False, sort=False)["depth_saturated"].mean().reset_index(drop=True)
    summary["depth_saturated_rate"] = sat.to_numpy()
    return summary
