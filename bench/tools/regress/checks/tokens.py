"""Token checks: per operating point, mean injected tokens now / the baseline's against ``budget_ratio_max``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from bench.tools.regress.checks.common import _check, _has, _mean, label
from bench.tools.regress.settings import CHECK_COLUMNS, FAIL, OK, GateConfig


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
