"""The own corpus format: reader ``load_own`` and atomic writer ``write_own``.

A dataset directory holds ``turns.jsonl`` (or ``turns.csv``, not both) and ``questions.jsonl``,
all UTF-8. A ``.jsonl`` file has one JSON object per line; blank lines are skipped; line numbers
in errors count from 1. Fields not listed below are ignored and reported once per file as defect
``unknown_field``.

``turns.jsonl`` -- one object per turn:

==================  ========================================================================
conversation_id     string, required, non-empty
turn_id             string, required, non-empty, unique within its conversation
role                "user" or "assistant", required
speaker             string, optional; absent, null or "" -> the role
text                string, required, non-empty (not only whitespace)
timestamp           ISO-8601 string (no offset = UTC), or number = POSIX seconds, or null/absent
session             integer >= 0, optional, default 0 (0-based session ordinal)
==================  ========================================================================

Extra fields per memory (metadata) are declared in ``metadata.json`` beside the turns file (optional): one
JSON object, field name -> type, or -> ``{"type": ..., "required": true}`` (a bare type is optional)::

    {"memory_type": {"type": "string", "required": true}, "project": "string", "priority": "integer",
     "score": "number", "pinned": "boolean", "tags": "string list"}

Types: ``string`` (non-empty), ``integer``, ``number`` (integer or float, finite), ``boolean``, ``string list``
(a JSON list of strings; in ``turns.csv`` a cell holding a JSON list). In ``turns.csv`` an integer, number or
boolean cell is parsed (``true``/``false``). A field name is letters, digits and ``_`` (not starting with a digit)
and not a turn field. A declared field absent or null on a turn is absent (an error when required). Each turn's
values become ``Turn.metadata`` (sorted (name, value) pairs); a bad value is one error line naming file, line,
turn and field, e.g. ``x/turns.jsonl:4 (turn_id 'D1:2'): field 'priority' must be an integer, got '2'``. Fields
in neither the turn fields nor the schema are reported as ``unknown_field`` as always. Without ``metadata.json``
nothing changes. Strategies filter on these fields with ``filter`` (``bench.replay.visibility.parse_filter``).

Turn order = file order within a conversation (lines of different conversations may interleave);
conversation order = order of first appearance. ``position`` is that 0-based order.

``turns.csv`` -- the same columns with a header row (``conversation_id``, ``turn_id``, ``role``
and ``text`` must be present; others optional). Cells are strings: an empty cell means absent;
``timestamp`` is read as a number when it parses as one, else as ISO-8601; ``session`` as an integer.
Line numbers in errors are the CSV record's first physical line (the header is line 1).

``questions.jsonl`` -- one object per question:

==================  ========================================================================
question_id         string, required, non-empty, unique in the file
conversation_id     string, required, must be a conversation in the turns file
text                string, required, non-empty
asked_at            ISO-8601 string / number (POSIX seconds) / null or absent; null = asked
                    after the whole conversation
evidence            list of turn_id strings of that conversation, required; empty only when
                    ``adversarial`` is true
category            string, optional, default ""
adversarial         boolean, optional, default false; true = the correct recall is nothing
answer              string, optional, default ""
==================  ========================================================================

Errors (ValueError, one line naming file, line, record and field), e.g.
``datasets/x/turns.jsonl:12 (turn_id 'D1:3'): field 'role' must be "user" or "assistant", got 'bot'``:
malformed JSON line, a line that is not an object, wrong type, missing required field, unknown
role, empty text, bad timestamp, a timestamp or ``asked_at`` outside 1900-01-01..2200-01-01 UTC (e.g.
epoch milliseconds; the error says so), duplicate turn_id (within a conversation) or question_id, a
question naming an unknown conversation, non-UTF-8 bytes (names the byte offset), a string holding
an unpaired surrogate (a JSON ``"\\ud800"`` escape), a string longer than ``MAX_TEXT_CHARS``
(100,000 characters), a ``conversation_id`` containing ``|`` (memory ids are
``<conversation_id>|<turn_id>``), a turns file without turns or a questions file without
questions. A missing directory or file raises FileNotFoundError. A UTF-8 byte-order mark at the
start of a file is ignored.

Reported as defects, not errors (the question is kept): evidence naming an unknown turn
(``evidence_not_found``, dropped from gold), a repeated evidence id (``evidence_duplicate``),
a non-adversarial question whose gold is empty (``question_without_gold``: its recall is undefined),
a gold turn whose timestamp is after the question's ``asked_at`` (``gold_after_asked_at``, kept in
gold: unreachable, scored as a miss) and a question asked before every turn of its conversation
(``asked_before_conversation``); see ``bench.data.timeline``.

``write_own(corpus, out_dir)`` writes ``turns.jsonl`` and ``questions.jsonl`` with every field
present (timestamps as ISO-8601 UTC ``...Z`` when whole seconds, else as numbers), into a temp
directory renamed into place (or, when ``out_dir`` exists, temp files replaced into it), and returns
``out_dir``; ``load_own(path=write_own(c, d))`` gives back the same conversations and questions.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.data import read_text, require_path, short, unicode_problem
from bench.data.timeline import Source, add_reachability_defects, time_problem
from bench.output import file_mode
from bench.types import ROLES, Conversation, Corpus, Defect, Question, Turn

log = logging.getLogger(__name__)

TURN_FIELDS = ("conversation_id", "turn_id", "role", "speaker", "text", "timestamp", "session")
QUESTION_FIELDS = ("question_id", "conversation_id", "text", "asked_at", "evidence", "category", "adversarial",
                   "answer")
_TURN_REQUIRED = ("conversation_id", "turn_id", "role", "text")
SCHEMA_FILE = "metadata.json"  # the metadata schema of a dataset directory (optional)
META_TYPES = ("string", "integer", "number", "boolean", "string list")
MAX_TEXT_CHARS = 100_000  # longest string field accepted (LongMemEval's longest turn: 5,425 characters)
ID_SEPARATOR = "|"  # memory ids are "<conversation_id>|<turn_id>" (bench.types.memory_key)


class _Row:
    """One input record with the context every error message needs."""

    def __init__(self, file: str, line: int, data: dict, id_field: str):
        self.file, self.line, self.data = file, line, data
        ident = data.get(id_field)
        self.where = f"{file}:{line}" + (f" ({id_field} {ident!r})" if isinstance(ident, str) and ident else "")

    def error(self, field: str, msg: str) -> ValueError:
        return ValueError(f"{self.where}: field {field!r} {msg}")

    def get(self, field: str, typ: type | tuple, *, required: bool = False, nonempty: bool = False,
            default: Any = None) -> Any:
        value = self.data.get(field)
        if value is None:
            if required:
                raise self.error(field, "is required")
            return default
        if not isinstance(value, typ) or (isinstance(value, bool) and typ is not bool):
            names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
            raise self.error(field, f"must be {_type_word(names)}, got {short(value)}")
        if isinstance(value, str):
            if nonempty and not value.strip():
                raise self.error(field, "must be a non-empty string")
            problem = unicode_problem(value)
            if problem:
                raise self.error(field, problem)
            if len(value) > MAX_TEXT_CHARS:
                raise self.error(field, f"has {len(value):,} characters; the limit is {MAX_TEXT_CHARS:,} "
                                        f"(split it, or check the file is what you think it is)")
        return value

    def time(self, field: str) -> float | None:
        value = self.data.get(field)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise self.error(field, f"must be an ISO-8601 string, a number (POSIX seconds) or null, got {short(value)}")
        if isinstance(value, str):
            try:
                dt = datetime.fromisoformat(value.strip())
            except ValueError:
                raise self.error(field, f"must be an ISO-8601 date-time or a number, got {short(value)}") from None
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=timezone.utc)
            ts = dt.timestamp()
        elif not math.isfinite(value):
            raise self.error(field, f"must be a finite number, got {short(value)}")
        else:
            ts = float(value)
        problem = time_problem(ts, value)
        if problem:
            raise self.error(field, problem)
        return ts


def _type_word(name: str) -> str:
    return {"str": "a string", "int": "an integer", "bool": "a boolean (true/false)", "list": "a list",
            "int or float": "a number"}.get(name, name)


def _jsonl(path: Path, id_field: str) -> Iterator[_Row]:
    file = str(path)
    # split on "\n" only: str.splitlines() would also split inside JSON strings holding U+2028 etc.
    for n, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{file}:{n}: malformed JSON (column {e.colno}): {e.msg}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{file}:{n}: expected a JSON object, got {type(data).__name__}")
        yield _Row(file, n, data, id_field)


def _csv(path: Path) -> Iterator[_Row]:
    file = str(path)
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise ValueError(f"{file}:1: empty CSV file (expected a header row)") from None
    except csv.Error as e:
        raise ValueError(f"{file}:1: malformed CSV: {e}") from None
    header = [h.strip() for h in header]
    missing = [f for f in _TURN_REQUIRED if f not in header]
    if missing:
        raise ValueError(f"{file}:1: header lacks required column(s) {', '.join(missing)}")
    last = reader.line_num
    while True:
        start = last + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise ValueError(f"{file}:{start}: malformed CSV: {e}") from None
        last = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise ValueError(f"{file}:{start}: has {len(cells)} cells, header has {len(header)}")
        data: dict[str, Any] = {h: (c if c != "" else None) for h, c in zip(header, cells)}
        row = _Row(file, start, data, "turn_id")
        ts = data.get("timestamp")
        if ts is not None:
            try:
                data["timestamp"] = float(ts)
            except ValueError:
                pass  # an ISO string, checked later
        sess = data.get("session")
        if sess is not None:
            try:
                data["session"] = int(sess)
            except ValueError:
                raise row.error("session", f"must be an integer, got {short(sess)}") from None
        yield row


def _unknown(row: _Row, known: tuple[str, ...], reported: set[str], defects: list[Defect]) -> None:
    for key in row.data:
        if key not in known and key not in reported:
            reported.add(key)
            defects.append(Defect(row.file, f"line {row.line}", key, "unknown_field", short(row.data[key]),
                                  "ignored (reported once per file)"))


def load_own(*, path: str | os.PathLike, name: str | None = None) -> Corpus:
    """Read an own-format dataset directory into a Corpus (name defaults to the directory name)."""
    d = require_path(path)
    if not d.is_dir():
        raise ValueError(f"{d}: an own-format dataset is a directory holding turns.jsonl (or turns.csv) "
                         f"and questions.jsonl")
    jsonl, csv_path, qpath = d / "turns.jsonl", d / "turns.csv", d / "questions.jsonl"
    if jsonl.exists() and csv_path.exists():
        raise ValueError(f"{d}: holds both turns.jsonl and turns.csv; keep one")
    if not jsonl.exists() and not csv_path.exists():
        raise FileNotFoundError(f"{jsonl}: not found (nor turns.csv); an own-format dataset needs one of them")
    require_path(qpath)
    defects: list[Defect] = []
    turns_by_conv: dict[str, list[Turn]] = {}
    seen_turns: dict[tuple[str, str], int] = {}
    reported: set[str] = set()
    schema = read_schema(d / SCHEMA_FILE)
    rows = _jsonl(jsonl, "turn_id") if jsonl.exists() else _csv(csv_path)
    for row in rows:
        _unknown(row, TURN_FIELDS + tuple(schema), reported, defects)
        cid = row.get("conversation_id", str, required=True, nonempty=True)
        if ID_SEPARATOR in cid:
            raise row.error("conversation_id", f"must not contain {ID_SEPARATOR!r} (it separates conversation and "
                                               f"turn in memory ids), got {short(cid)}")
        tid = row.get("turn_id", str, required=True, nonempty=True)
        role = row.data.get("role")
        if role is None:
            raise row.error("role", "is required")
        if role not in ROLES:
            raise row.error("role", f'must be "user" or "assistant", got {short(role)}')
        speaker = row.get("speaker", str) or role
        text = row.get("text", str, required=True, nonempty=True)
        ts = row.time("timestamp")
        session = row.get("session", int, default=0)
        if session < 0:
            raise row.error("session", f"must be >= 0, got {session}")
        if (cid, tid) in seen_turns:
            raise row.error("turn_id", f"duplicate in conversation {cid!r} (first at line {seen_turns[cid, tid]})")
        seen_turns[cid, tid] = row.line
        conv = turns_by_conv.setdefault(cid, [])
        conv.append(Turn(cid, tid, role, speaker, text, ts, len(conv), session, _metadata(row, schema)))

    if not turns_by_conv:
        raise ValueError(f"{jsonl if jsonl.exists() else csv_path}: holds no turns (a dataset needs at least one)")
    questions: list[Question] = []
    sources: dict[str, Source] = {}
    seen_q: dict[str, int] = {}
    reported = set()
    for row in _jsonl(qpath, "question_id"):
        _unknown(row, QUESTION_FIELDS, reported, defects)
        qid = row.get("question_id", str, required=True, nonempty=True)
        if qid in seen_q:
            raise row.error("question_id", f"duplicate (first at line {seen_q[qid]})")
        seen_q[qid] = row.line
        cid = row.get("conversation_id", str, required=True, nonempty=True)
        if cid not in turns_by_conv:
            raise row.error("conversation_id", f"names unknown conversation {cid!r} (not in the turns file)")
        text = row.get("text", str, required=True, nonempty=True)
        asked_at = row.time("asked_at")
        evidence = row.get("evidence", list, required=True)
        category = row.get("category", str, default="")
        adversarial = row.get("adversarial", bool, default=False)
        answer = row.get("answer", str, default="")
        known = {t.turn_id for t in turns_by_conv[cid]}
        gold: list[str] = []
        fields: list[str] = []  # the evidence[i] of each gold entry
        for i, tid in enumerate(evidence):
            if not isinstance(tid, str):
                raise row.error(f"evidence[{i}]", f"must be a string (a turn_id), got {short(tid)}")
            if unicode_problem(tid):
                raise row.error(f"evidence[{i}]", unicode_problem(tid))
            record = f"line {row.line} ({qid})"
            if tid not in known:
                defects.append(Defect(row.file, record, f"evidence[{i}]", "evidence_not_found", short(tid),
                                      "dropped from gold (no such turn in the conversation)"))
            elif tid in gold:
                defects.append(Defect(row.file, record, f"evidence[{i}]", "evidence_duplicate", short(tid),
                                      "duplicate dropped"))
            else:
                gold.append(tid)
                fields.append(f"evidence[{i}]")
        if not gold and not adversarial:
            defects.append(Defect(row.file, f"line {row.line} ({qid})", "evidence", "question_without_gold",
                                  short(evidence), "kept; its recall is undefined"))
        questions.append(Question(qid, cid, text, asked_at, tuple(gold), category, adversarial, answer))
        sources[qid] = Source(row.file, f"line {row.line} ({qid})", "asked_at", fields)

    if not questions:
        raise ValueError(f"{qpath}: holds no questions (a dataset needs at least one)")
    conversations = tuple(Conversation(cid, tuple(ts)) for cid, ts in turns_by_conv.items())
    corpus = Corpus(name or d.resolve().name, conversations, tuple(questions), tuple(defects), str(d))
    corpus = add_reachability_defects(corpus, sources)
    log.info("loaded %s from %s: %d conversations, %d turns, %d questions, %d defects",
             corpus.name, d, len(conversations), len(corpus.turns()), len(questions), len(corpus.defects))
    return corpus


def read_schema(path: Path) -> dict[str, tuple[str, bool]]:
    """``metadata.json`` -> {field: (type, required)} ({} when the file is absent); one error line per problem."""
    if not path.exists():
        return {}
    file = str(path)
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{file}:{e.lineno}: malformed JSON (column {e.colno}): {e.msg}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{file}: expected a JSON object (field name -> type), got {type(data).__name__}")
    out: dict[str, tuple[str, bool]] = {}
    for name, spec in data.items():
        if not name.isidentifier() or not name.isascii():
            raise ValueError(f"{file}: field {name!r}: a name is letters, digits and '_', not starting with a digit")
        if name in TURN_FIELDS:
            raise ValueError(f"{file}: field {name!r}: is a turn field already; choose another name")
        required = False
        if isinstance(spec, dict):
            extra = sorted(set(spec) - {"type", "required"})
            if extra:
                raise ValueError(f"{file}: field {name!r}: unknown key(s) {', '.join(map(repr, extra))} (expected 'type', 'required')")
            required = spec.get("required", False)
            if not isinstance(required, bool):
                raise ValueError(f"{file}: field {name!r}: 'required' must be true or false, got {short(required)}")
            spec = spec.get("type")
        if spec not in META_TYPES:
            raise ValueError(f"{file}: field {name!r}: type must be one of {', '.join(map(repr, META_TYPES))}, got {short(spec)}")
        out[name] = (spec, required)
    return out


def _metadata(row: _Row, schema: dict[str, tuple[str, bool]]) -> tuple[tuple[str, object], ...]:
    """The row's declared fields, typed and checked, as sorted (name, value) pairs (absent ones left out)."""
    out = []
    for name in sorted(schema):
        typ, required = schema[name]
        value = row.data.get(name)
        if isinstance(value, str) and row.file.endswith(".csv"):
            value = row.data[name] = _csv_cell(row, name, typ, value)
        if value is None:
            if required:
                raise row.error(name, "is required (metadata.json)")
            continue
        if typ == "string":
            value = row.get(name, str, nonempty=True)
        elif typ == "integer":
            value = row.get(name, int)
        elif typ == "boolean":
            value = row.get(name, bool)
        elif typ == "number":
            value = row.get(name, (int, float))
            if not math.isfinite(value):
                raise row.error(name, f"must be a finite number, got {short(value)}")
            value = float(value)
        else:
            items = row.get(name, list)
            for i, v in enumerate(items):
                if not isinstance(v, str) or not v.strip():
                    raise row.error(f"{name}[{i}]", f"must be a non-empty string, got {short(v)}")
                if unicode_problem(v):
                    raise row.error(f"{name}[{i}]", unicode_problem(v))
            value = tuple(items)
        out.append((name, value))
    return tuple(out)


