"""Other systems' rankings beside our own, by the same arithmetic: the "systems" table (``recallbench score``).

An imported ranking (``bench.replay.rankings``) is scored per question with ``bench.metrics.ranked`` (a turn ranking through
``ranked.per_question`` exactly as a trace; a session ranking at session level only, turn cells NaN), over the
questions it ranks that are scored (not adversarial, with gold: LongMemEval's retrieval evaluation leaves the
abstention questions out the same way; on a session-unit corpus a ranking of its memory ids is a session ranking,
``bench.replay.rankings``). Each of our traces of the same dataset is scored on the same questions (``ours_rows``: named and
leveled by the job's memory spec, meta.json ``memory``),
and each pair is tested with ``bench.analysis.stats.paired_t_test`` (difference = imported - ours, clusters =
conversations; a LongMemEval question is its own conversation, so its own cluster).

Tables (tidy, written by ``recallbench score`` into the run directory):

- ``systems.csv`` (SYSTEMS_COLUMNS): per imported ranking, per system (the ranking itself, and each of ours), level,
  metric and k: the mean over the paired questions, and for our rows the paired difference (imported - ours),
  its CI, p-value, wins/ties/losses (wins: the imported ranking is better) and the conversations.
- ``systems_questions.csv``: the imported rankings' per-question values (``bench.metrics.ranked`` columns).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from bench.metrics import ranked
from bench.replay.rankings import Ranking
from bench.types import Corpus, memory_key

SYSTEMS_CSV = "systems.csv"
SYSTEMS_QUESTIONS_CSV = "systems_questions.csv"
SYSTEMS_COLUMNS = ["ranking", "file", "format", "ranking_level", "system", "kind", "dataset", "level", "metric", "k",
                   "n_questions", "mean", "diff", "ci_low", "ci_high", "p_value", "wins", "ties", "losses", "n_conversations"]
IMPORT_PREFIX = "import:"


def ranking_rows(ranking: Ranking, corpus: Corpus, *, ks: Sequence[int] = ranked.DEFAULT_KS) -> pd.DataFrame:
    """One row per scored question the ranking ranks (``bench.metrics.ranked.per_question`` columns); backend = ``import:<name>``."""
    questions = [q for q in corpus.questions if q.question_id in ranking.ranked]
    gold = [list(dict.fromkeys(memory_key(q.conversation_id, e) for e in q.evidence)) for q in questions]
    meta = {"dataset": corpus.name, "embedder": "-", "backend": f"{IMPORT_PREFIX}{ranking.name}", "roles": None}
    if ranking.level == "turn":
        table = pd.DataFrame({"question_id": [q.question_id for q in questions],
                              "conversation_id": [q.conversation_id for q in questions],
                              "hit_ids": [list(ranking.ranked[q.question_id]) for q in questions], "gold_ids": gold})
        return ranked.per_question(SimpleNamespace(table=table, meta=meta), corpus, ks=ks)
    sessions = ranked.session_map(corpus)
    with_sessions = {c.conversation_id for c in corpus.conversations if len({t.session for t in c.turns}) > 1}
    cols = [*ranked.KEYS, "question_id", "conversation_id"] + [ranked.column(lv, m, k) for lv in ranked.LEVELS
                                                                 for m, k in ranked._metric_keys(ks)]
    out = []
    for q, g in zip(questions, gold):
        if q.adversarial or not g:
            continue
        row = {**meta, "roles": "all", "question_id": q.question_id, "conversation_id": q.conversation_id}
        row.update({c: ranked.NAN for c in cols[len(ranked.KEYS) + 2:]})
        if q.conversation_id in with_sessions:
            gs = list(dict.fromkeys(sessions[x] for x in g if x in sessions))
            ranks = ranked.gold_ranks(ranked=list(ranking.ranked[q.question_id]), gold=gs)
            row.update({ranked.column("session", m, k): v for (m, k), v in ranked.from_ranks(ranks=ranks, n_gold=len(gs), ks=ks).items()})
        out.append(row)
    return pd.DataFrame(out, columns=cols)


def system_label(row) -> str:
    """How a system is named in the table: an imported ranking's name, or our store with its embedder and roles (the
    indexed roles of the run's memory spec and the trace's filter: ``bench.metrics.ranked.roles_label``)."""
    backend = str(row["backend"])
    if backend.startswith(IMPORT_PREFIX):
        return backend
    return f"{backend} ({row['embedder']}, roles {row['roles']})"


def compare(ours: pd.DataFrame, imported: Sequence[tuple[Ranking, pd.DataFrame]], *, ks: Sequence[int],
            confidence: float = 0.95) -> pd.DataFrame:
    """The systems table (SYSTEMS_COLUMNS): every imported ranking's per-question rows against each of our systems'
    (``bench.metrics.ranked.per_question`` rows of the same dataset), on the questions both score."""
    from bench.analysis.stats import paired_t_test

    keys = [(lv, m, k) for lv in ranked.LEVELS for m, k in ranked._metric_keys(ks)]
    out = []
    for ranking, rows in imported:
        base = {"ranking": ranking.name, "file": Path(ranking.path).name, "format": ranking.format, "ranking_level": ranking.level}
        dataset = rows["dataset"].iloc[0] if len(rows) else None
        mine = rows.set_index("question_id")
        for lv, m, k in keys:
            v = mine[ranked.column(lv, m, k)].to_numpy(np.float64)
            n = int((~np.isnan(v)).sum())
            out.append({**base, "system": f"{IMPORT_PREFIX}{ranking.name}", "kind": "imported", "dataset": dataset, "level": lv,
                        "metric": m, "k": k, "n_questions": n, "mean": float(np.nanmean(v)) if n else ranked.NAN})
        theirs = ours[ours["dataset"] == dataset] if len(ours) else ours
        for _, g in theirs.groupby(ranked.KEYS, sort=False, dropna=False):
            g = g.drop_duplicates("question_id").set_index("question_id")
            common = [q for q in mine.index if q in g.index]
            label = system_label(g.iloc[0])
            for lv, m, k in keys:
                c = ranked.column(lv, m, k)
                a = mine.loc[common, c].to_numpy(np.float64)
                b = g.loc[common, c].to_numpy(np.float64)
                t = paired_t_test(a, b, clusters=mine.loc[common, "conversation_id"].to_numpy(), confidence=confidence)
                out.append({**base, "system": label, "kind": "ours", "dataset": dataset, "level": lv, "metric": m, "k": k,
                            "n_questions": t.n_questions, "mean": t.mean_b, "diff": t.diff, "ci_low": t.ci_low, "ci_high": t.ci_high,
                            "p_value": t.p_value, "wins": t.wins, "ties": t.ties, "losses": t.losses, "n_conversations": t.n_conversations})
    df = pd.DataFrame(out, columns=SYSTEMS_COLUMNS)
    df["k"] = df["k"].astype("Int64")
    return df


def ours_rows(run, *, ks: Sequence[int]) -> pd.DataFrame:
    """Our per-question ranked rows: every trace of every finished job of ``run`` (a RunDir), as ranked.csv scores them."""
    frames = []
    for job in run.job_dirs():
        corpus = job.corpus()
        meta = job.meta()
        embedder, memory = meta.get("embedder"), meta.get("memory")  # memory: unit and indexed roles (an older run: none)
        for trace in job.traces():
            frames.append(ranked.per_question(trace, corpus, ks=ks, embedder=embedder, memory=memory))
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def run_unit(job) -> str:
    """The memory unit of a finished job (meta.json ``memory.unit``; ``turn`` for a run without one)."""
    return ranked.unit_of(job.meta().get("memory") if job.has("meta.json") else None)


def run_ks(run) -> tuple[int, ...]:
    """The run's ``ranked.ks`` (config_resolved.yaml) with 5 and 10 added (the systems table shows them)."""
    ks = list((run.settings().get("ranked") or {}).get("ks") or ranked.DEFAULT_KS)
    return ranked.check_ks([*ks, 5, 10])


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
