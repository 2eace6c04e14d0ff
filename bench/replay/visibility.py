"""Who may see a memory, and the exact order of what a question may see: the one owner of both rules.

Visibility: a question sees a memory when the memory belongs to the question's conversation, its
role is among ``roles`` (None = every role) and it was said at or before the question was asked
(``timestamp <= asked_at``). A question without ``asked_at`` sees its whole conversation; a memory
without a timestamp counts as said at 0.0 (so a question with ``asked_at >= 0`` sees it). Stores
apply the same rule through a ``Where`` (``bench.backends.base``).

Metadata (``Where.metadata``, from a run's ``filter`` setting, ``parse_filter``): a memory is also visible only when
every condition holds on its ``Turn.metadata`` (``meta_admits``): ``eq`` (on a string list: the list holds the
value), ``in`` (one of the values; on a string list: holds one of them), ``gte``/``lte``/``gt``/``lt`` (integer and
number fields). A memory without the field fails the condition. Stores that can apply it natively do
(``metadata`` in their ``Capabilities.filters``); for the others the trace post-filters (``bench.replay.trace``).

Two forms, the same results:

* scalar: ``question_filter`` (a question's ``Where``), ``admits`` (one memory's fields against a
  ``Where``) and ``visible`` (one Turn against a ``Where``);
* vectorised: ``Visibility``, per-row arrays of a corpus with each conversation's row range, so a
  question's visible memories are a mask over its conversation, never over the whole corpus.

Exact ranking (``Visibility.top`` and ``Visibility.ranks``): among the memories a question may see,
similarity descending, ties by memory key (ascending). The trace's exact pass (fidelity, the gold
memories' exact ranks) uses it; exact stores order their hits the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from operator import itemgetter

import numpy as np

from bench.types import Corpus, Question, Turn, Where


def question_filter(q: Question, *, roles: tuple[str, ...] | None = None,
                    metadata: tuple[tuple[str, str, object], ...] | None = None) -> Where:
    """What a question may see: its own conversation, the roles given, turns said at or before it was asked
    (and, with ``metadata``, whose metadata passes those conditions)."""
    return Where(conversation_id=q.conversation_id, roles=roles, before=q.asked_at, metadata=metadata or None)


def admits(where: Where, *, conversation_id: str, role: str, timestamp: float | None, metadata=()) -> bool:
    """True when a memory with these fields passes ``where`` (a missing timestamp counts as 0.0)."""
    return (
        (where.conversation_id is None or conversation_id == where.conversation_id)
        and (where.roles is None or role in where.roles)
        and (where.before is None or (timestamp or 0.0) <= where.before)
        and (not where.metadata or meta_admits(where.metadata, metadata))
    )


def visible(turn: Turn, where: Where) -> bool:
    return admits(where, conversation_id=turn.conversation_id, role=turn.role, timestamp=turn.timestamp,
                  metadata=turn.metadata)


FILTER_OPS = ("eq", "in", "gte", "lte", "gt", "lt")
_RANGE = {"gte": lambda a, b: a >= b, "lte": lambda a, b: a <= b, "gt": lambda a, b: a > b, "lt": lambda a, b: a < b}


def parse_filter(spec: Mapping | None, *, source: str = "filter") -> tuple[tuple[str, str, object], ...] | None:
    """A metadata filter as written in a config -> ``Where.metadata`` conditions (sorted), None when empty.

    ``{memory_type: [fact, preference], project: alpha, priority: {gte: 2, lt: 5}}``: a scalar is equality, a list
    is membership, a mapping holds operators (``eq in gte lte gt lt``). One error line naming the field otherwise."""
    if not spec:
        return None
    if not isinstance(spec, Mapping):
        raise ValueError(f"{source}: must be a mapping field -> value, list or {{op: value}}, got {spec!r}")
    conds: list[tuple[str, str, object]] = []
    for name, value in spec.items():
        ops = dict(value) if isinstance(value, Mapping) else {"in" if _is_list(value) else "eq": value}
        if not ops:
            raise ValueError(f"{source}: field {name!r}: an empty mapping filters nothing; give {{op: value}}")
        for op, v in ops.items():
            if op not in FILTER_OPS:
                raise ValueError(f"{source}: field {name!r}: unknown operator {op!r} (one of {', '.join(FILTER_OPS)})")
            if op == "in":
                if not _is_list(v) or not v or not all(_scalar(x) for x in v):
                    raise ValueError(f"{source}: field {name!r}: 'in' takes a non-empty list of strings, numbers or booleans, "
                                     f"got {v!r}")
                v = tuple(v)
            elif op == "eq":
                if not _scalar(v):
                    raise ValueError(f"{source}: field {name!r}: 'eq' takes a string, number or boolean, got {v!r}")
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"{source}: field {name!r}: {op!r} takes a number, got {v!r}")
            conds.append((str(name), op, v))
    return tuple(sorted(conds, key=lambda c: (c[0], c[1], repr(c[2]))))


def check_filter(conds, corpus: Corpus, *, source: str = "filter") -> None:
    """ValueError (one line) when a condition names a field no memory of ``corpus`` holds, or asks a range of a field
    that is not a number (a filter that silently hides every memory is a typo, not a measurement)."""
    kinds: dict[str, set[str]] = {}
    for t in corpus.turns():
        for k, v in t.metadata:
            kinds.setdefault(k, set()).add("number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__)
    for name, op, value in conds or ():
        if name not in kinds:
            known = ", ".join(sorted(kinds)) or ("none: an own-format dataset declares them in its metadata.json; memory "
                                                 "units other than memory.unit=turn keep none")
            raise ValueError(f"{source}: field {name!r} is not a metadata field of corpus {corpus.name!r} (its fields: {known})")
        if op in _RANGE and kinds[name] != {"number"}:
            raise ValueError(f"{source}: field {name!r}: {op!r} needs an integer or number field, it holds {sorted(kinds[name])}")
        for v in (value if op == "in" else (value,)) if op not in _RANGE else ():
            kind = "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__
            if kind not in kinds[name] and not (kind == "str" and "tuple" in kinds[name]):
                raise ValueError(f"{source}: field {name!r}: {v!r} is a {kind}, the field holds {sorted(kinds[name])} "
                                 f"(a filter value of another type matches nothing)")


def filter_spec(conds: tuple[tuple[str, str, object], ...] | None) -> dict | None:
    """``parse_filter``'s conditions back as a plain mapping (JSON-able: meta.json, cache keys)."""
    if not conds:
        return None
    out: dict[str, dict] = {}
    for name, op, v in conds:
        out.setdefault(name, {})[op] = list(v) if isinstance(v, tuple) else v
    return out


