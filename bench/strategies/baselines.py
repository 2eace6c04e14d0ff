"""Baselines that ignore the store: full context (every earlier turn) and recency (the last k turns)."""

from __future__ import annotations

from collections.abc import Sequence

from bench.types import Hit, Hits, Question, Turn

NAN = float("nan")


def full_context(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None) -> Hits:
    """Baseline: inject every memory the question may see (every earlier turn), no store involved."""
    global _FULL
    if _FULL[0] is eligible:  # memo of the last answer: the sweep hands a conversation's questions the same tuple
        return _FULL[1]
    out = Hits(tuple(t.key for t in eligible), (NAN,) * len(eligible))  # columnar: no object per memory
    if isinstance(eligible, tuple):  # immutable, so the memo cannot go stale
        _FULL = (eligible, out)
    return out


_FULL: tuple = (None, ())


def recency(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None, k: int = 5) -> Hits:
    """Baseline: the last k turns the question may see, most recent first (no store involved)."""
    if k < 0:
        raise ValueError(f"recency: k must be >= 0 (got {k})")
    last = eligible[len(eligible) - k:] if k else ()
    return Hits(tuple(t.key for t in reversed(last)), (NAN,) * len(last))
