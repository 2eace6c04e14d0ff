"""Inclusive thresholds at one stated precision (``bench.strategies.vector.passes``: score >= t - 1e-6).

A store keeps float32 vectors: a gold turn whose float64 cosine is 0.20 can come back as 0.19999996 (its float32
distance 0.80000004). At threshold 0.20 it must pass everywhere (strategies, the sweep's array path,
attribution, calibration, the minimal reference script); a turn at 0.1999 must stay out everywhere.
"""

import numpy as np
import pandas as pd
import pytest

from bench.analysis import attribution, calibration, embedders
from bench.strategies import lexical, relative
from bench.strategies import vector as V
from bench.strategies.spec import StrategySpec
from bench.selection.sweep import sweep
from bench.tools import minimal
from bench.replay.trace import Trace
from bench.types import Conversation, Corpus, Hit, Hits, Question, Turn

AT = float(np.float32(0.19999996))  # a float32 score, 0.2 - 4e-8: rounding, passes 0.20
BELOW = 0.1999  # 1e-4 under: stays out
HITS = [Hit("c1|t0", 0.5), Hit("c1|t1", AT), Hit("c1|t2", BELOW)]  # best first

CORPUS = Corpus(
    name="tiny",
    conversations=(Conversation("c1", tuple(Turn("c1", f"t{i}", "user", "u", f"text {i}", float(i), i) for i in range(3))),),
    questions=(Question("q1", "c1", "text?", None, ("t1", "t2")),),  # gold: the turn at 0.19999996 and the one at 0.1999
)


def test_the_rule_hand_worked():
    assert V.THRESHOLD_EPS == 1e-6
    assert V.passes(AT, 0.20) and not V.passes(BELOW, 0.20) and not V.passes(float("nan"), 0.20)
    assert V.passes(np.array([0.2, AT, 0.1999990, BELOW]), 0.20).tolist() == [True, True, True, False]  # 0.199999 = t - 1e-6 passes


def test_vector_strategies_keep_the_float32_hit_and_drop_the_one_below():
    for hits in (HITS, Hits(tuple(h.id for h in HITS), tuple(h.score for h in HITS))):
        assert V.above(hits, 0.20) == 2
        assert [h.id for h in V.threshold(hits, threshold=0.20)] == ["c1|t0", "c1|t1"]
        assert [h.id for h in V.hybrid(hits, threshold=0.20, k=5)] == ["c1|t0", "c1|t1"]
    tokens = {"c1|t0": 1, "c1|t1": 1, "c1|t2": 1}
    assert [h.id for h in V.token_budget(HITS, threshold=0.20, tokens=tokens, budget=10)] == ["c1|t0", "c1|t1"]
    # the other inclusive cuts: P(relevant) >= p and the vector side of RRF
    assert [h.id for h in relative.calibrated_threshold(HITS, threshold=0.20, calibrated=[0.5, AT, BELOW])] == ["c1|t0", "c1|t1"]
    q = Question("q", "c1", "zzz?", None, ())  # no word in common with any turn: the BM25 side is empty
    assert [h.id for h in lexical.rrf(HITS, question=q, eligible=CORPUS.conversations[0].turns, threshold=0.20, k=3)] == ["c1|t0", "c1|t1"]


def test_the_sweeps_array_path_equals_the_rule():
    trace = Trace(pd.DataFrame({"question_id": ["q1"], "conversation_id": ["c1"], "latency_ns": [1.0],
                                "hit_ids": [[h.id for h in HITS]], "hit_scores": [[h.score for h in HITS]],
                                "exact_scores": [[h.score for h in HITS]]}), {"dataset": "tiny", "embedder": "e", "backend": "exact"})
    specs = [StrategySpec("threshold", V.threshold, thresholded=True)]
    rows = sweep(trace, CORPUS, specs, (0.20,), {h.id: 1 for h in HITS}, answer_coverage=False)
    r = rows.iloc[0]
    assert (r.n_selected, r.n_correct, r.recall) == (2, 1, 0.5)  # t0, t1 selected; gold t1 in, t2 (0.1999) out


def test_attribution_and_calibration_use_the_same_rule():
    common = dict(visible_=True, uses_store=True, exact_rank=2, top_n=10, store_rank=1, cap_k=1, rank_passing=1)
    assert attribution.classify(store_score=AT, threshold=0.20, **common) == "cap"  # passed the threshold, cut by k=1
    assert attribution.classify(store_score=BELOW, threshold=0.20, **common) == "threshold"
    split = calibration.ScoreSplit(gold=np.array([AT, BELOW]), nongold=np.array([0.5, 0.1]), n_questions=1, gold_unreturned=0)
    assert calibration.pass_rates(split, [0.20]).iloc[0][["gold_pass", "nongold_pass"]].tolist() == [0.5, 0.5]
    assert embedders.bands(np.array([AT, BELOW]), np.array([0.1]), 0.5, reference=0.20)["gold_pass_0.20"] == 0.5


def test_the_minimal_reference_states_the_same_precision():
    assert minimal.EPS == V.THRESHOLD_EPS


def test_a_grid_on_a_stores_own_score_may_leave_0_1():
    from bench.strategies.spec import score_bounds, threshold_grid

    assert score_bounds("similarity") == (0, 1) and score_bounds(None) == (0, 1)
    with pytest.raises(ValueError, match=r"threshold -0.5 outside \[0, 1\]"):
        threshold_grid(-0.5, 0.5, 0.5)
    # pgvector ip's own score is -(q.v): thresholds below 0; chroma l2's reaches 4
    assert threshold_grid(-0.5, 0.5, 0.5, bounds=score_bounds("native")) == (-0.5, 0.0, 0.5)
    assert threshold_grid(3.5, 4, 0.5, bounds=score_bounds("one_minus_distance")) == (3.5, 4.0)