def meta_admits(conds, metadata) -> bool:
    """True when every condition holds on ``metadata`` ((name, value) pairs or a mapping); see the module docstring."""
    fields = metadata if isinstance(metadata, Mapping) else dict(metadata)
    for name, op, v in conds:
        if name not in fields:
            return False
        have = fields[name]
        if op in _RANGE:
            if isinstance(have, (bool, tuple, str)) or not _RANGE[op](have, v):
                return False
            continue
        want = v if op == "in" else (v,)
        values = have if isinstance(have, tuple) else (have,)
        if not any(_same(a, b) for a in values for b in want):
            return False
    return True


def _same(a, b) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)  # true is not 1


def _is_list(v) -> bool:
    return isinstance(v, Sequence) and not isinstance(v, str)


def _scalar(v) -> bool:
    return isinstance(v, (str, int, float, bool))


class Memories(tuple):
    """The Turns a question may see (a tuple, conversation order) that computes its keys and texts once.

    The sweep hands every question of a conversation (at one ``asked_at``) the same ``Memories``, so a
    strategy that needs every key or text (full context, BM25) reads them from the tuple itself
    (``keys_of``/``texts_of``) instead of rebuilding them per question; nothing is kept anywhere else.
    """

    @cached_property
    def keys(self) -> tuple[str, ...]:
        return tuple([t.key for t in self])

    @cached_property
    def texts(self) -> tuple[str, ...]:
        return tuple([t.text for t in self])


def keys_of(turns: Sequence[Turn]) -> tuple[str, ...]:
    """The memory keys of ``turns`` (computed once per ``Memories``)."""
    return turns.keys if isinstance(turns, Memories) else tuple([t.key for t in turns])


def texts_of(turns: Sequence[Turn]) -> tuple[str, ...]:
    """The texts of ``turns`` (computed once per ``Memories``)."""
    return turns.texts if isinstance(turns, Memories) else tuple([t.text for t in turns])


