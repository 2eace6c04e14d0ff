"""Short names for what a report compares, one place: a configuration's label (embedder · store · strategy) and
the legend that maps every short name back to its full identity.

Full identities such as ``all-MiniLM-L6-v2-int8-onnx/max256-meanpool-l2`` wrap every table cell; the report
shows ``MiniLM`` and lists the full name once, in the legend (``legend_section``). The short names are a
``bench.embedders.names.shorten`` mapping of the run's embedders, passed to every renderer as ``short``.
``identical_stores`` finds stores whose results equal another store's on every setting (same embedder and
dataset): figures draw those once and say so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import pandas as pd

from bench.embedders.names import short_name
from bench.output import md_text as E

SEP = " · "


def config(embedder, backend, *, multi_embedder: bool, short: Mapping[str, str] | None = None) -> str:
    """A configuration's label: ``MiniLM · seekdb`` (the store alone when the run has one embedder; ``short``: the run's
    ``bench.embedders.names.shorten`` mapping)."""
    return f"{short_name(embedder, short)}{SEP}{backend}" if multi_embedder else str(backend)


def label(r, multi_embedder: bool, short: Mapping[str, str] | None = None) -> str:
    """A row's label (``r``: embedder, backend, strategy): ``MiniLM · seekdb · relative_delta``."""
    return f"{config(r['embedder'], r['backend'], multi_embedder=multi_embedder, short=short)}{SEP}{r['strategy']}"


def _isnan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def identical_stores(summary: pd.DataFrame, cols: Iterable[str] = ("recall", "tokens_injected_mean", "f1", "precision")) -> dict[tuple, str]:
    """(dataset, embedder, backend) -> the earlier store of the run whose results it repeats exactly (every strategy
    and threshold: same ``cols``, to 1e-9). Stores with results of their own are not keys."""
    cols = [c for c in cols if c in summary]
    out: dict[tuple, str] = {}
    if summary.empty or "backend" not in summary:
        return out
    for (ds, emb), g in summary.groupby(["dataset", "embedder"], sort=False):
        seen: list[tuple[str, pd.DataFrame]] = []
        for be, s in g.groupby("backend", sort=False):
            key = s.assign(_t=s["threshold"].fillna(-1.0)).sort_values(["strategy", "_t"])[["strategy", "_t", *cols]].reset_index(drop=True)
            for other, k in seen:
                if len(k) == len(key) and (k["strategy"] == key["strategy"]).all() and all(
                        ((k[c] - key[c]).abs().fillna(0) <= 1e-9).all() and (k[c].isna() == key[c].isna()).all() for c in ["_t", *cols]):
                    out[(ds, emb, be)] = other
                    break
            else:
                seen.append((be, key))
    return out


def legend_section(summary: pd.DataFrame, jobs: list[dict], multi_embedder: bool, short: Mapping[str, str] | None = None) -> list[str]:
    """``## Names used in this report``: short name -> embedder, store and layout in full, and which stores repeat
    another's results (drawn once in the figures)."""
    if summary.empty:
        return []
    layouts = {(j.get("dataset"), j.get("embedder"), j.get("backend")): j.get("layout") for j in jobs}
    same = identical_stores(summary)
    rows = ["| short name | embedder (full) | store | layout | note |", "|---|---|---|---|---|"]
    seen = set()
    for _, r in summary.drop_duplicates(["dataset", "embedder", "backend"]).iterrows():
        name = config(r["embedder"], r["backend"], multi_embedder=multi_embedder, short=short)
        if name in seen:
            continue
        seen.add(name)
        twin = same.get((r["dataset"], r["embedder"], r["backend"]))
        note = f"identical results to {E(config(r['embedder'], twin, multi_embedder=multi_embedder, short=short))} on every setting: drawn once" if twin else ""
        lay = layouts.get((r["dataset"], r["embedder"], r["backend"]))
        rows.append(f"| {E(name)} | {E(r['embedder'])} | {E(r['backend'])} | {E(lay) if not _isnan(lay) and lay else '—'} | {note} |")
    return ["## Names used in this report", "",
            f"Tables and figures name a setting `embedder{SEP}store{SEP}strategy`" + ("" if multi_embedder else " without the embedder (one in this run)")
            + "; the full identities:", "", *rows, ""]
