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
Memories without a timestamp have age 0. The state holds one row per eligible memory (numpy arrays), so
a sweep over 17 thresholds x 2,000 LoCoMo questions stays in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bench.strategies.spec import Selection, strategy
from bench.strategies.vector import above
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
class Vault:
    """The memories a conversation's questions may see, indexed once (shared by states, never mutated)."""

    keys: tuple[str, ...]
    index: Mapping[str, int]
    stamps: np.ndarray  # POSIX seconds per memory, NaN when it has none
    latest: float | None  # latest timestamp ("now" for questions without asked_at)

    @staticmethod
    def of(eligible: Sequence[Turn]) -> "Vault":
        keys = tuple(t.key for t in eligible)
        stamps = np.array([np.nan if t.timestamp is None else t.timestamp for t in eligible], dtype=float)
        latest = float(np.nanmax(stamps)) if len(stamps) and not np.isnan(stamps).all() else None
        return Vault(keys, {k: i for i, k in enumerate(keys)}, stamps, latest)


@dataclass(frozen=True)
class TierState:
    """What one conversation's replay carries from question to question (arrays aligned with ``vault.keys``;
    never mutated: a call returns a new state)."""

    vault: Vault
    importance: np.ndarray
    access_count: np.ndarray
    last_access: np.ndarray  # POSIX seconds of the last recall, NaN: never recalled

    @staticmethod
    def fresh(eligible: Sequence[Turn], importance: float, memories: Mapping[str, MemoryState] | None = None) -> "TierState":
        """A state over ``eligible`` where every memory starts at ``importance``, except those in ``memories``."""
        vault = Vault.of(eligible)
        n = len(vault.keys)
        imp, cnt, last = np.full(n, float(importance)), np.zeros(n, dtype=np.int64), np.full(n, np.nan)
        for key, m in (memories or {}).items():
            i = vault.index.get(key)
            if i is not None:
                imp[i], cnt[i], last[i] = m.importance, m.access_count, np.nan if m.last_access is None else m.last_access
        return TierState(vault, imp, cnt, last)

    @property
    def memories(self) -> dict[str, MemoryState]:
        """Every memory recalled at least once, by key."""
        return {self.vault.keys[i]: MemoryState(float(self.importance[i]), int(self.access_count[i]),
                                                None if np.isnan(self.last_access[i]) else float(self.last_access[i]))
                for i in np.flatnonzero(self.access_count > 0)}


@strategy(family="tiered", thresholded=True, stateful=True)
def dual_tier(hits: Sequence[Hit], *, question: Question, eligible: Sequence[Turn] = (), threshold: float | None = None,
              state: TierState | None = None, l1_turns: int = 5, importance: float = 0.5,
              promote: float = 0.15, floor: float = 0.1, k: int | None = None, age_rate: float = 0.02,
              access_boost: float = 0.1, access_cap: float = 0.4, idle_rate: float = 0.05) -> Selection:
    """L1 (last ``l1_turns`` turns) + L2 (threshold + decay), with promotion. Returns hits, tiers, new state.

    Candidates that are not among ``eligible`` (a store bug) are ignored.
    """
    if threshold is None:
        raise ValueError("dual_tier: a threshold is required")
    if l1_turns < 0 or (k is not None and k < 0):
        raise ValueError(f"dual_tier: l1_turns and k must be >= 0 (got {l1_turns}, {k})")
    l1 = list(eligible[len(eligible) - l1_turns:]) if l1_turns else []
    l1_keys = {t.key for t in l1}
    cand = [h for h in hits[:above(hits, threshold)] if h.id not in l1_keys]
    if state is None or len(state.vault.keys) != len(eligible) or any(h.id not in state.vault.index for h in cand):
        state = TierState.fresh(eligible, importance, state.memories if state is not None else None)
    index = state.vault.index
    cand = [h for h in cand if h.id in index]
    idx = np.fromiter((index[h.id] for h in cand), dtype=np.int64, count=len(cand))
    sims = np.fromiter((h.score for h in cand), dtype=float, count=len(cand))
    now = question.asked_at if question.asked_at is not None else state.vault.latest
    ts = state.vault.stamps[idx]
    last = state.last_access[idx]
    last = np.where(np.isnan(last), ts, last)
    if now is None:
        age = idle = np.zeros(len(idx))
    else:
        age = np.where(np.isnan(ts), 0.0, np.maximum((now - ts) / DAY, 0.0))
        idle = np.where(np.isnan(last), 0.0, np.maximum((now - last) / DAY, 0.0))
    ret = state.importance[idx] * (np.exp(-age_rate * age - idle_rate * idle) * (1.0 + np.minimum(access_boost * state.access_count[idx], access_cap)))
    keep = np.flatnonzero(ret >= floor)
    ranked = (sims * ret)[keep]
    keep = keep[np.argsort(-ranked, kind="stable")]  # ties keep the store's order
    if k is not None:
        keep = keep[:k]
    chosen = idx[keep]
    imp, cnt, acc = state.importance.copy(), state.access_count.copy(), state.last_access.copy()
    imp[chosen] = np.minimum(1.0, imp[chosen] + promote)
    cnt[chosen] += 1
    acc[chosen] = np.nan if now is None else now
    out = tuple(Hit(t.key, float("nan")) for t in reversed(l1)) + tuple(Hit(cand[j].id, float(sims[j] * ret[j])) for j in keep)
    return Selection(out, tiers=("L1",) * len(l1) + ("L2",) * len(keep), state=TierState(state.vault, imp, cnt, acc))
