"""The pipeline in one place: corpus, embedder, store, strategies, settings -> a run directory.

    corpus -> embeddings (cached) -> store -> trace (cached) -> P(relevant) -> strategies x thresholds -> metrics -> files

``run`` is one job on plain values (``Inputs``: the plugins' plain configs or built objects; ``Settings``: the knobs);
the job's identity (``job_key``: settings, corpus content, embedder, code) decides whether an identical finished job
is copied instead (resume), and a finished job is kept for the next run. The trace of each role filter comes from the
trace cache when its key (``bench.run.trace_key``) matches. A failure is recorded in ``failed.json`` and raised; a fault
that does not stop the job (a cache that could not be written) is logged, listed in ``faults.json`` and returned.

Nothing here knows Hydra: the CLI (``bench.cli.sweep.plain_job``) turns its config into ``Inputs`` and ``Settings``;
``bench.api.run`` and the tools call ``run`` the same way. Plugins are built by ``bench.plugins.instantiate``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pandas as pd

from bench import run as rid
from bench.output import error_line, redact, write_npz
from bench.results.rundir import CARD, FAILED, NOT_CACHED, RESULTS, RunDir, strategy_record

log = logging.getLogger("bench")

# Settings that say where a job writes, how it shows progress, or how it is reported: not part of its results.
# ``memory`` (the units) decides the corpus, whose digest is in every key.
JOB_KEY_IGNORES = ("hydra", "paths", "progress", "publish_latest", "defer_report", "resume", "trace_cache", "recommend", "regress", "strict",
                   "memory")


@dataclass(frozen=True)
class Inputs:
    """What a job measures. ``corpus`` and ``embedder``: a plain ``_target_`` config or the built object; ``store``: the
    store's plain config (built per trace, in a collection of its own); ``strategies``: plain strategy configs."""

    corpus: object
    embedder: object
    store: Mapping
    strategies: tuple[Mapping, ...]


@dataclass(frozen=True)
class Settings:
    """How a job runs, as plain values. ``config``: the resolved config whose result-deciding part (``job_settings``)
    is the job's identity; ``record``: the command's config as text, written beside the results (``config_resolved.yaml``)."""

    cache: Path
    config: Mapping = field(default_factory=dict)
    depth: int | None = None
    warmup: int = 5
    thresholds: tuple = (0.10, 0.90, 0.05)  # start, stop, step
    formats: tuple[str, ...] = ("A",)
    encoding: str = "cl100k_base"
    ranked: Mapping = field(default_factory=dict)  # ks, confidence, n_resamples
    conventions_ks: tuple | None = None  # None: bench.metrics.conventions.KS
    memory: object = None  # a bench.data.units.UnitSpec (None: one memory per turn, every role)
    # metadata filter of every question's search (config ``filter``; bench.replay.visibility.parse_filter); None: none
    metadata_filter: Mapping | None = None
    run_file: str | None = None  # a TREC run read as the trace instead of searching the store
    seed: int = 0
    ci_method: str = "t"
    progress: bool = False
    trace_cache: bool = True
    resume: bool = True  # copy an identical finished job
    keep: bool = True  # keep the finished job for the next run (resume)
    strict: bool = False
    overrides: tuple[str, ...] = ()  # the command's overrides (meta.json), secrets redacted
    record: str | None = None
    score: str = "similarity"  # what thresholds compare with: similarity | native | one_minus_distance (bench.selection.basis)
    replay: str = "batch"  # batch | live (bench.replay.live: timeline order, no wait_ready between writes)
    live: Mapping = field(default_factory=dict)  # live replay settings: batch (turns per write)
    faults: Mapping | None = None  # injected store faults (bench.replay.faults; part of the trace key), None: none
    degrade: Mapping = field(default_factory=dict)  # timeouts_ms, fallback_k (bench.selection.degrade -> degradation.csv)
    e2e: Mapping = field(default_factory=dict)  # sample, threshold (bench.selection.e2e -> latency_e2e.csv)


@dataclass(frozen=True)
class Job:
    """A job's inputs, loaded once: the corpus (in its memory units), the embedder and the key of its results."""

    corpus: object
    corpus_sha: str
    embedder: object  # the inner embedder (not yet wrapped in the cache)
    store: Mapping
    strategies: tuple  # StrategySpecs
    strategy_configs: tuple[Mapping, ...]
    key: rid.Key


