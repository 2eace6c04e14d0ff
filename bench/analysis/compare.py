"""Two finished runs compared: paired significance tests on the same questions (``recallbench compare``).

Owns pairing configurations across two run directories (same dataset and strategy; every
embedder/store of A against every one of B), each at its own run's recommended threshold (or at
every common threshold with ``all_thresholds``), and the paired tests of
``bench.analysis.stats.compare_pairs`` (the report's paired t test over conversations on the same questions,
Holm across all pairs, win/tie/loss). Reads only each run's per-question rows and ``recommend:`` settings (``bench.results.rundir.RunDir``).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd

from bench.analysis import stats
from bench.analysis.recommend import CONFIG_KEYS, RecommendConfig, one_format, recommend
from bench.analysis.tables import ROW_METRIC, load_settings
from bench.results.rundir import QUESTIONS, RunDir

log = logging.getLogger(__name__)

METRIC_CHOICES = ("f1", "f1_abstain", "recall", "precision", "hit", "tokens_injected", "abstained")


def load_rows(run_dir: Path) -> pd.DataFrame:
    run = RunDir(run_dir)
    if not run.has(QUESTIONS):
        raise ValueError(f"{run.file(QUESTIONS)}: not found (is {run_dir} a finished run directory?)")
    return one_format(run.questions())


def run_pairs(rec_a, rec_b, rows_a: pd.DataFrame, rows_b: pd.DataFrame, *, all_thresholds: bool = False) -> list[tuple[dict, dict]]:
    """(A config, B config) dicts with a ``run`` key: same dataset and strategy, each combination
    of A's and B's (embedder, backend); at each run's chosen threshold or every common threshold."""
    pairs = []
    for _, a in rec_a.points.iterrows():
        for _, b in rec_b.points.iterrows():
            if a["dataset"] != b["dataset"] or a["strategy"] != b["strategy"]:
                continue
            base_a = {"run": "A", **{k: a[k] for k in CONFIG_KEYS}}
            base_b = {"run": "B", **{k: b[k] for k in CONFIG_KEYS}}
            if not all_thresholds:
                if a["feasible"] and b["feasible"]:
                    pairs.append(({**base_a, "threshold": a["threshold"]}, {**base_b, "threshold": b["threshold"]}))
                continue
            ta = _thresholds(rows_a, base_a)
            tb = _thresholds(rows_b, base_b)
            for t in ta:
                if any((math.isnan(t) and math.isnan(u)) or np.isclose(t, u) for u in tb):
                    pairs.append(({**base_a, "threshold": t}, {**base_b, "threshold": t}))
    return pairs


def _thresholds(rows: pd.DataFrame, where: dict) -> list[float]:
    m = np.ones(len(rows), bool)
    for k in CONFIG_KEYS:
        m &= (rows[k] == where[k]).to_numpy()
    return sorted(set(rows.loc[m, "threshold"].tolist()), key=lambda t: (not math.isnan(t), t))


def label_check(run_a: Path, run_b: Path) -> tuple[list[str], list[str]]:
    """(mismatches, unknowns): per dataset both runs scored, whether they scored the same questions with the
    same gold labels (``RunDir.labels``). A mismatch mixes a label change with a system change."""
    la, lb = RunDir(run_a).labels(), RunDir(run_b).labels()
    bad, unknown = [], []
    for d in sorted(set(la) & set(lb)):
        a, b = la[d], lb[d]
        if a is None or b is None:
            unknown.append(f"{d}: the labels of run {'A' if a is None else 'B'} are unknown (made before runs recorded them)")
        elif a != b:
            bad.append(f"{d}: A scored labels {a[:12]}, B scored labels {b[:12]}")
    return bad, unknown


def compare_runs(run_a: Path, run_b: Path, *, metric: str | None = None, all_thresholds: bool = False,
                 settings: RecommendConfig | None = None, allow_label_mismatch: bool = False) -> tuple[pd.DataFrame, RecommendConfig]:
    """Paired tests between the configurations of two runs (see module docstring).

    Refuses (ValueError) when the runs scored different questions or gold labels for a dataset, unless
    ``allow_label_mismatch``; the warnings (mismatches allowed, labels unknown) are in ``res.attrs["warnings"]``."""
    bad, unknown = label_check(run_a, run_b)
    if bad and not allow_label_mismatch:
        raise ValueError(f"{run_a} and {run_b} scored different questions or gold labels ({'; '.join(bad)}): a difference "
                         "between them would mix the label change with the system change. Re-run both on the same corpus "
                         "(or pass --allow-label-mismatch to compare anyway)")
    warnings = [f"DIFFERENT LABELS, compared anyway: {w}" for w in bad] + [f"labels not checked: {w}" for w in unknown]
    for w in warnings:
        log.warning(w)
    rows_a, rows_b = load_rows(run_a), load_rows(run_b)
    cfg_a = settings or load_settings(RunDir(run_a))
    cfg_b = settings or load_settings(RunDir(run_b))
    rec_a = recommend(rows_a, cfg_a, source=str(RunDir(run_a).file(QUESTIONS)))
    rec_b = recommend(rows_b, cfg_b, source=str(RunDir(run_b).file(QUESTIONS)))
    pairs = run_pairs(rec_a, rec_b, rows_a, rows_b, all_thresholds=all_thresholds)
    if not pairs:
        raise ValueError(f"{run_a} and {run_b} share no (dataset, strategy) with a feasible operating point: nothing to compare")
    metric = metric or ROW_METRIC[cfg_a.primary]
    rows = pd.concat([rows_a.assign(run="A"), rows_b.assign(run="B")], ignore_index=True)
    res = stats.compare_pairs(rows, pairs, metric=metric, alpha=cfg_a.alpha, confidence=cfg_a.confidence)
    res.attrs["warnings"] = warnings
    return res, cfg_a
