"""The growth figure of a live replay (``live/growth.csv``, ``bench.analysis.live``): recall_any@k and p50/p99 search
latency against the number of memories of the question's user when it was asked, one line style per store."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.plots import LINESTYLES, MARKERS, _figure, _save


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