@dataclass(frozen=True)
class Result:
    path: Path
    summary: pd.DataFrame = field(repr=False)
    key: rid.Key
    resumed: bool
    faults: tuple[str, ...] = ()


def run(inputs: Inputs, settings: Settings, out_dir: Path) -> Result:
    """One job into ``out_dir``: corpus -> embeddings -> trace per role filter -> calibration -> sweep -> ranked -> files."""
    from bench.selection import formats as F
    from bench.selection.sweep import format_tokens_table, summarise, sweep, threshold_grid
    from bench.strategies.spec import score_bounds

    out_dir, faults, job = Path(out_dir), [], None
    fault = partial(_fault, out_dir, faults)
    try:
        job = prepare(inputs, settings)
        done = settings.cache / "jobs" / job.key.digest
        if settings.resume and _finished_before(done, job.key):
            return _resume(done, job, settings, out_dir)
        embedder = _cached(job.embedder, settings)
        check_unique(job.strategies)
        grid = threshold_grid(*settings.thresholds, bounds=score_bounds(settings.score))
        formats = F.check_formats(list(settings.formats))  # injection formats swept (rows repeat per format)
        table = _token_table(job, settings, fault)
        token_counts = dict(table.memory["A"])  # "role: message" lines
        readable, cost = _coverage(job, embedder, settings)
        answers = _answer_index(job, settings, fault)  # answer coverage's per-memory tokens, once for every trace of the job
        out_dir.mkdir(parents=True, exist_ok=True)
        out = RunDir(out_dir)
        parts, metas, by_format, fitted, traces, scored = [], [], [], [], [], []
        lives = []  # live replay: (roles, trace, record) per role filter
        for roles in dict.fromkeys(s.roles for s in job.strategies):
            trace, record = get_live(job, settings, embedder, roles, fault) if settings.replay == "live" else \
                (get_trace(job, settings, embedder, roles, fault), None)
            if trace.meta.get("reused_from"):  # from the trace cache, unchanged: copy its file
                trace.save_copy(Path(trace.meta["reused_from"]), out.trace_dir(roles))
            else:
                trace.save(out.trace_dir(roles))
            if record is not None:
                record.save(out.trace_dir(roles))
                lives.append((roles, trace, record))
            traces.append(trace)
            trace = _scored(trace, settings.score)  # the score the strategies see, mapped once (bench.selection.basis)
            scored.append(trace)
            specs = [s for s in job.strategies if s.roles == roles]
            probs = None
            if any(s.calibrated for s in specs):  # derived from the trace and the labels, before the sweep
                probs, record = get_calibrated(job, settings.cache, trace, fault)
                fitted.append(record)
            shared: dict = {}  # the two sweeps of this trace build its per-question arrays once
            parts.append(sweep(trace, job.corpus, specs, grid, token_counts, embedder=embedder.model_id, formats=formats,
                               format_tokens=table, calibrated=probs, answers=answers, shared=shared))
            by_format += format_tokens_table(trace, job.corpus, specs, token_counts, table, embedder=embedder.model_id, shared=shared)
            metas.append(trace.meta)
        rows = pd.concat(parts, ignore_index=True)
        summary = summarise(rows)
        summary["for_results"] = job.embedder.capabilities.for_results
        _write_inputs(out, job)
        out.write_meta(redact(_meta(job, settings, embedder, metas, grid, formats, by_format, readable, cost, fitted)))
        out.write_ranked(ranked_table(settings, traces, job.corpus, embedder.model_id))
        write_conventions(settings, traces, job.corpus, job.embedder, out_dir, job.strategies)
        if lives:
            write_live(job, settings, embedder, lives, out_dir, fault)
        write_degradation(settings, traces, parts, job, table, out_dir)
        try:  # a measurement beside the results: an embedder that fails now (network) does not lose the job
            write_e2e(settings, scored, job, table, grid, formats, out_dir)  # the traces the strategies saw
        except Exception as exc:  # noqa: BLE001
            fault(f"end-to-end latency not measured (latency_e2e.csv): {error_line(exc)}")
        out.write_results(rows, summary)  # summary.csv last: a job directory with it is complete
        if settings.record is not None:
            out.write_config(settings.record)
        log.info(_caches_line(out.meta()))
    except BaseException as exc:
        reason = "interrupted (Ctrl-C) before the job finished" if isinstance(exc, KeyboardInterrupt) else error_line(exc)
        record_failure(out_dir, reason, key=job.key if job else None, store=dict(inputs.store).get("_target_"), overrides=settings.overrides)
        raise
    if settings.keep:
        _keep(out_dir, settings.cache / "jobs", job.key, fault)
    return Result(out_dir, summary, job.key, resumed=False, faults=tuple(faults))


