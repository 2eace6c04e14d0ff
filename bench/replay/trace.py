"""Replay: embed (cached), ingest into a store, wait until searchable, search once per question.

Produces a Trace: per question the store's candidates (ids, the store's own similarity, the exact
cosine from the cached vectors) and the latency of the store call alone (perf_counter_ns around
``backend.search``; embedding is timed separately; warm-up queries are discarded). Nothing
downstream reopens the store: thresholds and strategies are post-processing of the trace.

Scale: texts are embedded in chunks into one preallocated float32 array, and the store is fed
from a lazy generator of ``MemoryBatch`` views of it (no per-batch copies, nothing materialised
ahead of the store), so memory beyond the vectors themselves stays bounded by one batch. The
exact cosines (trace column ``exact_scores``, each gold memory's exact rank in ``gold_exact_ranks``,
and the fidelity metrics) are computed after the timed loop, one matrix product per question over
its conversation, under the visibility rule and exact order of ``bench.replay.visibility``, so the loop
around the store call stays thin;
``meta`` records the loop's wall time and the store's share of it (``harness_ns_per_query``), and where the
latency was measured: ``measured_at`` (time) and ``measured_in`` (the run id, ``bench.run.run_id``), kept when the
trace is reused from the cache, so a later run's report can say its latency is from an earlier run.
Every long step has a progress bar (``progress=True``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from bench.progress import progress as progress_bar

from bench.backends.base import Backend
from bench.backends.session import INGEST_BATCH, open_session
from bench.embedders.base import Embedder, embed_side
from bench.embedders.cache import CachedEmbedder
from bench.output import redact, write_atomic
from bench.run import run_id, sha256_file
from bench.types import Corpus, Hits, MemoryBatch, Turn, memory_key
from bench.replay.visibility import Visibility, filter_spec, meta_admits, question_filter

log = logging.getLogger(__name__)

# gold_ids: the question's distinct gold memory keys (evidence order); gold_exact_ranks: per gold id, its 1-based
# exact rank among the memories the question may see under the trace's roles (bench.replay.visibility: similarity
# descending, then key), 0 when the question may not see it (another role, said later, or not in the corpus).
TRACE_COLUMNS = ["question_id", "conversation_id", "latency_ns", "hit_ids", "hit_scores", "exact_scores",
                 "gold_ids", "gold_exact_ranks"]
# native_scores: per hit the store's own score (its distance, its negative inner product...: bench.backends.scores),
# parallel to hit_scores (the similarity made from it); NaN where the store gave none. meta["score"] says what it is.
TRACE_COLUMNS += ["native_scores"]
EMBED_CHUNK = 16_384  # texts per embedder call (bounds the embedder's working memory; one cache shard each)


@dataclass(frozen=True)
class Trace:
    """Raw per-question search results. ``table`` columns: TRACE_COLUMNS. ``meta``: what decided it."""

    table: pd.DataFrame
    meta: dict = field(default_factory=dict)

    def save(self, directory: Path) -> None:
        """trace.parquet, then trace_meta.json with the parquet's row count and sha256 (checked on reuse)."""
        directory.mkdir(parents=True, exist_ok=True)
        path = write_atomic(directory / "trace.parquet", lambda p: self.table.to_parquet(p, index=False))
        meta = {**redact(self.meta), "rows": len(self.table), "parquet_sha256": sha256_file(path)}
        write_atomic(directory / "trace_meta.json", lambda p: p.write_text(json.dumps(meta, indent=2, default=str)))

    def save_copy(self, source: Path, directory: Path) -> None:
        """``save`` for a trace loaded unchanged from ``source`` (``load_checked``): its parquet file is copied, not
        re-encoded; when the copy's sha256 is not the one ``source`` recorded, the table is written anew."""
        import shutil

        directory.mkdir(parents=True, exist_ok=True)
        want = json.loads((Path(source) / "trace_meta.json").read_text()).get("parquet_sha256")
        path = write_atomic(directory / "trace.parquet", lambda p: shutil.copyfile(Path(source) / "trace.parquet", p))
        if not want or sha256_file(path) != want:
            return self.save(directory)
        meta = {**redact(self.meta), "rows": len(self.table), "parquet_sha256": want}
        write_atomic(directory / "trace_meta.json", lambda p: p.write_text(json.dumps(meta, indent=2, default=str)))

    @staticmethod
    def load(directory: Path) -> "Trace":
        table = pd.read_parquet(directory / "trace.parquet")
        meta = json.loads((directory / "trace_meta.json").read_text())
        return Trace(table, meta)

    @staticmethod
    def load_checked(directory: Path, corpus: Corpus) -> tuple["Trace | None", str]:
        """(trace, "") when ``directory`` holds a complete trace of ``corpus``'s questions, else (None, what is wrong):
        the parquet's sha256 and row count as saved, the columns, and the question ids in corpus order."""
        directory = Path(directory)
        try:
            meta = json.loads((directory / "trace_meta.json").read_text())
            if sha256_file(directory / "trace.parquet") != meta.get("parquet_sha256"):
                return None, "trace.parquet changed since it was written (sha256 mismatch)"
            table = pd.read_parquet(directory / "trace.parquet")
        except (OSError, ValueError) as e:
            return None, f"unreadable ({type(e).__name__}: {e})"
        if list(table.columns) != TRACE_COLUMNS:
            return None, f"columns {list(table.columns)} != {TRACE_COLUMNS}"
        if len(table) != meta.get("rows") or len(table) != len(corpus.questions):
            return None, f"{len(table)} rows, expected {len(corpus.questions)} (one per question)"
        if table["question_id"].tolist() != [q.question_id for q in corpus.questions]:
            return None, "question ids differ from the corpus"
        return Trace(table, meta), ""


