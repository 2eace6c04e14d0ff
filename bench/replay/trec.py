"""Runs in and out as TREC files: a trace exported as a run plus qrels, and any retriever's run read back as a trace.

Formats (whitespace-separated, one record a line, ids as strings without whitespace):

- run:   ``qid Q0 docid rank score tag``: qid = the question's id, docid = the memory key
  ``<conversation_id>|<turn_id>``, rank 1-based in the trace's order, score = the store's similarity
  (written with ``repr``, so it reads back to the same float; a score tied with the one before at float32, the
  precision trec_eval sorts at, is written one float32 step lower, see ``strict_scores``), tag = the run's name
  (the store). Every question's hits are written, adversarial ones included (read back: the same summary).
- qrels: ``qid 0 docid 1``: one line per distinct gold memory of every scored question (not adversarial, with
  gold), the questions ``ranked.csv`` averages over, so trec_eval / ir_measures on these two files give
  ranked.csv's turn-level numbers (a scored question without hits counts 0 in both; tests check it to 1e-9).

These are what trec_eval, ir_measures and ranx read. Read back (``read_run``), a run's hits are ordered
by score descending, ties by rank, then by line (trec_eval orders by score too); a hit the question may
not see under the replay's rule (``bench.replay.visibility``: another conversation, said after the question,
another role under a role filter) is dropped and counted; a question without a line has no hits. Any
line that does not parse, a qid that is not a question of the corpus, a docid that is not one of its
memories, a repeated (qid, docid), a second tag or a tag with a control character stops with one line naming file,
line and field. The tag is data: the store is named ``run:<tag>`` as it is (``../x`` included); the report escapes
it where it renders it and derives file names from it only through ``bench.output.slug``.
``trace_from_run`` turns it into a ``bench.replay.trace.Trace``: latency is not measured (NaN), the exact
cosines and gold exact ranks come from the embedder's cached vectors as for a store.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bench.output import write_atomic
from bench.types import Corpus, memory_key
from bench.replay.visibility import Visibility

log = logging.getLogger(__name__)

RUN_SUFFIX, QRELS_SUFFIX = ".run", ".qrels"
_SPACE = re.compile(r"\s")


def tag_of(name: str) -> str:
    """A run tag from a name (a store's): whitespace replaced by '_', never empty."""
    return _SPACE.sub("_", str(name).strip()) or "recallbench"


def _check_id(value: str, what: str, where: str) -> str:
    value = str(value)
    if not value or _SPACE.search(value):
        raise ValueError(f"{where}: {what} {value!r} is empty or holds whitespace; a TREC file cannot carry it")
    return value


def run_lines(table: pd.DataFrame, tag: str, where: str = "trace") -> list[str]:
    """The run's lines of a trace table (TRACE_COLUMNS): ``qid Q0 docid rank score tag``, in trace order."""
    tag = _check_id(tag, "tag", where)
    out = []
    for qid, ids, scores in zip(table["question_id"], table["hit_ids"], table["hit_scores"]):
        q = _check_id(qid, "question id", where)
        for rank, (d, s) in enumerate(zip(ids, strict_scores(scores)), 1):
            out.append(f"{q} Q0 {_check_id(d, 'memory id', where)} {rank} {s!r} {tag}")
    return out


def strict_scores(scores) -> list[float]:
    """The scores as written to a run, strictly decreasing at float32 precision where the trace's are non-increasing.

    trec_eval (and ir_measures through it) holds a score as a float32, sorts by it and breaks ties by docid
    descending, so two hits whose similarities are equal (duplicate texts) or equal in float32 would be reordered
    and scored differently from ranked.csv. Such a hit is written one float32 step below the score written before
    it (about 6e-8 near 1: n tied hits move by n steps); every other score is written as it is (``repr``)."""
    out: list[float] = []
    before = math.inf
    for s in map(float, scores):
        if out and s <= before and np.float32(s) >= np.float32(out[-1]):
            out.append(float(np.nextafter(np.float32(out[-1]), np.float32(-np.inf))))
        else:
            out.append(s)
        before = s
    return out


def qrels_lines(table: pd.DataFrame, corpus: Corpus, where: str = "trace") -> list[str]:
    """The qrels' lines of a trace table: ``qid 0 docid 1`` per distinct gold memory of every *scored* question
    (not adversarial, with gold: the questions ranked.csv averages over), so the qrels score exactly what the
    report scores. ``corpus`` (the job's snapshot) says which questions are adversarial, and gives the gold of
    a trace written before ``gold_ids`` existed."""
    questions = {q.question_id: q for q in corpus.questions}
    if "gold_ids" in table:
        golds = table["gold_ids"]
    else:
        golds = [[memory_key(q.conversation_id, e) for e in q.evidence] if q else [] for q in map(questions.get, table["question_id"])]
    out = []
    for qid, gold in zip(table["question_id"], golds):
        q = questions.get(qid)
        if q is None or q.adversarial:
            continue
        for d in dict.fromkeys(gold):
            out.append(f"{_check_id(qid, 'question id', where)} 0 {_check_id(d, 'memory id', where)} 1")
    return out


def export_trace(trace, directory: Path, corpus: Corpus, name: str = "trace") -> tuple[Path, Path]:
    """``<directory>/<name>.run`` and ``<name>.qrels`` of one trace (written atomically); the tag is its store's name.
    The run holds every question's hits (read back with ``run_file=`` it gives the same summary, adversarial
    abstention included); the qrels hold the scored questions only, so trec_eval / ir_measures average over
    the questions ranked.csv averages over (a question in the run without qrels is not evaluated)."""
    where = f"{directory / name}"
    run = run_lines(trace.table, tag_of(trace.meta.get("backend", "recallbench")), where)
    qrels = qrels_lines(trace.table, corpus, where)
    a = write_atomic(Path(directory) / f"{name}{RUN_SUFFIX}", lambda p: p.write_text("".join(f"{x}\n" for x in run)))
    b = write_atomic(Path(directory) / f"{name}{QRELS_SUFFIX}", lambda p: p.write_text("".join(f"{x}\n" for x in qrels)))
    return a, b


def read_run(path: Path, corpus: Corpus) -> tuple[dict[str, list[tuple[str, float]]], str]:
    """({qid: [(docid, score), ...] best first}, tag) of a TREC run file, checked against ``corpus``."""
    path = Path(path)
    qids = {q.question_id for q in corpus.questions}
    keys = {t.key for c in corpus.conversations for t in c.turns}
    rows: dict[str, list[tuple[float, int, int, str]]] = {}
    seen: set[tuple[str, str]] = set()
    tag = None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read the run file ({type(e).__name__}: {e})") from None
    if text.lstrip()[:1] in ("{", "["):
        raise ValueError(f"{path}: a JSON ranking, not a TREC run (run_file= reads 'qid Q0 docid rank score tag' lines); "
                         f"score it beside a finished run with `recallbench score RUN {path}`")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        where = f"{path}: line {n}"
        if len(parts) != 6:
            raise ValueError(f"{where}: expected 6 fields 'qid Q0 docid rank score tag', got {len(parts)}")
        qid, _, docid, rank, score, t = parts
        if qid not in qids:
            raise ValueError(f"{where}: field qid {qid!r} is not a question of {corpus.name} ({corpus.source})")
        if docid not in keys:
            raise ValueError(f"{where}: field docid {docid!r} is not a memory of {corpus.name} "
                             f"(memory ids are '<conversation_id>|<turn_id>', as `recallbench export` writes them)")
        try:
            r = int(rank)
        except ValueError:
            raise ValueError(f"{where}: field rank {rank!r} is not an integer") from None
        try:
            s = float(score)
        except ValueError:
            raise ValueError(f"{where}: field score {score!r} is not a number") from None
        if math.isnan(s):
            raise ValueError(f"{where}: field score is NaN")
        if not t.isprintable():
            raise ValueError(f"{where}: field tag {t!r} holds a control character (a run tag names the run: printable text)")
        if tag is None:
            tag = t
        elif t != tag:
            raise ValueError(f"{where}: field tag {t!r} differs from {tag!r} (one run per file)")
        if (qid, docid) in seen:
            raise ValueError(f"{where}: field docid {docid!r} repeated for question {qid!r}")
        seen.add((qid, docid))
        rows.setdefault(qid, []).append((-s, r, n, docid))
    if tag is None:
        raise ValueError(f"{path}: the run file has no lines")
    return {q: [(d, -s) for s, _, _, d in sorted(v)] for q, v in rows.items()}, tag


def trace_from_run(path: Path, corpus: Corpus, *, roles: Sequence[str] | None = None, vectors: tuple | None = None,
                   embedder: str = "", fidelity_k: int = 10):
    """A ``bench.replay.trace.Trace`` whose hits are a TREC run's (see the module docstring). ``vectors`` = (turn vectors,
    question vectors) in corpus order, for the exact cosines, gold exact ranks and fidelity (as ``build_trace``)."""
    from bench.replay.trace import TRACE_COLUMNS, Trace, exact_pass

    run, tag = read_run(path, corpus)
    roles = tuple(roles) if roles else None
    vis = Visibility(corpus)
    hit_ids, hit_scores, dropped, filtered = [], [], 0, 0
    for q in corpus.questions:
        hits = run.get(q.question_id, [])
        start, end = vis.span(q.conversation_id)
        rows = vis.lookup([d for d, _ in hits]) - start
        inside = (rows >= 0) & (rows < end - start)
        ok_all, ok = inside.copy(), inside.copy()
        ok_all[inside] = vis.mask(q)[rows[inside]]
        ok[inside] = vis.mask(q, roles)[rows[inside]]
        dropped += int((~ok_all).sum())
        filtered += int((ok_all & ~ok).sum())
        hit_ids.append([d for (d, _), keep in zip(hits, ok) if keep])
        hit_scores.append([s for (_, s), keep in zip(hits, ok) if keep])
    if dropped:
        log.warning("%s: %d hits the questions may not see (another conversation, or said after the question) were dropped",
                    path, dropped)
    missing = sum(q.question_id not in run for q in corpus.questions)
    if missing:
        log.warning("%s: %d of %d questions have no line (no hits)", path, missing, len(corpus.questions))
    depth = max([len(h) for h in hit_ids] + [1])
    if vectors is not None:
        exact, gold_ids, gold_ranks, store = exact_pass(corpus, vectors[0], vectors[1], hit_ids, hit_scores, roles=roles,
                                                         k=fidelity_k, depth=depth)
    else:
        exact = [[float("nan")] * len(h) for h in hit_ids]
        gold_ids = [list(dict.fromkeys(memory_key(q.conversation_id, e) for e in q.evidence)) for q in corpus.questions]
        gold_ranks = [[0] * len(g) for g in gold_ids]
        store = {}
    table = pd.DataFrame({"question_id": [q.question_id for q in corpus.questions],
                          "conversation_id": [q.conversation_id for q in corpus.questions],
                          "latency_ns": np.full(len(corpus.questions), np.nan), "hit_ids": hit_ids, "hit_scores": hit_scores,
                          "exact_scores": exact, "gold_ids": gold_ids, "gold_exact_ranks": gold_ranks}, columns=TRACE_COLUMNS)
    meta = {"dataset": corpus.name, "backend": f"run:{tag}", "layout": "none", "run_file": str(path), "embedder": embedder, "depth": depth,
            "roles": list(roles) if roles else None, "n_memories": len(vis.keys), "ingest_seconds": 0.0, "ready_seconds": 0.0,
            "hits_dropped_not_visible": dropped, "hits_filtered_by_role": filtered, "questions_without_lines": missing,
            "measured_at": f"read from {Path(path).name} {time.strftime('%Y-%m-%dT%H:%M:%S%z')} (no store: latency not measured)",
            **store}
    log.info("run file %s (tag %s): %d questions, %d hits kept", path, tag, len(run), sum(map(len, hit_ids)))
    return Trace(table, meta)
