"""``python -m bench.analysis.compare RUN_A RUN_B``: significance table between two finished runs.

Owns pairing configurations across two run directories (same dataset and strategy; every
embedder/store of A against every one of B), each at its own run's recommended threshold (or at
every common threshold with ``--all-thresholds``), and printing the paired tests of
``bench.analysis.stats.compare_pairs`` (permutation test on the same questions, Holm across all pairs,
win/tie/loss). Reads only each run's per-question rows and ``recommend:`` settings (``bench.rundir.RunDir``).
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
from bench.rundir import QUESTIONS, RunDir

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


def compare_runs(run_a: Path, run_b: Path, *, metric: str | None = None, all_thresholds: bool = False,
                 settings: RecommendConfig | None = None) -> tuple[pd.DataFrame, RecommendConfig]:
    """Paired tests between the configurations of two runs (see module docstring)."""
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
    res = stats.compare_pairs(rows, pairs, metric=metric, alpha=cfg_a.alpha, unit=cfg_a.test_unit,
                              n_resamples=cfg_a.test_resamples, seed=cfg_a.seed, confidence=cfg_a.confidence)
    return res, cfg_a


def _thr(t) -> str:
    return "—" if t is None or (isinstance(t, float) and math.isnan(t)) else f"{t:.2f}"


def format_table(res: pd.DataFrame, cfg: RecommendConfig, run_a: Path, run_b: Path) -> str:
    unit = "questions" if cfg.test_unit == "question" else "whole conversations"
    metric = res["metric"].iloc[0] if len(res) else "?"
    lines = [f"A = {run_a}", f"B = {run_b}", "",
             f"Paired sign-flip permutation test of the mean per-question {metric} difference (flipping {unit}, "
             f"{cfg.test_resamples} resamples, seed {cfg.seed}); Holm-corrected across the {len(res)} pairs; "
             f"* = significant at {cfg.alpha:g}. CI of A − B: {cfg.confidence:.0%} cluster bootstrap over conversations. "
             "W/T/L = questions where A wins/ties/loses."
             + (" The p-value treats questions as independent; the CI resamples whole conversations: when they disagree, "
                "trust the CI (or set recommend.test_unit=conversation in the run's config)." if cfg.test_unit == "question" else ""), "",
             "| dataset | strategy | A (embedder / store @ threshold) | B (embedder / store @ threshold) | n | mean A | mean B | A − B [CI] | p | Holm p | sig | W/T/L |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in res.iterrows():
        a, b = r["a"], r["b"]
        ci = "n/a" if math.isnan(r["diff"]) else f"{r['diff']:+.4f} [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]"
        lines.append(f"| {a['dataset']} | {a['strategy']} | {a['embedder']} / {a['backend']} @ {_thr(a['threshold'])} | "
                     f"{b['embedder']} / {b['backend']} @ {_thr(b['threshold'])} | {r['n']} | {r['mean_a']:.4f} | {r['mean_b']:.4f} | "
                     f"{ci} | {r['p']:.4g} | {r['p_holm']:.4g} | {'*' if r['significant'] else ''} | {r['wins']}/{r['ties']}/{r['losses']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench.tools.common import fail, parser, setup_logging

    ap = parser("compare", "Significance table between two finished runs (paired tests on the same questions, Holm-corrected).",
                examples=["recallbench compare reports/runs/<run A> reports/runs/<run B>",
                          "recallbench compare RUN_A RUN_B --metric recall --all-thresholds --json"])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--metric", choices=METRIC_CHOICES, help="per-question metric (default: the objective's, F1)")
    ap.add_argument("--all-thresholds", action="store_true", help="compare at every common threshold, not each run's recommended one")
    ap.add_argument("--json", action="store_true", help="print the table as JSON records instead of Markdown")
    args = ap.parse_args(argv)
    setup_logging(logging.WARNING)
    try:
        res, cfg = compare_runs(args.run_a, args.run_b, metric=args.metric, all_thresholds=args.all_thresholds)
    except ValueError as e:
        return fail(str(e))
    if args.json:
        print(res.to_json(orient="records", indent=1))
    else:
        print(format_table(res, cfg, args.run_a, args.run_b))
    return 0


if __name__ == "__main__":
    from bench.tools.common import entry

    raise SystemExit(entry(main))