def search_depth(depth: int | None, corpus: Corpus) -> int:
    """``depth`` when set, else every eligible memory: the largest conversation's turn count."""
    if depth is not None:
        return int(depth)
    return max([len(c.turns) for c in corpus.conversations] + [1])


def batches(turns: Sequence[Turn], vectors: np.ndarray, size: int) -> Iterator[MemoryBatch]:
    """Lazy ``MemoryBatch``es of ``size`` turns; vectors are views of ``vectors`` (no copies)."""
    if size <= 0:
        raise ValueError(f"batch size must be positive (got {size})")
    for i in range(0, len(turns), size):
        yield memory_batch(turns[i : i + size], vectors[i : i + size])


def memory_batch(turns: Sequence[Turn], vectors: np.ndarray) -> MemoryBatch:
    """The ``MemoryBatch`` of ``turns`` (``vectors``: theirs, row for row): what every replay writes into a store."""
    return MemoryBatch(
        ids=tuple(t.key for t in turns),
        vectors=vectors,
        conversation_ids=tuple(t.conversation_id for t in turns),
        roles=tuple(t.role for t in turns),
        timestamps=tuple(float(t.timestamp or 0.0) for t in turns),
        positions=tuple(t.position for t in turns),
        metadata=tuple(t.metadata for t in turns) if any(t.metadata for t in turns) else (),
    )


def native_column(hits: Sequence[Hits]) -> list[list[float]]:
    """The trace's ``native_scores`` (TRACE_COLUMNS): per question the store's own score of each hit, NaN where it gave none."""
    return [list(h.native) if len(h.native) == len(h.ids) else [float("nan")] * len(h.ids) for h in hits]


def embed_texts(embedder: Embedder, texts: Sequence[str], *, side: str, chunk: int = EMBED_CHUNK, progress: bool = False,
                desc: str = "embed") -> np.ndarray:
    """float32 (len(texts), dim): ``embedder.embed_documents`` or ``embed_queries`` (``side``) over chunks of ``chunk``
    texts, into one array. An embedder that ``batches_itself`` (the embedding cache: it writes each part as it goes and reports
    progress over the distinct texts it embeds) gets every text in one call."""
    n = len(texts)
    if embedder.capabilities.batches_itself and n:
        return np.asarray(embed_side(embedder, side, list(texts)), dtype=np.float32)
    out: np.ndarray | None = None
    with progress_bar(n, desc, unit="text", enabled=progress and n > chunk) as bar:
        for lo in range(0, n, chunk):
            part = np.asarray(embed_side(embedder, side, list(texts[lo : lo + chunk])), dtype=np.float32)
            if out is None:
                out = np.empty((n, part.shape[1]), dtype=np.float32)
            out[lo : lo + len(part)] = part
            bar.update(len(part))
    return out if out is not None else np.zeros((0, embedder.dim), np.float32)


