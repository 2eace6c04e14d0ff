"""Lexical recall over memory texts (no store): keyword substring baseline, BM25, and RRF fusion.

Owns the word splitting these share and three strategies with the usual signature
``fn(hits, *, question, eligible, threshold, **params)``:

* ``keyword`` -- the code-agent article's v1: a memory matches when any query word occurs in it as
  a case-insensitive substring; matches are returned most recent first, at most ``k``. Hit score =
  number of distinct query words found.
* ``bm25`` -- Okapi BM25 (library ``rank-bm25``) over the texts of ``eligible`` (the memories the
  question may see), best ``k`` with a positive score; ties keep conversation order.
* ``rrf`` -- vector + BM25 fusion by reciprocal rank fusion: score(m) = sum over the two rankings of
  ``1 / (k_rrf + rank)`` (rank from 1); the vector ranking is the store's candidates (optionally only
  those with similarity >= threshold), the BM25 ranking is ``bm25``'s full ranking.

Words: lower-cased ``\\w+`` runs; runs of CJK characters become overlapping character bigrams (Chinese
has no spaces); words in ``STOPWORDS`` or shorter than ``min_len`` characters are dropped (CJK bigrams
are kept). seekdb's native ``hybrid_search`` is not used here: this is the store-independent
implementation, so every store is compared on the same fusion.

BM25 indexes and rankings are memoised (``lru_cache``; they are pure functions of the texts), so
the questions of one conversation share one index and ``bm25`` and ``rrf`` share one ranking.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial

import numpy as np

from bench.strategies.spec import strategy
from bench.strategies.vector import passes
from bench.types import Hit, Question, Turn
from bench.replay.visibility import Visibility, keys_of, texts_of

STOPWORDS = frozenset("""
a about above after again all also am an and any are as at be been before being below between both but by
can could did do does doing done down during each few for from had has have having he her here hers herself
him himself his how i if in into is it its itself just let me more most my myself no nor not now of off on
once only or other our ours ourselves out over own same she should so some such than that the their theirs
them themselves then there these they this those through to too under until up very was we were what when
where which while who whom why will with would you your yours yourself yourselves
""".split())

_WORD = re.compile(r"\w+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def words(text: str, *, stopwords: bool = True, min_len: int = 1) -> list[str]:
    """Lower-cased words of ``text`` in order (repeats kept); CJK runs as character bigrams."""
    out: list[str] = []
    for w in _WORD.findall(text.lower()):
        pos = 0
        for m in _CJK.finditer(w):
            out.extend(_plain(w[pos:m.start()], stopwords, min_len))
            run = m.group()
            out.extend([run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)])
            pos = m.end()
        out.extend(_plain(w[pos:], stopwords, min_len))
    return out


def _plain(w: str, stopwords: bool, min_len: int) -> list[str]:
    if not w or len(w) < min_len or (stopwords and w in STOPWORDS):
        return []
    return [w]


def query_words(text: str, *, stopwords: bool = True, min_len: int = 3) -> tuple[str, ...]:
    """Distinct query words in first-seen order (what ``keyword`` looks for)."""
    return tuple(dict.fromkeys(words(text, stopwords=stopwords, min_len=min_len)))


@strategy(family="baseline", thresholded=False, uses_store=False)
def keyword(hits: Sequence[Hit], *, question: Question, eligible: Sequence[Turn] = (), threshold: float | None = None,
            k: int = 5, stopwords: bool = True, min_len: int = 3) -> tuple[Hit, ...]:
    """Memories containing any query word (case-insensitive substring), most recent first, at most k."""
    if k < 0:
        raise ValueError(f"keyword: k must be >= 0 (got {k})")
    qw = query_words(question.text, stopwords=stopwords, min_len=min_len)
    out: list[Hit] = []
    if not qw or k == 0:
        return ()
    for t in reversed(eligible):
        low = t.text.lower()
        n = sum(1 for w in qw if w in low)
        if n:
            out.append(Hit(t.key, float(n)))
            if len(out) == k:
                break
    return tuple(out)


@lru_cache(maxsize=64)
def _index(texts: tuple[str, ...], k1: float, b: float):
    from rank_bm25 import BM25Okapi

    docs = [words(t) for t in texts]
    if not any(docs):
        return None
    return BM25Okapi(docs, k1=k1, b=b)


def bm25_ranking(question: Question, eligible: Sequence[Turn], *, k1: float = 1.5, b: float = 0.75,
                 limit: int | None = None) -> list[Hit]:
    """Eligible memories with a positive BM25 score, best first (ties: conversation order), at most ``limit``."""
    texts, keys = _texts_keys(eligible)
    ranked = _ranking(question.text, texts, float(k1), float(b))
    return [Hit(keys[i], s) for i, s in ranked[:limit]]


def _texts_keys(eligible: Sequence[Turn]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Texts and keys of ``eligible`` (the texts key the memoised BM25 index and ranking)."""
    return texts_of(eligible), keys_of(eligible)


@lru_cache(maxsize=4096)
def _ranking(query: str, texts: tuple[str, ...], k1: float, b: float) -> tuple[tuple[int, float], ...]:
    q = words(query)
    index = _index(texts, k1, b) if texts and q else None
    if index is None:
        return ()
    scores = np.asarray(index.get_scores(q), dtype=float)
    order = np.argsort(-scores, kind="stable")
    order = order[scores[order] > 0]
    return tuple(zip(order.tolist(), scores[order].tolist()))


