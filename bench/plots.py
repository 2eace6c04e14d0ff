"""Figures from a summary table only (never from a store). PNG files, written atomically."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.results import write_atomic


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    write_atomic(path, lambda p: fig.savefig(p, format="png", dpi=110, bbox_inches="tight"))
    return path


def quality_vs_threshold(summary: pd.DataFrame, title: str, path: Path) -> Path:
    plt = _figure()
    swept = summary[summary["threshold"].notna()]
    names = list(dict.fromkeys(swept["strategy"]))
    fig, axes = plt.subplots(1, max(len(names), 1), figsize=(5.2 * max(len(names), 1), 4), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], names):
        s = swept[swept["strategy"] == name].sort_values("threshold")
        for col, style in (("precision", "-o"), ("recall", "-s"), ("f1", "-^")):
            ax.plot(s["threshold"], s[col], style, ms=3, label=col)
        ax.set_title(name)
        ax.set_xlabel("similarity threshold")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("macro average over questions")
    axes[0][0].legend()
    fig.suptitle(title, fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def tokens_vs_threshold(summary: pd.DataFrame, title: str, path: Path) -> Path:
    plt = _figure()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, s in summary[summary["threshold"].notna()].groupby("strategy", sort=False):
        s = s.sort_values("threshold")
        ax.plot(s["threshold"], s["tokens_injected_mean"], "-o", ms=3, label=name)
    full = summary["tokens_full_mean"].dropna()
    if len(full):
        ax.axhline(full.iloc[0], color="k", ls="--", lw=1, label="full context")
    for _, r in summary[summary["threshold"].isna() & (summary["strategy"] != "full_context")].iterrows():
        ax.axhline(r["tokens_injected_mean"], ls=":", lw=1, color="gray")
        ax.annotate(r["strategy"], (0.1, r["tokens_injected_mean"]), fontsize=8, color="gray")
    ax.set_yscale("log")
    ax.set_xlabel("similarity threshold")
    ax.set_ylabel("injected tokens per question (mean, log)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def recall_vs_tokens(summary: pd.DataFrame, title: str, path: Path) -> Path:
    plt = _figure()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, s in summary.groupby("strategy", sort=False):
        s = s.sort_values("tokens_injected_mean")
        ax.plot(s["tokens_injected_mean"], s["recall"], "-o" if len(s) > 1 else "D", ms=4, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("injected tokens per question (mean, log)")
    ax.set_ylabel("recall (macro)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)
