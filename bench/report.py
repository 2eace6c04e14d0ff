"""Markdown report and plots from a finished run directory (tables only; never reopens a store).

``collect_jobs`` merges the job directories of a multirun; ``write_report`` writes ``report.md``
and PNG plots beside ``summary.csv``. Both can be re-run at any time (``make report``).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pandas as pd

from bench import plots
from bench.results import write_atomic

log = logging.getLogger(__name__)

SEED_THRESHOLDS = (0.75, 0.65, 0.3)  # thresholds quoted by the seed articles


def collect_jobs(sweep_dir: Path) -> bool:
    """Merge ``job*/`` results of a multirun into ``sweep_dir``. False when no job finished."""
    jobs = sorted(p for p in Path(sweep_dir).glob("job*") if (p / "summary.csv").exists())
    failed = [{**json.loads((p / "failed.json").read_text()), "job": p.name} for p in sorted(Path(sweep_dir).glob("job*")) if (p / "failed.json").exists()]
    write_atomic(sweep_dir / "failed.json", lambda p: p.write_text(json.dumps(failed, indent=2)))
    if not jobs:
        log.error("no finished jobs under %s", sweep_dir)
        return False
    summary = pd.concat([pd.read_csv(j / "summary.csv") for j in jobs], ignore_index=True)
    rows = pd.concat([pd.read_parquet(j / "questions.parquet") for j in jobs], ignore_index=True)
    metas = [{**json.loads((j / "meta.json").read_text()), "job": j.name} for j in jobs]
    cards = list(dict.fromkeys((j / "dataset_card.md").read_text() for j in jobs if (j / "dataset_card.md").exists()))
    write_atomic(sweep_dir / "summary.csv", lambda p: summary.to_csv(p, index=False))
    write_atomic(sweep_dir / "questions.parquet", lambda p: rows.to_parquet(p, index=False))
    write_atomic(sweep_dir / "jobs.json", lambda p: p.write_text(json.dumps(metas, indent=2, default=str)))
    write_atomic(sweep_dir / "dataset_card.md", lambda p: p.write_text("\n\n".join(cards)))
    return True


def _fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _table(df: pd.DataFrame, cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c], 2 if c == "threshold" else (1 if "tokens" in c or "ms" in c else 3)) for c in cols) + " |")
    return "\n".join(lines)


def best_by_f1(summary: pd.DataFrame) -> pd.DataFrame:
    keys = ["dataset", "embedder", "backend", "strategy"]
    s = summary.dropna(subset=["f1"])
    return s.loc[s.groupby(keys, sort=False)["f1"].idxmax()]


def seed_claims(summary: pd.DataFrame) -> str:
    """The seed articles' claims re-measured on this run's data."""
    out = []
    for (ds, emb, be), g in summary.groupby(["dataset", "embedder", "backend"], sort=False):
        lim = g[g["strategy"].str.startswith("limit")]
        thr = g[(g["strategy"] == "threshold") & g["threshold"].round(2).isin(SEED_THRESHOLDS)]
        rows = [f"**{ds} / {emb} / {be}**", "", "| claim | setting | token savings vs full context | recall | precision | F1 | empty rate |", "|---|---|---|---|---|---|---|"]
        for _, r in lim.iterrows():
            rows.append(f"| limit-5 saves tokens (seekdb agent-memory article) | {r['strategy']} | {_fmt(r['token_savings'])} | {_fmt(r['recall'])} | {_fmt(r['precision'])} | {_fmt(r['f1'])} | {_fmt(r['empty_rate'])} |")
        for _, r in thr.sort_values("threshold", ascending=False).iterrows():
            rows.append(f"| threshold {r['threshold']:.2f} (seed articles) | threshold >= {r['threshold']:.2f} | {_fmt(r['token_savings'])} | {_fmt(r['recall'])} | {_fmt(r['precision'])} | {_fmt(r['f1'])} | {_fmt(r['empty_rate'])} |")
        out.append("\n".join(rows))
    return "\n\n".join(out)


def write_report(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    summary = pd.read_csv(run_dir / "summary.csv")
    jobs = json.loads((run_dir / "jobs.json").read_text()) if (run_dir / "jobs.json").exists() else [json.loads((run_dir / "meta.json").read_text())]
    card = (run_dir / "dataset_card.md").read_text() if (run_dir / "dataset_card.md").exists() else ""
    failed = json.loads((run_dir / "failed.json").read_text()) if (run_dir / "failed.json").exists() else []

    figures = []
    for i, ((ds, emb, be), g) in enumerate(summary.groupby(["dataset", "embedder", "backend"], sort=False)):
        title = f"{ds} / {emb} / {be}"
        tag = f"{i}_{be}"
        figures.append((title, [
            plots.quality_vs_threshold(g, title, run_dir / f"quality_vs_threshold_{tag}.png"),
            plots.tokens_vs_threshold(g, title, run_dir / f"tokens_vs_threshold_{tag}.png"),
            plots.recall_vs_tokens(g, title, run_dir / f"recall_vs_tokens_{tag}.png"),
        ]))

    best = best_by_f1(summary[summary["threshold"].notna()])
    main_cols = ["backend", "strategy", "threshold", "n_questions", "precision", "recall", "f1", "micro_f1", "hit_rate", "empty_rate", "tokens_injected_mean", "token_savings"]
    lines = ["# recallbench report", ""]
    if not summary.get("for_results", pd.Series([True])).all():
        lines += ["> **Plumbing run**: this used a test-only embedder (hashing). Do not quote these numbers.", ""]
    for j in jobs:
        reuse = f"; trace reused from {j['reused_from']}" if j.get("reused_from") else ""
        lines.append(f"- dataset `{j['dataset']}`, embedder `{j['embedder']}`, store `{j['backend']}`, depth {j['depth']}, "
                     f"{j['n_memories']} memories, ingest {j['ingest_seconds']:.1f} s, ready after {j['ready_seconds']:.2f} s, "
                     f"measured {j['measured_at']}{reuse}; tokens `{j.get('tokens_encoding')}`")
    if failed:
        lines += ["", f"**{len(failed)} job(s) failed** (their results are absent from every table):", ""]
        lines += [f"- `{f['job']}` ({' '.join(f.get('overrides', []))}): {f['reason']}" for f in failed]
    lines += ["", "Metrics are over non-adversarial questions. Precision is undefined (NaN) when nothing is recalled; "
              "`precision_n` in summary.csv says how many questions it covers. F1 = 0 when a question has gold and nothing is recalled. "
              "Macro = mean over questions; micro = pooled counts.", ""]
    lines += ["## Best threshold by F1 per strategy", "", _table(best, main_cols), ""]
    fixed = summary[summary["threshold"].isna()]
    if len(fixed):
        lines += ["## Strategies without a threshold", "", _table(fixed, main_cols), ""]
    lines += ["## Seed claims, re-measured", "", seed_claims(summary), ""]
    lat = summary[summary["latency_p50_ms"].notna()].drop_duplicates(["dataset", "embedder", "backend"])
    if len(lat):
        lines += ["## Store latency (per query, store call only, warm-up discarded)", "",
                  _table(lat, ["dataset", "backend", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms"]), ""]
    traces = [t for j in jobs for t in j.get("traces", [j])]
    if traces:
        lines += ["## Store metrics (same vectors, same filters; exact = numpy cosine scan of the cached vectors)", "",
                  "| store | roles | memories | ingest rows/s | read-after-write lag s | fidelity@10 vs exact | short-result rate | max abs score diff vs exact cosine | scores off by > 1e-4 | store dir MB |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for t in traces:
            mb = t.get("index_bytes")
            lines.append(f"| {t['backend']} | {','.join(t['roles']) if t.get('roles') else 'all'} | {t['n_memories']} | "
                         f"{_fmt(t.get('ingest_per_second'), 0)} | {_fmt(t.get('ready_seconds'), 2)} | {_fmt(t.get('fidelity_at_10'))} | "
                         f"{_fmt(t.get('short_result_rate'))} | {_fmt(t.get('score_max_abs_diff'), 6)} | "
                         f"{t.get('score_mismatches_1e4', 'n/a')} of {t.get('score_pairs', 'n/a')} | {_fmt(mb / 1e6, 1) if mb else 'n/a'} |")
        lines.append("")
    if "adversarial_abstain_rate" in summary and summary["n_adversarial"].max() > 0:
        adv = summary[summary["n_adversarial"] > 0]
        lines += ["## Adversarial questions (correct recall = nothing)", "",
                  _table(best_by_f1(adv[adv["threshold"].notna()]) if adv["threshold"].notna().any() else adv,
                         ["backend", "strategy", "threshold", "n_adversarial", "adversarial_abstain_rate"]), ""]
    for title, paths in figures:
        lines += [f"## Plots: {title}", ""] + [f"![{p.stem}]({p.name})" for p in paths] + [""]
    lines += ["## Full sweep", "", _table(summary[summary["threshold"].notna()], main_cols), ""]
    if card:
        lines += ["## Dataset", "", card, ""]
    path = write_atomic(run_dir / "report.md", lambda p: p.write_text("\n".join(lines)))
    return path


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m bench.report", description="Rebuild report.md and plots of a finished run.")
    ap.add_argument("run_dir", nargs="?", default="reports/latest")
    args = ap.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not (run_dir / "summary.csv").exists():
        print(f"error: {run_dir}/summary.csv not found (run `make sweep` first)", file=sys.stderr)
        return 2
    print(write_report(run_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
