"""``python -m bench.tools.regress``: the CI regression gate (``make regress``) and its baselines (``make baseline``).

Owns running the CI-sized experiment (``configs/experiment/regress.yaml``, a multirun over its stores,
traces and jobs measured afresh, embeddings cached) into ``reports/regress/run``, the latency pass,
the comparison with the committed baseline ``reports/baseline/<dataset>/`` and the markdown diff
``reports/regress/summary.md`` (appended to ``$GITHUB_STEP_SUMMARY`` when that is set). The last
line printed is the one-line verdict; the exit code is 0 (pass) or 1 (a regression, a comparison
the gate cannot make, or the experiment did not run). A gate that cannot tell fails: each "cannot
tell" below is exit 1 unless the user accepts it by name with ``--allow NAME[,NAME]`` (then it is
reported as allowed and skipped).

The rules (settings: the ``regress:`` block of the experiment config):

- Comparable runs. No baseline for the run's dataset (``--allow baseline``), a baseline made with another
  embedder (``--allow embedder``: the comparison is skipped), another store set (``--allow stores``),
  another strategy set or threshold grid (``--allow grid``), or rows missing for a baseline point or for
  some of its questions (``--allow missing``) fail. Always fatal: a store's job failed, other question
  ids or gold labels (re-run ``make baseline``).
- Operating points, per store and strategy of the BASELINE: a strategy without a threshold (e.g. the
  limit and full-context strategies) once, a thresholded one (threshold, hybrid) at the threshold with
  the best F1 in the BASELINE (so both runs are compared at the same point).
- Quality: per point and metric (recall, F1, precision: macro means over non-adversarial questions), the
  paired sign-flip test of current vs baseline over the n questions whose value CHANGED (an unchanged
  question adds 0 whatever its sign): exact over all 2**n sign patterns when n <= 16 (``EXACT_MAX``),
  else ``test_resamples`` random patterns. Its smallest reachable two-sided p is 2 / 2**n (every changed
  question moved the same way). Holm's correction runs over the checks that can reach alpha (p_min <=
  alpha; identical data, e.g. two exact stores, counted once); m = their number. A check with
  current - baseline < -tolerance FAILS when its Holm p < alpha, and also when the test cannot tell:
  p_min > alpha / m (Holm's strictest level), i.e. so few questions changed that no outcome is sure to be
  significant (5 of 22 demo questions: p_min 2/32 = 0.0625 > 0.05) — a large drop on few questions fails,
  unless ``--allow untestable``. A drop the test could detect but does not find significant passes.
- Tokens: per point, fail when mean injected tokens / baseline's > ``budget_ratio_max``.
- Latency, judged against the exact store measured in the same run, so machine load cancels: in one
  process, ``latency_repeats`` passes over the same queries; per query each store is timed and exact
  right after it (store, exact, store, exact, ...). A store's latency is the median over queries of its
  per-query MINIMUM over the passes (a busy machine adds time, never removes it); exact's the same, its
  minimum over every exact timing of the query in those passes (after any store: an exact call right after
  a store that waits on another process, e.g. embedded seekdb, runs on caches a busy machine has cooled,
  which moved store/exact by x1.24 between runs); ratio = store / exact. Noise: the leave-one-pass-out (jackknife) standard error of
  log(ratio), run and baseline combined: noise limit = exp(``latency_noise_z`` * se). Fail when ratio /
  the baseline's ratio > max(``latency_ratio_max``, noise limit); "skipped (too noisy)" only when the
  noise limit itself is >= 2, so a 2x regression never hides under noise. meta.json and summary.md
  record the machine's load average. ``--fault-slow STORE=FACTOR`` (hidden, for demonstrations) makes
  STORE's searches FACTOR x slower in the latency pass.

``--write-baseline`` runs the same experiment and REPLACES ``reports/baseline/<dataset>/`` (for the
default dataset and for the demo corpus); nothing else ever writes a baseline. ``--run DIR`` gates a
finished run directory (or a copy of one) without running anything.
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
from bench.metrics import direction
from bench.rundir import JOBS, LATENCY, META, QUESTIONS, SUMMARY, RunDir

log = logging.getLogger(__name__)

REPO = work_dir()  # where the command runs (the sweep's paths.root): reports/ and caches go there, never into the package
REFERENCE = "exact"  # the store every latency is divided by
RUN_FLAGS = ("trace_cache=false", "resume=false", "publish_latest=false", "progress=false")
QUALITY_METRICS = ("recall", "f1", "precision", "hit")
BASELINE_FILES = (SUMMARY, QUESTIONS, META, LATENCY)
CHECK_COLUMNS = ["check", "config", "metric", "baseline", "current", "delta", "ratio", "limit", "n_changed", "p_min", "p_holm",
                 "rule", "verdict"]
ALLOW = ("baseline", "embedder", "stores", "grid", "missing", "untestable")  # what --allow accepts
EXACT_MAX = 16  # up to this many changed questions the sign-flip test enumerates all 2**n patterns
TOO_NOISY = 2.0  # a latency noise limit at or above this skips the check (a 2x regression must not hide)
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
    latency_noise_z: float
    seed: int

    def __post_init__(self) -> None:
        w = "regress config"
        for name in ("tolerance", "alpha", "budget_ratio_max", "latency_ratio_max", "latency_noise_z"):
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
        if not self.latency_noise_z > 0:
            raise ValueError(f"{w}: latency_noise_z must be > 0 (got {self.latency_noise_z!r})")
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


def _check(check, config, metric, baseline, current, *, delta=NAN, ratio=NAN, limit=NAN, n_changed=NAN, p_min=NAN, p_holm=NAN,
           rule="", verdict=OK) -> dict:
    return {"check": check, "config": config, "metric": metric, "baseline": baseline, "current": current, "delta": delta,
            "ratio": ratio, "limit": limit, "n_changed": n_changed, "p_min": p_min, "p_holm": p_holm, "rule": rule, "verdict": verdict}


def _cannot_tell(why: str, name: str, allow: frozenset) -> str:
    """The verdict of a comparison the gate cannot make: FAIL unless the user allowed ``name``."""
    return f"{SKIPPED} ({why}; allowed by --allow {name})" if name in allow else f"{FAIL} ({why}; --allow {name} accepts it)"


def _grid(rows: pd.DataFrame) -> dict[tuple[str, str], tuple[float, ...]]:
    """(backend, strategy) -> its sorted thresholds (rounded to 1e-9; empty for a strategy without thresholds)."""
    out = {}
    for (backend, strategy), g in rows.groupby(["backend", "strategy"], sort=False):
        out[(str(backend), str(strategy))] = tuple(sorted({round(float(t), 9) for t in g["threshold"].dropna()}))
    return out


def _grid_text(ts: tuple[float, ...]) -> str:
    return "none" if not ts else f"{len(ts)}: {ts[0]:g}..{ts[-1]:g}" if len(ts) > 3 else ", ".join(f"{t:g}" for t in ts)


def _n_questions(rows: pd.DataFrame, point) -> int:
    backend, strategy, t = point
    m = (rows["backend"] == backend) & (rows["strategy"] == strategy)
    m &= rows["threshold"].isna() if math.isnan(t) else np.isclose(rows["threshold"], t, atol=1e-9)
    return int(rows.loc[m, "question_id"].nunique())


def coverage_checks(base: pd.DataFrame, cur: pd.DataFrame, points: Sequence[tuple[str, str, float]],
                    failed_jobs: Sequence[dict] = (), labels: tuple[str | None, str | None] = (None, None), *,
                    allow: frozenset = frozenset(), asked: set[str] | None = None) -> pd.DataFrame:
    """Both runs must be comparable: the same questions with the same gold labels (``labels``: the baseline's and
    the run's ``labels_sha256``; checked when both are known), the same store set, strategies and threshold grid,
    and every baseline point measured on every question it had. A point missing because its store's job failed,
    other questions or labels always fail; the rest fail unless ``allow`` names them (``ALLOW``): ``stores`` (a
    store not in this run, or not in the baseline), ``grid`` (a strategy or threshold not in this run's grid,
    or another grid), ``missing`` (rows missing: a store the run measured (``asked``: the stores of the run's
    jobs, when known) has no rows, or a point lacks some questions)."""
    out = []
    reasons = {}  # backend override of a failed job -> its one-line reason
    for f in failed_jobs:
        for o in f.get("overrides") or []:
            if str(o).startswith("backend="):
                reasons[str(o).split("=", 1)[1]] = str(f.get("reason", "")) or "job failed"
    cur_backends = set(cur["backend"])
    for p in points:
        backend, strategy, _ = p
        if _has(cur, p):
            nb, nc = _n_questions(base, p), _n_questions(cur, p)
            if nc < nb:
                out.append(_check("coverage", label(p), "questions", float(nb), float(nc), delta=float(nc - nb),
                                  rule="every baseline question measured at every point",
                                  verdict=_cannot_tell(f"rows of {nb - nc} of {nb} questions missing", "missing", allow)))
            continue
        if backend in reasons:
            verdict = f"{FAIL} ({reasons[backend]})"
        elif backend not in cur_backends:
            verdict = (_cannot_tell("no rows for this store, though the run measured it", "missing", allow)
                       if asked is not None and backend in asked else _cannot_tell("store not in this run", "stores", allow))
        elif strategy not in set(cur.loc[cur["backend"] == backend, "strategy"]):
            verdict = _cannot_tell("strategy not in this run", "grid", allow)
        else:
            verdict = _cannot_tell("threshold not in this run's grid", "grid", allow)
        out.append(_check("coverage", label(p), "rows", "present", "missing", rule="baseline point measured", verdict=verdict))
    extra = sorted(cur_backends - set(base["backend"]))
    if extra:
        out.append(_check("coverage", ", ".join(extra), "stores", "absent", "present", rule="same stores as the baseline",
                          verdict=_cannot_tell("store(s) not in the baseline: not gated", "stores", allow)))
    gb, gc = _grid(base), _grid(cur)
    for key in gb:
        if key in gc and gb[key] != gc[key] and gb[key] and gc[key]:
            out.append(_check("coverage", " / ".join(key), "thresholds", _grid_text(gb[key]), _grid_text(gc[key]),
                              rule="same threshold grid as the baseline", verdict=_cannot_tell("another threshold grid", "grid", allow)))
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


def sign_flip_test(d: np.ndarray, *, n_resamples: int = 10000, seed: int = 0) -> tuple[float, int, float, str]:
    """Two-sided paired sign-flip test of mean(d) = 0, over the units that changed (``|d| > TIE_TOL``; an unchanged
    unit adds 0 whatever its sign, so leaving it out changes nothing).

    With n changed units: all 2**n sign patterns when n <= ``EXACT_MAX`` (exact), else ``n_resamples`` random
    ones (p = (1 + hits) / (1 + n_resamples)). Returns (p, n, p_min, test): p_min is the smallest p the test can
    reach with this n (2 / 2**n: every changed unit moved the same way; 1 / (1 + n_resamples) at least when random).
    Worked example: d = (-1, -0.5, -0.5) -> of the 8 patterns only all-minus and all-plus reach |sum| 2, p = 0.25 = p_min.
    """
    from bench.analysis.stats import TIE_TOL

    d = np.asarray(d, dtype=np.float64)
    d = d[~np.isnan(d) & (np.abs(d) > TIE_TOL)]
    n = len(d)
    if n == 0:
        return 1.0, 0, 1.0, "nothing changed"
    obs = abs(d.sum()) - 1e-9 * max(1.0, float(np.abs(d).sum()))  # float-sum tolerance: equal sums count as extreme
    if n <= EXACT_MAX:
        signs = 1.0 - 2.0 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
        p = float((np.abs(signs @ d) >= obs).mean())
        return min(p, 1.0), n, min(1.0, 2.0 / 2.0 ** n), f"exact sign-flip, all {2 ** n} patterns"
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_resamples, n))
    p = (1.0 + float((np.abs(signs @ d) >= obs).sum())) / (1.0 + n_resamples)
    return min(p, 1.0), n, max(2.0 / 2.0 ** n, 1.0 / (1.0 + n_resamples)), f"sign-flip, {n_resamples} random patterns"


def quality_checks(base: pd.DataFrame, cur: pd.DataFrame, points: Sequence[tuple[str, str, float]], cfg: GateConfig,
                   *, allow: frozenset = frozenset()) -> pd.DataFrame:
    """Per point and metric: baseline and current macro means, and ``sign_flip_test`` of current vs baseline over
    the questions (or conversations, ``test_unit``) that changed.

    The Holm family is every distinct check that CAN reach alpha (p_min <= alpha, Tarone's rule; identical
    paired data, e.g. two exact stores, is one test); m = its size. A drop beyond tolerance fails when its Holm
    p < alpha, or when the test cannot tell (p_min > alpha / m: too few changed questions for any outcome
    to be sure of significance) unless ``allow`` has ``untestable``. Columns n_changed, p_min, limit (alpha / m)
    and rule (the test) say which test ran and what it could reach.
    """
    from bench.analysis import stats

    points = [p for p in points if _has(base, p) and _has(cur, p)]
    rows = pd.concat([base.assign(run="baseline"), cur.assign(run="current")], ignore_index=True)
    out, tests = [], {}  # tests: data key -> (p, n_changed, p_min, test name)
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
                tests[key] = sign_flip_test(units, n_resamples=cfg.test_resamples, seed=cfg.seed)
            bm, cm = _mean(base, p, metric), _mean(cur, p, metric)
            pv, n, pmin, name = tests[key]
            out.append({**_check("quality", label(p), metric, bm, cm, delta=cm - bm, n_changed=float(n), p_min=pmin,
                                 rule=f"{name} over the {n} changed {cfg.test_unit}s"), "_key": key})
    df = pd.DataFrame(out, columns=CHECK_COLUMNS + ["_key"])
    if df.empty:
        return df.drop(columns="_key")
    family = [k for k, v in tests.items() if v[1] > 0 and v[2] <= cfg.alpha]
    adjusted = dict(zip(family, stats.holm([tests[k][0] for k in family]))) if family else {}
    level = cfg.alpha / max(len(family), 1)  # Holm's strictest level: a p_min above it may never be significant
    df["p_holm"] = df["_key"].map(lambda k: adjusted.get(k, NAN)).astype(float)
    df["limit"] = level
    sig = df["p_holm"] < cfg.alpha
    better = df["delta"] * df["metric"].map(direction)  # > 0: improved, whichever way the metric points (bench.metrics)
    drop, gain = better < -cfg.tolerance, better > cfg.tolerance
    blind = ~sig & (df["p_min"] > level)
    why = [f"cannot tell: {int(n)} changed {cfg.test_unit}s, smallest reachable p {pm:.3g} > {level:.3g}"
           for n, pm in zip(df["n_changed"], df["p_min"])]
    untestable = [_cannot_tell(w, "untestable", allow).replace(SKIPPED, OK, 1) for w in why]
    df["verdict"] = np.select([drop & sig, drop & blind, drop, gain & sig],
                              [FAIL, pd.Series(untestable, index=df.index), "ok (drop not significant)", "improved"], OK)
    return df.drop(columns="_key")


def token_checks(base: pd.DataFrame, cur: pd.DataFrame, points: Sequence[tuple[str, str, float]], cfg: GateConfig) -> pd.DataFrame:
    """Per point: mean injected tokens (non-adversarial questions), current / baseline against the budget ratio."""
    out = []
    for p in points:
        if not (_has(base, p) and _has(cur, p)):
            continue
        b, c = _mean(base, p, "tokens_injected"), _mean(cur, p, "tokens_injected")
        ratio = (1.0 if c == 0 else math.inf) if b == 0 else c / b
        out.append(_check("tokens", label(p), "tokens_injected_mean", b, c, delta=c - b, ratio=ratio, limit=cfg.budget_ratio_max,
                          rule=f"fail if ratio > {cfg.budget_ratio_max:g}", verdict=FAIL if ratio > cfg.budget_ratio_max else OK))
    return pd.DataFrame(out, columns=CHECK_COLUMNS)


LATENCY_COLUMNS = ["backend", "repeat", "query", "ms", "ref_ms"]


def _ratio(s: np.ndarray, e: np.ndarray) -> float:
    """median over queries of per-query min over passes (store) / the same for the exact timings."""
    return float(np.median(s.min(axis=0)) / np.median(e.min(axis=0)))


def latency_ratios(latency: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Per store: ratio = median over queries of the per-query minimum over passes of its search time, divided by
    the same for the ``reference`` (the minimum over every reference timing of the query in those passes, whichever
    store it followed); se = the leave-one-pass-out (jackknife) standard error of log(ratio) (NaN with one pass).

    ``latency`` (latency.csv): one row per store, pass and query: backend, repeat, query, ms, ref_ms. Returns
    backend, p50_ms (median of per-query minima), ref_p50_ms, ratio, se, repeats, n.
    """
    need = set(LATENCY_COLUMNS)
    if not need <= set(latency.columns):
        raise ValueError(f"latency table: missing column(s) {sorted(need - set(latency.columns))} "
                         f"(an older latency.csv with per-pass p50s only: re-run make baseline)")
    out = []
    stores = latency[latency["backend"] != reference]
    ref = stores.pivot_table(index="repeat", columns="query", values="ref_ms", aggfunc="min")
    for backend, g in stores.groupby("backend", sort=False):
        t = g.pivot_table(index="repeat", columns="query", values="ms")
        s, e = t.to_numpy(), ref.reindex(index=t.index, columns=t.columns).to_numpy()
        r = len(s)
        ratio = _ratio(s, e)
        se = NAN
        if r > 1:
            loo = np.log([_ratio(np.delete(s, i, axis=0), np.delete(e, i, axis=0)) for i in range(r)])
            se = float(math.sqrt((r - 1) / r * float(((loo - loo.mean()) ** 2).sum())))
        out.append({"backend": backend, "p50_ms": float(np.median(s.min(axis=0))), "ref_p50_ms": float(np.median(e.min(axis=0))),
                    "ratio": ratio, "se": se, "repeats": r, "n": s.shape[1]})
    return pd.DataFrame(out, columns=["backend", "p50_ms", "ref_p50_ms", "ratio", "se", "repeats", "n"])


def latency_checks(base: pd.DataFrame | None, cur: pd.DataFrame | None, cfg: GateConfig) -> pd.DataFrame:
    """Per store: x = (store / exact now) / (the same in the baseline); limit = max(``latency_ratio_max``,
    exp(``latency_noise_z`` * sqrt(se_run² + se_baseline²))). FAIL when x > limit; skipped (too noisy) only
    when the noise part of the limit is >= ``TOO_NOISY`` (2)."""
    metric = f"store / {REFERENCE} (per-query min)"
    if base is None or cur is None:
        which = "baseline" if base is None else "current run"
        return pd.DataFrame([_check("latency", "all stores", metric, NAN, NAN, rule="latency needs latency.csv on both sides",
                                    verdict=f"{FAIL} (no {LATENCY} in the {which}: re-run make baseline)")], columns=CHECK_COLUMNS)
    try:
        rb = latency_ratios(base).set_index("backend")
        rc = latency_ratios(cur).set_index("backend")
    except ValueError as e:
        return pd.DataFrame([_check("latency", "all stores", metric, NAN, NAN, rule="latency needs per-query timings",
                                    verdict=f"{FAIL} ({e})")], columns=CHECK_COLUMNS)
    out = []
    for backend in rb.index:
        if backend not in rc.index:
            continue  # a missing store is a coverage failure
        b, c = float(rb.loc[backend, "ratio"]), float(rc.loc[backend, "ratio"])
        x = c / b if b > 0 else math.inf
        se = math.sqrt(np.nansum([float(rb.loc[backend, "se"]) ** 2, float(rc.loc[backend, "se"]) ** 2]))
        noise = math.exp(cfg.latency_noise_z * se)
        limit = max(cfg.latency_ratio_max, noise)
        rule = f"fail if x > max({cfg.latency_ratio_max:g}, noise {noise:.2f})"
        verdict = (f"{SKIPPED} (too noisy: noise limit x{noise:.2f} >= {TOO_NOISY:g})" if noise >= TOO_NOISY
                   else FAIL if x > limit else OK)
        out.append(_check("latency", backend, metric, b, c, delta=c - b, ratio=x, limit=limit, rule=rule, verdict=verdict))
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


def _inside(verdict: str) -> str:
    """"FAIL (why)" -> "why"."""
    v = str(verdict)[len(FAIL):].strip()
    return v[1:-1] if v.startswith("(") and v.endswith(")") else v


def _why(r: pd.Series) -> str:
    if r["check"] == "quality":
        if str(r["verdict"]) != FAIL:
            return f"{r['metric']} {r['config']}: {_fmt(r['baseline'])} -> {_fmt(r['current'])} ({r['delta']:+.3f}; {_inside(r['verdict'])})"
        return f"{r['metric']} {r['config']}: {_fmt(r['baseline'])} -> {_fmt(r['current'])} ({r['delta']:+.3f}, Holm p {r['p_holm']:.2g})"
    if r["check"] == "tokens":
        return f"tokens {r['config']}: {_fmt(r['baseline'], 1)} -> {_fmt(r['current'], 1)} (x{_fmt(r['ratio'], 2)})"
    if r["check"] == "latency":
        if math.isnan(r["ratio"]):
            return f"latency {r['config']}: {_inside(r['verdict'])}"
        return (f"latency {r['config']}: {_fmt(r['baseline'], 2)}x -> {_fmt(r['current'], 2)}x {REFERENCE} "
                f"(x{_fmt(r['ratio'], 2)} > limit x{_fmt(r['limit'], 2)})")
    return f"{r['metric']} {r['config']}: {r['baseline']} -> {r['current']} {r['verdict'][len(FAIL):].strip()}".strip()


def _asked(run: RunData) -> set[str] | None:
    """The stores the run measured (its jobs' backends, from meta.json), or None when it does not say."""
    jobs = run.meta.get("jobs") or []
    return {str(j["backend"]) for j in jobs if isinstance(j, dict) and j.get("backend")} or None


def gate(baseline: RunData, current: RunData, cfg: GateConfig, *, failed_jobs: Sequence[dict] = (),
         allow: frozenset = frozenset()) -> GateResult:
    """Compare a current run with its baseline. Another dataset fails; another embedder fails unless ``allow`` has
    ``embedder`` (then the comparison is skipped, exit 0); the rest: see the module docstring."""
    for what in ("dataset", "embedder"):
        b, c = getattr(baseline, what), getattr(current, what)
        if b != c:
            why = f"baseline {show(baseline.path)} was made with {what} {b!r}, this run uses {c!r}"
            if what == "embedder" and "embedder" in allow:
                return GateResult(pd.DataFrame(columns=CHECK_COLUMNS), f"regress SKIPPED: {why} (allowed by --allow embedder)", False, True)
            more = "; --allow embedder skips the comparison" if what == "embedder" else ""
            return GateResult(pd.DataFrame(columns=CHECK_COLUMNS), f"regress FAIL: cannot compare: {why}{more}", True)
    points = operating_points(baseline.summary, baseline.rows)
    parts = [coverage_checks(baseline.rows, current.rows, points, failed_jobs,
                             (baseline.meta.get("labels_sha256"), current.meta.get("labels_sha256")), allow=allow, asked=_asked(current)),
             quality_checks(baseline.rows, current.rows, points, cfg, allow=allow),
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
    v = checks["verdict"].astype(str)
    skipped = int(((checks["check"] == "coverage") & (checks["metric"] == "rows") & v.str.startswith(SKIPPED)).sum())
    allowed = int(v.str.contains("allowed by --allow").sum())
    noisy = int(((checks["check"] == "latency") & v.str.startswith(SKIPPED)).sum())
    notes = ([f"{skipped} baseline points not in this run"] if skipped else []) + ([f"{allowed} allowed by --allow"] if allowed else []) \
        + ([f"{noisy} latency checks too noisy"] if noisy else [])
    verdict = (f"regress PASS: {n.get('quality', 0)} quality, {n.get('tokens', 0)} token and {n.get('latency', 0)} latency checks "
               f"within limits vs {show(baseline.path)} ({baseline.dataset}, {len(points) - skipped} operating points"
               + (f"; {'; '.join(notes)}" if notes else "") + ")")
    return GateResult(checks, verdict, False)


# ---------------------------------------------------------------------------------------- markdown


def _load(meta: dict) -> str:
    la = meta.get("load_average")
    return "?" if not la else "/".join(f"{x:.2f}" for x in la)


def render_markdown(result: GateResult, cfg: GateConfig, baseline: RunData | None, current: RunData | None) -> str:
    lines = ["# recallbench regression gate", "", f"**{result.verdict}**", ""]
    if baseline is not None and current is not None:
        bm = baseline.meta
        lines += [f"- Baseline: `{show(baseline.path)}` — dataset {baseline.dataset}, embedder {baseline.embedder}, "
                  f"made {bm.get('made_at', '?')} on commit {str(bm.get('git_commit') or '?')[:12]}; load average {_load(bm)}",
                  f"- Current: `{show(current.path)}` — made {current.meta.get('made_at', '?')} on commit "
                  f"{str(current.meta.get('git_commit') or '?')[:12]}; machine load average (1/5/15 min, after the latency pass) "
                  f"{_load(current.meta)}", ""]
    lines += ["Rules: a run the gate cannot compare (no baseline, another embedder, store set or threshold grid, rows missing, a drop "
              "the test cannot tell) FAILS unless `--allow baseline,embedder,stores,grid,missing,untestable` names it. "
              "Operating points = each store's strategies of the baseline, those without a threshold as they are and "
              f"thresholded ones at the baseline's best-F1 threshold. Quality: the paired sign-flip test over the n questions "
              f"that changed (unit {cfg.test_unit}; exact over all 2^n sign patterns when n <= {EXACT_MAX}, else "
              f"{cfg.test_resamples} random ones; smallest reachable p = 2/2^n, column min p), Holm's correction over the m checks "
              f"that can reach {cfg.alpha:g} (identical comparisons count once). A drop beyond −{cfg.tolerance:g} fails when "
              f"Holm p < {cfg.alpha:g}, or when min p > {cfg.alpha:g}/m (column limit): too few changed questions to tell. "
              f"Tokens fail when mean injected tokens / baseline > {cfg.budget_ratio_max:g}. Latency: per query, each store "
              f"then {REFERENCE} right after it, {cfg.latency_repeats} passes; store (and {REFERENCE}) latency = median over queries of the per-query "
              f"minimum; fails when (store / {REFERENCE}) / the baseline's > max({cfg.latency_ratio_max:g}, "
              f"exp({cfg.latency_noise_z:g} × leave-one-pass-out standard error)) (column limit); skipped as too noisy only when "
              f"the noise part is ≥ {TOO_NOISY:g}.", ""]
    if result.checks.empty:
        return "\n".join(lines) + "\n"
    q = result.checks[(result.checks["check"] == "quality") & (result.checks["n_changed"].fillna(0) > 0)]
    if len(q):
        tests = q.drop_duplicates("rule")
        lines += ["Quality tests run (checks where something changed): " + "; ".join(
            f"{r['rule']} (smallest reachable p {r['p_min']:.3g}, Holm level {r['limit']:.3g})" for _, r in tests.iterrows()) + ".", ""]
    order = {"coverage": 0, "quality": 1, "tokens": 2, "latency": 3}
    checks = result.checks.assign(_o=result.checks["check"].map(order), _f=~result.checks["verdict"].astype(str).str.startswith(FAIL))
    checks = checks.sort_values(["_f", "_o"], kind="stable")
    lines += ["| check | config | metric | baseline | current | delta | ratio | limit | changed | min p | Holm p | verdict |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in checks.iterrows():
        digits = 1 if r["check"] == "tokens" else (2 if r["check"] == "latency" else 3)
        b, c = r["baseline"], r["current"]
        b = _fmt(b, digits) if isinstance(b, float) else str(b)
        c = _fmt(c, digits) if isinstance(c, float) else str(c)
        d = "—" if isinstance(r["delta"], float) and math.isnan(r["delta"]) else f"{r['delta']:+.{digits}f}"
        p = "—" if math.isnan(r["p_holm"]) else f"{r['p_holm']:.3g}"
        pm = "—" if math.isnan(r["p_min"]) else f"{r['p_min']:.3g}"
        nc = "—" if math.isnan(r["n_changed"]) else str(int(r["n_changed"]))
        lim = "—" if math.isnan(r["limit"]) else f"{r['limit']:.3g}"
        v = f"**{r['verdict']}**" if str(r["verdict"]).startswith(FAIL) else r["verdict"]
        lines.append(f"| {r['check']} | {r['config']} | {r['metric']} | {b} | {c} | {d} | {_fmt(r['ratio'], 2)} | {lim} | {nc} | {pm} | {p} | {v} |")
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
                  repeats: int, queries: int, warmup: int, reference: str = REFERENCE) -> pd.DataFrame:
    """Time ``backend.search`` (``bench.backends.session``: perf_counter_ns around the call alone) over ``queries``
    questions per pass, on open stores that hold the corpus, each store against the ``reference`` store.

    The questions are taken in order and cycled when there are fewer than ``queries`` (a small corpus
    still gives ``queries`` samples); ``warmup`` searches per store are discarded first. Per pass and
    question every other store is called in turn (the order rotates each pass) and the reference right after
    it, so a store and its reference timing see the same machine load. Returns one row per (store, pass,
    query): backend, repeat, query, ms, ref_ms (``LATENCY_COLUMNS``; none when the reference is the only store).
    """
    from bench.backends.session import Session
    from bench.trace import question_filter

    if reference not in backends:
        raise ValueError(f"latency: no {reference!r} store (the reference must be timed in the same run)")
    names = [n for n in backends if n != reference]
    sessions = {n: Session(backends[n]) for n in backends}
    ks = {n: min(depth, backends[n].capabilities.max_k) for n in backends}
    qs = list(questions)
    idx = [i % len(qs) for i in range(queries)] if qs else []
    wheres = [question_filter(q) for q in qs]
    for n in backends:  # discarded: cold caches
        sessions[n].warm_up(vectors[idx], [wheres[i] for i in idx], k=ks[n], n=warmup)
    ref = sessions[reference]
    out = []
    for rep in range(repeats):
        order = names[rep % len(names):] + names[: rep % len(names)] if names else []
        for j, i in enumerate(idx):
            for n in order:
                t = sessions[n].timed_search(vectors[i], k=ks[n], where=wheres[i])[1]
                e = ref.timed_search(vectors[i], k=ks[reference], where=wheres[i])[1]
                out.append((n, rep, j, t / 1e6, e / 1e6))
    return pd.DataFrame(out, columns=LATENCY_COLUMNS)


class _Slowed:
    """A store whose searches take ``factor`` x their time (busy-waits (factor - 1) x the measured search time
    after each): ``--fault-slow``, to show the latency gate failing on a real slowdown."""

    def __init__(self, backend, factor: float):
        self._backend, self._factor = backend, factor

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def search(self, *args, **kwargs):
        t0 = time.perf_counter_ns()
        hits = self._backend.search(*args, **kwargs)
        end = t0 + (time.perf_counter_ns() - t0) * self._factor
        while time.perf_counter_ns() < end:
            pass
        return hits


def parse_fault_slow(specs: Sequence[str]) -> dict[str, float]:
    """``STORE=FACTOR`` strings -> {store: factor} (factor >= 1)."""
    out = {}
    for spec in specs:
        store, _, factor = str(spec).partition("=")
        try:
            f = float(factor)
        except ValueError:
            f = NAN
        if not store or not f >= 1:
            raise ValueError(f"--fault-slow {spec!r}: expected STORE=FACTOR with FACTOR >= 1, e.g. sqlite_vec=2")
        out[store] = f
    return out


def measure_latency(run_dir: Path, cfg: GateConfig, stores_dir: Path, slow: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Rebuild every finished job's store from its resolved config (the corpus from the job's snapshot,
    embeddings from the cache) and time it (``slow``: store -> factor, ``--fault-slow``)."""
    from contextlib import ExitStack

    from bench.backends.layout import build_store
    from bench.backends.session import INGEST_BATCH, open_session
    from bench.embedders.cache import CachedEmbedder
    from bench.plugins import instantiate as build
    from bench.trace import batches, embed_corpus, search_depth

    slow = dict(slow or {})
    jobs = job_dirs(run_dir)
    cfgs = [load_job_config(j) for j in jobs]
    if not cfgs:
        return pd.DataFrame(columns=LATENCY_COLUMNS)
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
            unknown = sorted(set(slow) - set(by_name))
            if unknown:
                raise RegressError(f"--fault-slow: no store {unknown} in this run (stores: {sorted(by_name)})")
            for name, factor in slow.items():
                log.warning("--fault-slow: %s searches made %gx slower in the latency pass", name, factor)
                by_name[name] = _Slowed(by_name[name], factor)
            if REFERENCE not in by_name:
                return pd.DataFrame(columns=LATENCY_COLUMNS)
            return time_searches(by_name, questions, qv, depth=search_depth(first.get("depth"), corpus), repeats=cfg.latency_repeats,
                                 queries=cfg.latency_queries, warmup=cfg.latency_warmup)
    finally:
        shutil.rmtree(stores_dir, ignore_errors=True)


def latency_pass(run_dir: Path, stores_dir: Path, slow: Mapping[str, float] | None = None) -> Path:
    """``measure_latency`` in a child process (an embedded seekdb can serve one path per process) -> latency.csv."""
    cfg = gate_config(run_dir)
    lat = measure_latency(run_dir, cfg, stores_dir, slow)
    return RunDir(run_dir).write_latency(lat)


def finish_run(run_dir: Path, overrides: Sequence[str], stores_dir: Path, slow: Sequence[str] = ()) -> GateConfig:
    """After the experiment: the latency pass (latency.csv, in a child process) and meta.json in ``run_dir``."""
    run = RunDir(run_dir)
    cfg = gate_config(run_dir)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench.tools.regress", "--latency-pass", str(run_dir), "--out", str(stores_dir),
                           *[f"--fault-slow={s}" for s in slow]], cwd=REPO, stdin=subprocess.DEVNULL)
    if proc.returncode != 0 or not run.has(LATENCY):
        raise RegressError(f"regress FAIL: the latency pass over {run_dir} failed (exit {proc.returncode}; its error is above)")
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    log.info("latency pass finished in %.0f s (load average %s)", time.perf_counter() - t0, load)
    rows = run.questions()
    jobs = run.jobs() if run.has(JOBS) else []
    failed = run.failed()
    meta = {"made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_commit": git_commit(),
            "command": "python -m bench -m experiment=regress " + " ".join([*RUN_FLAGS, *overrides]),
            "dataset": str(rows["dataset"].iloc[0]), "dataset_source": jobs[0].get("dataset_source") if jobs else None,
            "embedder": str(rows["embedder"].iloc[0]), "backends": sorted(rows["backend"].unique().tolist()),
            "strategies": list(dict.fromkeys(rows["strategy"])), "n_questions": int(rows["question_id"].nunique()),
            "question_set": question_set_id(rows), "labels_sha256": run.labels().get(str(rows["dataset"].iloc[0])),
            "load_average": load, "fault_slow": list(slow) or None,
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
  settings and job metadata, the machine's load average), `latency.csv` (latency pass: per store, pass and query
  its search time and the exact store's right after it).
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


def regress(run_dir: Path, baseline_root: Path, out: Path, allow: frozenset = frozenset()) -> GateResult:
    """Gate a finished regress run against ``baseline_root/<its dataset>/``; writes the report to ``out``.
    No baseline for its dataset fails unless ``allow`` has ``baseline`` (then skipped)."""
    current = load_run(run_dir)
    cfg = gate_config(run_dir)
    base_dir = Path(baseline_root) / current.dataset
    if not RunDir(base_dir).has(QUESTIONS):
        have = sorted(p.name for p in Path(baseline_root).glob("*") if RunDir(p).has(QUESTIONS))
        why = (f"no baseline for dataset {current.dataset!r} in {show(baseline_root)} "
               f"(baselines: {', '.join(have) or 'none'}); `make baseline` writes one")
        result = (GateResult(pd.DataFrame(columns=CHECK_COLUMNS), f"regress SKIPPED: {why} (allowed by --allow baseline)", False, True)
                  if "baseline" in allow else
                  GateResult(pd.DataFrame(columns=CHECK_COLUMNS), f"regress FAIL: cannot compare: {why}; --allow baseline skips", True))
        report(result, cfg, None, current, out)
        return result
    baseline = load_run(base_dir)
    failed = current.meta.get("failed_jobs") or []
    result = gate(baseline, current, cfg, failed_jobs=failed, allow=allow)
    report(result, cfg, baseline, current, out)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = parser("regress", "Run the CI-sized experiment and gate it against reports/baseline/<dataset>/ (make regress), "
                           "or rewrite the baselines (make baseline).",
                examples=["recallbench regress                          # the gate: exit 1 names what regressed",
                          "recallbench regress --demo backend=exact       # on the demo corpus, one store",
                          "recallbench regress --run reports/regress/run  # gate a finished regress run again",
                          "recallbench regress --allow grid               # accept another threshold grid (else exit 1)",
                          "recallbench regress --write-baseline           # rewrite reports/baseline/ (review and commit)"])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for the experiment, e.g. backend=exact,sqlite_vec")
    ap.add_argument("--write-baseline", action="store_true",
                    help="run the experiment and REPLACE the baseline of its dataset (and of the demo corpus)")
    ap.add_argument("--demo", action="store_true", help="use the demo corpus even when the data path has LoCoMo")
    ap.add_argument("--run", type=Path, help="gate this finished regress run directory instead of running the experiment")
    ap.add_argument("--out", type=Path, default=reports_dir("regress"), help="report directory (default reports/regress)")
    ap.add_argument("--baseline-root", type=Path, default=reports_dir("baseline"), help="default reports/baseline")
    ap.add_argument("--allow", action="append", default=[], metavar="NAME[,NAME]",
                    help=f"accept comparisons the gate cannot make instead of failing: {', '.join(ALLOW)}")
    ap.add_argument("--latency-pass", type=Path, help=argparse.SUPPRESS)  # internal: the child process of finish_run
    ap.add_argument("--fault-slow", action="append", default=[], help=argparse.SUPPRESS)  # demo: STORE=FACTOR slower searches
    args = ap.parse_args(argv)
    allow = frozenset(a.strip() for x in args.allow for a in x.split(",") if a.strip())
    if allow - set(ALLOW):
        ap.error(f"--allow: unknown name(s) {sorted(allow - set(ALLOW))} (known: {', '.join(ALLOW)})")
    try:
        slow = parse_fault_slow(args.fault_slow)
    except ValueError as e:
        ap.error(str(e))
    if slow and args.write_baseline:
        ap.error("--fault-slow only demonstrates the gate: a baseline is never written with it")
    setup_logging()
    out = args.out.resolve()
    if args.latency_pass is not None:
        from bench.output import error_line

        try:
            latency_pass(args.latency_pass.resolve(), out, slow)
        except Exception as e:  # one line for the parent's log, never a traceback
            log.error("latency pass: %s", error_line(e))
            log.debug("details", exc_info=True)
            return 1
        return 0
    try:
        if args.run is not None:
            if args.write_baseline or args.overrides or args.demo or slow:
                ap.error("--run gates a finished run: it takes no overrides, --demo, --fault-slow or --write-baseline")
            result = regress(args.run.resolve(), args.baseline_root.resolve(), out, allow)
        else:
            demo = ["dataset.force_demo=true"]
            run_dir = out / "run"
            written: list[str] = []
            for extra in ([demo] if args.demo else [[], demo]):
                overrides = [*args.overrides, *extra]
                run_experiment(run_dir, overrides, out / "experiment.log")
                finish_run(run_dir, overrides, out / "stores", args.fault_slow)
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
            result = regress(out / "run", args.baseline_root.resolve(), out, allow)
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