def _csv_cell(row: _Row, name: str, typ: str, cell: str):
    """A CSV cell of a declared field as its type (left as the string when it is a string field)."""
    try:
        if typ == "integer":
            return int(cell)
        if typ == "number":
            return float(cell)
        if typ == "boolean":
            return {"true": True, "false": False}[cell.strip().lower()]
        if typ == "string list":
            return json.loads(cell)
    except (ValueError, KeyError):
        word = {"integer": "an integer", "number": "a number", "boolean": "true or false",
                "string list": "a JSON list of strings"}[typ]
        raise row.error(name, f"must be {word}, got {short(cell)}") from None
    return cell


def _schema_of(corpus: Corpus) -> dict[str, str]:
    """{field: type} of the turns' metadata (``write_own``); a field holding two types is an error."""
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string", tuple: "string list"}
    out: dict[str, str] = {}
    for t in corpus.turns():
        for k, v in t.metadata:
            typ = kinds.get(type(v))
            if typ is None or out.setdefault(k, typ) != typ:
                raise ValueError(f"write_own: turn {t.conversation_id!r}/{t.turn_id!r}: metadata field {k!r} "
                                 f"holds {short(v)}, not a {out.get(k, 'known type')}")
    return out


def _time_out(ts: float | None) -> str | float | None:
    if ts is None:
        return None
    if float(ts).is_integer():
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return float(ts)


