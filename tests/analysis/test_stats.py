"""bench.analysis.stats: cluster sums, cluster bootstrap, the paired t test over conversations, the paired permutation
test, Holm, win/tie/loss.

Every expected value is worked out by hand next to its fixture.
"""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sstats

from bench.analysis import stats


def test_cluster_sums_skip_nan_and_sort_labels():
    values = np.array([[1.0, np.nan], [3.0, 4.0], [5.0, 6.0]])
    labels, sums, counts = stats.cluster_sums(values, ["b", "a", "b"])
    assert labels.tolist() == ["a", "b"]
    # a: row 1 -> [3, 4], counts [1, 1]; b: rows 0 and 2 -> [1+5, 0+6], counts [2, 1] (the NaN is not counted)
    assert sums.tolist() == [[3.0, 4.0], [6.0, 6.0]]
    assert counts.tolist() == [[1.0, 1.0], [2.0, 1.0]]
    with pytest.raises(ValueError, match="3 values but 2"):
        stats.cluster_sums(values, ["a", "b"])


def test_ratio_is_nan_where_nothing_counted():
    r = stats.ratio(np.array([3.0, 0.0]), np.array([2.0, 0.0]))
    assert r[0] == 1.5 and math.isnan(r[1])


def test_cluster_bootstrap_two_equal_clusters_hand_worked():
    # clusters with means 1 and 3 (one question each): resampling 2 clusters gives 1 (p 1/4), 2 (1/2), 3 (1/4);
    # with 2000 resamples the 2.5th and 97.5th percentiles are exactly 1 and 3.
    res = stats.cluster_bootstrap(np.array([1.0, 3.0]), np.array([1.0, 1.0]), n_resamples=2000, seed=0)
    assert float(res.point) == 2.0
    assert (float(res.low), float(res.high)) == (1.0, 3.0)
    assert res.distribution.shape == (2000,)
    assert set(np.unique(res.distribution)) == {1.0, 2.0, 3.0}
    assert abs(np.mean(res.distribution == 2.0) - 0.5) < 0.05


def test_cluster_bootstrap_is_a_ratio_over_questions_not_a_mean_of_cluster_means():
    # cluster A: 3 questions scoring 1 (sum 3); cluster B: 1 question scoring 0.
    # point = 3/4 = 0.75 (macro over questions), not (1 + 0)/2. Resamples: AA 6/6 = 1, AB 3/4, BB 0/2 = 0.
    res = stats.cluster_bootstrap(np.array([3.0, 0.0]), np.array([3.0, 1.0]), n_resamples=2000, seed=1)
    assert float(res.point) == 0.75
    assert (float(res.low), float(res.high)) == (0.0, 1.0)
    assert set(np.unique(res.distribution)) == {0.0, 0.75, 1.0}


def test_cluster_bootstrap_constant_statistic_and_single_cluster():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a constant statistic must not warn
        res = stats.cluster_bootstrap(np.array([2.0, 4.0, 6.0]), np.array([2.0, 4.0, 6.0]), n_resamples=200)
    assert (float(res.point), float(res.low), float(res.high)) == (1.0, 1.0, 1.0)
    one = stats.cluster_bootstrap(np.array([[1.0, 2.0]]), np.array([[1.0, 1.0]]))
    assert one.point.tolist() == [1.0, 2.0] and np.isnan(one.low).all() and np.isnan(one.high).all()


def test_cluster_bootstrap_vector_statistic_and_reduce():
    # two thresholds (columns); reduce = index of the best column. Cluster x prefers column 1, y column 0.
    sums = np.array([[0.0, 2.0], [3.0, 0.0]])  # x: means (0, 2); y: (3, 0)
    counts = np.ones_like(sums)
    res = stats.cluster_bootstrap(sums, counts, reduce=lambda m: np.argmax(m, axis=-1).astype(float), n_resamples=1000, seed=0)
    assert float(res.point) == 0.0  # pooled means (1.5, 1.0) -> column 0
    # xx -> 1; xy -> 0; yy -> 0: column 1 in about a quarter of the resamples
    assert abs(np.mean(res.distribution == 1.0) - 0.25) < 0.05
    vec = stats.cluster_bootstrap(sums, counts, n_resamples=500, seed=0)
    assert vec.point.tolist() == [1.5, 1.0]
    assert vec.low.tolist() == [0.0, 0.0] and vec.high.tolist() == [3.0, 2.0]


