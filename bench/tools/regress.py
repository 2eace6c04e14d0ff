"""``python -m bench.tools.regress``: the CI regression gate (``make regress``) and its baselines (``make baseline``).

Owns running the CI-sized experiment (``configs/experiment/regress.yaml``, a multirun over its stores,
traces and jobs measured afresh, embeddings cached) into ``reports/regress/run``, the latency pass,
the comparison with the committed baseline ``reports/baseline/<dataset>/`` and the markdown diff
``reports/regress/summary.md`` (appended to ``$GITHUB_STEP_SUMMARY`` when that is set). The last
line printed is the one-line verdict; the exit code is 0 (pass, or skipped: no baseline for this
dataset/embedder) or 1 (a regression, or the experiment did not run).

The rules (settings: the ``regress:`` block of the experiment config):

- Operating points, per store and strategy of the BASELINE: a strategy without a threshold (e.g. the
  limit and full-context strategies) once, a thresholded one (threshold, hybrid) at the threshold with
  the best F1 in the BASELINE (so both runs are compared at the same point). A baseline point missing because its store's job failed fails the gate; one the run
  did not ask for (an override) is reported as skipped. Both runs must ask the same questions.
- Quality: per point and metric (recall, F1, precision: macro means over non-adversarial questions),
  fail when current - baseline < -tolerance AND the paired sign-flip test on the same questions
  (``bench.analysis.stats.paired_test``) is significant after Holm's correction (``bench.analysis.stats.holm``) over the
  quality checks that can be significant (see ``quality_checks``).
- Tokens: per point, fail when mean injected tokens / baseline's > ``budget_ratio_max``.
- Latency: in one process, each store is timed right after the exact store on the same queries
  (``latency_repeats`` passes); a store's number is the median over passes of p50(store) / p50(exact)
  of that pass, so a slow or busy machine slows both sides. Fail when that ratio / the baseline's
  ratio > ``latency_ratio_max`` (generous: the ratio itself moves between machines).

``--write-baseline`` runs the same experiment and REPLACES ``reports/baseline/<dataset>/`` (for the
default dataset and for the demo corpus); nothing else ever writes a baseline.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from bench.cli.common import entry, parser, reports_dir, setup_logging, work_dir
from bench.rundir import JOBS, LATENCY, META, QUESTIONS, SUMMARY, RunDir

log = logging.getLogger(__name__)

REPO = work_dir()  # where the command runs (the sweep's paths.root): reports/ and caches go there, never into the package
REFERENCE = "exact"  # the store every latency is divided by
RUN_FLAGS = ("trace_cache=false", "resume=false", "publish_latest=false", "progress=false")
QUALITY_METRICS = ("recall", "f1", "precision", "hit")
BASELINE_FILES = (SUMMARY, QUESTIONS, META, LATENCY)
CHECK_COLUMNS = ["check", "config", "metric", "baseline", "current", "delta", "ratio", "p_holm", "rule", "verdict"]
FAIL, OK, SKIPPED = "FAIL", "ok", "skipped"
SHIPPED = "experiment/regress.yaml"  # the experiment, and the only copy of the gate's defaults (its regress: block)
NAN = float("nan")


class RegressError(RuntimeError):
    """The gate could not run (bad input, the experiment failed): the message is the verdict."""


@dataclass(frozen=True)
class GateConfig:
    """The ``regress:`` block. Its defaults live in configs/experiment/regress.yaml only (each setting is
    documented there): ``GateConfig.defaults(**changes)`` / ``from_mapping(block)`` start from there."""

    metrics: tuple[str, ...]
    tolerance: float
    alpha: float
    test_resamples: int
    test_unit: str
    budget_ratio_max: float
    latency_repeats: int
    latency_queries: int
    latency_warmup: int
    latency_ratio_max: float
    seed: int

    def __post_init__(self) -> None:
        w = "regress config"
        for name in ("tolerance", "alpha", "budget_ratio_max", "latency_ratio_max"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ValueError(f"{w}: {name} must be a number (got {v!r})")
        bad = [m for m in self.metrics if m not in QUALITY_METRICS]
        if not self.metrics or bad:
            raise ValueError(f"{w}: metrics must be a non-empty subset of {list(QUALITY_METRICS)} (got {list(self.metrics)})")
        if not self.tolerance >= 0:
            raise ValueError(f"{w}: tolerance must be >= 0 (got {self.tolerance!r})")
        if not 0 < self.alpha < 1:
            raise ValueError(f"{w}: alpha must be in (0, 1) (got {self.alpha!r})")
        if self.test_unit not in ("question", "conversation"):
            raise ValueError(f"{w}: test_unit must be 'question' or 'conversation' (got {self.test_unit!r})")
        for name in ("budget_ratio_max", "latency_ratio_max"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"{w}: {name} must be a ratio >= 1 (got {getattr(self, name)!r})")
        for name, low in (("test_resamples", 100), ("latency_repeats", 1), ("latency_queries", 1), ("latency_warmup", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{w}: {name} must be an integer >= {low} (got {v!r})")

    @classmethod
    def defaults(cls, **changes) -> "GateConfig":
        """The shipped defaults (the ``regress:`` block of configs/experiment/regress.yaml), with ``changes``."""
        return cls.from_mapping(changes, where="GateConfig.defaults")

    @classmethod
    def from_mapping(cls, block: Mapping | None, *, where: str = "regress config") -> "GateConfig":
        """A ``regress:`` block (settings it leaves out: the shipped defaults)."""
        from bench.resources import shipped_config

        block = dict(block or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(block) - known)
        if unknown:
            raise ValueError(f"{where}: unknown regress setting(s) {unknown} (known: {sorted(known)})")
        block = {**shipped_config(SHIPPED)["regress"], **block}
        block["metrics"] = tuple(block["metrics"])
        try:
            return cls(**block)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None


# ----------------------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class RunData:
    """What the gate reads of a run (or a baseline) directory."""

    path: Path
    summary: pd.DataFrame
    rows: pd.DataFrame  # per-question rows, one injection format
    meta: dict
    latency: pd.DataFrame | None  # latency.csv (None when absent)

    @property
    def dataset(self) -> str:
        return str(self.rows["dataset"].iloc[0])

    @property
    def embedder(self) -> str:
        return str(self.rows["embedder"].iloc[0])


def load_run(path: Path) -> RunData:
    """Read summary.csv, questions.parquet, meta.json and latency.csv (optional) of a run or baseline."""
    from bench.analysis.recommend import one_format

    run = RunDir(path)
    path = run.path
    for name in (SUMMARY, QUESTIONS):
        if not run.has(name):
            raise RegressError(f"{run.file(name)}: not found (is {path} a finished regress run or a baseline?)")
    rows = one_format(run.questions())
    need = {"dataset", "embedder", "backend", "strategy", "threshold", "question_id", "conversation_id", "adversarial",
            "tokens_injected", *QUALITY_METRICS}
    missing = sorted(need - set(rows.columns))
    if missing:
        raise RegressError(f"{run.file(QUESTIONS)}: missing column(s) {missing}")
    if rows.empty:
        raise RegressError(f"{run.file(QUESTIONS)}: no rows")
    for col in ("dataset", "embedder"):
        if rows[col].nunique() != 1:
            raise RegressError(f"{run.file(QUESTIONS)}: field {col!r} must have one value, has {sorted(rows[col].unique())}")
    summary = run.summary()
    if "format" in summary:
        summary = summary[summary["format"] == rows["format"].iloc[0]] if "format" in rows else summary
    try:
        meta = run.meta() if run.has(META) else {}
    except ValueError as e:
        raise RegressError(f"{run.file(META)}: not valid JSON ({e})") from None
    return RunData(path, summary, rows, meta, run.latency())


def show(path: Path) -> str:
    """A path as the user should read it: relative to the repo when inside it."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def question_set_id(rows: pd.DataFrame) -> str:
    ids = sorted(set(rows["question_id"].astype(str)))
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


