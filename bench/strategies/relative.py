"""Thresholds meant to transfer across embedders and data: calibrated, relative and adaptive cuts.

A raw cosine threshold belongs to one embedder (MiniLM's gold memories score far below 0.7). These
cuts speak another unit, so a setting chosen on one model or one corpus may carry over
(``bench.analysis.transfer`` measures whether it does, across embedders and across corpora; a P(relevant)
cut depends on the corpus's base rate of relevant memories):

- ``calibrated_threshold``: the out-of-fold P(relevant) of each candidate >= p (``bench.selection.relevance``:
  fitted on labelled data, leave one conversation out); needs labelled data.
- ``relative_delta``: similarity >= top1 - delta (the question's best score minus delta).
- ``relative_ratio``: similarity >= alpha * top1 (a question whose best score is <= 0 recalls nothing).
- ``largest_gap``: among the top k, cut at the largest drop between consecutive scores.

The contract is ``bench.strategies.spec``'s; each one's threshold (delta, alpha, p) is declared with
``threshold_on`` and swept over the grid in its YAML.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bench.strategies.spec import strategy
from bench.strategies.vector import above, passes, prefix
from bench.types import Hit, Hits, Question, Turn


def _scores(hits: Sequence[Hit]) -> Sequence[float]:
    return hits.scores if isinstance(hits, Hits) else [h.score for h in hits]


@strategy(family="cut", thresholded=True, calibrated=True, threshold_on="probability")
def calibrated_threshold(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (),
                         threshold: float | None = None, calibrated: Sequence[float]) -> Sequence[Hit]:
    """Every candidate whose calibrated P(relevant) (``calibrated``, one per hit, in order) is >= threshold.
    An undefined (NaN) probability never passes."""
    if threshold is None:
        raise ValueError("calibrated_threshold: a threshold (p) is required")
    p = np.asarray(calibrated, dtype=np.float64)
    if len(p) != len(hits):
        raise ValueError(f"calibrated_threshold: {len(p)} calibrated values for {len(hits)} hits")
    keep = passes(p, threshold)
    n = int(np.count_nonzero(keep))
    if keep[:n].all():  # the usual case: a monotone map keeps a prefix of the hits
        return prefix(hits, n)
    return tuple(h for h, k in zip(hits, keep) if k)


@strategy(family="cut", thresholded=True, threshold_on="delta")
def relative_delta(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (),
                   threshold: float | None = None) -> Sequence[Hit]:
    """Every candidate with similarity >= top1 - threshold (delta), top1 = the question's best similarity."""
    if threshold is None:
        raise ValueError("relative_delta: a threshold (delta) is required")
    if not len(hits):
        return prefix(hits, 0)
    return prefix(hits, above(hits, _scores(hits)[0] - threshold))


@strategy(family="cut", thresholded=True, threshold_on="ratio")
def relative_ratio(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (),
                   threshold: float | None = None) -> Sequence[Hit]:
    """Every candidate with similarity >= threshold (alpha) x top1; nothing when top1 <= 0 (no positive
    best score to be relative to)."""
    if threshold is None:
        raise ValueError("relative_ratio: a threshold (alpha) is required")
    if not len(hits) or _scores(hits)[0] <= 0:
        return prefix(hits, 0)
    return prefix(hits, above(hits, threshold * _scores(hits)[0]))


@strategy(family="adaptive", thresholded=False)
def largest_gap(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (),
                threshold: float | None = None, k: int = 10) -> Sequence[Hit]:
    """Per-question adaptive cut: among the gaps after each of the k best candidates (score i minus score
    i+1, i = 1..k, where candidate i+1 exists), keep the candidates before the largest one (the first
    on a tie). Keeps 1..k candidates; a single candidate is kept; none from none."""
    if k < 1:
        raise ValueError(f"largest_gap: k must be >= 1 (got {k})")
    s = np.asarray(_scores(hits)[: k + 1], dtype=np.float64)
    if len(s) < 2:
        return prefix(hits, len(s))
    return prefix(hits, int(np.argmax(s[:-1] - s[1:])) + 1)