def embed_corpus(corpus: Corpus, embedder: Embedder, *, progress: bool = False) -> tuple[np.ndarray, np.ndarray, dict]:
    """Vectors for every turn (embedded as documents) and every question (as queries), in corpus order, and timing stats."""
    turns, questions = corpus.turns(), corpus.questions
    t0 = time.perf_counter()
    tv = embed_texts(embedder, [t.text for t in turns], side="documents", progress=progress, desc="embed turns")
    qv = embed_texts(embedder, [q.text for q in questions], side="queries", progress=progress, desc="embed questions")
    stats = {"embed_seconds": time.perf_counter() - t0, "n_texts": len(turns) + len(questions)}
    if isinstance(embedder, CachedEmbedder):
        stats.update(cache_hits=embedder.hits, cache_misses=embedder.misses)
    return tv, qv, stats


def build_trace(
    corpus: Corpus,
    embedder: Embedder,
    backend: Backend,
    *,
    depth: int,
    roles: tuple[str, ...] | None = None,
    warmup: int = 5,
    batch_size: int = INGEST_BATCH,
    progress: bool = True,
    fidelity_k: int = 10,
    metadata: tuple[tuple[str, str, object], ...] | None = None,
    faults=None,
) -> Trace:
    """Ingest the corpus into ``backend`` and search each question once with ``k=depth``.

    ``metadata``: a metadata filter (``bench.replay.visibility.parse_filter``) in every question's ``Where``: pushed
    down into a store with ``metadata`` in its filters, else applied by ``PostFiltered`` (over-fetch, then filter;
    its time counts as the store's). The store lives for this call only (``bench.backends.session``): opened, filled,
    searched, then dropped and closed, also when something fails. ``faults`` (``bench.replay.faults.Faults``): the store
    behind injected faults (around the post-filter, when there is one), recorded per question in ``meta["faults"]``."""
    if depth <= 0:
        raise ValueError(f"search depth must be positive (got {depth})")
    depth = min(depth, backend.capabilities.max_k)
    turns = corpus.turns()
    tv, qv, emb_stats = embed_corpus(corpus, embedder, progress=progress)
    questions = corpus.questions
    wheres = [question_filter(q, roles=roles, metadata=metadata) for q in questions]
    filtered_by = None
    if metadata:
        filtered_by = "store" if pushes_down(backend, metadata, turns) else "post-filtered by recallbench"
        if filtered_by != "store":
            backend = PostFiltered(backend, {t.key for t in turns if meta_admits(metadata, t.metadata)})
    fault_record = None
    if faults is not None:
        from bench.replay.faults import wrap

        backend, fault_record = wrap(backend, faults, questions, qv, wheres)

    with open_session(backend, dim=int(tv.shape[1]) if len(tv) else embedder.dim) as session:
        ingest = session.ingest(batches(turns, tv, batch_size), total=-(-len(turns) // batch_size), progress=progress)
        timed = session.search_all(qv, wheres, k=depth, warmup=warmup, progress=progress)
        index_bytes = disk_bytes(getattr(backend, "path", None))
        collections = getattr(backend, "n_collections", 1)  # bench.backends.layout: one per conversation, or 1
    hit_ids = [h.ids for h in timed.hits]  # columnar Hits: two references per question
    hit_scores = [h.scores for h in timed.hits]
    broken = contract_violations(corpus, hit_ids, hit_scores, roles=roles, k=depth, metadata=metadata)
    if broken:
        raise StoreContractError(f"store {backend.name} broke the search contract (bench/backends/base.py) {broken}; "
                                 "its results are not scored")
    lat, loop_ns, store_ns = timed.latency_ns, timed.loop_ns, timed.store_ns

    t_exact = time.perf_counter()
    exact, gold_ids, gold_ranks, store = exact_pass(corpus, tv, qv, hit_ids, hit_scores, roles=roles, k=fidelity_k,
                                                     depth=depth, progress=progress, metadata=metadata)
    if fault_record is not None:  # a failed query's empty answer is the injected fault's, not a short list of the store
        _discount_faults(store, fault_record, corpus, roles, metadata)
    if store["short_results"]:
        log.warning("store %s returned fewer hits than asked on %d of %d questions (%s); fidelity@%d vs exact %.3f: "
                    "its ANN index filters after its candidate list (see short_results in meta.json)", backend.name,
                    store["short_results"], len(questions), store["short_example"], fidelity_k, store[f"fidelity_at_{fidelity_k}"])
    post_s = time.perf_counter() - t_exact
    table = pd.DataFrame({"question_id": [q.question_id for q in questions],
                          "conversation_id": [q.conversation_id for q in questions], "latency_ns": lat,
                          "hit_ids": list(map(list, hit_ids)), "hit_scores": list(map(list, hit_scores)), "exact_scores": exact,
                          "gold_ids": gold_ids, "gold_exact_ranks": gold_ranks},
                         columns=TRACE_COLUMNS)
    table["native_scores"] = native_column(timed.hits)
    nq = len(questions)
    meta = {
        "dataset": corpus.name,
        "backend": backend.name,
        "layout": getattr(backend, "layout", "shared"),  # bench.backends.layout
        "collections": collections,
        "capabilities": {k: (sorted(v) if isinstance(v, frozenset) else v) for k, v in vars_of(backend.capabilities).items()},
        "embedder": embedder.model_id,
        "depth": depth,
        "roles": list(roles) if roles else None,
        **({"metadata_filter": filter_spec(metadata), "metadata_filtered_by": filtered_by} if metadata else {}),
        "n_memories": len(turns),
        "ingest_seconds": ingest.add_seconds,  # time inside backend.add only
        "ingest_per_second": len(turns) / ingest.add_seconds if ingest.add_seconds else None,
        "ingest_batches": ingest.batches,
        "ingest_batch_size": batch_size,
        "ingest_wall_seconds": ingest.wall_seconds,
        "ready_seconds": ingest.ready_seconds,
        "warmup_queries": timed.warmup,
        "search_loop_seconds": loop_ns / 1e9,
        "store_search_seconds": store_ns / 1e9,
        "harness_ns_per_query": (loop_ns - store_ns) / nq if nq else None,  # loop work around the store call
        "postprocess_ns_per_query": post_s * 1e9 / nq if nq else None,  # exact cosines + fidelity, after the loop
        "index_bytes": index_bytes,
        **store,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "measured_in": run_id(),  # the run whose store calls these latencies are: a cached trace keeps it (bench.run.run_id)
        **emb_stats,
    }
    meta["score"] = score_meta(backend)  # the store's metric, its native score and the conversion to a similarity
    if fault_record is not None:
        meta["faults"] = fault_record
    log.info("trace: %d questions on %s (ingest %.1fs, ready %.2fs, search %.1fs of which store %.1fs)", nq, backend.name,
             meta["ingest_seconds"], meta["ready_seconds"], loop_ns / 1e9, store_ns / 1e9)
    return Trace(table, meta)


def _discount_faults(store: dict, fault_record: dict, corpus: Corpus, roles, metadata=None) -> None:
    """``short_results`` (and its rate and example) without the questions the injected faults failed
    (``bench.replay.faults``); fidelity still counts them (the store gave nothing). ``metadata``: the trace's filter,
    as ``exact_pass`` counted short lists under it."""
    vis = Visibility(corpus, metadata)
    failed = {q for ids in fault_record["failed"].values() for q in ids}
    n = sum(1 for q in corpus.questions if q.question_id in failed and vis.mask(q, roles).any())
    store["short_results"] -= n
    store["short_result_rate"] = store["short_results"] / len(corpus.questions) if corpus.questions else float("nan")
    if any(store["short_example"].startswith(f"question {q!r}:") for q in failed):
        store["short_example"] = ""


SCORE_SLACK = 1e-3  # a similarity is a cosine of L2-normalised float32 vectors: [-1, 1], plus float32 rounding


class StoreContractError(RuntimeError):
    """A store answered outside the search contract (bench/backends/base.py): the job fails, nothing is scored."""


def contract_violations(corpus: Corpus, hit_ids: Sequence[Sequence[str]], hit_scores: Sequence[Sequence[float]], *,
                        roles: tuple[str, ...] | None, k: int, examples: int = 3, metadata=None) -> str:
    """'' when every question's hits keep the search contract, else one line: on how many questions it broke, by kind,
    and the first ``examples`` hits that broke it (question, filter, hit). Checked for every store, once, after the
    timed loop: every id is a memory of the corpus the question may see (``bench.replay.visibility``: its conversation, its
    ``roles``, said at or before ``asked_at``: the filter the store was given), no id twice, at most ``k`` hits,
    similarities finite, within [-1, 1] (``SCORE_SLACK`` for rounding) and best first."""
    vis = Visibility(corpus, metadata)
    kinds: dict[str, int] = {}
    shown: list[str] = []
    bad_questions = 0
    for qi, q in enumerate(corpus.questions):
        ids, scores = list(hit_ids[qi]), np.asarray(hit_scores[qi], dtype=float)
        found: list[tuple[str, str]] = []  # (kind, what)
        if len(ids) > k:
            found.append(("more than k", f"{len(ids)} hits for k={k}"))
        if len(set(ids)) != len(ids):
            found.append(("id twice", f"id {next(i for i in ids if ids.count(i) > 1)!r} twice"))
        r = vis.lookup(ids)
        start, end = vis.span(q.conversation_id)
        ok = (r >= 0) & (r >= start) & (r < end)  # a memory of the question's conversation
        ok[ok] = vis.mask(q, roles)[r[ok] - start]  # ... that the question may see
        for j in np.flatnonzero(~ok):
            row = int(r[j])
            if row < 0:
                found.append(("id outside the corpus", f"id {ids[j]!r} is not a memory of the corpus"))
            elif not start <= row < end:
                found.append(("filter ignored: conversation", f"hit {ids[j]!r} is from another conversation "
                                                              f"(filter conversation_id={q.conversation_id!r})"))
            elif roles is not None and vis.role[row] not in roles:
                found.append(("filter ignored: role", f"hit {ids[j]!r} has role {vis.role[row]!r} (filter roles={list(roles)})"))
            elif vis.meta_ok is not None and not vis.meta_ok[row]:
                found.append(("filter ignored: metadata", f"hit {ids[j]!r} fails the metadata filter {filter_spec(metadata)}"))
            else:
                found.append(("filter ignored: time", f"hit {ids[j]!r} was said at {vis.ts[row]:.0f}, after the filter's "
                                                      f"before={q.asked_at!r}"))
        out = ~np.isfinite(scores) | (scores < -1 - SCORE_SLACK) | (scores > 1 + SCORE_SLACK)
        if out.any():
            j = int(np.flatnonzero(out)[0])
            found.append(("score out of range", f"hit {ids[j]!r} has similarity {float(scores[j])!r}, outside [-1, 1]"))
        elif len(scores) > 1 and (np.diff(scores) > 1e-9).any():
            j = int(np.flatnonzero(np.diff(scores) > 1e-9)[0])
            found.append(("not best first", f"similarity {float(scores[j + 1])!r} after {float(scores[j])!r}"))
        if found:
            bad_questions += 1
            for kind in dict.fromkeys(kind for kind, _ in found):
                kinds[kind] = kinds.get(kind, 0) + 1
            if len(shown) < examples:
                shown.append(f"question {q.question_id!r}: {found[0][1]}")
    if not bad_questions:
        return ""
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda x: (-x[1], x[0])))
    return f"on {bad_questions} of {len(corpus.questions)} questions ({counts}): " + "; ".join(shown)


