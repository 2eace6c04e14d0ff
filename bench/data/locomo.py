"""LoCoMo loader (``locomo10.json``, original 2024 and corrected 2025 releases) -> ``Corpus``.

Mapping:

* Turn: conversation_id = ``sample_id``; turn_id = ``dia_id`` (normalised like evidence ids);
  role from ``roles`` (default speaker_a -> "user", speaker_b -> "assistant"); speaker = name;
  text = ``text``, and when the turn has a ``blip_caption`` (the image itself is not shipped) the
  text gets `` [shares a photo: <caption>]`` appended, as memory-benchmark harnesses commonly do;
  timestamp = ``session_<N>_date_time`` ("1:56 pm on 8 May, 2023", read as UTC) in POSIX seconds;
  position = order in the conversation (sessions by N, turns in file order); session = N - 1.
* Question: question_id = ``"<sample_id>/q<index in qa>"``; asked_at = None (asked after the whole
  conversation); evidence = the resolvable normalised ``dia_id`` s, de-duplicated, order kept;
  category from the int (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial);
  adversarial = category 5; answer = str(answer, else adversarial_answer, else "").

Every problem found is reported as a ``Defect`` (never a crash, never silently dropped):
``session_without_turns``, ``session_without_date``, ``date_unparseable``, ``evidence_multi_id``,
``evidence_zero_padded``, ``evidence_malformed``, ``evidence_unparseable``, ``evidence_not_found``,
``evidence_duplicate``, ``question_without_gold``, ``answer_not_string``, ``category_unknown``,
``turn_id_normalised``, ``turn_empty_text`` (the turn is skipped), and the reachability defects of
``bench.data.timeline`` (``gold_after_asked_at``, ``asked_before_conversation``; none today, as
LoCoMo questions have no ``asked_at``).
Structural errors (not a list, missing ``sample_id``/``conversation``/turn fields, unknown speaker,
duplicate ``dia_id``, a string field holding an unpaired surrogate, a session date outside
1900-01-01..2200-01-01) raise ValueError naming file, record and field.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone

from bench.data import read_json, require_path, short, unicode_problem
from bench.data.timeline import Source, add_reachability_defects, time_problem
from bench.types import ROLES, Conversation, Corpus, Defect, Question, Turn

log = logging.getLogger(__name__)

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DEFAULT_ROLES = {"speaker_a": "user", "speaker_b": "assistant"}
_MONTHS = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"], start=1)}
_DATE = re.compile(r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*", re.I)
_STRICT = re.compile(r"D(\d+):(\d+)")
_LOOSE = re.compile(r"[Dd]\D*?(\d+)\D+(\d+)")
_SESSION = re.compile(r"session_(\d+)")


def parse_locomo_date(text: str) -> float:
    """"1:56 pm on 8 May, 2023" -> POSIX seconds, read as UTC. ValueError when it does not parse."""
    m = _DATE.fullmatch(text) if isinstance(text, str) else None
    if not m or m.group(5).lower() not in _MONTHS:
        raise ValueError(f"unparseable LoCoMo date {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "p" else 0)
    dt = datetime(int(year), _MONTHS[month.lower()], int(day), h, int(minute), tzinfo=timezone.utc)
    return dt.timestamp()


def normalise_dia_id(raw: str) -> tuple[str | None, str]:
    """One id -> (normalised id or None, how): how is "ok", "zero_padded", "malformed" or "unparseable"."""
    s = raw.strip()
    m = _STRICT.fullmatch(s)
    if m:
        norm = f"D{int(m.group(1))}:{int(m.group(2))}"
        return norm, ("ok" if norm == s else "zero_padded")
    m = _LOOSE.fullmatch(s)
    if m:
        return f"D{int(m.group(1))}:{int(m.group(2))}", "malformed"
    return None, "unparseable"


def load_locomo(*, path: str | os.PathLike, name: str = "locomo",
                roles: Mapping[str, str] | None = None) -> Corpus:
    """Read a LoCoMo ``locomo10.json`` (either release) into a Corpus with its defect report."""
    p = require_path(path)
    role_map = dict(DEFAULT_ROLES if roles is None else roles)
    if set(role_map) != {"speaker_a", "speaker_b"} or not set(role_map.values()) <= set(ROLES):
        raise ValueError(f"load_locomo: roles must map speaker_a and speaker_b to one of {ROLES}, got {role_map}")
    data = read_json(p)
    if not isinstance(data, list):
        raise ValueError(f"{p}: expected a JSON list of conversations, got {type(data).__name__}")
    file = str(p)
    defects: list[Defect] = []
    conversations: list[Conversation] = []
    questions: list[Question] = []
    sources: dict[str, Source] = {}
    seen_ids: set[str] = set()
    for ci, sample in enumerate(data):
        sid = _field(sample, "sample_id", str, file, f"[{ci}]")
        if sid in seen_ids:
            raise ValueError(f"{file}: record [{ci}]: field 'sample_id': duplicate {sid!r}")
        seen_ids.add(sid)
        conv = _field(sample, "conversation", dict, file, sid)
        turns = _turns(conv, sid, role_map, file, defects)
        conversations.append(Conversation(sid, tuple(turns)))
        qa = _field(sample, "qa", list, file, sid)
        known = {t.turn_id for t in turns}
        for qi, item in enumerate(qa):
            q, fields = _question(item, sid, qi, known, file, defects)
            questions.append(q)
            sources[q.question_id] = Source(file, f"{sid}/qa[{qi}]", "asked_at", fields)
    corpus = Corpus(name, tuple(conversations), tuple(questions), tuple(defects), file)
    corpus = add_reachability_defects(corpus, sources)  # asked_at is None in LoCoMo: finds nothing today
    log.info("loaded %s from %s: %d conversations, %d turns, %d questions, %d defects",
             name, file, len(conversations), len(corpus.turns()), len(questions), len(corpus.defects))
    return corpus


def _field(obj: object, key: str, typ: type, file: str, record: str):
    if not isinstance(obj, dict):
        raise ValueError(f"{file}: record {record}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise ValueError(f"{file}: record {record}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, typ) or isinstance(value, bool) and typ is not bool:
        raise ValueError(f"{file}: record {record}: field {key!r} must be {typ.__name__}, got {short(value)}")
    if isinstance(value, str) and unicode_problem(value):
        raise ValueError(f"{file}: record {record}: field {key!r} {unicode_problem(value)}")
    return value


def _turns(conv: dict, sid: str, role_map: dict, file: str, defects: list[Defect]) -> list[Turn]:
    names = {}
    for key in ("speaker_a", "speaker_b"):
        names[_field(conv, key, str, file, sid)] = role_map[key]
    numbers = sorted({int(m.group(1)) for k in conv if (m := _SESSION.match(k))})
    turns: list[Turn] = []
    seen: dict[str, str] = {}
    for n in numbers:
        date_key, sess_key = f"session_{n}_date_time", f"session_{n}"
        raw_turns = conv.get(sess_key) or []
        if not isinstance(raw_turns, list):
            raise ValueError(f"{file}: record {sid}: field {sess_key!r} must be a list, got {short(raw_turns)}")
        if not raw_turns:
            defects.append(Defect(file, sid, sess_key, "session_without_turns", short(conv.get(date_key)),
                                  "skipped (date but no turns)"))
            continue
        timestamp = None
        if date_key not in conv:
            defects.append(Defect(file, sid, date_key, "session_without_date", "None", "timestamp None"))
        else:
            try:
                timestamp = parse_locomo_date(conv[date_key])
            except ValueError:
                defects.append(Defect(file, sid, date_key, "date_unparseable", short(conv[date_key]), "timestamp None"))
            problem = timestamp is not None and time_problem(timestamp, conv[date_key])
            if problem:
                raise ValueError(f"{file}: record {sid}: field {date_key!r} {problem}")
        for ti, t in enumerate(raw_turns):
            record = f"{sid}/{sess_key}[{ti}]"
            speaker = _field(t, "speaker", str, file, record)
            raw_id = _field(t, "dia_id", str, file, record)
            text = _field(t, "text", str, file, record)
            if speaker not in names:
                raise ValueError(f"{file}: record {record}: field 'speaker': {speaker!r} is neither speaker_a "
                                 f"nor speaker_b ({', '.join(names)})")
            turn_id, how = normalise_dia_id(raw_id)
            if turn_id is None:
                raise ValueError(f"{file}: record {record}: field 'dia_id': unparseable {raw_id!r}")
            if how != "ok":
                defects.append(Defect(file, record, "dia_id", "turn_id_normalised", short(raw_id),
                                      f"normalised to {turn_id}"))
            if turn_id in seen:
                raise ValueError(f"{file}: record {record}: field 'dia_id': duplicate {turn_id!r} "
                                 f"(also at {seen[turn_id]})")
            seen[turn_id] = record
            caption = t.get("blip_caption")
            if isinstance(caption, str) and caption.strip():
                text = f"{text} [shares a photo: {caption.strip()}]"
            text = text.strip()
            if not text:
                defects.append(Defect(file, record, "text", "turn_empty_text", short(t.get("text")), "turn skipped"))
                continue
            turns.append(Turn(sid, turn_id, names[speaker], speaker, text, timestamp, len(turns), n - 1))
    return turns


def _question(item: object, sid: str, qi: int, known: set[str], file: str,
              defects: list[Defect]) -> tuple[Question, list[str]]:
    """The question and the source field (``evidence[i]``) of each of its gold entries."""
    record = f"{sid}/qa[{qi}]"
    text = _field(item, "question", str, file, record)
    raw_cat = item.get("category")
    if isinstance(raw_cat, int) and not isinstance(raw_cat, bool) and raw_cat in CATEGORIES:
        category = CATEGORIES[raw_cat]
    else:
        category = "" if raw_cat is None else str(raw_cat)
        defects.append(Defect(file, record, "category", "category_unknown", short(raw_cat), f"category {category!r}"))
    adversarial = raw_cat == 5

    answer = item.get("answer")
    field = "answer"
    if answer is None or answer == "":
        answer, field = item.get("adversarial_answer"), "adversarial_answer"
    if answer is None:
        answer = ""
    if not isinstance(answer, str):
        defects.append(Defect(file, record, field, "answer_not_string", short(answer), "converted to str"))
        answer = str(answer)

    raw_evidence = item.get("evidence", [])
    if not isinstance(raw_evidence, list):
        raise ValueError(f"{file}: record {record}: field 'evidence' must be a list, got {short(raw_evidence)}")
    gold: list[str] = []
    fields: list[str] = []
    for ei, raw in enumerate(raw_evidence):
        fld = f"evidence[{ei}]"

        def bad(kind: str, value: object, action: str, fld: str = fld) -> None:
            defects.append(Defect(file, record, fld, kind, short(value), action))

        if not isinstance(raw, str):
            bad("evidence_unparseable", raw, "dropped from gold")
            continue
        parts = [x for x in re.split(r"[;,\s]+", raw.strip()) if x]
        if len(parts) > 1:
            bad("evidence_multi_id", raw, f"split into {', '.join(parts)}")
        for part in parts or [raw]:
            norm, how = normalise_dia_id(part)
            if how == "unparseable":
                bad("evidence_unparseable", part, "dropped from gold")
                continue
            if how == "zero_padded":
                bad("evidence_zero_padded", part, f"normalised to {norm}")
            elif how == "malformed":
                if norm in known:
                    bad("evidence_malformed", part, f"normalised to {norm}")
                else:
                    bad("evidence_malformed", part, f"dropped from gold ({norm} does not exist)")
                    continue
            if norm not in known:
                bad("evidence_not_found", norm, "dropped from gold (no such turn)")
            elif norm in gold:
                bad("evidence_duplicate", norm, "duplicate dropped")
            else:
                gold.append(norm)
                fields.append(fld)
    if not gold and not adversarial:
        defects.append(Defect(file, record, "evidence", "question_without_gold", short(raw_evidence),
                              "kept; its recall is undefined"))
    return Question(f"{sid}/q{qi}", sid, text, None, tuple(gold), category, adversarial, answer), fields
