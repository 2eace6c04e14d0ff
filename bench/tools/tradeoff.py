"""``recallbench tradeoff``: index settings as sweep axes -- recall@k against the exact scan versus p50/p99 and QPS, per
store and setting, at filter selectivities from one user among many to none; the cheapest setting reaching a recall
target is marked.

The settings each store sweeps are declared in ``configs/tradeoff.yaml`` (build-time keys rebuild the index, the others
are search-time and search the same built store again). Every store gets the same vectors, in one shared collection
(the same layout for every store), the same queries and the same k; latency is timed in this command (fresh), the store
call alone (``bench.backends.session``), one client, sequential: QPS = queries / summed store time.
Selectivities: ``all`` (unfiltered, every memory) and ``user`` (a conversation filter: one user of N).
Truth: the exact top-k of the same vectors and filters (``bench.tools.stores.exact_truth``, a numpy scan), recall@k
and short lists as ``make stores`` counts them (``bench.tools.stores._recall`` / ``_short``).

Vector sets: ``locomo`` and ``longmemeval_s`` (a corpus's memories -- ``--unit``/``--roles`` -- and questions, embedded
by ``--embedder`` through the embedding cache: MiniLM by default; LongMemEval_S is 498 users, each question its own) and ``synthetic`` (clustered vectors of ``bench.tools.stores.synthetic``, ``--per-user``
memories per user: 490 is LongMemEval_S's haystack per question, 245,625 turns / 500).
Writes ``tradeoff.csv`` (tidy: one row per data set, selectivity, store and setting), ``README.md`` (tables) and
``tradeoff_<data>.png`` (recall vs p99, one panel per selectivity) to ``--out`` (default reports/tradeoff/).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import math
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from bench.backends.catalog import load_backend, split_runnable
from bench.backends.layout import LAYOUTS, SHARED, check_layout
from bench.backends.servers import started_servers
from bench.backends.session import INGEST_BATCH, open_session
from bench.cli.common import entry, parser, reports_dir, setup_logging
from bench.output import write_atomic
from bench.resources import configs_dir
from bench.tools.stores import _recall, _short, exact_truth, synthetic, synthetic_batches
from bench.types import Where

log = logging.getLogger("bench.tools.tradeoff")
TARGET = 0.99
SELECTIVITIES = ("all", "user")
DEFAULT_STORES = ("exact", "sqlite_vec", "lancedb", "pgvector", "qdrant", "chroma", "seekdb")


# ----------------------------------------------------------------------------- settings


def expand(spec: dict) -> list[dict]:
    """Every combination of a grid entry: a list value is an axis, the last list varies fastest."""
    keys = list(spec)
    axes = [spec[k] if isinstance(spec[k], list) else [spec[k]] for k in keys]
    return [dict(zip(keys, combo)) for combo in itertools.product(*axes)]


def tuning(name: str, *, quick: bool = False, path: Path | None = None) -> tuple[list[str], list[tuple[str, dict]]]:
    """(build-time keys, [(series label, overrides)] to sweep) of store ``name`` in ``configs/tradeoff.yaml``.
    A store listed without a grid (or not listed) is one point with its YAML's own settings."""
    path = path or configs_dir() / "tradeoff.yaml"
    node = (yaml.safe_load(path.read_text()) or {}).get("stores") or {}
    entry_ = node.get(name) or {}
    if not isinstance(entry_, dict):
        raise ValueError(f"{path}: stores.{name} must be a mapping (build, grid, quick)")
    grid = (entry_.get("quick") if quick else None) or entry_.get("grid") or [{}]
    out = []
    for i, spec in enumerate(grid):
        if not isinstance(spec, dict):
            raise ValueError(f"{path}: stores.{name}.{'quick' if quick else 'grid'}[{i}] must be a mapping of backend keys")
        lists = [k for k, v in spec.items() if isinstance(v, list)]
        fixed = [str(v) if k == "index" else f"{k}={v}" for k, v in spec.items() if not isinstance(v, list)]
        for setting in expand(spec):
            label = " ".join([name, *fixed, *(f"{k}={setting[k]}" for k in lists[:-1])])
            out.append((label, setting))
    return [str(k) for k in entry_.get("build") or []], out


def setting_text(setting: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in setting.items()) or "defaults"


