"""Ranked retrieval metrics from the trace: recall_any@k, recall_all@k, nDCG@k and MRR, per turn and per session.

Each question is searched once with a generous depth; the trace keeps the store's ranked hits and the
question's gold memory keys. These metrics read that ranking directly (no threshold, no strategy): how
good is the store's order, as LongMemEval and the IR literature measure it. Pure functions, no I/O.

Definitions (binary relevance; ``gold`` = the question's distinct gold memories, all of them, also those
the question may not see (said later, another role), exactly as the set recall's denominator):

- ``recall_any@k`` = 1 when at least one gold item is in the top k, else 0 (LongMemEval ``recall_any``).
- ``recall_all@k`` = 1 when every gold item is in the top k, else 0 (LongMemEval ``recall_all``).
- ``ndcg@k`` = DCG@k / IDCG@k with DCG@k = sum over gold items at rank r <= k of 1 / log2(r + 1), and
  IDCG@k the DCG of the ideal ranking (all gold items first: min(|gold|, k) of them). This is trec_eval's
  ``ndcg_cut`` and ir_measures' ``nDCG@k`` (tests check it to 1e-9). LongMemEval's ``eval_utils.dcg``
  differs in one place: it divides the relevance at rank r >= 2 by log2(r), so ranks 1 and 2 both count
  in full; its recall_any/recall_all are these.
- ``mrr`` = 1 / rank of the first gold item in the whole ranked list (the trace's depth), 0 when no gold
  item was returned (ir_measures ``RR``); the table's mean over questions is the MRR. Its ``k`` is empty.
- Session level: a turn's session is (conversation, session ordinal). The ranking is the ranked turns'
  sessions, deduplicated in rank order (a session ranks where its best turn ranks), so the top k
  sessions are LongMemEval's ``evaluate_retrieval_turn2session`` (its effective depth grows until k
  unique sessions); gold = the sessions of the gold turns. The metrics above are then taken over that
  session ranking. Only where sessions exist: a question whose conversation holds a single session (an
  own-format corpus without ``session`` fields puts every turn in session 0) gets NaN at session level, since
  any returned turn would find "the" session and score 1; a corpus with no such question has no session rows
  to show (the report says "no sessions in this corpus").
- Memory units (``bench.data.units``): the ids ranked are the corpus's memories. With ``memory.unit=session`` each
  memory is a session, so its level is the session level: values at session level only, turn cells NaN (no "turn"
  rows that would repeat them under the wrong name). Chunk units are scored at the "turn" level (the unit's own).
  ``roles`` names the indexed roles (``memory.roles``) and the trace's role filter (``roles_label``).
- A question without gold: every metric NaN. As for the set metrics (``bench.metrics.setwise``), only the
  scored questions (non-adversarial, with gold) enter the table; ``n_questions`` counts them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

NAN = float("nan")
LEVELS = ("turn", "session")
METRICS = ("recall_any", "recall_all", "ndcg", "mrr")
DEFAULT_KS = (1, 3, 5, 10)
KEYS = ["dataset", "embedder", "backend", "roles"]
NO_SESSIONS = "n/a: no sessions in this corpus (every conversation holds one session)"
TABLE_COLUMNS = [*KEYS, "level", "metric", "k", "n_questions", "mean", "ci_low", "ci_high", "pred_low", "pred_high"]


def gold_ranks(*, ranked: Sequence[str], gold: Iterable[str]) -> list[int]:
    """1-based ranks of the gold items found in ``ranked`` (a repeated id counts at its first rank), ascending."""
    want = set(gold)
    out, seen = [], set()
    for i, x in enumerate(ranked, 1):
        if x in want and x not in seen:
            out.append(i)
            seen.add(x)
    return out


def _one(ranked: Sequence[str], gold: Iterable[str], metric: str, k: int | None) -> float:
    g = set(gold)
    return from_ranks(ranks=gold_ranks(ranked=ranked, gold=g), n_gold=len(g), ks=() if k is None else (k,))[metric, k]


def recall_any(*, ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """1 when a gold item is in the top ``k`` (``from_ranks``); NaN without gold."""
    return _one(ranked, gold, "recall_any", k)


def recall_all(*, ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """1 when every gold item is in the top ``k`` (``from_ranks``); NaN without gold."""
    return _one(ranked, gold, "recall_all", k)


def ndcg(*, ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """trec_eval's ``ndcg_cut`` at ``k`` (``from_ranks``); NaN without gold."""
    return _one(ranked, gold, "ndcg", k)


def reciprocal_rank(*, ranked: Sequence[str], gold: Iterable[str]) -> float:
    """1 / rank of the first gold item, 0 when none was returned (``from_ranks``); NaN without gold."""
    return _one(ranked, gold, "mrr", None)


def _ndcg(ranks: Sequence[int], n_gold: int, k: int) -> float:
    dcg = sum(1.0 / math.log2(r + 1) for r in ranks if r <= k)
    ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(n_gold, k) + 1))
    return dcg / ideal


