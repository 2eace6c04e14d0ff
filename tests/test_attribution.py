"""bench.analysis.attribution: every missed gold memory gets one cause; selections come from the real sweep.

Fixture: one conversation c1 of five turns (t0 user, t1 assistant, t2 user, t3 user, t4 assistant,
said at times 1..5). Exact cosine to every question (all vectors 2-d, question = [1, 0]):
t2 .8, t1 .75, t3 .7, t0 .5, t4 .3 -> exact ranks t2 1, t1 2, t3 3, t0 4, t4 5.
q1 (asked after everything) has gold t0, t1, t3, t4; the store returned t2 .8, t3 .7, t0 .5, t4 .3
(t1 missing: an ANN miss). q2 is adversarial. q3 is asked at time 3 with gold t3 (said at 4).
"""

import functools
import math

import numpy as np
import pandas as pd
import pytest

from bench import types as T
from bench.analysis import attribution as A
from bench.strategies import vector as V
from bench.strategies.spec import StrategySpec
from bench.trace import Trace, question_filter, visible
from bench.types import Conversation, Corpus, Question, Turn

ROLES = ["user", "assistant", "user", "user", "assistant"]
TURNS = tuple(Turn("c1", f"t{i}", r, r, f"text {i}", float(i + 1), i) for i, r in enumerate(ROLES))
CORPUS = Corpus(
    name="tiny",
    conversations=(Conversation("c1", TURNS),),
    questions=(
        Question("q1", "c1", "what?", None, ("t0", "t1", "t3", "t4"), "single-hop"),
        Question("q2", "c1", "weather?", None, (), "adversarial", adversarial=True),
        Question("q3", "c1", "later?", 3.0, ("t3",), "temporal"),
    ),
)
SIMS = [0.5, 0.75, 0.8, 0.7, 0.3]  # t0..t4
TV = np.array([[s, math.sqrt(1 - s * s)] for s in SIMS], dtype=np.float32)
QV = np.array([[1.0, 0.0]] * 3, dtype=np.float32)
TRACE = Trace(pd.DataFrame({
    "question_id": ["q1", "q2", "q3"], "conversation_id": ["c1"] * 3, "latency_ns": [1000, 1000, 1000],
    "hit_ids": [["c1|t2", "c1|t3", "c1|t0", "c1|t4"], ["c1|t0"], ["c1|t2", "c1|t0"]],
    "hit_scores": [[0.8, 0.7, 0.5, 0.3], [0.2], [0.8, 0.5]],
    "exact_scores": [[0.8, 0.7, 0.5, 0.3], [0.2], [0.8, 0.5]],
}), {"dataset": "tiny", "embedder": "fake", "backend": "ann", "roles": None})
TOKENS = {t.key: 10 for t in TURNS}

HYBRID = StrategySpec("hybrid1", functools.partial(V.hybrid, k=1), thresholded=True)
USER_THR = StrategySpec("user_thr", V.threshold, thresholded=True, roles=("user",))


def drop_all(hits, *, question=None, eligible=(), threshold=None):  # a "tier" policy that keeps nothing
    return ()


def last_turn(hits, *, question=None, eligible=(), threshold=None):
    return tuple(T.Hit(t.key, 0.0) for t in eligible[-1:])


TIER = StrategySpec("tier", drop_all, thresholded=True)
RECENT = StrategySpec("recent1", last_turn, thresholded=False, uses_store=False)


@pytest.mark.parametrize("kwargs, cause", [
    (dict(visible_=False), "filter"),
    (dict(uses_store=False), "policy"),
    (dict(exact_rank=11), "embedding"),
    (dict(exact_rank=None, store_rank=None), "unreturned"),
    (dict(store_rank=None), "store"),
    (dict(store_score=0.4), "threshold"),
    (dict(store_score=float("nan")), "threshold"),
    (dict(rank_passing=5), "cap"),
    ({}, "decay/tier"),
])
def test_classify_order(kwargs, cause):
    base = dict(visible_=True, uses_store=True, exact_rank=3, top_n=10, store_rank=2, store_score=0.6,
                threshold=0.5, cap_k=5, rank_passing=2)
    assert A.classify(**{**base, **kwargs}) == cause


def test_exact_ranks_from_vectors_with_filters_and_ties():
    ranks = A.exact_ranks(CORPUS, TV, QV, roles=None)
    assert ranks["q1"] == {"c1|t0": 4, "c1|t1": 2, "c1|t3": 3, "c1|t4": 5}
    assert ranks["q3"] == {}  # t3 is said after q3 was asked: not visible, no rank
    assert "q2" not in ranks  # no gold
    user = A.exact_ranks(CORPUS, TV, QV, roles=("user",))
    assert user["q1"] == {"c1|t0": 3, "c1|t3": 2}  # visible: t0 .5, t2 .8, t3 .7
    tie = TV.copy()
    tie[3] = tie[0]  # t3 now scores .5 like t0: key order puts t0 first
    assert A.exact_ranks(CORPUS, tie, QV, roles=None)["q1"] == {"c1|t0": 3, "c1|t1": 2, "c1|t3": 4, "c1|t4": 5}