# --- identity ------------------------------------------------------------------------------------

def prepare(inputs: Inputs, settings: Settings) -> Job:
    """The corpus in its memory units (its label defects on the console; fatal when ``strict``), the embedder
    (``auto`` resolved on the corpus), the job's key and its strategies."""
    from bench.data.card import defect_summary
    from bench.data.units import apply_units
    from bench.embedders.auto import resolve
    from bench.strategies.spec import load_spec

    corpus = apply_units(_built(inputs.corpus), settings.memory)
    if corpus.defects:
        log.warning("%s: %s (see %s)", corpus.name, defect_summary(corpus.defects), CARD)
        if settings.strict:
            raise ValueError(f"strict=true: {corpus.name} ({corpus.source}) has {defect_summary(corpus.defects)}")
    if settings.metadata_filter:  # a bad metadata filter stops the job before any embedding
        from bench.replay.visibility import check_filter, parse_filter

        check_filter(parse_filter(settings.metadata_filter), corpus)
    embedder = resolve(_built(inputs.embedder), [t.text for t in corpus.turns()] + [q.text for q in corpus.questions],
                       cache_dir=settings.cache / "coverage")
    sha = rid.corpus_digest(corpus)
    key = rid.job_key(settings=job_settings(settings.config), corpus_sha=sha, embedder=embedder.identity)
    strategies = tuple(load_spec(n) for n in inputs.strategies)
    ratio = [s.name for s in strategies if s.threshold_on == "ratio"]
    if settings.score != "similarity" and ratio:  # alpha x the best score means nothing on a distance or 2c - 1
        raise ValueError(f"score={settings.score}: {', '.join(ratio)} compare(s) a ratio of similarities (alpha x the best); "
                         "use score=similarity for them")
    return Job(corpus, sha, embedder, dict(inputs.store), strategies, tuple(inputs.strategies), key)


def check_unique(strategies) -> None:
    dupes = sorted(n for n, c in Counter(s.name for s in strategies).items() if c > 1)
    if dupes:
        raise ValueError(f"strategy names must be unique within a run: {', '.join(dupes)} used twice (configs/strategy/*.yaml 'name')")


def job_settings(config: Mapping) -> dict:
    """The resolved config that decides a job's results (paths, progress and report-time settings removed)."""
    out = {k: v for k, v in config.items() if k not in JOB_KEY_IGNORES}
    if out.get("replay", "batch") == "batch":
        out.pop("live", None)  # live replay settings do not decide a batch job
    for node in ("embedder", "backend"):
        if isinstance(out.get(node), dict):
            out[node] = {k: v for k, v in out[node].items() if k not in ("progress", "price_per_mtok", *rid.STORE_PLACE_FIELDS)}
    if out.get("run_file"):  # a run read from a file: its content decides the results, not its path; the store is not used
        out["run_file"] = {"sha256": rid.sha256_file(run_file(out["run_file"]))}
        out.pop("backend", None)
    return out


def run_file(value) -> Path:
    path = Path(str(value)).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"run_file: {path} not found (a TREC run: qid Q0 docid rank score tag)")
    return path


def _built(node):
    from bench.plugins import instantiate

    return instantiate(node) if isinstance(node, Mapping) else node


# --- resume --------------------------------------------------------------------------------------

def _finished_before(done: Path, key: rid.Key) -> bool:
    """A cached job with this key holds every result file unchanged (``bench.run.check_job``)."""
    if not done.exists():
        return False
    problem = rid.check_job(done, key, required=RESULTS)
    if problem:
        log.warning("cached job %s not reused: %s; running it again", done, problem)
    return not problem


