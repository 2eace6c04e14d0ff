"""LongMemEval loader (oracle or ``_s`` split) -> ``Corpus``: one conversation per question.

Accepts a directory of per-question JSON files (one object each, any file name ``*.json``; questions
are sorted by ``question_id``, as the official list is) or one official list-format JSON file (file
order kept), or a single-object JSON file.

Mapping:

* Turn: conversation_id = question_id; the haystack sessions in the given order become turns with
  turn_id = ``"s<session ordinal>:t<turn index>"`` (both 0-based); session = the ordinal;
  role = speaker = the turn's ``role``; text = ``content``; timestamp = the session's
  ``haystack_dates`` entry ("2023/05/20 (Sat) 03:02", read as UTC) in POSIX seconds.
  ``haystack_session_ids`` are never used in any Turn field: evidence ids start with ``answer_``
  and would leak the label.
* Question: question_id, text = ``question``, asked_at = ``question_date``, category =
  ``question_type``, adversarial = question_id ends with ``_abs`` (abstention: correct recall is
  nothing), answer = str(``answer``) (ints reported as ``answer_not_string``).
  Gold = turns with ``has_answer: true``; when a question has none, all turns of the sessions in
  ``answer_session_ids`` (reported as ``gold_fallback_to_session``, also for ``_abs`` questions).

Other defects: ``date_unparseable`` (timestamp None), ``turn_empty_text`` (turn skipped),
``answer_session_not_found``, ``question_without_gold``, and the reachability defects of
``bench.data.timeline``: ``gold_after_asked_at`` (a gold turn whose session date is after
``question_date``; field ``haystack_sessions[i][j].has_answer``, or ``answer_session_ids`` for
fallback gold) and ``asked_before_conversation`` (field ``question_date``); the gold is kept.
Structural errors (text holding an unpaired surrogate, a date outside 1900-01-01..2200-01-01)
raise ValueError naming file, record and field.
"""

from __future__ import annotations

import logging
import os
import re
from datetime import datetime, timezone

from bench.data import read_json, require_path, short, unicode_problem
from bench.data.timeline import Source, add_reachability_defects, time_problem
from bench.types import ROLES, Conversation, Corpus, Defect, Question, Turn

log = logging.getLogger(__name__)

_DATE = re.compile(r"\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\(\w+\))?\s*(\d{1,2}):(\d{2})\s*")


def parse_lme_date(text: str) -> float:
    """"2023/05/20 (Sat) 03:02" -> POSIX seconds, read as UTC. ValueError when it does not parse."""
    m = _DATE.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"unparseable LongMemEval date {text!r}")
    y, mo, d, h, mi = (int(x) for x in m.groups())
    return datetime(y, mo, d, h, mi, tzinfo=timezone.utc).timestamp()


def load_longmemeval(*, path: str | os.PathLike, name: str = "longmemeval_oracle") -> Corpus:
    """Read LongMemEval instances from a directory of per-question files or one JSON file."""
    p = require_path(path)
    records: list[tuple[str, str, dict]] = []  # (file, record label, instance)
    if p.is_dir():
        files = sorted(p.glob("*.json"))
        if not files:
            raise ValueError(f"{p}: no *.json files in this LongMemEval directory")
        for f in files:
            data = read_json(f)
            if not isinstance(data, dict):
                raise ValueError(f"{f}: expected one JSON object (a LongMemEval instance), got {type(data).__name__}")
            records.append((str(f), _qid(data, str(f), "[0]"), data))
        records.sort(key=lambda r: r[1])
    else:
        data = read_json(p)
        items = data if isinstance(data, list) else [data]
        for i, item in enumerate(items):
            records.append((str(p), _qid(item, str(p), f"[{i}]"), item))
    defects: list[Defect] = []
    conversations: list[Conversation] = []
    questions: list[Question] = []
    sources: dict[str, Source] = {}
    seen: dict[str, str] = {}
    for file, qid, item in records:
        if qid in seen:
            raise ValueError(f"{file}: record {qid}: field 'question_id': duplicate (also in {seen[qid]})")
        seen[qid] = file
        conv, q, fields = _instance(item, qid, file, defects)
        conversations.append(conv)
        questions.append(q)
        sources[qid] = Source(file, qid, "question_date", fields)
    corpus = Corpus(name, tuple(conversations), tuple(questions), tuple(defects), str(p))
    corpus = add_reachability_defects(corpus, sources)
    log.info("loaded %s from %s: %d questions read, %d abstention, %d turns, %d defects",
             name, p, len(questions), sum(q.adversarial for q in questions), len(corpus.turns()), len(corpus.defects))
    return corpus


def _qid(item: object, file: str, record: str) -> str:
    if not isinstance(item, dict):
        raise ValueError(f"{file}: record {record}: expected a JSON object, got {type(item).__name__}")
    qid = item.get("question_id")
    if not isinstance(qid, str) or not qid:
        raise ValueError(f"{file}: record {record}: field 'question_id' must be a non-empty string, got {short(qid)}")
    return qid


