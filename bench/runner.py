"""Replay: embed (cached), ingest into a store, wait until searchable, search once per question.

Produces a Trace: per question the store's candidates (ids, the store's own similarity, the exact
cosine from the cached vectors) and the latency of the store call alone (perf_counter_ns around
``backend.search``; embedding is timed separately; warm-up queries are discarded). Nothing
downstream reopens the store: thresholds and strategies are post-processing of the trace.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from bench.backends.base import Backend
from bench.embedders.base import Embedder
from bench.results import write_atomic
from bench.types import Corpus, MemoryBatch, Question, Turn, Where, memory_key

log = logging.getLogger(__name__)

TRACE_COLUMNS = ["question_id", "conversation_id", "latency_ns", "hit_ids", "hit_scores", "exact_scores"]


@dataclass(frozen=True)
class Trace:
    """Raw per-question search results. ``table`` columns: TRACE_COLUMNS. ``meta``: what decided it."""

    table: pd.DataFrame
    meta: dict = field(default_factory=dict)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(directory / "trace.parquet", lambda p: self.table.to_parquet(p, index=False))
        write_atomic(directory / "trace_meta.json", lambda p: p.write_text(json.dumps(self.meta, indent=2, default=str)))

    @staticmethod
    def load(directory: Path) -> "Trace":
        table = pd.read_parquet(directory / "trace.parquet")
        meta = json.loads((directory / "trace_meta.json").read_text())
        return Trace(table, meta)


def question_filter(q: Question, *, roles: tuple[str, ...] | None = None) -> Where:
    """What a question may see: its own conversation, turns said at or before it was asked."""
    return Where(conversation_id=q.conversation_id, roles=roles, before=q.asked_at)


def visible(turn: Turn, where: Where) -> bool:
    return (
        (where.conversation_id is None or turn.conversation_id == where.conversation_id)
        and (where.roles is None or turn.role in where.roles)
        and (where.before is None or (turn.timestamp or 0.0) <= where.before)
    )


def batches(turns: Sequence[Turn], vectors: np.ndarray, size: int):
    for i in range(0, len(turns), size):
        chunk = turns[i : i + size]
        yield MemoryBatch(
            ids=tuple(t.key for t in chunk),
            vectors=vectors[i : i + size],
            conversation_ids=tuple(t.conversation_id for t in chunk),
            roles=tuple(t.role for t in chunk),
            timestamps=tuple(float(t.timestamp or 0.0) for t in chunk),
            positions=tuple(t.position for t in chunk),
        )


def embed_corpus(corpus: Corpus, embedder: Embedder) -> tuple[np.ndarray, np.ndarray, dict]:
    """Vectors for every turn and every question (in corpus order) and timing stats."""
    turns, questions = corpus.turns(), corpus.questions
    t0 = time.perf_counter()
    tv = embedder.embed([t.text for t in turns]) if turns else np.zeros((0, embedder.dim), np.float32)
    qv = embedder.embed([q.text for q in questions]) if questions else np.zeros((0, embedder.dim), np.float32)
    stats = {"embed_seconds": time.perf_counter() - t0, "n_texts": len(turns) + len(questions)}
    for name in ("hits", "misses"):
        if hasattr(embedder, name):
            stats[f"cache_{name}"] = getattr(embedder, name)
    return tv, qv, stats


def build_trace(
    corpus: Corpus,
    embedder: Embedder,
    backend: Backend,
    *,
    depth: int,
    roles: tuple[str, ...] | None = None,
    warmup: int = 5,
    batch_size: int = 500,
    progress: bool = True,
    fidelity_k: int = 10,
) -> Trace:
    """Ingest the corpus into ``backend`` and search each question once with ``k=depth``."""
    if depth <= 0:
        raise ValueError(f"search depth must be positive (got {depth})")
    depth = min(depth, backend.capabilities.max_k)
    turns = corpus.turns()
    tv, qv, emb_stats = embed_corpus(corpus, embedder)
    row_of = {t.key: i for i, t in enumerate(turns)}

    backend.open(dim=embedder.dim)
    t0 = time.perf_counter()
    for b in tqdm(list(batches(turns, tv, batch_size)), desc=f"ingest {backend.name}", unit="batch", disable=not progress):
        backend.add(b)
    t_added = time.perf_counter()
    backend.wait_ready()
    t_ready = time.perf_counter()

    questions = corpus.questions
    for i in range(min(warmup, len(questions))):  # discarded: first queries pay cold caches
        backend.search(qv[i], k=depth, where=question_filter(questions[i], roles=roles))

    records = []
    for qi, q in enumerate(tqdm(questions, desc=f"search {backend.name}", unit="q", disable=not progress)):
        where = question_filter(q, roles=roles)
        start = time.perf_counter_ns()
        hits = backend.search(qv[qi], k=depth, where=where)
        elapsed = time.perf_counter_ns() - start
        ids = [h.id for h in hits]
        rows = [row_of.get(i, -1) for i in ids]
        exact = [float(tv[r] @ qv[qi]) if r >= 0 else float("nan") for r in rows]
        records.append((q.question_id, q.conversation_id, elapsed, ids, [h.score for h in hits], exact))
    table = pd.DataFrame.from_records(records, columns=TRACE_COLUMNS)
    store = store_metrics(table, corpus, tv, qv, roles=roles, k=fidelity_k, depth=depth)
    meta = {
        "dataset": corpus.name,
        "backend": backend.name,
        "capabilities": {k: (sorted(v) if isinstance(v, frozenset) else v) for k, v in vars_of(backend.capabilities).items()},
        "embedder": embedder.model_id,
        "depth": depth,
        "roles": list(roles) if roles else None,
        "n_memories": len(turns),
        "ingest_seconds": t_added - t0,
        "ingest_per_second": len(turns) / (t_added - t0) if t_added > t0 else None,
        "ready_seconds": t_ready - t_added,
        "warmup_queries": min(warmup, len(questions)),
        "index_bytes": disk_bytes(getattr(backend, "path", None)),
        **store,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **emb_stats,
    }
    log.info("trace: %d questions on %s (ingest %.1fs, ready %.2fs)", len(records), backend.name, meta["ingest_seconds"], meta["ready_seconds"])
    return Trace(table, meta)


def exact_top(corpus: Corpus, tv: np.ndarray, qv: np.ndarray, *, roles: tuple[str, ...] | None, k: int) -> list[list[str]]:
    """The exact top-k keys per question (same filters as the store), from the cached vectors."""
    turns = corpus.turns()
    keys = np.array([t.key for t in turns], dtype=object)
    conv = np.array([t.conversation_id for t in turns], dtype=object)
    role = np.array([t.role for t in turns], dtype=object)
    ts = np.array([float(t.timestamp or 0.0) for t in turns])
    out = []
    for qi, q in enumerate(corpus.questions):
        mask = conv == q.conversation_id
        if roles is not None:
            mask &= np.isin(role, list(roles))
        if q.asked_at is not None:
            mask &= ts <= q.asked_at
        rows = np.flatnonzero(mask)
        sims = tv[rows] @ qv[qi]
        order = np.lexsort((keys[rows].astype(str), -sims))[:k]
        out.append([str(keys[rows[i]]) for i in order])
    return out


def store_metrics(table: pd.DataFrame, corpus: Corpus, tv: np.ndarray, qv: np.ndarray, *, roles, k: int, depth: int) -> dict:
    """How faithful the store is to the exact cosine scan on the same vectors and filters.

    fidelity = recall@k of the store's top-k against the exact top-k; short results = queries that
    returned fewer than min(depth, matching) rows; score disagreement = |store sim - exact cos|.
    """
    truth = exact_top(corpus, tv, qv, roles=roles, k=10**9)
    fid, short = [], 0
    diffs = np.concatenate([np.abs(np.asarray(s, float) - np.asarray(e, float)) for s, e in zip(table["hit_scores"], table["exact_scores"])] or [np.empty(0)])
    for ids, exact in zip(table["hit_ids"], truth):
        want = exact[:k]
        if want:
            fid.append(len(set(ids[:k]) & set(want)) / len(want))
        if len(ids) < min(depth, len(exact)):
            short += 1
    return {
        f"fidelity_at_{k}": float(np.mean(fid)) if fid else float("nan"),
        "short_result_rate": short / len(table) if len(table) else float("nan"),
        "score_max_abs_diff": float(np.nanmax(diffs)) if diffs.size else float("nan"),
        "score_mismatches_1e4": int(np.sum(diffs > 1e-4)),
        "score_pairs": int(diffs.size),
    }


def disk_bytes(path) -> int | None:
    """Bytes under a store's directory (None for stores without one)."""
    if not path:
        return None
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else None


def vars_of(obj) -> dict:
    return {name: getattr(obj, name) for name in obj.__slots__} if hasattr(obj, "__slots__") else dict(vars(obj))