def _resume(done: Path, job: Job, settings: Settings, out_dir: Path) -> Result:
    """The results of the identical job that finished before, copied into ``out_dir`` (not cached again)."""
    out = RunDir(out_dir)
    rid.restore_job(done, out_dir)
    meta = out.meta()
    meta.setdefault("caches", {})["job"] = {**job.key.describe(), "status": "hit", "from": str(done)}
    meta["run_id"] = rid.run_id()  # this run; its traces' measured_in still names the run that timed the store
    meta["overrides"] = list(settings.overrides)
    out.write_meta(meta)
    if settings.record is not None:
        out.write_config(settings.record)
    log.info("job %s finished before: results copied from %s (resume=false to re-run)", job.key.digest, done)
    return Result(out_dir, out.summary(), job.key, resumed=True)


def _keep(out_dir: Path, jobs: Path, key: rid.Key, fault) -> None:
    try:
        rid.save_job(out_dir, jobs, key, exclude=NOT_CACHED)
    except OSError as exc:
        fault(f"the job finished but could not be cached in {jobs}: {error_line(exc)}")


def record_failure(out_dir: Path, reason: str, *, key: rid.Key | None = None, store: str | None = None, overrides=()) -> None:
    """``failed.json`` of a job that did not finish: its key (when known), the reason in one line, the store, the overrides."""
    try:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        RunDir(out_dir).write_failed({"job_key": key.digest if key else None, "reason": reason, "backend": store,
                                      "overrides": list(overrides)})
    except Exception as exc:  # noqa: BLE001  (an unwritable run directory: the console line is all we can leave)
        log.error("could not record the failure in %s: %s", out_dir, error_line(exc))


def failed(out_dir: Path) -> bool:
    return RunDir(Path(out_dir)).has(FAILED)


def _fault(out_dir: Path, faults: list, line: str) -> None:
    """A fault that did not stop the job (a cache that could not be written): logged, listed in faults.json, returned."""
    log.error(line)
    faults.append(line)
    try:
        RunDir(out_dir).add_fault(line)
    except Exception:  # noqa: BLE001  (the run directory itself may be the fault)
        pass


# --- the stages ----------------------------------------------------------------------------------

def _cached(inner, settings: Settings):
    """The embedder behind its cache; one that computes faster than the cache reads (synthetic) is not cached:
    at 1M texts the cache would cost GBs."""
    from bench.embedders.cache import CachedEmbedder

    return CachedEmbedder(inner, settings.cache / "embeddings") if inner.capabilities.cacheable else inner


def _token_table(job: Job, settings: Settings, fault=log.error):
    """Tokens of every memory in every injection format (``bench.selection.formats``), counts cached per corpus and encoding;
    the whole table's counts are kept too (``tokens.table_file``), so a warm run neither renders nor hashes every piece."""
    from bench.selection import formats as F
    from bench.data import tokens

    counts_path = tokens.counts_file(settings.cache, settings.encoding, job.corpus_sha)
    turns = job.corpus.turns()
    count_many, save_counts = tokens.cached_counter(counts_path, settings.encoding)
    counts = tokens.read_table(tokens.table_file(counts_path), len(turns), F.FORMATS)
    if counts is not None:
        return F.assemble(turns, counts, count_many)
    counts = F.count_pieces(turns, count_many, F.FORMATS)
    try:
        save_counts()
        tokens.write_table(tokens.table_file(counts_path), counts)
    except OSError as exc:
        fault(f"could not write the token-count cache: {error_line(exc)}")
    return F.assemble(turns, counts, count_many)


def _answer_index(job: Job, settings: Settings, fault=log.error):
    """Answer coverage's index of the corpus (``bench.metrics.answers.AnswerIndex``: every text holding an answer token,
    tokenised), kept under the cache by the corpus's content and the code that builds it; an unreadable file is built again."""
    import numpy as np

    from bench.metrics.answers import AnswerIndex

    path = settings.cache / "answers" / f"{job.corpus_sha[:16]}-{rid.code_digest('metrics/answers', 'types')}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return AnswerIndex.from_arrays(job.corpus, {k: z[k] for k in z.files})
        except Exception as exc:  # noqa: BLE001  (a cache: whatever is wrong with it, build again)
            log.warning("ignoring the answer-index cache %s (%s): building it again", path, error_line(exc))
    index = AnswerIndex.build(job.corpus)
    try:
        write_npz(path, index.to_arrays())
    except OSError as exc:
        fault(f"could not write the answer-index cache: {error_line(exc)}")
    return index


