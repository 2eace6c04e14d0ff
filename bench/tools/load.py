"""``make load``: concurrent search load on every local store and on the real seekdb and chroma servers.

Per store: ingest ``rows`` synthetic memories (clustered unit vectors with conversation, role and
time metadata: ``bench.tools.stores.synthetic``), wait until searchable, measure the read-after-write
lag of single-row writes (time from ``add()`` returning, through ``wait_ready()``, until an
unfiltered search returns the row), then ``threads`` threads each run ``queries`` conversation-filtered top-``k`` searches at the
same time (a barrier releases them together).

Each thread has its own client (a backend instance on the same collection, opened one after the
other before the threads start), as a multi-threaded application would use a database client; the
in-RAM exact store has no client, so its one instance is shared. Every answer is checked: an
exception, a hit from another conversation, a duplicate id, more than ``k`` hits or hits out of
order count as an error. Servers are started on 127.0.0.1 by ``bench.backends.servers`` (never anything
else). Prints per store: errors, throughput, p50/p99 latency under load, read-after-write lag.

The stores are every ``configs/backend/*.yaml`` that runs here (``bench.backends.catalog``: embedded
ones and local servers; cloud stores are skipped with the reason). Each store and each thread's
client is driven through ``bench.backends.session``.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.backends.catalog import load_backend, split_runnable
from bench.backends.servers import started_servers
from bench.backends.session import INGEST_BATCH, Session, open_session
from bench.cli.common import entry, fail, parser, setup_logging
from bench.resources import plugin_names
from bench.tools.stores import synthetic, synthetic_batches
from bench.types import MemoryBatch, Where

log = logging.getLogger("bench.tools.load")


@dataclass(frozen=True)
class LoadResult:
    store: str
    rows: int
    threads: int
    queries: int  # searches attempted, all threads
    errors: int  # exceptions + malformed answers
    exceptions: int
    bad_answers: int  # wrong conversation, duplicates, more than k, not sorted
    qps: float
    p50_ms: float
    p99_ms: float
    lag_p50_ms: float  # read-after-write lag of single-row writes
    lag_max_ms: float
    ingest_s: float
    first_error: str = ""


def _check(hits, k: int, conv_of: dict[str, str], conversation: str) -> str:
    """'' when an answer is well-formed, else what is wrong with it."""
    ids = [h.id for h in hits]
    if len(ids) > k:
        return f"{len(ids)} hits for k={k}"
    if len(set(ids)) != len(ids):
        return "duplicate ids"
    if any(conv_of.get(i) != conversation for i in ids):
        return f"hit outside conversation {conversation!r}"
    scores = [h.score for h in hits]
    if any(a < b - 1e-9 for a, b in zip(scores, scores[1:])):
        return "hits not sorted by similarity"
    return ""


def measure_lag(backend, dim: int, *, probes: int, rng: np.random.Generator, timeout_s: float = 120.0) -> list[float]:
    """Read-after-write lag of ``probes`` single-row writes into the open ``backend`` (``Session.read_after_write``: from
    ``add()`` returning, through ``wait_ready()``, until the start of the first unfiltered search that returns the new row)."""
    session = Session(backend)
    lags = []
    for i in range(probes):
        v = rng.standard_normal(dim).astype(np.float32)
        v /= np.linalg.norm(v)
        row = MemoryBatch(ids=(f"lag{i}",), vectors=v[None, :], conversation_ids=("lag",), roles=("user",), timestamps=(0.0,))
        lags.append(session.read_after_write(row, timeout_s=timeout_s))
    return lags


def load_store(name: str, *, threads: int, queries: int, rows: int, dim: int, k: int, workdir: Path,
               overrides: dict | None = None, lag_probes: int = 5, seed: int = 0) -> LoadResult:
    """Ingest, measure lag, then ``threads`` x ``queries`` concurrent filtered searches on one store."""
    vecs, conv, roles, ts, qv, qconv = synthetic(rows, dim, n_queries=threads * queries, seed=seed)
    conv_of = {f"m{j}": c for j, c in enumerate(conv)}
    collection = f"load_{rows}_{dim}"
    make = lambda: load_backend(name, stores_dir=workdir / "stores", collection=collection, **(overrides or {}))  # noqa: E731
    with contextlib.ExitStack() as stack:
        loader = stack.enter_context(open_session(make(), dim=dim, fresh=True))
        ingest = loader.ingest(synthetic_batches(vecs, conv, roles, ts), total=-(-rows // INGEST_BATCH))
        lags = measure_lag(loader.backend, dim, probes=lag_probes, rng=np.random.default_rng(seed + 1))
        shared = not loader.backend.capabilities.persistent  # in RAM (exact): another instance would be empty
        clients = [loader if shared else stack.enter_context(open_session(make(), dim=dim, drop=False))
                   for _ in range(threads)]  # each closed (not dropped) before the loader's collection is dropped
        lat = [[] for _ in range(threads)]
        exc = [0] * threads
        bad = [0] * threads
        first: list[str] = []
        barrier = threading.Barrier(threads)

        def work(t: int) -> None:
            client = clients[t]
            barrier.wait()
            for i in range(t * queries, (t + 1) * queries):
                try:
                    hits, ns = client.timed_search(qv[i], k=k, where=Where(conversation_id=qconv[i]))
                except Exception as e:  # counted, never fatal: the point is to see them
                    exc[t] += 1
                    if not first:
                        first.append(f"{type(e).__name__}: {e}"[:300])
                    continue
                lat[t].append(ns)
                problem = _check(hits, k, conv_of, qconv[i])
                if problem:
                    bad[t] += 1
                    if not first:
                        first.append(problem)

        workers = [threading.Thread(target=work, args=(t,), name=f"load-{name}-{t}") for t in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        wall = time.perf_counter() - start
    all_lat = np.concatenate([np.asarray(x, dtype=np.float64) for x in lat]) if any(lat) else np.empty(0)
    pct = (lambda p: float(np.percentile(all_lat, p)) / 1e6) if all_lat.size else (lambda p: float("nan"))  # noqa: E731
    return LoadResult(
        store=name, rows=rows, threads=threads, queries=threads * queries, errors=sum(exc) + sum(bad),
        exceptions=sum(exc), bad_answers=sum(bad), qps=threads * queries / wall if wall > 0 else float("nan"),
        p50_ms=pct(50), p99_ms=pct(99), lag_p50_ms=float(np.median(lags)) * 1e3 if lags else float("nan"),
        lag_max_ms=max(lags) * 1e3 if lags else float("nan"), ingest_s=ingest.wall_seconds + ingest.ready_seconds,
        first_error=first[0] if first else "",
    )


def failed_result(name: str, *, threads: int, queries: int, rows: int, exc: BaseException) -> LoadResult:
    """A store that could not be set up at all: every planned query counts as an error."""
    nan = float("nan")
    return LoadResult(store=name, rows=rows, threads=threads, queries=threads * queries, errors=threads * queries,
                      exceptions=threads * queries, bad_answers=0, qps=nan, p50_ms=nan, p99_ms=nan, lag_p50_ms=nan,
                      lag_max_ms=nan, ingest_s=nan, first_error=f"setup: {type(exc).__name__}: {exc}"[:300])


def run_load(stores=None, *, threads: int = 8, queries: int = 1000, rows: int = 5000, dim: int = 384, k: int = 10,
             workdir: Path, server_overrides: dict | None = None, lag_probes: int = 5) -> list[LoadResult]:
    """Load every store in ``stores`` (default: every configured one); the local servers they need are started here
    (``bench.backends.servers.started_servers``) unless ``server_overrides`` has them; cloud stores are skipped (logged)."""
    workdir = Path(workdir)
    stores, skipped = split_runnable(stores)
    for reason in skipped:
        log.warning("skipped %s", reason)
    given = dict(server_overrides or {})
    results = []
    with started_servers([s for s in stores if s not in given], workdir) as started:
        overrides = {**given, **{name: info.overrides() for name, info in started.items()}}
        for name in stores:
            log.info("load: %s (%d rows x %d-d, %d threads x %d queries)", name, rows, dim, threads, queries)
            try:
                r = load_store(name, threads=threads, queries=queries, rows=rows, dim=dim, k=k, workdir=workdir,
                               overrides=overrides.get(name), lag_probes=lag_probes)
            except Exception as e:  # a store that cannot be set up is reported, the others still run
                log.error("load: %s failed: %s", name, e)
                r = failed_result(name, threads=threads, queries=queries, rows=rows, exc=e)
            log.info("load: %s errors=%d p50=%.2f ms p99=%.2f ms", name, r.errors, r.p50_ms, r.p99_ms)
            results.append(r)
    return results


def format_table(results: list[LoadResult]) -> str:
    head = ("| store | rows | threads x queries | errors | qps | p50 ms | p99 ms | read-after-write lag p50 / max ms |"
            " first error |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.store} | {r.rows} | {r.threads} x {r.queries // max(r.threads, 1)} | {r.errors} | {r.qps:.0f} | "
                     f"{r.p50_ms:.2f} | {r.p99_ms:.2f} | {r.lag_p50_ms:.1f} / {r.lag_max_ms:.1f} | {r.first_error or '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = parser("load", __doc__.split("\n\n")[0].split(": ", 1)[-1],
                examples=["recallbench load                                   # 8 threads x 1,000 queries, every store",
                          "recallbench load --stores exact,sqlite_vec --queries 100"])
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--queries", type=int, default=1000, help="searches per thread")
    ap.add_argument("--rows", type=int, default=5000, help="memories ingested per store")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--stores", default=None, help="comma-separated configs/backend names "
                    "(default: all; cloud stores are skipped with the reason)")
    ap.add_argument("--workdir", default=None, help="store data and server directories (default: a temp dir, deleted)")
    args = ap.parse_args(argv)
    known = plugin_names("backend")
    stores = [s.strip() for s in args.stores.split(",") if s.strip()] if args.stores else known
    unknown = [s for s in stores if s not in known]
    if unknown or args.threads < 1 or args.queries < 1 or args.rows < 1 or args.k < 1:
        return fail(f"unknown store(s) {unknown} (known: {', '.join(known)})" if unknown
                    else "--threads, --queries, --rows and --k must be >= 1")
    setup_logging()
    stores, skipped = split_runnable(stores)
    for reason in skipped:
        print(f"skipped {reason}")
    with contextlib.ExitStack() as stack:
        workdir = Path(args.workdir) if args.workdir else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rb-load-")))
        results = run_load(stores, threads=args.threads, queries=args.queries, rows=args.rows, dim=args.dim, k=args.k,
                           workdir=workdir)
    print(format_table(results))
    total = sum(r.errors for r in results)
    print(f"load errors: {total}")
    for r in results:
        log.debug("%s", asdict(r))
    return 0 if total == 0 else 1


if __name__ == "__main__":
    raise SystemExit(entry(main))
