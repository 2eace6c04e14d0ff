"""Figures from result tables only (never from a store): sweep curves, Pareto frontier, CI bands,
calibration histograms/ECDFs, LOCO folds, miss attribution. PNG files, written atomically."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from bench.output import write_atomic
from bench.output import one_line


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
        fig.tight_layout(rect=(0, 0, getattr(fig, "_rb_right", 1.0), 1))  # one layout pass: bbox_inches="tight" would render the figure twice (~30 % of report time)
    write_atomic(path, lambda p: fig.savefig(p, format="png", dpi=DPI))
    return path


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "*", "8")
TOKENS_LINTHRESH = 1.0  # token axes are symlog: linear below 1 token, so a selection of 0 tokens is drawn at 0
# Colour means one thing in every figure: the strategy (``styles``). Everything else is told apart without colour:
# metrics by line style, stores and embedders by line style or panel, miss causes by grey shade and hatch,
# gold vs non-gold by grey shade.
NEUTRAL = ("#222222", "#8c8c8c", "#c4c4c4", "#5a5a5a", "#e0e0e0", "#404040")
LINESTYLES = ("-", "--", ":", "-.")
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo", "--")
METRIC_STYLE = {"f1": ("-", "^"), "f1_abstain": ("-", "^"), "recall": ("--", "s"), "precision": (":", "o")}
PANEL_W, PANEL_H, MAX_COLS = 3.6, 2.7, 4


def styles(names: Sequence[str]) -> dict[str, dict]:
    """The only owner of colour: one colour and marker per strategy name, in the run's strategy order, the same in
    every figure (and no figure uses a colour for anything else)."""
    import matplotlib

    names = list(dict.fromkeys(names))
    cycle = matplotlib.colormaps["tab20"].colors if len(names) > 10 else matplotlib.colormaps["tab10"].colors
    return {n: {"color": cycle[i % len(cycle)], "marker": MARKERS[i % len(MARKERS)]} for i, n in enumerate(names)}


def _grid(plt, n: int, *, ncols: int | None = None, w: float = PANEL_W, h: float = PANEL_H, sharey: bool = True, sharex: bool = False,
          extra_w: float = 0.0):
    """Small multiples: ``n`` panels, at most ``MAX_COLS`` (or ``ncols``) per row; unused panels hidden."""
    ncols = max(1, min(n, ncols or MAX_COLS))
    nrows = max(1, math.ceil(n / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols + extra_w, h * nrows + 0.6), squeeze=False, sharey=sharey, sharex=sharex)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _side_legend(fig, handles, labels, fontsize: int = 8, **kw) -> None:
    """A figure legend right of the panels: the figure grows by the legend's width and the panels keep theirs."""
    labels = [one_line(lb) for lb in labels]
    width = 0.45 + 0.058 * fontsize / 8 * max([len(lb) for lb in labels] + [len(str(kw.get("title") or ""))])  # inches, roughly
    w, h = fig.get_size_inches()
    right = getattr(fig, "_rb_right", 1.0) * w  # panels' width before: a second legend stacks beside the first
    fig.set_size_inches(right + width + (w - right), h)
    fig._rb_right = right / (right + width + (w - right))
    fig.legend(handles, labels, fontsize=fontsize, loc="upper left", bbox_to_anchor=(fig._rb_right, 0.95 if not getattr(fig, "_rb_n", 0) else 0.45),
               frameon=False, **kw)
    fig._rb_n = getattr(fig, "_rb_n", 0) + 1


def _figure_legend(fig, axes, fontsize: int = 8) -> None:
    """One legend for the whole figure, right of the panels: each label once."""
    seen = {}
    for ax in axes:
        for hnd, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, hnd)
    if seen:
        _side_legend(fig, list(seen.values()), list(seen), fontsize)


def quality_vs_threshold(summary: pd.DataFrame, title: str, path: Path, *, xlabels: Mapping[str, str] | None = None,
                         styles_: dict | None = None) -> Path:
    """Precision, recall and F1 vs threshold, one panel per strategy (``xlabels``: strategy -> what its
    threshold is, when not a similarity)."""
    return quality_grid([("", summary)], title, path, xlabels=xlabels, styles_=styles_)