def from_ranks(*, ranks: Sequence[int], n_gold: int, ks: Sequence[int]) -> dict[tuple[str, int | None], float]:
    """Every metric from the gold items' 1-based ranks (ascending) and the number of gold items:
    {(metric, k): value}, k None for mrr. All NaN when ``n_gold`` is 0. The one implementation of the ranked
    metrics (``recall_any``, ``recall_all``, ``ndcg`` and ``reciprocal_rank`` are views of it)."""
    out: dict[tuple[str, int | None], float] = {}
    for k in ks:
        if n_gold == 0:
            out["recall_any", k] = out["recall_all", k] = out["ndcg", k] = NAN
            continue
        inside = sum(r <= k for r in ranks)
        out["recall_any", k] = float(inside > 0)
        out["recall_all", k] = float(inside == n_gold)
        out["ndcg", k] = _ndcg(ranks, n_gold, k)
    out["mrr", None] = NAN if n_gold == 0 else (1.0 / ranks[0] if ranks else 0.0)
    return out


def session_ranking(*, ranked: Sequence[str], session_of: Callable[[str], str]) -> list[str]:
    """The sessions of the ranked turns, deduplicated in rank order (a session ranks where its best turn ranks)."""
    return list(dict.fromkeys(map(session_of, ranked)))


def question_metrics(*, ranked: Sequence[str], gold: Iterable[str], ks: Sequence[int],
                     session_of: Callable[[str], str]) -> dict[tuple[str, str, int | None], float]:
    """{(level, metric, k): value} of one question at turn and session level (see the module docstring)."""
    g = list(dict.fromkeys(gold))
    out = {("turn", m, k): v for (m, k), v in from_ranks(ranks=gold_ranks(ranked=ranked, gold=g), n_gold=len(g), ks=ks).items()}
    sessions = list(dict.fromkeys(map(session_of, g)))
    ranks = gold_ranks(ranked=session_ranking(ranked=ranked, session_of=session_of), gold=sessions)
    out.update({("session", m, k): v for (m, k), v in from_ranks(ranks=ranks, n_gold=len(sessions), ks=ks).items()})
    return out


def session_map(corpus) -> dict[str, str]:
    """Memory key -> its session's id, ``<conversation>|session<ordinal>`` (``Turn.session``)."""
    return {t.key: f"{t.conversation_id}|session{t.session}" for t in corpus.turns()}


def roles_label(trace_roles, memory: Mapping | None = None) -> str:
    """The ``roles`` of a trace's rows: the roles the corpus indexes (the run's memory spec, meta.json ``memory``:
    ``all`` or ``user``) and the trace's own role filter, if any. ``all`` indexed: the filter (``all`` without one),
    as before memory units existed; ``user`` indexed: ``user``, or ``user, filter <roles>`` for a filtered trace."""
    indexed = str((memory or {}).get("roles") or "all")
    filt = ",".join(trace_roles) if trace_roles else ""
    if indexed == "all":
        return filt or "all"
    return indexed + (f", filter {filt}" if filt else "")


def unit_of(memory: Mapping | None) -> str:
    """The memory unit of a run's memory spec (meta.json ``memory``), ``turn`` when it has none (an older run)."""
    return str((memory or {}).get("unit") or "turn")


def per_question(trace, corpus, *, ks: Sequence[int] = DEFAULT_KS, embedder: str | None = None,
                 memory: Mapping | None = None) -> pd.DataFrame:
    """One row per scored question of ``trace`` (non-adversarial, with gold): KEYS, question_id, conversation_id
    and one column per (level, metric, k) named ``<level>/<metric>@<k>`` (``<level>/mrr`` for MRR).

    ``memory``: the run's memory spec (meta.json ``memory``, ``bench.data.units.UnitSpec.describe``): its ``roles``
    name the rows (``roles_label``); with ``unit`` ``session`` each memory is a session, so the unit's level IS the
    session level: the values are in the session columns only (the turn columns, which would repeat them, are NaN)."""
    sessions = session_map(corpus)
    with_sessions = {c.conversation_id for c in corpus.conversations if len({t.session for t in c.turns}) > 1}
    questions = {q.question_id: q for q in corpus.questions}
    session_unit = unit_of(memory) == "session"
    base = {"dataset": trace.meta.get("dataset"), "embedder": embedder or trace.meta.get("embedder"),
            "backend": trace.meta.get("backend"), "roles": roles_label(trace.meta.get("roles"), memory)}
    out = []
    for qid, conv, hits, gold in zip(trace.table["question_id"], trace.table["conversation_id"], trace.table["hit_ids"],
                                     trace.table["gold_ids"]):
        q = questions.get(qid)
        if q is None or q.adversarial or len(gold) == 0:
            continue
        values = question_metrics(ranked=list(hits), gold=list(gold), ks=ks, session_of=lambda x: sessions.get(x, x))
        if q.conversation_id not in with_sessions:  # one session: nothing to rank at session level
            values.update({key: NAN for key in values if key[0] == "session"})
        if session_unit:  # the unit is the session: its one level is the session level
            values.update({key: NAN for key in values if key[0] == "turn"})
        out.append({**base, "question_id": qid, "conversation_id": conv, **{column(*key): v for key, v in values.items()}})
    cols = [*KEYS, "question_id", "conversation_id"] + [column(lv, m, k) for lv in LEVELS for m, k in _metric_keys(ks)]
    return pd.DataFrame(out, columns=cols)