def exact_pass(corpus: Corpus, tv: np.ndarray, qv: np.ndarray, hit_ids: Sequence[Sequence[str]],
                hit_scores: Sequence[Sequence[float]], *, roles, k: int, depth: int,
                progress: bool = False, metadata=None, visible_rows: Sequence[np.ndarray] | None = None,
                ) -> tuple[list[list[float]], list[list[str]], list[list[int]], dict]:
    """One pass over the questions, one matrix product per question over its conversation: the exact cosine of
    every hit, each gold memory's exact rank (``gold_ids``/``gold_exact_ranks``, see TRACE_COLUMNS) and the
    store metrics (see store_metrics). ``visible_rows``: per question, the rows of its conversation (0 = its first
    row) that are in the store when it is asked (live replay: those written before it); ranks, fidelity and short
    lists are then over what the question may see AND what is there. None: every row is there."""
    vis = Visibility(corpus, metadata)
    exact: list[list[float]] = [[] for _ in hit_ids]
    gold_ids: list[list[str]] = [[] for _ in hit_ids]
    gold_ranks: list[list[int]] = [[] for _ in hit_ids]
    fid, short, truncated, max_diff, mismatches, pairs = [], 0, 0, float("nan"), 0, 0
    short_example, eligible = "", []
    questions = corpus.questions
    for qi, start, sims in _views(vis, corpus, tv, qv, progress=progress):
        q = questions[qi]
        ids = hit_ids[qi]
        if len(ids):
            r = vis.lookup(ids)
            local = r - start
            inside = (r >= 0) & (local >= 0) & (local < len(sims))
            vals = np.full(len(ids), np.nan)
            vals[inside] = sims[local[inside]]
            for j in np.flatnonzero(~inside & (r >= 0)):  # a hit from another conversation (a filter leak)
                vals[j] = float(tv[r[j]] @ qv[qi])
            exact[qi] = vals.tolist()
            d = np.abs(np.asarray(hit_scores[qi], dtype=float) - vals)
            pairs += len(d)
            mismatches += int(np.sum(d > 1e-4))
            if not np.isnan(d).all():
                m = float(np.nanmax(d))
                max_diff = m if max_diff != max_diff else max(max_diff, m)
        mask = vis.mask(q, roles)
        if visible_rows is not None:
            there = np.zeros(len(mask), dtype=bool)
            there[visible_rows[qi]] = True
            mask = mask & there
        local = np.flatnonzero(mask)
        gold = list(dict.fromkeys(memory_key(q.conversation_id, e) for e in q.evidence))
        if gold:
            g = vis.lookup(gold) - start
            seen = (g >= 0) & (g < len(sims))
            seen[seen] = mask[g[seen]]
            ranks = np.zeros(len(gold), dtype=np.int64)
            ranks[seen] = vis.ranks(start, local, sims, g[seen])
            gold_ids[qi], gold_ranks[qi] = gold, ranks.tolist()
        want = vis.top(start, local, sims, k)
        if len(want):
            fid.append(len(set(ids[:k]).intersection(want.tolist())) / len(want))
        eligible.append(len(local))
        if len(ids) < min(depth, len(local)):
            short += 1
            if not short_example:
                short_example = f"question {q.question_id!r}: {len(ids)} hits of {min(depth, len(local))} asked ({len(local)} eligible)"
        truncated += len(local) > depth
    n = len(hit_ids)
    metrics = {
        f"fidelity_at_{k}": float(np.mean(fid)) if fid else float("nan"),
        "short_result_rate": short / n if n else float("nan"),
        # short list: fewer hits than min(depth, eligible memories) -- a store that filters after its ANN candidate list
        # (pgvector HNSW without iterative scan) returns them silently; the contract allows it, the report counts it
        "short_results": short,
        "short_example": short_example,
        "eligible_median": float(np.median(eligible)) if eligible else float("nan"),
        "n_truncated": truncated,  # questions with more eligible memories than the search depth
        "score_max_abs_diff": max_diff,
        "score_mismatches_1e4": mismatches,
        "score_pairs": pairs,
    }
    return exact, gold_ids, gold_ranks, metrics


