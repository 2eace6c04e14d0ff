"""Vector strategies: pure selections over a question's store candidates (best first).

limit (top-k), threshold, hybrid (threshold then cap), token budget and query-type routing. The
contract every strategy follows is in ``bench.strategies.spec``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from operator import neg

import numpy as np

from bench.strategies.spec import Selection, strategy
from bench.types import Hit, Hits, Question, Turn

# Every inclusive cut ("score >= threshold") compares at one stated precision: a score passes when it is at least
# the threshold minus THRESHOLD_EPS. Stores keep float32 vectors and return float32 distances, so a cosine whose
# float64 value is 0.20 may arrive as 0.19999996; differences below 1e-6 are rounding, not a ranking. Every such
# comparison (strategies, the sweep's array path, attribution, calibration) goes through ``passes``/``lowest_passing``;
# the README's "Metric conventions" states the rule.
THRESHOLD_EPS = 1e-6


def lowest_passing(threshold):
    """The lowest score that passes ``threshold`` (a float or an array): threshold - THRESHOLD_EPS."""
    return threshold - THRESHOLD_EPS


def passes(score, threshold):
    """True where ``score`` >= ``threshold`` at the stated precision (floats or arrays; NaN never passes)."""
    return score >= lowest_passing(threshold)


# The seekdb agent-memory article's profile-question detector (English and Chinese), as regexes
# searched case-insensitively; configurable per strategy config.
PROFILE_PATTERNS = (
    r"\b(I am|I'm|I’m|my name|my job|good at|what do I do|who am I)\b",
    r"我(擅长|会|职业|工作|做什么|是什么|叫什么)",
)


def prefix(hits: Sequence[Hit], n: int) -> Sequence[Hit]:
    """The first ``n`` hits: a ``Hits`` slice (no per-hit objects) for a store's columnar hits, else a tuple."""
    out = hits[:n]
    return out if isinstance(out, Hits) else tuple(out)


@strategy(family="top_k", thresholded=False)
def limit(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None, k: int = 5) -> Sequence[Hit]:
    """Top-k ("limit"): the k best candidates, whatever their similarity."""
    if k < 0:
        raise ValueError(f"limit: k must be >= 0 (got {k})")
    return prefix(hits, k)


@strategy(family="cut", thresholded=True)
def threshold(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None) -> Sequence[Hit]:
    """Every candidate with similarity >= threshold (``passes``; bounded only by the search depth)."""
    if threshold is None:
        raise ValueError("threshold: a threshold is required")
    return prefix(hits, above(hits, threshold))


def above(hits: Sequence[Hit], threshold: float) -> int:
    """How many of ``hits`` (best first, as every store returns them) pass ``threshold`` (``passes``)."""
    low = lowest_passing(threshold)
    if isinstance(hits, Hits):
        return bisect.bisect_right(hits.scores, -low, key=neg)
    return bisect.bisect_right(hits, -low, key=lambda h: -h.score)


@strategy(family="cut", thresholded=True)
def hybrid(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None, k: int = 5) -> Sequence[Hit]:
    """Threshold, then cap at k."""
    if k < 0:
        raise ValueError(f"hybrid: k must be >= 0 (got {k})")
    if threshold is None:
        raise ValueError("hybrid: a threshold is required")
    return prefix(hits, min(k, above(hits, threshold)))


# The strategies above that keep the first n hits, n from the number of hits and how many of them score >= the
# threshold (int arrays, one entry per question; ``k`` as configured): the sweep computes their selections for
# every question at once with these (``bench.selection.sweep``; tests/selection/test_sweep.py checks they equal the functions).
PREFIX_RULES = {
    limit: lambda n_hits, n_above, k=5: np.minimum(n_hits, k),
    threshold: lambda n_hits, n_above: n_above,
    hybrid: lambda n_hits, n_above, k=5: np.minimum(n_above, k),
}


@strategy(family="top_k", thresholded=False, needs_tokens=True)
def token_budget(hits: Sequence[Hit], *, question: Question | None = None, eligible: Sequence[Turn] = (), threshold: float | None = None,
                 tokens: Mapping[str, int], budget: int = 256) -> tuple[Hit, ...]:
    """Best first until the next memory would push the summed line tokens past ``budget``.

    ``tokens`` maps memory key -> tokens of its injected line (format A, supplied by the sweep);
    the budget is checked on their sum (a memory that fits exactly is taken). The injected text
    joins the lines with newlines, and a newline that BPE does not merge into the end of the line
    before it costs a token more, so the row's ``tokens_injected`` can exceed ``budget`` by a few
    tokens (at most one per newline on LoCoMo and LongMemEval). With a threshold, only candidates
    with similarity >= threshold are considered (inclusive, like ``threshold``).
    """
    if budget < 0:
        raise ValueError(f"token_budget: budget must be >= 0 (got {budget})")
    out, used = [], 0
    for h in hits:
        if threshold is not None and not passes(h.score, threshold):
            break
        try:
            n = tokens[h.id]
        except KeyError:
            raise ValueError(f"token_budget: no token count for memory {h.id!r}") from None
        if used + n > budget:
            break
        out.append(h)
        used += n
    return tuple(out)


def is_profile_question(text: str, patterns: Sequence[str] = PROFILE_PATTERNS) -> bool:
    """True when any pattern (regex, case-insensitive) occurs in ``text``."""
    return any(re.search(p, text, re.IGNORECASE) for p in patterns)


@strategy(family="top_k", thresholded=False)
def route_by_query(hits: Sequence[Hit], *, question: Question, eligible: Sequence[Turn] = (), threshold: float | None = None,
                   patterns: Sequence[str] = PROFILE_PATTERNS, profile_k: int = 3, other_threshold: float = 0.65,
                   other_k: int = 5) -> Selection:
    """Query-type routing (seekdb agent-memory article): profile questions get the ``profile_k`` best;
    other questions get threshold ``other_threshold`` capped at ``other_k``.

    The route's role filter (user-only in the article) is the spec's ``roles``, pushed down to the
    store; both routes then read the same trace. ``threshold`` is ignored (the routes fix their own).
    """
    if is_profile_question(question.text, patterns):
        return Selection(limit(hits, k=profile_k), route="profile")
    return Selection(hybrid(hits, threshold=other_threshold, k=other_k), route="other")
