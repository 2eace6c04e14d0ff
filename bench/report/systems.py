"""The report's "systems" section: imported rankings beside our own (systems.csv, ``bench.analysis.systems``)."""

from __future__ import annotations

import math

import pandas as pd

from bench.output import md_text

METRICS = ("recall_any", "recall_all", "ndcg")
KS = (5, 10)  # the cut-offs shown (every one in systems.csv); a table without them shows its own


def _num(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) or pd.isna(x) else f"{x:.{digits}f}"


def _p(p) -> str:
    return "n/a" if pd.isna(p) else ("<0.001" if p < 0.001 else f"{p:.3f}")


def text_table(table: pd.DataFrame) -> list[str]:
    """Markdown lines: per imported ranking and level, one row per system; our rows add Δ = imported - ours and its p."""
    if table is None or not len(table):
        return []
    lines: list[str] = []
    for (name, level), g in table.groupby(["ranking", "level"], sort=False):
        if not (g["n_questions"] > 0).any():
            continue
        first = g.iloc[0]
        present = sorted(int(k) for k in g["k"].dropna().unique())
        ks = [k for k in KS if k in present] or present
        shown = [(m, k) for m in METRICS for k in ks] + [("mrr", None)]
        head = ["system", "questions", *[f"{m}@{k}" if k else m for m, k in shown]]
        lines += [f"**{md_text(name)}** ({md_text(first['format'])}, {md_text(first['ranking_level'])} ids, file "
                  f"{md_text(first['file'])}), {level} level:", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for system, s in g.groupby("system", sort=False):
            cells = []
            for m, k in shown:
                r = s[(s["metric"] == m) & ((s["k"] == k) if k is not None else s["k"].isna())]
                if not len(r):
                    cells.append("")
                    continue
                r = r.iloc[0]
                cell = _num(r["mean"])
                if r["kind"] == "ours" and not pd.isna(r["diff"]):
                    cell += f" (Δ {r['diff']:+.3f}, p {_p(r['p_value'])})"
                cells.append(cell)
            n = int(s["n_questions"].max())
            lines.append("| " + " | ".join([md_text(system), str(n), *cells]) + " |")
        lines.append("")
    return lines


def section(run) -> list[str]:
    """The "Systems" section of a run's report, when ``recallbench score`` wrote systems.csv; [] otherwise."""
    from bench.analysis.systems import SYSTEMS_CSV
    from bench.output import read_csv

    if not run.has(SYSTEMS_CSV):
        return []
    table = read_csv(run.file(SYSTEMS_CSV), dtype={"k": "Int64"}, keep_default_na=False, na_values=[""])
    body = text_table(table)
    if not body:
        return []
    return ["## Systems: imported rankings beside ours (same questions, same arithmetic)", "",
            "Rankings of other systems read by `recallbench score` (JSON {question_id: [id, ...]}, LongMemEval retrieval logs, "
            "or TREC runs; bench/replay/rankings.py), scored with bench/metrics/ranked.py over the scored questions they rank (abstention "
            "questions excluded, as LongMemEval's retrieval evaluation does). A session-id ranking is scored at session level "
            "only (a session is gold when it holds a gold turn); on a session-unit corpus (`memory.unit=session`) a memory is a "
            "session, so its memory ids are session ids and its one level is the session level. Our rows are each trace on the same questions; "
            "Δ = imported − ours, roles = the roles the run indexed (`memory.roles`) and the trace's filter, p from the paired t test over conversations (bench.analysis.stats.paired_t_test; a LongMemEval "
            "question is its own conversation). Every value: systems.csv, systems_questions.csv.", "", *body]
