"""Synthetic conversations at scale (14,726 / 100k / 1M memories), for ``bench.embedders.synthetic``.

Owns ``generate`` / ``load_synthetic`` (a ``Corpus``: conversations of alternating user/assistant
turns in timed sessions, questions with planted gold evidence). ``SyntheticEmbedder``
(``bench/embedders/synthetic.py``) is a
deterministic embedder that turns the markers written into those texts into clustered vectors, so
the whole pipeline (``python -m bench dataset=synthetic embedder=synthetic``) runs at a million
memories without running a model. Plumbing and performance only: ``for_results = False``.

How the vectors are clustered. Every turn text carries ``[topic T]``; a planted gold turn and its
question also carry ``[fact F]`` (``bench.types.synthetic_mark``, the marker both sides share). The embedder maps a text to
``normalise(centre[T] + fact_weight * direction[F] + noise * jitter(text))`` where the three are
unit vectors drawn from fixed tables (``seed``) and ``jitter`` is picked by a crc32 of the whole
text. With the defaults (noise 0.8, fact weight 1.0) a question's cosine is ~0.76 to its gold
turns, ~0.48 to other turns of its topic and ~0 to the rest, so thresholds 0.1-0.9 all matter.
Texts without markers (any other corpus) get a topic from their crc32 and no fact.

How the gold is planted. Each question picks a conversation and a moment (the end of a session,
or None = after the whole conversation for ``after_all_share`` of them), then 1-3 turns said at or
before that moment; those turns are rewritten to the question's topic and fact. A turn is gold
for at most one question. ``adversarial_share`` of the questions get a fact no turn carries (no
evidence, ``adversarial=True``). Everything is a pure function of the arguments (numpy ``seed``).
"""

from __future__ import annotations

import logging

import numpy as np

from bench.types import Conversation, Corpus, Question, Turn, synthetic_mark

log = logging.getLogger(__name__)

SIZES = (14_726, 100_000, 1_000_000)  # the seed article's memory count, and the scale points
START = 1_672_531_200.0  # 2023-01-01T00:00:00Z: first session of the first conversation
TURN_GAP_S = 60.0
SESSION_GAP_S = 86_400.0
_WORDS = ("plans", "weekend", "work", "family", "trip", "book", "music", "food", "garden", "game", "class", "move")


def _check_int(field: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"synthetic dataset: field {field} must be an integer >= {low} (got {value!r})")
    return int(value)


def _check_share(field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"synthetic dataset: field {field} must be a number in [0, 1] (got {value!r})")
    return float(value)


def generate(
    n_memories: int = SIZES[0],
    *,
    conversation_size: int = 600,
    session_size: int = 20,
    topics: int = 50,
    questions_per_conversation: int = 12,
    adversarial_share: float = 0.1,
    after_all_share: float = 0.2,
    max_evidence: int = 3,
    seed: int = 0,
    name: str | None = None,
) -> Corpus:
    """A synthetic corpus of ``n_memories`` turns (see the module docstring for its structure)."""
    n = _check_int("n_memories", n_memories, 1)
    size = _check_int("conversation_size", conversation_size, 2)
    per_session = _check_int("session_size", session_size, 1)
    n_topics = _check_int("topics", topics, 1)
    qpc = _check_int("questions_per_conversation", questions_per_conversation, 0)
    k_max = _check_int("max_evidence", max_evidence, 1)
    seed = _check_int("seed", seed, 0)
    adv = _check_share("adversarial_share", adversarial_share)
    after_all = _check_share("after_all_share", after_all_share)
    rng = np.random.default_rng(seed)
    params = (f"n={n},conversation_size={size},session_size={per_session},topics={n_topics},"
              f"questions_per_conversation={qpc},adversarial_share={adv},after_all_share={after_all},"
              f"max_evidence={k_max},seed={seed}")
    name = name or f"synthetic_{n}"

    n_conv = -(-n // size)
    topic_of = rng.integers(0, n_topics, n)  # per turn, corpus order
    fact_of = np.full(n, -1, dtype=np.int64)
    questions: list[tuple] = []  # (qid, conv index, asked_at, evidence rows, topic, fact, adversarial)
    fact = 0
    for ci in range(n_conv):
        lo, hi = ci * size, min(n, (ci + 1) * size)
        m = hi - lo
        sessions = -(-m // per_session)
        free = np.ones(m, dtype=bool)
        for j in range(qpc):
            qid = f"s{ci:07d}-q{j}"
            if rng.random() < after_all:
                asked_at, limit = None, m
            else:
                s = int(rng.integers(0, sessions))
                limit = min(m, (s + 1) * per_session)  # turns of sessions 0..s are visible
                asked_at = _ts(ci, limit - 1, per_session)
            if rng.random() < adv:
                questions.append((qid, ci, asked_at, (), int(rng.integers(0, n_topics)), fact, True))
                fact += 1
                continue
            pool = np.flatnonzero(free[:limit])
            if pool.size == 0:
                continue
            k = int(min(pool.size, rng.integers(1, k_max + 1)))
            rows = np.sort(rng.choice(pool, size=k, replace=False))
            free[rows] = False
            topic = int(topic_of[lo + rows[0]])
            topic_of[lo + rows] = topic
            fact_of[lo + rows] = fact
            questions.append((qid, ci, asked_at, tuple(int(r) for r in rows), topic, fact, False))
            fact += 1

    conversations = []
    for ci in range(n_conv):
        cid = f"s{ci:07d}"
        lo, hi = ci * size, min(n, (ci + 1) * size)
        turns = []
        for p in range(hi - lo):
            role = "user" if p % 2 == 0 else "assistant"
            row = lo + p
            mark = synthetic_mark(topic_of[row], fact_of[row] if fact_of[row] >= 0 else None)
            text = f"{mark} {role} turn {p} of {cid} about {_WORDS[row % len(_WORDS)]}"
            turns.append(Turn(cid, f"t{p}", role, role, text, _ts(ci, p, per_session), p, p // per_session))
        conversations.append(Conversation(cid, tuple(turns)))

    qs = []
    for qid, ci, asked_at, rows, topic, f, adversarial in questions:
        category = "adversarial" if adversarial else ("single-hop" if len(rows) == 1 else "multi-hop")
        qs.append(Question(qid, f"s{ci:07d}", f"{synthetic_mark(topic, f)} what was said about fact {f}?", asked_at,
                           tuple(f"t{r}" for r in rows), category, adversarial))
    log.info("synthetic corpus %s: %d memories in %d conversations, %d questions", name, n, n_conv, len(qs))
    return Corpus(name=name, conversations=tuple(conversations), questions=tuple(qs), source=f"synthetic:{params}")


def _ts(conv: int, position: int, per_session: int) -> float:
    """Turn time: sessions a day apart, turns a minute apart; conversations start a day apart."""
    return START + conv * SESSION_GAP_S + (position // per_session) * SESSION_GAP_S + (position % per_session) * TURN_GAP_S


def load_synthetic(n_memories: int = SIZES[0], name: str | None = None, **params) -> Corpus:
    """Hydra target of ``configs/dataset/synthetic.yaml`` (keyword arguments of ``generate``)."""
    return generate(n_memories, name=name, **params)