def _coverage(job: Job, embedder, settings: Settings):
    """(what share of the text the model can read, the cost of embedding the uncached texts for a paid API or None)."""
    from bench.embedders import coverage

    inner, corpus = job.embedder, job.corpus
    readable = coverage.measure(inner, [t.text for t in corpus.turns()] + [q.text for q in corpus.questions],
                                cache_dir=settings.cache / "coverage")  # warned by bench.cli.sweep.finish_run
    est = None
    if inner.capabilities.metered:  # a paid API: what embedding the uncached texts will cost, before it starts
        from bench.embedders.cost import corpus_estimate, estimate_line

        est = corpus_estimate(embedder, inner.capabilities.price_per_mtok, [t.text for t in corpus.turns()], [q.text for q in corpus.questions])
        log.info("%s: %s", inner.model_id, estimate_line(est))
    return readable, est


def get_trace(job: Job, settings: Settings, embedder, roles: tuple[str, ...] | None, fault=log.error):
    """The trace for (corpus, embedder, store, depth, roles): from the cache when valid, else measured once and kept
    there (a cache that cannot be written is a ``fault``, not a failure)."""
    from bench.backends.layout import build_store
    from bench.replay.trace import Trace, build_trace, search_depth

    if settings.run_file:  # an external retriever's run (bench.replay.trec): no store, no trace cache (reading it is cheap)
        from bench.replay.trace import embed_corpus
        from bench.replay.trec import trace_from_run

        if settings.metadata_filter:
            raise ValueError("filter: a metadata filter applies to a store's search, not to a run_file (its ranking is given)")
        if _faults(settings) is not None:
            raise ValueError("faults: injected faults wrap a store's search, not a run_file (its ranking is given)")
        tv, qv, _ = embed_corpus(job.corpus, embedder, progress=settings.progress)
        return trace_from_run(run_file(settings.run_file), job.corpus, roles=roles, vectors=(tv, qv), embedder=embedder.model_id)
    from bench.replay.visibility import check_filter, filter_spec, parse_filter

    metadata = parse_filter(settings.metadata_filter)
    check_filter(metadata, job.corpus)
    store = dict(job.store)
    depth = search_depth(settings.depth, job.corpus)
    faults = _faults(settings)
    key = rid.trace_key(corpus_sha=job.corpus_sha, embedder=job.embedder.identity, depth=depth,
                        backend={**store, "faults": {**faults.describe(), "code": rid.code_digest("replay/faults")}} if faults else store,
                        roles=roles, warmup=int(settings.warmup), metadata_filter=filter_spec(metadata))
    cached = settings.cache / "traces" / key.digest
    status = "miss"
    if settings.trace_cache and cached.exists():
        trace, problem = Trace.load_checked(cached, job.corpus)
        if trace is not None:
            log.info("trace cache hit %s (measured %s): no store query", key.digest, trace.meta.get("measured_at"))
            trace.meta["reused_from"] = str(cached)
            trace.meta["cache"] = {**key.describe(), "status": "hit"}
            return trace
        log.warning("trace cache %s not reused: %s; measuring again", cached, problem)
        status = f"invalid ({problem})"
    place = {"collection": f"rb_{key.digest[:12]}_{rid.process_token()}"}
    if store.get("path"):  # an embedded store: a directory of this process's own
        rid.remove_stale_store_dirs(Path(store["path"]).parent)
        place["path"] = str(rid.private_store_dir(store["path"]))
    backend = build_store(store, **place)  # build_trace opens it and drops and closes it (bench.backends.session)
    trace = build_trace(job.corpus, embedder, backend, depth=depth, roles=roles, warmup=int(settings.warmup),
                        progress=settings.progress, metadata=metadata, faults=faults)
    trace.meta.update(trace_key=key.digest, dataset_source=job.corpus.source, cache={**key.describe(), "status": status})
    try:
        trace.save(cached)
    except OSError as exc:
        fault(f"could not write the trace cache {cached}: {error_line(exc)}")
    return trace


def _scored(trace, score: str):
    from bench.selection.basis import apply_basis

    return apply_basis(trace, score)
