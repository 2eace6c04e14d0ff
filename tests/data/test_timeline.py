"""bench.data.timeline.time_problem: the accepted range 1900-01-01..2200-01-01 and the units hint."""

from bench.data.timeline import MAX_TIME, MIN_TIME, time_problem

RANGE = "outside 1900-01-01..2200-01-01 (POSIX seconds, UTC)"


def test_bounds_are_inclusive():
    assert (MIN_TIME, MAX_TIME) == (-2208988800.0, 7258118400.0)  # 1900-01-01, 2200-01-01 UTC
    assert time_problem(MIN_TIME, MIN_TIME) is None and time_problem(MAX_TIME, MAX_TIME) is None
    assert time_problem(0.0, 0) is None
    assert time_problem(MAX_TIME + 1, "x") == f"is out of range: 'x' is year 2200, {RANGE}"  # 7.3e6 s: no hint
    assert time_problem(MIN_TIME - 1, -1) == f"is out of range: -1 is year 1899, {RANGE}"


def test_units_hint_only_when_the_scaled_value_is_a_plausible_date():
    assert time_problem(1.7e12, 1700000000000) == (
        f"is out of range: 1700000000000 is year 55840, {RANGE}; it looks like epoch milliseconds "
        f"(1700000000000 / 1,000 = 2023-11-14T22:13:20Z)")
    assert time_problem(-1.7e12, -1700000000000) == f"is out of range: -1700000000000 is year -51901, {RANGE}"
    assert time_problem(1e300, 1e300) == f"is out of range: 1e+300, {RANGE}"  # no year that far out