# -------------------------------------------------------------------------------------------- checks


def operating_points(summary: pd.DataFrame, rows: pd.DataFrame) -> list[tuple[str, str, float]]:
    """(backend, strategy, threshold) compared by the gate, from the BASELINE's summary and rows.

    A strategy without thresholds gives one point (threshold NaN); a thresholded one its best-F1
    threshold (ties: the lowest), snapped to the exact float of the per-question rows.
    Router sub-rows (``strategy/route``) are skipped.
    """
    s = summary[~summary["strategy"].astype(str).str.contains("/")]
    points = []
    for (backend, strategy), g in s.groupby(["backend", "strategy"], sort=False):
        if g["threshold"].isna().all():
            points.append((backend, strategy, NAN))
            continue
        g = g.dropna(subset=["threshold", "f1"]).sort_values("threshold", kind="stable")
        if g.empty:
            continue
        best = float(g.loc[g["f1"].idxmax(), "threshold"])
        have = rows.loc[(rows["backend"] == backend) & (rows["strategy"] == strategy), "threshold"].dropna().unique()
        near = [t for t in have if math.isclose(t, best, abs_tol=1e-9)]
        points.append((backend, strategy, float(near[0]) if near else best))
    return points


def label(point: tuple[str, str, float]) -> str:
    backend, strategy, t = point
    return f"{backend} / {strategy}" if math.isnan(t) else f"{backend} / {strategy} @ {t:.2f}"


def _where(point: tuple[str, str, float]) -> dict:
    backend, strategy, t = point
    return {"backend": backend, "strategy": strategy, "threshold": t}


def _has(rows: pd.DataFrame, point: tuple[str, str, float]) -> bool:
    backend, strategy, t = point
    m = (rows["backend"] == backend) & (rows["strategy"] == strategy)
    m &= rows["threshold"].isna() if math.isnan(t) else np.isclose(rows["threshold"], t, atol=1e-9)
    return bool(m.any())


def _check(check, config, metric, baseline, current, *, delta=NAN, ratio=NAN, p_holm=NAN, rule="", verdict=OK) -> dict:
    return {"check": check, "config": config, "metric": metric, "baseline": baseline, "current": current, "delta": delta,
            "ratio": ratio, "p_holm": p_holm, "rule": rule, "verdict": verdict}


