"""Live replay: write the corpus into the store in timeline order, as an agent would, and ask each question at its time.

Batch replay (``bench.replay.trace``) ingests everything, waits until the store is ready, then asks every question.
Live replay never calls ``wait_ready``: a question is searched right after the writes before it, so a store whose
index is asynchronous can miss a memory written a moment ago.

The timeline (``timeline``):

* each conversation's turns in timestamp order (ties: position) when every turn has a timestamp, so a session
  listed out of date order (210 of LongMemEval_S's 498 haystacks) is written at its date; otherwise in position
  order, a turn's clock its timestamp (none: 0.0) made non-decreasing within its conversation (a turn never
  overtakes an earlier one);
* a question with ``asked_at`` is asked after the turns of its conversation whose clock is ``<= asked_at``;
  one without (``ASKED_AT_RULE``) after the session of its latest gold turn (by position), one without gold
  after its whole conversation;
* conversations are interleaved by clock (ties: corpus order of the conversations).

Writes (``batches``): up to ``batch`` consecutive turns of one session of one conversation per ``add`` (``batch=1``:
one write per turn, the default); a question ends the batch being built (it is written before the question). ``pace_ms``
(default 0: as fast as the store takes them) is an agent's think time after each write (the replay sleeps, untimed).

The question search is the ordinary one (``bench.replay.visibility.question_filter``: its conversation, roles,
``asked_at``), timed around ``backend.search`` alone; a write is the batch replay's ``MemoryBatch``
(``bench.replay.trace.memory_batch``: metadata included). The trace is a normal ``Trace`` (``TRACE_COLUMNS``); its exact
columns are the batch replay's exact scan (``bench.replay.trace.exact_pass``) over what the question may see AND what
was written before it (``visible_rows``): ``gold_exact_ranks`` is 0 for a gold memory not yet written. ``LiveRecord`` keeps what only live replay measures: ns per write, and per question the
memories written (in all, and of its conversation: the user's memory size) and the read-after-write misses: gold
memories written before the question and visible to it, ranked within the search depth by the exact scan of what was
written, but not returned by the store.
"""

from __future__ import annotations

import heapq
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.backends.base import Backend
from bench.backends.session import open_session
from bench.embedders.base import Embedder
from bench.output import write_atomic
from bench.progress import progress as progress_bar
from bench.replay.trace import (TRACE_COLUMNS, StoreContractError, Trace, contract_violations, disk_bytes, embed_corpus,
                                exact_pass, memory_batch, native_column, score_meta)
from bench.replay.visibility import Visibility, question_filter
from bench.run import run_id
from bench.types import Corpus

log = logging.getLogger(__name__)

DEFAULT_BATCH = 1  # turns per write: one write per turn, as an agent that stores each message as it comes
ASKED_AT_RULE = ("a question with asked_at is asked after the turns of its conversation said at or before it; one without "
                 "asked_at right after the session of its latest gold turn (no gold: after its whole conversation)")
WRITES_FILE = "live_writes.parquet"  # one row per write (add call)
QUESTIONS_FILE = "live_questions.parquet"  # one row per question, corpus order
WRITE_COLUMNS = ["write", "conversation_id", "session", "rows", "first_id", "last_id", "add_ns"]
QUESTION_COLUMNS = ["question_id", "conversation_id", "order", "rule", "written_total", "user_memories", "n_gold",
                    "gold_written", "gold_returned", "raw_misses", "raw_miss_ids"]


@dataclass(frozen=True)
class Event:
    """One step of the timeline: ``kind`` "w" (write the turn at row ``row``) or "q" (ask question ``index``)."""

    kind: str
    clock: float
    conversation: int  # index of the conversation in the corpus
    index: int  # the turn's row in corpus.turns() ("w") or the question's index in corpus.questions ("q")
    rule: str = ""  # "q": how its place was decided (asked_at | after gold session | after conversation)


