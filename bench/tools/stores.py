"""``make compare``: every local store side by side, on LoCoMo and on synthetic data at the seed's scale.

Two parts, both written to ``reports/compare/``, and a third on request:
1. LoCoMo (quality and latency): the main pipeline (``python -m bench``) once per store, servers
   started here on loopback; one table of best F1, limit-5 recall, latency and store metrics.
2. Scale: clustered synthetic vectors (14,726 and 100,000 memories; 384-d and 1536-d) with role,
   conversation and time metadata. Per store: ingest time, read-after-write lag (``wait_ready``),
   per-query latency p50/p99 (top-10, unfiltered and conversation-filtered; warm-up discarded),
   recall@10 against the exact numpy scan, and the latency ratio to that scan.
3. Per user (``--per-user``, ``bench.tools.peruser``): LongMemEval_S's 498 users (~490 turns each, 245,625 in all),
   a collection per user on exact, sqlite_vec, lancedb and chroma, one collection with an indexed user column on seekdb:
   ingest rows/s, search p50/p99, fidelity@k against the exact scan, peak RSS and open files (child processes
   included), the bound on open collections and its reopens; MiniLM vectors from an embedding cache
   (``--per-user-cache``) or, when a text is missing there, synthetic vectors with the real per-user counts (the table
   says which).
The seed article's figures are printed beside ours, labelled as quoted, not measured.
Each store runs in each store layout (``--layouts``, default both; ``bench.backends.layout``): one
shared collection filtered by conversation, or a collection per conversation; the tables have a
``layout`` column, and ingest time includes creating the per-conversation collections.

The stores are every ``configs/backend/*.yaml`` that runs here (``bench.backends.catalog``): embedded
ones and local servers (started by ``bench.backends.servers.started_servers``); cloud stores are
skipped with the reason, except Pinecone, which runs against its loopback protocol double
(``bench.tools.harden.doubles.PineconeTestServer``, a fresh one per run, on 127.0.0.1, a dummy key; opt out with
``--no-pinecone-loopback``). Its rows are labelled ``LOOPBACK_LABEL``: the double shows what the Pinecone adapter
recalls (filters, layouts, the protocol), never Pinecone's latency (a numpy scan in this process); in the scale part
it runs up to ``LOOPBACK_MAX_N`` memories (it scans every row in Python per query). Each store is driven through
``bench.backends.session``.

Latency is fresh by default: the LoCoMo part runs with ``trace_cache=false resume=false`` (unless ``--locomo-args``
sets them), so no row carries a latency timed in an earlier run; the ``latency_origin`` column says where each one
was measured (``bench.report.latency``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import pandas as pd

from bench.backends.catalog import load_backend, split_runnable, store_names
from bench.backends.layout import LAYOUTS, SHARED, check_layout
from bench.backends.servers import started_servers
from bench.backends.session import INGEST_BATCH, open_session
from bench.cli.common import entry, parser, reports_dir, setup_logging
from bench.output import write_atomic
from bench.results.rundir import RunDir
from bench.replay.trace import disk_bytes
from bench.types import MemoryBatch, Where

log = logging.getLogger("bench.tools.stores")
# Quoted from the seed article (14,726 memories x 1536-d), NOT measured here.
QUOTED = [
    {"store": "sqlite-vec (quoted)", "n": 14726, "dim": 1536, "p50_ms": 94.0, "p99_ms": 118.0},
    {"store": "Pinecone (quoted)", "n": 14726, "dim": 1536, "p50_ms": 127.0, "p99_ms": 342.0},
]


# Cloud stores run here against a loopback protocol double: quality only, the latency is the double's.
LOOPBACK_LABEL = "pinecone (loopback double: quality only, latency is not Pinecone's)"
LOOPBACK_STORES = ("pinecone",)
LOOPBACK_KEY_ENV = "RECALLBENCH_LOOPBACK_PINECONE_KEY"
LOOPBACK_KEY = "loopback-double-key-not-a-secret"  # a dummy the double checks; never PINECONE_API_KEY
LOOPBACK_MAX_N = 20_000  # the double scans every row in Python per query: larger scale sizes leave it out


@contextmanager
def pinecone_loopback() -> Iterator[dict]:
    """A fresh loopback Pinecone double on 127.0.0.1 for one store run: yields the backend overrides (host, key variable).
    The dummy key is set in this process's environment, so a ``python -m bench`` child inherits it."""
    from bench.tools.harden.doubles import PineconeTestServer

    os.environ[LOOPBACK_KEY_ENV] = LOOPBACK_KEY
    with PineconeTestServer(LOOPBACK_KEY) as server:
        yield {"host": server.host, "api_key_env": LOOPBACK_KEY_ENV}


