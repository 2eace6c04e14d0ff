"""The retrieval conventions people publish (LongMemEval's), computed from a trace with LongMemEval's arithmetic.

Owns the conventions table (``conventions.csv`` of a job; rendered by ``bench.report.conventions``): per
level, metric, k and question type (and ``overall``), the mean over the scored questions, per ``system`` (what
ranked: the job's embedder through its store, or a lexical ranker over the same memories, ``bench.strategies.lexical``
``haystack_rankers``; the pipeline's ``write_conventions`` writes both, and each lexical ranking as LongMemEval JSON in
``rankings/``). Pure functions, no I/O beyond ``write`` and ``write_ranking``.
Its per-question arithmetic is ``lme_scores`` (``recall_any``, ``recall_all`` and ``ndcg`` are views of it).

Arithmetic, as LongMemEval's ``src/retrieval/eval_utils.py`` (github.com/xiaowu0162/LongMemEval; tests
check it against a transcription of that file on a 20-question slice):

- ``recall_any@k`` = 1 when a gold item is among the top k items, ``recall_all@k`` = 1 when every gold item is.
- ``ndcg@k`` = DCG@k / IDCG@k with LongMemEval's ``dcg``: the relevance at rank 1 counts in full and the one at
  rank r >= 2 is divided by log2(r) (so ranks 1 and 2 both count in full; trec_eval's ``ndcg_cut``, divided by
  log2(r + 1), is in ranked.csv); IDCG@k = the DCG of min(#relevant items of the haystack, k) ones.
- Levels. The unit's own level (``turn``, ``chunk`` or ``session``) scores the ranked units against the gold
  units. ``session`` from turn or chunk units is LongMemEval's ``evaluate_retrieval_turn2session``: the ranked
  units are mapped to their sessions, the cut-off grows from k until k distinct sessions are in it (or the list
  ends), recall_any/recall_all take the sessions in that cut-off, and nDCG scores the unit list with
  relevance 1 for a unit of a gold session (repeats count), its ideal over every unit of the haystack in a gold
  session. A conversation holding a single session gets NaN at session level (any hit finds it).
  One labelling difference: LongMemEval's ``run_retrieval.py`` names the non-answer turns of an answer session
  ``noans_<session>_<turn>``, so its turn-to-session step sees such a session as two (``answer_…`` and
  ``noans_…``); here every unit maps to its real session. The arithmetic on the same ids is the same.
- Questions: abstention (adversarial) questions are left out, as LongMemEval's retrieval evaluation leaves out
  ``_abs``; so are questions without gold in this unit (e.g. ``roles=user`` and only assistant gold turns, which
  LongMemEval drops as "no target turns from the user side"). ``n_questions`` counts the questions averaged.
  Mean = plain mean over questions (LongMemEval's ``np.mean``), per ``question_type`` and ``overall``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

NAN = float("nan")
KS = (1, 3, 5, 10, 20, 30, 50)
METRICS = ("recall_any", "recall_all", "ndcg")
OVERALL = "overall"
FILE = "conventions.csv"
RANKINGS = "rankings"  # folder of a job: the lexical rankings as LongMemEval JSON, <name>.json (``write_ranking``)
COLUMNS = ["dataset", "system", "embedder", "max_length", "backend", "unit", "roles", "level", "metric", "k", "question_type",
           "n_questions", "mean", "n_abstention_excluded", "n_without_gold_excluded"]


def lme_dcg(relevances: Sequence[float], k: int) -> float:
    """LongMemEval ``eval_utils.dcg``: rel[0] + sum_{i>=1} rel[i] / log2(i + 1) over the first k (i 0-based)."""
    r = list(relevances)[:k]
    return float(r[0] + sum(x / math.log2(i + 1) for i, x in enumerate(r[1:], 1))) if r else 0.0


def lme_scores(*, ranked: Sequence[str], gold: set[str], n_relevant: int, k: int) -> tuple[float, float, float]:
    """(recall_any, recall_all, ndcg) at cut-off ``k`` of one ranked list (ids may repeat: a session per turn),
    as LongMemEval's ``evaluate_retrieval``; ``n_relevant`` = relevant items in the whole haystack (the ideal)."""
    top = ranked[:k]
    recalled = set(top)
    ideal = lme_dcg([1.0] * min(n_relevant, k), k)
    ndcg = 0.0 if ideal == 0 else lme_dcg([1.0 if x in gold else 0.0 for x in top], k) / ideal
    return float(any(g in recalled for g in gold)), float(all(g in recalled for g in gold)), ndcg