def _dump(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def write_own(corpus: Corpus, out_dir: str | os.PathLike) -> Path:
    """Write ``corpus`` in the own format into ``out_dir`` (atomically) and return ``out_dir``."""
    out = Path(out_dir)
    turns, questions = [], []
    for t in corpus.turns():
        if t.role not in ROLES or not t.text.strip() or not t.conversation_id or not t.turn_id:
            raise ValueError(f"write_own: turn {t.conversation_id!r}/{t.turn_id!r} cannot be written "
                             f"(role {t.role!r}, empty id or text)")
        turns.append({"conversation_id": t.conversation_id, "turn_id": t.turn_id, "role": t.role,
                      "speaker": t.speaker, "text": t.text, "timestamp": _time_out(t.timestamp),
                      "session": t.session, **{k: list(v) if isinstance(v, tuple) else v for k, v in t.metadata}})
    for q in corpus.questions:
        questions.append({"question_id": q.question_id, "conversation_id": q.conversation_id, "text": q.text,
                          "asked_at": _time_out(q.asked_at), "evidence": list(q.evidence), "category": q.category,
                          "adversarial": q.adversarial, "answer": q.answer})
    files = {"turns.jsonl": _dump(turns), "questions.jsonl": _dump(questions)}
    schema = _schema_of(corpus)
    if schema:  # the types of the metadata the turns hold (every field optional)
        files[SCHEMA_FILE] = json.dumps(schema, indent=1) + "\n"
    if out.exists():
        if not out.is_dir():
            raise ValueError(f"write_own: {out} exists and is not a directory")
        if (out / "turns.csv").exists():
            raise ValueError(f"write_own: {out} holds a turns.csv; load_own refuses a directory with both "
                             f"turns.csv and turns.jsonl, remove it first")
        for fname, text in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{fname}.", suffix=".tmp", dir=out)
            try:
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                    f.write(text)
                os.chmod(tmp, file_mode())  # mkstemp makes 0600; the umask decides
                os.replace(tmp, out / fname)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        try:
            for fname, text in files.items():
                (tmp_dir / fname).write_text(text, encoding="utf-8", newline="\n")
            os.chmod(tmp_dir, file_mode(0o777))  # mkdtemp makes 0700
            os.replace(tmp_dir, out)
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
    log.info("wrote %s: %d turns, %d questions to %s", corpus.name, len(turns), len(questions), out)
    return out