def get_live(job: Job, settings: Settings, embedder, roles: tuple[str, ...] | None, fault=log.error):
    """(trace, bench.replay.live.LiveRecord) of a live replay (``replay: live``): from the trace cache when valid (its key
    holds the live settings: a live trace never stands for a batch one), else measured once and kept there."""
    from bench.backends.layout import build_store
    from bench.replay import live
    from bench.replay.trace import search_depth

    if settings.run_file:
        raise ValueError("replay=live searches the store as the timeline runs: it cannot read a run_file (set run_file=null)")
    if settings.metadata_filter or _faults(settings) is not None:
        raise ValueError("replay=live does not apply a metadata filter or injected faults yet (set filter=null faults=null, "
                         "or replay=batch)")
    store = dict(job.store)
    depth = search_depth(settings.depth, job.corpus)
    batch, pace = live_batch(settings.live), live_pace(settings.live)
    replay = {"mode": "live", "batch": batch, **({"pace_ms": pace} if pace else {})}  # pace 0: the key as before pace existed
    key = rid.trace_key(corpus_sha=job.corpus_sha, embedder=job.embedder.identity, backend=store, depth=depth,
                        roles=roles, warmup=int(settings.warmup), replay=replay)
    cached = settings.cache / "traces" / key.digest
    status = "miss"
    if settings.trace_cache and cached.exists():
        found, problem = live.load_checked(cached, job.corpus)
        if found is not None:
            trace, record = found
            log.info("live trace cache hit %s (measured %s): no store query", key.digest, trace.meta.get("measured_at"))
            trace.meta["reused_from"] = str(cached)
            trace.meta["cache"] = {**key.describe(), "status": "hit"}
            return trace, record
        log.warning("live trace cache %s not reused: %s; measuring again", cached, problem)
        status = f"invalid ({problem})"
    place = {"collection": f"rb_{key.digest[:12]}_{rid.process_token()}"}
    if store.get("path"):
        rid.remove_stale_store_dirs(Path(store["path"]).parent)
        place["path"] = str(rid.private_store_dir(store["path"]))
    backend = build_store(store, **place)
    trace, record = live.build_live_trace(job.corpus, embedder, backend, depth=depth, roles=roles, batch=batch,
                                          pace_ms=pace, progress=settings.progress)
    trace.meta.update(trace_key=key.digest, dataset_source=job.corpus.source, cache={**key.describe(), "status": status})
    try:
        live.save(trace, record, cached)
    except OSError as exc:
        fault(f"could not write the trace cache {cached}: {error_line(exc)}")
    return trace, record


def live_batch(live: Mapping | None) -> int:
    """``live.batch`` (turns per write) checked: a positive integer; bench.replay.live.DEFAULT_BATCH when unset."""
    from bench.replay.live import DEFAULT_BATCH

    value = (live or {}).get("batch", DEFAULT_BATCH)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config live.batch: expected a positive integer (turns per write), got {value!r}")
    return value


def live_pace(live: Mapping | None) -> float:
    """``live.pace_ms`` (think time after each write, ms) checked: a number >= 0; 0 when unset."""
    value = (live or {}).get("pace_ms", 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"config live.pace_ms: expected a number of milliseconds >= 0, got {value!r}")
    return float(value)


def write_live(job: Job, settings: Settings, embedder, lives, out_dir: Path, fault=log.error) -> None:
    """The live tables of a live job (``bench.analysis.live``) and its growth figure, in ``out_dir/live/``; the batch
    trace they compare with is the ordinary one (``get_trace``: from the trace cache, else measured)."""
    from dataclasses import replace

    from bench.analysis import live as tables
    from bench.data.units import UnitSpec
    from bench.report.live import growth_figure

    batch_settings = replace(settings, replay="batch")
    ks = tuple((settings.ranked or {}).get("ks") or (1, 3, 5, 10))
    parts = []
    for roles, trace, record in lives:
        batch = get_trace(job, batch_settings, embedder, roles, fault)
        parts.append(tables.live_tables(trace, record, batch, job.corpus, ks=ks, memory=(settings.memory or UnitSpec()).describe()))
    written = tables.write(Path(out_dir) / tables.FOLDER, tables.concat(parts))
    growth_figure(written["growth"], Path(out_dir) / tables.FOLDER / "growth.png")