COST = "mean_ms"  # what "cheapest" ranks by: the mean store time per query (1000 / QPS); p99 of a few hundred queries on
# shared cores is the third-slowest query, too noisy to rank settings whose recall is equal


def cheapest(rows: pd.DataFrame, *, target: float = TARGET, cost: str = COST) -> pd.Series:
    """Per row: True for the cheapest setting (lowest ``cost``, then p50) of its data set, selectivity and store whose
    recall reaches ``target``; False elsewhere (and everywhere in a group where none does; NaN recall never reaches)."""
    mark = pd.Series(False, index=rows.index)
    ok = rows[rows["recall_at_k"].ge(target) & rows[cost].notna()]
    for _, g in ok.groupby(["data", "selectivity", "store"], sort=False):
        mark[g.sort_values([cost, "p50_ms"], kind="stable").index[0]] = True
    return mark


# ----------------------------------------------------------------------------- data


CORPORA = ("locomo", "longmemeval_s")  # --data values read through the data path (BENCH_DATA_DIR)


def locomo_data(n_queries: int, *, seed: int = 0, overrides=("dataset=locomo", "embedder=minilm")):
    """The corpus's memory and question vectors from the embedding cache (``reports/cache/embeddings``), in the tuple
    ``bench.tools.stores.synthetic`` returns (ids are ``m<row>``); ``n_queries`` questions drawn with ``seed``.
    ``overrides`` pick the corpus, its memory units (``memory.unit``, ``memory.roles``) and the embedder."""
    from bench.tools.perf.common import REPO, cached_embedder
    from bench.replay.trace import embed_corpus

    corpus, emb = cached_embedder(list(overrides), REPO / "reports" / "cache" / "embeddings")
    tv, qv, _ = embed_corpus(corpus, emb)
    turns, questions = corpus.turns(), corpus.questions
    pick = np.sort(np.random.default_rng(seed).choice(len(questions), size=min(n_queries, len(questions)), replace=False))
    conv = np.array([t.conversation_id for t in turns], dtype=object)
    roles = np.array([t.role for t in turns], dtype=object)
    ts = np.array([float(t.timestamp or 0.0) for t in turns])
    return (np.ascontiguousarray(tv, dtype=np.float32), conv, roles, ts, np.ascontiguousarray(qv[pick], dtype=np.float32),
            [questions[i].conversation_id for i in pick]), f"{corpus.name} ({emb.model_id}, {len(turns):,} memories)"


