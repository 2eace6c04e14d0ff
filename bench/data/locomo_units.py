"""Memory units other than raw turns: LoCoMo observations and session summaries, as corpus variants.

Owns ``load_locomo_units`` (and ``unit_pointers``). The result is an ordinary ``Corpus`` whose
"turns" are units, so every store, strategy and metric works on it unchanged:

* ``unit="observation"``: every ``observation/session_<N>_observation/<speaker>`` item
  ``[fact, dia_id(s)]`` (LLM-extracted facts, the analogue of the code-agent article's observer
  agent) is a unit with turn_id ``O<N>:<j>`` (j = 1-based order within the session), role from the
  speaker (``roles`` as for turns), text = the fact, timestamp = the session date, session = N - 1.
  Pointers may be a string, a list of strings, or a comma-joined string; each is normalised like an
  evidence id.
* ``unit="summary"``: every ``session_summary/session_<N>_summary`` is one unit ``S<N>`` pointing at
  every turn of session N; it summarises both speakers, so its role is ``"user"`` (role filters are
  not meaningful on summaries).

Gold maps through the pointers: a unit is gold for a question when it points at one of the
question's gold turns (for summaries: its session holds a gold turn). Questions are the base
corpus's (same ids, category, adversarial flag, answer). Problems are reported as ``Defect`` s:
``unit_pointer_unparseable``, ``unit_pointer_not_found`` (pointer dropped), ``unit_without_pointer``
(unit kept, it can never be gold), ``unit_speaker_unknown`` (unit skipped), ``unit_empty_text``
(skipped), ``question_gold_not_covered`` (a non-adversarial question whose gold turns no unit
points at: kept, its recall is undefined on this unit type). The base LoCoMo defects are kept.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping

from bench.data import read_json, require_path, short
from bench.data.locomo import (
    DEFAULT_ROLES,
    load_locomo,
    normalise_dia_id,
    parse_locomo_date,
)
from bench.types import Conversation, Corpus, Defect, Question, Turn

log = logging.getLogger(__name__)

UNITS = ("observation", "summary")
_OBS = re.compile(r"session_(\d+)_observation")
_SUM = re.compile(r"session_(\d+)_summary")


def load_locomo_units(*, path: str | os.PathLike, unit: str = "observation", name: str | None = None,
                      roles: Mapping[str, str] | None = None) -> Corpus:
    """LoCoMo with observations or session summaries as the memory units (gold mapped through pointers)."""
    corpus, _ = _load(path, unit, name, roles)
    return corpus


def unit_pointers(*, path: str | os.PathLike, unit: str = "observation") -> dict[str, tuple[str, ...]]:
    """Memory key of every unit -> the turn ids (within its conversation) it points at."""
    return _load(path, unit, None, None)[1]


def _load(path, unit: str, name: str | None, roles) -> tuple[Corpus, dict[str, tuple[str, ...]]]:
    if unit not in UNITS:
        raise ValueError(f"load_locomo_units: unit must be one of {', '.join(UNITS)} (got {unit!r})")
    p = require_path(path)
    base = load_locomo(path=p, name=name or {"observation": "locomo_observations", "summary": "locomo_summaries"}[unit], roles=roles)
    role_map = dict(DEFAULT_ROLES if roles is None else roles)
    data = read_json(p)
    file = str(p)
    defects = list(base.defects)
    convs, pointers = [], {}
    for sample, conv in zip(data, base.conversations):
        sid = conv.conversation_id
        known = {t.turn_id for t in conv.turns}
        by_session: dict[int, list[str]] = {}
        for t in conv.turns:
            by_session.setdefault(t.session + 1, []).append(t.turn_id)
        raw = sample.get("conversation", {})
        names = {raw.get("speaker_a"): role_map["speaker_a"], raw.get("speaker_b"): role_map["speaker_b"]}
        units: list[Turn] = []
        if unit == "observation":
            block = _section(sample, "observation", file, sid)
            for key in sorted(block, key=lambda k: _num(_OBS, k)):
                n = _num(_OBS, key)
                if n is None:
                    continue
                per_speaker = block[key]
                if not isinstance(per_speaker, dict):
                    raise ValueError(f"{file}: record {sid}: field 'observation.{key}' must be an object, got {short(per_speaker)}")
                j = 0
                for speaker, items in per_speaker.items():
                    if not isinstance(items, list):
                        raise ValueError(f"{file}: record {sid}: field 'observation.{key}.{speaker}' must be a list, got {short(items)}")
                    for ii, item in enumerate(items):
                        record, field = f"{sid}/observation/{key}/{speaker}[{ii}]", "pointer"
                        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                            raise ValueError(f"{file}: record {record}: expected [fact, dia_id], got {short(item)}")
                        if speaker not in names:
                            defects.append(Defect(file, record, "speaker", "unit_speaker_unknown", short(speaker), "unit skipped"))
                            continue
                        text = item[0].strip()
                        if not text:
                            defects.append(Defect(file, record, "fact", "unit_empty_text", short(item[0]), "unit skipped"))
                            continue
                        j += 1
                        ptrs = _pointers(item[1], known, file, record, field, defects)
                        units.append(Turn(sid, f"O{n}:{j}", names[speaker], speaker, text, _date(raw.get(f"session_{n}_date_time")), len(units), n - 1))
                        pointers[units[-1].key] = ptrs
        else:
            block = _section(sample, "session_summary", file, sid)
            for key in sorted(block, key=lambda k: _num(_SUM, k)):
                n = _num(_SUM, key)
                if n is None:
                    continue
                text = block[key]
                record = f"{sid}/session_summary/{key}"
                if not isinstance(text, str) or not text.strip():
                    defects.append(Defect(file, record, "summary", "unit_empty_text", short(text), "unit skipped"))
                    continue
                ptrs = tuple(by_session.get(n, ()))
                if not ptrs:
                    defects.append(Defect(file, record, "summary", "unit_without_pointer", f"session {n}", "kept; never gold"))
                units.append(Turn(sid, f"S{n}", "user", "summary", text.strip(), _date(raw.get(f"session_{n}_date_time")), len(units), n - 1))
                pointers[units[-1].key] = ptrs
        convs.append(Conversation(sid, tuple(units)))

    questions = []
    for q in base.questions:
        conv_units = next(c.turns for c in convs if c.conversation_id == q.conversation_id)
        gold_turns = set(q.evidence)
        gold = tuple(u.turn_id for u in conv_units if gold_turns.intersection(pointers[u.key]))
        if gold_turns and not gold and not q.adversarial:
            defects.append(Defect(file, q.question_id, "evidence", "question_gold_not_covered", short(list(q.evidence)),
                                  f"kept; no {unit} points at its gold turns"))
        questions.append(Question(q.question_id, q.conversation_id, q.text, q.asked_at, gold, q.category, q.adversarial, q.answer))
    corpus = Corpus(base.name, tuple(convs), tuple(questions), tuple(defects), base.source)
    log.info("loaded %s from %s: %d %s units, %d questions (%d with gold)", corpus.name, file, len(corpus.turns()), unit,
             len(questions), sum(1 for q in questions if q.evidence))
    return corpus, pointers


def _section(sample: dict, key: str, file: str, sid: str) -> dict:
    block = sample.get(key)
    if not isinstance(block, dict):
        raise ValueError(f"{file}: record {sid}: field {key!r} must be an object, got {short(block)}")
    return block


def _num(pattern: re.Pattern, key: str) -> int | None:
    m = pattern.fullmatch(key)
    return int(m.group(1)) if m else None


def _date(raw) -> float | None:
    try:
        return parse_locomo_date(raw) if raw else None
    except ValueError:
        return None


def _pointers(raw, known: set[str], file: str, record: str, field: str, defects: list[Defect]) -> tuple[str, ...]:
    parts = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for part in parts:
        if not isinstance(part, str):
            defects.append(Defect(file, record, field, "unit_pointer_unparseable", short(part), "dropped"))
            continue
        for piece in (x for x in re.split(r"[;,\s]+", part.strip()) if x):
            norm, how = normalise_dia_id(piece)
            if norm is None:
                defects.append(Defect(file, record, field, "unit_pointer_unparseable", short(piece), "dropped"))
            elif norm not in known:
                defects.append(Defect(file, record, field, "unit_pointer_not_found", short(piece), "dropped (no such turn)"))
            elif norm not in out:
                out.append(norm)
    if not out:
        defects.append(Defect(file, record, field, "unit_without_pointer", short(raw), "kept; never gold"))
    return tuple(out)
