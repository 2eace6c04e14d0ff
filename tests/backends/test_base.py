"""best_first: the one ordering every adapter's hits go through."""

import math

import pytest

from bench.backends.base import best_first
from bench.types import Hits


def test_best_first_sorts_by_similarity_then_id():
    # 0.5 tie between "b" and "a": id order decides; 0.9 first
    assert best_first(["b", "c", "a"], [0.5, 0.9, 0.5]) == Hits(("c", "a", "b"), (0.9, 0.5, 0.5))


def test_best_first_keeps_the_best_score_of_a_repeated_id():
    # "a" arrives twice (a store returning duplicates): 0.7 wins over 0.2, one row kept
    assert best_first(["a", "b", "a"], [0.2, 0.4, 0.7]) == Hits(("a", "b"), (0.7, 0.4))


def test_best_first_empty_and_length_mismatch():
    assert best_first([], []) == Hits()
    with pytest.raises(ValueError):
        best_first(["a"], [0.1, 0.2])


def test_best_first_negative_and_inf_scores():
    out = best_first(["x", "y", "z"], [-0.3, math.inf, 0.0])
    assert out.ids == ("y", "z", "x")
