"""Live replay tables (``replay: live``, ``bench.replay.live``): from a live trace, its record and the ordinary batch trace.

Written by the job into ``live/`` of its directory, one CSV per table, one row per (dataset, embedder, store,
indexed_roles, role_filter, ...): ``indexed_roles`` the roles the store holds (the run's ``memory.roles``: ``all`` or
``user``; every memory count is of these), ``role_filter`` the roles the questions' searches are filtered to (``none``).

* ``writes.csv``: write latency per ``add`` call (``live_batch`` turns at most): p50/p99/mean/max ms from the stored ns;
* ``read_after_write.csv``: per question, the gold memories written before it (and visible to it), returned, and the
  read-after-write misses (written, visible, ranked within the search depth by the exact scan of what was written,
  not returned by the store: visible but not yet searchable, or lost by an approximate index), their ids;
* ``summary.csv``: per store, those misses over every question (``miss_rate`` = misses / gold memories written);
* ``recall.csv``: recall_any@k and recall_all@k (``bench.metrics.ranked``) on the scored questions: ``batch`` (the
  ordinary trace: everything ingested, ``wait_ready``, then asked), ``live`` (asked at its time, no wait) and
  ``live_exact`` (the exact scan of what was written before the question: what a synchronous exact store returns);
* ``growth.csv``: by the number of memories of the question's user (conversation) in the store when it was asked
  (every indexed memory, whatever the role filter), bucketed (``BUCKETS``): questions, live recall_any@k, p50/p99 search ms.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.metrics.ranked import from_ranks, gold_ranks
from bench.output import write_csv

FOLDER = "live"
TABLES = ("writes", "read_after_write", "summary", "recall", "growth")
BUCKETS = (0, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000)  # lower edges of the memory-count buckets


def _keys(trace, memory) -> dict:
    m = trace.meta
    return {"dataset": m.get("dataset"), "embedder": m.get("embedder"), "backend": m.get("backend"),
            "indexed_roles": str((memory or {}).get("roles") or "all"), "role_filter": "+".join(m.get("roles") or []) or "none",
            "live_batch": m.get("live_batch"),
            "live_pace_ms": m.get("live_pace_ms", 0.0)}


def _pct(ns: np.ndarray, q: float) -> float:
    return float(np.percentile(ns, q)) / 1e6 if len(ns) else float("nan")


def bucket_of(n: int) -> tuple[int, int | None]:
    """(lower, upper) edge of the bucket holding ``n`` memories (upper None: the last, open bucket)."""
    i = int(np.searchsorted(BUCKETS, n, side="right")) - 1
    return BUCKETS[i], BUCKETS[i + 1] if i + 1 < len(BUCKETS) else None


def live_tables(trace, record, batch, corpus, *, ks=(1, 3, 5, 10), memory=None) -> dict[str, pd.DataFrame]:
    """Every live table of one live trace (TABLES), ``batch`` the ordinary trace of the same questions (same order);
    ``memory``: the run's memory spec (meta.json ``memory``: its ``roles`` are the indexed roles; None: every role)."""
    keys = _keys(trace, memory)
    ns = record.writes["add_ns"].to_numpy(dtype=np.float64)
    rows = int(record.writes["rows"].sum())
    writes = pd.DataFrame([{**keys, "writes": len(ns), "rows": rows, "write_p50_ms": _pct(ns, 50), "write_p99_ms": _pct(ns, 99),
                            "write_mean_ms": float(ns.mean()) / 1e6 if len(ns) else float("nan"),
                            "write_max_ms": float(ns.max()) / 1e6 if len(ns) else float("nan"),
                            "rows_per_second": rows / (ns.sum() / 1e9) if ns.sum() else float("nan")}])
    q = record.questions
    raw = pd.DataFrame({**{k: [v] * len(q) for k, v in keys.items()}, "question_id": q["question_id"],
                        "conversation_id": q["conversation_id"], "order": q["order"], "rule": q["rule"],
                        "user_memories": q["user_memories"], "n_gold": q["n_gold"], "gold_written": q["gold_written"],
                        "gold_returned": q["gold_returned"], "raw_misses": q["raw_misses"],
                        "raw_miss_ids": [";".join(x) for x in q["raw_miss_ids"]]})
    written = int(q["gold_written"].sum())
    summary = pd.DataFrame([{**keys, "questions": len(q), "questions_gold_written": int((q["gold_written"] > 0).sum()),
                             "gold_written": written, "raw_misses": int(q["raw_misses"].sum()),
                             "questions_with_miss": int((q["raw_misses"] > 0).sum()),
                             "miss_rate": q["raw_misses"].sum() / written if written else float("nan"),
                             "depth": trace.meta.get("depth"), "asked_at_rule": trace.meta.get("asked_at_rule")}])
    per_q = _per_question(trace, batch, corpus, ks)
    recall = []
    for k in ks:
        for metric in ("recall_any", "recall_all"):
            cols = {src: per_q[(src, metric, k)] for src in ("batch", "live", "live_exact")}
            ok = ~np.isnan(cols["live"])
            recall.append({**keys, "metric": metric, "k": k, "n_questions": int(ok.sum()),
                           **{src: float(np.mean(v[ok])) if ok.any() else float("nan") for src, v in cols.items()}})
    recall = pd.DataFrame(recall)
    recall["live_minus_batch"] = recall["live"] - recall["batch"]
    lat = trace.table["latency_ns"].to_numpy(dtype=np.float64)
    sizes = q["user_memories"].to_numpy()
    edges = np.array([bucket_of(int(n))[0] for n in sizes])
    growth = []
    for lo in sorted(set(edges.tolist())):
        inb = edges == lo
        hi = bucket_of(lo)[1]
        for k in ks:
            v = per_q[("live", "recall_any", k)][inb]
            v = v[~np.isnan(v)]
            growth.append({**keys, "memories_from": lo, "memories_to": hi, "questions": int(inb.sum()),
                           "median_memories": float(np.median(sizes[inb])), "k": k, "scored": len(v),
                           "recall_any": float(v.mean()) if len(v) else float("nan"),
                           "search_p50_ms": _pct(lat[inb], 50), "search_p99_ms": _pct(lat[inb], 99)})
    return {"writes": writes, "read_after_write": raw, "summary": summary, "recall": recall, "growth": pd.DataFrame(growth)}