def _views(vis: Visibility, corpus: Corpus, tv: np.ndarray, qv: np.ndarray, *, progress: bool = False, desc: str = "exact"):
    """Yield (question index, first row of its conversation, exact cosine of each of that conversation's rows)."""
    by_conv: dict[str, list[int]] = {}
    for qi, q in enumerate(corpus.questions):
        by_conv.setdefault(q.conversation_id, []).append(qi)
    with progress_bar(len(corpus.questions), desc, unit="q", enabled=progress) as bar:
        for conv, qis in by_conv.items():
            start, end = vis.span(conv)
            block = tv[start:end]
            for qi in qis:
                yield qi, start, block @ qv[qi]  # the same product a brute-force store computes
            bar.update(len(qis))


def exact_top(corpus: Corpus, tv: np.ndarray, qv: np.ndarray, *, roles: tuple[str, ...] | None, k: int,
              metadata=None) -> list[list[str]]:
    """The exact top-k keys per question (same filters as the store), from the cached vectors."""
    vis = Visibility(corpus, metadata)
    out: list[list[str]] = [[] for _ in corpus.questions]
    for qi, start, sims in _views(vis, corpus, tv, qv):
        out[qi] = [str(x) for x in vis.top(start, vis.local(corpus.questions[qi], roles), sims, k)]
    return out


