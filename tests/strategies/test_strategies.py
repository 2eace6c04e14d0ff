"""Strategies on hand-worked candidate lists."""

import math

import pytest

from bench.strategies import baselines as B
from bench.strategies import spec as SP
from bench.strategies import vector as V
from bench.types import Hit, Hits, Question, Turn
from bench.replay.visibility import Memories

# Candidates for one question, best first (similarity, higher is better).
HITS = (Hit("a", 0.91), Hit("b", 0.80), Hit("c", 0.75), Hit("d", 0.50), Hit("e", 0.30), Hit("f", 0.10))


def ids(hits):
    return [h.id for h in hits]


def test_limit_takes_k_best_regardless_of_score():
    assert ids(V.limit(HITS, k=3)) == ["a", "b", "c"]
    assert ids(V.limit(HITS, k=10)) == ["a", "b", "c", "d", "e", "f"]
    assert V.limit(HITS, k=0) == ()
    assert ids(V.limit(HITS, k=2, threshold=0.99)) == ["a", "b"]  # accepts and ignores a threshold


def test_threshold_is_inclusive():
    assert ids(V.threshold(HITS, threshold=0.75)) == ["a", "b", "c"]  # 0.75 >= 0.75 kept
    assert ids(V.threshold(HITS, threshold=0.76)) == ["a", "b"]
    assert V.threshold(HITS, threshold=0.95) == ()
    assert len(V.threshold(HITS, threshold=0.0)) == 6


def test_hybrid_thresholds_then_caps():
    assert ids(V.hybrid(HITS, threshold=0.3, k=3)) == ["a", "b", "c"]  # 5 pass, capped at 3
    assert ids(V.hybrid(HITS, threshold=0.78, k=5)) == ["a", "b"]  # 2 pass, under the cap
    assert V.hybrid(HITS, threshold=0.95, k=5) == ()


def test_full_context_returns_every_eligible_memory_in_order():
    eligible = tuple(Turn("c", t, "user", "u", "text", None, i) for i, t in enumerate("xyz"))
    out = B.full_context(HITS[:2], eligible=eligible)
    assert ids(out) == ["c|x", "c|y", "c|z"]
    assert all(math.isnan(h.score) for h in out)


def test_full_context_answers_each_call_from_its_own_arguments():
    # the sweep hands one tuple per conversation; alternating conversations (and a list) must never see another's answer
    c1 = tuple(Turn("c", t, "user", "u", "text", None, i) for i, t in enumerate("xyz"))
    c2 = tuple(Turn("d", t, "user", "u", "text", None, i) for i, t in enumerate("pq"))
    m1, m2 = Memories(c1), Memories(c2)  # what the sweep hands over: keys computed once per tuple
    for eligible, want in ((c1, ["c|x", "c|y", "c|z"]), (c2, ["d|p", "d|q"]), (c1, ["c|x", "c|y", "c|z"]),
                           (list(c2[:1]), ["d|p"]), (m2, ["d|p", "d|q"]), (m1, ["c|x", "c|y", "c|z"]), (m2, ["d|p", "d|q"]),
                           ((), []), (Memories(), [])):
        assert ids(B.full_context((), eligible=eligible)) == want
    assert [n for n in vars(B) if n.startswith("_") and not n.startswith("__")] == []  # no module memo (the old _FULL)


def test_strategies_do_not_mutate_input():
    hits = list(HITS)
    V.hybrid(hits, threshold=0.5, k=2)
    V.threshold(hits, threshold=0.5)
    assert hits == list(HITS)


@pytest.mark.parametrize("fn", [V.limit, V.hybrid])
def test_negative_k_is_an_error(fn):
    with pytest.raises(ValueError, match="k must be >= 0"):
        fn(HITS, threshold=0.5, k=-1)


def test_threshold_required():
    with pytest.raises(ValueError, match="threshold is required"):
        V.threshold(HITS, threshold=None)


# ---- recency, token budget, routing, Selection ------------------------------------------------

ELIGIBLE = tuple(Turn("c", f"t{i}", "user", "u", "text", None, i) for i in range(4))