def get_calibrated(job: Job, cache: Path, trace, fault=log.error) -> tuple[dict, dict]:
    """The out-of-fold P(relevant) of every hit of ``trace`` (``bench.selection.relevance``), from the cache when its
    key matches: the trace's content (ids and scores), the corpus (labels) and the fitting code. Returns
    (question_id -> array, the cache record for meta.json)."""
    from bench.selection import relevance

    key = rid.Key("relevance", {"trace_sha256": relevance.trace_digest(trace.table), "corpus_sha256": job.corpus_sha,
                                "method": relevance.METHOD, "code": rid.code_digest("selection/relevance")})
    cached = Path(cache) / "relevance" / key.digest
    probs = relevance.load_checked(cached, trace.table) if cached.exists() else None
    if probs is not None:
        return probs, {**key.describe(), "status": "hit"}
    probs = relevance.out_of_fold(trace.table, job.corpus)
    try:
        relevance.save(cached, probs, key.describe())
    except OSError as exc:
        fault(f"could not write the relevance cache {cached}: {error_line(exc)}")
    return probs, {**key.describe(), "status": "miss"}


def ranked_table(settings: Settings, traces, corpus, embedder: str) -> pd.DataFrame:
    """ranked.csv of a job: bench.metrics.ranked over its traces, with the ``ranked:`` settings."""
    from bench.metrics import ranked

    rc = settings.ranked or {}
    ks = ranked.check_ks(list(rc.get("ks", ranked.DEFAULT_KS)))
    return ranked.for_traces(traces, corpus, ks=ks, embedder=embedder, confidence=float(rc.get("confidence", 0.95)),
                             n_resamples=int(rc.get("n_resamples", 1000)), seed=int(settings.seed),
                             method=str(settings.ci_method),  # one interval rule for every table
                             memory=settings.memory.describe() if settings.memory is not None else None)  # unit and indexed roles


def write_conventions(settings: Settings, traces, corpus, embedder, out_dir: Path, strategies=()) -> Path:
    """conventions.csv of a job: LongMemEval's arithmetic at ``conventions_ks`` (bench.metrics.conventions), on the job's unit;
    rows for the embedder's ranking (the store's trace), then for each whole-haystack lexical ranking among ``strategies``
    (bench.strategies.lexical.haystack_rankers: BM25 over the memories each question may see), whose ranking is also
    written as LongMemEval JSON, ``rankings/<name>.json``, for ``recallbench score`` (the systems table)."""
    from bench.metrics import conventions
    from bench.data.units import UnitSpec
    from bench.metrics.ranked import check_ks
    from bench.replay.visibility import parse_filter
    from bench.strategies.lexical import haystack_rankers, haystack_rankings

    spec = settings.memory or UnitSpec()
    ks = check_ks(list(conventions.KS if settings.conventions_ks is None else settings.conventions_ks), "conventions.ks")
    parts = [conventions.table(conventions.pick_trace(traces), corpus, unit=spec.unit, roles=spec.roles, embedder=embedder.model_id,
                               max_length=embedder.identity.get("max_length"), ks=ks)]
    for r in haystack_rankers(strategies):
        rankings = haystack_rankings(corpus, r.rank, roles=r.roles, metadata=parse_filter(settings.metadata_filter))
        conventions.write_ranking(out_dir / conventions.RANKINGS / f"{r.name}.json", rankings)  # for `recallbench score`
        trace = conventions.ranking_trace(rankings, backend="none (ranked over the memories each question may see)")
        parts.append(conventions.table(trace, corpus, unit=spec.unit, roles=spec.roles if r.roles is None else ",".join(r.roles),
                                       embedder="none", max_length=None, ks=ks, system=r.system))
    return conventions.write(out_dir / conventions.FILE, pd.concat(parts, ignore_index=True))


def _faults(settings: Settings):
    from bench.replay.faults import from_config

    return from_config(settings.faults)


def write_degradation(settings: Settings, traces, parts, job: Job, table, out_dir: Path) -> Path:
    """degradation.csv of a job: the timeout policy and the injected faults' cost (bench.selection.degrade), per trace."""
    from bench.output import write_csv
    from bench.replay.faults import failed_ids
    from bench.replay.visibility import parse_filter
    from bench.selection import degrade

    timeouts, k = degrade.check_settings(settings.degrade)
    metadata = parse_filter(settings.metadata_filter)  # the fallback sees what the search could
    frames = [degrade.degradation_table(rows, job.corpus, cost=table.cost, roles=tuple(t.meta["roles"]) if t.meta.get("roles") else None,
                                        timeouts_ms=timeouts, fallback_k=k, failed_ids=failed_ids(t.meta), metadata=metadata)
              for t, rows in zip(traces, parts)]
    return write_csv(out_dir / degrade.FILE, pd.concat(frames, ignore_index=True))


