"""Label rules shared by every loader: the accepted timestamp range, which gold a question can reach, and
adversarial questions that carry gold.

* ``time_problem(ts, raw)``: None when ``ts`` (POSIX seconds) lies in 1900-01-01..2200-01-01 UTC,
  else the tail of the loader's one-line ValueError ("is out of range: ..."), with a hint when the
  value looks like epoch milliseconds or microseconds (too large, and divided by 1,000 or
  1,000,000 it lands in 1980..2200). Every field that becomes a timestamp (turn timestamps,
  session dates, ``asked_at``) goes through it at load time.
* ``add_reachability_defects(corpus, sources)``: the loaded corpus with one ``Defect`` more per
  gold turn a store can never return and per question that sees no turn at all. The store filter
  shows a turn when ``timestamp <= asked_at``; a turn without timestamp counts as 0.0 (1970-01-01),
  a question without ``asked_at`` sees the whole conversation (``bench.replay.trace.visible``):

  - ``gold_after_asked_at``: a gold turn said after the question was asked; field = the source
    field of that gold entry, value = turn id, turn time and asked_at (ISO, UTC).
  - ``asked_before_conversation``: ``asked_at`` is before every turn of the conversation; field =
    the asked_at field; its gold turns are also reported one by one as ``gold_after_asked_at``.

  The gold is kept (the label is reported, not changed): such a turn is scored as a miss.

  - ``adversarial_with_gold``: an adversarial question (its correct recall is nothing) that the source gives
    gold evidence anyway (LoCoMo gives every category-5 question the turn it twists; LongMemEval its
    ``_abs`` questions' answer turns). One defect per question, field = its evidence field, value = the ids.
    The rule (README, Metric conventions): the evidence stays in the corpus but is never scored
    (``Question.scored_evidence``); the question is scored as adversarial only, by abstention, and stays out of
    recall/precision/F1, ranked.csv, the qrels, calibration and attribution like every adversarial question.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from typing import Any, NamedTuple

from bench.data import short
from bench.types import Corpus, Defect

log = logging.getLogger(__name__)

MIN_TIME = datetime(1900, 1, 1, tzinfo=timezone.utc).timestamp()  # -2208988800.0
MAX_TIME = datetime(2200, 1, 1, tzinfo=timezone.utc).timestamp()  # 7258118400.0
RANGE_TEXT = "1900-01-01..2200-01-01"
# a too-large value that, divided by 1,000 or 1,000,000, lands in 1980..2200 "looks like epoch milliseconds"
HINT_FROM = datetime(1980, 1, 1, tzinfo=timezone.utc).timestamp()
GOLD_AFTER = "gold_after_asked_at"
ASKED_BEFORE = "asked_before_conversation"
ADVERSARIAL_GOLD = "adversarial_with_gold"
_SCALES = ((1_000, "milliseconds"), (1_000_000, "microseconds"))


def iso(ts: float) -> str:
    """POSIX seconds -> "2023-05-08T13:56:00Z" (UTC; fractions of a second kept when present)."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


def _year(ts: float) -> int:
    """The UTC calendar year of ``ts``, also far outside what ``datetime`` can hold (400-year cycles)."""
    days = int(ts // 86400)
    cycles, rest = divmod(days, 146_097)  # days in 400 Gregorian years
    return (date(1970, 1, 1) + timedelta(days=rest)).year + 400 * cycles


def time_problem(ts: float, raw: Any) -> str | None:
    """None when ``ts`` is in the accepted range, else "is out of range: <raw> is year N, ..." (one line)."""
    if MIN_TIME <= ts <= MAX_TIME:
        return None
    year = f" is year {_year(ts)}" if abs(ts) < 1e17 else ""  # beyond ~3 billion years: no year
    msg = f"is out of range: {short(raw)}{year}, outside {RANGE_TEXT} (POSIX seconds, UTC)"
    for scale, unit in _SCALES:
        if ts > MAX_TIME and HINT_FROM <= ts / scale <= MAX_TIME:
            return msg + f"; it looks like epoch {unit} ({short(raw)} / {scale:,} = {iso(ts / scale)})"
    return msg


class Source(NamedTuple):
    """Where a question's labels are in the source file, for its reachability defects."""

    file: str
    record: str
    asked_at_field: str  # e.g. "asked_at", "question_date"
    evidence_fields: Sequence[str]  # the source field of each gold entry, parallel to Question.evidence


def reachability_defects(corpus: Corpus, sources: Mapping[str, Source]) -> list[Defect]:
    """``gold_after_asked_at`` and ``asked_before_conversation`` defects of ``corpus`` (see the module doc)."""
    turns = {c.conversation_id: {t.turn_id: t.timestamp or 0.0 for t in c.turns} for c in corpus.conversations}
    defects: list[Defect] = []
    for q in corpus.questions:
        if q.asked_at is None:
            continue
        src = sources[q.question_id]
        times = turns.get(q.conversation_id, {})
        if times and q.asked_at < min(times.values()):
            defects.append(Defect(src.file, src.record, src.asked_at_field, ASKED_BEFORE,
                                  f"asked_at {iso(q.asked_at)} < first turn {iso(min(times.values()))}",
                                  "kept: no turn is visible when it is asked, every gold turn is a miss"))
        for i, tid in enumerate(q.evidence):
            ts = times.get(tid)
            if ts is not None and ts > q.asked_at:
                defects.append(Defect(src.file, src.record, src.evidence_fields[i], GOLD_AFTER,
                                      f"{tid!r} at {iso(ts)} > asked_at {iso(q.asked_at)}",
                                      "kept in gold: unreachable, scored as a miss"))
    return defects


def adversarial_gold_defects(corpus: Corpus, sources: Mapping[str, Source]) -> list[Defect]:
    """One ``adversarial_with_gold`` defect per adversarial question with gold evidence (see the module doc)."""
    out = []
    for q in corpus.questions:
        if q.adversarial and q.evidence:
            src = sources.get(q.question_id)
            file, record = (src.file, src.record) if src else (corpus.source, q.question_id)
            fields = ", ".join(dict.fromkeys(src.evidence_fields)) if src else ""
            field = fields if fields and len(fields) <= 80 else "evidence"
            out.append(Defect(file, record, field, ADVERSARIAL_GOLD, short(list(q.evidence)),
                              "not scored: an adversarial question's correct recall is nothing (scored by abstention only)"))
    return out


def add_reachability_defects(corpus: Corpus, sources: Mapping[str, Source]) -> Corpus:
    """``corpus`` with its reachability defects, then its ``adversarial_with_gold`` defects, appended to ``corpus.defects``."""
    found = reachability_defects(corpus, sources)
    if found:
        log.info("%s: %d gold turn(s) after asked_at, %d question(s) asked before their conversation "
                 "(reported as defects; such gold is scored as a miss)", corpus.name,
                 sum(d.kind == GOLD_AFTER for d in found), sum(d.kind == ASKED_BEFORE for d in found))
    adversarial = adversarial_gold_defects(corpus, sources)
    if adversarial:
        log.info("%s: %d adversarial question(s) with gold evidence (reported as defects; scored as adversarial, "
                 "the gold unused)", corpus.name, len(adversarial))
    if not found and not adversarial:
        return corpus
    return dataclasses.replace(corpus, defects=corpus.defects + tuple(found) + tuple(adversarial))
