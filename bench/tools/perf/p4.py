"""P4: each store's adapter against the store's own query.

Times: per store, the adapter's ``search``.
Reference: the store's own hand-written reference query (``Backend.reference_query``: the same client and collection,
same filter and k), both timed by ``bench.backends.session``, alternated query by query on one synthetic LoCoMo-shaped
workload.
Target: <= 1.2.

Every store that runs here (``bench.backends.catalog``; local servers started by ``bench.backends.servers``); cloud
stores are skipped with the reason.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.tools.perf.common import SEARCH_DEPTH, Ratio, alternate, log


def p4_adapter(name: str, corpus, tv: np.ndarray, qv: np.ndarray, *, stores_dir: Path, depth: int = SEARCH_DEPTH,
               overrides: dict | None = None) -> Ratio:
    from bench.backends.catalog import load_backend
    from bench.backends.session import INGEST_BATCH, open_session
    from bench.replay.trace import batches, question_filter

    backend = load_backend(name, stores_dir=stores_dir, collection=f"perf_{name}", **(overrides or {}))
    k = min(depth, backend.capabilities.max_k)
    qs = corpus.questions
    wheres = [question_filter(q) for q in qs]
    with open_session(backend, dim=int(tv.shape[1]), fresh=True) as s:
        s.ingest(batches(corpus.turns(), tv, INGEST_BATCH), timeout_s=600)
        a, b = alternate(lambda i: s.timed_search(qv[i], k=k, where=wheres[i])[1],
                         lambda i: s.timed_reference(qv[i], k=k, where=wheres[i])[1], len(qs))
        same = sum(len(s.backend.search(qv[i], k=k, where=wheres[i])) == len(s.backend.reference_query(qv[i], k=k, where=wheres[i])[0])
                   for i in range(min(20, len(qs))))
    value = sum(a) / sum(b)
    return Ratio(f"P4/{name}", f"{name} adapter search / its hand-written reference query on the same client", value, "<=", 1.2,
                 method=(f"{len(qs)} queries (conversation + time filter, k={k}) on {len(tv):,} synthetic memories, adapter search "
                         "and Backend.reference_query alternated query by query (bench.backends.session times the store call "
                         "alone), 10 warm-up pairs discarded; ratio of summed times"),
                 details={"adapter_median_ms": statistics.median(a) / 1e6, "raw_median_ms": statistics.median(b) / 1e6,
                          "queries": len(qs), "k": k, "same_result_sizes_of_20": same})


def p4_all(stores: Sequence[str] | None = None, *, n_memories: int = 6000) -> list[Ratio]:
    """P4 for ``stores`` (default: every configured one); local servers are started, cloud stores skipped with the reason."""
    from bench.backends.catalog import split_runnable
    from bench.backends.servers import started_servers
    from bench.data.synthetic import generate
    from bench.embedders.synthetic import SyntheticEmbedder
    from bench.replay.trace import embed_corpus

    stores, skipped = split_runnable(stores)
    for reason in skipped:
        log.warning("P4 skipped %s", reason)
    corpus = generate(n_memories, questions_per_conversation=30, seed=4)
    tv, qv, _ = embed_corpus(corpus, SyntheticEmbedder())
    out = []
    with tempfile.TemporaryDirectory(prefix="rb-p4-") as tmp, started_servers(stores, Path(tmp)) as servers:
        for name in stores:
            log.info("P4: %s", name)
            try:
                overrides = servers[name].overrides() if name in servers else None
                out.append(p4_adapter(name, corpus, tv, qv, stores_dir=Path(tmp), overrides=overrides))
            except Exception as exc:  # a store that cannot run here is reported, the others still run
                log.error("P4 %s failed: %s", name, exc)
                out.append(Ratio(f"P4/{name}", f"{name} adapter search / its hand-written reference query on the same client",
                                 float("nan"), "<=", 1.2, details={"error": f"{type(exc).__name__}: {exc}"[:300]}))
    return out


def run(args, ctx) -> list[Ratio]:
    return p4_all([s for s in args.p4_stores.split(",") if s] if args.p4_stores else None)
