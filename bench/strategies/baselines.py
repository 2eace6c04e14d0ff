"""Baselines that ignore the store: full context (every earlier turn) and recency (the last k turns)."""

from __future__ import annotations

from collections.abc import Sequence

from bench.strategies.spec import strategy
from bench.types import Hit, Hits, Question, Turn
from bench.replay.visibility import keys_of

NAN = float("nan")


@strategy(family="baseline", thresholded=False, uses_store=False)
def full_context(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None) -> Hits:
    """Baseline: inject every memory the question may see (every earlier turn), no store involved."""
    return Hits(keys_of(eligible), (NAN,) * len(eligible))  # columnar: no object per memory


@strategy(family="baseline", thresholded=False, uses_store=False)
def recency(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None, k: int = 5) -> Hits:
    """Baseline: the last k turns the question may see, most recent first (no store involved)."""
    if k < 0:
        raise ValueError(f"recency: k must be >= 0 (got {k})")
    last = eligible[len(eligible) - k:] if k else ()
    return Hits(tuple(t.key for t in reversed(last)), (NAN,) * len(last))