def test_above_counts_the_inclusive_prefix():
    assert V.above(HITS, 0.75) == 3  # a, b, c (0.75 kept)
    assert V.above(HITS, 0.99) == 0
    assert V.above(HITS, 0.0) == 6
    assert V.above((), 0.5) == 0


def test_recency_last_k_most_recent_first():
    assert ids(B.recency(HITS, eligible=ELIGIBLE, k=2)) == ["c|t3", "c|t2"]
    assert ids(B.recency(HITS, eligible=ELIGIBLE, k=9)) == ["c|t3", "c|t2", "c|t1", "c|t0"]
    assert B.recency(HITS, eligible=ELIGIBLE, k=0) == ()


def test_token_budget_best_first_until_the_budget():
    tokens = {"a": 40, "b": 30, "c": 50, "d": 10, "e": 5, "f": 5}
    assert ids(V.token_budget(HITS, tokens=tokens, budget=70)) == ["a", "b"]  # 40 + 30 = 70 fits exactly
    assert ids(V.token_budget(HITS, tokens=tokens, budget=119)) == ["a", "b"]  # c would make 120: stop there
    assert ids(V.token_budget(HITS, tokens=tokens, budget=39)) == []  # the best alone is too big
    assert ids(V.token_budget(HITS, tokens=tokens, budget=1000, threshold=0.6)) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="no token count for memory 'a'"):
        V.token_budget(HITS, tokens={}, budget=10)


@pytest.mark.parametrize("text, profile", [
    ("What am I good at?", True),
    ("Who am I?", True),
    ("What do I do for a living?", True),
    ("我擅长什么？", True),
    ("我叫什么名字", True),
    ("What is Caroline's job?", False),  # third person: not a profile question
    ("When did Melanie paint a sunrise?", False),
    ("Is Miami nice?", False),  # "I am" must be whole words, not inside "Miami"
])
def test_profile_detector(text, profile):
    assert V.is_profile_question(text) is profile


def test_route_by_query_hand_worked():
    prof = V.route_by_query(HITS, question=Question("q", "c", "What is my name?", None, ()))
    assert prof.route == "profile" and ids(prof) == ["a", "b", "c"]  # limit 3 whatever the score
    other = V.route_by_query(HITS, question=Question("q", "c", "Where is the park?", None, ()))
    assert other.route == "other" and ids(other) == ["a", "b", "c"]  # >= 0.65: a, b, c (cap 5)
    other = V.route_by_query(HITS, question=Question("q", "c", "Where is the park?", None, ()), other_threshold=0.3, other_k=4)
    assert ids(other) == ["a", "b", "c", "d"]  # 5 pass 0.3, capped at 4
    custom = V.route_by_query(HITS, question=Question("q", "c", "Where is the park?", None, ()), patterns=[r"\bpark\b"], profile_k=1)
    assert custom.route == "profile" and ids(custom) == ["a"]


def test_selection_iterates_like_a_tuple_of_hits():
    sel = SP.Selection((Hit("x", 0.5), Hit("y", 0.4)), route="r")
    assert [h.id for h in sel] == ["x", "y"] and len(sel) == 2


def test_token_budget_threshold_is_inclusive():
    # HITS: a .91, b .80, c .75, d .50; c's similarity equals the threshold 0.75, so c is considered (like ``threshold``)
    tokens = {"a": 40, "b": 30, "c": 50, "d": 10, "e": 5, "f": 5}
    assert ids(V.token_budget(HITS, tokens=tokens, budget=1000, threshold=0.75)) == ["a", "b", "c"]
    assert ids(V.token_budget(HITS, tokens=tokens, budget=1000, threshold=0.76)) == ["a", "b"]
    # both edges at once: 40 + 30 + 50 = 120 fits a budget of 120 exactly, and c sits on the threshold
    assert ids(V.token_budget(HITS, tokens=tokens, budget=120, threshold=0.75)) == ["a", "b", "c"]
    columnar = Hits(tuple(h.id for h in HITS), tuple(h.score for h in HITS))  # a store's columnar hits
    assert ids(V.token_budget(columnar, tokens=tokens, budget=1000, threshold=0.75)) == ["a", "b", "c"]
    assert V.above(HITS, 0.75) == len(V.token_budget(HITS, tokens=tokens, budget=1000, threshold=0.75))  # same cut as threshold
