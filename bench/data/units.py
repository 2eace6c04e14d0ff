"""Memory units: what one stored memory is, for any corpus, applied after loading (config ``memory:``).

Owns ``UnitSpec`` (the setting, checked), ``apply_units`` and ``build_units`` (the corpus whose "turns"
are the units, plus each unit's pointers to the source turns). The result is an ordinary ``Corpus``, so
every store, strategy, the threshold sweep, token counts and the recommendation work on it unchanged.

* ``unit="turn"`` (default): one memory per turn, as loaded.
* ``unit="session"``: one memory per session (``Turn.session``; LoCoMo ``D<N>`` is session N - 1), turn_id
  ``s<session ordinal>`` (0-based; for LongMemEval the prefix of its turn ids ``s<i>:t<j>``).
* ``unit="chunk"``: fixed windows of ``chunk_tokens`` tokens (tiktoken ``encoding``), consecutive windows
  sharing ``chunk_overlap`` tokens, over the text of one session (never across sessions); turn_id
  ``s<session>:c<j>`` (j 0-based). The last window of a session may be shorter; every token is in one.
* ``roles="all"`` indexes every turn; ``roles="user"`` only the user's turns (LongMemEval's published
  retrieval indexes user turns only), the others are dropped before units are built.

Text of a session or chunk unit: with ``roles="all"`` one ``role: text`` line per turn; with
``roles="user"`` the turns' texts, one per line. Injected tokens are this text (the formats render a
unit like a turn). Role of a session or chunk unit: ``user`` when it holds a user turn, else
``assistant`` (a role filter on such units is coarse); speaker: the unit name. Timestamp: the latest of
its turns' (a unit is visible once all of it was said); None when none of its turns has one.

Gold follows the unit: a unit is gold for a question when it holds one of the question's gold turns
that is indexed (with ``roles="user"``, an assistant gold turn makes no unit gold, as in LongMemEval,
whose session is "noans" then). A non-adversarial question that keeps no gold is reported as defect
``question_gold_not_covered`` (the kind of ``bench.data.locomo_units``), kept, its recall undefined (NaN).
The corpus name gets the unit as a suffix unless the spec is the default (``longmemeval_s-session-user``),
so runs of several units sit side by side in one multirun.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from bench.data import short
from bench.types import Conversation, Corpus, Defect, Question, Turn

log = logging.getLogger(__name__)

UNITS = ("turn", "session", "chunk")
ROLE_FILTERS = ("all", "user")


@dataclass(frozen=True, slots=True)
class UnitSpec:
    unit: str = "turn"
    roles: str = "all"
    chunk_tokens: int = 256
    chunk_overlap: int = 32
    encoding: str = "cl100k_base"  # or o200k_base

    @property
    def is_default(self) -> bool:
        return self.unit == "turn" and self.roles == "all"

    def suffix(self) -> str:
        """The corpus-name suffix ("" for the default): ``-session``, ``-chunk256o32``, ``-turn-user``, ..."""
        if self.is_default:
            return ""
        unit = f"chunk{self.chunk_tokens}o{self.chunk_overlap}" if self.unit == "chunk" else self.unit
        return f"-{unit}" + ("-user" if self.roles == "user" else "")

    def describe(self) -> dict:
        d = asdict(self)
        if self.unit != "chunk":
            for k in ("chunk_tokens", "chunk_overlap", "encoding"):
                d.pop(k)
        return d


def check_spec(settings: Mapping | None, where: str = "memory") -> UnitSpec:
    """A ``memory:`` config block as a UnitSpec; one line naming the key otherwise."""
    s = dict(settings or {})
    unknown = sorted(set(s) - set(UnitSpec.__slots__))
    if unknown:
        raise ValueError(f"config {where}: unknown key(s) {', '.join(unknown)}; expected {', '.join(UnitSpec.__slots__)}")
    spec = UnitSpec(**s)
    if spec.unit not in UNITS:
        raise ValueError(f"config {where}.unit: expected one of {', '.join(UNITS)}, got {spec.unit!r}")
    if spec.roles not in ROLE_FILTERS:
        raise ValueError(f"config {where}.roles: expected one of {', '.join(ROLE_FILTERS)}, got {spec.roles!r}")
    for key in ("chunk_tokens", "chunk_overlap"):
        v = getattr(spec, key)
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == "chunk_tokens" else 0):
            raise ValueError(f"config {where}.{key}: expected an integer >= {1 if key == 'chunk_tokens' else 0}, got {v!r}")
    from bench.data.tokens import SUPPORTED

    if spec.encoding not in SUPPORTED:
        raise ValueError(f"config {where}.encoding: expected one of {', '.join(SUPPORTED)}, got {spec.encoding!r}")
    if spec.chunk_overlap >= spec.chunk_tokens:
        raise ValueError(f"config {where}.chunk_overlap: {spec.chunk_overlap} must be smaller than chunk_tokens "
                         f"({spec.chunk_tokens})")
    return spec


def apply_units(corpus: Corpus, spec: UnitSpec | None = None) -> Corpus:
    """``corpus`` with ``spec``'s memory units (the corpus itself for the default spec)."""
    spec = spec or UnitSpec()
    return corpus if spec.is_default else build_units(corpus, spec)[0]


