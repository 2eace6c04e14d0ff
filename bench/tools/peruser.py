"""The per-user part of ``recallbench stores`` (``--per-user``): LongMemEval_S's users, each in its own collection.

LongMemEval_S is 498 users (one per question), each with a haystack of about 490 turns (245,625 in all). Every store
runs the ``per_conversation`` layout (``bench.backends.layout``: a collection, table or file per user, at most
``max_open`` open where a store reopens them cheaply), except seekdb: one collection whose indexed conversation column
keeps each user's rows apart (``USER_LAYOUT``); each gets the same vectors and asks each question once, in its
user's collection, top-k (``--k``). Per store: ingest rows/s (the store's add calls, collection creation included;
the read-after-write wait is its own column), search p50/p99 ms (the store call alone, warm-up discarded),
fidelity@k against the exact scan of the same user's rows (``_recall`` of ``bench.tools.stores``: an id tied with the
k-th counts), short lists, peak RSS and the most file descriptors open at once, this process and its descendants (an
embedded seekdb server) together (``bench.tools.layout_scale.Peak``), collections, the bound and how many reopens it
cost. The exact store (numpy, in RAM, a matrix per user) is the reference row.

Vectors: the corpus's turns and questions embedded by ``--per-user-embedder`` (MiniLM) from the embedding cache of
``--per-user-cache`` (a ``paths.cache`` root; only read: its shards are linked into a temporary cache, so nothing is
written there) when every text is in it; otherwise clustered synthetic vectors with the corpus's real per-user row
counts and one query per question (``synthetic_per_user``). The table's ``vectors`` column says which.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bench.backends.catalog import load_backend
from bench.backends.layout import PER_CONVERSATION, SHARED
from bench.backends.session import INGEST_BATCH, open_session
from bench.tools.layout_scale import Peak
from bench.tools.stores import TIE_EPS, _recall, _short, synthetic_batches
from bench.types import Where

log = logging.getLogger("bench.tools.peruser")
# the reference first; seekdb last: its embedded server outlives its collections (a child of this process whose memory
# and files would count in the next store's row)
STORES = ("exact", "sqlite_vec", "lancedb", "chroma", "seekdb")
# how each store keeps one user's memory apart here when no layout is asked for: a collection, table or file each,
# except seekdb, whose collections slowed to 5-40 s each past ~340 users at this size (stop 37), and whose one
# collection with an indexed conversation column (``conversation_index``, on in the shared layout) reads a user's rows
# through that index (bench/backends/seekdb.py)
USER_LAYOUT = {"seekdb": SHARED}
COLUMNS = ["store", "layout", "vectors", "users", "rows", "ingest_s", "ingest_rows_per_s", "read_after_write_lag_s", "p50_ms",
           "p99_ms", "fidelity_at_k", "short_lists", "peak_rss_gb", "rss_added_gb", "max_open_fds", "collections", "max_open",
           "reopened", "error"]


def per_user_truth(data, k: int) -> list[list[str]]:
    """Per query, the exact top-k ids among its user's rows, then every other id tied with the k-th (within
    ``TIE_EPS``), as ``bench.tools.stores.exact_truth`` counts them (without its unfiltered matrix of every pair)."""
    vecs, conv, _, _, qv, qconv = data
    order = np.argsort(conv.astype(str), kind="stable")
    users, starts = np.unique(conv.astype(str)[order], return_index=True)
    rows_of = dict(zip(users.tolist(), np.split(order, starts[1:])))
    out = []
    for q, c in zip(qv, qconv):
        rows = rows_of.get(str(c), np.empty(0, dtype=np.int64))
        sims = vecs[rows] @ q
        ranked = rows[np.argsort(-sims, kind="stable")]
        head = ranked[:k]
        if len(ranked) > k:
            s = vecs[ranked[k:]] @ q
            head = np.concatenate([head, ranked[k:][s >= float(vecs[head[-1]] @ q) - TIE_EPS]])
        out.append([f"m{j}" for j in head])
    return out


def synthetic_per_user(counts: dict[str, int], queries: Sequence[str], *, dim: int = 384, seed: int = 0, clusters: int = 100):
    """Clustered unit vectors (``bench.tools.stores.synthetic``'s scheme) with ``counts[user]`` rows per user, in user
    order, and one query per entry of ``queries`` (a user id each), near a cluster centre."""
    rng = np.random.default_rng(seed)
    n = int(sum(counts.values()))
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    vecs = centres[rng.integers(0, clusters, n)] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    qv = centres[rng.integers(0, clusters, len(queries))] + 0.6 * rng.standard_normal((len(queries), dim)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    conv = np.repeat(np.array(list(counts), dtype=object), list(counts.values()))
    roles = np.where(np.arange(n) % 2 == 0, "user", "assistant").astype(object)
    ts = 1.6e9 + np.arange(n, dtype=np.float64) * 60.0
    return vecs, conv, roles, ts, qv, list(queries)


def read_only_view(embeddings: Path, into: Path) -> Path:
    """A copy of the embedding cache ``embeddings`` that cannot change it: every shard symlinked (a shard is written
    once, to a new name), every other file copied. Returns the new cache directory."""
    for model in (d for d in embeddings.iterdir() if d.is_dir()) if embeddings.is_dir() else ():
        (into / model.name).mkdir(parents=True, exist_ok=True)
        for f in model.iterdir():
            if f.suffix == ".npz":
                os.symlink(f.resolve(), into / model.name / f.name)
            elif f.is_file():
                shutil.copyfile(f, into / model.name / f.name)
    into.mkdir(parents=True, exist_ok=True)
    return into


def corpus_data(overrides: Sequence[str], *, cache: Path | None, users: int | None = None, seed: int = 0):
    """(data, label, kind) of a corpus (``overrides``: dataset, memory units, embedder): its turns and questions, the
    first ``users`` users (sorted ids) or all. Real vectors when ``cache`` (a ``paths.cache`` root) holds every text,
    else ``synthetic_per_user`` with the real per-user counts; ``kind`` is ``real`` or ``synthetic``, the label says
    what and why."""
    from bench.cli.config import build, to_plain
    from bench.data.units import apply_units, check_spec
    from bench.tools.perf.common import compose

    cfg = compose(list(overrides))
    corpus = apply_units(build(cfg.dataset), check_spec(to_plain(cfg.memory) if cfg.get("memory") is not None else None))
    turns, questions = corpus.turns(), corpus.questions
    keep = sorted({t.conversation_id for t in turns})[:users] if users else None
    if keep is not None:
        wanted = set(keep)
        turns = [t for t in turns if t.conversation_id in wanted]
        questions = [q for q in questions if q.conversation_id in wanted]
    counts: dict[str, int] = {}
    for t in turns:
        counts[t.conversation_id] = counts.get(t.conversation_id, 0) + 1
    order = sorted(range(len(turns)), key=lambda i: turns[i].conversation_id)  # user by user, as an app writes one user's memory
    turns = [turns[i] for i in order]
    what = f"{corpus.name}, {len(counts)} users, {len(turns):,} {cfg.memory.unit if cfg.get('memory') else 'turn'}s"
    missing = "no embedding cache given"
    if cache is not None:
        from bench.embedders.auto import resolve
        from bench.embedders.cache import CachedEmbedder

        texts, qtexts = [t.text for t in turns], [q.text for q in questions]
        with tempfile.TemporaryDirectory(prefix="rb-peruser-cache-") as tmp:
            view = read_only_view(Path(cache) / "embeddings", Path(tmp) / "embeddings")
            emb = CachedEmbedder(resolve(build(cfg.embedder), texts + qtexts), view, progress=False)
            gaps = len(emb.uncached("documents", texts)) + len(emb.uncached("queries", qtexts))
            if not gaps:
                tv, qv = emb.embed_documents(texts), emb.embed_queries(qtexts)
                data = (np.ascontiguousarray(tv, dtype=np.float32), np.array([t.conversation_id for t in turns], dtype=object),
                        np.array([t.role for t in turns], dtype=object), np.array([float(t.timestamp or 0.0) for t in turns]),
                        np.ascontiguousarray(qv, dtype=np.float32), [q.conversation_id for q in questions])
                return data, f"{what}, {emb.model_id} vectors from the embedding cache of {cache}", "real"
            missing = f"{gaps:,} texts not in the embedding cache of {cache}"
    log.warning("per-user part: synthetic vectors (%s)", missing)
    data = synthetic_per_user(counts, [q.conversation_id for q in questions], seed=seed)
    return data, f"{what}, synthetic clustered vectors with the real per-user counts ({missing})", "synthetic"


def measure(name: str, data, *, kind: str, stores_dir: Path, k: int, warmup: int, overrides: dict, progress: bool,
            max_open: int | None = None, truth: list[list[str]] | None = None, layout: str = PER_CONVERSATION) -> dict:
    """One store's row of the per-user table (``COLUMNS``); ``layout`` shared: one collection, each search filtered to
    its user (a store's conversation filter)."""
    vecs, conv, roles, ts, qv, qconv = data
    n, dim = vecs.shape
    truth = truth if truth is not None else per_user_truth(data, k)
    row = {"store": name, "layout": layout, "vectors": kind, "users": len(set(conv.tolist())), "rows": n}
    with Peak() as peak:
        try:
            backend = load_backend(name, stores_dir=stores_dir, collection=f"peruser_{n}", layout=layout,
                                   **overrides, **({"max_open": max_open} if max_open else {}))
            with open_session(backend, dim=dim, fresh=True) as s:
                ing = s.ingest(synthetic_batches(vecs, conv, roles, ts, INGEST_BATCH), total=-(-n // INGEST_BATCH), progress=progress)
                timed = s.search_all(qv, [Where(conversation_id=c) for c in qconv], k=k, warmup=warmup, progress=progress)
                lat = timed.latency_ns.astype(np.float64)
                got = [list(h.ids) for h in timed.hits]
                row.update(ingest_s=ing.add_seconds, ingest_rows_per_s=n / ing.add_seconds if ing.add_seconds else np.nan,
                           read_after_write_lag_s=ing.ready_seconds, p50_ms=np.percentile(lat, 50) / 1e6,
                           p99_ms=np.percentile(lat, 99) / 1e6, fidelity_at_k=_recall(got, truth, k), short_lists=_short(got, truth, k),
                           collections=getattr(backend, "n_collections", 1),
                           max_open=getattr(backend, "max_open", None) or "all", reopened=getattr(backend, "reopened", 0))
        except Exception as exc:  # a store that fails (a limit hit: one line) is reported, the others still run
            log.error("per-user: %s failed: %s", name, exc)
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
    row.update(peak_rss_gb=peak.rss_bytes / 1e9, rss_added_gb=max(0.0, peak.rss_bytes - peak.start_bytes) / 1e9, max_open_fds=peak.fds)
    return row


def per_user_part(stores: Sequence[str], data, *, kind: str, workdir: Path, k: int, warmup: int, overrides: dict,
                  progress: bool, max_open: int | None = None, on_row=None, layouts: Sequence[str] = ()) -> pd.DataFrame:
    """The per-user table: one row per store, in ``STORES`` order (exact first), ``on_row(df)`` after each (partial
    output), each in every one of ``layouts`` (none given: the store's own, ``USER_LAYOUT``); ``kind``: the vectors'
    (real or synthetic), in every row."""
    truth = per_user_truth(data, k)
    order = sorted(stores, key=lambda s: (STORES.index(s) if s in STORES else len(STORES)))
    rows = []
    for name in order:
        for layout in layouts or (USER_LAYOUT.get(name, PER_CONVERSATION),):
            log.info("per-user: %s, %s layout (%s vectors)", name, layout, kind)
            rows.append(measure(name, data, kind=kind, stores_dir=workdir / "stores", k=k, warmup=warmup, layout=layout,
                                overrides=overrides.get(name, {}), progress=progress, max_open=max_open, truth=truth))
        if on_row is not None:
            on_row(pd.DataFrame(rows))
    df = pd.DataFrame(rows)
    return df[[c for c in COLUMNS if c in df]]
