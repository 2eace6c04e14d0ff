"""Markdown + HTML report and plots from a finished run directory (never reopens a store).

``write_report`` renders what the analysis stage (``bench.analysis.tables.write_tables``, run before it) computed and
saved in ``analysis/`` (recommendation, operating points, Pareto frontier, significance, LOCO stability, categories,
calibration, miss attribution, what would help most, label releases) plus the summary tables: ``report.md``, the
self-contained ``report.html`` and PNG figures. It computes and writes no table. It starts with the recommendation. Everything
comes from the run directory (``bench.results.rundir.RunDir``): calibration and attribution read each job's
corpus snapshot and traces, so the report works after the dataset files moved. Strategies are found
by what they are (``kind`` and ``params`` in strategies.json), rows labelled with their configured
names. Re-run at any time (``make report``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from bench.analysis.recommend import CONFIG_KEYS, Recommendation, neighbours
from bench.analysis.tables import Analysis
from bench.analysis.verdict import runner_up, split_ties, test_description
from bench.embedders.names import short_name, shorten
from bench.report import conventions, names, plots
from bench.output import md_code as C
from bench.output import md_text as E
from bench.output import confined, slug
from bench.report.significance import significance_table
from bench.report.significance import threshold as _thr
from bench.report.strategies import strategy_sections
from bench.report.systems import section as systems_section
from bench.results.rundir import ANALYSIS, QUESTIONS, REPORT_MD, RunDir, strategy_names

log = logging.getLogger(__name__)

SEED_THRESHOLDS = (0.75, 0.65, 0.3)  # thresholds quoted by the seed articles
SEED_LIMIT_K = 5  # "limit-5" (seekdb agent-memory article)


def _fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return E(x) if isinstance(x, str) else str(x)


def _table(df: pd.DataFrame, cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c], 2 if c == "threshold" else (1 if "tokens" in c or "ms" in c else 3)) for c in cols) + " |")
    return "\n".join(lines)


def best_by_f1(summary: pd.DataFrame) -> pd.DataFrame:
    keys = ["dataset", "embedder", "backend", "strategy"]
    s = summary.dropna(subset=["f1"])
    return s.loc[s.groupby(keys, sort=False)["f1"].idxmax()]


CLAIMS_TITLE = "Claims from popular articles, measured on your data"


def seed_claims(summary: pd.DataFrame, strategies: list[dict], short: Mapping[str, str] | None = None) -> str:
    """Settings quoted by popular agent-memory articles, measured on this run's data: the limit strategy with k=5 and
    the plain threshold strategy at the quoted thresholds (``strategies``: the run's strategies.json records); one table,
    one row per configuration and claim."""
    limits = strategy_names(strategies, "limit", k=SEED_LIMIT_K)
    thresholds = strategy_names(strategies, "threshold")
    multi = summary["embedder"].nunique() > 1
    rows = ["| dataset | configuration | claim | setting | token savings vs full context | recall | precision | F1 | empty rate |",
            "|---|---|---|---|---|---|---|---|---|"]
    for (ds, emb, be), g in summary.groupby(["dataset", "embedder", "backend"], sort=False):
        where = f"| {E(ds)} | {E(names.config(emb, be, multi_embedder=multi, short=short))} "
        lim = g[g["strategy"].isin(limits)]
        thr = g[g["strategy"].isin(thresholds) & g["threshold"].round(2).isin(SEED_THRESHOLDS)]
        for _, r in lim.iterrows():
            rows.append(f"{where}| top-5 saves tokens (seekdb agent-memory article) | {E(r['strategy'])} | {_fmt(r['token_savings'])} | {_fmt(r['recall'])} | {_fmt(r['precision'])} | {_fmt(r['f1'])} | {_fmt(r['empty_rate'])} |")
        for _, r in thr.sort_values("threshold", ascending=False).iterrows():
            rows.append(f"{where}| similarity threshold {r['threshold']:.2f} (quoted in articles) | {E(r['strategy'])} >= {r['threshold']:.2f} | {_fmt(r['token_savings'])} | {_fmt(r['recall'])} | {_fmt(r['precision'])} | {_fmt(r['f1'])} | {_fmt(r['empty_rate'])} |")
    return "\n".join(rows)


def _label(r, multi_embedder: bool, short: Mapping[str, str] | None = None) -> str:
    """A row's short name (``bench.report.names``): ``MiniLM · seekdb · threshold``; the legend has the full identities."""
    return names.label(r, multi_embedder, short)


def _ci(v, lo, hi, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def new_corpus(cfg, n_conversations) -> int:
    """The size of the new corpus the prediction intervals are for (``recommend.new_conversations``, else this one's)."""
    return int(cfg.new_conversations or n_conversations)


def intervals_sentence(cfg) -> str:
    """What the report's intervals are about and how they are computed (one rule for every table)."""
    how = ("Student t with conversations − 1 degrees of freedom on the cluster-robust standard error" if cfg.ci_method == "t" else
           f"cluster bootstrap, {cfg.n_resamples} resamples of whole conversations, {cfg.ci_method}, seed {cfg.seed}: too narrow "
           "with few conversations")
    return (f"Intervals are {cfg.confidence:.0%}. `[CI]` in a table is about the mean of conversations like these ({how}); "
            "the recommendation's headline range is a prediction interval for a new corpus of as many conversations like these "
            "(Student t, `recommend.new_conversations`). One conversation gives no interval; 2-3 give very wide ones (t with "
            "1-2 df). Clipped to each metric's range (F1, recall, precision in [0, 1]; tokens ≥ 0).")


THRESHOLD_PHRASE = {"similarity": " with similarity ≥ {t}", "probability": " with calibrated P(relevant) ≥ {t}",
                    "delta": " with similarity ≥ (best similarity − {t})", "ratio": " with similarity ≥ {t} × best similarity"}


def axis_labels(strategies: list[dict]) -> dict[str, str]:
    """Strategy name -> what its threshold axis shows, for the strategies whose threshold is not a similarity."""
    from bench.strategies.spec import THRESHOLD_ON

    return {s["name"]: THRESHOLD_ON.get(s.get("threshold_on"), s.get("threshold_on")) for s in strategies
            if (s.get("threshold_on") or "similarity") != "similarity"}


def threshold_phrase(strategies: list[dict], name: str, t: float) -> str:
    """How a strategy's chosen threshold reads (its ``threshold_on`` in strategies.json: a similarity by default)."""
    if t is None or math.isnan(t):
        return " (no similarity threshold)"
    on = next((s.get("threshold_on") or "similarity" for s in strategies if s.get("name") == name), "similarity")
    return THRESHOLD_PHRASE.get(on, THRESHOLD_PHRASE["similarity"]).format(t=f"{t:.2f}" if on == "similarity" else f"{t:.3g}")


METRIC_NAMES = {"f1": "F1", "f1_abstain": "F1 (abstention credited)", "recall": "recall", "tokens": "injected tokens"}


def next_knob_section(a: Analysis) -> list[str]:
    """What would help most, per dataset (computed by the analysis: ``bench.analysis.nextknob``)."""
    lines = ["## What would help most", ""]
    for ds, body in a.next_knob:
        lines += [f"**{E(ds)}** (at the recommendation):", "", *(body or ["- Nothing to suggest: no misses were attributed."]), ""]
    return lines if len(lines) > 2 else []


def releases_section(a: Analysis) -> list[str]:
    """Two label releases of one corpus in the run (``bench.analysis.releases``, saved as ``analysis/releases.csv``):
    how far the recommendation moves."""
    table = a.releases
    if table is None or table.empty:
        return []
    lines = ["## Label releases compared", "",
             "The run holds two label releases of the same conversations (identical turns, different questions or gold). "
             "Label noise moves the recommendation this far; `A's choice on B` scores release A's recommended setting "
             "against release B's labels (regret = B's best F1 minus that).", "",
             "| release A | release B | A recommends | F1 / recall on A | B recommends | F1 / recall on B | threshold shift | A's choice on B: F1 / recall | regret |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {E(r['release_a'])} | {E(r['release_b'])} | {C(r['a_choice'])} | {_fmt(r['a_f1'])} / {_fmt(r['a_recall'])} | "
                     f"{C(r['b_choice'])} | {_fmt(r['b_f1'])} / {_fmt(r['b_recall'])} | {_fmt(r['threshold_shift'], 2)} | "
                     f"{_fmt(r['a_on_b_f1'])} / {_fmt(r['a_on_b_recall'])} | {_fmt(r['regret'])} |")
    return lines + ["", "Table: `analysis/releases.csv`.", ""]


def counts_note(r) -> str:
    """Why a test on the mean can disagree with the win/loss counts (empty when they agree)."""
    d, w, lo = r["diff"], r["wins"], r["losses"]
    if math.isnan(d) or d == 0 or (d > 0) == (w >= lo):
        return ""
    if d > 0:
        how = "loses more questions than it wins", "it wins by larger margins than it loses", "higher"
    else:
        how = "wins more questions than it loses", "it loses by larger margins than it wins", "lower"
    return (f"The test is on the mean per-question difference, not on the counts: the recommendation {how[0]} "
            f"({w} won, {lo} lost), but {how[1]}, so its mean is {how[2]}.")


def first_screen_lines(a: Analysis, ds: str) -> list[str]:
    """The first screen of dataset ``ds`` (``bench.analysis.verdict.first_screen``, as the console prints it): the verdict,
    the "what to ship" table, what its intervals are about."""
    from bench.analysis.verdict import first_screen

    v = a.verdicts[a.verdicts["dataset"] == ds]
    if v.empty:
        return []
    screen = first_screen(v.iloc[0].to_dict(), a.rec.shortlist, a.rec.points, a.cfg)
    lines = [f"**{E(ds)}**: {screen.headline}.", ""]
    if screen.rows:
        lines += ["| " + " | ".join(screen.header) + " |", "|" + "---|" * len(screen.header),
                  *("| " + " | ".join(r) + " |" for r in screen.rows), "", screen.about + ".", ""]
    return lines


def recommendation_section(a: Analysis, strategies: list[dict]) -> list[str]:
    rec, sig, summary = a.rec, a.significance, a.summary
    full_context = strategy_names(strategies, "full_context")
    cfg = rec.cfg
    p = cfg.primary
    name = METRIC_NAMES[p]
    lines = ["## Recommendation", ""]
    for ds, pts in rec.points.groupby("dataset", sort=False):
        best = pts[pts["best"]]
        lines += first_screen_lines(a, ds)  # the decision first: verdict and "what to ship" table, before any prose
        if best.empty:
            continue
        b = best.iloc[0]
        setting = threshold_phrase(strategies, b["strategy"], b["threshold"])
        full = summary[(summary["dataset"] == ds) & summary["strategy"].isin(full_context)]["tokens_injected_mean"]
        full_txt = f"; full context: {full.iloc[0]:.0f}" if len(full) else ""
        k = new_corpus(cfg, b["n_conversations"])
        measured = (f"F1 {_ci(b['f1'], b['f1_pred_lo'], b['f1_pred_hi'])}, recall {_ci(b['recall'], b['recall_pred_lo'], b['recall_pred_hi'])}, "
                    f"{_ci(b['tokens'], b['tokens_pred_lo'], b['tokens_pred_hi'], 0)} injected tokens per question"
                    + (f" ({cfg.confidence:.0%} for a new corpus of {k} conversations like these)" if pd.notna(b["f1_pred_lo"]) else "")
                    + full_txt)
        v = a.verdicts[a.verdicts["dataset"] == ds]
        if len(v) and v.iloc[0]["kind"] == "too_little_data":
            lines.append(f"- **Why no firm choice**: {v.iloc[0]['reasons']}.")
        lines.append(f"- **Measured** at the recommended point, {C(b['strategy'])}{setting} on store {C(b['backend'])} with "
                     f"embedder {C(b['embedder'])}: {measured}.")
        if pd.notna(b["f1_lo"]):
            lines.append(f"- **Intervals**: the ranges above predict the mean over a new corpus of {k} conversations like these; "
                         f"the mean of conversations like these ({cfg.confidence:.0%} CI): F1 [{b['f1_lo']:.3f}, {b['f1_hi']:.3f}], "
                         f"recall [{b['recall_lo']:.3f}, {b['recall_hi']:.3f}], tokens [{b['tokens_lo']:.0f}, {b['tokens_hi']:.0f}].")
        else:
            lines.append(f"- **Intervals**: none: {b['n_conversations']} conversation says nothing about how another one would score.")
        n_excl = b.get("n_excluded", 0)
        n_excl = 0 if n_excl is None or math.isnan(n_excl) else int(n_excl)
        if not math.isnan(b["threshold_share"]):
            lines.append(f"- **How sure**: bootstrap resamples choose {_thr(b['threshold'])} in {b['threshold_share']:.0%} of cases "
                         f"({cfg.confidence:.0%} range of the chosen threshold {_thr(b['threshold_lo'])}–{_thr(b['threshold_hi'])}); "
                         f"{b['n_questions']} scored questions (+{b['n_adversarial']} adversarial"
                         + (f"; {n_excl} without gold excluded" if n_excl else "")
                         + f") in {b['n_conversations']} conversations with a scored question (the intervals' conversations)."
                         + (f" Note: {E(b['note'])}." if b["note"] else ""))
        lo = rec.loco
        lo = lo[(lo[CONFIG_KEYS] == b[CONFIG_KEYS]).all(axis=1)] if len(lo) else lo
        if len(lo) and lo.iloc[0]["n_folds"] >= 2 and not math.isnan(lo.iloc[0]["mean_gap"]):
            r = lo.iloc[0]
            d = 0 if p == "tokens" else 3  # tokens are whole numbers
            lines.append(f"- **Stable across conversations of this corpus** (leave one conversation out, {r['n_folds']} folds; "
                         "not transfer to another corpus, see Thresholds that transfer): thresholds chosen "
                         f"{r['threshold_min']:.2f}–{r['threshold_max']:.2f}; held-out {name} {r['pooled_held_out']:.{d}f} vs "
                         f"{r['in_sample']:.{d}f} tuned in-sample; LOCO gap (tuned minus held-out, mean over folds) "
                         f"{r['mean_gap']:+.{d}f} (folds {r['gap_min']:+.{d}f} to {r['gap_max']:+.{d}f}); tuning each held-out conversation "
                         f"on itself would gain {r['mean_regret']:.{d}f} on average.")
        s = sig[sig["dataset"] == ds] if len(sig) else sig
        r = runner_up(split_ties(pts, s, b.to_dict())[2]) if len(s) else None  # the one the verdict names (a tie is not one)
        if r is not None:
            at = "" if math.isnan(r["b"]["threshold"]) else f" at {r['b']['threshold']:.2f}"
            lines.append(f"- **Runner-up**: {C(r['b']['strategy'])} on {C(r['b']['backend'])}{at} ({name} {r['mean_b']:.3f}); "
                         f"{test_phrase(r, cfg.alpha)} (wins/ties/losses {r['wins']}/{r['ties']}/{r['losses']}).")
            lines += [f"  {t}" for t in [counts_note(r)] if t]
        if b["n_adversarial"]:
            lines.append(f"- **Adversarial questions** ({b['n_adversarial']}): nothing recalled (correct) for {b['abstained']:.1%} of them.")
        text = a.calibration_text(ds, b["embedder"], b["backend"])
        if text:
            lines.append(f"- **Scores**: {text}")
        lines.append("")
    lines += [f"Objective: **{cfg.describe()}** (set in `recommend:`; `recommend.min_recall` is the recall target, "
              "`recommend.objective=max_f1 recommend.min_recall=null` is plain max F1). "
              f"{intervals_sentence(cfg)} How to read this report: `docs/interpreting.md` in the recallbench repository.", ""]
    return lines


def points_section(rec: Recommendation, sig: pd.DataFrame, multi_embedder: bool, short: Mapping[str, str] | None = None) -> list[str]:
    name = METRIC_NAMES[rec.cfg.primary]
    lines = ["## Operating points (every configuration at its chosen threshold)", "",
             f"† = differs from the recommendation ({name}, paired t test over conversations, Holm-corrected, alpha {rec.cfg.alpha:g}). "
             "`chosen in` = share of bootstrap resamples that choose the same threshold.", "",
             "[CI] = about the mean of conversations like these (see the Recommendation for what it is and for the range "
             "to expect on a new corpus).", "",
             "| dataset | configuration | setting | threshold | F1 [95 % CI] | recall [CI] | precision [CI] | tokens [CI] | p99 ms | chosen in | threshold range | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in rec.points.iterrows():
        mark = " ★" if r["best"] else ""
        if len(sig):
            key = tuple(r[k] for k in CONFIG_KEYS)
            hit = sig[(sig["dataset"] == r["dataset"]) & sig["b"].map(lambda d, key=key: tuple(d[k] for k in CONFIG_KEYS) == key)]
            if len(hit) and hit.iloc[0]["significant"]:
                mark += " †"
        rng = f"{r['threshold_lo']:.2f}–{r['threshold_hi']:.2f}" if not math.isnan(r["threshold_lo"]) else "—"
        does = r.get("setting")
        does = E(does) if isinstance(does, str) and does else "—"  # what it does (top-1, top-5, similarity ≥ t)
        lines.append(f"| {E(r['dataset'])} | {E(_label(r, multi_embedder, short))}{mark} | {does} | {_thr(r['threshold'])} | {_ci(r['f1'], r['f1_lo'], r['f1_hi'])} | "
                     f"{_ci(r['recall'], r['recall_lo'], r['recall_hi'])} | {_ci(r['precision'], r['precision_lo'], r['precision_hi'])} | "
                     f"{_ci(r['tokens'], r['tokens_lo'], r['tokens_hi'], 0)} | {_fmt(r['latency_p99_ms'], 1)} | "
                     f"{_fmt(r['threshold_share'], 2)} | {rng} | {E(r['note'])} |")
    lines.append("")
    for _, b in rec.best().iterrows():
        nb = neighbours(rec, b)
        if len(nb) > 1:
            lines += [f"Around the recommendation ({E(b['dataset'])}, {E(_label(b, multi_embedder, short))}):", "",
                      "| threshold | F1 [CI] | recall [CI] | tokens [CI] | adversarial abstained |", "|---|---|---|---|---|"]
            for _, r in nb.iterrows():
                lines.append(f"| {_thr(r['threshold'])}{' ★' if r['chosen'] else ''} | {_ci(r['f1'], r['f1_lo'], r['f1_hi'])} | "
                             f"{_ci(r['recall'], r['recall_lo'], r['recall_hi'])} | {_ci(r['tokens'], r['tokens_lo'], r['tokens_hi'], 0)} | {_fmt(r['abstained'])} |")
            lines.append("")
    return lines


def test_phrase(r, alpha: float) -> str:
    """A ``stats.compare_pairs`` row in words: the difference, its t interval, p and Holm p, or why there is no test."""
    g = int(r["n_conversations"])
    if math.isnan(r["diff"]):
        return "no common questions"
    if math.isnan(r["p"]):
        return f"difference {r['diff']:+.3f} on {g} conversation{'' if g == 1 else 's'}: no interval with 1 conversation, no test"
    return (f"difference {r['diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], t test over {g} conversations "
            f"p = {r['p']:.3g}, Holm p = {r['p_holm']:.3g}: {'significant' if r['significant'] else 'not significant'} at {alpha:g}")


def significance_section(sig: pd.DataFrame, rec: Recommendation, multi_embedder: bool, short: Mapping[str, str] | None = None) -> list[str]:
    if sig.empty:
        return []
    cfg = rec.cfg
    lines = ["## Significance: recommendation vs every other configuration", "",
             "A = the recommendation. " + test_description(cfg, METRIC_NAMES[cfg.primary], "comparisons of each dataset"), ""]
    lines += significance_table(sig, ("dataset", "recommendation", "vs"), lambda r: (
        E(r["dataset"]), f"{E(_label(r['a'], multi_embedder, short))} @ {_thr(r['a']['threshold'])}",
        f"{E(_label(r['b'], multi_embedder, short))} @ {_thr(r['b']['threshold'])}"))
    return lines + [""]


def transfer_section(rec: Recommendation, multi_embedder: bool, short: Mapping[str, str] | None = None) -> list[str]:
    name = METRIC_NAMES[rec.cfg.primary]
    lines = []
    if len(rec.loco):
        lines += ["## Stability across conversations of this corpus (leave one conversation out)", "",
                  f"Per fold: choose the threshold on all other conversations, measure {name} on the held-out one. Every fold "
                  "trains on conversations of the same corpus, so this measures how stable the choice is across these "
                  "conversations, not whether it carries over to another corpus (when every fold chooses the same threshold, the "
                  "held-out result is that threshold's in-sample result). "
                  "Gap = tuned (on the others) minus held-out, averaged over folds (positive: the held-out conversation does worse); "
                  "regret = held-out at its own best threshold minus at the transferred one; optimism = in-sample minus pooled held-out.", "",
                  "| dataset | configuration | folds | thresholds chosen | std | same as full data | mean gap | gap range | mean regret | pooled held-out | in-sample | optimism |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in rec.loco.iterrows():
            rng = f"{r['threshold_min']:.2f}–{r['threshold_max']:.2f}" if not math.isnan(r["threshold_min"]) else "—"
            gr = f"{r['gap_min']:+.3f} … {r['gap_max']:+.3f}" if not math.isnan(r["gap_min"]) else "n/a"
            lines.append(f"| {E(r['dataset'])} | {E(_label(r, multi_embedder, short))} | {r['n_folds']} | {rng} | {_fmt(r['threshold_std'])} | "
                         f"{_fmt(r['share_same_as_full'], 2)} | {_fmt(r['mean_gap'])} | {gr} | {_fmt(r['mean_regret'])} | "
                         f"{_fmt(r['pooled_held_out'])} | {_fmt(r['in_sample'])} | {_fmt(r['optimism'])} |")
        lines.append("")
    if len(rec.transfer):
        p = rec.cfg.primary
        lines += ["## Across datasets (per configuration)", "",
                  f"The threshold chosen on the source dataset applied to the target; gap = target's own best {name} minus {name} at the "
                  "source's threshold. `relation`: two datasets with the same conversations (a label release) measure label "
                  "robustness, not transfer to another corpus.", "",
                  "| source → target | relation | configuration | source threshold | target at source threshold | target's own threshold | target own | gap |",
                  "|---|---|---|---|---|---|---|---|"]
        for _, r in rec.transfer.iterrows():
            lines.append(f"| {E(r['source'])} → {E(r['target'])} | {E(r['relation'])} | {E(_label(r, multi_embedder, short))} | {_thr(r['source_threshold'])} | "
                         f"{_fmt(r[f'target_{p}_at_source_threshold'])} | {_thr(r['target_threshold'])} | {_fmt(r[f'target_{p}_own'])} | {_fmt(r['gap'])} |")
        lines.append("")
    return lines


def category_section(rec: Recommendation, multi_embedder: bool, short: Mapping[str, str] | None = None) -> list[str]:
    if rec.categories.empty:
        return []
    cats = rec.categories
    best = rec.best()
    lines = ["## Per category (at the recommended configuration's threshold)", "",
             "Adversarial/abstention questions are credited when nothing is recalled (`abstained`). A category with fewer "
             f"than {rec.cfg.min_n} scored questions shows `n too small` instead of F1 and recall (`recommend.min_n`): "
             "its mean and interval would say more about the few questions than about the setting. [CI] = about the mean of "
             "conversations like these; a category found in one conversation has none.", ""]
    own = "own_threshold" in cats
    head = "| dataset | configuration | category | n | threshold | F1 [CI] | recall [CI] | tokens | abstained |"
    if own:
        head += f" own threshold | own {METRIC_NAMES[rec.cfg.primary]} | gain |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for _, b in best.iterrows():
        sub = cats[(cats[CONFIG_KEYS] == b[CONFIG_KEYS]).all(axis=1)]
        for _, r in sub.iterrows():
            small = r["n"] < rec.cfg.min_n
            f1 = "n too small" if small else _ci(r["f1"], r["f1_lo"], r["f1_hi"])
            recall = "n too small" if small else _ci(r["recall"], r["recall_lo"], r["recall_hi"])
            line = (f"| {E(r['dataset'])} | {E(_label(r, multi_embedder, short))} | {E(r['category'])} | {r['n']} | {_thr(r['threshold'])} | "
                    f"{f1} | {recall} | "
                    f"{_fmt(r['tokens'], 1)} | {_fmt(r['abstained'])} |")
            if own:
                line += f" {_thr(r['own_threshold'])} | {_fmt(r[f'own_{rec.cfg.primary}'])} | {_fmt(r['own_gain'])} |"
            lines.append(line)
    lines += ["", "Every configuration's per-category numbers are in `analysis/categories.csv`."]
    if not own:
        lines.append("Set `recommend.per_category=true` for a threshold per category.")
    return lines + [""]


MAIN_ROWS = 12  # a table longer than this goes to the appendix


def attribution_section(a: Analysis, run_dir: Path) -> tuple[list[str], list[str]]:
    """(main, appendix): the figure of miss causes per setting up front (with its table when short); the tables in the appendix."""
    from bench.analysis import attribution

    top_n, misses = a.cfg.attribution_top_n, a.misses
    title = "## Why gold memories are missed (at each strategy's chosen threshold)"
    lines = [title, "",
             f"Each missed gold memory gets one cause, in this order: filter (hidden by the strategy's filter), embedding "
             f"(not in the exact top-{top_n} by cosine), store (in the exact top-{top_n} but not returned by the store), "
             "threshold (returned, below the threshold), cap (above the threshold, below the top-k cut), decay/tier (dropped by the "
             "strategy's own policy: decay floor, tiers, routing, budget caps or the adaptive largest-gap cut). `unreturned` = not returned and no exact rank available. Strategies that ignore the store are not listed.", ""]
    if misses.empty:
        return lines + ["No misses to attribute.", ""], []
    causes = [f"{c} miss" for c in attribution.CAUSES]
    by_strategy = a.misses_by_strategy.copy()
    used = [c for c in causes if by_strategy[c].sum() > 0]
    cols = ["dataset", "configuration", "threshold", "missed", *used]
    by_strategy["configuration"] = [_label(r, a.multi_embedder, a.short) for _, r in by_strategy.iterrows()]
    table = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in by_strategy.iterrows():
        table.append("| " + " | ".join(_thr(r[c]) if c == "threshold" else E(r[c]) for c in cols) + " |")
    by_cat = a.misses_by_category.copy()
    by_cat["configuration"] = [_label(r, a.multi_embedder, a.short) for _, r in by_cat.iterrows()]
    cols = ["dataset", "configuration", "threshold", "category", "missed", *used]
    cat_table = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in by_cat.iterrows():
        cat_table.append("| " + " | ".join(_thr(r[c]) if c == "threshold" else E(r[c]) for c in cols) + " |")
    figs = []
    twins = names.identical_stores(a.summary)
    drawn = by_strategy[[(d, m, b) not in twins for d, m, b in zip(by_strategy["dataset"], by_strategy["embedder"], by_strategy["backend"])]]
    for i, (ds, g) in enumerate(drawn.groupby("dataset", sort=False)):
        g = g.assign(label=[f"{r['configuration']} @ {_thr(r['threshold'])}" for _, r in g.iterrows()])
        once = sorted({b for (d, _, b) in twins if d == ds})
        figs.append(plots.attribution(g, used, f"{ds}: missed gold memories by cause" + (f" ({', '.join(once)}: identical, not drawn)" if once else ""),
                                      run_dir / ANALYSIS / f"attribution_{i}.png"))
    lines += [f"![{p.stem}]({p.relative_to(run_dir).as_posix()})" for p in figs] + [""]
    appendix = ["## Why gold memories are missed: tables", ""]
    if len(by_strategy) <= MAIN_ROWS:
        lines += [*table, ""]
    else:
        appendix += ["Per setting:", "", *table, ""]
        lines += ["Per setting and per category: tables in the appendix.", ""]
    return lines, appendix + ["Per category:", "", *cat_table, ""]


def calibration_section(a: Analysis, out: Path) -> list[str]:
    lines = ["## Calibration: where relevant and irrelevant memories score", ""]
    twins = names.identical_stores(a.summary)
    for c in a.calibrations:
        if (c.dataset, c.embedder, c.backend) in twins:  # the same scores as its twin's: said once, in the legend
            continue
        title = f"{c.dataset} / {names.config(c.embedder, c.backend, multi_embedder=a.multi_embedder, short=a.short)} / roles {c.roles}"
        fig = plots.calibration(c.split.gold, c.split.nongold, c.cal.overlap, c.marks, title,
                                confined(out, f"calibration_{slug(c.job)}_{slug(c.trace)}_{slug(c.backend)}.png"))
        lines += [f"### {E(title)}", "", c.text, "",
                  f"AUC {c.cal.auc:.3f}; {c.cal.n_gold} gold and {c.cal.n_nongold} non-gold candidates from {c.cal.n_questions} questions.",
                  "", f"![{fig.stem}]({ANALYSIS}/{fig.name})", ""]
    return lines if a.calibrations else lines + [E(a.inputs_note) if a.inputs_note else "No trace found in the run directory.", ""]


def _emb(embedder: str, plumbing: bool) -> str:
    return f"{embedder} (plumbing)" if plumbing else embedder


def embedders_section(a: Analysis, strategies: list[dict], out: Path) -> tuple[list[str], list[str]]:
    """(main, appendix). Embedders compared (a run with more than one embedder): score bands and the F1-vs-threshold
    curves of every embedder on one chart with the thresholds quoted in articles; each strategy's operating point per
    embedder in the appendix."""
    e = a.embedders
    if e is None or e.empty or not a.multi_embedder:
        return [], []
    ref = "0.70"
    lines = ["## Embedders compared", "",
             "A similarity threshold belongs to an embedder: the same number keeps different memories under different models. "
             "Per embedder (same corpus, same store): where its gold and non-gold candidates score (the unfiltered trace), AUC, "
             f"and what the often-quoted {ref} keeps (“> 0.7 usually indicates high relevance”: the last column is the share "
             f"of candidates scoring ≥ {ref} that are gold). Each strategy's operating point per embedder: appendix. "
             "Table: `analysis/embedders.csv`."
             + (" Embedders marked *plumbing* are test-only (hashing, synthetic): never quote their numbers." if not e["for_results"].all() else ""),
             "", "| dataset | store | embedder | gold p10 / p50 / p90 | non-gold p10 / p50 / p90 | AUC | gold ≥ 0.70 | non-gold ≥ 0.70 | gold share of ≥ 0.70 |",
             "|---|---|---|---|---|---|---|---|---|"]
    twins = names.identical_stores(a.summary)
    e = e[[(d, m, b) not in twins for d, m, b in zip(e["dataset"], e["embedder"], e["backend"])]]
    for _, r in e.drop_duplicates(["dataset", "backend", "embedder"]).iterrows():
        lines.append(f"| {E(r['dataset'])} | {E(r['backend'])} | {E(_emb(short_name(r['embedder'], a.short), not r['for_results']))} | "
                     f"{_fmt(r['gold_p10'], 2)} / {_fmt(r['gold_p50'], 2)} / {_fmt(r['gold_p90'], 2)} | "
                     f"{_fmt(r['nongold_p10'], 2)} / {_fmt(r['nongold_p50'], 2)} / {_fmt(r['nongold_p90'], 2)} | {_fmt(r['auc'])} | "
                     f"{_fmt(r[f'gold_pass_{ref}'])} | {_fmt(r[f'nongold_pass_{ref}'])} | {_fmt(r[f'gold_share_above_{ref}'])} |")
    appendix = ["## Embedders compared: each strategy's operating point", "",
                f"{a.cfg.describe()}; [CI] = {a.cfg.confidence:.0%} interval about the mean of conversations like these, as in the "
                "Recommendation.", "",
                "| dataset | store | strategy | embedder | threshold | F1 [CI] | recall [CI] | tokens [CI] |", "|---|---|---|---|---|---|---|---|"]
    store_free = {r["name"] for r in strategies if r.get("uses_store") is False}  # the same for every embedder: left out
    for _, r in e[~e["strategy"].isin(store_free)].sort_values(["dataset", "backend", "strategy"], kind="stable").iterrows():
        appendix.append(f"| {E(r['dataset'])} | {E(r['backend'])} | {E(r['strategy'])} | {E(_emb(short_name(r['embedder'], a.short), not r['for_results']))} | {_thr(r['threshold'])} | "
                        f"{_ci(r['f1'], r['f1_lo'], r['f1_hi'])} | {_ci(r['recall'], r['recall_lo'], r['recall_hi'])} | "
                        f"{_ci(r['tokens'], r['tokens_lo'], r['tokens_hi'], 0)} |")
    appendix.append("")
    lines.append("")
    swept = strategy_names(strategies, "threshold") + strategy_names(strategies, "hybrid")
    curves = a.rec.curves[a.rec.curves["strategy"].isin(swept) & a.rec.curves["threshold"].notna()]
    plumbing = set(e.loc[~e["for_results"], "embedder"])
    thr = strategy_names(strategies, "threshold")
    curves = curves[[(d, m, b) not in twins for d, m, b in zip(curves["dataset"], curves["embedder"], curves["backend"])]]
    st = plots.styles([*(x["name"] for x in strategies), *a.summary["strategy"]])
    for i, ((ds, be), c) in enumerate(curves.groupby(["dataset", "backend"], sort=False)):
        c = c.assign(label=[_emb(short_name(x, a.short), x in plumbing) for x in c["embedder"]])
        fig = plots.embedder_curves(c, SEED_THRESHOLDS, f"{ds} / {be}: F1 vs threshold per embedder", confined(out, f"embedders_{i}_{slug(be)}.png"),
                                    styles_=st)
        lines += [f"![{fig.stem}]({ANALYSIS}/{fig.name})", ""]
        at = c[c["strategy"].isin(thr) & c["threshold"].round(2).isin(SEED_THRESHOLDS)]
        if len(at):
            seeds = sorted(SEED_THRESHOLDS, reverse=True)
            lines += [f"At the thresholds quoted in popular articles ({E(ds)} / {E(be)}, strategy {C(at['strategy'].iloc[0])}): F1 / recall.", "",
                      "| embedder | " + " | ".join(f"≥ {t:.2f}" for t in seeds) + " |", "|---|" + "---|" * len(seeds)]
            at = at[at["strategy"] == at["strategy"].iloc[0]]
            for label, g in at.groupby("label", sort=False):
                cells = []
                for t in seeds:
                    h = g[g["threshold"].round(2) == t]
                    cells.append(f"{_fmt(h['f1'].iloc[0])} / {_fmt(h['recall'].iloc[0])}" if len(h) else "n/a")
                lines.append(f"| {E(label)} | " + " | ".join(cells) + " |")
            lines.append("")
    return lines, appendix


SETTING = {"cosine": "cos ≥ ", "calibrated": "P ≥ ", "relative δ": "δ = ", "relative α": "α = "}


def _setting(r) -> str:
    lo, hi = r["param_min"], r["param_max"]
    if isinstance(lo, float) and math.isnan(lo):
        return f"{C(r['strategy'])}"
    rng = f"{lo:.3g}" if math.isclose(lo, hi) else f"{lo:.3g}–{hi:.3g}"
    return SETTING.get(r["family"], "") + rng


def corpora_lines(t: pd.DataFrame, plumbing: set, confidence: float) -> list[str]:
    """The ``corpora`` protocol of ``bench.analysis.transfer``: per family, chosen on one corpus, scored on another,
    with each corpus's base rate of relevant memories."""
    if t.empty:
        return []
    lines = ["### Transfer to another corpus", "",
             "Each family's setting chosen on the source corpus (all its questions, same embedder and store) and applied to "
             "the target corpus (all its questions); hindsight = the target's best fixed cosine threshold. Regret "
             f"[{confidence:.0%} interval]: mean per-question regret with a t interval over the target's conversations "
             "(`bench.analysis.stats.cluster_t_interval`; the hindsight threshold taken as fixed). The calibrated family's "
             "p is applied to the target's own P(relevant), fitted on the target's labels: the same p is a different "
             "similarity cut on a corpus with another base rate of relevant memories.", "",
             f"| source → target | embedder | store | family | setting chosen on source | F1 on target | target's best cosine F1 | regret [{confidence:.0%} CI] | conversations | target's own best in family |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in t.iterrows():
        lines.append(f"| {E(r['source'])} → {E(r['dataset'])} | {E(_emb(r['embedder'], r['embedder'] in plumbing))} | {E(r['backend'])} | {E(r['family'])} | "
                     f"{_setting(r)} | {_fmt(r['f1_held_out'])} | {_fmt(r['f1_hindsight'])} | "
                     f"{_ci(r['regret'], r['regret_lo'], r['regret_hi'])} | {r['n_conversations']} | {_fmt(r['f1_in_sample'])} |")
    rates = t.drop_duplicates("dataset")[["dataset", "gold_per_question", "gold_share"]]
    if rates["gold_share"].notna().any():
        lines += ["", "Base rate of relevant memories (what a P(relevant) cut depends on): " + "; ".join(
            f"{E(r['dataset'])} {r['gold_per_question']:.2f} gold per question, {r['gold_share']:.2%} of the memories a question "
            "can recall (the full-context selection) are gold" for _, r in rates.iterrows()) + "."]
    return lines + [""]


def thresholds_transfer_section(a: Analysis) -> list[str]:
    """Each family of cuts (raw cosine, calibrated, relative, adaptive): chosen on training data, scored on
    held-out data, its F1 regret against the best fixed cosine threshold chosen in hindsight."""
    t = a.transfer
    if t is None or t.empty or set(t["family"]) <= {"cosine"}:
        return []
    lines = ["## Thresholds that transfer", "",
             "Each family of cuts chooses its setting on training data (highest macro F1) and is scored on held-out data: "
             "a raw cosine threshold, a calibrated probability (`P(relevant) ≥ p`), relative cuts (`≥ top1 − δ`, `≥ α·top1`) and "
             "an adaptive per-question cut (largest score gap within the top k). **Regret** = F1 of the best fixed cosine threshold "
             "chosen in hindsight on the held-out data minus the family's held-out F1 (negative: it beats every fixed cosine "
             "threshold). The calibrated family **needs labelled data**: P(relevant) is the store's similarity mapped through an "
             "isotonic fit (pool adjacent violators) of gold vs non-gold candidates, fitted per embedder and store, leave one "
             "conversation out (a question is never scored by a map that saw its labels; `bench/selection/relevance.py`). Transfer to "
             "another corpus is measured only across corpora (a run over two or more datasets that share no conversation, e.g. "
             "`-m dataset=locomo,longmemeval_oracle`); leaving one conversation out measures stability within one corpus. Tables: "
             "`analysis/transfer.csv`, `analysis/transfer_folds.csv`.", ""]
    plumbing = set(a.embedders.loc[~a.embedders["for_results"], "embedder"]) if a.embedders is not None and len(a.embedders) else set()
    lines += corpora_lines(t[t["protocol"] == "corpora"], plumbing, a.cfg.confidence)
    lo = t[t["protocol"] == "loco"]
    one = sorted(set(lo.loc[lo["n_conversations"] == lo["n_questions"], "dataset"]))
    single = (f" {', '.join(one)}: one question per conversation, so the hindsight F1 is each question's own best setting "
              "(an oracle): read `regret vs it`.") if one else ""
    if len(lo):
        lines += ["### Stability across conversations of this corpus (leave one conversation out)", "",
                  "Per fold: choose on every other conversation of the same corpus, score the held-out one; hindsight = the held-out "
                  "conversation's own best cosine threshold (pooled over folds, question-weighted); `best single cosine` = one "
                  "threshold for all conversations chosen in hindsight. A regret near 0 says the choice is stable across these "
                  "conversations (when every fold chooses the same setting it is that setting's in-sample F1), not that it carries "
                  "over to another corpus." + single, "",
                  "| dataset | embedder | store | family | setting chosen (over folds) | held-out F1 | hindsight F1 | stability regret [fold range] | best single cosine F1 | regret vs it |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in lo.iterrows():
            rng = f" [{r['regret_min']:+.3f}, {r['regret_max']:+.3f}]" if not math.isnan(r["regret_min"]) else ""
            lines.append(f"| {E(r['dataset'])} | {E(_emb(r['embedder'], r['embedder'] in plumbing))} | {E(r['backend'])} | {E(r['family'])} | {_setting(r)} | {_fmt(r['f1_held_out'])} | "
                         f"{_fmt(r['f1_hindsight'])} | {r['regret']:+.3f}{rng} | {_fmt(r['f1_best_fixed'])} | {r['regret_vs_fixed']:+.3f} |")
        lines.append("")
    em = t[t["protocol"] == "embedders"]
    if len(em):
        lines += ["### Across embedders", "",
                  "The setting chosen on one embedder's run (all its questions) applied to another's (the questions both hold); "
                  "hindsight = the target embedder's best fixed cosine threshold. The calibrated family's p is applied to the "
                  "target's own calibrated scores (labels of the target needed).", "",
                  "| dataset | store | fit on → applied to | family | setting | F1 on target | target's best cosine F1 | regret | target's own best in family |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for _, r in em.iterrows():
            lines.append(f"| {E(r['dataset'])} | {E(r['backend'])} | {E(_emb(r['source'], r['source'] in plumbing))} → "
                         f"{E(_emb(r['embedder'], r['embedder'] in plumbing))} | {E(r['family'])} | {_setting(r)} | "
                         f"{_fmt(r['f1_held_out'])} | {_fmt(r['f1_hindsight'])} | {r['regret']:+.3f} | {_fmt(r['f1_in_sample'])} |")
        lines.append("")
    return lines


def pareto_section(a: Analysis, strategies: list[dict], out: Path) -> list[str]:
    """One figure per dataset: small multiples (a panel per embedder when the run has several), one line style per store,
    a store whose results repeat another's drawn once (``names.identical_stores``)."""
    multi, best = a.multi_embedder, a.rec.best()
    twins = names.identical_stores(a.summary)
    lines = ["## Pareto frontier: recall vs injected tokens", "",
             "Every configuration and threshold of the run; colour and marker = strategy (the same in every figure), "
             + ("one panel per embedder, " if multi else "") + "line style = store; the black step line is the frontier across all of "
             "them (nothing else has more recall for as few tokens); the star is the recommendation.", ""]
    st = plots.styles([*(x["name"] for x in strategies), *a.summary["strategy"]])
    for i, (ds, s) in enumerate(a.pareto.groupby("dataset", sort=False)):
        keep = [(ds, e, b) not in twins for e, b in zip(s["embedder"], s["backend"])]
        dropped = sorted({f"{b} (= {twins[(ds, e, b)]})" for e, b in zip(s["embedder"], s["backend"]) if (ds, e, b) in twins})
        note = f"drawn once: {', '.join(dropped)}, identical results on every setting" if dropped else ""
        s = s[keep].assign(_emb=[short_name(e, a.short) for e in s.loc[keep, "embedder"]])
        b = best[best["dataset"] == ds]
        b = b.assign(_emb=[short_name(e, a.short) for e in b["embedder"]])
        fig = plots.pareto(s, s["frontier"], b, f"{ds}: recall vs injected tokens", out / f"pareto_{i}.png", styles_=st,
                           panel_col="_emb" if multi else None, line_col="backend" if s["backend"].nunique() > 1 else None, note=note)
        lines += [f"![{fig.stem}]({ANALYSIS}/{fig.name})", ""]
        if note:
            lines += [f"Stores {E(', '.join(dropped))} returned exactly the same results as the store named in brackets on every "
                      "setting: each is drawn once.", ""]
    return lines


def ci_section(a: Analysis, strategies: list[dict], out: Path) -> list[str]:
    """The chosen threshold's neighbourhood with its 95 % bands: one figure per dataset, a row of panels per configuration."""
    rec, cfg, multi = a.rec, a.cfg, a.multi_embedder
    twins = names.identical_stores(a.summary)
    st = plots.styles([*(x["name"] for x in strategies), *a.summary["strategy"]])
    lines = ["## F1 and recall vs threshold with 95 % bands (per configuration)", ""]
    for i, (ds, c) in enumerate(rec.curves.groupby("dataset", sort=False)):
        c = c[c["threshold"].notna().to_numpy() & np.array([(ds, e, b) not in twins for e, b in zip(c["embedder"], c["backend"])], dtype=bool)]
        if len(c):
            c = c.assign(_cfg=[names.config(e, b, multi_embedder=multi, short=a.short) for e, b in zip(c["embedder"], c["backend"])])
            fig = plots.ci_curves(c, cfg.primary if cfg.primary in ("f1", "f1_abstain") else "f1", f"{ds}: {METRIC_NAMES[cfg.primary]} and recall vs threshold",
                                  confined(out, f"ci_{i}.png"), xlabels=axis_labels(strategies), styles_=st,
                                  panel_col="_cfg" if c["_cfg"].nunique() > 1 else None)
            lines += [f"![{fig.stem}]({ANALYSIS}/{fig.name})", ""]
    return lines if len(lines) > 2 else []


def analysis_sections(run: RunDir, a: Analysis | None, strategies: list[dict]) -> tuple[list[str], list[str]]:
    """(main sections, appendix sections): recommendation, operating points, names, Pareto frontier and miss causes up
    front; significance, transfer, calibration, per-configuration figures and long tables in the appendix. Rendered
    from ``a`` (figures written into the run's analysis/ folder)."""
    if a is None:
        return ["## Recommendation", "", f"Not available: {run.file(QUESTIONS)} is missing.", ""], []
    run_dir, rec, cfg, multi = run.path, a.rec, a.cfg, a.multi_embedder
    out = run_dir / ANALYSIS
    best = rec.best()
    lines = recommendation_section(a, strategies)
    lines += next_knob_section(a)
    lines += releases_section(a)
    lines += points_section(rec, a.significance, multi, a.short)
    lines += names.legend_section(a.summary, run.jobs(), multi, a.short)
    lines += pareto_section(a, strategies, out)
    emb_main, emb_appendix = embedders_section(a, strategies, out)
    lines += emb_main
    lines += category_section(rec, multi, a.short)
    appendix = significance_section(a.significance, rec, multi, a.short)
    appendix += transfer_section(rec, multi, a.short)
    loco_figs = []
    for i, (_, b) in enumerate(best.iterrows()):
        f = rec.loco_folds
        f = f[(f[CONFIG_KEYS] == b[CONFIG_KEYS]).all(axis=1)] if len(f) else f
        if len(f):
            fig = plots.loco(f.reset_index(drop=True), METRIC_NAMES[cfg.primary], f"Stability across conversations (LOCO): {b['dataset']} / {_label(b, multi, a.short)}",
                             out / f"loco_{i}.png")
            loco_figs += [f"![{fig.stem}]({ANALYSIS}/{fig.name})", ""]
    if loco_figs:
        at = next((j for j, x in enumerate(appendix) if x.startswith("## Stability across conversations")), None)
        if at is None:
            appendix += ["## Stability across conversations of this corpus (leave one conversation out)", "", *loco_figs]
        else:
            end = next((j for j in range(at + 1, len(appendix)) if appendix[j].startswith("## ")), len(appendix))
            appendix[end:end] = loco_figs
    appendix += thresholds_transfer_section(a)
    appendix += ci_section(a, strategies, out)
    appendix += emb_appendix
    appendix += calibration_section(a, out)
    if a.misses is not None:
        miss_main, miss_appendix = attribution_section(a, run_dir)
        lines += miss_main
        appendix += miss_appendix
    else:
        lines += ["## Why gold memories are missed", "", E(a.attribution_note or a.inputs_note) or "Not available.", ""]
    return lines, appendix


def coverage_section(jobs: list[dict]) -> list[str]:
    """Can the embedder read this corpus? Unknown-token share per language (``bench.embedders.coverage``)."""
    from bench.embedders.coverage import warning_line

    seen = {(j.get("dataset"), j.get("embedder")): j.get("coverage") for j in jobs if j.get("coverage")}
    if not seen:
        return []
    lines = ["## Can the embedder read this corpus?", "",
             ("Share of each language's characters (non-whitespace; language by script: CJK -> zh) that the embedder's "
              "tokenizer maps to unknown tokens. Above the threshold, the model does not see that text."), "",
             "| dataset | embedder | language | texts | characters | unknown share |", "|---|---|---|---:|---:|---:|"]
    warnings = []
    for (ds, emb), rec in seen.items():
        if not rec.get("measured"):
            lines.append(f"| {E(ds)} | {E(emb)} | all | | | {rec.get('reason', 'not measured')} |")
            continue
        for lang, v in rec["languages"].items():
            share = v["unknown_share"]
            lines.append(f"| {E(ds)} | {E(emb)} | {lang} | {v['texts']:,} | {v['chars']:,} | {'n/a' if math.isnan(share) else f'{share:.1%}'} |")
        if warning_line(rec, ds):
            warnings += [f"**Warning:** {warning_line(rec, ds)}.", ""]
    return [*lines, "", *warnings]


def ranked_section(run: RunDir) -> list[str]:
    """The ranked retrieval metrics of the traces (ranked.csv, bench.metrics.ranked), when the run has them."""
    from bench.metrics.ranked import report_table

    table = run.ranked()
    if table is None or not len(table):
        return []
    return ["## Ranked retrieval (the store's order, before any threshold)", "",
            "Each question's ranked hits from the trace against its gold memories (scored questions only). recall_any@k: "
            "a gold item in the top k; recall_all@k: every gold item in the top k; nDCG@k: binary relevance, ideal DCG over "
            "every gold item (trec_eval / ir_measures); MRR over the whole ranked list. Session level: the ranked turns' sessions, "
            "deduplicated in rank order (LongMemEval's turn-to-session rule), for questions whose conversation holds two or more "
            "sessions (no sessions: n/a). Mean [95 % CI about the mean of conversations like these, "
            "as `recommend.ci_method` says: Student t with conversations − 1 df by default]; ranked.csv also has the prediction interval "
            "for a new corpus of as many conversations (pred_low, pred_high) and every "
            "value. Definitions: bench/metrics/ranked.py.", "", *report_table(table), ""]


APPENDIX = "# Appendix"


def config_figures(run_dir: Path, summary: pd.DataFrame, strategies: list[dict], multi_embedder: bool,
                   short: Mapping[str, str] | None = None) -> list[str]:
    """Per dataset: precision / recall / F1 vs threshold (a row of panels per configuration) and injected tokens vs
    threshold (a panel per configuration); a store whose results repeat another's is drawn once."""
    st = plots.styles([*(s["name"] for s in strategies), *summary["strategy"]])  # one colour per strategy, every figure
    twins = names.identical_stores(summary)
    xl = axis_labels(strategies)
    lines = []
    for i, (ds, d) in enumerate(summary.groupby("dataset", sort=False)):
        panels = [(names.config(emb, be, multi_embedder=multi_embedder, short=short) if d[["embedder", "backend"]].drop_duplicates().shape[0] > 1 else "", g)
                  for (emb, be), g in d.groupby(["embedder", "backend"], sort=False) if (ds, emb, be) not in twins]
        dropped = [f"{names.config(e, b, multi_embedder=multi_embedder, short=short)} (= {twins[(ds, e, b)]})" for (dd, e, b) in twins if dd == ds]
        q = plots.quality_grid(panels, f"{ds}: precision, recall and F1 vs threshold", confined(run_dir, f"quality_vs_threshold_{i}.png"),
                               xlabels=xl, styles_=st)
        t = plots.tokens_vs_threshold(d, f"{ds}: injected tokens vs threshold", confined(run_dir, f"tokens_vs_threshold_{i}.png"),
                                      full_context=strategy_names(strategies, "full_context"), styles_=st,
                                      panels=[(lab, g[~g["strategy"].isin(xl)]) for lab, g in panels])
        lines += [f"## Figures per configuration: {E(ds)}", ""]
        if dropped:
            lines += [f"Drawn once (identical results on every setting): {E(', '.join(dropped))}.", ""]
        lines += [f"![{q.stem}]({q.name})", "", f"![{t.stem}]({t.name})", ""]
    return lines


DEFERRED_TITLE = "# recallbench report (short: defer_report=true)"


def write_deferred_report(run_dir: Path) -> Path:
    """The report.md of a run with ``defer_report=true``: the best threshold by F1 per strategy and the fixed strategies,
    from summary.csv (format A) only. The analysis (recommendation, intervals, significance, plots, calibration,
    miss attribution) is left to ``recallbench report <run dir>``, which overwrites this file with the full report."""
    from bench.output import write_atomic

    run = RunDir(run_dir)
    summary = run.summary()
    if "format" in summary:
        summary = summary[summary["format"].fillna("A") == "A"]
    cols = ["dataset", "embedder", "backend", "strategy", "threshold", "n_questions", "precision", "recall", "f1", "tokens_injected_mean",
            "token_savings"]
    cols = [c for c in cols if c in summary]
    lines = [DEFERRED_TITLE, "",
             f"The analysis (recommendation, intervals, significance, plots, calibration, miss attribution) was deferred: "
             f"`recallbench report {run.path}` (or `make report RUN={run.path}`) writes the full report.", "",
             "## Best threshold by F1 per strategy", "", _table(best_by_f1(summary[summary["threshold"].notna()]), cols), ""]
    fixed = summary[summary["threshold"].isna()]
    if len(fixed):
        lines += ["## Strategies without a threshold", "", _table(fixed, cols), ""]
    return write_atomic(run.path / REPORT_MD, lambda p: p.write_text("\n".join(lines)))


def write_report(run_dir: Path, a: Analysis | None) -> Path:
    """Write report.md, report.html and every figure into ``run_dir``, rendered from ``a``: what the analysis stage
    (``bench.analysis.tables.write_tables``) computed and saved; None when the run has no per-question rows."""
    from bench.report import answers as answer_coverage
    from bench.report import html as html_report

    run = RunDir(run_dir)
    run_dir = run.path
    summary = run.summary()
    short = shorten(summary["embedder"])  # distinct short names for this run's embedders
    jobs, card, failed, strategies = run.jobs(), run.card(), run.failed(), run.strategies()

    best = best_by_f1(summary[summary["threshold"].notna()])
    multi_emb = summary["embedder"].nunique() > 1  # one row per (store, embedder): name the embedder, else two rows look alike
    main_cols = ["configuration", "strategy", "threshold", "n_questions", "precision", "recall", "f1", "micro_f1", "hit_rate", "empty_rate", "tokens_injected_mean", "token_savings"]

    def named(df: pd.DataFrame) -> pd.DataFrame:
        return df.assign(configuration=[names.config(e, b, multi_embedder=multi_emb, short=short) for e, b in zip(df["embedder"], df["backend"])])

    lines = ["# recallbench report", ""]
    flags = summary.get("for_results", pd.Series([True] * len(summary), dtype=bool)).astype(bool)
    if not flags.any():
        lines += ["> **Plumbing run**: this used a test-only embedder (hashing). Do not quote these numbers.", ""]
    elif not flags.all():
        plumbing = ", ".join(C(e) for e in dict.fromkeys(summary.loc[~flags, "embedder"]))
        lines += [f"> **Plumbing embedder**: {plumbing} is test-only: shown beside the others for comparison, never recommended; "
                  "do not quote its numbers.", ""]
    lines += score_basis_lines(jobs)  # what the thresholds compare with, when it is not the cosine (bench.selection.basis)
    cover = coverage_section(jobs)
    for w in (w for w in cover if w.startswith("**Warning:**")):  # also on top: nothing below means much for that language
        lines += [f"> {w}", ""]
    main, appendix = analysis_sections(run, a, strategies)
    lines += main
    from bench.report.latency import latency_rows

    lat, like = latency_rows(summary, jobs)  # with the layout and where each latency was measured (bench.report.latency)
    if len(lat):
        lines += ["## Store latency (per query, store call only, warm-up discarded)", "", *like,
                  _table(named(lat), ["dataset", "configuration", "layout", "depth", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "latency origin"]), ""]
    from bench.report import degradation

    lines += degradation.section(run)  # end-to-end latency per query, timeouts and store faults (bench.selection.e2e, .degrade)
    from bench.report import live

    lines += live.section(run)  # a live replay's live/ tables, per job (bench.analysis.live)
    lines += cover
    if run.has("answers.md"):  # written by `recallbench answer` (bench.evaluation.qa)
        lines += ["## Answer-level metrics (LLM reader and judge)", "",
                  "Answer accuracy vs injected tokens vs dollars per 1,000 questions: [answers.md](answers.md).", ""]

    # Appendix: every long table and per-configuration figure, one section each (collapsed in report.html)
    app = ["## Best threshold by F1 per strategy", "", _table(named(best), main_cols), ""]
    fixed = summary[summary["threshold"].isna()]
    if len(fixed):
        app += ["## Strategies without a threshold", "", _table(named(fixed), main_cols), ""]
    app += answer_coverage.section(run, summary, best, short=short, styles_=plots.styles([*(s["name"] for s in strategies), *summary["strategy"]]))
    app += [f"## {CLAIMS_TITLE}", "",
            "Settings that agent-memory articles recommend (top-5 retrieval; similarity thresholds 0.75, 0.65 and 0.30), "
            "measured on this run's data.", "", seed_claims(summary, strategies, short), ""]
    app += strategy_sections(summary, jobs, strategies)
    app += appendix
    traces = [(j, t) for j in jobs for t in j.get("traces", [j])]
    if traces:
        app += ["## Store metrics (same vectors, same filters; exact = numpy cosine scan of the cached vectors)", "",
                "| configuration | roles | memories | ingest rows/s | read-after-write lag s | fidelity@10 vs exact | short-result rate (short lists: fewer hits than min(depth, eligible)) | max abs score diff vs exact cosine | scores off by > 1e-4 | store dir MB |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for j, t in traces:
            mb = t.get("index_bytes")
            app.append(f"| {E(names.config(j.get('embedder'), t['backend'], multi_embedder=multi_emb, short=short))} | {','.join(t['roles']) if t.get('roles') else 'all'} | {t['n_memories']} | "
                       f"{_fmt(t.get('ingest_per_second'), 0)} | {_fmt(t.get('ready_seconds'), 2)} | {_fmt(t.get('fidelity_at_10'))} | "
                       f"{_fmt(t.get('short_result_rate'))} ({t.get('short_results', 'n/a')}) | {_fmt(t.get('score_max_abs_diff'), 6)} | "
                       f"{t.get('score_mismatches_1e4', 'n/a')} of {t.get('score_pairs', 'n/a')} | {_fmt(mb / 1e6, 1) if mb else 'n/a'} |")
        app.append("")
        short_lists = [(j, t) for j, t in traces if t.get("short_results")]
        if short_lists:  # a store that returned fewer hits than it was asked for is a finding, not noise: main body
            lines += ["## Stores that returned short lists", "",
                      *(f"- {E(names.config(j.get('embedder'), t['backend'], multi_embedder=multi_emb, short=short))}: {t['short_results']} questions "
                        f"({_fmt(t.get('short_result_rate'))} of them) got fewer hits than min(depth, eligible memories)"
                        + (f", e.g. {E(t['short_example'])}" if t.get('short_example') else "") for j, t in short_lists),
                      "", "Recall and fidelity of these stores are lower than the exact store's for that reason "
                      "(README, short lists); see Store metrics in the appendix.", ""]
        filtered = [(j, t) for j, t in traces if t.get("metadata_filter")]
        if filtered:  # every question's search was narrowed to memories whose metadata passes: say so, and who applied it
            lines += ["## Metadata filter", "",
                      *(f"- {E(names.config(j.get('embedder'), t['backend'], multi_embedder=multi_emb, short=short))}: "
                        f"filter {C(json.dumps(t['metadata_filter'], sort_keys=True))}, "
                        + ("applied in the store (pushed down)" if t.get("metadata_filtered_by") == "store" else
                           "**post-filtered by recallbench** (the store cannot filter on metadata: over-fetched, then filtered; "
                           "its latency includes the over-fetch)") for j, t in filtered),
                      "", "Memories failing the filter are invisible to every question, for the store, the exact ranks and "
                      "the baselines alike (bench/replay/visibility.py); a gold memory failing it counts as a miss.", ""]
    app += ranked_section(run)
    app += conventions.section(run)  # the published conventions (LongMemEval's arithmetic), every k and type
    lines += systems_section(run)  # imported rankings beside ours: a comparison the user asked for, main body
    if "adversarial_abstain_rate" in summary and summary["n_adversarial"].max() > 0:
        adv = named(summary[summary["n_adversarial"] > 0])
        app += ["## Adversarial questions (correct recall = nothing)", "",
                _table(best_by_f1(adv[adv["threshold"].notna()]) if adv["threshold"].notna().any() else adv,
                       ["configuration", "strategy", "threshold", "n_adversarial", "adversarial_abstain_rate"]), ""]
    app += config_figures(run_dir, summary, strategies, multi_emb, short)
    app += ["## Runs", ""]
    for j in jobs:
        reuse = f"; trace reused from {E(j['reused_from'])}" if j.get("reused_from") else ""
        cut = sum(int(t.get("n_truncated") or 0) for t in j.get("traces", [j]))
        depth = f"depth {j['depth']}" + (f" (**{cut} questions had more eligible memories than the depth**: their candidates were truncated)" if cut else "")
        app.append(f"- dataset {C(j['dataset'])}, embedder {C(j['embedder'])}, store {C(j['backend'])}, {depth}, "
                   f"{j['n_memories']} memories, ingest {j['ingest_seconds']:.1f} s, ready after {j['ready_seconds']:.2f} s, "
                   f"measured {E(j['measured_at'])}{reuse}; tokens {C(j.get('tokens_encoding'))}"
                   + (f"; live replay: {j.get('live_batch')} turn(s) per write, never waited on, questions asked in timeline "
                      f"order ({E(j.get('asked_at_rule') or '')}; live/ tables)" if j.get("replay") == "live" else ""))
    if failed:
        app += ["", f"**{len(failed)} job(s) failed** (their results are absent from every table):", ""]
        app += [f"- {C(f.get('job', run_dir.name))} ({E(' '.join(f.get('overrides', [])))}): {E(f['reason'])}" for f in failed]
        lines += [f"> **{len(failed)} job(s) failed**: their results are absent from every table (Appendix, Runs).", ""]
    app += ["", "Metrics are over the scored questions (`n_questions`: non-adversarial with gold; non-adversarial questions "
            "without gold are left out of every quality column and counted in `n_excluded` in summary.csv). Precision is undefined (NaN) when nothing is recalled; "
            "`precision_n` in summary.csv says how many questions it covers. F1 = 0 when a question has gold and nothing is recalled. "
            "Macro = mean over questions; micro = pooled counts.", ""]
    app += ["## Full sweep", "", _table(named(summary[summary["threshold"].notna()]), main_cols), ""]
    if card:
        app += ["## Dataset", "", card, ""]
    lines += [APPENDIX, "", "Long tables and per-configuration figures (collapsed in report.html: click a title to open it).", "", *app]
    text = "\n".join(lines)
    path = run.write_text(REPORT_MD, text)
    html_report.write_html(run_dir, text)
    return path


def score_basis_lines(jobs: list[dict]) -> list[str]:
    """A quoted line per distinct score basis other than the cosine (``score=native | one_minus_distance``): what a
    threshold is compared with and the cosine 0.3 stands for (``bench.selection.basis.threshold_line``)."""
    from bench.selection.basis import threshold_line

    found = dict.fromkeys(line for j in jobs for t in j.get("traces") or [j] for line in [threshold_line(t)] if line)
    return [x for line in found for x in (f"> **Score**: {line}", "")]
