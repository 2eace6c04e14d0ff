"""The latency pass: after the experiment, every finished job's store is rebuilt (the corpus from the job's snapshot,
embeddings from the cache) and timed in one process against the exact store right after it, query by query
(``time_searches``) -> the run's latency.csv. ``--fault-slow STORE=FACTOR`` slows a store down for demonstrations.

Why a second measurement: the run's own per-query latencies (the trace's ``latency_ns``, summarised by
``bench.metrics.percentile_ms``) come from separate jobs, possibly in parallel, at other moments; the gate needs a
store and its reference timed side by side so the machine's load cancels. Both time the store call alone through
``bench.backends.session.Session``.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bench.results.rundir import RunDir
from bench.tools.regress.checks.latency import LATENCY_COLUMNS
from bench.tools.regress.runs import job_dirs, load_job_config
from bench.tools.regress.settings import NAN, REFERENCE, GateConfig, RegressError, gate_config

log = logging.getLogger("bench.tools.regress")  # the package's logger: its lines read as before the split


def time_searches(backends: Mapping[str, object], questions: Sequence, vectors: np.ndarray, *, depth: int,
                  repeats: int, queries: int, warmup: int, reference: str = REFERENCE) -> pd.DataFrame:
    """Time ``backend.search`` (``bench.backends.session``: perf_counter_ns around the call alone) over ``queries``
    questions per pass, on open stores that hold the corpus, each store against the ``reference`` store.

    The questions are taken in order and cycled when there are fewer than ``queries`` (a small corpus
    still gives ``queries`` samples); ``warmup`` searches per store are discarded first. Per pass and
    question every other store is called in turn (the order rotates each pass) and the reference right after
    it, so a store and its reference timing see the same machine load. Returns one row per (store, pass,
    query): backend, repeat, query, ms, ref_ms (``LATENCY_COLUMNS``; none when the reference is the only store).
    """
    from bench.backends.session import Session
    from bench.replay.trace import question_filter

    if reference not in backends:
        raise ValueError(f"latency: no {reference!r} store (the reference must be timed in the same run)")
    names = [n for n in backends if n != reference]
    sessions = {n: Session(backends[n]) for n in backends}
    ks = {n: min(depth, backends[n].capabilities.max_k) for n in backends}
    qs = list(questions)
    idx = [i % len(qs) for i in range(queries)] if qs else []
    wheres = [question_filter(q) for q in qs]
    for n in backends:  # discarded: cold caches
        sessions[n].warm_up(vectors[idx], [wheres[i] for i in idx], k=ks[n], n=warmup)
    ref = sessions[reference]
    out = []
    for rep in range(repeats):
        order = names[rep % len(names):] + names[: rep % len(names)] if names else []
        for j, i in enumerate(idx):
            for n in order:
                t = sessions[n].timed_search(vectors[i], k=ks[n], where=wheres[i])[1]
                e = ref.timed_search(vectors[i], k=ks[reference], where=wheres[i])[1]
                out.append((n, rep, j, t / 1e6, e / 1e6))
    return pd.DataFrame(out, columns=LATENCY_COLUMNS)


class _Slowed:
    """A store whose searches take ``factor`` x their time (busy-waits (factor - 1) x the measured search time
    after each): ``--fault-slow``, to show the latency gate failing on a real slowdown."""

    def __init__(self, backend, factor: float):
        self._backend, self._factor = backend, factor

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def search(self, *args, **kwargs):
        t0 = time.perf_counter_ns()
        hits = self._backend.search(*args, **kwargs)
        end = t0 + (time.perf_counter_ns() - t0) * self._factor
        while time.perf_counter_ns() < end:
            pass
        return hits


def parse_fault_slow(specs: Sequence[str]) -> dict[str, float]:
    """``STORE=FACTOR`` strings -> {store: factor} (factor >= 1)."""
    out = {}
    for spec in specs:
        store, _, factor = str(spec).partition("=")
        try:
            f = float(factor)
        except ValueError:
            f = NAN
        if not store or not f >= 1:
            raise ValueError(f"--fault-slow {spec!r}: expected STORE=FACTOR with FACTOR >= 1, e.g. sqlite_vec=2")
        out[store] = f
    return out


def measure_latency(run_dir: Path, cfg: GateConfig, stores_dir: Path, slow: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Rebuild every finished job's store from its resolved config (the corpus from the job's snapshot,
    embeddings from the cache) and time it (``slow``: store -> factor, ``--fault-slow``)."""
    from contextlib import ExitStack

    from bench.backends.layout import build_store
    from bench.backends.session import INGEST_BATCH, open_session
    from bench.embedders.cache import CachedEmbedder
    from bench.plugins import instantiate as build
    from bench.replay.trace import batches, embed_corpus, search_depth

    slow = dict(slow or {})
    jobs = job_dirs(run_dir)
    cfgs = [load_job_config(j) for j in jobs]
    if not cfgs:
        return pd.DataFrame(columns=LATENCY_COLUMNS)
    first = cfgs[0]
    corpus = RunDir(jobs[0]).corpus()
    embedder = CachedEmbedder(build(first["embedder"]), Path(first["paths"]["cache"]) / "embeddings")
    tv, qv, _ = embed_corpus(corpus, embedder)
    questions = list(corpus.questions)
    turns = corpus.turns()
    shutil.rmtree(stores_dir, ignore_errors=True)
    try:
        with ExitStack() as stack:
            by_name: dict[str, object] = {}
            for i, c in enumerate(cfgs):
                kw = {"collection": f"rb_regress_{i}"}
                if "path" in c["backend"]:
                    kw["path"] = str(Path(stores_dir) / f"job{i}")
                session = stack.enter_context(open_session(build_store(c["backend"], **kw), dim=embedder.dim))
                session.ingest(batches(turns, tv, INGEST_BATCH))
                if session.backend.name in by_name:
                    raise RegressError(f"{run_dir}: two jobs use the same store name; the latency pass needs one job per store")
                by_name[session.backend.name] = session.backend
            unknown = sorted(set(slow) - set(by_name))
            if unknown:
                raise RegressError(f"--fault-slow: no store {unknown} in this run (stores: {sorted(by_name)})")
            for name, factor in slow.items():
                log.warning("--fault-slow: %s searches made %gx slower in the latency pass", name, factor)
                by_name[name] = _Slowed(by_name[name], factor)
            if REFERENCE not in by_name:
                return pd.DataFrame(columns=LATENCY_COLUMNS)
            return time_searches(by_name, questions, qv, depth=search_depth(first.get("depth"), corpus), repeats=cfg.latency_repeats,
                                 queries=cfg.latency_queries, warmup=cfg.latency_warmup)
    finally:
        shutil.rmtree(stores_dir, ignore_errors=True)


def latency_pass(run_dir: Path, stores_dir: Path, slow: Mapping[str, float] | None = None) -> Path:
    """``measure_latency`` in a child process (an embedded seekdb can serve one path per process) -> latency.csv."""
    cfg = gate_config(run_dir)
    lat = measure_latency(run_dir, cfg, stores_dir, slow)
    return RunDir(run_dir).write_latency(lat)
