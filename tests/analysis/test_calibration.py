"""bench.analysis.calibration: gold vs non-gold score split, quantiles, overlap band, AUC, pass rates, wording.

Fixture: q1 returns a .9 (gold), b .5, c .6 (gold), and misses gold z; q2 has no gold (skipped);
q3 is adversarial (skipped); q4 returns f .1 and g .7 and misses its gold x.
-> gold scores [.9, .6], non-gold [.5, .1, .7], 2 unreturned gold, 2 contributing questions.
"""

import math

import numpy as np
import pandas as pd
import pytest

from bench.analysis import calibration as C

TABLE = pd.DataFrame({
    "question_id": ["q1", "q2", "q3", "q4"],
    "hit_ids": [["a", "b", "c"], ["d", "e"], ["h"], ["f", "g"]],
    "hit_scores": [[0.9, 0.5, 0.6], [0.1, 0.7], [0.99], [0.1, 0.7]],
})
GOLD = {"q1": ["a", "c", "z"], "q2": [], "q3": ["h"], "q4": ["x"]}


@pytest.fixture()
def split():
    return C.split_scores(TABLE, GOLD, skip={"q3"})


def test_split_scores(split):
    assert sorted(split.gold.tolist()) == [0.6, 0.9]
    assert sorted(split.nongold.tolist()) == [0.1, 0.5, 0.7]
    assert (split.n_questions, split.gold_unreturned) == (2, 2)


def test_calibrate_hand_worked(split):
    cal = C.calibrate(split, coverage=0.9)
    # gold [.6, .9]: 5th pct = .6 + .05*.3 = .615, 95th = .885; non-gold [.1, .5, .7]: 5th at position .1 -> .14,
    # 95th at position 1.9 -> .5 + .9*.2 = .68. Overlap = [max(.615, .14), min(.885, .68)] = [.615, .68]
    assert cal.gold_range == pytest.approx((0.615, 0.885))
    assert cal.nongold_range == pytest.approx((0.14, 0.68))
    assert cal.overlap == pytest.approx((0.615, 0.68))
    assert cal.gold_q[0.5] == pytest.approx(0.75) and cal.nongold_q[0.5] == pytest.approx(0.5)
    # AUC: .9 beats all 3 non-gold, .6 beats .5 and .1 -> 5 of 6 pairs
    assert cal.auc == pytest.approx(5 / 6)
    assert (cal.n_gold, cal.n_nongold, cal.gold_unreturned, cal.n_questions) == (2, 3, 2, 2)


def test_auc_counts_ties_half():
    assert C.auc(np.array([0.5]), np.array([0.5, 0.2])) == pytest.approx(0.75)
    assert math.isnan(C.auc(np.array([]), np.array([0.1])))


def test_pass_rates_and_ecdf(split):
    r = C.pass_rates(split, [0.5, 0.65])
    # gold >= .5: 2/2, >= .65: 1/2; non-gold >= .5: {.5, .7} 2/3, >= .65: 1/3
    assert r["gold_pass"].tolist() == pytest.approx([1.0, 0.5])
    assert r["nongold_pass"].tolist() == pytest.approx([2 / 3, 1 / 3])
    assert C.ecdf(split.nongold, np.array([0.1, 0.6])).tolist() == pytest.approx([1 / 3, 2 / 3])
    assert np.isnan(C.ecdf(np.array([]), np.array([0.5]))).all()


def test_no_overlap_and_wording():
    sep = C.ScoreSplit(np.array([0.8, 0.9]), np.array([0.1, 0.2]), 1, 0)
    cal = C.calibrate(sep)
    assert math.isnan(cal.overlap[0]) and math.isnan(cal.overlap[1]) and cal.auc == 1.0
    text = C.describe(cal, sep, thresholds=(0.7,))
    assert "do not overlap" in text and "At 0.70, 100.0% of gold and 0.00% of non-gold" in text


def test_describe_states_where_scores_live(split):
    text = C.describe(C.calibrate(split), split, thresholds=(0.65,))
    assert "score 0.61–0.89" in text and "irrelevant ones 0.14–0.68" in text and "overlap on 0.61–0.68" in text
    assert "AUC 0.833" in text and "At 0.65, 50.0% of gold and 33.33% of non-gold" in text
    assert "2 gold memories were not returned" in text
    empty = C.ScoreSplit(np.empty(0), np.array([0.1]), 0, 3)
    assert "No gold candidate" in C.describe(C.calibrate(empty), empty)
    with pytest.raises(ValueError, match="coverage"):
        C.calibrate(empty, coverage=1.5)
