"""Coverage checks: are the two runs comparable (the same questions and gold labels, store set, strategies and threshold
grid, every baseline point measured on every question it had)? See "Comparable runs" in ``bench.tools.regress``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from bench.tools.regress.checks.common import _cannot_tell, _check, _has, _n_questions, label
from bench.tools.regress.settings import CHECK_COLUMNS, FAIL


def _grid(rows: pd.DataFrame) -> dict[tuple[str, str], tuple[float, ...]]:
    """(backend, strategy) -> its sorted thresholds (rounded to 1e-9; empty for a strategy without thresholds)."""
    out = {}
    for (backend, strategy), g in rows.groupby(["backend", "strategy"], sort=False):
        out[(str(backend), str(strategy))] = tuple(sorted({round(float(t), 9) for t in g["threshold"].dropna()}))
    return out


def _grid_text(ts: tuple[float, ...]) -> str:
    return "none" if not ts else f"{len(ts)}: {ts[0]:g}..{ts[-1]:g}" if len(ts) > 3 else ", ".join(f"{t:g}" for t in ts)


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
