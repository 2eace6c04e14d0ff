"""Injected store faults: an error rate, an outage window and a slow store, around any store, deterministic with a seed.

A job's ``faults:`` setting (``configs/config.yaml``; null = none)::

    faults: {error_rate: 0.1, outage: {start_s: 60, seconds: 300}, slow_ms: 50, seed: 0, rate_qps: 1.0}

* **The clock** of an outage is the replay's question timeline, not the wall clock of the search loop (which
  depends on the machine and the store): the questions are asked in replay order (``asked_at``, questions
  without one after those with one, then file order) at ``rate_qps`` questions per second, so question n (0-based
  in that order) is asked at ``n / rate_qps`` seconds. An outage ``{start_s, seconds}`` fails exactly the questions
  asked in ``[start_s, start_s + seconds)``: at the default 1 question per second, "down for 5 minutes" is 300
  questions. (``asked_at`` only orders the questions: most corpora have none, and LongMemEval's span years.)
* **Errors**: exactly ``round(error_rate * n)`` of the n questions, drawn with ``numpy.random.default_rng(seed)``
  (a permutation), fail; a question inside the outage counts as an outage, not an error.
* **Slow store**: every store call that is made sleeps ``slow_ms`` first (inside the timed call: the trace's latency
  includes it), the basis of the timeout policy (``bench.selection.degrade``).

A failed question (error or outage) gets an empty result: ``FaultyBackend.search`` returns no hits without calling
the store, at once (as a refused connection does), so its latency is the time to return nothing: a faulted trace's
latency percentiles include those near-zero calls (read store latency from a run without faults). The per-question record (``record``: fault per question id) goes into the trace's meta
(``meta["faults"]``), and ``describe`` into the trace's cache key (``bench.run.trace_key``), so a faulted trace is
never mistaken for a clean one. The fallback (the last k turns the question may see instead of nothing) is
post-processing: ``bench.selection.degrade``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bench.types import Hits, Question, Where

ERROR, OUTAGE, OK = "error", "outage", ""
_KNOWN = {"error_rate", "outage", "slow_ms", "seed", "rate_qps"}


@dataclass(frozen=True)
class Faults:
    error_rate: float = 0.0
    outage_start_s: float | None = None
    outage_seconds: float = 0.0
    slow_ms: float = 0.0
    seed: int = 0
    rate_qps: float = 1.0  # questions per second on the replay's question timeline (the outage clock)

    def describe(self) -> dict:
        """What decides a faulted trace (its cache key and meta)."""
        return {"error_rate": self.error_rate, "outage": None if self.outage_start_s is None else
                {"start_s": self.outage_start_s, "seconds": self.outage_seconds}, "slow_ms": self.slow_ms, "seed": self.seed,
                "rate_qps": self.rate_qps, "clock": "replay question timeline: question n asked at n / rate_qps s"}


def from_config(node: Mapping | None) -> Faults | None:
    """``faults:`` of a config -> Faults (None: no faults). A bad value stops with one line naming the field."""
    if node is None:
        return None
    if not isinstance(node, Mapping):
        raise ValueError(f"faults: expected a mapping {{error_rate, outage, slow_ms, seed, rate_qps}} or null (got {node!r})")
    unknown = sorted(set(node) - _KNOWN)
    if unknown:
        raise ValueError(f"faults: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(_KNOWN))})")

    def num(name, value, lo, hi=math.inf):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
            raise ValueError(f"faults.{name}: expected a number in [{lo}, {hi}] (got {value!r})")
        return float(value)

    outage = node.get("outage")
    start, seconds = None, 0.0
    if outage is not None:
        if not isinstance(outage, Mapping) or set(outage) != {"start_s", "seconds"}:
            raise ValueError(f"faults.outage: expected {{start_s: <s>, seconds: <s>}} or null (got {outage!r})")
        start, seconds = num("outage.start_s", outage["start_s"], 0), num("outage.seconds", outage["seconds"], 0)
    seed = node.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"faults.seed: expected an integer (got {seed!r})")
    rate = num("rate_qps", node.get("rate_qps", 1.0), 0)
    if rate <= 0:
        raise ValueError("faults.rate_qps: expected a number > 0 (got 0)")
    return Faults(error_rate=num("error_rate", node.get("error_rate", 0.0), 0, 1), outage_start_s=start, outage_seconds=seconds,
                  slow_ms=num("slow_ms", node.get("slow_ms", 0.0), 0), seed=seed, rate_qps=rate)


def question_clock(questions: Sequence[Question], rate_qps: float = 1.0) -> np.ndarray:
    """Seconds at which each question (given order) is asked on the replay's question timeline (module docstring)."""
    order = sorted(range(len(questions)), key=lambda i: (questions[i].asked_at is None, questions[i].asked_at or 0.0, i))
    clock = np.empty(len(questions))
    clock[order] = np.arange(len(questions)) / rate_qps
    return clock


