"""The report's store-latency table: which layout each store ran in, how deep it searched and where its latency was
measured.

Latency compares stores like for like only when they ran in the same layout (``bench.backends.layout``: a
per-conversation search scans one conversation's collection, a shared one filters the whole store), at the same
search depth (k: a store whose largest k is below the depth searched less deep; an HNSW store's ef follows k) and in
the same run (a trace reused from the cache carries the latency of the run that measured it: another day, another
machine load). Every row says all three (``layout``, ``depth``, ``latency origin``), and a warning line names the
stores when one differs within a dataset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

THIS_RUN = "measured in this run"
KEYS = ["dataset", "embedder", "backend", "layout"]


def _cached(job: Mapping, trace: Mapping) -> bool:
    return bool(trace.get("reused_from")) or ((job.get("caches") or {}).get("job") or {}).get("status") == "hit"


def latency_origin(job: Mapping) -> str:
    """Where the latency of a job (its meta.json) was measured: ``measured in this run``, or the earlier run a cached
    trace (or cached job) was timed in, with its time. A trace without ``measured_in`` (written before it was
    recorded) counts as this run's unless it came from a cache."""
    out = []
    for t in job.get("traces") or [job]:
        src, this = t.get("measured_in"), job.get("run_id")
        fresh = src == this if src and this else not _cached(job, t)
        out.append(THIS_RUN if fresh else f"cached trace of run {src or 'unknown'} ({t.get('measured_at') or 'time unknown'})")
    return "; ".join(dict.fromkeys(out))


def latency_rows(summary: pd.DataFrame, jobs: Sequence[Mapping]) -> tuple[pd.DataFrame, list[str]]:
    """(one row per dataset, embedder, store and layout with its latency and ``latency origin``; the warning lines)."""
    keys = [k for k in KEYS if k in summary]
    lat = summary[summary["latency_p50_ms"].notna()].drop_duplicates(keys).copy()
    if "layout" not in lat:
        lat["layout"] = "shared"
    origin = {tuple(str(j.get(k, "shared" if k == "layout" else "")) for k in KEYS): latency_origin(j) for j in jobs}
    depth = {tuple(str(j.get(k, "shared" if k == "layout" else "")) for k in KEYS): j.get("depth") for j in jobs}
    found = [tuple(str(r.get(k, "shared" if k == "layout" else "")) for k in KEYS) for r in lat.to_dict("records")]
    lat["latency origin"] = [origin.get(key, "unknown") for key in found]
    lat["depth"] = [depth.get(key) for key in found]
    return lat, like_for_like_warnings(lat)


def like_for_like_warnings(lat: pd.DataFrame) -> list[str]:
    """Markdown quote lines, per dataset whose stores ran in different layouts or whose latency comes from different runs."""
    out = []
    for ds, g in lat.groupby("dataset", sort=False):
        if g["backend"].nunique() < 2:
            continue
        layouts = g.drop_duplicates(["backend", "layout"])
        if g["layout"].nunique() > 1:
            names = ", ".join(f"{b} {lay}" for b, lay in zip(layouts["backend"], layouts["layout"]))
            out += [f"> **Latency not like for like** ({ds}): {names}. A per-conversation search reads one conversation's "
                    "collection, a shared one filters the whole store: set `backend.layout=shared` (or `per_conversation`) "
                    "for every store.", ""]
        depths = g.drop_duplicates(["backend", "layout", "depth"])
        if "depth" in g and g["depth"].nunique() > 1:
            names = ", ".join(f"{b} {d}" for b, d in zip(depths["backend"], depths["depth"]))
            out += [f"> **Latency not like for like** ({ds}): search depth {names}. A store whose largest k is below the "
                    "depth searched less deep (and an HNSW store's ef follows k): give `depth=N` within every store's limit.", ""]
        if g["latency origin"].nunique() > 1:
            names = "; ".join(f"{b}: {o}" for b, o in zip(g["backend"], g["latency origin"]))
            out += [f"> **Latency from different runs** ({ds}): {names}. `trace_cache=false resume=false` measures every "
                    "store again in one run.", ""]
    return out