def _get(item: dict, key: str, typ: type, file: str, record: str):
    if key not in item:
        raise ValueError(f"{file}: record {record}: missing field {key!r}")
    value = item[key]
    if not isinstance(value, typ):
        raise ValueError(f"{file}: record {record}: field {key!r} must be {typ.__name__}, got {short(value)}")
    if isinstance(value, str) and unicode_problem(value):
        raise ValueError(f"{file}: record {record}: field {key!r} {unicode_problem(value)}")
    return value


def _check_range(ts: float | None, raw: object, file: str, qid: str, field: str) -> None:
    """ValueError naming file, record and field when a parsed date is outside the accepted range."""
    problem = ts is not None and time_problem(ts, raw)
    if problem:
        raise ValueError(f"{file}: record {qid}: field {field!r} {problem}")


def _instance(item: dict, qid: str, file: str, defects: list[Defect]) -> tuple[Conversation, Question, list[str]]:
    """One instance -> its conversation, its question and the source field of each gold entry."""
    sessions = _get(item, "haystack_sessions", list, file, qid)
    dates = _get(item, "haystack_dates", list, file, qid)
    session_ids = _get(item, "haystack_session_ids", list, file, qid)
    if not len(sessions) == len(dates) == len(session_ids):
        raise ValueError(f"{file}: record {qid}: fields 'haystack_sessions', 'haystack_dates', "
                         f"'haystack_session_ids' differ in length ({len(sessions)}, {len(dates)}, {len(session_ids)})")
    turns: list[Turn] = []
    gold: list[str] = []
    fields: list[str] = []  # where each gold entry's label is: "haystack_sessions[i][j].has_answer", ...
    by_session: dict[int, list[str]] = {}
    for si, (session, date) in enumerate(zip(sessions, dates)):
        if not isinstance(session, list):
            raise ValueError(f"{file}: record {qid}: field 'haystack_sessions[{si}]' must be a list, "
                             f"got {short(session)}")
        try:
            ts = parse_lme_date(date)
        except ValueError:
            ts = None
            defects.append(Defect(file, qid, f"haystack_dates[{si}]", "date_unparseable", short(date),
                                  "timestamp None"))
        _check_range(ts, date, file, qid, f"haystack_dates[{si}]")
        for ti, t in enumerate(session):
            fld = f"haystack_sessions[{si}][{ti}]"
            if not isinstance(t, dict):
                raise ValueError(f"{file}: record {qid}: field {fld!r} must be an object, got {short(t)}")
            role, text = t.get("role"), t.get("content")
            if role not in ROLES:
                raise ValueError(f"{file}: record {qid}: field '{fld}.role' must be \"user\" or \"assistant\", "
                                 f"got {short(role)}")
            if not isinstance(text, str):
                raise ValueError(f"{file}: record {qid}: field '{fld}.content' must be a string, got {short(text)}")
            if unicode_problem(text):
                raise ValueError(f"{file}: record {qid}: field '{fld}.content' {unicode_problem(text)}")
            if not text.strip():
                defects.append(Defect(file, qid, f"{fld}.content", "turn_empty_text", short(text), "turn skipped"))
                continue
            tid = f"s{si}:t{ti}"
            turns.append(Turn(qid, tid, role, role, text, ts, len(turns), si))
            by_session.setdefault(si, []).append(tid)
            if t.get("has_answer") is True:
                gold.append(tid)
                fields.append(f"{fld}.has_answer")

    adversarial = qid.endswith("_abs")
    if not gold:
        answer_ids = _get(item, "answer_session_ids", list, file, qid)
        for sid in answer_ids:
            if sid not in session_ids:
                defects.append(Defect(file, qid, "answer_session_ids", "answer_session_not_found", short(sid),
                                      "ignored (not in haystack_session_ids)"))
        ordinals = [i for i, s in enumerate(session_ids) if s in set(answer_ids)]
        gold = [tid for i in ordinals for tid in by_session.get(i, [])]
        fields = ["answer_session_ids"] * len(gold)
        defects.append(Defect(file, qid, "has_answer", "gold_fallback_to_session", "no turn has has_answer: true",
                              f"gold = all {len(gold)} turns of {len(ordinals)} answer session(s)"))
    if not gold and not adversarial:
        defects.append(Defect(file, qid, "evidence", "question_without_gold", "[]", "kept; its recall is undefined"))

    text = _get(item, "question", str, file, qid)
    asked_at = None
    raw_date = item.get("question_date")
    if raw_date is not None:
        try:
            asked_at = parse_lme_date(raw_date)
        except ValueError:
            defects.append(Defect(file, qid, "question_date", "date_unparseable", short(raw_date),
                                  "asked_at None (after the whole conversation)"))
        _check_range(asked_at, raw_date, file, qid, "question_date")
    answer = item.get("answer", "")
    if answer is None:
        answer = ""
    if not isinstance(answer, str):
        defects.append(Defect(file, qid, "answer", "answer_not_string", short(answer), "converted to str"))
        answer = str(answer)
    category = item.get("question_type") or ""
    if not isinstance(category, str):
        category = str(category)
    q = Question(qid, qid, text, asked_at, tuple(gold), category, adversarial, answer)
    return Conversation(qid, tuple(turns)), q, fields
