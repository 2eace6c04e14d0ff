"""Degradation, as post-processing of the sweep's per-question rows ("query once, sweep offline"): what recall and
injected tokens are kept when the store is too slow (a per-query timeout policy) or fails (injected faults).

* **Timeout** ``T`` ms: a query whose stored store latency (the trace's ``latency_ns``, the store call alone) is above
  ``T`` counts as timed out. Nothing is re-queried: every ``T`` is read off the same trace.
* **Faults**: the questions the trace's injected faults failed (``bench.replay.faults``, ``meta["faults"]``); their
  rows already hold the empty result the store gave.

A failed question gets, by ``policy``: ``empty`` (nothing injected) or ``last_k`` (the last ``fallback_k`` memories
the question may see, in conversation order: ``last_visible``, by ``bench.replay.visibility``'s rule, under the
trace's role filter). Only strategies that read the store (finite ``latency_ns``) are degraded.

``degradation_table`` writes one row per (strategy, threshold, format, cause, timeout_ms, policy): ``n_questions``
(scored), ``failed_share`` (every question of the row), ``recall`` and ``tokens_injected_mean`` (means over scored
questions, as the summary's), and ``recall_kept`` / ``tokens_kept``: their ratio to the same strategy without a
timeout (the as-measured rows: for faults, the faulted trace itself, so faults are compared with a clean run by
running without them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from bench import metrics
from bench.replay.visibility import Visibility
from bench.types import Corpus, Question, memory_key

POLICIES = ("empty", "last_k")
DEFAULT_TIMEOUTS_MS = (0.5, 1.0, 2.0, 5.0, 10.0, 50.0)
KEYS = ["dataset", "embedder", "backend", "strategy", "threshold", "format"]
FILE = "degradation.csv"


def last_visible(vis: Visibility, q: Question, *, k: int, roles: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Keys of the last ``k`` memories ``q`` may see (conversation order), the fallback when the store fails."""
    if k <= 0:
        return ()
    return tuple(str(x) for x in vis.visible_keys(q, roles)[-k:])


def fallback(corpus: Corpus, *, k: int, roles, cost, formats: Sequence[str], metadata=None) -> pd.DataFrame:
    """Per question: the fallback's size, its gold memories and its tokens per format (``cost(fmt, keys)``); ``metadata``:
    the trace's metadata filter (the fallback sees what the search could)."""
    vis = Visibility(corpus, metadata)
    out = []
    for q in corpus.questions:
        keys = last_visible(vis, q, k=k, roles=roles)
        gold = {memory_key(q.conversation_id, e) for e in q.scored_evidence}
        out += [{"question_id": q.question_id, "format": f, "fb_selected": len(keys), "fb_correct": len(gold.intersection(keys)),
                 "fb_tokens": cost(f, list(keys))} for f in formats]
    return pd.DataFrame(out, columns=["question_id", "format", "fb_selected", "fb_correct", "fb_tokens"])


def apply_policy(rows: pd.DataFrame, failed: np.ndarray, policy: str, fb: pd.DataFrame | None = None) -> pd.DataFrame:
    """``rows`` with the ``failed`` ones (boolean per row) given nothing (``empty``) or the fallback (``last_k``:
    ``fb`` from ``fallback``); n_selected, n_correct, precision, recall, f1, hit, empty and tokens_injected recomputed."""
    if policy not in POLICIES:
        raise ValueError(f"degrade: policy must be one of {', '.join(POLICIES)} (got {policy!r})")
    out = rows.copy()
    failed = np.asarray(failed, dtype=bool)
    if policy == "empty":
        sel, cor, tok = np.zeros(len(out), np.int64), np.zeros(len(out), np.int64), np.zeros(len(out), np.int64)
    else:
        m = out[["question_id", "format"]].merge(fb, on=["question_id", "format"], how="left")
        sel, cor, tok = (m[c].fillna(0).to_numpy(np.int64) for c in ("fb_selected", "fb_correct", "fb_tokens"))
    out["n_selected"] = np.where(failed, sel, out["n_selected"].to_numpy())
    out["n_correct"] = np.where(failed, cor, out["n_correct"].to_numpy())
    out["tokens_injected"] = np.where(failed, tok, out["tokens_injected"].to_numpy())
    p, r, f1 = metrics.prf(out["n_selected"], out["n_correct"], out["n_gold"])
    out["precision"], out["recall"], out["f1"] = p, r, f1
    n_gold = out["n_gold"].to_numpy()
    out["hit"] = np.where(n_gold > 0, (out["n_correct"].to_numpy() > 0).astype(float), np.nan)
    out["empty"] = (out["n_selected"].to_numpy() == 0).astype(float)
    return out