def build_units(corpus: Corpus, spec: UnitSpec) -> tuple[Corpus, dict[str, tuple[str, ...]]]:
    """(the unit corpus, memory key of every unit -> the source turn ids it holds)."""
    spec = check_spec(asdict(spec))
    encode = decode = None
    if spec.unit == "chunk":
        from bench.data.tokens import get_encoding

        enc = get_encoding(spec.encoding)  # offline: the encodings ship with recallbench
        encode, decode = enc.encode_ordinary, enc.decode
    convs: list[Conversation] = []
    pointers: dict[str, tuple[str, ...]] = {}
    for conv in corpus.conversations:
        turns = [t for t in conv.turns if spec.roles == "all" or t.role == "user"]
        if spec.unit == "turn":
            units = [Turn(t.conversation_id, t.turn_id, t.role, t.speaker, t.text, t.timestamp, i, t.session)
                     for i, t in enumerate(turns)]
            pointers.update((u.key, (u.turn_id,)) for u in units)
        else:
            units = []
            for session, members in _sessions(turns):
                pieces = [(f"s{session}", members)] if spec.unit == "session" else \
                    _chunks(session, members, spec, encode, decode)
                for uid, held, *text in pieces:
                    u = Turn(conv.conversation_id, uid, "user" if any(t.role == "user" for t in held) else "assistant",
                             spec.unit, text[0] if text else _text(held, spec.roles), _latest(held), len(units), session)
                    units.append(u)
                    pointers[u.key] = tuple(t.turn_id for t in held)
        convs.append(Conversation(conv.conversation_id, tuple(units)))

    by_conv = {c.conversation_id: c.turns for c in convs}
    defects = list(corpus.defects)
    questions = []
    for q in corpus.questions:
        gold_turns = set(q.evidence)
        gold = tuple(u.turn_id for u in by_conv.get(q.conversation_id, ()) if gold_turns.intersection(pointers[u.key]))
        if gold_turns and not gold and not q.adversarial:
            defects.append(Defect(corpus.source, q.question_id, "evidence", "question_gold_not_covered", short(list(q.evidence)),
                                  f"kept; no {spec.unit} unit holds its gold turns (roles={spec.roles}): recall undefined"))
        questions.append(Question(q.question_id, q.conversation_id, q.text, q.asked_at, gold, q.category, q.adversarial, q.answer))
    out = Corpus(corpus.name + spec.suffix(), tuple(convs), tuple(questions), tuple(defects), corpus.source)
    log.info("memory units of %s: %s, roles %s -> %d units from %d turns", corpus.name, spec.unit, spec.roles,
             len(pointers), len(corpus.turns()))
    return out, pointers


def _sessions(turns: list[Turn]) -> list[tuple[int, list[Turn]]]:
    """Turns grouped by session, sessions in order of first appearance, turns in conversation order."""
    groups: dict[int, list[Turn]] = {}
    for t in turns:
        groups.setdefault(t.session, []).append(t)
    return list(groups.items())


def _line(t: Turn, roles: str) -> str:
    return t.text if roles == "user" else f"{t.role}: {t.text}"


def _text(turns: list[Turn], roles: str) -> str:
    return "\n".join(_line(t, roles) for t in turns)


def _latest(turns: list[Turn]) -> float | None:
    stamps = [t.timestamp for t in turns if t.timestamp is not None]
    return max(stamps) if stamps else None


def _chunks(session: int, turns: list[Turn], spec: UnitSpec, encode, decode) -> list[tuple]:
    """(turn_id, turns held, text) of every window over the session's text (its lines joined by newlines)."""
    tokens: list[int] = []
    spans: list[tuple[int, int]] = []
    for i, t in enumerate(turns):
        start = len(tokens)
        tokens += encode(_line(t, spec.roles) + ("\n" if i < len(turns) - 1 else ""))
        spans.append((start, len(tokens)))
    out = []
    step = spec.chunk_tokens - spec.chunk_overlap
    start = 0
    while True:
        end = min(start + spec.chunk_tokens, len(tokens))
        held = [t for t, (a, b) in zip(turns, spans) if a < end and b > start]
        out.append((f"s{session}:c{len(out)}", held, decode(tokens[start:end]).strip() or " "))
        if end >= len(tokens):
            return out
        start += step