def test_holm_hand_worked():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> running max 0.06; NaN ignored (m = 4)
    adj = stats.holm([0.01, 0.04, 0.03, 0.005, np.nan])
    assert adj[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert math.isnan(adj[4])
    assert stats.holm([0.6, 0.9]).tolist() == [1.0, 1.0]  # capped at 1
    assert stats.holm([]).size == 0


def test_win_tie_loss_tolerance():
    assert stats.win_tie_loss(np.array([0.5, 0.5, 0.1 + 0.2, 0.0, np.nan]), np.array([0.4, 0.5, 0.3, 0.1, 1.0])) == (1, 2, 1)


ROWS = pd.DataFrame({
    # two configs (x, y) on three questions of two conversations, one adversarial question
    "strategy": ["x"] * 4 + ["y"] * 4,
    "threshold": [0.5] * 4 + [np.nan] * 4,
    "question_id": ["q1", "q2", "q3", "q4"] * 2,
    "conversation_id": ["c1", "c1", "c2", "c2"] * 2,
    "adversarial": [False, False, False, True] * 2,
    "f1": [1.0, 0.5, 0.0, np.nan, 0.0, 0.5, 0.0, np.nan],
    "empty": [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
})


def test_question_values_selects_config_and_handles_adversarial():
    x = stats.question_values(ROWS, {"strategy": "x", "threshold": 0.5}, "f1")
    assert x["question_id"].tolist() == ["q1", "q2", "q3"] and x["value"].tolist() == [1.0, 0.5, 0.0]
    y = stats.question_values(ROWS, {"strategy": "y", "threshold": float("nan")}, "f1")
    assert y["value"].tolist() == [0.0, 0.5, 0.0]
    assert stats.question_values(ROWS, {"strategy": "x"}, "abstained")["value"].tolist() == [1.0]  # q4 recalled nothing
    assert stats.question_values(ROWS, {"strategy": "y"}, "f1_abstain")["value"].tolist() == [0.0, 0.5, 0.0, 0.0]
    with pytest.raises(ValueError, match="no column 'backend'"):
        stats.question_values(ROWS, {"backend": "exact"}, "f1")
    with pytest.raises(ValueError, match="more than one row per question"):
        stats.question_values(ROWS, {"adversarial": False}, "f1")


def test_compare_pairs_holm_across_pairs():
    pairs = [({"strategy": "x", "threshold": 0.5}, {"strategy": "y", "threshold": float("nan")}),
             ({"strategy": "y", "threshold": float("nan")}, {"strategy": "y", "threshold": float("nan")})]
    res = stats.compare_pairs(ROWS, pairs, metric="f1")
    first = res.iloc[0]
    # d = (1, 0 | 0) in c1 | c2: sums (1, 0), counts (2, 1), m = 1/3; residuals 1/3, -1/3; se^2 = 2 * (2/9) / 9 -> se = 2/9;
    # t = 1.5 on 1 df (Cauchy): p = 1 - 2 atan(1.5) / pi = 0.3743
    assert (first["n"], first["n_conversations"], first["mean_a"], first["diff"]) == (3, 2, 0.5, pytest.approx(1 / 3))
    assert first["se"] == pytest.approx(2 / 9) and first["p"] == pytest.approx(1 - 2 * math.atan(1.5) / math.pi)
    assert (first["wins"], first["ties"], first["losses"]) == (1, 2, 0)
    assert res.iloc[1]["p"] == 1.0  # identical: d = 0, se = 0
    # Holm: 0.3743 * 2, then max(0.7487, 1 * 1); the levels: alpha / 2 for the smaller p, alpha for the larger
    assert res["p_holm"].tolist() == pytest.approx([2 * first["p"], 1.0]) and res["holm_level"].tolist() == [0.025, 0.05]
    assert not res["significant"].any()


def test_paired_t_test_two_conversations_by_hand():
    # d = (1, 1 | 1, 0) in conversations a | b: sums (2, 1), counts (2, 2), m = 0.75; residuals 0.5, -0.5;
    # se^2 = 2/1 * 0.5 / 16 = 1/16 -> se 0.25; t = 3 on 1 df: p = 1 - 2 atan(3) / pi = 0.2048; CI 0.75 +- 12.706 * 0.25
    r = stats.paired_t_test(np.array([1.0, 1.0, 1.0, 0.0, np.nan]), np.zeros(5), clusters=["a", "a", "b", "b", "b"])
    assert (r.n, r.n_questions, r.n_conversations, r.diff, r.se) == (2, 4, 2, 0.75, 0.25)
    assert r.p_value == pytest.approx(1 - 2 * math.atan(3) / math.pi)
    q = sstats.t.ppf(0.975, 1)
    assert (r.ci_low, r.ci_high) == (pytest.approx(0.75 - q * 0.25), pytest.approx(0.75 + q * 0.25))
    assert (r.wins, r.ties, r.losses) == (3, 1, 0)


def test_paired_t_test_one_conversation_and_empty():
    one = stats.paired_t_test(np.array([1.0, 0.0]), np.zeros(2), clusters=["a", "a"])
    assert one.diff == 0.5 and one.n_conversations == 1
    assert math.isnan(one.ci_low) and math.isnan(one.ci_high) and math.isnan(one.p_value) and math.isnan(one.se)
    empty = stats.paired_t_test(np.array([np.nan]), np.array([1.0]), clusters=["a"])
    assert empty.n == 0 and math.isnan(empty.p_value) and math.isnan(empty.diff)


def test_holm_level_hand_worked():
    # p-values at least as large: 0.01 -> 4 (0.0125), 0.04 -> 1 (0.05), 0.03 -> 2 (0.025), 0.005 -> 4 of 4 (0.0125);
    # ties count each other: 0.03, 0.03 -> alpha / 2 each
    assert stats.holm_level([0.01, 0.04, 0.03, 0.005, np.nan], 0.05)[:4].tolist() == pytest.approx([0.05 / 3, 0.05, 0.025, 0.0125])
    assert stats.holm_level([0.03, 0.03], 0.05).tolist() == [0.025, 0.025]


def test_compare_pairs_interval_and_p_agree_with_two_conversations():
    # the defect on 7255a18: d = (1, -0.9 | 1, -0.8) in c1 | c2: conversation means 0.05 and 0.1, so a bootstrap CI of the
    # difference [0.05, 0.1] excluded 0 beside a question-flip permutation p ~0.6. The t test over 2 conversations:
    # sums (0.1, 0.2), m = 0.075, residuals -0.05, 0.05; se^2 = 2 * 0.005 / 16 -> se 0.025; t = 3: p = 0.2048
    rows = pd.DataFrame({"strategy": ["x"] * 4 + ["y"] * 4, "question_id": ["q1", "q2", "q3", "q4"] * 2,
                         "conversation_id": ["c1", "c1", "c2", "c2"] * 2, "adversarial": [False] * 8,
                         "f1": [1.0, 0.0, 1.0, 0.1, 0.0, 0.9, 0.0, 0.9]})
    r = stats.compare_pairs(rows, [({"strategy": "x"}, {"strategy": "y"})], metric="f1").iloc[0]
    assert (r["ci_low"] > 0 or r["ci_high"] < 0) == (r["p"] < 0.05)  # CI clear of 0 <=> p < 1 - confidence
    assert r["diff"] == pytest.approx(0.075) and r["p"] == pytest.approx(1 - 2 * math.atan(3) / math.pi)
    assert r["ci_low"] == pytest.approx(0.075 - sstats.t.ppf(0.975, 1) * 0.025)


def test_question_values_leave_out_questions_without_gold():
    # q5: not adversarial, no gold (n_gold 0), recalled 3 memories for 99 tokens: not a scored question
    rows = pd.DataFrame({
        "strategy": ["x"] * 4, "question_id": ["q1", "q2", "q4", "q5"], "conversation_id": ["c1", "c1", "c2", "c2"],
        "adversarial": [False, False, True, False], "n_gold": [1, 2, 0, 0], "f1": [1.0, 0.5, np.nan, np.nan],
        "tokens_injected": [10.0, 20.0, 5.0, 99.0], "n_selected": [1, 2, 1, 3], "empty": [0.0, 0.0, 1.0, 0.0],
    })
    tok = stats.question_values(rows, {"strategy": "x"}, "tokens_injected")
    assert tok["question_id"].tolist() == ["q1", "q2"] and tok["value"].tolist() == [10.0, 20.0]
    assert stats.question_values(rows, {"strategy": "x"}, "n_selected")["value"].tolist() == [1.0, 2.0]
    fa = stats.question_values(rows, {"strategy": "x"}, "f1_abstain")
    assert fa["question_id"].tolist() == ["q1", "q2", "q4"] and fa["value"].tolist() == [1.0, 0.5, 1.0]
    assert stats.question_values(rows, {"strategy": "x"}, "abstained")["question_id"].tolist() == ["q4"]


def test_cluster_t_interval_hand_worked():
    from scipy import stats as sstats

    from bench.analysis.stats import cluster_t_interval
    # clusters a: (1, 1), b: (0, 0), c: (1, 0) -> mean 3/6 = 0.5; residuals s_c - m n_c = 1, -1, 0
    # se^2 = 3/2 * 2 / 36 = 1/12; t_{2, 0.975} = 4.303
    _, s, c = stats.cluster_sums(np.array([1, 1, 0, 0, 1, 0.0]), ["a", "a", "b", "b", "c", "c"])
    r = cluster_t_interval(s, c)
    se = (1 / 12) ** 0.5
    q = sstats.t.ppf(0.975, 2)
    assert float(r.point) == 0.5 and float(r.n_clusters) == 3
    assert abs(float(r.se) - se) < 1e-12
    assert abs(float(r.low) - (0.5 - q * se)) < 1e-12 and abs(float(r.high) - (0.5 + q * se)) < 1e-12
    # predicting 3 new conversations: sqrt(1 + 3/3) wider
    assert abs(float(r.pred_high) - (0.5 + q * se * 2 ** 0.5)) < 1e-12
    # p of mean == 0: t = 0.5 / se on 2 df
    assert abs(float(r.p_value) - 2 * sstats.t.sf(0.5 / se, 2)) < 1e-12


def test_cluster_t_interval_one_cluster_is_undefined():
    from bench.analysis.stats import cluster_t_interval
    _, s, c = stats.cluster_sums(np.array([1.0, 0.0]), ["a", "a"])
    r = cluster_t_interval(s, c)
    assert float(r.point) == 0.5
    assert np.isnan(r.low) and np.isnan(r.high) and np.isnan(r.pred_low) and np.isnan(r.p_value)


def test_mean_intervals_t_by_default_clipped_to_the_metric_range():
    from scipy import stats as sstats

    # the hand-worked clusters above: a (1, 1), b (0, 0), c (1, 0): mean 0.5, se sqrt(1/12), t(2 df) 4.303:
    # CI 0.5 -+ 1.242 -> clipped to [0, 1]; unclipped (bounds left open) it is the t interval itself
    _, s, c = stats.cluster_sums(np.array([1, 1, 0, 0, 1, 0.0]), ["a", "a", "b", "b", "c", "c"])
    half = sstats.t.ppf(0.975, 2) * (1 / 12) ** 0.5
    r = stats.mean_intervals(s, c, bounds=(0.0, 1.0))
    assert (float(r.low), float(r.high), float(r.pred_low), float(r.pred_high)) == (0.0, 1.0, 0.0, 1.0)
    open_ = stats.mean_intervals(s, c)
    assert float(open_.low) == pytest.approx(0.5 - half) and float(open_.pred_high) == pytest.approx(0.5 + half * 2 ** 0.5)
    # a bootstrap method replaces the CI only; the prediction interval stays t (3 clusters, means 1, 0, 0.5)
    b = stats.mean_intervals(s, c, method="percentile", n_resamples=2000, seed=0)
    assert (float(b.low), float(b.high)) == (0.0, 1.0) and float(b.pred_high) == pytest.approx(0.5 + half * 2 ** 0.5)
    with pytest.raises(ValueError, match="method must be one of"):
        stats.mean_intervals(s, c, method="normal")
