"""What every check family shares: the operating points of the BASELINE (``operating_points``), selecting a point's rows,
and the check row (``_check``) with the verdict of a comparison the gate cannot make (``_cannot_tell``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.tools.regress.settings import FAIL, NAN, OK, SKIPPED


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


def _n_questions(rows: pd.DataFrame, point) -> int:
    backend, strategy, t = point
    m = (rows["backend"] == backend) & (rows["strategy"] == strategy)
    m &= rows["threshold"].isna() if math.isnan(t) else np.isclose(rows["threshold"], t, atol=1e-9)
    return int(rows.loc[m, "question_id"].nunique())


def _mean(rows: pd.DataFrame, point, metric: str) -> float:
    from bench.analysis.stats import question_values

    v = question_values(rows, _where(point), metric)["value"]
    return float(v.mean()) if v.notna().any() else NAN
