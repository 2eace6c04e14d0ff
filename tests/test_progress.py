"""bench.progress: log lines every 10 % with rate and ETA off a terminal; silent when disabled."""

import logging

from bench import progress as P


def test_line_by_hand():
    # 2,353 of 5,882 texts in 7.5 s: 313.7 texts/s; (5,882 - 2,353) / 313.7 = 11.25 s left
    assert P.line("embed turns", 2353, 5882, "text", 7.5) == "embed turns: 40% (2,353/5,882 text), 314 text/s, ETA 11 s"
    assert P.line("search", 4, 4, "q", 2.0) == "search: 100% (4/4 q), 2.0 q/s in 2.0 s"
    assert P.line("x", 0, 4, "q", 0.0) == "x: 0% (0/4 q)"


def test_log_lines_every_tenth_and_at_the_end(caplog):
    caplog.set_level(logging.INFO, logger="bench.progress")
    with P.progress(20, "embed", unit="text", tty=False, min_interval=0) as bar:
        bar.clock, bar.t0, bar.last = (lambda: float(bar.done) / 2), 0.0, 0.0  # 2 items per second
        for _ in range(20):
            bar.update(1)  # 10 % = 2 items: a line at 2, 4, ..., 20
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 10 and msgs[0] == "embed: 10% (2/20 text), 2.0 text/s, ETA 9 s"  # 18 left at 2/s
    assert msgs[4] == "embed: 50% (10/20 text), 2.0 text/s, ETA 5 s"
    assert msgs[-1] == "embed: 100% (20/20 text), 2.0 text/s in 10.0 s"


def test_lines_come_at_most_every_min_interval_and_always_at_the_end(caplog):
    caplog.set_level(logging.INFO, logger="bench.progress")
    with P.progress(20, "search", unit="q", tty=False, min_interval=5.0) as bar:
        bar.clock, bar.t0, bar.last = (lambda: float(bar.done) / 2), 0.0, 0.0  # 2 q/s: 10 % (2 q) every 1 s
        for _ in range(20):
            bar.update(1)
    # lines at 10 s (end) and whenever >= 5 s passed at a 10 % mark: 5 s (10 q)
    assert caplog.messages == ["search: 50% (10/20 q), 2.0 q/s, ETA 5 s", "search: 100% (20/20 q), 2.0 q/s in 10.0 s"]


def test_a_big_step_logs_once_and_disabled_is_silent(caplog):
    caplog.set_level(logging.INFO, logger="bench.progress")
    with P.progress(10, "ingest", unit="batch", tty=False, min_interval=0) as bar:
        bar.update(7)
        bar.update(3)
    assert len(caplog.records) == 2
    caplog.clear()
    with P.progress(10, "ingest", enabled=False) as bar:
        bar.update(10)
    with P.progress(0, "ingest", tty=False) as bar:
        bar.update(1)
    assert caplog.records == []