def schedule(faults: Faults, questions: Sequence[Question]) -> list[str]:
    """Per question (given order): ``"outage"``, ``"error"`` or ``""``; pure and deterministic (module docstring)."""
    n = len(questions)
    out = [OK] * n
    k = int(round(faults.error_rate * n))
    for i in np.random.default_rng(faults.seed).permutation(n)[:k].tolist():
        out[i] = ERROR
    if faults.outage_start_s is not None:
        clock = question_clock(questions, faults.rate_qps)
        lo, hi = faults.outage_start_s, faults.outage_start_s + faults.outage_seconds
        for i in np.flatnonzero((clock >= lo) & (clock < hi)).tolist():
            out[i] = OUTAGE
    return out


def record(faults: Faults, questions: Sequence[Question], plan: Sequence[str]) -> dict:
    """The trace meta entry: the settings, counts, and the failed question ids by kind."""
    by = {kind: [q.question_id for q, f in zip(questions, plan) if f == kind] for kind in (ERROR, OUTAGE)}
    return {**faults.describe(), "n_questions": len(questions), "n_error": len(by[ERROR]), "n_outage": len(by[OUTAGE]),
            "failed": by}


def failed_ids(meta: Mapping) -> frozenset[str]:
    """Question ids a trace's injected faults failed (empty when the trace has none)."""
    f = (meta or {}).get("faults") or {}
    return frozenset(q for ids in (f.get("failed") or {}).values() for q in ids)


class FaultyBackend:
    """Any store behind injected faults. ``plan`` maps a query (``query_key(vector, where)``) to its fault; a failed
    query returns no hits without calling the store; every call made to the store first sleeps ``slow_ms``.
    Everything else (name, capabilities, open, add, wait_ready, reference_query, close, drop, layout ...) is the
    wrapped store's, through ``__getattr__``."""

    def __init__(self, inner, faults: Faults, plan: Mapping[tuple, str]) -> None:
        self.inner, self.faults, self.plan = inner, faults, dict(plan)

    def __getattr__(self, name):
        return getattr(self.__dict__["inner"], name)

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        if self.plan.get(query_key(vector, where), OK):
            return Hits((), ())  # the store errored or was down: nothing came back
        if self.faults.slow_ms:
            time.sleep(self.faults.slow_ms / 1000)
        return self.inner.search(vector, k=k, where=where)


def query_key(vector, where: Where) -> tuple:
    """A query's identity for the plan: its vector's bytes and its filter (identical queries share a fault)."""
    return np.asarray(vector, dtype=np.float32).tobytes(), where


def wrap(backend, faults: Faults, questions: Sequence[Question], vectors, wheres: Sequence[Where]) -> tuple[FaultyBackend, dict]:
    """(``backend`` behind ``faults``, the trace meta record). The record is what the wrapper does: a question whose
    query is identical to another's (same vector and filter) gets that query's fault."""
    plan = schedule(faults, questions)
    by_query: dict[tuple, str] = {}
    for i, f in enumerate(plan):
        by_query.setdefault(query_key(vectors[i], wheres[i]), f)
    done = [by_query[query_key(vectors[i], wheres[i])] for i in range(len(plan))]
    return FaultyBackend(backend, faults, by_query), record(faults, questions, done)