class Visibility:
    """The visibility rule and exact ranking, vectorised over a corpus.

    Rows are ``corpus.turns()`` (corpus order); each conversation's turns are contiguous, so a
    conversation is a row range ``span`` and a question's visible memories are ``local`` indices
    within it (conversation order).
    """

    def __init__(self, corpus: Corpus, metadata: tuple[tuple[str, str, object], ...] | None = None) -> None:
        self._conversations = corpus.conversations
        n = sum(len(c.turns) for c in corpus.conversations)
        # per row: passes the metadata filter (None: no filter); applied by ``mask`` for every question
        self.meta_ok = np.fromiter((meta_admits(metadata, t.metadata) for t in self._all()), bool, n) if metadata else None
        self.ts = np.fromiter((float(t.timestamp or 0.0) for t in self._all()), np.float64, n)
        self.spans: dict[str, tuple[int, int]] = {}
        self.turns: dict[str, tuple[Turn, ...]] = {}
        self._role_ok: dict[tuple[str, ...], np.ndarray] = {}
        self._bounds: list[tuple[int, int]] = []  # each conversation's rows, in corpus order
        row = 0
        for c in corpus.conversations:
            n = len(c.turns)
            self.spans[c.conversation_id] = (row, row + n)
            self._bounds.append((row, row + n))
            self.turns[c.conversation_id] = tuple(c.turns)
            row += n

    def _all(self):
        """Every turn, in row order (the corpus's, without building ``corpus.turns()``)."""
        return (t for c in self._conversations for t in c.turns)

    # roles, keys, their rows and their ranks: built when first read (the sweep reads none of them without a role filter)
    @cached_property
    def role(self) -> np.ndarray:
        return np.array([t.role for t in self._all()], dtype=object)

    @cached_property
    def keys(self) -> np.ndarray:
        return np.array([t.key for t in self._all()], dtype=object)

    @cached_property
    def row_of(self) -> dict[str, int]:
        return dict(zip(self.keys.tolist(), range(len(self.keys))))

    @cached_property
    def key_rank(self) -> np.ndarray:
        """Order of each key within its conversation (the exact ranking's tie-break)."""
        out = np.empty(len(self.ts), dtype=np.int64)
        for start, end in self._bounds:
            out[start:end] = np.argsort(np.argsort(self.keys[start:end].astype(str), kind="stable"), kind="stable")
        return out

    def span(self, conversation_id: str) -> tuple[int, int]:
        """First and past-the-last row of a conversation ((0, 0) for one not in the corpus)."""
        return self.spans.get(conversation_id, (0, 0))

    def mask(self, q: Question, roles: tuple[str, ...] | None = None) -> np.ndarray:
        """Boolean per row of ``q``'s conversation: may ``q`` see it (under ``roles``)."""
        start, end = self.span(q.conversation_id)
        if roles is None:
            out = np.ones(end - start, dtype=bool)
        else:
            roles = tuple(roles)
            ok = self._role_ok.get(roles)
            if ok is None:
                ok = self._role_ok[roles] = np.isin(self.role, list(roles))
            out = ok[start:end].copy()
        if q.asked_at is not None:
            out &= self.ts[start:end] <= q.asked_at
        if self.meta_ok is not None:
            out &= self.meta_ok[start:end]
        return out

    def local(self, q: Question, roles: tuple[str, ...] | None = None) -> np.ndarray:
        """Indices within ``q``'s conversation of the memories ``q`` may see, in conversation order."""
        return np.flatnonzero(self.mask(q, roles))

    def visible_keys(self, q: Question, roles: tuple[str, ...] | None = None) -> np.ndarray:
        """Keys of the memories ``q`` may see, in conversation order."""
        start, _ = self.span(q.conversation_id)
        return self.keys[start + self.local(q, roles)]

    def visible_turns(self, q: Question, roles: tuple[str, ...] | None = None) -> Memories:
        """The Turns ``q`` may see, in conversation order."""
        turns = self.turns.get(q.conversation_id, ())
        local = self.local(q, roles)
        return Memories(turns if len(local) == len(turns) else [turns[i] for i in local.tolist()])  # all of them: as they are

    def lookup(self, ids: Sequence[str]) -> np.ndarray:
        """Row of each id (-1 for ids not in the corpus)."""
        if not len(ids):
            return np.zeros(0, dtype=np.int64)
        try:
            found = itemgetter(*ids)(self.row_of) if len(ids) > 1 else (self.row_of[ids[0]],)
        except KeyError:
            found = [self.row_of.get(i, -1) for i in ids]
        return np.array(found, dtype=np.int64)

    # ---------------------------------------------------------------- exact ranking

    def top(self, start: int, local: np.ndarray, sims: np.ndarray, k: int) -> np.ndarray:
        """Keys of the best ``k`` of ``local`` (indices into the conversation starting at row ``start``;
        ``sims`` per row of that conversation): similarity descending, then key (ties at the k-th kept exact)."""
        if k < len(local):
            s = sims[local]
            kth = np.partition(-s, k - 1)[k - 1]
            local = local[-s <= kth]
        order = local[np.lexsort((self.key_rank[start + local], -sims[local]))][:k]
        return self.keys[start + order]

    def ranks(self, start: int, local: np.ndarray, sims: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """1-based exact rank of each of ``targets`` (indices into the conversation, each among ``local``)
        in the order of ``top``: 1 + the memories of ``local`` with a higher similarity, or an equal one and a smaller key."""
        s, kr = sims[local], self.key_rank[start + local]
        ts, tk = sims[targets], self.key_rank[start + targets]
        ahead = (s[None, :] > ts[:, None]) | ((s[None, :] == ts[:, None]) & (kr[None, :] < tk[:, None]))
        return ahead.sum(axis=1).astype(np.int64) + 1