def _metric_keys(ks: Sequence[int]) -> list[tuple[str, int | None]]:
    return [(m, k) for m in METRICS if m != "mrr" for k in ks] + [("mrr", None)]


def column(level: str, metric: str, k: int | None) -> str:
    return f"{level}/{metric}" + ("" if k is None else f"@{k}")


def table(rows: pd.DataFrame, *, ks: Sequence[int] = DEFAULT_KS, confidence: float = 0.95, n_resamples: int = 1000,
          seed: int = 0, method: str = "t") -> pd.DataFrame:
    """The tidy table (TABLE_COLUMNS): per KEYS group, level, metric and k, the mean over the scored questions,
    ``ci_low``/``ci_high`` the CI about the mean of conversations like these and ``pred_low``/``pred_high`` the
    prediction interval for a new corpus of as many conversations (``bench.analysis.stats.mean_intervals``:
    clusters = conversations, t-based unless ``method`` names a bootstrap method; clipped to [0, 1])."""
    from bench.analysis.stats import cluster_sums, mean_intervals

    keys = [(lv, m, k) for lv in LEVELS for m, k in _metric_keys(ks)]
    out = []
    for key, g in rows.groupby(KEYS, sort=False, dropna=False):
        values = g[[column(*x) for x in keys]].to_numpy(dtype=np.float64)
        _, sums, counts = cluster_sums(values, g["conversation_id"].to_numpy())
        res = mean_intervals(sums, counts, method=method, confidence=confidence, bounds=(0.0, 1.0), n_resamples=n_resamples, seed=seed)
        n = (~np.isnan(values)).sum(axis=0)
        for j, (lv, m, k) in enumerate(keys):
            out.append({**dict(zip(KEYS, key)), "level": lv, "metric": m, "k": k, "n_questions": int(n[j]),
                        "mean": float(res.point[j]), "ci_low": float(res.low[j]), "ci_high": float(res.high[j]),
                        "pred_low": float(res.pred_low[j]), "pred_high": float(res.pred_high[j])})
    df = pd.DataFrame(out, columns=TABLE_COLUMNS)
    df["k"] = df["k"].astype("Int64")
    return df


def for_traces(traces: Iterable, corpus, *, ks: Sequence[int] = DEFAULT_KS, embedder: str | None = None,
               confidence: float = 0.95, n_resamples: int = 1000, seed: int = 0, method: str = "t",
               memory: Mapping | None = None) -> pd.DataFrame:
    """The tidy table over several traces of one job (one per role filter); ``memory`` as for ``per_question``."""
    rows = [per_question(t, corpus, ks=ks, embedder=embedder, memory=memory) for t in traces]
    rows = [r for r in rows if len(r)]
    if not rows:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    return table(pd.concat(rows, ignore_index=True), ks=ks, confidence=confidence, n_resamples=n_resamples, seed=seed, method=method)


def check_ks(ks: Iterable, where: str = "ranked.ks") -> tuple[int, ...]:
    """Cut-offs as positive integers, sorted, without repeats; one clear line otherwise."""
    out = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"config {where}: cut-offs must be positive integers (got {k!r})")
        out.append(int(k))
    if not out:
        raise ValueError(f"config {where}: at least one cut-off is needed")
    return tuple(sorted(set(out)))


def report_table(df: pd.DataFrame) -> list[str]:
    """Markdown lines: per configuration and level, one row per metric, one column per k (MRR: column 'all');
    cells ``mean [CI]``."""
    if df is None or not len(df):
        return []
    ks = sorted(int(k) for k in df["k"].dropna().unique())
    from bench.output import md_text  # names come from data

    head = ["dataset", "embedder", "store", "roles", "level", "metric", *[f"@{k}" for k in ks], "whole list"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(r) -> str:
        if r is None or r["mean"] != r["mean"]:
            return "n/a"
        ci = "" if r["ci_low"] != r["ci_low"] else f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        return f"{r['mean']:.3f}{ci}"

    for key, g in df.groupby([*KEYS, "level"], sort=False):
        if key[-1] == "turn" and not (g["n_questions"] > 0).any():  # a session-unit corpus: its one level is the session level
            continue
        if key[-1] == "session" and not (g["n_questions"] > 0).any():
            lines.append("| " + " | ".join([*map(md_text, key), NO_SESSIONS, *[""] * len(ks), ""]) + " |")
            continue
        for m in METRICS:
            sub = g[g["metric"] == m]
            if not len(sub):
                continue
            by_k = {(None if pd.isna(k) else int(k)): r for k, r in zip(sub["k"], sub.to_dict("records"))}
            cells = [cell(by_k.get(k)) if m != "mrr" else "" for k in ks] + [cell(by_k.get(None)) if m == "mrr" else ""]
            lines.append("| " + " | ".join([*map(md_text, key), m, *cells]) + " |")
    return lines
