"""``recallbench compare RUN_A RUN_B``: the paired significance table of two finished runs, on the console.

The comparison itself (which pairs, which tests) is ``bench.analysis.compare``; this module renders it with the report's
significance table (``bench.report.significance``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from bench.analysis.compare import METRIC_CHOICES, compare_runs
from bench.analysis.recommend import RecommendConfig
from bench.analysis.verdict import test_description
from bench.cli.common import fail, parser, setup_logging
from bench.output import md_text as E
from bench.report.significance import significance_table, threshold


def _side(d) -> str:
    return f"{E(d['embedder'])} / {E(d['backend'])} @ {threshold(d['threshold'])}"


def format_table(res: pd.DataFrame, cfg: RecommendConfig, run_a: Path, run_b: Path) -> str:
    metric = res["metric"].iloc[0] if len(res) else "?"
    lines = [f"**WARNING: {w}**" for w in res.attrs.get("warnings", [])]
    lines += [f"A = {run_a}", f"B = {run_b}", "", test_description(cfg, metric, f"{len(res)} pairs"), ""]
    lines += significance_table(res, ("dataset", "strategy", "A (embedder / store @ threshold)", "B (embedder / store @ threshold)"),
                                lambda r: (E(r["a"]["dataset"]), E(r["a"]["strategy"]), _side(r["a"]), _side(r["b"])))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = parser("compare", "Significance table between two finished runs (paired t tests over conversations on the same "
                "questions, Holm-corrected).",
                examples=["recallbench compare reports/runs/<run A> reports/runs/<run B>",
                          "recallbench compare RUN_A RUN_B --metric recall --all-thresholds --json"])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--metric", choices=METRIC_CHOICES, help="per-question metric (default: the objective's, F1)")
    ap.add_argument("--all-thresholds", action="store_true", help="compare at every common threshold, not each run's recommended one")
    ap.add_argument("--json", action="store_true", help="print the table as JSON records instead of Markdown")
    ap.add_argument("--allow-label-mismatch", action="store_true",
                    help="compare even when the runs scored different questions or gold labels (a loud warning heads the table)")
    args = ap.parse_args(argv)
    setup_logging(logging.WARNING)
    try:
        res, cfg = compare_runs(args.run_a, args.run_b, metric=args.metric, all_thresholds=args.all_thresholds,
                                allow_label_mismatch=args.allow_label_mismatch)
    except ValueError as e:
        return fail(str(e))
    if args.json:
        print(res.to_json(orient="records", indent=1))
    else:
        print(format_table(res, cfg, args.run_a, args.run_b))
    return 0