def _per_question(trace, batch, corpus, ks) -> dict[tuple[str, str, int], np.ndarray]:
    """{(source, metric, k): per question value (NaN: not scored)}; sources batch, live, live_exact."""
    out: dict = {(src, metric, k): np.full(len(corpus.questions), np.nan) for src in ("batch", "live", "live_exact")
                 for metric in ("recall_any", "recall_all") for k in ks}
    live_t, batch_t = trace.table, batch.table
    if batch_t["question_id"].tolist() != live_t["question_id"].tolist():
        raise ValueError("live tables: the batch trace holds other questions than the live trace")
    for qi, q in enumerate(corpus.questions):
        gold = [f"{q.conversation_id}|{e}" for e in dict.fromkeys(q.scored_evidence)]
        n = len(gold)
        exact = dict(zip(live_t["gold_ids"].iloc[qi], live_t["gold_exact_ranks"].iloc[qi]))
        ranks = {"batch": gold_ranks(ranked=list(batch_t["hit_ids"].iloc[qi]), gold=gold),
                 "live": gold_ranks(ranked=list(live_t["hit_ids"].iloc[qi]), gold=gold),
                 "live_exact": sorted(int(exact[g]) for g in gold if int(exact.get(g, 0)) > 0)}
        for src, r in ranks.items():
            vals = from_ranks(ranks=r, n_gold=n, ks=ks)
            for k in ks:
                for metric in ("recall_any", "recall_all"):
                    out[src, metric, k][qi] = vals[metric, k]
    return out


def concat(parts: list[dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    return {name: pd.concat([p[name] for p in parts], ignore_index=True) for name in TABLES}


def write(folder: Path, tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Each table as ``folder/<name>.csv``; returns the tables."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        write_csv(folder / f"{name}.csv", tables[name])
    return tables