def test_visible_matches_runner():
    vis = A._Visible(CORPUS)
    for q in CORPUS.questions:
        for roles in (None, ("user",), ("assistant",)):
            want = [t.key for t in TURNS if visible(t, question_filter(q, roles=roles))]
            assert vis(q, roles).tolist() == want


def test_trace_ranks_only_for_complete_traces():
    assert A.trace_ranks(TRACE.table, CORPUS, roles=None) == {}  # q1: 4 hits of 5 visible; q3: 2 of 3
    full = TRACE.table.copy()
    full.at[0, "hit_ids"] = ["c1|t2", "c1|t1", "c1|t3", "c1|t0", "c1|t4"]
    full.at[0, "exact_scores"] = [0.8, 0.75, 0.7, 0.5, 0.3]
    assert A.trace_ranks(full, CORPUS, roles=None)["q1"] == {"c1|t0": 4, "c1|t1": 2, "c1|t3": 3, "c1|t4": 5}


def test_replay_records_the_sweeps_selections():
    seen = A.replay(TRACE, CORPUS, [HYBRID, TIER, RECENT], [0.55], TOKENS)
    # hybrid k=1 at .55: passing t2 .8, t3 .7 -> t2
    assert seen[("hybrid1", 0.55)] == {"q1": ("c1|t2",), "q2": (), "q3": ("c1|t2",)}
    assert seen[("tier", 0.55)] == {"q1": (), "q2": (), "q3": ()}
    assert seen[("recent1", None)]["q1"] == ("c1|t4",) and seen[("recent1", None)]["q3"] == ("c1|t2",)


def causes(misses):
    return dict(zip(misses["question_id"] + ":" + misses["memory"].str.slice(3), misses["cause"]))


def test_attribute_every_cause_hand_worked():
    ranks = A.exact_ranks(CORPUS, TV, QV, roles=None)
    seen = A.replay(TRACE, CORPUS, [HYBRID, TIER, RECENT, USER_THR], [0.55], TOKENS)
    m = A.attribute(TRACE, CORPUS, HYBRID, 0.55, seen[("hybrid1", 0.55)], ranks, top_n=4)
    # t0 returned at .5 < .55 (rank 4 <= 4): threshold; t1 rank 2, not returned: store; t3 passes but the
    # k=1 cap took t2: cap; t4 rank 5 > top 4: embedding; q3's gold t3 is said after q3: filter
    assert causes(m) == {"q1:t0": "threshold", "q1:t1": "store", "q1:t3": "cap", "q1:t4": "embedding", "q3:t3": "filter"}
    r = m.set_index(["question_id", "memory"]).loc[("q1", "c1|t3")]
    assert (r["exact_rank"], r["store_rank"], r["store_score"], r["threshold"], r["backend"]) == (3, 2, 0.7, 0.55, "ann")
    tier = A.attribute(TRACE, CORPUS, TIER, 0.55, seen[("tier", 0.55)], ranks, top_n=4)
    assert causes(tier)["q1:t3"] == "decay/tier"  # passed store and threshold, no cap: the policy dropped it
    recent = A.attribute(TRACE, CORPUS, RECENT, None, seen[("recent1", None)], ranks, top_n=4)
    assert causes(recent) == {"q1:t0": "policy", "q1:t1": "policy", "q1:t3": "policy", "q3:t3": "filter"}
    assert math.isnan(recent["threshold"].iloc[0])
    user_ranks = A.exact_ranks(CORPUS, TV, QV, roles=("user",))
    user = A.attribute(TRACE, CORPUS, USER_THR, 0.55, seen[("user_thr", 0.55)], user_ranks, top_n=4)
    assert causes(user) == {"q1:t0": "threshold", "q1:t1": "filter", "q1:t4": "filter", "q3:t3": "filter"}
    unknown = A.attribute(TRACE, CORPUS, HYBRID, 0.55, seen[("hybrid1", 0.55)], {}, top_n=4)
    assert causes(unknown)["q1:t1"] == "unreturned" and causes(unknown)["q1:t4"] == "threshold"


def test_counts_per_group():
    ranks = A.exact_ranks(CORPUS, TV, QV, roles=None)
    seen = A.replay(TRACE, CORPUS, [HYBRID], [0.55], TOKENS)
    m = A.attribute(TRACE, CORPUS, HYBRID, 0.55, seen[("hybrid1", 0.55)], ranks, top_n=4)
    by_strategy = A.counts(m, by=["strategy", "threshold"]).iloc[0]
    assert by_strategy["missed"] == 5
    assert [by_strategy[f"{c} miss"] for c in A.CAUSES] == [1, 0, 1, 0, 1, 1, 1, 0]
    by_cat = A.counts(m).set_index("category")
    assert by_cat.loc["single-hop", "missed"] == 4 and by_cat.loc["temporal", "filter miss"] == 1
    empty = A.counts(m.iloc[0:0])
    assert empty.empty and "embedding miss" in empty.columns
