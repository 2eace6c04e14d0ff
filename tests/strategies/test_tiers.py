"""Dual-tier memory: decay formula, L1/L2 split, floor, promotion carried by the state. Values worked by hand."""

import math

import pytest

from bench.strategies.tiers import DAY, MemoryState, TierState, decay, dual_tier
from bench.types import Hit, Question, Turn


def turn(i, day):
    return Turn("c", f"m{i}", "user", "u", f"text {i}", day * DAY, i)


# memories said on days 0, 10, 20, 30, 40; "now" = day 40 (the latest, the question has no asked_at)
ELIGIBLE = tuple(turn(i, 10 * i) for i in range(5))
HITS = (Hit("c|m4", 0.95), Hit("c|m0", 0.90), Hit("c|m2", 0.80), Hit("c|m1", 0.75), Hit("c|m3", 0.50))
Q = Question("q1", "c", "?", None, ("m2",))


def ids(sel):
    return [h.id for h in sel.hits]


def test_decay_formula_hand_worked():
    assert decay(age_days=0, access_count=0, days_since_access=0) == 1.0
    # exp(-0.02*10) * (1 + min(0.1*2, 0.4)) * exp(-0.05*4) = 0.81873 * 1.2 * 0.81873 = 0.80438
    assert decay(age_days=10, access_count=2, days_since_access=4) == pytest.approx(0.80438, abs=1e-5)
    # the access boost is capped at +0.4
    assert decay(age_days=0, access_count=9, days_since_access=0) == pytest.approx(1.4)
    assert decay(age_days=10, access_count=0, days_since_access=0, age_rate=0.1) == pytest.approx(math.exp(-1))


def test_l1_always_l2_above_threshold_and_floor():
    sel = dual_tier(HITS, question=Q, eligible=ELIGIBLE, threshold=0.7, l1_turns=1)
    # L1 = m4 (last turn). L2 candidates >= 0.7 outside L1: m0, m2, m1. Never recalled: idle = age,
    # retention = 0.5 * exp(-0.07 * age): m0 (40 d) 0.0304, m1 (30 d) 0.0612 -> below floor 0.1; m2 (20 d) 0.1233 kept
    assert ids(sel) == ["c|m4", "c|m2"]
    assert sel.tiers == ("L1", "L2")
    assert sel.hits[1].score == pytest.approx(0.80 * 0.5 * math.exp(-1.4))
    assert sel.state.memories == {"c|m2": MemoryState(0.65, 1, 40 * DAY)}  # promoted: +0.15, one access, now


def test_lower_floor_ranks_by_similarity_times_retention_and_caps():
    sel = dual_tier(HITS, question=Q, eligible=ELIGIBLE, threshold=0.7, l1_turns=1, floor=0.05)
    # m2: 0.80 * 0.1233 = 0.0986; m1: 0.75 * 0.0612 = 0.0459; m0 0.0304 still below 0.05
    assert ids(sel) == ["c|m4", "c|m2", "c|m1"]
    capped = dual_tier(HITS, question=Q, eligible=ELIGIBLE, threshold=0.7, l1_turns=1, floor=0.05, k=1)
    assert ids(capped) == ["c|m4", "c|m2"]
    assert set(capped.state.memories) == {"c|m2"}  # only injected memories are promoted


def test_promotion_carries_over_to_the_next_question():
    first = dual_tier(HITS, question=Q, eligible=ELIGIBLE, threshold=0.7, l1_turns=1)
    second = dual_tier(HITS, question=Q, eligible=ELIGIBLE, threshold=0.7, l1_turns=1, state=first.state)
    # m2 now: importance 0.65, 1 access, accessed today: 0.65 * exp(-0.02*20) * 1.1 = 0.47930
    assert second.hits[1].score == pytest.approx(0.80 * 0.65 * math.exp(-0.4) * 1.1)
    assert second.state.memories["c|m2"] == MemoryState(pytest.approx(0.80), 2, 40 * DAY)
    assert first.state.memories["c|m2"].access_count == 1  # the old state is not mutated
    # importance is capped at 1
    st = TierState.fresh(ELIGIBLE, 0.5, {"c|m2": MemoryState(0.95, 5, 40 * DAY)})
    assert dual_tier(HITS, question=Q, eligible=ELIGIBLE, threshold=0.7, l1_turns=1, state=st).state.memories["c|m2"].importance == 1.0


def test_now_is_asked_at_when_the_question_has_one():
    q = Question("q2", "c", "?", 25 * DAY, ("m2",))
    eligible = ELIGIBLE[:3]  # days 0, 10, 20 (the sweep only shows turns said before the question)
    sel = dual_tier([Hit("c|m1", 0.8), Hit("c|m0", 0.75)], question=q, eligible=eligible, threshold=0.7, l1_turns=1)
    # L1 = m2; m1 age 15 d: 0.5 * exp(-0.07*15) = 0.1750 kept; m0 age 25 d: 0.0869 dropped
    assert ids(sel) == ["c|m2", "c|m1"]
    assert sel.state.memories["c|m1"].last_access == 25 * DAY


def test_no_timestamps_means_no_decay():
    eligible = tuple(Turn("c", f"m{i}", "user", "u", "x", None, i) for i in range(3))
    sel = dual_tier([Hit("c|m0", 0.9)], question=Q, eligible=eligible, threshold=0.5, l1_turns=0)
    assert ids(sel) == ["c|m0"] and sel.tiers == ("L2",)
    assert sel.hits[0].score == pytest.approx(0.9 * 0.5)


def test_l1_is_the_last_turns_most_recent_first():
    sel = dual_tier(HITS, question=Q, eligible=ELIGIBLE, threshold=0.99, l1_turns=3)
    assert ids(sel) == ["c|m4", "c|m3", "c|m2"] and sel.tiers == ("L1",) * 3
    assert all(math.isnan(h.score) for h in sel.hits)


def test_errors():
    with pytest.raises(ValueError, match="threshold is required"):
        dual_tier(HITS, question=Q, eligible=ELIGIBLE, threshold=None)
    with pytest.raises(ValueError, match="must be >= 0"):
        dual_tier(HITS, question=Q, eligible=ELIGIBLE, threshold=0.5, l1_turns=-1)