@strategy(family="baseline", thresholded=False, uses_store=False)
def bm25(hits: Sequence[Hit], *, question: Question, eligible: Sequence[Turn] = (), threshold: float | None = None,
         k: int = 5, k1: float = 1.5, b: float = 0.75) -> tuple[Hit, ...]:
    """BM25 over the texts the question may see: the k best with a positive score."""
    if k < 0:
        raise ValueError(f"bm25: k must be >= 0 (got {k})")
    return tuple(bm25_ranking(question, eligible, k1=k1, b=b, limit=k))


def fuse(rankings: Sequence[Sequence[str]], *, k_rrf: int = 60, limit: int | None = None) -> list[Hit]:
    """Reciprocal rank fusion of id rankings (best first); ties keep first-seen order; at most ``limit``."""
    if k_rrf < 0:
        raise ValueError(f"fuse: k_rrf must be >= 0 (got {k_rrf})")
    score: dict[str, float] = {}
    for ranking in rankings:
        for rank, i in enumerate(dict.fromkeys(ranking), start=1):
            score[i] = score.get(i, 0.0) + 1.0 / (k_rrf + rank)
    items = list(score.items())
    n = len(items) if limit is None else limit
    best = heapq.nsmallest(n, range(len(items)), key=lambda j: (-items[j][1], j))  # ties: first seen
    return [Hit(*items[j]) for j in best]


@strategy(family="top_k", thresholded=False)
def rrf(hits: Sequence[Hit], *, question: Question, eligible: Sequence[Turn] = (), threshold: float | None = None,
        k: int = 5, k_rrf: int = 60, k1: float = 1.5, b: float = 0.75) -> tuple[Hit, ...]:
    """Vector + BM25 fusion by reciprocal rank fusion, top k (score = fused RRF score)."""
    if k < 0:
        raise ValueError(f"rrf: k must be >= 0 (got {k})")
    vector = [h.id for h in hits if threshold is None or passes(h.score, threshold)]
    texts, keys = _texts_keys(eligible)
    lexical = [keys[i] for i, _ in _ranking(question.text, texts, float(k1), float(b))]
    return tuple(fuse([vector, lexical], k_rrf=k_rrf, limit=k))


# --- whole-haystack rankings (the conventions table's lexical rows) ---------------------------------------------------
# LongMemEval ranks every memory of a haystack. Of the lexical strategies only ``bm25`` scores every memory on its own, so
# only it has such a ranking: its positive scores best first, then the zero-score memories in conversation order.
# ``keyword`` is a match filter returned most recent first (its order is recency, not a score), and ``rrf`` (and every
# store strategy) ranks the store's candidates, i.e. the embedder's ranking the trace already has.

def bm25_haystack(question: Question, eligible: Sequence[Turn], *, k1: float = 1.5, b: float = 0.75) -> list[str]:
    """Every memory key of ``eligible``: ``bm25_ranking`` (positive scores best first, ties in conversation order), then
    the zero-score memories in conversation order, as LongMemEval ranks a whole haystack."""
    ranked = [h.id for h in bm25_ranking(question, eligible, k1=k1, b=b)]
    seen = set(ranked)
    return ranked + [k for k in keys_of(eligible) if k not in seen]


def bm25_system(*, k1: float = 1.5, b: float = 0.75) -> str:
    """How the BM25 ranking is named in a table (library, variant and parameters)."""
    return f"bm25 (rank-bm25 Okapi k1={float(k1):g} b={float(b):g})"


@dataclass(frozen=True)
class HaystackRanker:
    """A whole-haystack ranking a run's strategies define. ``name``: a file stem (``bm25``, ``bm25_k1-1.2_b-0.5``,
    ``bm25_user``); ``system``: how tables name it; ``roles``: the strategy's role filter; ``rank(question, eligible)``."""

    name: str
    system: str
    roles: tuple[str, ...] | None
    rank: Callable[[Question, Sequence[Turn]], list[str]]


def haystack_rankers(specs) -> list[HaystackRanker]:
    """The whole-haystack rankings of a run's strategies (StrategySpecs): one per distinct BM25 ``k1``, ``b`` and role
    filter (``k`` only cuts it)."""
    out: dict = {}
    for s in specs:
        if s.kind == "bm25":
            p = {"k1": float(s.params.get("k1", 1.5)), "b": float(s.params.get("b", 0.75))}
            name = "bm25" + ("" if p == {"k1": 1.5, "b": 0.75} else f"_k1-{p['k1']:g}_b-{p['b']:g}") + \
                "".join(f"_{r}" for r in s.roles or ())
            out.setdefault(name, HaystackRanker(name, bm25_system(**p), s.roles, partial(bm25_haystack, **p)))
    return list(out.values())


def haystack_rankings(corpus, rank, *, roles: tuple[str, ...] | None = None, metadata=None) -> dict[str, list[str]]:
    """{question_id: rank(question, the memories it may see)} over every question of ``corpus`` (``Visibility``, with the
    job's metadata filter: ``bench.replay.visibility.parse_filter``)."""
    vis = Visibility(corpus, metadata)
    return {q.question_id: rank(q, vis.visible_turns(q, roles)) for q in corpus.questions}
