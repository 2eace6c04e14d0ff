"""Recall strategies: pure selection functions over a question's scored candidates.

Every strategy has the signature
``fn(hits, *, question, eligible, threshold, **params) -> tuple[Hit, ...]``:
``hits`` are the store's candidates for one question, best first (similarity, higher is better);
``question`` is the Question; ``eligible`` are the Turns the question may see, in conversation
order (for baselines that ignore the store, and for text/time based policies); ``threshold`` is
the swept similarity threshold (None for strategies without one, which still accept it). No I/O, no randomness, no mutation: the same inputs give the same subset.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.types import Hit, Question, Turn


def limit(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None, k: int = 5) -> tuple[Hit, ...]:
    """Top-k ("limit"): the k best candidates, whatever their similarity."""
    if k < 0:
        raise ValueError(f"limit: k must be >= 0 (got {k})")
    return tuple(hits[:k])


def threshold(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None) -> tuple[Hit, ...]:
    """Every candidate with similarity >= threshold (bounded only by the search depth)."""
    if threshold is None:
        raise ValueError("threshold: a threshold is required")
    return tuple(h for h in hits if h.score >= threshold)


def hybrid(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None, k: int = 5) -> tuple[Hit, ...]:
    """Threshold, then cap at k."""
    if k < 0:
        raise ValueError(f"hybrid: k must be >= 0 (got {k})")
    if threshold is None:
        raise ValueError("hybrid: a threshold is required")
    out = []
    for h in hits:
        if h.score < threshold or len(out) >= k:
            break
        out.append(h)
    return tuple(out)


def full_context(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None) -> tuple[Hit, ...]:
    """Baseline: inject every memory the question may see (every earlier turn), no store involved."""
    return tuple(Hit(t.key, float("nan")) for t in eligible)
