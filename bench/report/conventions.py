"""Report section: retrieval in the conventions people publish (conventions.csv of each job, ``bench.metrics.conventions``).

Every table says its memory unit, indexed roles, embedder with its truncation length, k and the any/all rule,
and that abstention questions are left out, so a number copied from it carries its conventions along.
"""

from __future__ import annotations

import pandas as pd

from bench.metrics.conventions import FILE, OVERALL
from bench.output import read_csv
from bench.output import md_code as C
from bench.output import md_text as E
from bench.results.rundir import RunDir

TITLE = "## Retrieval as published (LongMemEval's conventions and arithmetic)"


def read(run: RunDir) -> pd.DataFrame | None:
    """The conventions tables of every finished job of ``run`` (None when none has one)."""
    parts = [read_csv(j.file(FILE), dtype={"k": "Int64"}, keep_default_na=False, na_values=[""])
             for j in run.job_dirs() if j.has(FILE)]
    parts = [p for p in parts if len(p)]
    if not parts:
        return None
    df = pd.concat(parts, ignore_index=True)
    if "system" not in df.columns:  # a run from before lexical rows: its one system is its embedder
        df.insert(1, "system", df["embedder"])
    return df


def _truncation(v) -> str:
    try:
        return f"truncation {int(float(v))} tokens"
    except (TypeError, ValueError):
        return "truncation not stated by the embedder"


def _ranker(r: dict) -> str:
    """The embedder with its truncation, or a lexical ranker (``system`` other than the embedder): no embedder, no truncation."""
    if str(r.get("system", r["embedder"])) != str(r["embedder"]):
        return f"ranker {C(r['system'])} (no embedder; truncation none: every word of a memory is indexed)"
    return f"embedder {C(r['embedder'])} ({_truncation(r['max_length'])})"


def header(r: dict, level: str) -> str:
    """The caption of one table: dataset, level, unit, indexed roles, embedder + truncation (or the lexical ranker), store,
    k, any/all, exclusions."""
    excl = f"{int(r['n_abstention_excluded'])} abstention questions excluded (LongMemEval's retrieval evaluation leaves out `_abs`)"
    if int(r.get("n_without_gold_excluded") or 0):
        excl += f"; {int(r['n_without_gold_excluded'])} questions without gold in this unit excluded"
    return (f"**{E(r['dataset'])}, {level} level**: unit {C(r['unit'])}, indexed roles {C(r['roles'])}, {_ranker(r)}, "
            f"store {C(r['backend'])}; k = {', '.join(str(k) for k in r['_ks'])}; "
            f"recall_any@k = a gold {level} in the top k, recall_all@k = every gold {level} in the top k, nDCG@k as LongMemEval's "
            f"eval_utils; {excl}. Mean over questions; n per column.")


def section(run: RunDir) -> list[str]:
    """Markdown lines of the section ([] when the run has no conventions table)."""
    df = read(run)
    if df is None:
        return []
    lines = [TITLE, "",
             "LongMemEval's retrieval scoring (`src/retrieval/eval_utils.py`) on this run's ranked units, before any threshold: "
             "session level from turn or chunk units is its turn-to-session rule (the cut-off grows until k distinct sessions). "
             "Its nDCG counts ranks 1 and 2 in full (trec_eval's nDCG is in the ranked section). The rankings are this run's: a "
             "question sees only the memories dated at or before it was asked (LongMemEval's own runs rank the whole haystack), "
             "so gold said later is a miss (dataset card: gold after asked_at). A run with the `bm25` strategy also has BM25's "
             "rows: each question's memories ranked by BM25 (bench/strategies/lexical.py), then the zero-score ones in "
             "conversation order, as LongMemEval ranks a whole haystack (the ranking: rankings/bm25.json, for `recallbench "
             "score`). Definitions: bench/metrics/conventions.py; every value in conventions.csv of each job.", ""]
    lines += systems_side_by_side(df)
    keys = ["dataset", "system", "embedder", "backend", "unit", "roles", "level"]
    for key, g in df.groupby(keys, sort=False, dropna=False):
        ks = sorted(int(k) for k in g["k"].dropna().unique())
        types = [OVERALL] + sorted(t for t in g["question_type"].unique() if t != OVERALL)
        n = {t: int(g.loc[g["question_type"] == t, "n_questions"].max()) for t in types}
        first = {**g.iloc[0].to_dict(), "_ks": ks}
        lines += [header(first, str(key[-1])), "",
                  "| metric | " + " | ".join(f"{E(t)} (n={n[t]})" for t in types) + " |",
                  "|---|" + "---:|" * len(types)]
        cells = {(m, int(k), t): v for m, k, t, v in zip(g["metric"], g["k"], g["question_type"], g["mean"])}
        for m in dict.fromkeys(g["metric"]):
            for k in ks:
                vals = [cells.get((m, k, t)) for t in types]
                lines.append(f"| {m}@{k} | " + " | ".join("n/a" if v is None or v != v else f"{v:.3f}" for v in vals) + " |")
        lines.append("")
    return lines


SIDE_KS = (5, 10)  # the cut-offs of the side-by-side table (the ones people quote)


def systems_side_by_side(df: pd.DataFrame) -> list[str]:
    """When the run ranked with more than one system (its embedders, through their stores, and BM25): per dataset, unit,
    indexed roles and level, the overall recall_any, recall_all and nDCG at k = 5 and 10 of each in one table ([] otherwise)."""
    lines: list[str] = []
    for (ds, unit, roles, level), g in df[df["question_type"] == OVERALL].groupby(["dataset", "unit", "roles", "level"], sort=False):
        systems = list(dict.fromkeys(zip(g["system"], g["backend"])))
        if len(systems) < 2:
            continue
        ks = [k for k in SIDE_KS if k in set(g["k"].dropna().astype(int))]
        cells = {(s, b, m, int(k)): v for s, b, m, k, v in zip(g["system"], g["backend"], g["metric"], g["k"], g["mean"])}
        shown = [(m, k) for m in dict.fromkeys(g["metric"]) for k in ks]
        lines += [f"**{E(ds)}, {level} level, systems side by side** (unit {C(unit)}, indexed roles {C(roles)}; overall, "
                  "abstention excluded; each system's own table below states its embedder and truncation, or its ranker):", "",
                  "| system | store | questions | " + " | ".join(f"{m}@{k}" for m, k in shown) + " |",
                  "|---|---|---:|" + "---:|" * len(shown)]
        for s, b in systems:
            n = int(g.loc[(g["system"] == s) & (g["backend"] == b), "n_questions"].max())
            vals = [cells.get((s, b, m, k)) for m, k in shown]
            lines.append(f"| {C(s)} | {C(b)} | {n} | " + " | ".join("n/a" if v is None or v != v else f"{v:.3f}" for v in vals) + " |")
        lines.append("")
    return lines
