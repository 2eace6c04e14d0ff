"""bench.tools.minimal_sweep (make bench PS4's baseline): a hand-worked example, and the same rows as bench.selection.sweep."""

import numpy as np

from bench.tools import minimal_sweep as M


def test_hand_worked_rows():
    # m1 (ts 1), m2 (ts 2); the question is asked at 1.5: full context sees m1 only. Hits m2 (0.8), m1 (0.3); gold m1.
    x = M.Inputs(keys=["m1", "m2"], conversation=np.array(["c", "c"], dtype=object), ts=np.array([1.0, 2.0]),
                 joined=np.array([4, 6]), last=np.array([3, 5]), fixed=0, per_gap=0, q_conversation=np.array(["c"], dtype=object),
                 asked_at=np.array([1.5]), adversarial=np.array([False]), hit_ids=[["m2", "m1"]], hit_scores=[[0.8, 0.3]],
                 gold_ids=[["m1"]])
    out = M.rows(x, limit_k=1, hybrid_k=1, thresholds=(0.5, 0.2))
    assert out["strategy"].tolist() == ["limit1", "threshold", "threshold", "hybrid1", "hybrid1", "full_context"]
    assert out["n_selected"].tolist() == [1, 1, 2, 1, 1, 1]  # threshold 0.2 takes both hits
    assert out["n_correct"].tolist() == [0, 0, 1, 0, 0, 1]
    assert out["tokens_injected"].tolist() == [5, 5, 9, 5, 5, 3]  # m2 alone: last 5; m2 then m1: joined 6 + last 3
    assert out["precision"].tolist() == [0.0, 0.0, 0.5, 0.0, 0.0, 1.0]
    np.testing.assert_allclose(out["f1"], [0.0, 0.0, 2 / 3, 0.0, 0.0, 1.0])
    s = M.summary(out, x.adversarial)
    assert [r["recall"] for r in s] == [0.0, 0.0, 1.0, 0.0, 0.0, 1.0] and s[0]["n_questions"] == 1


def test_same_rows_as_the_package_sweep_on_a_synthetic_trace():
    from bench.tools.perf.ps4 import synthetic_trace, sweep_pair

    corpus, trace = synthetic_trace(12, 30, seed=3)
    got = sweep_pair(corpus, trace, repeats=1)
    assert got["rows_max_abs_diff"] == 0.0 and got["rows"] == 12 * 36