def coverage_checks(base: pd.DataFrame, cur: pd.DataFrame, points: Sequence[tuple[str, str, float]],
                    failed_jobs: Sequence[dict] = (), labels: tuple[str | None, str | None] = (None, None)) -> pd.DataFrame:
    """Both runs must ask the same questions with the same gold labels (``labels``: the baseline's and the
    run's ``labels_sha256``; checked when both are known), and a baseline point missing from the current run fails
    when its store's job failed; a store, strategy or threshold that this run did not ask for (a
    deliberate override) is reported as skipped."""
    out = []
    reasons = {}  # backend override of a failed job -> its one-line reason
    for f in failed_jobs:
        for o in f.get("overrides") or []:
            if str(o).startswith("backend="):
                reasons[str(o).split("=", 1)[1]] = str(f.get("reason", "")) or "job failed"
    for p in points:
        if _has(cur, p):
            continue
        backend, strategy, _ = p
        if backend in reasons:
            verdict = f"{FAIL} ({reasons[backend]})"
        elif backend not in set(cur["backend"]):
            verdict = SKIPPED + " (store not in this run)"
        elif strategy not in set(cur.loc[cur["backend"] == backend, "strategy"]):
            verdict = SKIPPED + " (strategy not in this run)"
        else:
            verdict = SKIPPED + " (threshold not in this run's grid)"
        out.append(_check("coverage", label(p), "rows", "present", "missing", rule="baseline point measured", verdict=verdict))
    qb, qc = set(base["question_id"].astype(str)), set(cur["question_id"].astype(str))
    lb, lc = labels
    if lb and lc and lb != lc:
        out.append(_check("coverage", "dataset", "labels", lb[:12], lc[:12],
                          rule="same questions and gold labels as the baseline (else re-run make baseline)", verdict=FAIL))
    if qb != qc:
        out.append(_check("coverage", "dataset", "questions", float(len(qb)), float(len(qc)), delta=float(len(qc - qb) + len(qb - qc)),
                          rule="same question ids as the baseline (else re-run make baseline)", verdict=FAIL))
    return pd.DataFrame(out, columns=CHECK_COLUMNS)


def _mean(rows: pd.DataFrame, point, metric: str) -> float:
    from bench.analysis.stats import question_values

    v = question_values(rows, _where(point), metric)["value"]
    return float(v.mean()) if v.notna().any() else NAN


def _min_p(n_changed: int) -> float:
    """Smallest two-sided p a sign-flip test can reach with ``n_changed`` non-tied pairs (2 / 2**n)."""
    return min(1.0, 2.0 / 2.0 ** n_changed)


def quality_checks(base: pd.DataFrame, cur: pd.DataFrame, points: Sequence[tuple[str, str, float]], cfg: GateConfig) -> pd.DataFrame:
    """Per point and metric: baseline and current macro means, and the paired test of current vs baseline.

    The Holm family is every check that CAN be significant: checks whose paired values have fewer
    than the non-tied units needed for p <= alpha (2 / 2**n > alpha; e.g. nothing changed) cannot reject
    and are left out (Tarone's rule), and checks with identical paired data (e.g. two exact stores)
    are one test, counted once. Both keep the family-wise error at alpha and keep power for the
    checks that did move.
    """
    from bench.analysis import stats

    points = [p for p in points if _has(base, p) and _has(cur, p)]
    rows = pd.concat([base.assign(run="baseline"), cur.assign(run="current")], ignore_index=True)
    out, tests = [], {}  # tests: data key -> raw p (None: cannot reach alpha)
    for metric in cfg.metrics:
        for p in points:
            qc = stats.question_values(rows, {"run": "current", **_where(p)}, metric)
            qb = stats.question_values(rows, {"run": "baseline", **_where(p)}, metric)
            m = qc.merge(qb, on="question_id", suffixes=("_c", "_b")).dropna(subset=["value_c", "value_b"])
            m = m.sort_values("question_id", kind="stable")
            a, b, cl = m["value_c"].to_numpy(), m["value_b"].to_numpy(), m["conversation_id_c"].astype(str).to_numpy()
            key = hashlib.sha256(np.concatenate([a, b]).tobytes() + "\n".join(m["question_id"].astype(str)).encode()).hexdigest()
            if key not in tests:
                d = a - b
                units = d if cfg.test_unit == "question" else stats.cluster_sums(d, cl)[1] if len(d) else d
                n_changed = int((np.abs(units) > stats.TIE_TOL).sum())
                tests[key] = None if _min_p(n_changed) > cfg.alpha else stats.paired_test(
                    a, b, clusters=cl, unit=cfg.test_unit, n_resamples=cfg.test_resamples, seed=cfg.seed).p_value
            bm, cm = _mean(base, p, metric), _mean(cur, p, metric)
            out.append({**_check("quality", label(p), metric, bm, cm, delta=cm - bm), "_key": key})
    df = pd.DataFrame(out, columns=CHECK_COLUMNS + ["_key"])
    if df.empty:
        return df.drop(columns="_key")
    family = [k for k, v in tests.items() if v is not None]
    adjusted = dict(zip(family, stats.holm([tests[k] for k in family]))) if family else {}
    df["p_holm"] = df["_key"].map(lambda k: adjusted.get(k, NAN)).astype(float)
    df["rule"] = f"fail if delta < -{cfg.tolerance:g} and Holm p < {cfg.alpha:g}"
    sig = df["p_holm"] < cfg.alpha
    drop, gain = df["delta"] < -cfg.tolerance, df["delta"] > cfg.tolerance
    untestable = df["p_holm"].isna()
    df["verdict"] = np.select([drop & sig, drop & untestable, drop, gain & sig],
                              [FAIL, "ok (drop on too few questions to test)", "ok (drop not significant)", "improved"], OK)
    return df.drop(columns="_key")