def synthetic_data(n: int, dim: int, per_user: int, n_queries: int, *, seed: int = 0):
    users = max(1, n // per_user)
    return synthetic(n, dim, n_queries=n_queries, seed=seed, conversations=users), f"synthetic {n:,} x {dim}-d, {users} users"


# ----------------------------------------------------------------------------- measuring


def _stats(timed, truth, k: int) -> dict:
    lat = timed.latency_ns.astype(np.float64)
    got = [list(h.ids) for h in timed.hits]
    return {"recall_at_k": _recall(got, truth, k), "short_lists": _short(got, truth, k), "p50_ms": np.percentile(lat, 50) / 1e6,
            "p99_ms": np.percentile(lat, 99) / 1e6, "mean_ms": lat.mean() / 1e6,
            "qps": len(lat) / (lat.sum() / 1e9) if lat.sum() else math.nan}


def measure_store(name: str, data, *, data_label: str, k: int, warmup: int, stores_dir: Path, base: dict,
                  quick: bool, selectivities=SELECTIVITIES, progress: bool = False, layout: str = SHARED) -> list[dict]:
    """Rows of one store: per build (fresh ingest, in ``layout`` -- one shared collection, or one per user), per
    search-time setting (the built store searched again), per selectivity."""
    vecs, conv, roles, ts, qv, qconv = data
    n, dim = vecs.shape
    truth_all, truth_user = exact_truth(data, k)
    wheres = {"all": ([Where()] * len(qv), truth_all), "user": ([Where(conversation_id=c) for c in qconv], truth_user)}
    build_keys, settings = tuning(name, quick=quick)
    builds: dict[tuple, list[tuple[str, dict]]] = {}
    for label, s in settings:
        builds.setdefault(tuple((key, s[key]) for key in build_keys if key in s), []).append((label, s))
    users = len(set(conv.tolist()))
    rows = []
    for bkey, group in builds.items():
        collection = f"tradeoff_{n}_{dim}"
        first = {**base, **group[0][1], "layout": layout}
        row0 = {"data": data_label, "store": name, "layout": layout, "n": n, "dim": dim, "k": k, "queries": len(qv), "users": users}
        try:
            builder = load_backend(name, stores_dir=stores_dir, collection=collection, **first)
            with open_session(builder, dim=dim, fresh=True) as s:
                ing = s.ingest(synthetic_batches(vecs, conv, roles, ts, INGEST_BATCH), total=-(-n // INGEST_BATCH), progress=progress)
                build_s = ing.add_seconds + ing.ready_seconds
                for i, (label, setting) in enumerate(group):
                    log.info("tradeoff: %s %s on %s", name, setting_text(setting), data_label)
                    # the first setting is the builder's own; the others attach to the built collection (a store in RAM
                    # -- exact -- has nothing to attach to: its settings must all be build-time)
                    searcher = builder if i == 0 else load_backend(name, stores_dir=stores_dir, collection=collection,
                                                                   **{**base, **setting, "layout": layout})
                    with nullcontext(s) if i == 0 else open_session(searcher, dim=dim, drop=False) as t:
                        for sel in selectivities:
                            w, truth = wheres[sel]
                            timed = t.search_all(qv, w, k=k, warmup=warmup)
                            rows.append({**row0, "series": label, "setting": setting_text(setting), "selectivity": sel,
                                         "build_s": build_s, **_stats(timed, truth, k)})
        except Exception as exc:  # a store that fails is reported, the others still run
            log.error("tradeoff: %s %s failed: %s", name, dict(bkey), exc)
            rows.append({**row0, "series": group[0][0], "setting": setting_text(group[0][1]), "selectivity": "",
                         "error": f"{type(exc).__name__}: {exc}"[:300]})
    return rows


# ----------------------------------------------------------------------------- output


def selectivity_text(sel: str, users: int, layout: str = SHARED) -> str:
    if layout == SHARED:
        return "all memories (unfiltered)" if sel == "all" else f"one user of {users} (conversation filter)"
    return f"all memories (fan-out over {users} collections)" if sel == "all" else f"one user of {users} (its own collection)"


def plot(df: pd.DataFrame, out: Path, *, target: float) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    ok = df[df["recall_at_k"].notna()] if "recall_at_k" in df else df.iloc[0:0]
    stores = list(dict.fromkeys(ok["store"]))
    colours = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(stores)}
    styles = ["-", "--", ":", "-."]
    done: set[str] = set()
    for n_data, (data, d) in enumerate(ok.groupby("data", sort=False)):
        sels = list(dict.fromkeys(d["selectivity"]))
        fig, axes = plt.subplots(1, len(sels), figsize=(7 * len(sels), 5), squeeze=False)
        for ax, sel in zip(axes[0], sels):
            g = d[d["selectivity"] == sel]
            for store, gs in g.groupby("store", sort=False):
                for j, (series, line) in enumerate(gs.groupby("series", sort=False)):  # in grid order: along its last axis
                    ax.plot(line["p99_ms"], line["recall_at_k"], styles[j % len(styles)], marker="osv^D"[j % 5], ms=4,
                            color=colours[store], label=series)
            best = g[g["cheapest"]]
            ax.scatter(best["p99_ms"], best["recall_at_k"], s=160, facecolors="none", edgecolors="black", linewidths=1.5,
                       zorder=5, label=f"cheapest reaching {target:g}")
            ax.axhline(target, color="grey", lw=0.8, ls=":")
            ax.set_xscale("log")
            ax.set_xlabel("p99 latency per query, ms (log)")
            ax.set_ylabel(f"recall@{int(g['k'].iloc[0])} vs exact")
            ax.set_title(selectivity_text(sel, int(g["users"].iloc[0]), str(g["layout"].iloc[0])), fontsize=10)
            ax.grid(alpha=0.3)
        handles, labels = axes[0][0].get_legend_handles_labels()
        for ax in axes[0][1:]:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, bbox_to_anchor=(0.5, -0.02 - 0.03 * (len(labels) // 3)))
        fig.suptitle(f"recall vs p99 latency: {data}")
        slug = "".join(c for c in data.split(" ")[0] if c.isalnum() or c in "_-")[:40] or "data"
        p = out / (f"tradeoff_{slug}.png" if n_data == 0 or slug not in done else f"tradeoff_{slug}_{n_data}.png")
        done.add(slug)
        write_atomic(p, lambda t: fig.savefig(t, format="png", dpi=100, bbox_inches="tight"))
        plt.close(fig)
        paths.append(p)
    return paths


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "**yes**" if v else ""
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v).replace("|", "\\|")


def md_table(df: pd.DataFrame, cols: list[str]) -> str:
    cols = [c for c in cols if c in df]
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
                      *("| " + " | ".join(_cell(r[c]) for c in cols) + " |" for _, r in df.iterrows())])


def reaching(df: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per data set, selectivity and store: the cheapest setting reaching ``target``, or the best recall it got."""
    out = []
    ok = df[df["recall_at_k"].notna()]
    for (data, sel, store), g in ok.groupby(["data", "selectivity", "store"], sort=False):
        hit = g[g["cheapest"]]
        if len(hit):
            r = hit.iloc[0]
            out.append({"data": data, "selectivity": sel, "store": store, f"cheapest setting reaching {target:g}": r["setting"],
                        "recall_at_k": r["recall_at_k"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "qps": r["qps"]})
        else:
            r = g.sort_values("recall_at_k", ascending=False).iloc[0]
            out.append({"data": data, "selectivity": sel, "store": store,
                        f"cheapest setting reaching {target:g}": f"none (best: {r['setting']})", "recall_at_k": r["recall_at_k"],
                        "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "qps": r["qps"]})
    return pd.DataFrame(out)


def report(df: pd.DataFrame, out: Path, *, target: float, command: str) -> Path:
    lines = ["# Recall against latency per store and index setting", "",
             f"Command: `{command}`", "",
             f"Every store: the same vectors in the same layout (`{', '.join(dict.fromkeys(df.get('layout', pd.Series([SHARED]))))}`: "
             "`shared` is one collection filtered by user, `per_conversation` a collection per user), the same queries and k, latency "
             "timed in this command (fresh), the store call alone, warm-up discarded, one client, sequential "
             "(QPS = queries / summed store time). recall@k: the store's top-k against the exact top-k of the same vectors "
             "and filter (numpy scan). short_lists: queries answered with fewer hits than the exact top-k holds. "
             f"**yes** under `cheapest`: the setting of that store with the lowest mean store time (the highest QPS) reaching "
             f"recall {target:g} (p99 of a few hundred queries on shared cores is too noisy to rank settings by). Settings per store: "
             "configs/tradeoff.yaml (exact, sqlite_vec and lancedb expose none: exact scans).", ""]
    if "error" in df and df["error"].notna().any():
        lines += ["Failed:", "", *(f"- {r['store']} {r['setting']}: {r['error']}" for _, r in df[df["error"].notna()].iterrows()), ""]
    ok = df[df["recall_at_k"].notna()] if "recall_at_k" in df else df.iloc[0:0]
    if len(ok):
        lines += [f"## Settings reaching recall {target:g}", "", md_table(reaching(ok, target), [
            "data", "selectivity", "store", f"cheapest setting reaching {target:g}", "recall_at_k", "p50_ms", "p99_ms", "qps"]), ""]
    for p in plot(df, out, target=target):
        lines += [f"![{p.stem}]({p.name})", ""]
    for (data, sel), g in ok.groupby(["data", "selectivity"], sort=False):
        lines += [f"## {data}: {selectivity_text(sel, int(g['users'].iloc[0]), str(g['layout'].iloc[0]))}", "",
                  md_table(g, ["store", "setting", "recall_at_k", "short_lists", "p50_ms", "p99_ms", "mean_ms", "qps", "build_s", "cheapest"]), ""]
    return write_atomic(out / "README.md", lambda p: p.write_text("\n".join(lines) + "\n"))


def main(argv: list[str] | None = None) -> int:
    ap = parser("tradeoff", "Index settings as sweep axes: recall@k against exact vs p50/p99 and QPS per store and setting, "
                "unfiltered and one user of many; the cheapest setting reaching the recall target marked -> reports/tradeoff/.",
                examples=["recallbench tradeoff --data synthetic --size 2000 --quick --stores exact,sqlite_vec,qdrant",
                          "BENCH_DATA_DIR=~/corpora recallbench tradeoff --data locomo,synthetic --size 20000   # full curves"])
    ap.add_argument("--stores", default=",".join(DEFAULT_STORES), help="comma-separated configs/backend names")
    ap.add_argument("--data", default="locomo,synthetic",
                    help="locomo and/or longmemeval_s (a corpus's cached embeddings: 498 users, one per question) and/or synthetic")
    ap.add_argument("--embedder", default="minilm", help="configs/embedder name for a corpus (default minilm)")
    ap.add_argument("--unit", default="turn", help="a corpus's memory unit: turn (default), session or chunk (memory.unit)")
    ap.add_argument("--roles", default="all", help="a corpus's indexed roles: all (default) or user (memory.roles)")
    ap.add_argument("--size", type=int, default=20_000, help="synthetic memories (default 20,000)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--per-user", type=int, default=490, help="synthetic memories per user (LongMemEval_S: 490 per question)")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--target", type=float, default=TARGET, help="recall the cheapest setting must reach (default 0.99)")
    ap.add_argument("--quick", action="store_true", help="each store's small `quick` grid (configs/tradeoff.yaml)")
    ap.add_argument("--layout", default=SHARED, choices=LAYOUTS,
                    help="every store in one shared collection filtered by user (default), or a collection per user "
                         "(per_conversation: a user's query reads its own collection; `all` fans out over every one)")
    ap.add_argument("--selectivities", default=",".join(SELECTIVITIES), help="all (unfiltered) and/or user (one user of N)")
    ap.add_argument("--out", default=str(reports_dir("tradeoff")), help="default reports/tradeoff")
    ap.add_argument("--progress", action=argparse.BooleanOptionalAction, default=sys.stderr.isatty())
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    setup_logging(verbose=args.verbose)
    if not 0 < args.target <= 1:
        raise ValueError(f"--target must be within (0, 1] (got {args.target})")
    sels = tuple(s for s in args.selectivities.split(",") if s)
    bad = [s for s in sels if s not in SELECTIVITIES]
    if bad:
        raise ValueError(f"--selectivities: unknown {', '.join(bad)} (known: {', '.join(SELECTIVITIES)})")
    stores, skipped = split_runnable([s for s in args.stores.split(",") if s])
    for reason in skipped:
        log.warning("skipped %s", reason)
    sets = []
    for d in (x for x in args.data.split(",") if x):
        if d in CORPORA:
            sets.append(locomo_data(args.queries, overrides=(f"dataset={d}", f"embedder={args.embedder}",
                                                             f"memory.unit={args.unit}", f"memory.roles={args.roles}")))
        elif d == "synthetic":
            sets.append(synthetic_data(args.size, args.dim, args.per_user, args.queries))
        else:
            raise ValueError(f"--data: unknown {d!r} (known: {', '.join(CORPORA)}, synthetic)")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rb-tradeoff-", ignore_cleanup_errors=True) as tmp, \
            started_servers(stores, Path(tmp)) as servers:
        for data, label in sets:
            for name in stores:
                base = servers[name].overrides() if name in servers else {}
                shown = label if args.layout == SHARED else f"{label}, a collection per user"
                rows += measure_store(name, data, data_label=shown, k=args.k, warmup=args.warmup, stores_dir=Path(tmp) / "stores",
                                      base=base, quick=args.quick, selectivities=sels, progress=args.progress,
                                      layout=check_layout(args.layout))
    df = pd.DataFrame(rows)
    if "recall_at_k" not in df:
        df["recall_at_k"] = np.nan
    for col in ("p50_ms", "p99_ms", COST, "error"):
        if col not in df:
            df[col] = np.nan
    df["cheapest"] = cheapest(df, target=args.target)
    df["target"] = args.target
    write_atomic(out / "tradeoff.csv", lambda p: df.to_csv(p, index=False))
    command = "recallbench tradeoff " + " ".join(argv if argv is not None else sys.argv[1:])
    path = report(df, out, target=args.target, command=command.strip())
    log.info("tradeoff: %d rows in %.0f s", len(df), time.perf_counter() - t0)
    print(path)
    return 0 if df["error"].isna().all() else 1


if __name__ == "__main__":
    raise SystemExit(entry(main))
