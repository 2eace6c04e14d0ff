"""The report's answer-coverage section (bench.metrics.answers): coverage beside evidence recall at each strategy's best
threshold, where the two disagree, and a plot of answer coverage vs injected tokens (full context included)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from bench.metrics import scored
from bench.output import confined, md_text, one_line
from bench.report import names
from bench.report.plots import NEUTRAL, _figure, _figure_legend, _grid, _save, _side_legend, _style, _tokens_axis, styles
from bench.results.rundir import RunDir

CONFIG = ["dataset", "embedder", "backend", "strategy", "threshold", "format"]


def has_answers(summary: pd.DataFrame) -> bool:
    return "answer_contained" in summary and (summary.get("n_answer", pd.Series([0])).fillna(0) > 0).any()


def coverage_vs_tokens(summary: pd.DataFrame, title: str, path: Path, *, panels: list[tuple[str, pd.DataFrame]] | None = None,
                       styles_: dict | None = None) -> Path:
    """Answer contained (solid) and evidence recall (dotted) vs mean injected tokens, in each strategy's colour
    (``bench.report.plots.styles``); ``panels`` (short name, rows): one panel per configuration."""
    from matplotlib.lines import Line2D

    plt = _figure()
    panels = panels or [("", summary)]
    styles_ = styles_ or styles([n for _, g in panels for n in g["strategy"]])
    fig, axes = _grid(plt, len(panels), ncols=3, w=4.2 if len(panels) > 1 else 6.5, h=3.2 if len(panels) > 1 else 4.0)
    for ax, (lab, g) in zip(axes, panels):
        for name, s in g.groupby("strategy", sort=False):
            s = s.sort_values("tokens_injected_mean")
            st = _style(styles_, name)
            many = len(s) > 1
            ax.plot(s["tokens_injected_mean"], s["answer_contained"], "-" if many else "", marker=st["marker"], ms=4 if many else 7,
                    color=st["color"], label=name)
            ax.plot(s["tokens_injected_mean"], s["recall"], ":" if many else "", marker="" if many else "x", color=st["color"], ms=6, lw=1)
        _tokens_axis(ax, "x")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3, which="both")
        if lab:
            ax.set_title(one_line(lab), fontsize=9)
    axes[0].set_ylabel("share of questions", fontsize=8)
    _figure_legend(fig, axes)
    _side_legend(fig, [Line2D([], [], ls="-", color=NEUTRAL[0]), Line2D([], [], ls=":", color=NEUTRAL[0])],
                 ["answer contained", "evidence recall"], 8)
    fig.suptitle(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def disagreements(rows: pd.DataFrame) -> pd.DataFrame:
    """Per configuration, over the scored questions with an answer: ``evidence_missed_answer_in`` (no gold memory
    injected, the answer contained anyway) and ``evidence_all_answer_out`` (every gold memory injected, the answer
    not contained: an answer the evidence paraphrases, or a label that points elsewhere)."""
    keys = [k for k in CONFIG if k in rows]
    r = rows[scored(rows).to_numpy() & rows["answer_contained"].notna().to_numpy()]
    out = r.assign(evidence_missed_answer_in=(r["n_correct"] == 0) & (r["answer_contained"] == 1),
                   evidence_all_answer_out=(r["recall"] == 1) & (r["answer_contained"] == 0))
    return out.groupby(keys, dropna=False, sort=False)[["evidence_missed_answer_in", "evidence_all_answer_out"]].sum().reset_index()


def section(run: RunDir, summary: pd.DataFrame, best: pd.DataFrame, *, styles_: dict | None = None,
            short: Mapping[str, str] | None = None) -> list[str]:
    """Markdown lines (and the plots, written into the run directory); [] when no question has an answer."""
    if not has_answers(summary):
        return []
    fixed = summary[summary["threshold"].isna()]
    chosen = pd.concat([best, fixed], ignore_index=True)
    rows = run.questions()
    if "answer_contained" in rows:
        d = disagreements(rows)
        chosen = chosen.merge(d, on=[k for k in CONFIG if k in d and k in chosen], how="left")
    multi = summary["embedder"].nunique() > 1
    chosen["configuration"] = [names.config(e, b, multi_embedder=multi, short=short) for e, b in zip(chosen["embedder"], chosen["backend"])]
    cols = ["dataset", "configuration", "strategy", "threshold", "n_answer", "recall", "answer_recall", "answer_contained",
            "evidence_missed_answer_in", "evidence_all_answer_out", "tokens_injected_mean"]
    note = ("Over the scored questions with a gold answer (`n_answer`), at each strategy's best threshold by F1. "
             "answer_recall: token recall of the answer's content words in the injected memories (function words such as "
             "in/on/and never count; initials kept together: README, Metric conventions); answer_contained: the whole "
             "answer inside one injected memory. Where they disagree with evidence recall: "
             "`evidence_missed_answer_in` = questions with no gold memory injected whose answer was injected anyway (another "
             "turn says it); `evidence_all_answer_out` = every gold memory injected but the answer's words not (the evidence "
             "paraphrases it, or the label points elsewhere). Adversarial questions keep their abstention column. Every "
             "threshold: summary.csv. Definitions: bench/metrics/answers.py.")
    lines = ["## Answer coverage (offline: is the gold answer in the injected context?)", "", note, "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in chosen.to_dict("records"):
        lines.append("| " + " | ".join(_cell(r.get(c)) for c in cols) + " |")
    lines.append("")
    twins = names.identical_stores(summary)
    for i, (ds, d) in enumerate(summary.groupby("dataset", sort=False)):
        panels = [(names.config(emb, be, multi_embedder=multi, short=short), g) for (emb, be), g in d.groupby(["embedder", "backend"], sort=False)
                  if has_answers(g) and (ds, emb, be) not in twins]
        if not panels:
            continue
        if len(panels) == 1:
            panels = [("", panels[0][1])]
        p = coverage_vs_tokens(d, f"{ds}: answer coverage vs injected tokens", confined(run.path, f"answer_coverage_vs_tokens_{i}.png"),
                               panels=panels, styles_=styles_)
        lines += [f"![{p.stem}]({p.name})", ""]
    return lines


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.0f}" if abs(v) >= 100 or v == int(v) else f"{v:.3f}"
    return md_text(v)
