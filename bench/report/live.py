"""The report of a live replay (``live/`` of each job, ``bench.analysis.live``): the growth figure (recall_any@k and
p50/p99 search latency against the number of memories of the question's user when it was asked, one line style per
store) and the report section (one row per job and store: writes, read-after-write misses, recall live vs batch)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.output import md_code as C
from bench.output import md_text as E
from bench.output import read_csv
from bench.report.plots import LINESTYLES, MARKERS, _figure, _save
from bench.results.rundir import RunDir

TITLE = "## Live replay: writes, read-after-write misses, recall live vs batch"
FOLDER = "live"  # bench.analysis.live.FOLDER (not imported: the report reads the files only)


def growth_figure(growth: pd.DataFrame, path: Path) -> Path | None:
    """Two panels (recall at the largest k; search p50 and p99 ms) over the memory-count buckets; None without rows."""
    if growth.empty:
        return None
    plt = _figure()
    k = int(growth["k"].max())
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.0, 3.0))
    for i, ((backend, indexed, filt), g) in enumerate(growth.groupby(["backend", "indexed_roles", "role_filter"], sort=False)):
        g = g[g["k"] == k].sort_values("memories_from")
        x = g["median_memories"].clip(lower=1)
        style, marker = LINESTYLES[i % len(LINESTYLES)], MARKERS[i % len(MARKERS)]
        label = backend + ("" if indexed == "all" else f", {indexed} memories") + ("" if filt == "none" else f", filter {filt}")
        left.plot(x, g["recall_any"], linestyle=style, marker=marker, color="#222222", label=label)
        right.plot(x, g["search_p50_ms"], linestyle=style, marker=marker, color="#222222", label=f"{label} p50")
        right.plot(x, g["search_p99_ms"], linestyle=style, marker=marker, color="#8c8c8c", label=f"{label} p99")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for ax in (left, right):
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # plain numbers (mathtext is off: see plots._figure)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("memories of the user when asked (bucket median)")
    left.set_ylabel(f"live recall_any@{k}")
    left.set_ylim(-0.02, 1.02)
    right.set_ylabel("search ms")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.suptitle("Live replay: recall and latency as the memory grows", fontsize=9)
    out = _save(fig, Path(path))
    plt.close(fig)
    return out


def _num(v, digits: int = 3) -> str:
    return "n/a" if v is None or v != v else f"{v:.{digits}f}"


def section(run: RunDir) -> list[str]:
    """One row per live table row of every finished job (a multirun's jobs each keep their own ``live/``): the write
    latency, the read-after-write misses and recall_any at the largest k (batch / live / live_exact); [] without any."""
    jobs = [j for j in run.job_dirs() if (j.path / FOLDER / "summary.csv").is_file()]
    if not jobs:
        return []
    lines = [TITLE, "",
             "`replay=live` (README, Live replay): each turn written in timeline order, never waited on, each question asked "
             "right after the writes before it. **Misses**: gold memories written before the question, ranked within the "
             "search depth by the exact scan of what was written, yet not returned. Recall: the ordinary batch trace / live / "
             "the exact scan of what was written. Per question and per memory-count bucket: the job's `live/` tables.", ""]
    many = len(run.job_dirs()) > 1
    head = ["store", "indexed roles", "role filter", "turns per write", "write p50 / p99 ms", "gold written", "misses (rate)",
            "recall_any@k batch / live / live exact", "growth"]
    lines += ["| " + " | ".join((["job"] if many else []) + head) + " |", "|" + "---|" * (len(head) + many)]
    for j in jobs:
        folder = j.path / FOLDER
        summary, writes, recall = (read_csv(folder / f"{name}.csv") for name in ("summary", "writes", "recall"))
        recall = recall[recall["metric"] == "recall_any"]
        recall = recall[recall["k"] == recall["k"].max()]
        rows = summary.merge(writes, on=[c for c in summary.columns if c in writes.columns], how="left")
        rows = rows.merge(recall, on=[c for c in rows.columns if c in recall.columns], how="left")
        figure = (folder / "growth.png").relative_to(run.path) if (folder / "growth.png").is_file() else None
        for r in rows.to_dict("records"):
            cells = [C(r["backend"]), E(str(r.get("indexed_roles", "all"))), E(str(r.get("role_filter", r.get("roles", "none")))),
                     str(r.get("live_batch")), f"{_num(r.get('write_p50_ms'))} / {_num(r.get('write_p99_ms'))}",
                     str(r["gold_written"]), f"{r['raw_misses']} ({_num(r['miss_rate'])})",
                     f"@{r['k']:g}: {_num(r['batch'])} / {_num(r['live'])} / {_num(r['live_exact'])}" if r.get("k") == r.get("k") else "n/a",
                     f"[growth.png]({figure.as_posix()})" if figure else "n/a"]
            lines.append("| " + " | ".join(([C(j.path.name)] if many else []) + cells) + " |")
    return lines + [""]