def store_metrics(table: pd.DataFrame, corpus: Corpus, tv: np.ndarray, qv: np.ndarray, *, roles, k: int, depth: int) -> dict:
    """How faithful the store is to the exact cosine scan on the same vectors and filters.

    fidelity = recall@k of the store's top-k against the exact top-k; short results = queries that
    returned fewer than min(depth, matching) rows; score disagreement = |store sim - exact cos|.
    ``table`` rows are in ``corpus.questions`` order.
    """
    return exact_pass(corpus, tv, qv, table["hit_ids"].tolist(), table["hit_scores"].tolist(), roles=roles, k=k, depth=depth)[-1]


def disk_bytes(path) -> int | None:
    """Bytes a store's directory takes on disk (None for stores without one): allocated blocks, not the apparent
    size, so a sparse preallocated file (a Qdrant Edge shard: ~130 MB apparent, < 1 MB allocated) counts what it uses."""
    if not path:
        return None
    p = Path(path)

    def used(f: Path) -> int:
        st = f.stat()
        return min(st.st_size, st.st_blocks * 512) if hasattr(st, "st_blocks") else st.st_size

    if p.is_file():
        return used(p)
    return sum(used(f) for f in p.rglob("*") if f.is_file()) if p.exists() else None


def score_meta(backend) -> dict:
    """What the trace's ``native_scores`` are: the store's metric, the kind of number it returns, the conversion."""
    from bench.backends.scores import describe

    metric = getattr(backend, "metric", "cosine")
    scores = dict(getattr(backend.capabilities, "scores", ()))
    return describe(backend.name, metric, scores.get(metric))


