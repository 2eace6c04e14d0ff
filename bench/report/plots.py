"""Figures from result tables only (never from a store): sweep curves, Pareto frontier, CI bands,
calibration histograms/ECDFs, LOCO folds, miss attribution. PNG files, written atomically."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from bench.output import write_atomic
from bench.report.escape import one_line


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False  # titles and labels hold names from data: "$...$" is text, not TeX
    import matplotlib.pyplot as plt

    return plt


DPI = 110


def _save(fig, path: Path) -> Path:
    import warnings

    fig.set_dpi(DPI)  # lay out at the resolution it is drawn at: savefig then reuses the measured text instead of measuring it again
    with warnings.catch_warnings():  # a layout it cannot fully fit is still drawn; not worth a warning
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()  # one layout pass: bbox_inches="tight" would render the figure twice (~30 % of report time)
    write_atomic(path, lambda p: fig.savefig(p, format="png", dpi=DPI))
    return path


def quality_vs_threshold(summary: pd.DataFrame, title: str, path: Path, *, xlabels: Mapping[str, str] | None = None) -> Path:
    """Precision, recall and F1 vs threshold, one panel per strategy (``xlabels``: strategy -> what its
    threshold is, when not a similarity)."""
    plt = _figure()
    swept = summary[summary["threshold"].notna()]
    names = list(dict.fromkeys(swept["strategy"]))
    fig, axes = plt.subplots(1, max(len(names), 1), figsize=(5.2 * max(len(names), 1), 4), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], names):
        s = swept[swept["strategy"] == name].sort_values("threshold")
        for col, style in (("precision", "-o"), ("recall", "-s"), ("f1", "-^")):
            ax.plot(s["threshold"], s[col], style, ms=3, label=col)
        ax.set_title(one_line(name))
        ax.set_xlabel((xlabels or {}).get(name, "similarity threshold"))
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("macro average over questions")
    if names:
        _legend_outside(axes[0][-1])
    fig.suptitle(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "*", "8")
TOKENS_LINTHRESH = 1.0  # token axes are symlog: linear below 1 token, so a selection of 0 tokens is drawn at 0


def styles(names: Sequence[str]) -> dict[str, dict]:
    """One colour and marker per strategy name, in the run's strategy order: the same in every figure."""
    import matplotlib

    names = list(dict.fromkeys(names))
    cycle = matplotlib.colormaps["tab20"].colors if len(names) > 10 else matplotlib.colormaps["tab10"].colors
    return {n: {"color": cycle[i % len(cycle)], "marker": MARKERS[i % len(MARKERS)]} for i, n in enumerate(names)}


def _tokens_axis(ax, which: str = "y") -> None:
    (ax.set_yscale if which == "y" else ax.set_xscale)("symlog", linthresh=TOKENS_LINTHRESH)
    (ax.set_ylim if which == "y" else ax.set_xlim)(0, None)  # no negative decades: tokens are >= 0
    label = "tokens per question (mean, symlog)"
    (ax.set_ylabel if which == "y" else ax.set_xlabel)(label)


def _legend_outside(ax, fontsize: int = 8) -> None:
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def _style(styles_: dict | None, name: str) -> dict:
    return (styles_ or {}).get(name) or styles([name])[name]