def quality_grid(panels: Sequence[tuple[str, pd.DataFrame]], title: str, path: Path, *, xlabels: Mapping[str, str] | None = None,
                 styles_: dict | None = None) -> Path:
    """Small multiples: one row per configuration (``panels``: its short name and summary rows), one column per
    strategy with a threshold; precision (dotted), recall (dashed) and F1 (solid) in the strategy's colour."""
    plt = _figure()
    names = list(dict.fromkeys(n for _, g in panels for n in g.loc[g["threshold"].notna(), "strategy"]))
    styles_ = styles_ or styles(names)
    cells = [(lab, g, n) for lab, g in panels for n in names]
    ncols = len(names) if len(panels) > 1 else None
    fig, axes = _grid(plt, max(len(cells), 1), ncols=ncols)
    for ax, (lab, g, name) in zip(axes, cells):
        s = g[(g["strategy"] == name) & g["threshold"].notna()].sort_values("threshold")
        color = _style(styles_, name)["color"]
        for col in ("precision", "recall", "f1"):
            ls, mk = METRIC_STYLE[col]
            ax.plot(s["threshold"], s[col], ls=ls, marker=mk, ms=3, color=color, label=col)
        ax.set_title(one_line(f"{lab}: {name}" if lab else name), fontsize=9)
        ax.set_xlabel((xlabels or {}).get(name, "similarity threshold"), fontsize=8)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("macro mean over questions", fontsize=8)
    _metric_legend(fig)
    fig.suptitle(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def _metric_legend(fig, metrics=("precision", "recall", "f1")) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls=METRIC_STYLE[m][0], marker=METRIC_STYLE[m][1], color=NEUTRAL[0], ms=4) for m in metrics]
    _side_legend(fig, handles, list(metrics), 8, title="line style (colour = strategy)", title_fontsize=7)


def _tokens_axis(ax, which: str = "y") -> None:
    from matplotlib.ticker import FuncFormatter

    (ax.set_yscale if which == "y" else ax.set_xscale)("symlog", linthresh=TOKENS_LINTHRESH)
    (ax.set_ylim if which == "y" else ax.set_xlim)(0, None)  # no negative decades: tokens are >= 0
    # plain numbers: the default labels are TeX ("$\\mathdefault{10^{2}}$"), shown raw with text.parse_math off
    (ax.yaxis if which == "y" else ax.xaxis).set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    label = "tokens per question (mean, symlog)"
    (ax.set_ylabel if which == "y" else ax.set_xlabel)(label)


def _legend_outside(ax, fontsize: int = 8) -> None:
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def _style(styles_: dict | None, name: str) -> dict:
    return (styles_ or {}).get(name) or styles([name])[name]


def _tokens_panel(ax, summary: pd.DataFrame, styles_: dict | None, full_context: Sequence[str]) -> None:
    for name, s in summary[summary["threshold"].notna()].groupby("strategy", sort=False):
        s = s.sort_values("threshold")
        st = _style(styles_, name)
        ax.plot(s["threshold"], s["tokens_injected_mean"], "-", marker=st["marker"], ms=3, color=st["color"], label=name)
    full = summary["tokens_full_mean"].dropna() if "tokens_full_mean" in summary else pd.Series(dtype=float)
    if len(full):
        ax.axhline(full.iloc[0], color=NEUTRAL[0], ls="--", lw=1, label="full context")
    for _, r in summary[summary["threshold"].isna() & ~summary["strategy"].isin(list(full_context))].iterrows():
        st = _style(styles_, r["strategy"])
        ax.axhline(r["tokens_injected_mean"], ls=":", lw=1.2, color=st["color"], label=f"{r['strategy']} (no threshold)")
    _tokens_axis(ax, "y")
    ax.set_xlabel("similarity threshold", fontsize=8)
    ax.grid(alpha=0.3, which="both")