@dataclass(frozen=True)
class LiveRecord:
    """What live replay measured beside the trace: ``writes`` (WRITE_COLUMNS) and ``questions`` (QUESTION_COLUMNS)."""

    writes: pd.DataFrame = field(repr=False)
    questions: pd.DataFrame = field(repr=False)

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(directory / WRITES_FILE, lambda p: self.writes.to_parquet(p, index=False))
        write_atomic(directory / QUESTIONS_FILE, lambda p: self.questions.to_parquet(p, index=False))

    @staticmethod
    def load(directory: Path) -> "LiveRecord | None":
        """The record saved in ``directory``, or None when a file is missing or unreadable."""
        try:
            return LiveRecord(pd.read_parquet(Path(directory) / WRITES_FILE), pd.read_parquet(Path(directory) / QUESTIONS_FILE))
        except (OSError, ValueError):
            return None


def timeline(corpus: Corpus) -> list[Event]:
    """Every turn (a write) and every question (a read) of ``corpus`` in the order live replay runs them (module doc)."""
    row0, per_conv = 0, []
    qs_of: dict[str, list[int]] = {}
    for qi, q in enumerate(corpus.questions):
        qs_of.setdefault(q.conversation_id, []).append(qi)
    for ci, conv in enumerate(corpus.conversations):
        dated = all(t.timestamp is not None for t in conv.turns)  # then the clock orders (sessions listed out of date order)
        key = (lambda i: (conv.turns[i].timestamp, conv.turns[i].position)) if dated else (lambda i: conv.turns[i].position)
        order = sorted(range(len(conv.turns)), key=key)  # stable: ties keep corpus order
        turns = [conv.turns[i] for i in order]
        clocks, top = [], -np.inf
        for t in turns:
            top = max(top, float(t.timestamp or 0.0))
            clocks.append(top)
        place = {t.turn_id: n for n, t in enumerate(turns)}
        at: dict[int, list[tuple[float, int, str]]] = {}  # turns written before the question -> (clock, question, rule)
        for qi in qs_of.get(conv.conversation_id, []):
            q = corpus.questions[qi]
            if q.asked_at is not None:
                n = int(np.searchsorted(np.asarray(clocks), q.asked_at, side="right")) if clocks else 0
                at.setdefault(n, []).append((float(q.asked_at), qi, "asked_at"))
                continue
            gold = [place[e] for e in q.evidence if e in place]
            if gold:
                j = max(gold)
                while j + 1 < len(turns) and turns[j + 1].session == turns[j].session:
                    j += 1
                n, rule = j + 1, "after gold session"
            else:
                n, rule = len(turns), "after conversation"
            at.setdefault(n, []).append((clocks[n - 1] if n else -np.inf, qi, rule))
        events: list[Event] = []
        for n in range(len(turns) + 1):
            for clock, qi, rule in sorted(at.get(n, [])):  # by clock: heapq.merge needs each input sorted
                events.append(Event("q", clock, ci, qi, rule))
            if n < len(turns):
                events.append(Event("w", clocks[n], ci, row0 + order[n]))
        per_conv.append(events)
        row0 += len(conv.turns)
    return list(heapq.merge(*per_conv, key=lambda e: (e.clock, e.conversation)))


def write_batches(events: list[Event], turns, size: int) -> list[tuple[str, object]]:
    """The timeline as ("w", [rows]) writes of up to ``size`` consecutive turns of one session of one conversation, and
    ("q", question index) reads; a read ends the write being built."""
    if size <= 0:
        raise ValueError(f"live.batch must be a positive number of turns per write (got {size})")
    out: list[tuple[str, object]] = []
    pending: list[int] = []

    def flush():
        if pending:
            out.append(("w", list(pending)))
            pending.clear()

    for e in events:
        if e.kind == "q":
            flush()
            out.append(("q", e.index))
            continue
        if pending:
            last = turns[pending[-1]]
            if len(pending) >= size or turns[e.index].conversation_id != last.conversation_id or turns[e.index].session != last.session:
                flush()
        pending.append(e.index)
    flush()
    return out


