"""A finished run's analysis: every table the report shows, computed from the run directory alone.

``analyse(run)`` reads (through ``bench.results.rundir.RunDir``) the per-question rows, the summary and the
``recommend:`` settings, and for calibration and miss attribution each job's corpus snapshot, traces
and strategies; it returns an ``Analysis``: the recommendation (``bench.analysis.recommend``), the
significance of the recommendation against every other configuration, the Pareto frontier, score
calibration per (dataset, embedder, store, role filter), the attributed misses with their counts, the
embedders compared (``bench.analysis.embedders``), the thresholds that transfer (``bench.analysis.transfer``),
what would help most (``bench.analysis.nextknob``) and how far the recommendation moves between two label releases
(``bench.analysis.releases``). ``save`` writes its tables into the run's ``analysis/`` folder; ``write_tables``
is the stage the CLI runs before the report (``analyse`` then ``save``). Rendering (markdown, HTML, figures) is
``bench.report``'s; nothing here draws.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.analysis import attribution, calibration, embedders, nextknob, releases, stats
from bench.analysis import transfer as transfer_
from bench.analysis.recommend import (
    CONFIG_KEYS,
    Recommendation,
    RecommendConfig,
    one_format,
    pareto_front,
    recommend,
)
from bench.analysis.verdict import verdict_table
from bench.embedders.names import shorten
from bench.results.rundir import META, QUESTIONS, RunDir, load_job, strategy_names

log = logging.getLogger(__name__)

ROW_METRIC = {"f1": "f1", "f1_abstain": "f1_abstain", "recall": "recall", "tokens": "tokens_injected"}
REFERENCE_THRESHOLD = 0.7  # marked on every calibration (a threshold often quoted)


@dataclass(frozen=True)
class ScoreCalibration:
    """Where one (dataset, embedder, store, role filter)'s gold and non-gold candidates score."""

    dataset: str
    embedder: str
    backend: str
    roles: str  # "all", or the role filter joined by commas
    job: int  # index of the job among the run's finished jobs, and of the trace in it
    trace: int
    split: calibration.ScoreSplit
    cal: calibration.Calibration
    marks: dict  # label -> threshold marked on the figure (the recommended one, the reference)
    text: str  # calibration.describe at those thresholds


@dataclass(frozen=True)
class Analysis:
    cfg: RecommendConfig
    rows: pd.DataFrame  # per-question rows, one injection format
    summary: pd.DataFrame  # one injection format
    rec: Recommendation
    significance: pd.DataFrame  # the recommendation vs every other feasible configuration (stats.compare_pairs)
    pareto: pd.DataFrame  # summary rows with ``frontier`` (nothing else has more recall for as few tokens, per dataset)
    calibrations: tuple[ScoreCalibration, ...]
    misses: pd.DataFrame | None  # one row per missed gold memory (attribution.attribute_job); None: not attributed
    misses_by_strategy: pd.DataFrame | None  # attribution.counts per configuration and threshold
    misses_by_category: pd.DataFrame | None  # ... and category
    verdicts: pd.DataFrame  # one per dataset: use / too little data / none, and the power estimate (bench.analysis.verdict)
    inputs_note: str = ""  # why calibration and attribution are missing ("" when the corpus and traces were read)
    attribution_note: str = ""  # why attribution alone is missing
    embedders: pd.DataFrame | None = None  # embedders.table: per embedder and strategy, operating point and score bands
    transfer: pd.DataFrame | None = None  # transfer.transfer: each family's F1 regret (LOCO; across embedders)
    transfer_folds: pd.DataFrame | None = None  # its LOCO folds
    short: Mapping[str, str] = field(default_factory=dict)  # the run's embedders' short names (bench.embedders.names.shorten)
    next_knob: tuple[tuple[str, tuple[str, ...]], ...] = ()  # per recommendation: (dataset, nextknob.next_knob's lines)
    releases: pd.DataFrame | None = None  # releases.moves over the run's label releases of one corpus (empty: none)

    @property
    def multi_embedder(self) -> bool:
        return self.rows["embedder"].nunique() > 1

    def calibration_text(self, dataset: str, embedder: str, backend: str) -> str | None:
        """The sentence for the unfiltered trace of (dataset, embedder, store), None when there is none."""
        for c in self.calibrations:
            if (c.dataset, c.embedder, c.backend, c.roles) == (dataset, embedder, backend, "all"):
                return c.text
        return None


