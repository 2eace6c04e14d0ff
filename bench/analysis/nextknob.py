"""What would help most: the next knob to turn, from the miss attribution and what the sweep measured.

At the recommended configuration, the largest cause of missed gold memories names the knob:

- ``embedding`` (not in the exact top-N by cosine): the embedder is the bottleneck; other embedders to try;
- ``threshold`` (returned, below the threshold): a lower threshold;
- ``cap`` (above the threshold, below the top-k cut): a larger k;
- ``filter`` (hidden by the strategy's filter): the filter;
- ``store`` / ``unreturned`` (in the exact top-N, not returned): the store's search depth or an exact store;
- ``decay/tier`` / ``policy``: the strategy's own policy.

Where the run measured the alternative (a lower threshold of the same strategy, the same strategy on another
embedder or store, the threshold strategy without a cap), the recall it reached is quoted. A setting is
*usable* when its recall is at least ``usable_recall`` while it saves tokens against full context; when none
of the settings tried is, the section says so plainly. A row scored on fewer than ``min_n`` questions
(``recommend.min_n``; a routing strategy's per-route slice such as ``routing/profile`` may hold 1 question of
1,536) is never quoted or offered: the section says how many were left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

KNOBS = {
    "embedding": "the embedder is the bottleneck",
    "unreturned": "the store's search returns too little",
    "store": "the store's search returns too little",
    "threshold": "the threshold is too high",
    "cap": "the top-k cap is too small",
    "filter": "the strategy's filter hides them",
    "decay/tier": "the strategy's own policy drops them",
    "policy": "the strategy's own policy drops them",
}


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _same(s: pd.DataFrame, point: Mapping, keys: Sequence[str]) -> pd.DataFrame:
    m = pd.Series(True, index=s.index)
    for k in keys:
        m &= s[k] == point[k]
    return s[m]


def next_knob(*, causes: Mapping[str, int], point: Mapping, summary: pd.DataFrame, full_context: Sequence[str],
              usable_recall: float, embedders: Sequence[str] = (), min_n: int = 0) -> list[str]:
    """Markdown bullet lines for one dataset. ``causes``: missed gold memories per cause at ``point`` (the
    recommendation row: dataset, embedder, backend, strategy, threshold, recall); ``summary``: summary.csv
    rows (one format); ``embedders``: names of offline embedders to suggest (not those the run used); ``min_n``:
    rows with fewer scored questions (``n_questions``) are left out of every comparison and suggestion."""
    ds = point["dataset"]
    s = summary[summary["dataset"] == ds]
    small = s["n_questions"] < min_n if "n_questions" in s else pd.Series(False, index=s.index)
    dropped, s = s[small], s[~small]
    lines = []
    total = sum(int(v) for v in causes.values())
    if total:
        cause, n = max(causes.items(), key=lambda kv: (kv[1], kv[0]))
        lines.append(f"- **Largest cause**: {n} of {total} missed gold memories ({n / total:.0%}) are `{cause}` misses: "
                     f"{KNOBS.get(cause, cause)}.")
        lines += _measured(cause, point, s, embedders)
    tried = s[~s["strategy"].isin(full_context)]
    usable = tried[(tried["recall"] >= usable_recall) & (tried["token_savings"] > 0)]
    if len(tried) and usable.empty:
        top = tried.loc[tried["recall"].idxmax()]
        at = "" if _nan(top["threshold"]) else f" ≥ {top['threshold']:.2f}"
        lines.append(f"- **No setting tried reaches a usable recall** (≥ {usable_recall:.2f} while saving tokens): the best is "
                     f"`{top['strategy']}`{at} on `{top['backend']}` / `{top['embedder']}` at recall {top['recall']:.3f}. "
                     "An agent built on these numbers would miss most of what it should remember: change the embedder or the "
                     "data before tuning thresholds.")
    elif len(usable):
        best = usable.loc[usable["token_savings"].idxmax()]
        at = "" if _nan(best["threshold"]) else f" ≥ {best['threshold']:.2f}"
        lines.append(f"- **Usable settings exist**: e.g. `{best['strategy']}`{at} on `{best['backend']}` reaches recall "
                     f"{best['recall']:.3f} and saves {best['token_savings']:.0%} of the tokens (usable: recall ≥ {usable_recall:.2f}).")
        if not _nan(point.get("recall")) and point["recall"] < usable_recall:
            lines.append(f"  The recommendation recalls only {point['recall']:.3f}: an agent would miss {1 - point['recall']:.0%} of the "
                         f"gold memories. To ship a usable recall at the fewest tokens, set `recommend.objective=min_tokens "
                         f"recommend.min_recall={usable_recall:g}`.")
    if len(dropped):
        smallest = dropped.loc[dropped["n_questions"].idxmin()]
        lines.append(f"- {len(dropped)} setting(s) measured on fewer than {min_n} questions are left out of these suggestions "
                     f"(`recommend.min_n`; e.g. `{smallest['strategy']}` on {int(smallest['n_questions'])} question(s)).")
    return lines


def _measured(cause: str, point: Mapping, s: pd.DataFrame, embedders: Sequence[str]) -> list[str]:
    out = []
    if cause == "embedding":
        others = _same(s, point, ("strategy", "backend"))
        others = others[others["embedder"] != point["embedder"]]
        if len(others):
            o = others.loc[others["recall"].idxmax()]
            out.append(f"  Measured in this run: `{o['embedder']}` reaches recall {o['recall']:.3f} with `{o['strategy']}` "
                       f"(vs {point['recall']:.3f}).")
        if embedders:
            out.append(f"  Try other embedders on the same data: `make sweep EMBEDDERS={','.join(embedders)}` (offline) or an API "
                       "embedder; a threshold belongs to an embedder, so re-tune it after switching.")
        else:
            out.append("  Try a stronger embedder (an API embedder: see the README's Embedders); a threshold belongs to an "
                       "embedder, so re-tune it after switching.")
    elif cause == "threshold" and not _nan(point.get("threshold")):
        lower = _same(s, point, ("embedder", "backend", "strategy"))
        lower = lower[lower["threshold"] < point["threshold"] - 1e-9].sort_values("threshold", ascending=False)
        for _, r in lower.head(2).iterrows():
            out.append(f"  Measured: at ≥ {r['threshold']:.2f} recall is {r['recall']:.3f} (F1 {r['f1']:.3f}, "
                       f"{r['tokens_injected_mean']:.0f} tokens per question).")
    elif cause == "cap":
        nocap = _same(s, point, ("embedder", "backend"))
        nocap = nocap[(nocap["strategy"] == "threshold")]
        if not _nan(point.get("threshold")):
            nocap = nocap[(nocap["threshold"] - point["threshold"]).abs() < 1e-9]
        if len(nocap):
            r = nocap.iloc[0]
            out.append(f"  Measured: without the cap (`threshold` alone at the same threshold) recall is {r['recall']:.3f} "
                       f"({r['tokens_injected_mean']:.0f} tokens per question): raise k toward that.")
    elif cause in ("store", "unreturned"):
        exact = _same(s, point, ("embedder", "strategy"))
        exact = exact[exact["backend"] == "exact"]
        if not _nan(point.get("threshold")):
            exact = exact[(exact["threshold"] - point["threshold"]).abs() < 1e-9]
        if len(exact) and point["backend"] != "exact":
            out.append(f"  Measured: the exact store reaches recall {exact.iloc[0]['recall']:.3f} with the same setting.")
        else:
            out.append("  Raise the search depth (`depth`) or the store's search effort (ef), or compare with `backend=exact`.")
    return out


def offline_embedders(*, exclude_targets: Sequence[str] = ()) -> list[str]:
    """Embedder plugins that run offline and give reportable numbers (configs/embedder/*.yaml whose target is not an
    HTTP client or a plumbing-only embedder), leaving out those whose ``_target_`` is in ``exclude_targets`` (the
    embedders the run already used)."""
    from bench.resources import plugin_names, shipped_config

    out = []
    for name in plugin_names("embedder"):
        target = str(shipped_config(f"embedder/{name}.yaml").get("_target_", ""))
        if not any(t in target for t in ("http", "hashing", "synthetic")) and target not in exclude_targets:
            out.append(name)
    return out