def build_live_trace(corpus: Corpus, embedder: Embedder, backend: Backend, *, depth: int, roles: tuple[str, ...] | None = None,
                     batch: int = DEFAULT_BATCH, pace_ms: float = 0.0, progress: bool = False, fidelity_k: int = 10,
                     vectors: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Trace, LiveRecord]:
    """Live replay of ``corpus`` into ``backend`` (module doc): the trace and what only live replay measures.
    ``vectors``: (turn vectors, question vectors) already embedded (tests); else embedded here (cached)."""
    if depth <= 0:
        raise ValueError(f"search depth must be positive (got {depth})")
    depth = min(depth, backend.capabilities.max_k)
    turns, questions = corpus.turns(), corpus.questions
    if vectors is None:
        tv, qv, emb_stats = embed_corpus(corpus, embedder, progress=progress)
    else:
        (tv, qv), emb_stats = vectors, {}
    vis = Visibility(corpus)
    events = timeline(corpus)
    rules = {e.index: e.rule for e in events if e.kind == "q"}
    steps = write_batches(events, turns, batch)
    conv_of = {c.conversation_id: ci for ci, c in enumerate(corpus.conversations)}
    written = np.zeros(len(turns), dtype=bool)  # rows in the store
    per_conv = np.zeros(len(corpus.conversations), dtype=np.int64)
    writes, asked = [], {}
    hits: list = [None] * len(questions)
    lat = np.zeros(len(questions), dtype=np.int64)
    t0 = time.perf_counter()
    with open_session(backend, dim=int(tv.shape[1]) if len(tv) else embedder.dim) as session:
        with progress_bar(len(steps), f"live {backend.name}", unit="step", enabled=progress) as bar:
            for kind, what in steps:
                if kind == "w":
                    rows = what
                    chunk = [turns[r] for r in rows]
                    mb = memory_batch(chunk, tv[rows])
                    ns = session.timed_add(mb)
                    if pace_ms > 0:
                        time.sleep(pace_ms / 1000.0)
                    written[rows] = True
                    per_conv[conv_of[chunk[0].conversation_id]] += len(rows)
                    writes.append((len(writes), chunk[0].conversation_id, int(chunk[0].session), len(rows), mb.ids[0], mb.ids[-1], ns))
                else:
                    qi = what
                    q = questions[qi]
                    h, ns = session.timed_search(qv[qi], k=depth, where=question_filter(q, roles=roles))
                    hits[qi], lat[qi] = h, ns
                    start, end = vis.span(q.conversation_id)
                    n_user = int(per_conv[conv_of[q.conversation_id]]) if q.conversation_id in conv_of else 0
                    asked[qi] = (len(asked), int(written.sum()), n_user, np.flatnonzero(written[start:end]))
                bar.update(1)
        index_bytes = disk_bytes(getattr(backend, "path", None))
        collections = getattr(backend, "n_collections", 1)
    wall = time.perf_counter() - t0
    hit_ids = [list(h.ids) for h in hits]
    hit_scores = [list(h.scores) for h in hits]
    broken = contract_violations(corpus, hit_ids, hit_scores, roles=roles, k=depth)
    if broken:
        raise StoreContractError(f"store {backend.name} broke the search contract (bench/backends/base.py) {broken}; "
                                 "its results are not scored")
    exact, gold_ids, gold_ranks, store = exact_pass(corpus, tv, qv, hit_ids, hit_scores, roles=roles, k=fidelity_k, depth=depth,
                                                     progress=progress, visible_rows=[asked[qi][3] for qi in range(len(questions))])
    qrows = []
    for qi, q in enumerate(questions):
        order, n_all, n_user, _ = asked[qi]
        gold, ranks, returned = gold_ids[qi], gold_ranks[qi], set(hit_ids[qi])
        misses = [g for g, rk in zip(gold, ranks) if 0 < rk <= depth and g not in returned]
        qrows.append((q.question_id, q.conversation_id, order, rules.get(qi, ""), n_all, n_user, len(gold),
                      sum(rk > 0 for rk in ranks), len(returned.intersection(gold)), len(misses), misses))
    table = pd.DataFrame({"question_id": [q.question_id for q in questions], "conversation_id": [q.conversation_id for q in questions],
                          "latency_ns": lat, "hit_ids": hit_ids, "hit_scores": hit_scores, "exact_scores": exact,
                          "gold_ids": gold_ids, "gold_exact_ranks": gold_ranks, "native_scores": native_column(hits)},
                         columns=TRACE_COLUMNS)
    record = LiveRecord(pd.DataFrame(writes, columns=WRITE_COLUMNS), pd.DataFrame(qrows, columns=QUESTION_COLUMNS))
    add_ns = record.writes["add_ns"].to_numpy()
    rule_counts = record.questions["rule"].value_counts().to_dict()
    meta = {
        "dataset": corpus.name, "backend": backend.name, "layout": getattr(backend, "layout", "shared"), "collections": collections,
        "embedder": embedder.model_id, "depth": depth, "roles": list(roles) if roles else None, "n_memories": len(turns),
        "score": score_meta(backend),  # the store's metric, its native score and the conversion (as the batch trace)
        "replay": "live", "live_batch": int(batch), "live_pace_ms": float(pace_ms), "asked_at_rule": ASKED_AT_RULE, "asked_by_rule": rule_counts,
        "writes": len(add_ns), "write_seconds": float(add_ns.sum()) / 1e9 if len(add_ns) else 0.0,
        # the batch trace's fields, in live terms: ingest = the writes (time inside add only), never waited (ready 0)
        "ingest_seconds": float(add_ns.sum()) / 1e9, "ingest_per_second": len(turns) / (add_ns.sum() / 1e9) if add_ns.sum() else None,
        "ingest_batches": len(add_ns), "ingest_batch_size": int(batch), "ingest_wall_seconds": wall, "ready_seconds": 0.0,
        **store,  # exact_pass over what was written: short lists, fidelity, score agreement
        "write_p50_ms": float(np.percentile(add_ns, 50)) / 1e6 if len(add_ns) else float("nan"),
        "write_p99_ms": float(np.percentile(add_ns, 99)) / 1e6 if len(add_ns) else float("nan"),
        "read_after_write_misses": int(record.questions["raw_misses"].sum()),
        "questions_with_raw_miss": int((record.questions["raw_misses"] > 0).sum()),
        "warmup_queries": 0, "replay_wall_seconds": wall, "store_search_seconds": float(lat.sum()) / 1e9,
        "index_bytes": index_bytes, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "measured_in": run_id(), **emb_stats,
    }
    log.info("live trace: %d questions, %d writes of <= %d turns on %s (write p50 %.2f ms, p99 %.2f ms; %d read-after-write misses)",
             len(questions), len(add_ns), batch, backend.name, meta["write_p50_ms"], meta["write_p99_ms"], meta["read_after_write_misses"])
    return Trace(table, meta), record


def save(trace: Trace, record: LiveRecord, directory: Path) -> None:
    trace.save(directory)
    record.save(directory)


def load_checked(directory: Path, corpus: Corpus) -> tuple[tuple[Trace, LiveRecord] | None, str]:
    """A live trace and its record from ``directory`` when complete (``Trace.load_checked`` and both record files)."""
    trace, problem = Trace.load_checked(directory, corpus)
    if trace is None:
        return None, problem
    record = LiveRecord.load(directory)
    if record is None or len(record.questions) != len(corpus.questions):
        return None, f"no complete live record ({WRITES_FILE}, {QUESTIONS_FILE})"
    return (trace, record), ""
