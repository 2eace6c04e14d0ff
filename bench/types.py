"""Frozen data that crosses modules: turns, questions, corpora, defects, hits, filters, batches; and the marker
that a synthetic corpus writes into its texts and the synthetic embedder reads (``synthetic_mark``).

Owns no behaviour beyond trivial derived properties; imports nothing from the package.
Ids are strings. Times are POSIX seconds (UTC) as floats, or None when the source has none.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

ROLES = ("user", "assistant")


# ``[topic T]`` on every text of a synthetic corpus, ``[fact F]`` after it on a planted gold turn and its question: written
# by ``bench.data.synthetic``, read by ``bench.embedders.synthetic`` (group 1: T, group 2: F or None).
SYNTHETIC_MARK = re.compile(r"\[topic (\d+)\](?:\[fact (\d+)\])?")


def synthetic_mark(topic: int, fact: int | None = None) -> str:
    """The marker of a synthetic text: ``[topic 3]``, ``[topic 3][fact 9]`` (``SYNTHETIC_MARK`` reads it back)."""
    return f"[topic {topic}]" + ("" if fact is None else f"[fact {fact}]")


def memory_key(conversation_id: str, turn_id: str) -> str:
    """The id a store sees for one turn: unique across the corpus (turn ids repeat across conversations)."""
    return f"{conversation_id}|{turn_id}"


@dataclass(frozen=True, slots=True)
class Turn:
    conversation_id: str
    turn_id: str  # unique within its conversation, e.g. LoCoMo "D3:7"
    role: str  # "user" | "assistant"
    speaker: str  # display name; may equal role
    text: str
    timestamp: float | None  # when the turn was said (session date for LoCoMo)
    position: int  # 0-based order within the conversation
    session: int = 0  # 0-based session ordinal within the conversation (never a source session id)
    # the id a store sees (memory_key); built once here, so every hit, trace and table shares one string per turn
    key: str = field(init=False, repr=False, compare=False)
    # extra fields the corpus declares (own format: metadata.json), as sorted (name, value) pairs; a string list is a
    # tuple. Absent optional fields are left out. () for corpora without a schema.
    metadata: tuple[tuple[str, object], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", memory_key(self.conversation_id, self.turn_id))


@dataclass(frozen=True, slots=True)
class Question:
    question_id: str
    conversation_id: str
    text: str
    asked_at: float | None  # None: asked after the whole conversation
    evidence: tuple[str, ...]  # gold turn ids within the conversation (resolvable ones only)
    category: str = ""  # e.g. "single-hop", "temporal", LongMemEval question_type
    adversarial: bool = False  # correct answer is "nothing": excluded from main metrics
    answer: str = ""

    @property
    def scored_evidence(self) -> tuple[str, ...]:
        """The gold that scoring uses: ``evidence``, none for an adversarial question (its correct recall is nothing;
        gold a source gives one anyway is reported by the loader as defect ``adversarial_with_gold`` and unused)."""
        return () if self.adversarial else self.evidence


@dataclass(frozen=True, slots=True)
class Conversation:
    conversation_id: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Defect:
    """One problem found in a source file: reported, never a crash, never silently dropped."""

    file: str
    record: str  # e.g. "conv-26/qa[12]"
    field: str  # e.g. "evidence[0]"
    kind: str  # short machine-readable kind, e.g. "evidence_out_of_range"
    value: str  # the offending raw value (repr, truncated)
    action: str  # what the loader did: "normalised to D30:5", "dropped from gold", ...


@dataclass(frozen=True, slots=True)
class Corpus:
    name: str
    conversations: tuple[Conversation, ...]
    questions: tuple[Question, ...]
    defects: tuple[Defect, ...] = ()
    source: str = ""  # path or description of where it was read from

    def turns(self) -> tuple[Turn, ...]:
        return tuple(t for c in self.conversations for t in c.turns)


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: store id and similarity (higher is better)."""

    id: str
    score: float


@dataclass(frozen=True, slots=True, eq=False)
class Hits(Sequence):
    """A store's answer to one search, best first, as two parallel tuples (ids, similarities).

    Columnar so that the replay loop copies two references per query instead of building and
    freeing one object per hit; indexing and iterating still give ``Hit`` objects, and it equals
    any sequence of the same hits.
    """

    ids: tuple[str, ...] = ()
    scores: tuple[float, ...] = ()
    native: tuple[float, ...] = ()  # the store's own score of each hit (its distance...: bench.backends.scores), or ()

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.scores):
            raise ValueError(f"Hits: {len(self.ids)} ids but {len(self.scores)} scores")
        if self.native and len(self.native) != len(self.ids):
            raise ValueError(f"Hits: {len(self.ids)} ids but {len(self.native)} native scores")

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Hits(self.ids[i], self.scores[i], self.native[i])
        return Hit(self.ids[i], self.scores[i])

    def __iter__(self) -> Iterator[Hit]:
        return map(Hit, self.ids, self.scores)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Hits):
            return self.ids == other.ids and self.scores == other.scores
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Where:
    """Search filter. None means "no constraint"."""

    conversation_id: str | None = None
    roles: tuple[str, ...] | None = None
    before: float | None = None  # only memories with timestamp <= before
    # metadata conditions, all must hold: (field, op, value), op in eq | in | gte | lte | gt | lt (``in``: a tuple);
    # built and evaluated by bench.replay.visibility (parse_filter, meta_admits)
    metadata: tuple[tuple[str, str, object], ...] | None = None


@dataclass(frozen=True, slots=True)
class MemoryBatch:
    """Rows to add to a store. vectors: float32 (n, dim), L2-normalised."""

    ids: tuple[str, ...]
    vectors: np.ndarray
    conversation_ids: tuple[str, ...]
    roles: tuple[str, ...]
    timestamps: tuple[float, ...]  # missing timestamps are stored as 0.0
    positions: tuple[int, ...] = field(default=())
    metadata: tuple[tuple[tuple[str, object], ...], ...] = field(default=())  # per row: Turn.metadata; () when none

    def __post_init__(self) -> None:
        n = len(self.ids)
        if self.vectors.ndim != 2 or self.vectors.shape[0] != n:
            raise ValueError(f"MemoryBatch: vectors shape {self.vectors.shape} does not match {n} ids")
        for name in ("conversation_ids", "roles", "timestamps"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"MemoryBatch: {name} has {len(getattr(self, name))} entries, expected {n}")
