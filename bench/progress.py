"""Progress that shows everywhere: a tqdm bar on a terminal, log lines in a CI log.

``progress(total, desc, unit=..., enabled=...)`` is a context manager with ``update(n)``. On a TTY it is a
tqdm bar on stderr. Elsewhere (CI logs, files, pipes) it logs one INFO line each time another ``every``
(default 10 %) of the total is done and at least ``min_interval`` seconds (default 5) passed since the
last line, and always one at the end (so a quick step is one line): ``embed turns: 40% (2,353/5,882 text), 312 text/s,
ETA 11 s``. Nothing is printed when ``enabled`` is false or the total is 0.
"""

from __future__ import annotations

import logging
import math
import sys
import time

log = logging.getLogger("bench.progress")


def rate_eta(done: int, total: int, elapsed: float) -> tuple[float, float]:
    """(items per second, seconds left); NaN when nothing is done or no time passed."""
    if done <= 0 or elapsed <= 0:
        return float("nan"), float("nan")
    rate = done / elapsed
    return rate, max(0, total - done) / rate


def line(desc: str, done: int, total: int, unit: str, elapsed: float) -> str:
    rate, eta = rate_eta(done, total, elapsed)
    speed = "" if rate != rate else f", {rate:,.0f} {unit}/s" if rate >= 10 else f", {rate:.1f} {unit}/s"
    left = "" if eta != eta or done >= total else f", ETA {eta:,.0f} s"
    pct = done / total if total else 1.0
    return f"{desc}: {pct:.0%} ({done:,}/{total:,} {unit}){speed}{left}" + (f" in {elapsed:,.1f} s" if done >= total else "")


class _LogProgress:
    def __init__(self, total: int, desc: str, unit: str, every: float, min_interval: float, clock=time.perf_counter) -> None:
        self.total, self.desc, self.unit, self.clock, self.min_interval = total, desc, unit, clock, min_interval
        self.step = max(1, math.ceil(total * every))  # items between two lines
        self.done, self.next_at, self.t0 = 0, self.step, clock()
        self.last = self.t0

    def update(self, n: int = 1) -> None:
        self.done += n
        end = self.done >= self.total
        if end or self.done >= self.next_at:
            now = self.clock()
            if end or now - self.last >= self.min_interval:
                log.info("%s", line(self.desc, min(self.done, self.total), self.total, self.unit, now - self.t0))
                self.last = now
            self.next_at = (self.done // self.step + 1) * self.step

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


class _Silent:
    def update(self, n: int = 1) -> None:
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def progress(total: int, desc: str, *, unit: str = "it", enabled: bool = True, every: float = 0.1, min_interval: float = 5.0,
             tty: bool | None = None):
    """A progress reporter for ``total`` items (module docstring). ``tty``: force one mode (tests)."""
    if not enabled or total <= 0:
        return _Silent()
    if sys.stderr.isatty() if tty is None else tty:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit)
    return _LogProgress(total, desc, unit, every, min_interval)