def vars_of(obj) -> dict:
    return {name: getattr(obj, name) for name in obj.__slots__} if hasattr(obj, "__slots__") else dict(vars(obj))


def pushes_down(backend: Backend, metadata, turns: Sequence[Turn]) -> bool:
    """True when ``backend`` applies the metadata filter ``metadata`` itself: ``metadata`` among its filters, and no
    condition on a string-list field (stores keep scalar fields only; a list field is always post-filtered)."""
    if "metadata" not in backend.capabilities.filters:
        return False
    names = {name for name, _, _ in metadata}
    return not any(isinstance(v, tuple) for t in turns for name, v in t.metadata if name in names)


class PostFiltered:
    """A store that cannot apply the metadata filter, searched as if it could: the search without the metadata
    conditions, over-fetching (4x k, then 4x more while the filter leaves fewer than k and the store had more), then
    the hits whose memory passes (``allowed``: the keys that pass, from ``bench.replay.visibility.meta_admits``).
    Everything else is the store's own (attribute access is forwarded)."""

    OVERFETCH = 4

    def __init__(self, inner: Backend, allowed: set[str]) -> None:
        self._inner, self._allowed = inner, allowed

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def search(self, vector: np.ndarray, *, k: int, where) -> "Hits":
        if not where.metadata:
            return self._inner.search(vector, k=k, where=where)
        bare = dataclasses.replace(where, metadata=None)
        top = self._inner.capabilities.max_k
        kk = min(k * self.OVERFETCH, top)
        while True:
            hits = self._inner.search(vector, k=kk, where=bare)
            keep = [j for j, i in enumerate(hits.ids) if i in self._allowed]
            if len(keep) >= k or len(hits) < kk or kk >= top:
                keep = keep[:k]
                return Hits(tuple(hits.ids[j] for j in keep), tuple(hits.scores[j] for j in keep),
                            tuple(hits.native[j] for j in keep) if hits.native else ())
            kk = min(kk * self.OVERFETCH, top)

    def reference_query(self, vector: np.ndarray, *, k: int, where) -> tuple[list[str], list[float]]:
        hits = self.search(vector, k=k, where=where)
        return list(hits.ids), list(hits.scores)
