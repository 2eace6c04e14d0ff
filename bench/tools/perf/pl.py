"""PL: the per-conversation store layout against an unfiltered query.

Times: per store (seekdb, chroma), a question's query in the per-conversation layout (its conversation's collection,
``bench.backends.layout``).
Reference: an unfiltered query on the shared layout's one collection, the store holding both layouts at once,
alternated query by query on the P4 workload, k=1000; ratio of p50s (``filtered_over_unfiltered``).
Target: <= 1.3.

Printed beside it, as information (PL/<store>/shared): the shared layout's conversation-filtered query / the
unfiltered one.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.tools.perf.common import SEARCH_DEPTH, Ratio, alternate, log


LAYOUT_STORES = ("seekdb", "chroma")


def filtered_over_unfiltered(filtered_ns: Sequence[int], unfiltered_ns: Sequence[int]) -> float:
    """p50 of the conversation-filtered query times / p50 of the unfiltered query times (NaN when either is empty)."""
    if not len(filtered_ns) or not len(unfiltered_ns):
        return float("nan")
    return float(np.median(filtered_ns) / np.median(unfiltered_ns))


def pl_layout(name: str, corpus, tv: np.ndarray, qv: np.ndarray, *, stores_dir: Path, k: int = SEARCH_DEPTH,
              overrides: dict | None = None) -> list[Ratio]:
    """One store in both layouts at once (``bench.backends.layout``): the per-conversation layout's query for a question's
    conversation against the shared layout's unfiltered query, alternated query by query; the shared layout's
    conversation-filtered query beside them (information: the layout recallbench measured before)."""
    from bench.backends.catalog import load_backend
    from bench.backends.session import INGEST_BATCH, open_session
    from bench.replay.trace import batches
    from bench.types import Where

    qs = corpus.questions
    conv = [Where(conversation_id=q.conversation_id) for q in qs]
    sessions, ingest = {}, {}
    with contextlib.ExitStack() as stack:
        for layout in ("shared", "per_conversation"):
            b = load_backend(name, stores_dir=stores_dir, collection=f"perf_layout_{layout}", **{**(overrides or {}), "layout": layout})
            s = stack.enter_context(open_session(b, dim=int(tv.shape[1]), fresh=True))
            ing = s.ingest(batches(corpus.turns(), tv, INGEST_BATCH), timeout_s=600)
            sessions[layout] = s
            ingest[layout] = {"add_s": ing.add_seconds, "ready_s": ing.ready_seconds,
                              "collections": getattr(b, "n_collections", 1)}
        kk = min(k, sessions["shared"].backend.capabilities.max_k)
        per, shared = sessions["per_conversation"], sessions["shared"]
        pc, unf = alternate(lambda i: per.timed_search(qv[i], k=kk, where=conv[i])[1],
                            lambda i: shared.timed_search(qv[i], k=kk, where=Where())[1], len(qs))
        shf, unf2 = alternate(lambda i: shared.timed_search(qv[i], k=kk, where=conv[i])[1],
                              lambda i: shared.timed_search(qv[i], k=kk, where=Where())[1], len(qs))
        same = sum(set(per.backend.search(qv[i], k=kk, where=conv[i]).ids) == set(shared.backend.search(qv[i], k=kk, where=conv[i]).ids)
                   for i in range(min(20, len(qs))))
    def ms(ns, q):
        return float(np.percentile(ns, q) / 1e6)

    method = (f"{len(qs)} queries, k={kk}, {len(tv):,} synthetic memories in {ingest['per_conversation']['collections']} conversations; "
              "the store in both layouts at once (bench.backends.layout), per-conversation query (its conversation's collection) "
              "and unfiltered query on the shared collection alternated query by query, 10 warm-up pairs discarded; ratio of p50s")
    details = {"per_conversation_p50_ms": ms(pc, 50), "per_conversation_p99_ms": ms(pc, 99), "unfiltered_p50_ms": ms(unf, 50),
               "unfiltered_p99_ms": ms(unf, 99), "shared_filtered_p50_ms": ms(shf, 50), "shared_filtered_p99_ms": ms(shf, 99),
               "ingest": ingest, "same_ids_as_shared_filtered_of_20": same, "k": kk}
    return [Ratio(f"PL/{name}", f"{name}: per-conversation layout query / unfiltered query on the same store",
                  filtered_over_unfiltered(pc, unf), "<=", 1.3, method=method, details=details),
            Ratio(f"PL/{name}/shared", f"{name}: shared layout conversation-filtered query / unfiltered (the old layout)",
                  filtered_over_unfiltered(shf, unf2), "<=", 1.3, info=True, method="same run, same queries, alternated")]


def pl_all(stores: Sequence[str] = LAYOUT_STORES, *, n_memories: int = 6000, k: int = SEARCH_DEPTH) -> list[Ratio]:
    from bench.data.synthetic import generate
    from bench.embedders.synthetic import SyntheticEmbedder
    from bench.replay.trace import embed_corpus

    corpus = generate(n_memories, questions_per_conversation=30, seed=4)
    tv, qv, _ = embed_corpus(corpus, SyntheticEmbedder())
    out = []
    with tempfile.TemporaryDirectory(prefix="rb-pl-") as tmp:
        for name in stores:
            log.info("PL: %s", name)
            try:
                out += pl_layout(name, corpus, tv, qv, stores_dir=Path(tmp), k=k)
            except Exception as exc:  # a store that cannot run here is reported, the others still run
                log.error("PL %s failed: %s", name, exc)
                out.append(Ratio(f"PL/{name}", f"{name}: per-conversation layout query / unfiltered query on the same store",
                                 float("nan"), "<=", 1.3, details={"error": f"{type(exc).__name__}: {exc}"[:300]}))
    return out


def run(args, ctx) -> list[Ratio]:
    return pl_all([s for s in args.pl_stores.split(",") if s], k=args.pl_k)