def load_settings(run: RunDir) -> RecommendConfig:
    """The ``recommend:`` block of the run's config_resolved.yaml (first job's for a multirun); the
    shipped defaults when the run has none. The top-level ``seed`` seeds the bootstrap unless the block sets one."""
    path = run.settings_file()
    return RecommendConfig.from_settings(run.settings(), source=str(path)) if path else RecommendConfig.defaults()


def significance(rows: pd.DataFrame, rec: Recommendation) -> pd.DataFrame:
    """Paired t tests over conversations (``stats.compare_pairs``) of each dataset's recommended configuration against
    every other feasible one (each at its own chosen threshold), on the same questions, Holm-corrected per dataset."""
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
        res = stats.compare_pairs(rows, pairs, metric=ROW_METRIC[cfg.primary], alpha=cfg.alpha, confidence=cfg.confidence)
        res.insert(0, "dataset", ds)
        out.append(res)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def pareto(summary: pd.DataFrame) -> pd.DataFrame:
    """Every configuration and threshold of ``summary`` with ``frontier``: on the recall-vs-tokens
    Pareto frontier of its dataset."""
    parts = []
    for _, s in summary.groupby("dataset", sort=False):
        parts.append(s.assign(frontier=pareto_front(s["tokens_injected_mean"].to_numpy(), s["recall"].to_numpy())))
    return pd.concat(parts) if parts else summary.assign(frontier=pd.Series(dtype=bool))


def calibrations(jobs, best: pd.DataFrame, not_similarity: frozenset = frozenset()) -> list[ScoreCalibration]:
    """Score calibration of every trace of ``jobs`` (``bench.results.rundir.JobInputs``); jobs of a multirun share
    traces: one per (dataset, embedder, store, role filter). The recommended threshold is marked, unless
    the recommended strategy is in ``not_similarity`` (its threshold is a delta, an alpha or a probability)."""
    out, done = [], set()
    for ji, job in enumerate(jobs):
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
            marks = {f"reference {REFERENCE_THRESHOLD:.2f}": REFERENCE_THRESHOLD}
            if len(b) and not math.isnan(b.iloc[0]["threshold"]) and b.iloc[0]["strategy"] not in not_similarity:
                marks = {f"recommended {b.iloc[0]['threshold']:.2f}": float(b.iloc[0]["threshold"]), **marks}
            text = calibration.describe(cal, split, thresholds=sorted(set(marks.values())))
            out.append(ScoreCalibration(ds, job.embedder, be, roles, ji, ti, split, cal, marks, text))
    return out


def analyse(run: RunDir, settings: RecommendConfig | None = None) -> Analysis | None:
    """The analysis of a finished run (see the module docstring); None when it has no per-question rows.

    Calibration and attribution need each job's corpus snapshot and traces: when those cannot be read
    the rest is still computed and ``inputs_note`` says why."""
    if not run.has(QUESTIONS):
        return None
    rows = one_format(run.questions())
    summary = one_format(run.summary())
    cfg = settings or load_settings(run)
    flags = summary.drop_duplicates("embedder").set_index("embedder")["for_results"].astype(bool).to_dict() \
        if "for_results" in summary else {}
    plumbing = frozenset(e for e, ok in flags.items() if not ok)
    # beside a real embedder, a plumbing one (hashing, synthetic) is compared but never recommended
    records = run.strategies()  # strategies.json: each setting named for what it does
    rec = recommend(rows, cfg, source=str(run.file(QUESTIONS)), never_best=plumbing if len(plumbing) < len(flags) else frozenset(),
                    strategies=records)
    best = rec.best()
    inputs_note, attr_note, misses, by_strategy, by_category = "", "", None, None, None
    try:
        memo: dict = {}
        jobs = [load_job(j, memo) for j in run.job_dirs()]
    except Exception as e:  # noqa: BLE001  (the rest of the analysis must not depend on the corpus snapshot)
        log.warning("calibration/attribution skipped: %s: %s", type(e).__name__, e)
        jobs, inputs_note = [], f"Not available: could not read the corpus snapshot and traces ({type(e).__name__}: {e})."
    if jobs:
        try:
            chosen = {(r.dataset, r.embedder, r.backend, r.strategy): float(r.threshold) for r in rec.points.itertuples(index=False)}
            parts = [attribution.attribute_job(j, chosen, top_n=cfg.attribution_top_n, memo=memo) for j in jobs]
            misses = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
            by_strategy = attribution.counts(misses, by=["dataset", "embedder", "backend", "strategy", "threshold"])
            by_category = attribution.counts(misses)
        except Exception as e:  # noqa: BLE001
            log.warning("attribution skipped: %s: %s", type(e).__name__, e)
            misses, attr_note = None, f"Not available: {type(e).__name__}: {e}"
    not_similarity = frozenset(r["name"] for r in records if r.get("threshold_on", "similarity") != "similarity")
    cals = tuple(calibrations(jobs, best, not_similarity))
    moved, folds = transfer_.transfer(rows, transfer_.families(records), confidence=cfg.confidence)
    sig = significance(rows, rec)
    short = shorten(summary["embedder"])
    verdicts = verdict_table(rec.points, sig, cfg, metric=ROW_METRIC[cfg.primary], shortlist=rec.shortlist, short=short)
    return Analysis(cfg=cfg, rows=rows, summary=summary, rec=rec, significance=sig, pareto=pareto(summary),
                    calibrations=cals, misses=misses, misses_by_strategy=by_strategy,
                    misses_by_category=by_category, verdicts=verdicts, inputs_note=inputs_note, attribution_note=attr_note,
                    embedders=embedders.table(rec.points, cals, flags), transfer=moved, transfer_folds=folds, short=short,
                    next_knob=next_knobs(run, rec, summary, by_strategy, records),
                    releases=releases.moves(releases.release_pairs(release_digests(run)), best, summary))