def write_e2e(settings: Settings, traces, job: Job, table, grid, formats, out_dir: Path) -> Path | None:
    """latency_e2e.csv (per query) and latency_e2e_summary.csv of a job (bench.selection.e2e): each store-reading
    strategy at the threshold nearest ``e2e.threshold``, in the first swept format; the query embedding re-timed on a sample."""
    from bench.output import write_csv
    from bench.selection import e2e
    from bench.selection.sweep import sweep

    sample, want = e2e.check_settings(settings.e2e)
    embed_ns, http_ns = e2e.embed_times(job.embedder, [q.text for q in job.corpus.questions], sample=sample, seed=int(settings.seed))
    frames = []
    for trace in traces:
        roles = tuple(trace.meta["roles"]) if trace.meta.get("roles") else None
        for spec in (s for s in job.strategies if s.roles == roles and s.uses_store):
            t = e2e.pick_threshold(list(spec.thresholds or grid), want) if spec.thresholded else None
            record: dict = {}
            sweep(trace, job.corpus, [spec], [t] if t is not None else grid, dict(table.memory["A"]), formats=(formats[0],),
                  format_tokens=table, record=record, answer_coverage=False)
            frames.append(e2e.end_to_end(trace, job.corpus, {(spec.name, t): record[(spec.name, None if t is None else round(float(t), 10))]},
                                         embed_ns=embed_ns, http_ns=http_ns, fmt=formats[0]))
    if not frames:
        return None
    rows = pd.concat(frames, ignore_index=True)
    write_csv(out_dir / e2e.SUMMARY_FILE, e2e.summary(rows))
    return write_csv(out_dir / e2e.FILE, rows)


# --- the record ----------------------------------------------------------------------------------

def _write_inputs(out: RunDir, job: Job) -> None:
    """The dataset card, the corpus (what the report reads: never the dataset files again) and the strategies."""
    from bench.data.card import dataset_card

    out.write_card(dataset_card(job.corpus))
    out.write_corpus(job.corpus)
    out.write_strategies(redact([strategy_record(s, n) for s, n in zip(job.strategies, job.strategy_configs)]))


def _meta(job: Job, settings: Settings, embedder, metas, grid, formats, by_format, readable, est, fitted) -> dict:
    """meta.json of a job: its first trace's record, every trace's, what decided the results, and every cache's status."""
    from bench.data.card import defect_summary
    from bench.data.units import UnitSpec
    from bench.embedders.cache import CachedEmbedder

    corpus, inner = job.corpus, job.embedder
    embed_cache = {"key": embedder.dir.name, "inputs": inner.identity, "hits": embedder.hits, "misses": embedder.misses} \
        if isinstance(embedder, CachedEmbedder) else {"status": "not cached", "inputs": inner.identity}
    return {**metas[0], "traces": metas, "run_id": rid.run_id(), "tokens_encoding": settings.encoding, "thresholds": list(grid),
            "strategies": [s.name for s in job.strategies], "formats": list(formats), "format_tokens": by_format,
            "corpus_sha256": job.corpus_sha, "labels_sha256": rid.labels_digest(corpus), "turns_sha256": rid.turns_digest(corpus),
            "embedder_identity": inner.identity, "overrides": list(settings.overrides), "coverage": readable,
            "memory": (settings.memory or UnitSpec()).describe(), "embedding_cost_estimate": est,
            "defects": dict(Counter(d.kind for d in corpus.defects)), "defects_summary": defect_summary(corpus.defects),
            "embed_cache": {"hits": embedder.hits, "misses": embedder.misses} if isinstance(embedder, CachedEmbedder) else
                           {"hits": None, "misses": None},
            "caches": {"job": {**job.key.describe(), "status": "miss"}, "traces": [m.get("cache") for m in metas],
                       "embeddings": embed_cache, **({"relevance": fitted} if fitted else {})}}


def _caches_line(meta: dict) -> str:
    c = meta.get("caches") or {}
    traces = ", ".join(f"{t.get('status')} {t.get('key')}" for t in c.get("traces") or [] if t)
    e = c.get("embeddings") or {}
    emb = f"{e['hits']} of {e['hits'] + e['misses']} texts cached" if e.get("hits") is not None else e.get("status", "n/a")
    return f"caches: job {c.get('job', {}).get('status')} {c.get('job', {}).get('key')}; trace {traces or 'n/a'}; embeddings {emb}"