def _one(ranked: Sequence[str], gold, k: int, i: int) -> float:
    g = set(gold)
    return lme_scores(ranked=ranked, gold=g, n_relevant=len(g), k=k)[i] if g else NAN


def recall_any(*, ranked: Sequence[str], gold, k: int) -> float:
    """LongMemEval's recall_any@k of one ranked list (``lme_scores``); NaN without gold."""
    return _one(ranked, gold, k, 0)


def recall_all(*, ranked: Sequence[str], gold, k: int) -> float:
    """LongMemEval's recall_all@k of one ranked list (``lme_scores``); NaN without gold."""
    return _one(ranked, gold, k, 1)


def ndcg(*, ranked: Sequence[str], gold, k: int) -> float:
    """LongMemEval's nDCG@k of one ranked list, the ideal over the gold items (``lme_scores``); NaN without gold."""
    return _one(ranked, gold, k, 2)


def effective_k(*, ranked: Sequence[str], k: int, n_items: int | None = None) -> int:
    """LongMemEval's turn-to-session cut-off: from k up until the first ``k'`` items hold k distinct ids, or ``k'``
    passes ``n_items`` (the haystack's size, default the list's length: LongMemEval ranks the whole haystack)."""
    eff = k
    limit = len(ranked) if n_items is None else n_items
    while eff <= limit and len(set(ranked[:eff])) < k:
        eff += 1
    return eff


def question_scores(*, ranked: Sequence[str], gold: Sequence[str], session_of: dict[str, str], units_per_session: dict[str, int],
                    unit: str, ks: Sequence[int] = KS, sessions: bool = True, n_units: int | None = None) -> dict[tuple[str, str, int], float]:
    """{(level, metric, k): value} of one question. ``ranked``/``gold``: unit ids; ``session_of``: unit -> session;
    ``units_per_session``: units of each session of the haystack; ``n_units``: the haystack's units (default: as many
    as ranked; more when the ranking left some out, e.g. said after the question). ``sessions`` False: session level NaN."""
    out: dict[tuple[str, str, int], float] = {}
    g = set(gold)
    for k in ks:
        for m, v in zip(METRICS, lme_scores(ranked=ranked, gold=g, n_relevant=len(g), k=k) if g else (NAN,) * 3):
            out[unit, m, k] = v
    if unit == "session":
        return out
    mapped = [session_of.get(x, x) for x in ranked]
    gs = {session_of.get(x, x) for x in g}
    n_rel = sum(units_per_session.get(s, 0) for s in gs)
    for k in ks:
        vals = lme_scores(ranked=mapped, gold=gs, n_relevant=n_rel, k=effective_k(ranked=mapped, k=k, n_items=n_units)) if g and sessions else (NAN,) * 3
        for m, v in zip(METRICS, vals):
            out["session", m, k] = v
    return out


def levels(unit: str) -> tuple[str, ...]:
    return ("session",) if unit == "session" else (unit, "session")


