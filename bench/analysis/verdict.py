"""The verdict: whether the data is enough to say "use X", and if not, how much more would be.

One rule, stated once and used by the report's headline and the console:

- **use**: the recommended point's threshold is chosen in at least ``min_stable_share`` of the bootstrap
  resamples (or it has no threshold), and the runner-up (the configuration closest to it in the primary
  metric) is significantly worse (paired test, Holm-corrected) or there is no runner-up;
- **too little data**: otherwise; the headline names both candidates and why;
- **none**: no configuration meets the constraints.

Power: a cluster-bootstrap interval narrows as 1/sqrt(conversations). With the observed difference ``d``
between the two and its interval's half-width ``h`` on ``n`` conversations, the difference would be
significant (interval clear of 0) at about ``n * (h / |d|)^2`` conversations like these, assuming the same
spread; more questions = more conversations x questions per conversation. ``d = 0``: more data cannot
separate them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import pandas as pd


@dataclass(frozen=True)
class Verdict:
    kind: str  # use | too_little_data | none
    headline: str  # one sentence (Markdown backticks, no bold)
    reasons: tuple[str, ...] = ()
    more_conversations: float = math.nan  # NaN: not estimated (no runner-up, or already significant)
    more_questions: float = math.nan


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def point_label(p: Mapping, like: Mapping | None = None) -> str:
    """`strategy` at t on `store` / `embedder`; the store and embedder only where they differ from ``like``'s."""
    at = "" if _nan(p.get("threshold")) else f" at {p['threshold']:.2f}"
    where = [f"`{p[k]}`" for k in ("backend", "embedder") if like is None or p.get(k) != like.get(k)]
    return f"`{p['strategy']}`{at}" + (f" on {' / '.join(where)}" if where else "")


def more_data(*, diff: float, ci_low: float, ci_high: float, n_conversations: int, n_questions: int) -> tuple[float, float]:
    """(more conversations, more questions) for the interval of ``diff`` to clear 0 (module docstring); (inf, inf)
    when ``diff`` is 0, (0, 0) when it already does, NaN when the interval is unknown."""
    if any(_nan(x) for x in (diff, ci_low, ci_high)) or n_conversations < 1:
        return math.nan, math.nan
    if ci_low > 0 or ci_high < 0:
        return 0.0, 0.0
    if diff == 0:
        return math.inf, math.inf
    half = (ci_high - ci_low) / 2
    need = n_conversations * (half / abs(diff)) ** 2
    more = max(0, math.ceil(need) - n_conversations)
    return float(more), float(math.ceil(more * n_questions / n_conversations))


def verdict(best: Mapping | None, runner_up: Mapping | None, *, min_stable_share: float, alpha: float, metric: str) -> Verdict:
    """``best``: the recommended point (recommendation.csv row); ``runner_up``: its significance row against the
    closest configuration (``a`` = best, ``b`` = runner-up, ``diff`` = a − b with its CI, ``significant``), or None."""
    if best is None:
        return Verdict("none", "no configuration meets the constraints: relax them")
    reasons = []
    share = best.get("threshold_share")
    if not _nan(share) and share < min_stable_share:
        reasons.append(f"{best['threshold']:.2f} is chosen in only {share:.0%} of bootstrap resamples (a stable choice: ≥ {min_stable_share:.0%})")
    more_c = more_q = math.nan
    if runner_up is not None and not bool(runner_up.get("significant")):
        d, lo, hi = runner_up.get("diff"), runner_up.get("ci_low"), runner_up.get("ci_high")
        reasons.append(f"the runner-up {point_label(runner_up['b'], best)} is not significantly worse ({metric} difference "
                       + ("n/a" if _nan(d) else f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]")
                       + f", Holm p {runner_up.get('p_holm', math.nan):.2g} ≥ {alpha:g})")
        more_c, more_q = more_data(diff=d, ci_low=lo, ci_high=hi, n_conversations=int(best.get("n_conversations") or 0),
                                   n_questions=int(best.get("n_questions") or 0))
    if not reasons:
        return Verdict("use", f"use {point_label(best)}")
    if runner_up is not None and not bool(runner_up.get("significant")):
        head = f"too little data to choose between {point_label(best)} and {point_label(runner_up['b'], best)}"
    else:
        head = f"too little data to be sure of the threshold of {point_label(best)}"
    if more_c == math.inf:
        reasons.append("they score the same on these questions: more data would not separate them")
    elif not _nan(more_c) and more_c > 0:
        reasons.append(f"about {more_c:.0f} more conversations (~{more_q:.0f} labelled questions) like these would make the observed "
                       f"difference significant, if it holds")
    return Verdict("too_little_data", head, tuple(reasons), more_c, more_q)


def runner_up(sig: pd.DataFrame) -> Mapping | None:
    """The significance row of the configuration closest to the recommendation in the primary metric."""
    if sig is None or not len(sig):
        return None
    return sig.loc[sig["mean_b"].sub(sig["mean_a"]).abs().sort_values(kind="stable").index[0]].to_dict()


def verdict_table(points: pd.DataFrame, sig: pd.DataFrame, *, min_stable_share: float, alpha: float, metric: str) -> pd.DataFrame:
    """One verdict per dataset of ``points`` (recommendation rows with ``best``) and ``sig`` (significance rows
    with ``dataset``): columns dataset, kind, headline, reasons (joined with "; "), more_conversations, more_questions."""
    out = []
    for ds, pts in points.groupby("dataset", sort=False):
        best = pts[pts["best"]]
        s = sig[sig["dataset"] == ds] if len(sig) else sig
        v = verdict(best.iloc[0].to_dict() if len(best) else None, runner_up(s), min_stable_share=min_stable_share,
                    alpha=alpha, metric=metric)
        out.append({"dataset": ds, **asdict(v), "reasons": "; ".join(v.reasons)})
    return pd.DataFrame(out, columns=["dataset", "kind", "headline", "reasons", "more_conversations", "more_questions"])
