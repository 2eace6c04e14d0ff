"""Who may see a memory, and the exact order of what a question may see: the one owner of both rules.

Visibility: a question sees a memory when the memory belongs to the question's conversation, its
role is among ``roles`` (None = every role) and it was said at or before the question was asked
(``timestamp <= asked_at``). A question without ``asked_at`` sees its whole conversation; a memory
without a timestamp counts as said at 0.0 (so a question with ``asked_at >= 0`` sees it). Stores
apply the same rule through a ``Where`` (``bench.backends.base``).

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

from collections.abc import Sequence
from functools import cached_property
from operator import itemgetter

import numpy as np

from bench.types import Corpus, Question, Turn, Where


def question_filter(q: Question, *, roles: tuple[str, ...] | None = None) -> Where:
    """What a question may see: its own conversation, the roles given, turns said at or before it was asked."""
    return Where(conversation_id=q.conversation_id, roles=roles, before=q.asked_at)


def admits(where: Where, *, conversation_id: str, role: str, timestamp: float | None) -> bool:
    """True when a memory with these fields passes ``where`` (a missing timestamp counts as 0.0)."""
    return (
        (where.conversation_id is None or conversation_id == where.conversation_id)
        and (where.roles is None or role in where.roles)
        and (where.before is None or (timestamp or 0.0) <= where.before)
    )


def visible(turn: Turn, where: Where) -> bool:
    return admits(where, conversation_id=turn.conversation_id, role=turn.role, timestamp=turn.timestamp)


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

    def __init__(self, corpus: Corpus) -> None:
        turns = corpus.turns()
        self.keys = np.array([t.key for t in turns], dtype=object)
        self.row_of = {k: i for i, k in enumerate(self.keys.tolist())}
        self.ts = np.array([float(t.timestamp or 0.0) for t in turns])
        self.role = np.array([t.role for t in turns], dtype=object)
        self.key_rank = np.empty(len(turns), dtype=np.int64)  # order of a key within its conversation (tie-break)
        self.spans: dict[str, tuple[int, int]] = {}
        self.turns: dict[str, tuple[Turn, ...]] = {}
        self._role_ok: dict[tuple[str, ...], np.ndarray] = {}
        row = 0
        for c in corpus.conversations:
            n = len(c.turns)
            self.key_rank[row : row + n] = np.argsort(np.argsort(self.keys[row : row + n].astype(str), kind="stable"), kind="stable")
            self.spans[c.conversation_id] = (row, row + n)
            self.turns[c.conversation_id] = tuple(c.turns)
            row += n

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
        return Memories([turns[i] for i in self.local(q, roles).tolist()])

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
