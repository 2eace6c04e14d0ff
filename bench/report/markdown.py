"""Markdown + HTML report and plots from a finished run directory (never reopens a store).

``collect_jobs`` merges the job directories of a multirun; ``write_report`` writes ``report.md``,
the self-contained ``report.html``, PNG plots and the analysis tables (recommendation, curves,
LOCO, categories, transfer, significance, attribution) beside ``summary.csv``. It starts with the
recommendation (``bench.analysis.recommend``). Calibration and miss attribution reload the corpus from the
run's config_resolved.yaml; when that fails the report says so and keeps the rest.
Both can be re-run at any time (``make report``).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pandas as pd

from bench.analysis import stats
from bench.analysis.recommend import (
    CONFIG_KEYS,
    Recommendation,
    RecommendConfig,
    neighbours,
    one_format,
    pareto_front,
    recommend,
)
from bench.output import write_atomic
from bench.report import plots
from bench.report.strategies import strategy_sections

log = logging.getLogger(__name__)

SEED_THRESHOLDS = (0.75, 0.65, 0.3)  # thresholds quoted by the seed articles


def collect_jobs(sweep_dir: Path) -> bool:
    """Merge ``job*/`` results of a multirun into ``sweep_dir``. False when no job finished."""
    jobs = sorted(p for p in Path(sweep_dir).glob("job*") if (p / "summary.csv").exists())
    failed = [{**json.loads((p / "failed.json").read_text()), "job": p.name} for p in sorted(Path(sweep_dir).glob("job*")) if (p / "failed.json").exists()]
    write_atomic(sweep_dir / "failed.json", lambda p: p.write_text(json.dumps(failed, indent=2)))
    if not jobs:
        log.error("no finished jobs under %s", sweep_dir)
        return False
    summaries = [pd.read_csv(j / "summary.csv") for j in jobs]
    rows_of = [pd.read_parquet(j / "questions.parquet") for j in jobs]
    metas = [{**json.loads((j / "meta.json").read_text()), "job": j.name} for j in jobs]
    for i, label in _labels_of_colliding_jobs(summaries, metas).items():  # e.g. -m backend.ef_search=64,200
        for t in (summaries[i], rows_of[i]):
            t["backend"] = t["backend"].astype(str) + f" ({label})"
        metas[i]["backend"] = f"{metas[i]['backend']} ({label})"
    summary = pd.concat(summaries, ignore_index=True)
    rows = pd.concat(rows_of, ignore_index=True)
    cards = list(dict.fromkeys((j / "dataset_card.md").read_text() for j in jobs if (j / "dataset_card.md").exists()))
    write_atomic(sweep_dir / "summary.csv", lambda p: summary.to_csv(p, index=False))
    write_atomic(sweep_dir / "questions.parquet", lambda p: rows.to_parquet(p, index=False))
    write_atomic(sweep_dir / "jobs.json", lambda p: p.write_text(json.dumps(metas, indent=2, default=str)))
    write_atomic(sweep_dir / "dataset_card.md", lambda p: p.write_text("\n\n".join(cards)))
    return True


def _labels_of_colliding_jobs(summaries: list[pd.DataFrame], metas: list[dict]) -> dict[int, str]:
    """Jobs of a multirun whose rows share a configuration (same dataset, embedder, store, strategy): a
    sweep over a setting that is not part of those names. Each gets the overrides that set it apart
    (else its job name), to be appended to its store's name so no two jobs' rows merge."""
    seen: dict[tuple, list[int]] = {}
    for i, s in enumerate(summaries):
        for key in s[["dataset", "embedder", "backend", "strategy"]].drop_duplicates().itertuples(index=False):
            seen.setdefault(tuple(key), []).append(i)
    clash = sorted({i for ids in seen.values() if len(ids) > 1 for i in ids})
    if not clash:
        return {}
    own = {i: list(metas[i].get("overrides") or []) for i in clash}
    shared = set.intersection(*(set(o) for o in own.values()))
    labels = {i: " ".join(o for o in own[i] if o not in shared) or metas[i].get("job", f"job{i}") for i in clash}
    log.warning("jobs %s measure the same configuration names; their stores are labelled %s",
                ", ".join(metas[i].get("job", str(i)) for i in clash), "; ".join(f"({v})" for v in labels.values()))
    return labels


def _fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _table(df: pd.DataFrame, cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c], 2 if c == "threshold" else (1 if "tokens" in c or "ms" in c else 3)) for c in cols) + " |")
    return "\n".join(lines)


def best_by_f1(summary: pd.DataFrame) -> pd.DataFrame:
    keys = ["dataset", "embedder", "backend", "strategy"]
    s = summary.dropna(subset=["f1"])
    return s.loc[s.groupby(keys, sort=False)["f1"].idxmax()]


def seed_claims(summary: pd.DataFrame) -> str:
    """The seed articles' claims re-measured on this run's data."""
    out = []
    for (ds, emb, be), g in summary.groupby(["dataset", "embedder", "backend"], sort=False):
        lim = g[g["strategy"].str.startswith("limit")]
        thr = g[(g["strategy"] == "threshold") & g["threshold"].round(2).isin(SEED_THRESHOLDS)]
        rows = [f"**{ds} / {emb} / {be}**", "", "| claim | setting | token savings vs full context | recall | precision | F1 | empty rate |", "|---|---|---|---|---|---|---|"]
        for _, r in lim.iterrows():
            rows.append(f"| limit-5 saves tokens (seekdb agent-memory article) | {r['strategy']} | {_fmt(r['token_savings'])} | {_fmt(r['recall'])} | {_fmt(r['precision'])} | {_fmt(r['f1'])} | {_fmt(r['empty_rate'])} |")
        for _, r in thr.sort_values("threshold", ascending=False).iterrows():
            rows.append(f"| threshold {r['threshold']:.2f} (seed articles) | threshold >= {r['threshold']:.2f} | {_fmt(r['token_savings'])} | {_fmt(r['recall'])} | {_fmt(r['precision'])} | {_fmt(r['f1'])} | {_fmt(r['empty_rate'])} |")
        out.append("\n".join(rows))
    return "\n\n".join(out)


def load_settings(run_dir: Path) -> RecommendConfig:
    """The ``recommend:`` block of the run's config_resolved.yaml (first job's for a multirun);
    defaults when the run has none. The top-level ``seed`` seeds the bootstrap unless the block sets one."""
    from omegaconf import OmegaConf

    run_dir = Path(run_dir)
    for d in [run_dir, *sorted(run_dir.glob("job*"))]:
        path = d / "config_resolved.yaml"
        if path.exists():
            cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
            block = dict(cfg.get("recommend") or {})
            block.setdefault("seed", int(cfg.get("seed", 0) or 0))
            return RecommendConfig.from_mapping(block, source=str(path))
    return RecommendConfig()


def _label(r, multi_embedder: bool) -> str:
    base = f"{r['backend']}/{r['strategy']}"
    return f"{r['embedder']}/{base}" if multi_embedder else base


def _ci(v, lo, hi, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _thr(t) -> str:
    return "—" if t is None or (isinstance(t, float) and math.isnan(t)) else f"{t:.2f}"


ANALYSIS_DIR = "analysis"  # tables and figures of the recommendation/significance/calibration/attribution sections
METRIC_NAMES = {"f1": "F1", "f1_abstain": "F1 (abstention credited)", "recall": "recall", "tokens": "injected tokens"}
ROW_METRIC = {"f1": "f1", "f1_abstain": "f1_abstain", "recall": "recall", "tokens": "tokens_injected"}


def significance(rows: pd.DataFrame, rec: Recommendation) -> pd.DataFrame:
    """Paired tests of each dataset's recommended configuration against every other feasible one
    (each at its own chosen threshold), on the same questions, Holm-corrected per dataset."""
    cfg = rec.cfg
    out = []
    for ds, pts in rec.points.groupby("dataset", sort=False):
        best = pts[pts["best"]]
        if best.empty:
            continue
        b = best.iloc[0]
        where = lambda r: {k: r[k] for k in (*CONFIG_KEYS, "threshold")}  # noqa: E731
        pairs = [(where(b), where(r)) for _, r in pts.iterrows() if r.name != b.name and r["feasible"]]
        if not pairs:
            continue
        res = stats.compare_pairs(rows, pairs, metric=ROW_METRIC[cfg.primary], alpha=cfg.alpha, unit=cfg.test_unit,
                                  n_resamples=cfg.test_resamples, seed=cfg.seed, confidence=cfg.confidence)
        res.insert(0, "dataset", ds)
        out.append(res)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def recommendation_section(rec: Recommendation, sig: pd.DataFrame, summary: pd.DataFrame, calib: dict) -> list[str]:
    cfg = rec.cfg
    p = cfg.primary
    name = METRIC_NAMES[p]
    lines = ["## Recommendation", "",
             f"Objective: **{cfg.describe()}** (set in `recommend:`). Intervals are {cfg.confidence:.0%} cluster-bootstrap "
             f"CIs ({cfg.n_resamples} resamples of whole conversations, {cfg.ci_method}, seed {cfg.seed}).", ""]
    for ds, pts in rec.points.groupby("dataset", sort=False):
        best = pts[pts["best"]]
        if best.empty:
            lines += [f"**{ds}**: no configuration meets the constraints ({cfg.describe()}). Relax them.", ""]
            continue
        b = best.iloc[0]
        setting = f" with similarity ≥ {b['threshold']:.2f}" if not math.isnan(b["threshold"]) else " (no similarity threshold)"
        full = summary[(summary["dataset"] == ds) & (summary["strategy"] == "full_context")]["tokens_injected_mean"]
        full_txt = f"; full context: {full.iloc[0]:.0f}" if len(full) else ""
        lines.append(f"**{ds}**: use **`{b['strategy']}`{setting}** on store `{b['backend']}` with embedder "
                     f"`{b['embedder']}`: F1 {_ci(b['f1'], b['f1_lo'], b['f1_hi'])}, recall {_ci(b['recall'], b['recall_lo'], b['recall_hi'])}, "
                     f"{_ci(b['tokens'], b['tokens_lo'], b['tokens_hi'], 0)} injected tokens per question{full_txt}.")
        lines.append("")
        n_excl = b.get("n_excluded", 0)
        n_excl = 0 if n_excl is None or math.isnan(n_excl) else int(n_excl)
        if not math.isnan(b["threshold_share"]):
            lines.append(f"- **How sure**: bootstrap resamples choose {b['threshold']:.2f} in {b['threshold_share']:.0%} of cases "
                         f"({cfg.confidence:.0%} range of the chosen threshold {b['threshold_lo']:.2f}–{b['threshold_hi']:.2f}); "
                         f"{b['n_questions']} scored questions (+{b['n_adversarial']} adversarial"
                         + (f"; {n_excl} without gold excluded" if n_excl else "")
                         + f") in {b['n_conversations']} conversations."
                         + (f" Note: {b['note']}." if b["note"] else ""))
        lo = rec.loco
        lo = lo[(lo[CONFIG_KEYS] == b[CONFIG_KEYS]).all(axis=1)] if len(lo) else lo
        if len(lo) and lo.iloc[0]["n_folds"] >= 2 and not math.isnan(lo.iloc[0]["mean_gap"]):
            r = lo.iloc[0]
            lines.append(f"- **Does it transfer** (leave one conversation out, {r['n_folds']} folds): thresholds chosen "
                         f"{r['threshold_min']:.2f}–{r['threshold_max']:.2f}; held-out {name} {r['pooled_held_out']:.3f} vs "
                         f"{r['in_sample']:.3f} tuned in-sample; LOCO gap (tuned minus held-out, mean over folds) "
                         f"{r['mean_gap']:+.3f} (folds {r['gap_min']:+.3f} to {r['gap_max']:+.3f}); tuning each held-out conversation "
                         f"on itself would gain {r['mean_regret']:.3f} on average.")
        s = sig[sig["dataset"] == ds] if len(sig) else sig
        if len(s):
            s = s.reindex(s["mean_b"].sub(s["mean_a"]).abs().sort_values().index)
            r = s.iloc[0]
            verdict = "significant" if r["significant"] else "not significant"
            at = "" if math.isnan(r["b"]["threshold"]) else f" at {r['b']['threshold']:.2f}"
            lines.append(f"- **Runner-up**: `{r['b']['strategy']}` on `{r['b']['backend']}`{at} "
                         f"({name} {r['mean_b']:.3f}); difference {r['diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], "
                         f"p = {r['p']:.3g}, Holm p = {r['p_holm']:.3g}: {verdict} at {cfg.alpha:g} "
                         f"(wins/ties/losses {r['wins']}/{r['ties']}/{r['losses']}).")
        if b["n_adversarial"]:
            lines.append(f"- **Adversarial questions** ({b['n_adversarial']}): nothing recalled (correct) for {b['abstained']:.1%} of them.")
        text = calib.get((ds, b["embedder"], b["backend"]))
        if text:
            lines.append(f"- **Scores**: {text}")
        lines.append("")
    return lines


def points_section(rec: Recommendation, sig: pd.DataFrame, multi_embedder: bool) -> list[str]:
    name = METRIC_NAMES[rec.cfg.primary]
    lines = ["## Operating points (every configuration at its chosen threshold)", "",
             f"† = differs from the recommendation ({name}, paired test, Holm-corrected, alpha {rec.cfg.alpha:g}). "
             "`chosen in` = share of bootstrap resamples that choose the same threshold.", "",
             "| dataset | configuration | threshold | F1 [95 % CI] | recall [CI] | precision [CI] | tokens [CI] | p99 ms | chosen in | threshold range | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in rec.points.iterrows():
        mark = " ★" if r["best"] else ""
        if len(sig):
            key = tuple(r[k] for k in CONFIG_KEYS)
            hit = sig[(sig["dataset"] == r["dataset"]) & sig["b"].map(lambda d, key=key: tuple(d[k] for k in CONFIG_KEYS) == key)]
            if len(hit) and hit.iloc[0]["significant"]:
                mark += " †"
        rng = f"{r['threshold_lo']:.2f}–{r['threshold_hi']:.2f}" if not math.isnan(r["threshold_lo"]) else "—"
        lines.append(f"| {r['dataset']} | {_label(r, multi_embedder)}{mark} | {_thr(r['threshold'])} | {_ci(r['f1'], r['f1_lo'], r['f1_hi'])} | "
                     f"{_ci(r['recall'], r['recall_lo'], r['recall_hi'])} | {_ci(r['precision'], r['precision_lo'], r['precision_hi'])} | "
                     f"{_ci(r['tokens'], r['tokens_lo'], r['tokens_hi'], 0)} | {_fmt(r['latency_p99_ms'], 1)} | "
                     f"{_fmt(r['threshold_share'], 2)} | {rng} | {r['note']} |")
    lines.append("")
    for _, b in rec.best().iterrows():
        nb = neighbours(rec, b)
        if len(nb) > 1:
            lines += [f"Around the recommendation ({b['dataset']}, {_label(b, multi_embedder)}):", "",
                      "| threshold | F1 [CI] | recall [CI] | tokens [CI] | adversarial abstained |", "|---|---|---|---|---|"]
            for _, r in nb.iterrows():
                lines.append(f"| {_thr(r['threshold'])}{' ★' if r['chosen'] else ''} | {_ci(r['f1'], r['f1_lo'], r['f1_hi'])} | "
                             f"{_ci(r['recall'], r['recall_lo'], r['recall_hi'])} | {_ci(r['tokens'], r['tokens_lo'], r['tokens_hi'], 0)} | {_fmt(r['abstained'])} |")
            lines.append("")
    return lines


def significance_section(sig: pd.DataFrame, rec: Recommendation, multi_embedder: bool) -> list[str]:
    if sig.empty:
        return []
    cfg = rec.cfg
    unit = "questions" if cfg.test_unit == "question" else "whole conversations"
    lines = ["## Significance: recommendation vs every other configuration", "",
             f"Paired sign-flip permutation test of the mean per-question {METRIC_NAMES[cfg.primary]} difference "
             f"(flipping {unit}, {cfg.test_resamples} resamples), Holm-corrected per dataset; CI of the difference by cluster bootstrap. "
             "W/T/L = questions where the recommendation wins/ties/loses."
             + (" The p-value treats questions as independent; the CI resamples whole conversations and is wider: when they disagree, "
                "trust the CI (or set `recommend.test_unit=conversation`)." if cfg.test_unit == "question" else ""), "",
             "| dataset | recommendation | vs | n | mean A | mean B | A − B [CI] | p | Holm p | significant | W/T/L |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in sig.iterrows():
        a, b = r["a"], r["b"]
        lines.append(f"| {r['dataset']} | {_label(a, multi_embedder)} @ {_thr(a['threshold'])} | {_label(b, multi_embedder)} @ {_thr(b['threshold'])} | "
                     f"{r['n']} | {_fmt(r['mean_a'])} | {_fmt(r['mean_b'])} | {_ci(r['diff'], r['ci_low'], r['ci_high'])} | "
                     f"{_fmt(r['p'], 4)} | {_fmt(r['p_holm'], 4)} | {'**yes**' if r['significant'] else 'no'} | {r['wins']}/{r['ties']}/{r['losses']} |")
    return lines + [""]


def transfer_section(rec: Recommendation, multi_embedder: bool) -> list[str]:
    name = METRIC_NAMES[rec.cfg.primary]
    lines = []
    if len(rec.loco):
        lines += ["## Does it transfer? Leave one conversation out", "",
                  f"Per fold: choose the threshold on all other conversations, measure {name} on the held-out one. "
                  "Gap = tuned (on the others) minus held-out, averaged over folds (positive: the held-out conversation does worse); "
                  "regret = held-out at its own best threshold minus at the transferred one; optimism = in-sample minus pooled held-out.", "",
                  "| dataset | configuration | folds | thresholds chosen | std | same as full data | mean gap | gap range | mean regret | pooled held-out | in-sample | optimism |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in rec.loco.iterrows():
            rng = f"{r['threshold_min']:.2f}–{r['threshold_max']:.2f}" if not math.isnan(r["threshold_min"]) else "—"
            gr = f"{r['gap_min']:+.3f} … {r['gap_max']:+.3f}" if not math.isnan(r["gap_min"]) else "n/a"
            lines.append(f"| {r['dataset']} | {_label(r, multi_embedder)} | {r['n_folds']} | {rng} | {_fmt(r['threshold_std'])} | "
                         f"{_fmt(r['share_same_as_full'], 2)} | {_fmt(r['mean_gap'])} | {gr} | {_fmt(r['mean_regret'])} | "
                         f"{_fmt(r['pooled_held_out'])} | {_fmt(r['in_sample'])} | {_fmt(r['optimism'])} |")
        lines.append("")
    if len(rec.transfer):
        p = rec.cfg.primary
        lines += ["## Cross-dataset transfer", "",
                  f"The threshold chosen on the source dataset applied to the target; gap = target's own best {name} minus {name} at the source's threshold.", "",
                  "| source → target | configuration | source threshold | target at source threshold | target's own threshold | target own | gap |",
                  "|---|---|---|---|---|---|---|"]
        for _, r in rec.transfer.iterrows():
            lines.append(f"| {r['source']} → {r['target']} | {_label(r, multi_embedder)} | {_thr(r['source_threshold'])} | "
                         f"{_fmt(r[f'target_{p}_at_source_threshold'])} | {_thr(r['target_threshold'])} | {_fmt(r[f'target_{p}_own'])} | {_fmt(r['gap'])} |")
        lines.append("")
    return lines


def category_section(rec: Recommendation, multi_embedder: bool) -> list[str]:
    if rec.categories.empty:
        return []
    cats = rec.categories
    best = rec.best()
    lines = ["## Per category (at the recommended configuration's threshold)", "",
             "Adversarial/abstention questions are credited when nothing is recalled (`abstained`).", ""]
    own = "own_threshold" in cats
    head = "| dataset | configuration | category | n | threshold | F1 [CI] | recall [CI] | tokens | abstained |"
    if own:
        head += f" own threshold | own {METRIC_NAMES[rec.cfg.primary]} | gain |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for _, b in best.iterrows():
        sub = cats[(cats[CONFIG_KEYS] == b[CONFIG_KEYS]).all(axis=1)]
        for _, r in sub.iterrows():
            line = (f"| {r['dataset']} | {_label(r, multi_embedder)} | {r['category']} | {r['n']} | {_thr(r['threshold'])} | "
                    f"{_ci(r['f1'], r['f1_lo'], r['f1_hi'])} | {_ci(r['recall'], r['recall_lo'], r['recall_hi'])} | "
                    f"{_fmt(r['tokens'], 1)} | {_fmt(r['abstained'])} |")
            if own:
                line += f" {_thr(r['own_threshold'])} | {_fmt(r[f'own_{rec.cfg.primary}'])} | {_fmt(r['own_gain'])} |"
            lines.append(line)
    lines += ["", "Every configuration's per-category numbers are in `categories.csv`."]
    if not own:
        lines.append("Set `recommend.per_category=true` for a threshold per category.")
    return lines + [""]


def attribution_section(misses: pd.DataFrame, rows: pd.DataFrame, top_n: int, run_dir: Path, multi_embedder: bool) -> tuple[list[str], list[Path]]:
    from bench.analysis import attribution

    out = run_dir / ANALYSIS_DIR
    lines = ["## Why gold memories are missed (at each strategy's chosen threshold)", "",
             f"Each missed gold memory gets one cause, in this order: filter (hidden by the strategy's filter), embedding "
             f"(not in the exact top-{top_n} by cosine), store (in the exact top-{top_n} but not returned by the store), "
             "threshold (returned, below the threshold), cap (above the threshold, below the top-k cut), decay/tier (dropped by the "
             "strategy's own policy: decay floor, tiers, routing or budget caps). `unreturned` = not returned and no exact rank available. Strategies that ignore the store are not listed.", ""]
    if misses.empty:
        return lines + ["No misses to attribute.", ""], []
    by_strategy = attribution.counts(misses, by=["dataset", "embedder", "backend", "strategy", "threshold"])
    causes = [f"{c} miss" for c in attribution.CAUSES]
    used = [c for c in causes if by_strategy[c].sum() > 0]
    cols = ["dataset", "configuration", "threshold", "missed", *used]
    by_strategy["configuration"] = [_label(r, multi_embedder) for _, r in by_strategy.iterrows()]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in by_strategy.iterrows():
        lines.append("| " + " | ".join(_thr(r[c]) if c == "threshold" else str(r[c]) for c in cols) + " |")
    by_cat = attribution.counts(misses)
    by_cat["configuration"] = [_label(r, multi_embedder) for _, r in by_cat.iterrows()]
    cols = ["dataset", "configuration", "threshold", "category", "missed", *used]
    lines += ["", "Per category:", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in by_cat.iterrows():
        lines.append("| " + " | ".join(_thr(r[c]) if c == "threshold" else str(r[c]) for c in cols) + " |")
    write_atomic(out / "attribution_counts.csv", lambda p: by_cat.to_csv(p, index=False))
    figs = []
    for i, (ds, g) in enumerate(by_strategy.groupby("dataset", sort=False)):
        g = g.assign(label=[f"{r['configuration']} @ {_thr(r['threshold'])}" for _, r in g.iterrows()])
        figs.append(plots.attribution(g, used, f"{ds}: missed gold memories by cause", out / f"attribution_{i}.png"))
    return lines + [""] + [f"![{p.stem}]({p.relative_to(run_dir).as_posix()})" for p in figs] + [""], figs


def analysis_sections(run_dir: Path, summary: pd.DataFrame, settings: RecommendConfig | None = None) -> list[str]:
    """Recommendation, operating points, Pareto frontier, significance, transfer, per category,
    calibration and miss attribution. Writes their tables (CSV) and figures into ``run_dir``."""
    from bench.analysis import attribution, calibration

    run_dir = Path(run_dir)
    out = run_dir / ANALYSIS_DIR
    rows_path = run_dir / "questions.parquet"
    if not rows_path.exists():
        return ["## Recommendation", "", f"Not available: {rows_path} is missing.", ""]
    rows = one_format(pd.read_parquet(rows_path))
    summary = one_format(summary)
    cfg = settings or load_settings(run_dir)
    rec = recommend(rows, cfg, source=str(rows_path))
    sig = significance(rows, rec)
    multi_embedder = rows["embedder"].nunique() > 1
    for name, df in (("recommendation", rec.points), ("curves", rec.curves), ("loco", rec.loco), ("loco_folds", rec.loco_folds),
                     ("categories", rec.categories), ("transfer", rec.transfer)):
        write_atomic(out / f"{name}.csv", lambda p, df=df: df.to_csv(p, index=False))
    if len(sig):
        flat = sig.assign(a=sig["a"].map(json.dumps, na_action="ignore"), b=sig["b"].map(json.dumps, na_action="ignore"))
        write_atomic(out / "significance.csv", lambda p: flat.to_csv(p, index=False))

    # calibration and attribution need the corpus (gold) and the traces: rebuilt from the run's config
    calib_text, calib_lines, misses, attr_note = {}, [], pd.DataFrame(), ""
    try:
        memo: dict = {}
        jobs_in = [attribution.load_job(d, memo) for d in attribution._job_dirs(run_dir)]
    except Exception as e:  # noqa: BLE001  (the rest of the report must not depend on the corpus being here)
        log.warning("calibration/attribution skipped: %s: %s", type(e).__name__, e)
        jobs_in, attr_note = [], f"Not available: could not reload the corpus and traces ({type(e).__name__}: {e})."
    best = rec.best()
    done = set()  # jobs of a multirun share traces: one calibration per (dataset, embedder, store, roles)
    for ji, job in enumerate(jobs_in):
        gold = {q.question_id: [f"{q.conversation_id}|{e}" for e in q.evidence] for q in job.corpus.questions}
        adv = {q.question_id for q in job.corpus.questions if q.adversarial}
        for ti, trace in enumerate(job.traces):
            ds, be = trace.meta["dataset"], trace.meta["backend"]
            roles = ",".join(trace.meta["roles"]) if trace.meta.get("roles") else "all"
            if (ds, job.embedder, be, roles) in done:
                continue
            done.add((ds, job.embedder, be, roles))
            split = calibration.split_scores(trace.table, gold, skip=adv)
            cal = calibration.calibrate(split)
            b = best[(best["dataset"] == ds) & (best["embedder"] == job.embedder) & (best["backend"] == be)]
            marks = {"reference 0.70": 0.7}
            if len(b) and not math.isnan(b.iloc[0]["threshold"]):
                marks = {f"recommended {b.iloc[0]['threshold']:.2f}": float(b.iloc[0]["threshold"]), **marks}
            text = calibration.describe(cal, split, thresholds=sorted(set(marks.values())))
            if roles == "all":
                calib_text[(ds, job.embedder, be)] = text
            title = f"{ds} / {job.embedder} / {be} / roles {roles}"
            fig = plots.calibration(split.gold, split.nongold, cal.overlap, marks, title, out / f"calibration_{ji}_{ti}_{be}.png")
            calib_lines += [f"### {title}", "", text, "",
                            f"AUC {cal.auc:.3f}; {cal.n_gold} gold and {cal.n_nongold} non-gold candidates from {cal.n_questions} questions.",
                            "", f"![{fig.stem}]({ANALYSIS_DIR}/{fig.name})", ""]
    if jobs_in:
        try:
            chosen = {(r.dataset, r.embedder, r.backend, r.strategy): float(r.threshold) for r in rec.points.itertuples(index=False)}
            parts = [attribution.attribute_job(j, chosen, top_n=cfg.attribution_top_n, memo=memo) for j in jobs_in]
            misses = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
            write_atomic(out / "attribution.parquet", lambda p: misses.to_parquet(p, index=False))
        except Exception as e:  # noqa: BLE001
            log.warning("attribution skipped: %s: %s", type(e).__name__, e)
            attr_note = f"Not available: {type(e).__name__}: {e}"

    lines = recommendation_section(rec, sig, summary, calib_text)
    lines += points_section(rec, sig, multi_embedder)
    lines += ["## Pareto frontier: recall vs injected tokens", "",
              "Every configuration and threshold of the run; the black step line is the frontier (nothing else has more recall for "
              "as few tokens); the star is the recommendation.", ""]
    for i, (ds, s) in enumerate(summary.groupby("dataset", sort=False)):
        s = s.assign(label=[_label(r, multi_embedder) for _, r in s.iterrows()])
        front = pd.Series(pareto_front(s["tokens_injected_mean"].to_numpy(), s["recall"].to_numpy()), index=s.index)
        fig = plots.pareto(s, front, best[best["dataset"] == ds], f"{ds}: recall vs injected tokens", out / f"pareto_{i}.png")
        lines += [f"![{fig.stem}]({ANALYSIS_DIR}/{fig.name})", ""]
    for i, ((ds, emb, be), c) in enumerate(rec.curves.groupby(["dataset", "embedder", "backend"], sort=False)):
        c = c[c["threshold"].notna()]
        if len(c):
            fig = plots.ci_curves(c, cfg.primary if cfg.primary in ("f1", "f1_abstain") else "f1", f"{ds} / {emb} / {be}", out / f"ci_{i}_{be}.png")
            lines += [f"![{fig.stem}]({ANALYSIS_DIR}/{fig.name})", ""]
    lines += significance_section(sig, rec, multi_embedder)
    lines += transfer_section(rec, multi_embedder)
    for i, (_, b) in enumerate(best.iterrows()):
        f = rec.loco_folds
        f = f[(f[CONFIG_KEYS] == b[CONFIG_KEYS]).all(axis=1)] if len(f) else f
        if len(f):
            fig = plots.loco(f.reset_index(drop=True), METRIC_NAMES[cfg.primary], f"LOCO: {b['dataset']} / {_label(b, multi_embedder)}",
                             out / f"loco_{i}.png")
            lines += [f"![{fig.stem}]({ANALYSIS_DIR}/{fig.name})", ""]
    lines += category_section(rec, multi_embedder)
    lines += ["## Calibration: where relevant and irrelevant memories score", ""]
    lines += calib_lines or [attr_note or "No trace found in the run directory.", ""]
    if jobs_in and not attr_note:
        att_lines, _ = attribution_section(misses, rows, cfg.attribution_top_n, run_dir, multi_embedder)
        lines += att_lines
    else:
        lines += ["## Why gold memories are missed", "", attr_note or "Not available.", ""]
    return lines


def write_report(run_dir: Path, settings: RecommendConfig | None = None) -> Path:
    """Write report.md, report.html, the analysis tables (CSV) and every figure into ``run_dir``."""
    from bench.report import html as html_report

    run_dir = Path(run_dir)
    summary = pd.read_csv(run_dir / "summary.csv")
    jobs = json.loads((run_dir / "jobs.json").read_text()) if (run_dir / "jobs.json").exists() else [json.loads((run_dir / "meta.json").read_text())]
    card = (run_dir / "dataset_card.md").read_text() if (run_dir / "dataset_card.md").exists() else ""
    failed = json.loads((run_dir / "failed.json").read_text()) if (run_dir / "failed.json").exists() else []

    figures = []
    for i, ((ds, emb, be), g) in enumerate(summary.groupby(["dataset", "embedder", "backend"], sort=False)):
        title = f"{ds} / {emb} / {be}"
        tag = f"{i}_{be}"
        figures.append((title, [
            plots.quality_vs_threshold(g, title, run_dir / f"quality_vs_threshold_{tag}.png"),
            plots.tokens_vs_threshold(g, title, run_dir / f"tokens_vs_threshold_{tag}.png"),
            plots.recall_vs_tokens(g, title, run_dir / f"recall_vs_tokens_{tag}.png"),
        ]))

    best = best_by_f1(summary[summary["threshold"].notna()])
    main_cols = ["backend", "strategy", "threshold", "n_questions", "precision", "recall", "f1", "micro_f1", "hit_rate", "empty_rate", "tokens_injected_mean", "token_savings"]
    lines = ["# recallbench report", ""]
    if not summary.get("for_results", pd.Series([True])).all():
        lines += ["> **Plumbing run**: this used a test-only embedder (hashing). Do not quote these numbers.", ""]
    lines += analysis_sections(run_dir, summary, settings)
    lines += ["## Runs", ""]
    for j in jobs:
        reuse = f"; trace reused from {j['reused_from']}" if j.get("reused_from") else ""
        cut = sum(int(t.get("n_truncated") or 0) for t in j.get("traces", [j]))
        depth = f"depth {j['depth']}" + (f" (**{cut} questions had more eligible memories than the depth**: their candidates were truncated)" if cut else "")
        lines.append(f"- dataset `{j['dataset']}`, embedder `{j['embedder']}`, store `{j['backend']}`, {depth}, "
                     f"{j['n_memories']} memories, ingest {j['ingest_seconds']:.1f} s, ready after {j['ready_seconds']:.2f} s, "
                     f"measured {j['measured_at']}{reuse}; tokens `{j.get('tokens_encoding')}`")
    if failed:
        lines += ["", f"**{len(failed)} job(s) failed** (their results are absent from every table):", ""]
        lines += [f"- `{f['job']}` ({' '.join(f.get('overrides', []))}): {f['reason']}" for f in failed]
    lines += ["", "Metrics are over the scored questions (`n_questions`: non-adversarial with gold; non-adversarial questions "
              "without gold are left out of every quality column and counted in `n_excluded` in summary.csv). Precision is undefined (NaN) when nothing is recalled; "
              "`precision_n` in summary.csv says how many questions it covers. F1 = 0 when a question has gold and nothing is recalled. "
              "Macro = mean over questions; micro = pooled counts.", ""]
    lines += ["## Best threshold by F1 per strategy", "", _table(best, main_cols), ""]
    fixed = summary[summary["threshold"].isna()]
    if len(fixed):
        lines += ["## Strategies without a threshold", "", _table(fixed, main_cols), ""]
    lines += ["## Seed claims, re-measured", "", seed_claims(summary), ""]
    lines += strategy_sections(summary, jobs)
    lat = summary[summary["latency_p50_ms"].notna()].drop_duplicates(["dataset", "embedder", "backend"])
    if len(lat):
        lines += ["## Store latency (per query, store call only, warm-up discarded)", "",
                  _table(lat, ["dataset", "backend", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms"]), ""]
    traces = [t for j in jobs for t in j.get("traces", [j])]
    if traces:
        lines += ["## Store metrics (same vectors, same filters; exact = numpy cosine scan of the cached vectors)", "",
                  "| store | roles | memories | ingest rows/s | read-after-write lag s | fidelity@10 vs exact | short-result rate | max abs score diff vs exact cosine | scores off by > 1e-4 | store dir MB |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for t in traces:
            mb = t.get("index_bytes")
            lines.append(f"| {t['backend']} | {','.join(t['roles']) if t.get('roles') else 'all'} | {t['n_memories']} | "
                         f"{_fmt(t.get('ingest_per_second'), 0)} | {_fmt(t.get('ready_seconds'), 2)} | {_fmt(t.get('fidelity_at_10'))} | "
                         f"{_fmt(t.get('short_result_rate'))} | {_fmt(t.get('score_max_abs_diff'), 6)} | "
                         f"{t.get('score_mismatches_1e4', 'n/a')} of {t.get('score_pairs', 'n/a')} | {_fmt(mb / 1e6, 1) if mb else 'n/a'} |")
        lines.append("")
    if "adversarial_abstain_rate" in summary and summary["n_adversarial"].max() > 0:
        adv = summary[summary["n_adversarial"] > 0]
        lines += ["## Adversarial questions (correct recall = nothing)", "",
                  _table(best_by_f1(adv[adv["threshold"].notna()]) if adv["threshold"].notna().any() else adv,
                         ["backend", "strategy", "threshold", "n_adversarial", "adversarial_abstain_rate"]), ""]
    for title, paths in figures:
        lines += [f"## Plots: {title}", ""] + [f"![{p.stem}]({p.name})" for p in paths] + [""]
    lines += ["## Full sweep", "", _table(summary[summary["threshold"].notna()], main_cols), ""]
    if card:
        lines += ["## Dataset", "", card, ""]
    text = "\n".join(lines)
    path = write_atomic(run_dir / "report.md", lambda p: p.write_text(text))
    html_report.write_html(run_dir, text)
    return path


def main(argv: list[str] | None = None) -> int:
    from bench.tools.common import fail, parser, reports_dir, setup_logging

    ap = parser("report", "Rebuild report.md, report.html and the plots of a finished run.",
                examples=["recallbench report                              # reports/latest",
                          "recallbench report reports/runs/<time>_<id>     # any finished run"])
    ap.add_argument("run_dir", nargs="?", default=str(reports_dir("latest")), help="default reports/latest")
    args = ap.parse_args(argv)
    setup_logging()
    run_dir = Path(args.run_dir)
    if not (run_dir / "summary.csv").exists():
        return fail(f"{run_dir}/summary.csv not found (run `recallbench sweep` first)")
    print(write_report(run_dir))
    return 0


if __name__ == "__main__":
    from bench.tools.common import entry

    raise SystemExit(entry(main))
