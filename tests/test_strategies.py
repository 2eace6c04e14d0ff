"""Strategies on hand-worked candidate lists."""

import math

import pytest

from bench import strategies as S
from bench.types import Hit, Turn

# Candidates for one question, best first (similarity, higher is better).
HITS = (Hit("a", 0.91), Hit("b", 0.80), Hit("c", 0.75), Hit("d", 0.50), Hit("e", 0.30), Hit("f", 0.10))


def ids(hits):
    return [h.id for h in hits]


def test_limit_takes_k_best_regardless_of_score():
    assert ids(S.limit(HITS, k=3)) == ["a", "b", "c"]
    assert ids(S.limit(HITS, k=10)) == ["a", "b", "c", "d", "e", "f"]
    assert S.limit(HITS, k=0) == ()
    assert ids(S.limit(HITS, k=2, threshold=0.99)) == ["a", "b"]  # accepts and ignores a threshold


def test_threshold_is_inclusive():
    assert ids(S.threshold(HITS, threshold=0.75)) == ["a", "b", "c"]  # 0.75 >= 0.75 kept
    assert ids(S.threshold(HITS, threshold=0.76)) == ["a", "b"]
    assert S.threshold(HITS, threshold=0.95) == ()
    assert len(S.threshold(HITS, threshold=0.0)) == 6


def test_hybrid_thresholds_then_caps():
    assert ids(S.hybrid(HITS, threshold=0.3, k=3)) == ["a", "b", "c"]  # 5 pass, capped at 3
    assert ids(S.hybrid(HITS, threshold=0.78, k=5)) == ["a", "b"]  # 2 pass, under the cap
    assert S.hybrid(HITS, threshold=0.95, k=5) == ()


def test_full_context_returns_every_eligible_memory_in_order():
    eligible = tuple(Turn("c", t, "user", "u", "text", None, i) for i, t in enumerate("xyz"))
    out = S.full_context(HITS[:2], eligible=eligible)
    assert ids(out) == ["c|x", "c|y", "c|z"]
    assert all(math.isnan(h.score) for h in out)


def test_strategies_do_not_mutate_input():
    hits = list(HITS)
    S.hybrid(hits, threshold=0.5, k=2)
    S.threshold(hits, threshold=0.5)
    assert hits == list(HITS)


@pytest.mark.parametrize("fn", [S.limit, S.hybrid])
def test_negative_k_is_an_error(fn):
    with pytest.raises(ValueError, match="k must be >= 0"):
        fn(HITS, threshold=0.5, k=-1)


def test_threshold_required():
    with pytest.raises(ValueError, match="threshold is required"):
        S.threshold(HITS, threshold=None)