def tokens_vs_threshold(summary: pd.DataFrame, title: str, path: Path, *, full_context: Sequence[str] = (),
                        styles_: dict | None = None, panels: Sequence[tuple[str, pd.DataFrame]] | None = None) -> Path:
    """Mean injected tokens per threshold; strategies without one as dotted lines in their colour (those in
    ``full_context``: the dashed full-context line). ``panels`` (short name, rows): one panel per configuration."""
    plt = _figure()
    panels = list(panels) if panels else [("", summary)]
    styles_ = styles_ or styles([n for _, g in panels for n in g["strategy"]])
    fig, axes = _grid(plt, len(panels), w=4.2 if len(panels) > 1 else 6.5, h=3.0 if len(panels) > 1 else 4.0)
    for ax, (lab, g) in zip(axes, panels):
        _tokens_panel(ax, g, styles_, full_context)
        if lab:
            ax.set_title(one_line(lab), fontsize=9)
    _figure_legend(fig, axes)
    fig.suptitle(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def _curve(ax, s: pd.DataFrame, st: dict, ls: str, label: str | None) -> None:
    """Recall vs tokens of one strategy: a line through its thresholds, or one big hollow marker (no threshold) on top,
    so a curve through the same point does not hide it."""
    s = s.sort_values("tokens_injected_mean")
    if len(s) > 1:
        ax.plot(s["tokens_injected_mean"], s["recall"], ls=ls, marker=st["marker"], ms=3, lw=1.1, alpha=0.85, color=st["color"], label=label)
    else:
        ax.plot(s["tokens_injected_mean"], s["recall"], st["marker"], ms=9, mfc="none", mew=2, color=st["color"], label=label, zorder=5)


def pareto(points: pd.DataFrame, front: pd.Series, best: pd.DataFrame, title: str, path: Path, *, styles_: dict | None = None,
           panel_col: str | None = None, line_col: str | None = None, note: str = "") -> Path:
    """Recall vs injected tokens for every configuration (colour and marker: its strategy's, as in every figure),
    the Pareto frontier across all of them (black step, the same in every panel) with each frontier point's threshold
    written beside it, and the recommended point(s) starred.

    Small multiples: one panel per value of ``panel_col`` (e.g. the embedder's short name); within a panel, one line
    style per value of ``line_col`` (e.g. the store). ``note``: a line under the title (e.g. stores drawn once).
    ``points`` columns: strategy, threshold, tokens_injected_mean, recall (+ the two columns); ``front``: bool mask.
    """
    plt = _figure()
    styles_ = styles_ or styles(list(points["strategy"]))
    points = points.assign(_front=front.to_numpy(bool))
    if not line_col:
        points, line_col = points.assign(_line=""), "_line"
    pans = list(dict.fromkeys(points[panel_col])) if panel_col else [""]
    lines = list(dict.fromkeys(points[line_col]))
    dash = {v: LINESTYLES[i % len(LINESTYLES)] for i, v in enumerate(lines)}
    fig, axes = _grid(plt, len(pans), ncols=3, w=4.6 if len(pans) > 1 else 8.0, h=3.6 if len(pans) > 1 else 4.8, sharex=True)
    f = points[points["_front"]].sort_values("tokens_injected_mean")
    for ax, pan in zip(axes, pans):
        sub = points[points[panel_col] == pan] if panel_col else points
        for (name, ln), s in sub.groupby(["strategy", line_col], sort=False):
            _curve(ax, s, _style(styles_, name), dash.get(ln, "-"), name)
        ax.step(f["tokens_injected_mean"], f["recall"], where="post", color="k", lw=1.3, label="Pareto frontier" + (" (all panels)" if len(pans) > 1 else ""), zorder=4)
        last = (-9.0, -9.0)
        for _, r in (f[f[panel_col] == pan] if panel_col else f).iterrows():
            at = (math.log10(1 + r["tokens_injected_mean"]), r["recall"])
            if abs(at[0] - last[0]) < 0.15 and abs(at[1] - last[1]) < 0.03:  # too close to the last label: it would print over it
                continue
            if not (isinstance(r["threshold"], float) and math.isnan(r["threshold"])):
                last = at
                ax.annotate(f"{r['threshold']:.2f}", (r["tokens_injected_mean"], r["recall"]), xytext=(4, -9), textcoords="offset points",
                            fontsize=7, color="k", zorder=6)
        b = best[best[panel_col] == pan] if panel_col and panel_col in best else best
        if len(b):
            ax.plot(b["tokens"], b["recall"], "*", ms=15, color="gold", mec="k", label="recommended", zorder=7)
        _tokens_axis(ax, "x")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3, which="both")
        if pan:
            ax.set_title(one_line(pan), fontsize=9)
    axes[0].set_ylabel("recall (macro)")
    if len(lines) > 1:
        for v in lines:  # the line-style key, in neutral grey
            axes[0].plot([], [], ls=dash[v], color=NEUTRAL[1], label=f"{v}")
    _figure_legend(fig, axes)
    fig.suptitle(one_line(title) + " (frontier points labelled with their threshold)" + (f"\n{one_line(note)}" if note else ""), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def ci_curves(curves: pd.DataFrame, metric: str, title: str, path: Path, *, xlabels: Mapping[str, str] | None = None,
              styles_: dict | None = None, panel_col: str | None = None) -> Path:
    """``metric`` (solid) and recall (dashed) vs threshold with their 95 % bands (the CI about the mean of conversations
    like these), in the strategy's colour; one panel per strategy (per configuration and strategy with ``panel_col``);
    the chosen threshold is a black dashed line."""
    plt = _figure()
    names = list(dict.fromkeys(curves["strategy"]))
    styles_ = styles_ or styles(names)
    pans = list(dict.fromkeys(curves[panel_col])) if panel_col else [""]
    cells = [(p, n) for p in pans for n in names
             if len(curves[(curves["strategy"] == n) & ((curves[panel_col] == p) if panel_col else True)])]
    fig, axes = _grid(plt, max(len(cells), 1), ncols=len(names) if len(pans) > 1 else None)
    for ax, (pan, name) in zip(axes, cells):
        c = curves[(curves["strategy"] == name) & ((curves[panel_col] == pan) if panel_col else True)].sort_values("threshold")
        color = _style(styles_, name)["color"]
        for col in (metric, "recall"):
            ax.plot(c["threshold"], c[col], ls=METRIC_STYLE[col][0], marker=METRIC_STYLE[col][1], ms=3, color=color, label=col)
            ax.fill_between(c["threshold"], c[f"{col}_lo"], c[f"{col}_hi"], color=color, alpha=0.15 if col == metric else 0.08, lw=0)
        for t in c.loc[c["chosen"].astype(bool), "threshold"]:
            ax.axvline(t, color="k", ls="--", lw=1)
            ax.annotate(f"chosen {t:.2f}", (t, 0.95), fontsize=7, ha="left")
        ax.set_title(one_line(f"{pan}: {name}" if pan else name), fontsize=9)
        ax.set_xlabel((xlabels or {}).get(name, "similarity threshold"), fontsize=8)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("macro mean, 95 % CI of the mean", fontsize=8)
    _metric_legend(fig, (metric, "recall"))
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
    for v, name, color, hatch, ls in ((nongold, f"non-gold (n={len(nongold)})", NEUTRAL[2], "", "--"),
                                      (gold, f"gold (n={len(gold)})", NEUTRAL[0], "//", "-")):
        if len(v):
            if hatch:  # gold: a black outline over the grey non-gold bars, so both stay visible where they overlap
                ax1.hist(v, bins=bins, density=True, histtype="step", lw=1.5, color=color, label=name)
            else:
                ax1.hist(v, bins=bins, density=True, alpha=0.8, color=color, label=name)
            x = np.sort(v)
            ax2.plot(x, np.arange(1, len(x) + 1) / len(x), color=color if color != NEUTRAL[2] else NEUTRAL[1], ls=ls, label=name)
    for ax in (ax1, ax2):
        if not math.isnan(overlap[0]):
            ax.axvspan(overlap[0], overlap[1], color=NEUTRAL[4], alpha=0.6, label="overlap band")
        for i, (label, t) in enumerate(marks.items()):
            ax.axvline(t, color=NEUTRAL[3], ls=LINESTYLES[(i + 1) % len(LINESTYLES)], lw=1.2, label=label)
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
    ax.plot(x, folds["train"], "x", color=NEUTRAL[1], label=f"tuned on the others ({metric})")
    ax.plot(x, folds["held_out"], "o", color=NEUTRAL[0], label="held out, at that threshold")
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
        ax.barh(labels, vals, left=left, color=NEUTRAL[i % len(NEUTRAL)], hatch=HATCHES[i % len(HATCHES)], edgecolor="white", label=c)
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


def embedder_curves(curves: pd.DataFrame, marks: Sequence[float], title: str, path: Path, *, metric: str = "f1",
                    styles_: dict | None = None) -> Path:
    """``metric`` vs similarity threshold of every embedder, one panel per strategy (in its colour), one line style and
    marker per embedder, with the band of its CI about the mean of conversations like
    these; ``marks`` (thresholds quoted in popular articles) as vertical lines.

    ``curves`` columns: label (the embedder's short name), strategy, threshold, metric, metric_lo, metric_hi."""
    plt = _figure()
    names = list(dict.fromkeys(curves["strategy"]))
    styles_ = styles_ or styles(names)
    labels = list(dict.fromkeys(curves["label"]))
    look = {lb: (LINESTYLES[i % len(LINESTYLES)], MARKERS[i % len(MARKERS)]) for i, lb in enumerate(labels)}
    fig, axes = _grid(plt, max(len(names), 1), w=4.8, h=3.4)
    for ax, name in zip(axes, names):
        color = _style(styles_, name)["color"]
        for label, c in curves[curves["strategy"] == name].groupby("label", sort=False):
            c = c.sort_values("threshold")
            ls, mk = look[label]
            ax.plot(c["threshold"], c[metric], ls=ls, marker=mk, ms=3, color=color, label=label)
            ax.fill_between(c["threshold"], c[f"{metric}_lo"], c[f"{metric}_hi"], color=color, alpha=0.08, lw=0)
        for t in marks:
            ax.axvline(t, color=NEUTRAL[1], ls=":", lw=1)
            ax.annotate(f"{t:.2f}", (t, 0.02), xycoords=("data", "axes fraction"), fontsize=7, ha="left", va="bottom")
        ax.set_title(one_line(name), fontsize=9)
        ax.set_xlabel("similarity threshold (dotted: thresholds quoted in popular articles)", fontsize=7)
        ax.set_xlim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"{metric} (macro, 95 % CI of the mean)", fontsize=8)
    from matplotlib.lines import Line2D

    _side_legend(fig, [Line2D([], [], ls=look[lb][0], marker=look[lb][1], color=NEUTRAL[0], ms=4) for lb in labels], labels, 8,
                 title="embedder (line style)", title_fontsize=7)
    fig.suptitle(one_line(title), fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)