def token_checks(base: pd.DataFrame, cur: pd.DataFrame, points: Sequence[tuple[str, str, float]], cfg: GateConfig) -> pd.DataFrame:
    """Per point: mean injected tokens (non-adversarial questions), current / baseline against the budget ratio."""
    out = []
    for p in points:
        if not (_has(base, p) and _has(cur, p)):
            continue
        b, c = _mean(base, p, "tokens_injected"), _mean(cur, p, "tokens_injected")
        ratio = (1.0 if c == 0 else math.inf) if b == 0 else c / b
        out.append(_check("tokens", label(p), "tokens_injected_mean", b, c, delta=c - b, ratio=ratio,
                          rule=f"fail if ratio > {cfg.budget_ratio_max:g}", verdict=FAIL if ratio > cfg.budget_ratio_max else OK))
    return pd.DataFrame(out, columns=CHECK_COLUMNS)


def latency_ratios(latency: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Per store: median over timing passes of p50(store) / p50(reference) of the same pass.

    ``latency`` columns: backend, repeat, p50_ms (one row per store and pass). Returns backend,
    p50_ms (median over passes), ratio, repeats; the reference store itself is left out.
    """
    need = {"backend", "repeat", "p50_ms"}
    if not need <= set(latency.columns):
        raise ValueError(f"latency table: missing column(s) {sorted(need - set(latency.columns))}")
    ref = latency[latency["backend"] == reference].set_index("repeat")["p50_ms"]
    if ref.empty:
        raise ValueError(f"latency table: no {reference!r} rows (the reference store must be timed in the same run)")
    out = []
    for backend, g in latency[latency["backend"] != reference].groupby("backend", sort=False):
        r = g.set_index("repeat")["p50_ms"] / ref.reindex(g["repeat"]).to_numpy()
        out.append({"backend": backend, "p50_ms": float(g["p50_ms"].median()), "ratio": float(np.nanmedian(r.to_numpy())), "repeats": len(g)})
    return pd.DataFrame(out, columns=["backend", "p50_ms", "ratio", "repeats"])


def latency_checks(base: pd.DataFrame | None, cur: pd.DataFrame | None, cfg: GateConfig) -> pd.DataFrame:
    """Per store: (its p50 / exact's p50 now) / (the same in the baseline) against ``latency_ratio_max``."""
    rule = f"fail if (p50 / {REFERENCE} p50) / baseline's > {cfg.latency_ratio_max:g}"
    if base is None or cur is None:
        which = "baseline" if base is None else "current run"
        return pd.DataFrame([_check("latency", "all stores", f"p50 / {REFERENCE} p50", NAN, NAN, rule=rule,
                                    verdict=f"skipped (no {LATENCY} in the {which})")], columns=CHECK_COLUMNS)
    rb = latency_ratios(base).set_index("backend")
    rc = latency_ratios(cur).set_index("backend")
    out = []
    for backend in rb.index:
        if backend not in rc.index:
            continue  # a missing store is a coverage failure
        b, c = float(rb.loc[backend, "ratio"]), float(rc.loc[backend, "ratio"])
        ratio = c / b if b > 0 else math.inf
        out.append(_check("latency", backend, f"p50 / {REFERENCE} p50", b, c, delta=c - b, ratio=ratio, rule=rule,
                          verdict=FAIL if ratio > cfg.latency_ratio_max else OK))
    return pd.DataFrame(out, columns=CHECK_COLUMNS)


@dataclass(frozen=True)
class GateResult:
    checks: pd.DataFrame  # CHECK_COLUMNS
    verdict: str  # the one line
    failed: bool
    skipped: bool = False


def _fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _why(r: pd.Series) -> str:
    if r["check"] == "quality":
        return f"{r['metric']} {r['config']}: {_fmt(r['baseline'])} -> {_fmt(r['current'])} ({r['delta']:+.3f}, Holm p {r['p_holm']:.2g})"
    if r["check"] == "tokens":
        return f"tokens {r['config']}: {_fmt(r['baseline'], 1)} -> {_fmt(r['current'], 1)} (x{_fmt(r['ratio'], 2)})"
    if r["check"] == "latency":
        return f"latency {r['config']}: {_fmt(r['baseline'], 2)}x -> {_fmt(r['current'], 2)}x {REFERENCE} p50 (x{_fmt(r['ratio'], 2)})"
    return f"{r['metric']} {r['config']}: {r['baseline']} -> {r['current']} {r['verdict'][len(FAIL):].strip()}".strip()


def gate(baseline: RunData, current: RunData, cfg: GateConfig, *, failed_jobs: Sequence[dict] = ()) -> GateResult:
    """Compare a current run with its baseline (same dataset and embedder, else skipped)."""
    for what in ("dataset", "embedder"):
        b, c = getattr(baseline, what), getattr(current, what)
        if b != c:
            return GateResult(pd.DataFrame(columns=CHECK_COLUMNS),
                              f"regress SKIPPED: baseline {show(baseline.path)} was made with {what} {b!r}, this run uses {c!r}", False, True)
    points = operating_points(baseline.summary, baseline.rows)
    parts = [coverage_checks(baseline.rows, current.rows, points, failed_jobs,
                             (baseline.meta.get("labels_sha256"), current.meta.get("labels_sha256"))), quality_checks(baseline.rows, current.rows, points, cfg),
             token_checks(baseline.rows, current.rows, points, cfg), latency_checks(baseline.latency, current.latency, cfg)]
    checks = pd.concat([p for p in parts if not p.empty], ignore_index=True) if any(not p.empty for p in parts) \
        else pd.DataFrame(columns=CHECK_COLUMNS)
    bad = checks[checks["verdict"].astype(str).str.startswith(FAIL)]
    if len(bad):
        whys = [_why(r) for _, r in bad.iterrows()]
        more = f" (+{len(whys) - 3} more in summary.md)" if len(whys) > 3 else ""
        verdict = f"regress FAIL: {len(whys)} regression(s) vs {show(baseline.path)}: " + "; ".join(whys[:3]) + more
        return GateResult(checks, verdict, True)
    n = checks["check"].value_counts()
    skipped = int(((checks["check"] == "coverage") & checks["verdict"].astype(str).str.startswith(SKIPPED)).sum())
    verdict = (f"regress PASS: {n.get('quality', 0)} quality, {n.get('tokens', 0)} token and {n.get('latency', 0)} latency checks "
               f"within limits vs {show(baseline.path)} ({baseline.dataset}, {len(points) - skipped} operating points"
               + (f"; {skipped} baseline points not in this run, skipped" if skipped else "") + ")")
    return GateResult(checks, verdict, False)


# ---------------------------------------------------------------------------------------- markdown


def render_markdown(result: GateResult, cfg: GateConfig, baseline: RunData | None, current: RunData | None) -> str:
    lines = ["# recallbench regression gate", "", f"**{result.verdict}**", ""]
    if baseline is not None and current is not None:
        bm = baseline.meta
        lines += [f"- Baseline: `{show(baseline.path)}` — dataset {baseline.dataset}, embedder {baseline.embedder}, "
                  f"made {bm.get('made_at', '?')} on commit {str(bm.get('git_commit') or '?')[:12]}",
                  f"- Current: `{show(current.path)}` — made {current.meta.get('made_at', '?')} on commit "
                  f"{str(current.meta.get('git_commit') or '?')[:12]}", ""]
    lines += ["Rules: operating points = each store's strategies of the baseline, those without a threshold as they are and "
              f"thresholded ones at the baseline's best-F1 threshold. Quality fails when current − baseline < −{cfg.tolerance:g} and the paired sign-flip "
              f"test over the same questions ({cfg.test_resamples} resamples, unit {cfg.test_unit}) is significant at "
              f"{cfg.alpha:g} after Holm's correction over the checks that can be (Holm p — = too few changed questions to "
              "ever reach significance; identical comparisons, e.g. two exact stores, count once). Tokens fail when mean injected tokens / "
              f"baseline > {cfg.budget_ratio_max:g}. Latency fails when (store p50 / {REFERENCE} p50, median of "
              f"{cfg.latency_repeats} passes over the same queries in this run) / the baseline's ratio > {cfg.latency_ratio_max:g}.", ""]
    if result.checks.empty:
        return "\n".join(lines) + "\n"
    order = {"coverage": 0, "quality": 1, "tokens": 2, "latency": 3}
    checks = result.checks.assign(_o=result.checks["check"].map(order), _f=~result.checks["verdict"].astype(str).str.startswith(FAIL))
    checks = checks.sort_values(["_f", "_o"], kind="stable")
    lines += ["| check | config | metric | baseline | current | delta | ratio | Holm p | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for _, r in checks.iterrows():
        digits = 1 if r["check"] == "tokens" else (2 if r["check"] == "latency" else 3)
        b, c = r["baseline"], r["current"]
        b = _fmt(b, digits) if isinstance(b, float) else str(b)
        c = _fmt(c, digits) if isinstance(c, float) else str(c)
        d = "—" if isinstance(r["delta"], float) and math.isnan(r["delta"]) else f"{r['delta']:+.{digits}f}"
        p = "—" if math.isnan(r["p_holm"]) else f"{r['p_holm']:.3g}"
        v = f"**{r['verdict']}**" if str(r["verdict"]).startswith(FAIL) else r["verdict"]
        lines.append(f"| {r['check']} | {r['config']} | {r['metric']} | {b} | {c} | {d} | {_fmt(r['ratio'], 2)} | {p} | {v} |")
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------- experiment


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run_experiment(run_dir: Path, overrides: Sequence[str], log_path: Path) -> None:
    """``python -m bench -m experiment=regress`` into ``run_dir`` (replaced), output to ``log_path``."""
    run_dir = Path(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    from bench.cli.config import sweep_dir_override

    cmd = [sys.executable, "-m", "bench", "-m", "experiment=regress", sweep_dir_override(run_dir), *RUN_FLAGS, *overrides]
    log.info("running: %s", " ".join(cmd))
    t0 = time.perf_counter()
    with open(log_path, "w") as f:
        proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.info("experiment finished in %.0f s (exit %d); log: %s", time.perf_counter() - t0, proc.returncode, log_path)
    if proc.returncode != 0 or not RunDir(run_dir).finished():
        tail = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-1:] or ["no output"]
        raise RegressError(f"regress FAIL: the experiment did not run (exit {proc.returncode}): {tail[0][:300]} (log: {log_path})")


def job_dirs(run_dir: Path) -> list[Path]:
    return [j.path for j in RunDir(run_dir).all_job_dirs() if j.finished()]


def load_job_config(job: Path) -> dict:
    """A finished job's resolved config as plain data (``RunDir.settings``)."""
    run = RunDir(job)
    if run.settings_file() is None:
        raise RegressError(f"{job}: no resolved config (a finished job writes it)")
    return run.settings()


def gate_config(run_dir: Path) -> GateConfig:
    """The ``regress:`` block of the run's first finished job (defaults when it has none)."""
    jobs = RunDir(run_dir).all_job_dirs()
    path = next((j.settings_file() for j in jobs if j.finished() and j.settings_file()), None)
    if path is None:
        return GateConfig.defaults()
    return GateConfig.from_mapping(RunDir(path.parent).settings().get("regress"), where=f"{path}: regress")


def time_searches(backends: Mapping[str, object], questions: Sequence, vectors: np.ndarray, *, depth: int,
                  repeats: int, queries: int, warmup: int) -> pd.DataFrame:
    """Time ``backend.search`` (``bench.backends.session``: perf_counter_ns around the call alone) over ``queries``
    questions per pass, on open stores that hold the corpus.

    The questions are taken in order and cycled when there are fewer than ``queries`` (a small corpus
    still gives ``queries`` samples); ``warmup`` searches per store are discarded first. Per pass and
    question every store is called in turn (the order rotates each pass), so all of them see the same
    machine load. Returns one row per (store, pass): backend, repeat, n, p50_ms, p99_ms.
    """
    from bench.backends.session import Session
    from bench.trace import question_filter

    names = list(backends)
    sessions = {n: Session(backends[n]) for n in names}
    ks = {n: min(depth, backends[n].capabilities.max_k) for n in names}
    qs = list(questions)
    idx = [i % len(qs) for i in range(queries)] if qs else []
    wheres = [question_filter(q) for q in qs]
    for n in names:  # discarded: cold caches
        sessions[n].warm_up(vectors[idx], [wheres[i] for i in idx], k=ks[n], n=warmup)
    out = []
    for rep in range(repeats):
        order = names[rep % len(names):] + names[: rep % len(names)]
        times = {n: [] for n in names}
        for i in idx:
            for n in order:
                times[n].append(sessions[n].timed_search(vectors[i], k=ks[n], where=wheres[i])[1])
        for n in names:
            ns = np.asarray(times[n], dtype=np.float64)
            out.append({"backend": n, "repeat": rep, "n": len(ns), "p50_ms": float(np.percentile(ns, 50) / 1e6) if len(ns) else NAN,
                        "p99_ms": float(np.percentile(ns, 99) / 1e6) if len(ns) else NAN})
    return pd.DataFrame(out, columns=["backend", "repeat", "n", "p50_ms", "p99_ms"])


def measure_latency(run_dir: Path, cfg: GateConfig, stores_dir: Path) -> pd.DataFrame:
    """Rebuild every finished job's store from its resolved config (the corpus from the job's snapshot,
    embeddings from the cache) and time it."""
    from contextlib import ExitStack

    from bench.backends.layout import build_store
    from bench.backends.session import INGEST_BATCH, open_session
    from bench.embedders.cache import CachedEmbedder
    from bench.plugins import instantiate as build
    from bench.trace import batches, embed_corpus, search_depth

    jobs = job_dirs(run_dir)
    cfgs = [load_job_config(j) for j in jobs]
    if not cfgs:
        return pd.DataFrame(columns=["backend", "repeat", "n", "p50_ms", "p99_ms"])
    first = cfgs[0]
    corpus = RunDir(jobs[0]).corpus()
    embedder = CachedEmbedder(build(first["embedder"]), Path(first["paths"]["cache"]) / "embeddings")
    tv, qv, _ = embed_corpus(corpus, embedder)
    questions = list(corpus.questions)
    turns = corpus.turns()
    shutil.rmtree(stores_dir, ignore_errors=True)
    try:
        with ExitStack() as stack:
            by_name: dict[str, object] = {}
            for i, c in enumerate(cfgs):
                kw = {"collection": f"rb_regress_{i}"}
                if "path" in c["backend"]:
                    kw["path"] = str(Path(stores_dir) / f"job{i}")
                session = stack.enter_context(open_session(build_store(c["backend"], **kw), dim=embedder.dim))
                session.ingest(batches(turns, tv, INGEST_BATCH))
                if session.backend.name in by_name:
                    raise RegressError(f"{run_dir}: two jobs use the same store name; the latency pass needs one job per store")
                by_name[session.backend.name] = session.backend
            return time_searches(by_name, questions, qv, depth=search_depth(first.get("depth"), corpus), repeats=cfg.latency_repeats,
                                 queries=cfg.latency_queries, warmup=cfg.latency_warmup)
    finally:
        shutil.rmtree(stores_dir, ignore_errors=True)


def latency_pass(run_dir: Path, stores_dir: Path) -> Path:
    """``measure_latency`` in a child process (an embedded seekdb can serve one path per process) -> latency.csv."""
    cfg = gate_config(run_dir)
    lat = measure_latency(run_dir, cfg, stores_dir)
    return RunDir(run_dir).write_latency(lat)


def finish_run(run_dir: Path, overrides: Sequence[str], stores_dir: Path) -> GateConfig:
    """After the experiment: the latency pass (latency.csv, in a child process) and meta.json in ``run_dir``."""
    run = RunDir(run_dir)
    cfg = gate_config(run_dir)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench.tools.regress", "--latency-pass", str(run_dir), "--out", str(stores_dir)],
                          cwd=REPO, stdin=subprocess.DEVNULL)
    if proc.returncode != 0 or not run.has(LATENCY):
        raise RegressError(f"regress FAIL: the latency pass over {run_dir} failed (exit {proc.returncode}; its error is above)")
    log.info("latency pass finished in %.0f s", time.perf_counter() - t0)
    rows = run.questions()
    jobs = run.jobs() if run.has(JOBS) else []
    failed = run.failed()
    meta = {"made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_commit": git_commit(),
            "command": "python -m bench -m experiment=regress " + " ".join([*RUN_FLAGS, *overrides]),
            "dataset": str(rows["dataset"].iloc[0]), "dataset_source": jobs[0].get("dataset_source") if jobs else None,
            "embedder": str(rows["embedder"].iloc[0]), "backends": sorted(rows["backend"].unique().tolist()),
            "strategies": list(dict.fromkeys(rows["strategy"])), "n_questions": int(rows["question_id"].nunique()),
            "question_set": question_set_id(rows), "labels_sha256": run.labels().get(str(rows["dataset"].iloc[0])),
            "gate": asdict(cfg), "failed_jobs": failed, "jobs": jobs}
    run.write_meta(meta)
    return cfg


BASELINE_README = """# Regression baseline: {dataset}

Written by `make baseline` (`python -m bench.tools.regress --write-baseline`) on {made_at}, commit {commit}.
Never written automatically: `make regress` only reads it. Review the diff and commit it on purpose.

- Dataset: **{dataset}** ({n_questions} questions; {source}).
  {needs}
- Embedder: {embedder}. Stores: {backends}. Strategies: {strategies}.
- Command: `{command}`
- Files: `summary.csv`, `questions.parquet` (per-question rows, no text), `meta.json` (the run's
  settings and job metadata), `latency.csv` (latency pass: p50/p99 per store and timing pass).
"""


def write_baseline(run_dir: Path, baseline_root: Path) -> Path:
    """Replace ``baseline_root/<dataset>/`` with the run's files (staged, then swapped by renames)."""
    run = load_run(run_dir)
    dest = Path(baseline_root) / run.dataset
    stage, old = dest.with_name(f".{dest.name}.tmp"), dest.with_name(f".{dest.name}.old")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    for name in BASELINE_FILES:
        if RunDir(run_dir).has(name):
            shutil.copyfile(RunDir(run_dir).file(name), stage / name)
            os.chmod(stage / name, 0o644)
    m = run.meta
    needs = ("Needs LoCoMo (original release) at `$BENCH_DATA_DIR/locomo/locomo10.json`; without it `make regress` "
             "runs on the demo corpus and is gated against `reports/baseline/demo/`."
             if run.dataset != "demo" else "Needs nothing: the demo corpus ships in `datasets/demo/`.")
    from bench.output import scrub

    (stage / "README.md").write_text(scrub(BASELINE_README.format(
        dataset=run.dataset, made_at=m.get("made_at", "?"), commit=m.get("git_commit") or "?", n_questions=m.get("n_questions", "?"),
        source=m.get("dataset_source") or "?", needs=needs, embedder=run.embedder, backends=", ".join(m.get("backends", [])),
        strategies=", ".join(m.get("strategies", [])), command=m.get("command", "?"))))
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        os.replace(dest, old)
    os.replace(stage, dest)
    shutil.rmtree(old, ignore_errors=True)
    return dest


def report(result: GateResult, cfg: GateConfig, baseline: RunData | None, current: RunData | None, out: Path) -> None:
    """summary.md and checks.csv in ``out``; summary.md appended to $GITHUB_STEP_SUMMARY when set."""
    from bench.output import write_atomic

    md = render_markdown(result, cfg, baseline, current)
    write_atomic(out / "summary.md", lambda p: p.write_text(md))
    write_atomic(out / "checks.csv", lambda p: result.checks.to_csv(p, index=False))
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with open(step, "a") as f:
            f.write(md + "\n")


def regress(run_dir: Path, baseline_root: Path, out: Path) -> GateResult:
    """Gate a finished regress run against ``baseline_root/<its dataset>/``; writes the report to ``out``."""
    current = load_run(run_dir)
    cfg = gate_config(run_dir)
    base_dir = Path(baseline_root) / current.dataset
    if not RunDir(base_dir).has(QUESTIONS):
        have = sorted(p.name for p in Path(baseline_root).glob("*") if RunDir(p).has(QUESTIONS))
        result = GateResult(pd.DataFrame(columns=CHECK_COLUMNS),
                            f"regress SKIPPED: no baseline for dataset {current.dataset!r} in {show(baseline_root)} "
                            f"(baselines: {', '.join(have) or 'none'}); `make baseline` writes one", False, True)
        report(result, cfg, None, current, out)
        return result
    baseline = load_run(base_dir)
    failed = current.meta.get("failed_jobs") or []
    result = gate(baseline, current, cfg, failed_jobs=failed)
    report(result, cfg, baseline, current, out)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = parser("regress", "Run the CI-sized experiment and gate it against reports/baseline/<dataset>/ (make regress), "
                           "or rewrite the baselines (make baseline).",
                examples=["recallbench regress                          # the gate: exit 1 names what regressed",
                          "recallbench regress --demo backend=exact       # on the demo corpus, one store",
                          "recallbench regress --run reports/regress/run  # gate a finished regress run again",
                          "recallbench regress --write-baseline           # rewrite reports/baseline/ (review and commit)"])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for the experiment, e.g. backend=exact,sqlite_vec")
    ap.add_argument("--write-baseline", action="store_true",
                    help="run the experiment and REPLACE the baseline of its dataset (and of the demo corpus)")
    ap.add_argument("--demo", action="store_true", help="use the demo corpus even when the data path has LoCoMo")
    ap.add_argument("--run", type=Path, help="gate this finished regress run directory instead of running the experiment")
    ap.add_argument("--out", type=Path, default=reports_dir("regress"), help="report directory (default reports/regress)")
    ap.add_argument("--baseline-root", type=Path, default=reports_dir("baseline"), help="default reports/baseline")
    ap.add_argument("--latency-pass", type=Path, help=argparse.SUPPRESS)  # internal: the child process of finish_run
    args = ap.parse_args(argv)
    setup_logging()
    out = args.out.resolve()
    if args.latency_pass is not None:
        from bench.output import error_line

        try:
            latency_pass(args.latency_pass.resolve(), out)
        except Exception as e:  # one line for the parent's log, never a traceback
            log.error("latency pass: %s", error_line(e))
            log.debug("details", exc_info=True)
            return 1
        return 0
    try:
        if args.run is not None:
            if args.write_baseline or args.overrides or args.demo:
                ap.error("--run gates a finished run: it takes no overrides, --demo or --write-baseline")
            result = regress(args.run.resolve(), args.baseline_root.resolve(), out)
        else:
            demo = ["dataset.force_demo=true"]
            run_dir = out / "run"
            written: list[str] = []
            for extra in ([demo] if args.demo else [[], demo]):
                overrides = [*args.overrides, *extra]
                run_experiment(run_dir, overrides, out / "experiment.log")
                finish_run(run_dir, overrides, out / "stores")
                if not args.write_baseline:
                    break
                dest = write_baseline(run_dir, args.baseline_root.resolve())
                written.append(str(dest))
                log.info("baseline written: %s", dest)
                if dest.name == "demo":
                    break  # the default dataset was the demo corpus already
            if args.write_baseline:
                print(f"regress BASELINE written: {', '.join(written)} (review and commit)")
                return 0
            result = regress(out / "run", args.baseline_root.resolve(), out)
    except (RegressError, ValueError) as e:
        msg = str(e) if str(e).startswith("regress ") else f"regress FAIL: {e}"
        if not args.write_baseline:  # the step summary says why there is no diff
            try:
                report(GateResult(pd.DataFrame(columns=CHECK_COLUMNS), msg, True), GateConfig.defaults(), None, None, out)
            except OSError as w:
                log.warning("could not write %s: %s", out / "summary.md", w)
        print(msg)
        return 1
    log.info("report: %s", out / "summary.md")
    print(result.verdict)
    return 1 if result.failed else 0


if __name__ == "__main__":
    raise SystemExit(entry(main))
