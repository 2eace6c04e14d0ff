"""bench.report.latency: every latency row says its store layout and where it was measured; a warning names the
stores when they ran in different layouts or their latency comes from different runs (hand-made metas)."""

import pandas as pd

from bench.report.latency import THIS_RUN, latency_origin, latency_rows


def job(backend, layout, *, run_id="r2", measured_in="r2", at="2026-12-01T10:00:00+0000", reused=False, job_hit=False):
    trace = {"dataset": "locomo", "embedder": "minilm", "backend": backend, "layout": layout, "measured_in": measured_in,
             "measured_at": at, **({"reused_from": "/cache/traces/abc"} if reused else {})}
    return {**trace, "traces": [trace], "run_id": run_id,
            "caches": {"job": {"status": "hit" if job_hit else "miss"}}}


def summary(*rows):
    return pd.DataFrame([{"dataset": "locomo", "embedder": "minilm", "backend": b, "layout": lay, "strategy": s,
                          "latency_p50_ms": p50, "latency_p95_ms": p50 * 2, "latency_p99_ms": p50 * 3} for b, lay, s, p50 in rows])


def test_origin_is_this_run_or_the_earlier_run_a_cached_trace_was_timed_in():
    assert latency_origin(job("seekdb", "shared")) == THIS_RUN
    # a trace from the cache, measured in run r1: its latency is r1's, whatever this run is
    assert latency_origin(job("seekdb", "shared", measured_in="r1", reused=True)) == \
        "cached trace of run r1 (2026-12-01T10:00:00+0000)"
    # a whole job restored from the job cache: the same
    assert latency_origin(job("seekdb", "shared", measured_in="r1", job_hit=True)).startswith("cached trace of run r1")
    # reused from the cache but measured earlier in this same run (two jobs, one trace): this run
    assert latency_origin(job("seekdb", "shared", reused=True)) == THIS_RUN
    # a trace written before measured_in was recorded: cached -> unknown run, else this run
    old = job("seekdb", "shared", measured_in=None, reused=True)
    assert latency_origin(old) == "cached trace of run unknown (2026-12-01T10:00:00+0000)"
    assert latency_origin(job("seekdb", "shared", measured_in=None)) == THIS_RUN


def test_different_layouts_and_runs_are_named_in_a_warning():
    s = summary(("seekdb", "per_conversation", "limit5", 2.0), ("seekdb", "per_conversation", "threshold", 2.0),
                ("pinecone", "shared", "limit5", 9.0))
    jobs = [job("seekdb", "per_conversation"), job("pinecone", "shared", measured_in="r1", reused=True)]
    lat, warn = latency_rows(s, jobs)
    assert lat[["backend", "layout", "latency_p50_ms", "latency origin"]].values.tolist() == [
        ["seekdb", "per_conversation", 2.0, THIS_RUN],
        ["pinecone", "shared", 9.0, "cached trace of run r1 (2026-12-01T10:00:00+0000)"]]
    assert warn[0] == ("> **Latency not like for like** (locomo): seekdb per_conversation, pinecone shared. A per-conversation "
                       "search reads one conversation's collection, a shared one filters the whole store: set "
                       "`backend.layout=shared` (or `per_conversation`) for every store.")
    assert warn[2].startswith("> **Latency from different runs** (locomo): seekdb: measured in this run; pinecone: cached "
                              "trace of run r1")
    assert len(warn) == 4


def test_one_layout_and_one_run_need_no_warning():
    s = summary(("seekdb", "shared", "limit5", 2.0), ("pinecone", "shared", "limit5", 9.0))
    lat, warn = latency_rows(s, [job("seekdb", "shared"), job("pinecone", "shared")])
    assert warn == [] and lat["latency origin"].tolist() == [THIS_RUN, THIS_RUN]
    # the same store in two layouts (make stores): two rows, no warning (one store is not a comparison of stores)
    s = summary(("seekdb", "shared", "limit5", 2.0), ("seekdb", "per_conversation", "limit5", 3.0))
    lat, warn = latency_rows(s, [job("seekdb", "shared"), job("seekdb", "per_conversation")])
    assert warn == [] and lat["layout"].tolist() == ["shared", "per_conversation"]


def test_the_table_shows_each_stores_depth_and_warns_when_it_differs():
    # sqlite-vec's largest k (4096) cut a depth of 5000 the exact store searched: not like for like
    s = summary(("exact", "shared", "limit5", 2.0), ("sqlite_vec", "shared", "limit5", 9.0))
    lat, warn = latency_rows(s, [{**job("exact", "shared"), "depth": 5000}, {**job("sqlite_vec", "shared"), "depth": 4096}])
    assert lat["depth"].tolist() == [5000, 4096]
    assert warn[0].startswith("> **Latency not like for like** (locomo): search depth exact 5000, sqlite_vec 4096.")
    lat, warn = latency_rows(s, [{**job("exact", "shared"), "depth": 689}, {**job("sqlite_vec", "shared"), "depth": 689}])
    assert warn == [] and lat["depth"].tolist() == [689, 689]
