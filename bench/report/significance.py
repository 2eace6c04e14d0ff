"""The significance table, rendered once: rows of ``bench.analysis.stats.compare_pairs`` (A against B, paired t test over
conversations, Holm-corrected) as Markdown. The report's table (the recommendation against every other configuration)
and ``recallbench compare``'s (two runs) differ only in the columns that name A and B (``pair_head`` and ``pair_cells``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd

STATS_HEAD = ("conversations", "n", "mean A", "mean B", "A − B [CI]", "p", "Holm p", "significant", "W/T/L")


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _num(x, digits: int = 3) -> str:
    return "n/a" if _nan(x) else f"{x:.{digits}f}"


def threshold(t) -> str:
    """A threshold: two decimals, three when the grid is finer (a calibrated p of 0.015); "—" for none."""
    if _nan(t):
        return "—"
    return f"{t:.2f}" if math.isclose(t, round(t, 2), abs_tol=1e-9) else f"{t:.3f}"


def diff_ci(r) -> str:
    """A − B with its t interval; the reason when there is no interval (one conversation)."""
    d, lo, hi = r["diff"], r["ci_low"], r["ci_high"]
    if _nan(d):
        return "n/a"
    if _nan(lo):
        return f"{d:.3f} (no interval with 1 conversation)"
    return f"{d:.3f} [{lo:.3f}, {hi:.3f}]"


def significance_table(sig: pd.DataFrame, pair_head: Sequence[str], pair_cells: Callable[[pd.Series], Sequence[str]]) -> list[str]:
    """The table's lines: ``pair_head`` columns (``pair_cells(row)``: their cells, escaped by the caller) then the test's."""
    head = [*pair_head, *STATS_HEAD]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in sig.iterrows():
        cells = [*pair_cells(r), str(r["n_conversations"]), str(r["n"]), _num(r["mean_a"]), _num(r["mean_b"]), diff_ci(r),
                 _num(r["p"], 4), _num(r["p_holm"], 4), "**yes**" if r["significant"] else "no", f"{r['wins']}/{r['ties']}/{r['losses']}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