def tokens_vs_threshold(summary: pd.DataFrame, title: str, path: Path, *, full_context: Sequence[str] = (),
                        styles_: dict | None = None) -> Path:
    """Mean injected tokens per threshold; strategies without one as dotted lines in their colour, labelled at the
    right edge (those in ``full_context``: the dashed full-context line)."""
    plt = _figure()
    styles_ = styles_ or styles(list(summary["strategy"]))
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, s in summary[summary["threshold"].notna()].groupby("strategy", sort=False):
        s = s.sort_values("threshold")
        st = _style(styles_, name)
        ax.plot(s["threshold"], s["tokens_injected_mean"], "-", marker=st["marker"], ms=4, color=st["color"], label=name)
    full = summary["tokens_full_mean"].dropna()
    if len(full):
        ax.axhline(full.iloc[0], color="k", ls="--", lw=1, label="full context")
    for _, r in summary[summary["threshold"].isna() & ~summary["strategy"].isin(list(full_context))].iterrows():
        st = _style(styles_, r["strategy"])
        ax.axhline(r["tokens_injected_mean"], ls=":", lw=1.2, color=st["color"], label=f"{r['strategy']} (no threshold)")
    _tokens_axis(ax, "y")
    ax.set_xlabel("similarity threshold")
    ax.grid(alpha=0.3, which="both")
    _legend_outside(ax)
    ax.set_title(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def recall_vs_tokens(summary: pd.DataFrame, title: str, path: Path, *, styles_: dict | None = None) -> Path:
    plt = _figure()
    styles_ = styles_ or styles(list(summary["strategy"]))
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, s in summary.groupby("strategy", sort=False):
        s = s.sort_values("tokens_injected_mean")
        st = _style(styles_, name)
        if len(s) > 1:
            ax.plot(s["tokens_injected_mean"], s["recall"], "-", marker=st["marker"], ms=4, color=st["color"], label=name)
        else:  # one point (no threshold): a big hollow marker on top, so a curve through the same point does not hide it
            ax.plot(s["tokens_injected_mean"], s["recall"], st["marker"], ms=11, mfc="none", mew=2, color=st["color"], label=name, zorder=5)
    _tokens_axis(ax, "x")
    ax.set_ylabel("recall (macro)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    _legend_outside(ax)
    ax.set_title(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def pareto(points: pd.DataFrame, front: pd.Series, best: pd.DataFrame, title: str, path: Path, *, styles_: dict | None = None) -> Path:
    """Recall vs injected tokens for every configuration (colour and marker: its strategy's, as in every figure;
    line style per embedder/store), the Pareto frontier across all of them with each frontier point's threshold
    written beside it, and the recommended point(s) starred.

    ``points`` columns: label, strategy, threshold, tokens_injected_mean, recall; ``front``: bool mask over ``points``.
    """
    plt = _figure()
    styles_ = styles_ or styles(list(points["strategy"]))
    fig, ax = plt.subplots(figsize=(9, 4.8))
    where = [lb.rsplit("/", 1)[0] if "/" in lb else "" for lb in points["label"]]
    dashes = {w: ls for w, ls in zip(dict.fromkeys(where), ("-", "--", "-.", ":") * 8)}
    for (label, w), s in points.assign(_where=where).groupby(["label", "_where"], sort=False):
        s = s.sort_values("tokens_injected_mean")
        st = _style(styles_, s["strategy"].iloc[0])
        if len(s) > 1:
            ax.plot(s["tokens_injected_mean"], s["recall"], dashes[w], marker=st["marker"], ms=3, lw=1, alpha=0.8, color=st["color"], label=label)
        else:
            ax.plot(s["tokens_injected_mean"], s["recall"], st["marker"], ms=10, mfc="none", mew=2, color=st["color"], label=label, zorder=5)
    f = points[front.to_numpy(bool)].sort_values("tokens_injected_mean")
    ax.step(f["tokens_injected_mean"], f["recall"], where="post", color="k", lw=1.5, label="Pareto frontier", zorder=4)
    for _, r in f.iterrows():
        if not (isinstance(r["threshold"], float) and math.isnan(r["threshold"])):
            ax.annotate(f"{r['threshold']:.2f}", (r["tokens_injected_mean"], r["recall"]), xytext=(4, -9), textcoords="offset points",
                        fontsize=7, color="k", zorder=6)
    if len(best):
        ax.plot(best["tokens"], best["recall"], "*", ms=16, color="gold", mec="k", label="recommended", zorder=7)
    _tokens_axis(ax, "x")
    ax.set_ylabel("recall (macro)")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3, which="both")
    _legend_outside(ax, 7)
    ax.set_title(one_line(title) + " (frontier points labelled with their threshold)", fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def ci_curves(curves: pd.DataFrame, metric: str, title: str, path: Path, *, xlabels: Mapping[str, str] | None = None) -> Path:
    """``metric`` and recall vs threshold with their 95 % bands (the CI about the mean of conversations like these), one panel per strategy;
    the chosen threshold is a dashed line."""
    plt = _figure()
    names = list(dict.fromkeys(curves["strategy"]))
    fig, axes = plt.subplots(1, max(len(names), 1), figsize=(5.2 * max(len(names), 1), 3.8), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], names):
        c = curves[curves["strategy"] == name].sort_values("threshold")
        for col, color in ((metric, "C0"), ("recall", "C1")):
            ax.plot(c["threshold"], c[col], "-o", ms=3, color=color, label=col)
            ax.fill_between(c["threshold"], c[f"{col}_lo"], c[f"{col}_hi"], color=color, alpha=0.2, lw=0)
        for t in c.loc[c["chosen"], "threshold"]:
            ax.axvline(t, color="k", ls="--", lw=1)
            ax.annotate(f"chosen {t:.2f}", (t, 0.95), fontsize=8, ha="left")
        ax.set_title(one_line(name))
        ax.set_xlabel((xlabels or {}).get(name, "similarity threshold"))
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("macro mean, 95 % CI of the mean over conversations")
    if names:
        _legend_outside(axes[0][-1])
    fig.suptitle(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def calibration(gold, nongold, overlap: tuple[float, float], marks: dict, title: str, path: Path) -> Path:
    """Histogram (density) and ECDF of gold vs non-gold similarities; the overlap band shaded and
    the thresholds in ``marks`` (label -> value) drawn as vertical lines."""
    import numpy as np

    plt = _figure()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    lo = min([v.min() for v in (gold, nongold) if len(v)] + [0.0])
    hi = max([v.max() for v in (gold, nongold) if len(v)] + [1.0])
    bins = np.linspace(lo, hi, 60)
    for v, name, color in ((nongold, f"non-gold (n={len(nongold)})", "C7"), (gold, f"gold (n={len(gold)})", "C3")):
        if len(v):
            ax1.hist(v, bins=bins, density=True, alpha=0.55, color=color, label=name)
            x = np.sort(v)
            ax2.plot(x, np.arange(1, len(x) + 1) / len(x), color=color, label=name)
    for ax in (ax1, ax2):
        if not math.isnan(overlap[0]):
            ax.axvspan(overlap[0], overlap[1], color="C1", alpha=0.15, label="overlap band")
        for i, (label, t) in enumerate(marks.items()):
            ax.axvline(t, color=f"C{i}", ls="--", lw=1, label=label)
        ax.set_xlabel("similarity (store)")
        ax.grid(alpha=0.3)
    ax1.set_ylabel("density")
    ax2.set_ylabel("ECDF (share scoring <= x)")
    ax2.legend(fontsize=7, loc="lower right")
    fig.suptitle(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def loco(folds: pd.DataFrame, metric: str, title: str, path: Path) -> Path:
    """Leave-one-conversation-out per fold (stability across the conversations of one corpus): the metric
    tuned on the other conversations, on the held-out one at that threshold, and the held-out one's own
    best; chosen thresholds annotated."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(max(6.5, 0.45 * len(folds) + 2), 4))
    x = range(len(folds))
    ax.plot(x, folds["train"], "x", color="C0", label=f"tuned on the others ({metric})")
    ax.plot(x, folds["held_out"], "o", color="C3", label="held out, at that threshold")
    ax.plot(x, folds["held_out_best"], "o", mfc="none", color="k", label="held out, its own best")
    if len(folds) <= 40:
        for i, (t, y) in enumerate(zip(folds["threshold"], folds["held_out"])):
            if not math.isnan(t):
                ax.annotate(f"{t:.2f}", (i, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xticks(list(x))
        ax.set_xticklabels(folds["conversation_id"], rotation=60, fontsize=7, ha="right")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def attribution(counts: pd.DataFrame, causes: list[str], title: str, path: Path) -> Path:
    """Stacked bars: missed gold memories per strategy, split by cause."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(counts) + 1.8))
    left = None
    labels = counts["label"].tolist()
    for i, c in enumerate(causes):
        vals = counts[c].to_numpy(float)
        if not vals.any():
            continue
        ax.barh(labels, vals, left=left, color=f"C{i}", label=c)
        left = vals if left is None else left + vals
    ax.set_xlabel("missed gold memories")
    ax.invert_yaxis()
    _legend_outside(ax, 7)
    ax.grid(alpha=0.3, axis="x")
    ax.set_title(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def embedder_curves(curves: pd.DataFrame, marks: Sequence[float], title: str, path: Path, *, metric: str = "f1") -> Path:
    """``metric`` vs similarity threshold of every embedder on one chart, one panel per strategy, with the
    band of its CI about the mean of conversations like these; ``marks`` (the seed articles' thresholds) as vertical lines.

    ``curves`` columns: label (the embedder, or embedder/store), strategy, threshold, metric, metric_lo, metric_hi."""
    plt = _figure()
    names = list(dict.fromkeys(curves["strategy"]))
    fig, axes = plt.subplots(1, max(len(names), 1), figsize=(5.6 * max(len(names), 1) + 3, 4), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], names):
        for i, (label, c) in enumerate(curves[curves["strategy"] == name].groupby("label", sort=False)):
            c = c.sort_values("threshold")
            ax.plot(c["threshold"], c[metric], "-o", ms=3, color=f"C{i}", label=label)
            ax.fill_between(c["threshold"], c[f"{metric}_lo"], c[f"{metric}_hi"], color=f"C{i}", alpha=0.15, lw=0)
        for t in marks:
            ax.axvline(t, color="k", ls=":", lw=1)
            ax.annotate(f"{t:.2f}", (t, 0.02), xycoords=("data", "axes fraction"), fontsize=8, ha="left", va="bottom")
        ax.set_title(one_line(name))
        ax.set_xlabel("similarity threshold (dotted: the seed articles' thresholds)")
        ax.set_xlim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"{metric} (macro, 95 % CI of the mean)")
    _legend_outside(axes[0][-1], 7)
    fig.suptitle(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)
