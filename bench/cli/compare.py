"""``recallbench compare RUN_A RUN_B``: the paired significance table of two finished runs, on the console.

The comparison itself (which pairs, which tests) is ``bench.analysis.compare``; this module renders it.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pandas as pd

from bench.analysis.compare import METRIC_CHOICES, compare_runs
from bench.analysis.recommend import RecommendConfig
from bench.analysis.verdict import test_description
from bench.cli.common import fail, parser, setup_logging
from bench.report.escape import md_text as E


def _thr(t) -> str:
    return "—" if t is None or (isinstance(t, float) and math.isnan(t)) else f"{t:.2f}"


def _p(p: float) -> str:
    return "—" if math.isnan(p) else f"{p:.4g}"


def _diff(r) -> str:
    if math.isnan(r["diff"]):
        return "n/a"
    if math.isnan(r["ci_low"]):
        return f"{r['diff']:+.4f} (no interval with 1 conversation)"
    return f"{r['diff']:+.4f} [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]"


def format_table(res: pd.DataFrame, cfg: RecommendConfig, run_a: Path, run_b: Path) -> str:
    metric = res["metric"].iloc[0] if len(res) else "?"
    lines = [f"**WARNING: {w}**" for w in res.attrs.get("warnings", [])]
    lines += [f"A = {run_a}", f"B = {run_b}", "",
              test_description(cfg, metric, f"{len(res)} pairs") + " * = significant.", "",
              "| dataset | strategy | A (embedder / store @ threshold) | B (embedder / store @ threshold) | conversations | n | mean A | mean B | A − B [CI] | p | Holm p | sig | W/T/L |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in res.iterrows():
        a, b = r["a"], r["b"]
        lines.append(f"| {E(a['dataset'])} | {E(a['strategy'])} | {E(a['embedder'])} / {E(a['backend'])} @ {_thr(a['threshold'])} | "
                     f"{E(b['embedder'])} / {E(b['backend'])} @ {_thr(b['threshold'])} | {r['n_conversations']} | {r['n']} | {r['mean_a']:.4f} | "
                     f"{r['mean_b']:.4f} | {_diff(r)} | {_p(r['p'])} | {_p(r['p_holm'])} | {'*' if r['significant'] else ''} | "
                     f"{r['wins']}/{r['ties']}/{r['losses']} |")
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
