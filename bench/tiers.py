"""Dual-tier memory (the L1/L2 article): an L1 scratchpad of recent turns plus an L2 vault with decay.

Owns the decay formula, the per-memory state, and the policy ``dual_tier`` (a stateful strategy:
the sweep replays each conversation's questions in time order and feeds the state one question
returns into the next; a fresh, empty state per (strategy, threshold, conversation)). Nothing is
mutated: each call returns a new state, so the same trace always gives the same result.

Per question:

* **now** = ``question.asked_at``; when the corpus has none (LoCoMo) it is the latest timestamp
  among the memories the question may see (the conversation's last session date) and questions are
  replayed in file order.
* **L1** = the last ``l1_turns`` eligible turns (conversation order), always injected, no embedding.
* **L2** = the store's candidates with similarity >= threshold that are not in L1, each with
  ``retention = importance * decay``, where
  ``decay = exp(-age_rate * age_days) * (1 + min(access_boost * access_count, access_cap))
  * exp(-idle_rate * days_since_access)``; age counts from the memory's timestamp and
  days-since-access from its last recall (its timestamp before the first recall). Memories with
  retention < ``floor`` are excluded (forgotten); the rest are ranked by ``similarity * retention``
  and capped at ``k`` (None = no cap).
* Every injected L2 memory is **promoted**: importance + ``promote`` (capped at 1), access_count + 1,
  last access = now. L1 turns are not promoted (they were not recalled).

The article gives the decay formula and "+0.15, capped at 1" without saying what the +0.15 is
added to; we read it as an importance in [0, 1] that multiplies the decay, starting at
``importance`` (0.5). With ``importance=1.0`` the floor applies to the decay alone.
Memories without a timestamp have age 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.strategies import Selection, above
from bench.types import Hit, Question, Turn

DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class MemoryState:
    importance: float
    access_count: int
    last_access: float | None  # POSIX seconds of the last recall; None: never recalled


def decay(*, age_days: float, access_count: int, days_since_access: float, age_rate: float = 0.02,
          access_boost: float = 0.1, access_cap: float = 0.4, idle_rate: float = 0.05) -> float:
    """exp(-age_rate*age) * (1 + min(access_boost*count, access_cap)) * exp(-idle_rate*idle)."""
    return (math.exp(-age_rate * max(age_days, 0.0) - idle_rate * max(days_since_access, 0.0))
            * (1.0 + min(access_boost * access_count, access_cap)))


@dataclass(frozen=True)
class TierState:
    """What one conversation's replay carries from question to question (never mutated)."""

    memories: Mapping[str, MemoryState]  # only memories recalled at least once
    stamps: Mapping[str, float | None]  # memory key -> timestamp, for the eligible turns it was built from
    latest: float | None  # latest timestamp among those turns ("now" when the question has no asked_at)


def _view(eligible: Sequence[Turn], state: TierState | None, need: Sequence[str]) -> tuple[Mapping[str, float | None], float | None]:
    if state is not None and len(state.stamps) == len(eligible) and all(i in state.stamps for i in need):
        return state.stamps, state.latest
    stamps = {t.key: t.timestamp for t in eligible}
    return stamps, max((ts for ts in stamps.values() if ts is not None), default=None)


def dual_tier(hits: Sequence[Hit], *, question: Question, eligible: Sequence[Turn] = (), threshold: float | None = None,
              state: TierState | None = None, l1_turns: int = 5, importance: float = 0.5,
              promote: float = 0.15, floor: float = 0.1, k: int | None = None, age_rate: float = 0.02,
              access_boost: float = 0.1, access_cap: float = 0.4, idle_rate: float = 0.05) -> Selection:
    """L1 (last ``l1_turns`` turns) + L2 (threshold + decay), with promotion. Returns hits, tiers, new state."""
    if threshold is None:
        raise ValueError("dual_tier: a threshold is required")
    if l1_turns < 0 or (k is not None and k < 0):
        raise ValueError(f"dual_tier: l1_turns and k must be >= 0 (got {l1_turns}, {k})")
    memories = state.memories if state else {}
    l1 = list(eligible[len(eligible) - l1_turns:]) if l1_turns else []
    l1_keys = {t.key for t in l1}
    cand = [h for h in hits[:above(hits, threshold)] if h.id not in l1_keys]
    stamps, latest = _view(eligible, state, [h.id for h in cand])
    now = question.asked_at if question.asked_at is not None else latest
    fresh = MemoryState(importance, 0, None)
    scored = []
    for h in cand:
        st = memories.get(h.id, fresh)
        ts = stamps.get(h.id)
        last = st.last_access if st.last_access is not None else ts
        age = max((now - ts) / DAY, 0.0) if now is not None and ts is not None else 0.0
        idle = max((now - last) / DAY, 0.0) if now is not None and last is not None else 0.0
        ret = st.importance * (math.exp(-age_rate * age - idle_rate * idle) * (1.0 + min(access_boost * st.access_count, access_cap)))  # = importance * decay(...)
        if ret >= floor:
            scored.append((h.score * ret, h.id, st))
    scored.sort(key=lambda x: -x[0])  # stable: ties keep the store's order
    if k is not None:
        scored = scored[:k]
    new_memories = dict(memories)
    for _, i, st in scored:
        new_memories[i] = MemoryState(min(1.0, st.importance + promote), st.access_count + 1, now)
    out = tuple(Hit(t.key, float("nan")) for t in reversed(l1)) + tuple(Hit(i, s) for s, i, _ in scored)
    return Selection(out, tiers=("L1",) * len(l1) + ("L2",) * len(scored), state=TierState(new_memories, stamps, latest))
