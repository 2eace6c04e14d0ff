"""Hits: the columnar search result every store returns."""

import pytest

from bench.types import Hit, Hits


def test_hits_is_a_sequence_of_hit():
    h = Hits(("a", "b", "c"), (0.9, 0.5, 0.1))
    assert len(h) == 3
    assert h[0] == Hit("a", 0.9) and h[-1] == Hit("c", 0.1)
    assert list(h) == [Hit("a", 0.9), Hit("b", 0.5), Hit("c", 0.1)]
    assert h[:2] == Hits(("a", "b"), (0.9, 0.5)) and isinstance(h[:2], Hits)
    assert [x.id for x in h] == ["a", "b", "c"]


def test_hits_equality_with_lists_and_hits():
    h = Hits(("a",), (0.5,))
    assert h == [Hit("a", 0.5)] and [Hit("a", 0.5)] == h
    assert h != [Hit("a", 0.4)] and h != Hits(("b",), (0.5,))
    assert Hits() == [] and Hits() != h
    assert h != "a"


def test_hits_rejects_mismatched_columns():
    with pytest.raises(ValueError, match="2 ids but 1 scores"):
        Hits(("a", "b"), (0.5,))


def test_hits_is_frozen_and_unhashable():
    h = Hits(("a",), (0.5,))
    with pytest.raises(AttributeError):
        h.ids = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        hash(h)