def next_knobs(run: RunDir, rec: Recommendation, summary: pd.DataFrame, by_strategy: pd.DataFrame | None,
               records: list[dict]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """What would help most at each dataset's recommendation (``nextknob.next_knob``): its misses by cause, the
    summary, and the offline embedders the run did not use. Nothing without the summary's recall and token savings."""
    if not {"recall", "token_savings"} <= set(summary.columns):
        return ()
    used = {str((j.settings().get("embedder") or {}).get("_target_", "")) for j in run.job_dirs() if j.settings_file()}
    offline = nextknob.offline_embedders(exclude_targets=sorted(used))
    out = []
    for _, b in rec.best().iterrows():
        causes = {}
        if by_strategy is not None and len(by_strategy):
            m = by_strategy[(by_strategy[CONFIG_KEYS] == b[CONFIG_KEYS]).all(axis=1)]
            if len(m):
                causes = {c[: -len(" miss")]: int(m.iloc[0][c]) for c in m.columns if c.endswith(" miss")}
        body = nextknob.next_knob(causes=causes, point=b.to_dict(), summary=summary,
                                  full_context=strategy_names(records, "full_context"), usable_recall=rec.cfg.usable_recall,
                                  embedders=offline, min_n=rec.cfg.min_n)
        out.append((str(b["dataset"]), tuple(body)))
    return tuple(out)


def release_digests(run: RunDir) -> dict[str, tuple[str, str]]:
    """dataset -> (turns digest, labels digest) of the run's jobs, for ``releases.release_pairs``."""
    digests = {}
    for job in run.job_dirs():
        ds = job.meta().get("dataset") if job.has(META) else None
        if ds and ds not in digests:
            turns, labels = job.digest("turns"), job.digest("labels")
            if turns and labels:
                digests[ds] = (turns, labels)
    return digests


def save(run: RunDir, a: Analysis) -> None:
    """The analysis tables into the run's ``analysis/`` folder (CSV; the misses as parquet)."""
    rec = a.rec
    for name, df in (("recommendation", rec.points), ("curves", rec.curves), ("loco", rec.loco), ("loco_folds", rec.loco_folds),
                     ("categories", rec.categories), ("transfer_datasets", rec.transfer), ("verdict", a.verdicts),
                     ("shortlist", rec.shortlist)):
        run.write_table(name, df)
    for name, df in (("embedders", a.embedders), ("transfer", a.transfer), ("transfer_folds", a.transfer_folds)):
        if df is not None:
            run.write_table(name, df)
    sig = a.significance
    if len(sig):
        run.write_table("significance", sig.assign(a=sig["a"].map(json.dumps, na_action="ignore"),
                                                   b=sig["b"].map(json.dumps, na_action="ignore")))
    if a.misses is not None:
        run.write_misses(a.misses)
        if len(a.misses):
            run.write_table("attribution_counts", a.misses_by_category)
    if a.releases is not None and not a.releases.empty:
        run.write_table("releases", a.releases)


def write_tables(run_dir: Path | RunDir, settings: RecommendConfig | None = None) -> Analysis | None:
    """The analysis stage of a finished run: ``analyse`` it and ``save`` every table into its ``analysis/`` folder;
    the report then renders what this returns (None: the run has no per-question rows)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    a = analyse(run, settings)
    if a is not None:
        save(run, a)
    return a