def _place(name: str, loopback) -> tuple[str, object]:
    """(the store's label in the tables, a context manager yielding its extra overrides)."""
    return (LOOPBACK_LABEL, pinecone_loopback()) if name in loopback else (name, nullcontext({}))


def synthetic(n: int, dim: int, *, n_queries: int, seed: int = 0, clusters: int = 100, conversations: int = 50):
    """Clustered unit vectors with metadata, and queries drawn near the same cluster centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    assign = rng.integers(0, clusters, n)
    vecs = centres[assign] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    qa = rng.integers(0, clusters, n_queries)
    qv = centres[qa] + 0.6 * rng.standard_normal((n_queries, dim)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    conv = np.array([f"c{i % conversations}" for i in range(n)], dtype=object)
    roles = np.where(np.arange(n) % 2 == 0, "user", "assistant").astype(object)
    ts = 1.6e9 + np.arange(n, dtype=np.float64) * 60.0
    qconv = [f"c{i % conversations}" for i in range(n_queries)]
    return vecs, conv, roles, ts, qv, qconv


def synthetic_batches(vecs, conv, roles, ts, size: int = INGEST_BATCH):
    """Lazy ``MemoryBatch``es (ids ``m<row>``) of ``synthetic`` data."""
    for i in range(0, len(vecs), size):
        sl = slice(i, i + size)
        yield MemoryBatch(ids=tuple(f"m{j}" for j in range(i, min(i + size, len(vecs)))), vectors=vecs[sl],
                          conversation_ids=tuple(conv[sl]), roles=tuple(roles[sl]), timestamps=tuple(float(x) for x in ts[sl]))


def bench_store(name: str, data, *, stores_dir: Path, k: int, warmup: int, overrides: dict, progress: bool,
                layout: str = SHARED, label: str | None = None) -> dict:
    vecs, conv, roles, ts, qv, qconv = data
    n, dim = vecs.shape
    row = {"store": label or name, "layout": layout, "n": n, "dim": dim}
    try:
        backend = load_backend(name, stores_dir=stores_dir, collection=f"cmp_{n}_{dim}", **{**overrides, "layout": layout})
        with open_session(backend, dim=dim, fresh=True) as s:
            ingest = s.ingest(synthetic_batches(vecs, conv, roles, ts), total=-(-n // INGEST_BATCH), progress=progress)
            row.update(ingest_s=ingest.add_seconds, ingest_rows_per_s=n / ingest.add_seconds,
                       read_after_write_lag_s=ingest.ready_seconds)
            plain = s.search_all(qv, [Where()] * len(qv), k=k, warmup=warmup)
            filtered = s.search_all(qv, [Where(conversation_id=c) for c in qconv], k=k, warmup=warmup)
            lat, flat = plain.latency_ns.astype(np.float64), filtered.latency_ns.astype(np.float64)
            row.update(p50_ms=np.percentile(lat, 50) / 1e6, p99_ms=np.percentile(lat, 99) / 1e6,
                       filtered_p50_ms=np.percentile(flat, 50) / 1e6, filtered_p99_ms=np.percentile(flat, 99) / 1e6,
                       index_mb=(disk_bytes(getattr(backend, "path", None)) or float("nan")) / 1e6)
            row["_ids"], row["_fids"] = [list(h.ids) for h in plain.hits], [list(h.ids) for h in filtered.hits]
    except Exception as exc:  # a store that fails is reported, the others still run
        log.error("%s at %dx%d failed: %s", name, n, dim, exc)
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return row


TIE_EPS = 1e-6  # two float32 cosines this close are one value (identical texts embed to identical vectors)


def exact_truth(data, k: int) -> tuple[list[list[str]], list[list[str]]]:
    """Per query, unfiltered and filtered to its user: the exact top-k ids, then every other id tied with the k-th
    (similarity within TIE_EPS): a store that returns one of those instead is right (corpora repeat texts: LongMemEval_S
    holds 23,673 session memories but 18,304 distinct texts). ``_recall``/``_short`` count against k (``k=``)."""
    vecs, conv, _, _, qv, qconv = data
    sims = qv @ vecs.T

    def top(row_sims, rows):
        order = rows[np.argsort(-row_sims[rows], kind="stable")]
        head = order[:k]
        if len(order) > k:
            tied = order[k:][row_sims[order[k:]] >= row_sims[head[-1]] - TIE_EPS]
            head = np.concatenate([head, tied])
        return [f"m{j}" for j in head]

    everything = np.arange(len(vecs))
    truth = [top(sims[i], everything) for i in range(len(qv))]
    ftruth = [top(sims[i], np.flatnonzero(conv == c)) for i, c in enumerate(qconv)]
    return truth, ftruth


def _recall(got: list[list[str]], truth: list[list[str]], k: int | None = None) -> float:
    """Mean share of the exact top-k a store's top-k holds (``exact_truth``: an id tied with the k-th counts); ``k`` None:
    every id of the truth is wanted."""
    out = []
    for g, t in zip(got, truth):
        want = len(t) if k is None else min(k, len(t))
        if want:
            out.append(min(len(set(g[:want]) & set(t)), want) / want)
    return float(np.mean(out))


def _short(got: list[list[str]], truth: list[list[str]], k: int | None = None) -> int:
    """Queries answered with fewer hits than min(k, eligible) (the exact top-k holds that many): a short list."""
    return sum(len(g) < (len(t) if k is None else min(k, len(t))) for g, t in zip(got, truth))


def scale_part(stores, sizes, dims, *, n_queries, k, warmup, workdir, overrides, progress,
               layouts=(SHARED,), loopback: tuple[str, ...] = ()) -> pd.DataFrame:
    """``loopback``: stores of ``stores`` run against their loopback double (``pinecone_loopback``), up to
    ``LOOPBACK_MAX_N`` memories."""
    rows = []
    for n in sizes:
        for dim in dims:
            data = synthetic(n, dim, n_queries=n_queries, seed=n + dim)
            truth, ftruth = exact_truth(data, k)
            for name in stores:
                if name in loopback and n > LOOPBACK_MAX_N:
                    log.info("scale: %s left out at %d memories (the loopback double scans in Python; max %d)", name, n, LOOPBACK_MAX_N)
                    continue
                for layout in layouts:
                    log.info("scale: %s (%s) at %d x %d", name, layout, n, dim)
                    label, place = _place(name, loopback)
                    with place as extra:
                        r = bench_store(name, data, stores_dir=workdir / "stores", k=k, warmup=warmup,
                                        overrides={**overrides.get(name, {}), **extra}, progress=progress, layout=layout,
                                        label=label)
                    if "_ids" in r:
                        ids, fids = r.pop("_ids"), r.pop("_fids")
                        r["recall_at_k_vs_exact"] = _recall(ids, truth, k)
                        r["filtered_recall_at_k_vs_exact"] = _recall(fids, ftruth, k)
                        r["short_lists"], r["filtered_short_lists"] = _short(ids, truth, k), _short(fids, ftruth, k)
                    rows.append(r)
    df = pd.DataFrame(rows)
    if "p50_ms" in df:  # the exact scan of the same layout is the reference
        ref = df[df["store"] == "exact"].set_index(["n", "dim", "layout"])
        for col in ("p50_ms", "p99_ms", "filtered_p50_ms"):
            df[f"{col}_ratio_to_exact"] = [r[col] / ref.loc[(r["n"], r["dim"], r["layout"]), col]
                                           if (r["n"], r["dim"], r["layout"]) in ref.index else np.nan for _, r in df.iterrows()]
    return df


FRESH = ("trace_cache=false", "resume=false")  # the LoCoMo part's default: every latency timed in this command


def locomo_part(stores, *, out: Path, overrides: dict, data_dir: str | None, layouts=(SHARED,),
                extra: tuple[str, ...] = (), loopback: tuple[str, ...] = (), verbose: bool = False) -> pd.DataFrame:
    """One ``python -m bench`` per store and layout. ``extra``: more overrides (``trace_cache=`` / ``resume=`` there
    replace the fresh default, ``FRESH``); ``loopback``: stores run against their loopback double."""
    from bench.report.latency import latency_origin

    given = {x.split("=", 1)[0].lstrip("+") for x in extra}
    fresh = [x for x in FRESH if x.split("=", 1)[0] not in given]
    rows = []
    for name, layout in ((n, lay) for n in stores for lay in layouts):
        run_dir = out / "locomo" / f"{name}-{layout}"
        label, place = _place(name, loopback)
        with place as more:
            cmd = [sys.executable, "-m", "bench", f"backend={name}", f"backend.layout={layout}", "strategy=[limit,threshold,hybrid]",
                   "progress=false", "publish_latest=false", f"hydra.run.dir={run_dir}", *fresh, *extra]
            cmd += [f"backend.{k}={v}" for k, v in {**overrides.get(name, {}), **more}.items()] + (["-v"] if verbose else [])
            env = dict(os.environ, **({"BENCH_DATA_DIR": data_dir} if data_dir else {}))
            log.info("locomo: %s", " ".join(cmd[2:]))
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not (run_dir / "summary.csv").exists():
            rows.append({"store": label, "layout": layout, "error": (proc.stderr.strip().splitlines() or ["failed"])[-1][:300]})
            continue
        s = pd.read_csv(run_dir / "summary.csv")
        meta = json.loads((run_dir / "meta.json").read_text())
        best = s.dropna(subset=["threshold"]).sort_values("f1", ascending=False).iloc[0]
        lim = s[s["strategy"].isin(RunDir(run_dir).strategy_names("limit"))].iloc[0]
        rows.append({"store": label, "layout": layout, "depth": meta.get("depth"), "collections": meta.get("collections"), "dataset": meta["dataset"],
                     "memories": meta["n_memories"], "ingest_s": meta.get("ingest_seconds"),
                     "best_strategy": best["strategy"], "best_threshold": best["threshold"], "best_f1": best["f1"],
                     "limit5_recall": lim["recall"], "limit5_token_savings": lim["token_savings"],
                     "p50_ms": lim["latency_p50_ms"], "p99_ms": lim["latency_p99_ms"],
                     "fidelity_at_10": meta.get("fidelity_at_10"), "short_result_rate": meta.get("short_result_rate"),
                     "short_results": meta.get("short_results"), "eligible_median": meta.get("eligible_median"),
                     "score_max_abs_diff": meta.get("score_max_abs_diff"), "ingest_rows_per_s": meta.get("ingest_per_second"),
                     "read_after_write_lag_s": meta.get("ready_seconds"), "latency_origin": latency_origin(meta)})
    return pd.DataFrame(rows)


DEPLOYED = ("filtered_p50_ms", "filtered_p99_ms")  # what a memory store serves: one conversation's (user's) memories


def deployed_latency(scale: pd.DataFrame) -> pd.DataFrame:
    """Per store and layout, the latency of the query it deploys (``DEPLOYED``): scoped to one conversation, a
    filter on the shared layout, one small collection on the per-conversation layout. The unfiltered search of a
    per-conversation layout fans out over every collection: no memory query does that, so it is not plotted."""
    ok = scale[scale["filtered_p50_ms"].notna()] if "filtered_p50_ms" in scale else scale.iloc[0:0]
    return ok.assign(deployed_p50_ms=ok.get("filtered_p50_ms"), deployed_p99_ms=ok.get("filtered_p99_ms"))


def plot(scale: pd.DataFrame, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.report.plots import HATCHES, NEUTRAL

    paths = []
    ok = deployed_latency(scale)
    for (n, dim), g in ok.groupby(["n", "dim"]):
        fig, axes = plt.subplots(1, 3, figsize=(15, 4))
        x = np.arange(len(g))
        axes[0].bar(x - 0.2, g["deployed_p50_ms"], 0.4, color=NEUTRAL[0], label="p50")
        axes[0].bar(x + 0.2, g["deployed_p99_ms"], 0.4, color=NEUTRAL[2], hatch=HATCHES[1], edgecolor=NEUTRAL[1], label="p99")
        ex = g[(g["store"] == "exact") & (g["layout"] == SHARED)]
        if len(ex):
            axes[0].axhline(float(ex["deployed_p50_ms"].iloc[0]), color="k", ls="--", lw=1, label="exact numpy scan p50 (shared)")
        for q in QUOTED:
            if q["n"] == n and q["dim"] == dim:
                axes[0].axhline(q["p50_ms"], ls=":", lw=1, color="gray")
                axes[0].annotate(f"{q['store']} p50 {q['p50_ms']:.0f} ms (unfiltered, quoted)", (0, q["p50_ms"]), fontsize=7, color="gray")
        axes[0].set_yscale("log")
        axes[0].set_ylabel("ms per query (top-10, log)")
        axes[0].set_title("latency as deployed: one conversation's memories", fontsize=10)
        axes[1].bar(x - 0.2, g["ingest_s"], 0.4, color=NEUTRAL[0], label="ingest s")
        axes[1].bar(x + 0.2, g["read_after_write_lag_s"], 0.4, color=NEUTRAL[2], hatch=HATCHES[1], edgecolor=NEUTRAL[1], label="read-after-write lag s")
        axes[1].set_title("ingest and lag (s)")
        axes[2].bar(x - 0.2, g["recall_at_k_vs_exact"], 0.4, color=NEUTRAL[2], hatch=HATCHES[1], edgecolor=NEUTRAL[1], label="unfiltered")
        axes[2].bar(x + 0.2, g["filtered_recall_at_k_vs_exact"], 0.4, color=NEUTRAL[0], label="conversation filter (deployed)")
        axes[2].set_ylim(0, 1.05)
        axes[2].set_title("recall@10 vs exact")
        for ax in axes:
            ax.set_xticks(x, g["store"] + " / " + g["layout"], rotation=30, ha="right", fontsize=8)
            ax.legend(fontsize=7)
        fig.suptitle(f"{n:,} memories x {dim}-d (clustered synthetic)")
        p = out / f"scale_{n}_{dim}.png"
        write_atomic(p, lambda t: fig.savefig(t, format="png", dpi=100, bbox_inches="tight"))
        plt.close(fig)
        paths.append(p)
    return paths


def _md(df: pd.DataFrame, cols: list[str]) -> str:
    cols = [c for c in cols if c in df]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        cells = []
        for c in cols:
            v = r[c]
            cells.append("" if v is None or (isinstance(v, float) and np.isnan(v)) else (f"{v:.3f}" if isinstance(v, float) else str(v)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_user_lines(args, stores: list[str], *, out: Path, workdir: Path, overrides: dict) -> list[str]:
    """The per-user part (``bench.tools.peruser``): its table to ``per_user.csv`` (rewritten after each store) and its
    README lines."""
    from bench.tools import peruser
    from bench.tools.perf.common import REPO

    names = [s for s in peruser.STORES if s in stores or s == "exact"]
    cache = Path(args.per_user_cache) if args.per_user_cache else REPO / "reports" / "cache"
    data, label, kind = peruser.corpus_data([f"dataset={args.per_user_data}", "embedder=minilm", "memory.unit=turn", "memory.roles=all"],
                                            cache=cache, users=args.per_user_users)
    df = peruser.per_user_part(names, data, kind=kind, workdir=workdir, k=args.k, warmup=args.warmup, overrides=overrides,
                               progress=args.progress, max_open=args.max_open,
                               layouts=tuple(check_layout(x) for x in args.per_user_layouts.split(",") if x),
                               on_row=lambda d: write_atomic(out / "per_user.csv", lambda p: d.to_csv(p, index=False)))
    write_atomic(out / "per_user.csv", lambda p: df.to_csv(p, index=False))
    return [f"## Per user ({label})", "",
            f"A collection, table or file per user (`per_conversation` layout; `shared`: one collection, filtered by user; "
            f"seekdb runs `shared` unless `--per-user-layouts` says otherwise: its collection's indexed conversation "
            f"column reads a user's rows through that index); "
            f"each question asked once in its user's collection, "
            f"top-{args.k}. `fidelity_at_k`: share of the exact top-{args.k} of the user's rows returned (ties with the "
            f"{args.k}th count); `ingest_rows_per_s`: rows / the store's add calls (collections created there); p50/p99: the "
            "store call; `peak_rss_gb` / `max_open_fds`: this process and its children (an embedded seekdb server), "
            "`rss_added_gb` over what the process held before the store; `max_open`: the bound on open collections "
            "(`all`: the store keeps every one, bench/backends/layout.py says why), `reopened`: reopens it cost. "
            f"`vectors`: {kind}.", "", _md(df, list(df.columns)), ""]


def main(argv: list[str] | None = None) -> int:
    ap = parser("stores", "Every local store, and Pinecone via its loopback double (quality only), side by side, on LoCoMo and on "
                "synthetic data at the seed's scale -> reports/compare/.",
                examples=["recallbench stores --sizes 2000 --dims 384 --queries 50 --no-locomo   # a quick look",
                          "BENCH_DATA_DIR=~/corpora recallbench stores                # full scale (tens of minutes)"])
    ap.add_argument("--stores", default=None,
                    help="comma-separated configs/backend names (default: all; cloud stores are skipped with the reason)")
    ap.add_argument("--sizes", default="14726,100000")
    ap.add_argument("--dims", default="384,1536")
    ap.add_argument("--queries", type=int, default=200,
                    help="queries per search pass (default 200); the per-conversation layout's unfiltered pass asks every collection per query")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--layouts", default=",".join(LAYOUTS),
                    help=f"comma-separated store layouts (default {','.join(LAYOUTS)}; bench.backends.layout)")
    ap.add_argument("--locomo-args", default="",
                    help="extra sweep overrides for the LoCoMo part, space-separated (e.g. 'trace_cache=false')")
    ap.add_argument("--pinecone-loopback", action=argparse.BooleanOptionalAction, default=True,
                    help="run Pinecone against its loopback protocol double (127.0.0.1, a dummy key): quality only, the latency "
                         "is the double's, not Pinecone's (default on; --no-pinecone-loopback skips Pinecone)")
    ap.add_argument("--no-locomo", action="store_true", help="skip the LoCoMo part")
    ap.add_argument("--no-scale", action="store_true", help="skip the synthetic scale part")
    ap.add_argument("--per-user", action="store_true",
                    help="also the per-user part (bench/tools/peruser.py): LongMemEval_S's 498 users, a collection each on "
                         "exact, sqlite_vec, lancedb and chroma, one with an indexed user column on seekdb (those of --stores): "
                         "ingest rows/s, p50/p99, fidelity@k against exact, peak RSS and open files")
    ap.add_argument("--per-user-data", default="longmemeval_s", help="the per-user part's corpus (default longmemeval_s)")
    ap.add_argument("--per-user-users", type=int, default=None, help="only the first N users of it (default: all)")
    ap.add_argument("--per-user-cache", default=None,
                    help="a paths.cache root whose embeddings/ hold the corpus's MiniLM turn vectors, only read (default: "
                         "reports/cache); a text missing there: synthetic vectors with the real per-user counts, said in the table")
    ap.add_argument("--per-user-layouts", default="",
                    help="the per-user part's layouts, for every store (default: each store's own, "
                         "bench.tools.peruser.USER_LAYOUT: per_conversation, but shared for seekdb; per_conversation,shared "
                         "runs both everywhere)")
    ap.add_argument("--max-open", type=int, default=None,
                    help="backend.max_open of the per-user part (default: the layout's, bench.backends.layout)")
    ap.add_argument("--out", default=str(reports_dir("compare")), help="default reports/compare")
    ap.add_argument("--progress", action=argparse.BooleanOptionalAction, default=sys.stderr.isatty())
    ap.add_argument("-v", "--verbose", action="store_true", help="also the store clients' own INFO lines (httpx, pyseekdb, ...)")
    args = ap.parse_args(argv)
    layouts = tuple(check_layout(x) for x in args.layouts.split(",") if x)
    setup_logging(verbose=args.verbose)
    asked = [s for s in args.stores.split(",") if s] if args.stores else store_names()
    loopback = tuple(n for n in asked if n in LOOPBACK_STORES) if args.pinecone_loopback else ()
    stores, skipped = split_runnable([n for n in asked if n not in loopback])
    for reason in skipped:
        log.warning("skipped %s", reason)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Store comparison", "", "Every store gets the same vectors, filters and queries. Latency is the store call only "
             "(top-10, warm-up discarded); the exact store is a numpy cosine scan of the same vectors in RAM.", ""]
    lines += [f"Skipped {r}." for r in skipped] + ([""] if skipped else [])
    if loopback:
        lines += [f"`{LOOPBACK_LABEL}`: the Pinecone adapter against its loopback protocol double on 127.0.0.1 "
                  "(bench/tools/harden/doubles.py): what it recalls is the adapter's (filters, layouts, protocol); its latency "
                  f"is a numpy scan in this process, not Pinecone's. Scale part: up to {LOOPBACK_MAX_N:,} memories. "
                  "`--no-pinecone-loopback` leaves it out.", ""]
    with tempfile.TemporaryDirectory(prefix="rb-compare-", ignore_cleanup_errors=True) as tmp, started_servers(stores, Path(tmp)) as servers:
        overrides = {name: info.overrides() for name, info in servers.items()}
        if not args.no_locomo:
            loc = locomo_part([*stores, *loopback], out=out, overrides=overrides, data_dir=os.environ.get("BENCH_DATA_DIR"),
                              layouts=layouts, extra=tuple(args.locomo_args.split()), loopback=loopback, verbose=args.verbose)
            write_atomic(out / "locomo.csv", lambda p: loc.to_csv(p, index=False))
            lines += ["## LoCoMo (MiniLM int8, depth = every eligible memory, strategies limit5 / threshold / hybrid5)", "",
                      "Each row names its layout (compare rows of one layout) and where its latency was measured "
                      "(`latency_origin`; fresh unless `--locomo-args` turns the caches back on).", "",
                      _md(loc, list(loc.columns)), ""]
        if not args.no_scale:
            scale = scale_part([*stores, *loopback], [int(x) for x in args.sizes.split(",")], [int(x) for x in args.dims.split(",")],
                               n_queries=args.queries, k=args.k, warmup=args.warmup, workdir=Path(tmp),
                               overrides=overrides, progress=args.progress, layouts=layouts, loopback=loopback)
            write_atomic(out / "scale.csv", lambda p: scale.to_csv(p, index=False))
            cols = ["store", "layout", "n", "dim", "ingest_s", "ingest_rows_per_s", "read_after_write_lag_s", "p50_ms", "p99_ms",
                    "p50_ms_ratio_to_exact", "p99_ms_ratio_to_exact", "filtered_p50_ms", "filtered_p99_ms",
                    "filtered_p50_ms_ratio_to_exact",
                    "recall_at_k_vs_exact", "filtered_recall_at_k_vs_exact", "short_lists", "filtered_short_lists", "index_mb",
                    "error"]
            lines += ["## Scale (clustered synthetic vectors)", "", _md(scale, cols), "",
                      "Quoted from the seed article, not measured here:", "", _md(pd.DataFrame(QUOTED), ["store", "n", "dim", "p50_ms", "p99_ms"]), ""]
            lines += ["Figures: latency of the query each layout deploys, scoped to one conversation (`filtered_p50_ms`, "
                      "`filtered_p99_ms`): a filter on the shared layout, one small collection on the per-conversation layout. "
                      "`p50_ms` / `p99_ms` in the table are the unfiltered search, which on the per-conversation layout fans "
                      "out over every collection (no memory query does that).", ""]
            lines += [f"![{p.stem}]({p.name})" for p in plot(scale, out)]
        if args.per_user:
            lines += per_user_lines(args, [*stores, *loopback], out=out, workdir=Path(tmp), overrides=overrides)
    write_atomic(out / "README.md", lambda p: p.write_text("\n".join(lines) + "\n"))
    print(out / "README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(entry(main))
