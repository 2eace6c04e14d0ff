"""Choose on A, score on B (bench.analysis.choose): hand-worked on a three-setting grid."""

import math

import numpy as np

from bench.analysis.choose import best, choose_and_score, setting_index, take

NAN = math.nan


def test_best_hand_worked():
    assert best(np.array([0.2, 0.5, 0.4])) == 1
    assert best(np.array([0.2, 0.5, 0.4]), sign=-1) == 0  # minimise
    assert best(np.array([0.5, 0.5 - 1e-13, 0.1])) == 0  # a tie within 1e-12: the first
    assert best(np.array([0.5, 0.5, 0.1]), tie=np.array([9.0, 3.0, 0.0])) == 1  # tie: the lower tie-break value
    assert best(np.array([0.5, 0.4, 0.1]), feasible=np.array([False, True, True])) == 1
    assert best(np.array([NAN, NAN])) == -1 and best(np.array([0.3, 0.9]), feasible=np.array([False, False])) == -1
    assert best(np.array([NAN, 0.1, 0.1]), tie=np.array([0.0, NAN, 2.0])) == 2  # NaN tie-break counts as +inf
    np.testing.assert_array_equal(best(np.array([[0.1, 0.3], [0.4, 0.2], [NAN, NAN]])), [1, 0, -1])


def test_choose_and_score_hand_worked():
    # two folds x three settings: A (train) and B (held out), lined up
    a = np.array([[0.6, 0.7, 0.5], [NAN, NAN, NAN]])
    b = np.array([[0.9, 0.2, 0.1], [0.3, 0.4, 0.5]])
    idx, on_a, on_b = choose_and_score(a, b)
    np.testing.assert_array_equal(idx, [1, -1])
    np.testing.assert_array_equal(on_a, [0.7, NAN])
    np.testing.assert_array_equal(on_b, [0.2, NAN])  # A's best (0.7) is B's worst but one: the regret is B's to see
    idx, _, on_b = choose_and_score(a[:1], b[:1], sign=-1)  # minimise on A: setting 2 -> 0.1 on B
    assert (int(idx[0]), float(on_b[0])) == (2, 0.1)
    assert float(take(np.array([1.0, 2.0]), np.array(1))) == 2.0 and math.isnan(float(take(np.array([1.0]), np.array(-1))))


def test_setting_index():
    grid = np.array([0.1, 0.15, 0.2])
    assert setting_index(grid, 0.15000000001) == 1 and setting_index(grid, 0.3) == -1 and setting_index(grid, NAN) == -1
