"""bench.selection.basis: the store's own score mapped once into the score the strategies see.

A pgvector ``ip`` trace (native = -(q.v), lower is better): hits h0, h1, h2 with cosines 0.9, 0.5, 0.1, so native
-0.9, -0.5, -0.1. Under score=native the strategies see 0.9, 0.5, 0.1 (negated, best first) and a threshold t is
compared as -t: t = -0.4 keeps native <= -0.4, i.e. h0, h1.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bench.replay.trace import TRACE_COLUMNS, Trace
from bench.selection.basis import apply_basis, flips_thresholds, threshold_line
from bench.selection.sweep import sweep
from bench.strategies import vector as V
from bench.strategies.spec import StrategySpec
from bench.types import Conversation, Corpus, Question, Turn

CORPUS = Corpus(name="three", conversations=(Conversation("c1", tuple(Turn("c1", f"h{i}", "user", "user", f"x{i}", 1.0, i)
                                                                       for i in range(3))),),
                questions=(Question("q1", "c1", "?", None, ("h0",), "single-hop"),))
KEYS = ["c1|h0", "c1|h1", "c1|h2"]
META = {"dataset": "three", "embedder": "e", "backend": "pgvector", "roles": None,
        "score": {"metric": "ip", "native": "negative_dot", "lower_is_better": True, "store": "pgvector"}}


def trace(native=(-0.9, -0.5, -0.1), meta=META) -> Trace:
    row = {"question_id": "q1", "conversation_id": "c1", "latency_ns": 1.0, "hit_ids": KEYS, "hit_scores": [0.9, 0.5, 0.1],
           "exact_scores": [0.9, 0.5, 0.1], "gold_ids": [], "gold_exact_ranks": [], "native_scores": list(native)}
    return Trace(pd.DataFrame([row], columns=TRACE_COLUMNS), meta)


def test_native_distance_is_negated_once_and_thresholds_keep_lower_scores():
    t = apply_basis(trace(), "native")
    assert t.table["hit_scores"].iloc[0] == pytest.approx([0.9, 0.5, 0.1]) and flips_thresholds(t)
    rec: dict = {}
    sweep(t, CORPUS, [StrategySpec("threshold", V.threshold, thresholded=True)], (-0.4, -0.95), dict.fromkeys(KEYS, 1), record=rec)
    assert rec[("threshold", -0.4)]["q1"] == tuple(KEYS[:2]) and rec[("threshold", -0.95)]["q1"] == ()
    assert "keeping hits with score <= t" in threshold_line(t.meta) and "-(q.v)" in threshold_line(t.meta)


def test_similarity_is_the_trace_unchanged_and_says_nothing():
    original = trace()
    t = apply_basis(original, "similarity")
    assert t.table is original.table  # nothing remapped, nothing copied
    assert not flips_thresholds(t) and threshold_line(t.meta) == ""


def test_a_trace_without_native_scores_is_one_line():
    no_native = trace(native=(math.nan,) * 3)
    with pytest.raises(ValueError, match=r"question 'q1' of the pgvector trace has no native score for every hit"):
        apply_basis(no_native, "native")
    with pytest.raises(ValueError, match="recorded no native scores"):  # a TREC run: no store, no meta["score"]
        apply_basis(trace(meta={k: v for k, v in META.items() if k != "score"}), "one_minus_distance")