def _summary(rows: pd.DataFrame, failed: np.ndarray, keys: list[str]) -> pd.DataFrame:
    scored = metrics.scored(rows).to_numpy()
    df = rows[keys].copy()
    df["_failed"] = np.asarray(failed, dtype=float)
    df["_recall"] = np.where(scored, rows["recall"].to_numpy(dtype=float), np.nan)
    df["_tokens"] = np.where(scored, rows["tokens_injected"].to_numpy(dtype=float), np.nan)
    df["_scored"] = scored.astype(int)
    g = df.groupby(keys, dropna=False, sort=False)
    return pd.DataFrame({"n_questions": g["_scored"].sum(), "failed_share": g["_failed"].mean(), "recall": g["_recall"].mean(),
                         "tokens_injected_mean": g["_tokens"].mean()}).reset_index()


def degradation_table(rows: pd.DataFrame, corpus: Corpus, *, cost, roles=None, timeouts_ms: Sequence[float] = DEFAULT_TIMEOUTS_MS,
                      fallback_k: int = 5, failed_ids: frozenset[str] = frozenset(), metadata=None) -> pd.DataFrame:
    """The degradation table (module docstring) of one trace's sweep ``rows``; ``failed_ids``: the questions its
    injected faults failed; ``cost(fmt, keys)``: tokens of a selection (``bench.selection.formats``)."""
    rows = rows[np.isfinite(rows["latency_ns"].to_numpy(dtype=float))].reset_index(drop=True)
    keys = [k for k in KEYS if k in rows]
    cols = keys + ["cause", "timeout_ms", "policy", "fallback_k", "n_questions", "failed_share", "recall", "tokens_injected_mean",
                   "recall_kept", "tokens_kept"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    fb = fallback(corpus, k=fallback_k, roles=roles, cost=cost, formats=sorted(rows["format"].unique()), metadata=metadata)
    base = _summary(rows, np.zeros(len(rows), bool), keys)
    cases = [("none", np.nan, np.zeros(len(rows), bool))]
    lat = rows["latency_ns"].to_numpy(dtype=float)
    cases += [("timeout", float(t), lat > float(t) * 1e6) for t in timeouts_ms]
    if failed_ids:
        cases.append(("fault", np.nan, rows["question_id"].isin(failed_ids).to_numpy()))
    parts = []
    for cause, t, failed in cases:
        for policy in POLICIES if cause != "none" else ("empty",):
            s = _summary(apply_policy(rows, failed, policy, fb), failed, keys)
            s["cause"], s["timeout_ms"], s["policy"], s["fallback_k"] = cause, t, policy, fallback_k if policy == "last_k" else 0
            with np.errstate(divide="ignore", invalid="ignore"):  # a ratio to nothing is undefined (NaN), never inf
                for col, of in (("recall_kept", "recall"), ("tokens_kept", "tokens_injected_mean")):
                    b = base[of].to_numpy(dtype=float)
                    s[col] = np.where(b > 0, s[of].to_numpy(dtype=float) / np.where(b > 0, b, 1.0), np.nan)
            parts.append(s)
    return pd.concat(parts, ignore_index=True)[cols]


def check_settings(node: Mapping | None) -> tuple[tuple[float, ...], int]:
    """``degrade:`` of a config -> (timeouts in ms, fallback k); one line naming the field when bad."""
    node = dict(node or {})
    unknown = sorted(set(node) - {"timeouts_ms", "fallback_k"})
    if unknown:
        raise ValueError(f"degrade: unknown field(s) {', '.join(unknown)} (known: fallback_k, timeouts_ms)")
    ts = node.get("timeouts_ms", DEFAULT_TIMEOUTS_MS)
    if not isinstance(ts, (list, tuple)) or any(isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0 for t in ts):
        raise ValueError(f"degrade.timeouts_ms: expected a list of numbers >= 0 (got {ts!r})")
    k = node.get("fallback_k", 5)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"degrade.fallback_k: expected an integer >= 0 (got {k!r})")
    return tuple(float(t) for t in ts), k
