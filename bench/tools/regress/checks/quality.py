"""Quality checks: per operating point and metric, the paired sign-flip test of current vs baseline over the questions that
changed, Holm's correction over the checks that can reach alpha. See "Quality" in ``bench.tools.regress``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from bench.metrics import direction
from bench.tools.regress.checks.common import _cannot_tell, _check, _has, _mean, _where, label
from bench.tools.regress.settings import CHECK_COLUMNS, EXACT_MAX, FAIL, NAN, OK, SKIPPED, GateConfig


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
