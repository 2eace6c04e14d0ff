"""End-to-end latency per query: query embedding + store search + building the injected text, beside the store alone.

How each part is measured (per query, never an amortised batch):

* **embed**: the embedder (the job's own, never its cache) is called with that one question's text
  (``embed_queries([text])``), timed with ``perf_counter_ns`` around the call. The trace's query vectors came
  from batched or cached calls, which say nothing per query, so a seeded sample of ``sample`` questions is
  re-embedded one by one after the trace (one untimed call first: model load, connection set-up); the other
  questions' embed time is NaN ("not measured"), never 0, and their end-to-end time is NaN too.
* **http** (HTTP embedders only): the wall time of the HTTP round trip of that call (the successful attempt,
  ``bench.embedders.endpoint.post_json``: connect, send, server work, read). The endpoint does not report its own
  compute time, so this is network + server; ``embed - http`` is the client's work (JSON, checks, normalising).
* **store**: the trace's ``latency_ns`` (the store call alone, ``bench.backends.session``).
* **format**: ``bench.selection.formats.render`` of the strategy's selection at the chosen threshold, in the
  first swept format, timed per question. The selection itself is the sweep's (vectorised over questions, not
  timed per query).

``end_to_end`` gives the tidy per-query table (``latency_e2e.csv``), ``summary`` the p50/p99 per part and which part
dominates (the largest median share of a query's end-to-end time).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from bench.embedders.base import embed_side
from bench.selection.formats import render
from bench.types import Corpus

FILE, SUMMARY_FILE = "latency_e2e.csv", "latency_e2e_summary.csv"
PARTS = ("embed", "http", "store", "format")
DEFAULT_SAMPLE = 32


def embed_times(embedder, texts: Sequence[str], *, sample: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(embed ns, http ns) per text: NaN where not sampled (and http NaN for an embedder without HTTP)."""
    from bench.embedders.http import HTTPEmbedder

    n = len(texts)
    embed, http = np.full(n, np.nan), np.full(n, np.nan)
    pick = np.sort(np.random.default_rng(seed).permutation(n)[: max(0, min(sample, n))])
    if not len(pick):
        return embed, http
    is_http = isinstance(embedder, HTTPEmbedder)
    shows = bool(getattr(embedder, "progress", False))  # its own progress line per call: timed, and one log line per question
    if shows:
        embedder.progress = False
    try:
        embed_side(embedder, "queries", [texts[int(pick[0])]])  # untimed: model load, connection set-up
        for i in pick.tolist():
            before = getattr(embedder, "post_seconds", 0.0) if is_http else 0.0  # bench.embedders.endpoint.post_json adds to it
            t0 = time.perf_counter_ns()
            embed_side(embedder, "queries", [texts[i]])
            embed[i] = time.perf_counter_ns() - t0
            if is_http:
                http[i] = (getattr(embedder, "post_seconds", 0.0) - before) * 1e9
    finally:
        if shows:
            embedder.progress = True
    return embed, http


def format_times(corpus: Corpus, chosen: Mapping[str, Sequence[str]], fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """(render ns, memories selected) per question (corpus order) for ``chosen``: question id -> selected memory keys."""
    turn = {t.key: t for t in corpus.turns()}
    qs = corpus.questions
    ns, n = np.full(len(qs), np.nan), np.zeros(len(qs), np.int64)
    for i, q in enumerate(qs):
        turns = [turn[k] for k in chosen.get(q.question_id, ()) if k in turn]
        t0 = time.perf_counter_ns()
        render(fmt, turns)
        ns[i] = time.perf_counter_ns() - t0
        n[i] = len(turns)
    return ns, n


def end_to_end(trace, corpus: Corpus, selections: Mapping[tuple[str, float | None], Mapping[str, Sequence[str]]], *,
               embed_ns: np.ndarray, http_ns: np.ndarray, fmt: str) -> pd.DataFrame:
    """One row per (strategy, question): the parts in ns and ``e2e_ns`` = embed + store + format (NaN when embed was
    not measured). ``selections``: (strategy, threshold) -> question id -> selected keys (the sweep's ``record``)."""
    store = dict(zip(trace.table["question_id"].tolist(), trace.table["latency_ns"].astype(float).tolist()))
    qids = [q.question_id for q in corpus.questions]
    store_ns = np.array([store.get(q, np.nan) for q in qids])
    parts = []
    for (strategy, threshold), chosen in selections.items():
        fmt_ns, n_sel = format_times(corpus, chosen, fmt)
        parts.append(pd.DataFrame({
            "dataset": trace.meta.get("dataset"), "embedder": trace.meta.get("embedder"), "backend": trace.meta.get("backend"),
            "strategy": strategy, "threshold": np.nan if threshold is None else float(threshold), "format": fmt,
            "question_id": qids, "n_selected": n_sel, "embed_measured": ~np.isnan(embed_ns), "embed_ns": embed_ns, "http_ns": http_ns,
            "store_ns": store_ns, "format_ns": fmt_ns, "e2e_ns": embed_ns + store_ns + fmt_ns}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, embedder, backend, strategy, threshold, format) and part (embed, http, store, format, e2e):
    n measured, p50/p99 in ms, the median share of e2e (over the questions whose embedding was measured) and
    ``dominant`` (the part among embed, store and format with the largest median share)."""
    keys = ["dataset", "embedder", "backend", "strategy", "threshold", "format"]
    out = []
    for key, g in table.groupby(keys, dropna=False, sort=False):
        measured = g[g["embed_measured"]]
        shares = {p: float(np.nanmedian(measured[f"{p}_ns"] / measured["e2e_ns"])) if len(measured) and measured[f"{p}_ns"].notna().any()
                  else np.nan for p in PARTS}
        main = {p: shares[p] for p in ("embed", "store", "format") if shares[p] == shares[p]}
        dominant = max(main, key=main.get) if main else ""
        for part in (*PARTS, "e2e"):
            v = g[f"{part}_ns"].to_numpy(dtype=float)
            v = v[~np.isnan(v)] / 1e6
            out.append({**dict(zip(keys, key)), "part": part, "n": len(v),
                        "p50_ms": float(np.percentile(v, 50)) if len(v) else np.nan,
                        "p99_ms": float(np.percentile(v, 99)) if len(v) else np.nan,
                        "share_of_e2e": shares.get(part, 1.0 if part == "e2e" and len(measured) else np.nan), "dominant": dominant})
    return pd.DataFrame(out)


def pick_threshold(grid: Sequence[float], want: float) -> float:
    """The value of ``grid`` nearest ``want`` (the first on a tie)."""
    return min(grid, key=lambda t: (abs(float(t) - want), float(t)))


def check_settings(node: Mapping | None) -> tuple[int, float]:
    """``e2e:`` of a config -> (sample, threshold); one line naming the field when bad."""
    node = dict(node or {})
    unknown = sorted(set(node) - {"sample", "threshold"})
    if unknown:
        raise ValueError(f"e2e: unknown field(s) {', '.join(unknown)} (known: sample, threshold)")
    sample, t = node.get("sample", DEFAULT_SAMPLE), node.get("threshold", 0.5)
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
        raise ValueError(f"e2e.sample: expected an integer >= 0 (got {sample!r})")
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ValueError(f"e2e.threshold: expected a number (got {t!r})")
    return sample, float(t)
