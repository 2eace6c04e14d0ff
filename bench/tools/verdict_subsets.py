"""The verdict on subsets of a finished run's conversations: what the headline says with 1, 2, 3, 5 ... conversations.

For each size, every subset when there are few (at most ``--per-size``), else ``--per-size`` random ones (seeded), the
run's per-question rows are cut to those conversations and the recommendation, its paired tests and the verdict are
recomputed with the run's ``recommend:`` settings (``bench.analysis.tables``). Prints one Markdown row per subset and a
count of "use" per size, with how many of those name the point the whole run recommends.

Run: ``python -m bench.tools.verdict_subsets reports/latest --sizes 1 2 3 5 10 --per-size 16 [--set min_conversations=2]``
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from bench.analysis.recommend import one_format, recommend
from bench.analysis.tables import ROW_METRIC, load_settings, significance
from bench.analysis.verdict import verdict_table
from bench.results.rundir import RunDir


def verdicts(rows: pd.DataFrame, cfg) -> pd.DataFrame:
    """The verdict table of ``rows`` (one injection format) under ``cfg``, with the best point's strategy and threshold."""
    rec = recommend(rows, cfg)
    v = verdict_table(rec.points, significance(rows, rec), cfg, metric=ROW_METRIC[cfg.primary])
    best = rec.best().set_index("dataset")
    label = lambda d: "" if d not in best.index else best.loc[d, "strategy"] + (  # noqa: E731
        "" if pd.isna(best.loc[d, "threshold"]) else f"@{best.loc[d, 'threshold']:.2f}")
    return v.assign(best=v["dataset"].map(label))


def subsets(conversations: list[str], size: int, per_size: int, rng: np.random.Generator) -> list[tuple[str, ...]]:
    if math.comb(len(conversations), size) <= per_size:
        return list(itertools.combinations(conversations, size))
    seen: set[tuple[str, ...]] = set()
    while len(seen) < per_size:
        seen.add(tuple(sorted(rng.choice(conversations, size, replace=False))))
    return sorted(seen)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tools.verdict_subsets", description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 3, 5, 10])
    ap.add_argument("--per-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="recommend settings to change, e.g. min_conversations=2")
    args = ap.parse_args(argv)
    run = RunDir(args.run)
    changes = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    rows, cfg = one_format(run.questions()), dataclasses.replace(load_settings(run), **changes)
    whole = verdicts(rows, cfg).iloc[0]["best"]
    conversations = sorted(rows["conversation_id"].astype(str).unique())
    rng = np.random.default_rng(args.seed)
    print("| conversations | subset | verdict | best | headline | reasons |\n|---|---|---|---|---|---|")
    counts = []
    for size in args.sizes:
        uses = same = 0
        picked = subsets(conversations, size, args.per_size, rng)
        for sub in picked:
            v = verdicts(rows[rows["conversation_id"].astype(str).isin(sub)], cfg).iloc[0]
            uses += v["kind"] == "use"
            same += v["kind"] == "use" and v["best"] == whole
            print(f"| {size} | {','.join(sub)} | {v['kind']} | {v['best']} | {v['headline']} | {v['reasons']} |", flush=True)
        counts.append(f"{size} conversations: {uses} 'use' of {len(picked)} subsets ({same} name {whole}, the whole run's best)")
    print("\n" + "\n".join(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