def per_question(trace, corpus, *, unit: str, ks: Sequence[int] = KS) -> pd.DataFrame:
    """One row per question of ``corpus`` that is scored (non-adversarial, with gold): question_id, question_type and
    one column ``<level>/<metric>@<k>`` per value."""
    session_of = {t.key: f"{t.conversation_id}|s{t.session}" for t in corpus.turns()}
    units_per_session: dict[str, int] = {}
    for s in session_of.values():
        units_per_session[s] = units_per_session.get(s, 0) + 1
    multi = {c.conversation_id for c in corpus.conversations if len({t.session for t in c.turns}) > 1}
    size = {c.conversation_id: len(c.turns) for c in corpus.conversations}
    hits = dict(zip(trace.table["question_id"], trace.table["hit_ids"]))
    cols = [f"{lv}/{m}@{k}" for lv in levels(unit) for m in METRICS for k in ks]
    rows = []
    for q in corpus.questions:
        if q.adversarial or not q.evidence or q.question_id not in hits:
            continue
        gold = [f"{q.conversation_id}|{e}" for e in dict.fromkeys(q.evidence)]
        v = question_scores(ranked=list(hits[q.question_id]), gold=gold, session_of=session_of, units_per_session=units_per_session,
                            unit=unit, ks=ks, sessions=q.conversation_id in multi, n_units=size.get(q.conversation_id))
        rows.append({"question_id": q.question_id, "question_type": q.category or "(none)",
                     **{f"{lv}/{m}@{k}": val for (lv, m, k), val in v.items()}})
    return pd.DataFrame(rows, columns=["question_id", "question_type", *cols])


def table(trace, corpus, *, unit: str, roles: str, embedder: str, max_length, ks: Sequence[int] = KS,
          system: str | None = None) -> pd.DataFrame:
    """The tidy conventions table (COLUMNS) of one trace: per level, metric, k and question type (then ``overall``).
    ``system``: what ranked (default: the embedder; a lexical ranker's name, ``bench.strategies.lexical``, with
    ``embedder`` "none" and ``max_length`` None)."""
    rows = per_question(trace, corpus, unit=unit, ks=ks)
    n_abs = sum(1 for q in corpus.questions if q.adversarial)
    n_nogold = sum(1 for q in corpus.questions if not q.adversarial and not q.evidence)
    base = {"dataset": corpus.name, "system": embedder if system is None else system, "embedder": embedder, "max_length": max_length, "backend": trace.meta.get("backend"),
            "unit": unit, "roles": roles}
    types = sorted(rows["question_type"].unique()) + [OVERALL]
    out = []
    for lv in levels(unit):
        for m in METRICS:
            for k in ks:
                col = rows[f"{lv}/{m}@{k}"].to_numpy(dtype=np.float64) if len(rows) else np.zeros(0)
                for qt in types:
                    sel = col if qt == OVERALL else col[(rows["question_type"] == qt).to_numpy()]
                    sel = sel[~np.isnan(sel)]
                    out.append({**base, "level": lv, "metric": m, "k": k, "question_type": qt, "n_questions": int(len(sel)),
                                "mean": float(sel.mean()) if len(sel) else NAN, "n_abstention_excluded": n_abs,
                                "n_without_gold_excluded": n_nogold})
    return pd.DataFrame(out, columns=COLUMNS)


def ranking_trace(rankings: dict[str, Sequence[str]], *, backend: str):
    """A trace-like view of rankings computed without a store (``table``: question_id, hit_ids; ``meta``: backend)."""
    from types import SimpleNamespace

    return SimpleNamespace(table=pd.DataFrame({"question_id": list(rankings), "hit_ids": [list(v) for v in rankings.values()]}),
                           meta={"backend": backend})


def pick_trace(traces: Sequence):
    """The trace of every memory (no role filter) when the job has one, else its first."""
    return next((t for t in traces if not t.meta.get("roles")), traces[0])


def write_ranking(path: Path, rankings: dict[str, Sequence[str]]) -> Path:
    """``rankings`` as the JSON LongMemEval-style scorers take, {question_id: [memory id, ...]} best first."""
    import json

    from bench.output import write_atomic

    return write_atomic(Path(path), lambda tmp: Path(tmp).write_text(json.dumps({q: list(v) for q, v in rankings.items()})))


def write(path: Path, df: pd.DataFrame) -> Path:
    from bench.output import write_csv

    return write_csv(Path(path), df)
