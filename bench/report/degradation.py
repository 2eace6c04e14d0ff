"""Report sections: end-to-end latency per query (latency_e2e_summary.csv, ``bench.selection.e2e``) and degradation
under timeouts and injected store faults (degradation.csv, ``bench.selection.degrade``). Renders; computes nothing
beyond picking rows."""

from __future__ import annotations

import math

import pandas as pd

from bench.output import md_code as C
from bench.output import md_text as E
from bench.output import read_csv
from bench.results.rundir import RunDir
from bench.selection import degrade, e2e

E2E_TITLE = "## End-to-end latency per query (embedding + store + injected text)"
DEGRADE_TITLE = "## Degradation: timeouts and store faults"


def _read(run: RunDir, name: str) -> pd.DataFrame | None:
    """``name`` of every finished job, with the job's directory in ``_job`` (two jobs may share dataset, embedder and store:
    a repeated run, or settings the table does not show)."""
    parts = [read_csv(j.file(name)).assign(_job=j.path.name) for j in run.job_dirs() if j.has(name)]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else None


def _ms(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _strategy(r) -> str:
    t = r["threshold"]
    return E(r["strategy"]) + ("" if isinstance(t, float) and math.isnan(t) else f" @ {t:.2f}")


def e2e_section(run: RunDir) -> list[str]:
    df = _read(run, e2e.SUMMARY_FILE)
    if df is None:
        return []
    lines = [E2E_TITLE, "",
             "Per query, p50 / p99 ms. **embed**: the job's embedder called with that one question (never the cache), on a seeded "
             "sample (`e2e.sample`; others not measured); **http**: its HTTP round trip (network + server: the endpoint does not "
             "report its own time); **store**: the trace's store call; **format**: rendering the selection as injected text "
             "(first swept format). **e2e** = embed + store + format on the sampled questions; store alone on every question. "
             "Per-query values: latency_e2e.csv.", "",
             "| dataset | embedder | store | strategy | embed | http | store | format | e2e | dominant part |", "|---|---|---|---|---|---|---|---|---|---|"]
    keys = ["_job", "dataset", "embedder", "backend", "strategy", "threshold", "format"]
    dominant = []
    for _, g in df.groupby(keys, sort=False, dropna=False):
        p = g.set_index("part")
        r = g.iloc[0]
        cell = {x: f"{_ms(p.loc[x, 'p50_ms'])} / {_ms(p.loc[x, 'p99_ms'])}" if x in p.index and p.loc[x, "n"] else "n/a"
                for x in (*e2e.PARTS, "e2e")}
        share = p.loc[r["dominant"], "share_of_e2e"] if isinstance(r["dominant"], str) and r["dominant"] in p.index else float("nan")
        dom = f"{r['dominant']} ({share:.0%} of e2e, median)" if isinstance(r["dominant"], str) and share == share else "n/a"
        dominant.append(r["dominant"] if isinstance(r["dominant"], str) else "")
        lines.append(f"| {E(r['dataset'])} | {C(r['embedder'])} | {C(r['backend'])} | {_strategy(r)} | {cell['embed']} | {cell['http']} | "
                     f"{cell['store']} | {cell['format']} | {cell['e2e']} | {dom} |")
    parts = sorted(set(d for d in dominant if d))
    if parts:
        lines += ["", f"Dominant part: {', '.join(C(x) for x in parts)} (the largest median share of a query's end-to-end time)."]
    return lines + [""]


def degrade_section(run: RunDir) -> list[str]:
    df = _read(run, degrade.FILE)
    if df is None:
        return []
    from bench.report.markdown import best_by_f1

    # (dataset, embedder, backend, strategy) -> threshold of the best F1 (NaN: a strategy without one)
    best = {(r.dataset, r.embedder, r.backend, r.strategy): r.threshold for r in best_by_f1(run.summary()).itertuples()}
    keep = [(k := (r.dataset, r.embedder, r.backend, r.strategy)) in best and
            ((isinstance(best[k], float) and math.isnan(best[k]) and math.isnan(r.threshold)) or r.threshold == best[k])
            for r in df.itertuples()]
    df = df[keep]
    if df.empty:
        return []
    lines = [DEGRADE_TITLE, "",
             "Post-processing of the stored per-query store latency: a query slower than T ms returns **nothing** or falls back to "
             "the **last k** turns the question may see. Each store-reading strategy at its best-F1 threshold; cells: recall kept "
             "with nothing / with the last k (share of queries timed out). Every strategy, threshold and format: degradation.csv.", ""]
    ts = sorted(df.loc[df["cause"] == "timeout", "timeout_ms"].dropna().unique())
    if ts:
        lines += ["| dataset | store | strategy | recall | " + " | ".join(f"T = {t:g} ms" for t in ts) + " |", "|---|---|---|---|" + "---|" * len(ts)]
        for _, g in df.groupby(["_job", "dataset", "embedder", "backend", "strategy", "format"], sort=False, dropna=False):
            r = g.iloc[0]
            base = g[g["cause"] == "none"]["recall"]
            cells = []
            for t in ts:
                at = g[(g["cause"] == "timeout") & (g["timeout_ms"] == t)].set_index("policy")
                cells.append(f"{_ms(at.loc['empty', 'recall_kept'])} / {_ms(at.loc['last_k', 'recall_kept'])} "
                             f"({at.loc['empty', 'failed_share']:.0%})")
            lines.append(f"| {E(r['dataset'])} | {C(r['backend'])} | {_strategy(r)} | {_ms(base.iloc[0]) if len(base) else 'n/a'} | "
                         + " | ".join(cells) + " |")
        lines.append("")
    faults = df[df["cause"] == "fault"]
    if len(faults):
        lines += ["**Injected store faults** (`faults:`, bench/replay/faults.py; outage clock: the replay's question timeline). Recall "
                  "and tokens of the faulted run; compare with the same run without `faults` for what is lost.", "",
                  "| dataset | store | strategy | failed share | recall (nothing) | recall (last k) | tokens (nothing) | tokens (last k) |",
                  "|---|---|---|---|---|---|---|---|"]
        for _, g in faults.groupby(["_job", "dataset", "embedder", "backend", "strategy", "format"], sort=False, dropna=False):
            p = g.set_index("policy")
            r = g.iloc[0]
            lines.append(f"| {E(r['dataset'])} | {C(r['backend'])} | {_strategy(r)} | {p.loc['empty', 'failed_share']:.1%} | "
                         f"{_ms(p.loc['empty', 'recall'])} | {_ms(p.loc['last_k', 'recall'])} | {p.loc['empty', 'tokens_injected_mean']:.1f} | "
                         f"{p.loc['last_k', 'tokens_injected_mean']:.1f} |")
        lines.append("")
    return lines


def section(run: RunDir) -> list[str]:
    return e2e_section(run) + degrade_section(run)
