"""Latency checks: per store, (store / exact, from latency.csv) now / the baseline's, against max(``latency_ratio_max``,
the noise limit). The timings come from the latency pass (``bench.tools.regress.latency_pass``). See "Latency" in
``bench.tools.regress``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.results.rundir import LATENCY
from bench.tools.regress.checks.common import _check
from bench.tools.regress.settings import CHECK_COLUMNS, FAIL, NAN, OK, REFERENCE, SKIPPED, TOO_NOISY, GateConfig


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


def latency_checks(base: pd.DataFrame | None, cur: pd.DataFrame | None, cfg: GateConfig, *, same_machine: bool = True) -> pd.DataFrame:
    """Per store: x = (store / exact now) / (the same in the baseline); limit = max(``latency_ratio_max``,
    exp(``latency_noise_z`` * sqrt(se_run² + se_baseline²))), with ``latency_ratio_max_other_machine`` in place of
    ``latency_ratio_max`` when the baseline was made on another machine (``same_machine`` False: a store and the
    exact numpy scan do not speed up alike from one CPU to another). FAIL when x > limit; skipped (too noisy) only
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
        floor = cfg.latency_ratio_max if same_machine else cfg.latency_ratio_max_other_machine
        limit = max(floor, noise)
        rule = f"fail if x > max({floor:g}{'' if same_machine else ' (baseline from another machine)'}, noise {noise:.2f})"
        verdict = (f"{SKIPPED} (too noisy: noise limit x{noise:.2f} >= {TOO_NOISY:g})" if noise >= TOO_NOISY
                   else FAIL if x > limit else OK)
        out.append(_check("latency", backend, metric, b, c, delta=c - b, ratio=x, limit=limit, rule=rule, verdict=verdict))
    return pd.DataFrame(out, columns=CHECK_COLUMNS)
