"""Command line: the only module that knows Hydra. ``python -m bench [overrides]`` / ``-m`` multirun.

One job = one (dataset, embedder, backend) trace, swept over every selected strategy and threshold.
A job writes raw results into its own directory; a single run then writes its report there, and a
multirun's report is written by ``CollectRuns`` over every job. Either way the finished run becomes
``reports/latest``. What decides a result, and so every cache key, is owned by ``bench.run``.

Everything the process prints or logs is scrubbed of secrets (``install_scrubbing``); a fault
(an unwritable cache or run directory, a full disk, Ctrl-C) ends with one line naming what failed
and what finished, and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from bench import run
from bench.backends.layout import build_store
from bench.cli.config import as_bool, build, check_before_work, explain_override_error, redacted_yaml, strategy_nodes, to_plain
from bench.output import (
    check_env_name,
    error_line,
    install_scrubbing,
    redact,
    redact_override,
    register_secret_env,
    write_atomic,
)
from bench.resources import configs_dir
from bench.rundir import (
    ANALYSIS,
    CARD,
    FAILED,
    FAULTS,
    NOT_CACHED,
    REPORT_MD,
    RESULTS,
    SUMMARY,
    RunDir,
    collect_jobs,
    strategy_record,
)

log = logging.getLogger("bench")

EXIT_INTERRUPTED = 130
_STATE = {"interrupted": False, "exit": 0}  # this process's run: set by jobs and the multirun callback, read by main()


# --- settings -----------------------------------------------------------------------------------

def _number(name: str, value, *, integer: bool = False, lo: float | None = None, hi: float | None = None) -> float:
    try:
        x = float(value)
        if integer and (isinstance(value, bool) or x != int(x)):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"config {name}: expected {'an integer' if integer else 'a number'}, got {value!r}") from None
    if x != x or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise ValueError(f"config {name}: {value!r} is outside " + (f"[{lo:g}, {hi:g}]" if hi is not None else f">= {lo:g}"))
    return x


def _env_settings(node, where: str = ""):
    """(dotted name, value) of every ``*_env`` setting in a plain config tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            name = f"{where}{k}"
            if str(k).endswith("_env") and not isinstance(v, (dict, list)):
                yield name, v
            yield from _env_settings(v, name + ".")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _env_settings(v, f"{where}[{i}].")


def check_settings(cfg: DictConfig) -> None:
    """Reject bad top-level settings with a one-line message naming the key (never echoing a secret)."""
    for name, value in _env_settings(OmegaConf.to_container(cfg, resolve=False)):
        check_env_name(name, value)
        register_secret_env(value)
    if cfg.depth is not None:
        _number("depth", cfg.depth, integer=True, lo=1)
    _number("warmup", cfg.warmup, integer=True, lo=0)
    for k in ("start", "stop", "step"):
        _number(f"thresholds.{k}", cfg.thresholds[k], lo=0, hi=1)
    if cfg.get("ranked"):
        from bench.metrics.ranked import check_ks

        check_ks(list(cfg.ranked.get("ks") or []))
    if cfg.get("conventions"):
        from bench.metrics.ranked import check_ks

        check_ks(list(cfg.conventions.get("ks") or []), "conventions.ks")
    _unit_spec(cfg)
    check_before_work(cfg)  # switches, plugin keys, strategies, the report's settings (bench.cli.config)


# Settings that say where a job writes, how it shows progress, or how it is reported: not part of its results.
# ``memory`` (the units) decides the corpus, whose digest is in every key.
JOB_KEY_IGNORES = ("hydra", "paths", "progress", "publish_latest", "defer_report", "resume", "trace_cache", "recommend", "regress", "strict",
                   "memory")


def job_settings(cfg: DictConfig) -> dict:
    """The resolved config that decides a job's results (paths, progress and report-time settings removed)."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    out = {k: v for k, v in plain.items() if k not in JOB_KEY_IGNORES}
    for node in ("embedder", "backend"):
        if isinstance(out.get(node), dict):
            out[node] = {k: v for k, v in out[node].items() if k not in ("progress", "price_per_mtok", *run.STORE_PLACE_FIELDS)}
    if out.get("run_file"):  # a run read from a file: its content decides the results, not its path; the store is not used
        out["run_file"] = {"sha256": run.sha256_file(_run_file(cfg))}
        out.pop("backend", None)
    return out


def _run_file(cfg: DictConfig) -> Path:
    path = Path(str(cfg.run_file)).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"run_file: {path} not found (a TREC run: qid Q0 docid rank score tag)")
    return path


# --- one job ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    """A job's inputs, loaded once: the corpus, the embedder and the key of its results."""

    corpus: object
    corpus_sha: str
    embedder: object  # the inner embedder (not yet wrapped in the cache)
    key: run.Key


def prepare(cfg: DictConfig) -> Job:
    """Check the settings, load the corpus (its label defects summarised on the console) and the embedder."""
    from bench.data.card import defect_summary
    from bench.data.units import apply_units

    check_settings(cfg)
    corpus = apply_units(build(cfg.dataset), _unit_spec(cfg))
    if corpus.defects:
        log.warning("%s: %s (see %s)", corpus.name, defect_summary(corpus.defects), CARD)
        if as_bool("strict", cfg.get("strict", False)):
            raise ValueError(f"strict=true: {corpus.name} ({corpus.source}) has {defect_summary(corpus.defects)}")
    from bench.embedders.auto import resolve

    embedder = resolve(build(cfg.embedder), [t.text for t in corpus.turns()] + [q.text for q in corpus.questions],
                       cache_dir=Path(cfg.paths.cache) / "coverage")
    sha = run.corpus_digest(corpus)
    return Job(corpus, sha, embedder, run.job_key(settings=job_settings(cfg), corpus_sha=sha, embedder=embedder.identity))


def get_trace(cfg: DictConfig, job: Job, embedder, roles: tuple[str, ...] | None):
    """The trace for (corpus, embedder, store, depth, roles): from the cache when valid, else measured once."""
    from bench.trace import Trace, build_trace, search_depth

    if cfg.get("run_file"):  # an external retriever's run (bench.trec): no store, no trace cache (reading it is cheap)
        from bench.trace import embed_corpus
        from bench.trec import trace_from_run

        tv, qv, _ = embed_corpus(job.corpus, embedder, progress=bool(cfg.progress))
        return trace_from_run(_run_file(cfg), job.corpus, roles=roles, vectors=(tv, qv), embedder=embedder.model_id)
    backend_cfg = to_plain(cfg.backend)
    depth = search_depth(cfg.depth, job.corpus)
    key = run.trace_key(corpus_sha=job.corpus_sha, embedder=job.embedder.identity, backend=backend_cfg, depth=depth,
                        roles=roles, warmup=int(cfg.warmup))
    cached = Path(cfg.paths.cache) / "traces" / key.digest
    status = "miss"
    if cfg.trace_cache and cached.exists():
        trace, problem = Trace.load_checked(cached, job.corpus)
        if trace is not None:
            log.info("trace cache hit %s (measured %s): no store query", key.digest, trace.meta.get("measured_at"))
            trace.meta["reused_from"] = str(cached)
            trace.meta["cache"] = {**key.describe(), "status": "hit"}
            return trace
        log.warning("trace cache %s not reused: %s; measuring again", cached, problem)
        status = f"invalid ({problem})"
    place = {"collection": f"rb_{key.digest[:12]}_{run.process_token()}"}
    if backend_cfg.get("path"):  # an embedded store: a directory of this process's own
        run.remove_stale_store_dirs(Path(backend_cfg["path"]).parent)
        place["path"] = str(run.private_store_dir(backend_cfg["path"]))
    backend = build_store(backend_cfg, **place)  # build_trace opens it and drops and closes it (bench.backends.session)
    trace = build_trace(job.corpus, embedder, backend, depth=depth, roles=roles, warmup=int(cfg.warmup),
                        progress=bool(cfg.progress))
    trace.meta.update(trace_key=key.digest, dataset_source=job.corpus.source, cache={**key.describe(), "status": status})
    try:
        trace.save(cached)
    except OSError as exc:
        _warn_fault(f"could not write the trace cache {cached}: {error_line(exc)}")
    return trace


def get_calibrated(cfg: DictConfig, job: Job, trace) -> tuple[dict, dict]:
    """The out-of-fold P(relevant) of every hit of ``trace`` (``bench.relevance``), from the cache when its
    key matches: the trace's content (ids and scores), the corpus (labels) and the fitting code. Returns
    (question_id -> array, the cache record for meta.json)."""
    from bench import relevance

    key = run.Key("relevance", {"trace_sha256": relevance.trace_digest(trace.table), "corpus_sha256": job.corpus_sha,
                                "method": relevance.METHOD, "code": run.code_digest("relevance")})
    cached = Path(cfg.paths.cache) / "relevance" / key.digest
    probs = relevance.load_checked(cached, trace.table) if cached.exists() else None
    if probs is not None:
        return probs, {**key.describe(), "status": "hit"}
    probs = relevance.out_of_fold(trace.table, job.corpus)
    try:
        relevance.save(cached, probs, key.describe())
    except OSError as exc:
        _warn_fault(f"could not write the relevance cache {cached}: {error_line(exc)}")
    return probs, {**key.describe(), "status": "miss"}


def run_job(cfg: DictConfig, out_dir: Path, job: Job | None = None) -> pd.DataFrame:
    """Run one job into ``out_dir``; returns its summary table."""
    from collections import Counter

    from bench import formats as F
    from bench import tokens
    from bench.data.card import dataset_card, defect_summary
    from bench.embedders import coverage
    from bench.embedders.cache import CachedEmbedder
    from bench.strategies.spec import load_spec
    from bench.sweep import format_tokens_table, summarise, sweep, threshold_grid

    job = job or prepare(cfg)
    corpus, inner = job.corpus, job.embedder
    # an embedder that computes faster than the cache reads (synthetic) is not cached: at 1M texts the cache would cost GBs
    embedder = CachedEmbedder(inner, Path(cfg.paths.cache) / "embeddings") if inner.capabilities.cacheable else inner
    nodes = strategy_nodes(cfg.strategy)
    strategies = [load_spec(n) for n in nodes]
    dupes = sorted(n for n, c in Counter(s.name for s in strategies).items() if c > 1)
    if dupes:
        raise ValueError(f"strategy names must be unique within a run: {', '.join(dupes)} used twice (configs/strategy/*.yaml 'name')")
    grid = threshold_grid(cfg.thresholds.start, cfg.thresholds.stop, cfg.thresholds.step)
    formats = F.check_formats(cfg.get("formats") or ["A"])  # injection formats swept (rows repeat per format)
    import tiktoken

    count_many, save_counts = tokens.cached_counter(Path(cfg.paths.cache) / "tokens" /
                                                    f"{cfg.tokens.encoding}-tiktoken{tiktoken.__version__}-{job.corpus_sha[:16]}.json",
                                                    cfg.tokens.encoding)
    table = F.token_table(corpus.turns(), count_many, F.FORMATS)
    try:
        save_counts()
    except OSError as exc:
        _warn_fault(f"could not write the token-count cache: {error_line(exc)}")
    token_counts = dict(table.memory["A"])  # "role: message" lines

    readable = coverage.measure(inner, [t.text for t in corpus.turns()] + [q.text for q in corpus.questions],
                                cache_dir=Path(cfg.paths.cache) / "coverage")  # warned by finish_run
    est = None
    if inner.capabilities.metered:  # a paid API: what embedding the uncached texts will cost, before it starts
        from bench.embedders.cost import corpus_estimate, estimate_line

        est = corpus_estimate(embedder, inner.capabilities.price_per_mtok, [t.text for t in corpus.turns()], [q.text for q in corpus.questions])
        log.info("%s: %s", inner.model_id, estimate_line(est))
    out_dir.mkdir(parents=True, exist_ok=True)
    out = RunDir(out_dir)
    parts, metas, by_format, fitted, traces = [], [], [], [], []
    for roles in dict.fromkeys(s.roles for s in strategies):
        trace = get_trace(cfg, job, embedder, roles)
        if trace.meta.get("reused_from"):  # from the trace cache, unchanged: copy its file
            trace.save_copy(Path(trace.meta["reused_from"]), out.trace_dir(roles))
        else:
            trace.save(out.trace_dir(roles))
        traces.append(trace)
        specs = [s for s in strategies if s.roles == roles]
        probs = None
        if any(s.calibrated for s in specs):  # derived from the trace and the labels, before the sweep
            probs, record = get_calibrated(cfg, job, trace)
            fitted.append(record)
        shared: dict = {}  # the two sweeps of this trace build its per-question arrays once
        parts.append(sweep(trace, corpus, specs, grid, token_counts, embedder=embedder.model_id, formats=formats, format_tokens=table,
                           calibrated=probs, shared=shared))
        by_format += format_tokens_table(trace, corpus, specs, token_counts, table, embedder=embedder.model_id, shared=shared)
        metas.append(trace.meta)
    rows = pd.concat(parts, ignore_index=True)
    summary = summarise(rows)
    summary["for_results"] = inner.capabilities.for_results

    embed_cache = {"key": embedder.dir.name, "inputs": inner.identity, "hits": embedder.hits, "misses": embedder.misses} \
        if isinstance(embedder, CachedEmbedder) else {"status": "not cached", "inputs": inner.identity}
    out.write_card(dataset_card(corpus))
    out.write_corpus(corpus)  # what the report reads: never the dataset files again
    out.write_strategies(redact([strategy_record(s, n) for s, n in zip(strategies, nodes)]))
    meta = {**metas[0], "traces": metas, "run_id": run.run_id(), "tokens_encoding": cfg.tokens.encoding, "thresholds": list(grid),
            "strategies": [s.name for s in strategies], "formats": list(formats), "format_tokens": by_format,
            "corpus_sha256": job.corpus_sha, "labels_sha256": run.labels_digest(corpus), "turns_sha256": run.turns_digest(corpus), "embedder_identity": inner.identity,
            "overrides": _overrides(), "coverage": readable, "memory": _unit_spec(cfg).describe(), "embedding_cost_estimate": est,
            "defects": dict(Counter(d.kind for d in corpus.defects)), "defects_summary": defect_summary(corpus.defects),
            "embed_cache": {"hits": embedder.hits, "misses": embedder.misses} if isinstance(embedder, CachedEmbedder) else
                           {"hits": None, "misses": None},
            "caches": {"job": {**job.key.describe(), "status": "miss"}, "traces": [m.get("cache") for m in metas],
                       "embeddings": embed_cache, **({"relevance": fitted} if fitted else {})}}
    out.write_meta(redact(meta))
    out.write_ranked(ranked_table(cfg, traces, corpus, embedder.model_id))
    write_conventions(cfg, traces, corpus, inner, out_dir)
    out.write_results(rows, summary)  # summary.csv last: a job directory with it is complete
    return summary


def ranked_table(cfg: DictConfig, traces, corpus, embedder: str) -> pd.DataFrame:
    """ranked.csv of a job: bench.ranked over its traces, with the ``ranked:`` settings."""
    from bench.metrics import ranked

    rc = cfg.get("ranked") or {}
    ks = ranked.check_ks(list(rc.get("ks", ranked.DEFAULT_KS)))
    return ranked.for_traces(traces, corpus, ks=ks, embedder=embedder, confidence=float(rc.get("confidence", 0.95)),
                             n_resamples=int(rc.get("n_resamples", 1000)), seed=int(cfg.get("seed", 0)),
                             method=str((cfg.get("recommend") or {}).get("ci_method", "t")))  # one interval rule for every table


def _unit_spec(cfg: DictConfig):
    from bench.data.units import check_spec

    return check_spec(to_plain(cfg.memory) if cfg.get("memory") is not None else None)


def write_conventions(cfg: DictConfig, traces, corpus, embedder, out_dir: Path) -> Path:
    """conventions.csv of a job: LongMemEval's arithmetic at ``conventions.ks`` (bench.conventions), on the job's unit."""
    from bench.metrics import conventions
    from bench.metrics.ranked import check_ks

    spec = _unit_spec(cfg)
    ks = check_ks(list((cfg.get("conventions") or {}).get("ks", conventions.KS)), "conventions.ks")
    df = conventions.table(conventions.pick_trace(traces), corpus, unit=spec.unit, roles=spec.roles, embedder=embedder.model_id,
                           max_length=embedder.identity.get("max_length"), ks=ks)
    return conventions.write(out_dir / conventions.FILE, df)


def _warn_fault(line: str) -> None:
    """A fault that did not stop the job (a cache that could not be written): logged, and the run exits non-zero."""
    log.error(line)
    _STATE["exit"] = _STATE["exit"] or 1
    try:
        RunDir(Path(HydraConfig.get().runtime.output_dir)).add_fault(line)
    except Exception:  # noqa: BLE001  (the run directory itself may be the fault)
        pass


def _caches_line(meta: dict) -> str:
    c = meta.get("caches") or {}
    traces = ", ".join(f"{t.get('status')} {t.get('key')}" for t in c.get("traces") or [] if t)
    e = c.get("embeddings") or {}
    emb = f"{e['hits']} of {e['hits'] + e['misses']} texts cached" if e.get("hits") is not None else e.get("status", "n/a")
    return f"caches: job {c.get('job', {}).get('status')} {c.get('job', {}).get('key')}; trace {traces or 'n/a'}; embeddings {emb}"


def run_or_resume(cfg: DictConfig, out_dir: Path) -> bool:
    """Run a job, or copy its results when an identical job finished before. False when it failed.

    A failure is recorded in ``out_dir/failed.json`` (type and message, no traceback) so that a
    multirun's other jobs finish and the report lists it; finished jobs are kept under
    ``reports/cache/jobs/<key>`` (with a manifest of their files' sha256) so a re-run skips them.
    The current command's config is always written (``config_resolved.yaml``): report-time
    settings come from the command, never from the cached job.
    """
    key = None
    out = RunDir(out_dir)
    try:
        job = prepare(cfg)
        key = job.key
        done = Path(cfg.paths.cache) / "jobs" / key.digest
        problem = run.check_job(done, key, required=RESULTS) if done.exists() else "not cached"
        if cfg.get("resume", True) and not problem:
            run.restore_job(done, out_dir)
            meta = out.meta()
            meta.setdefault("caches", {})["job"] = {**key.describe(), "status": "hit", "from": str(done)}
            meta["run_id"] = run.run_id()  # this run; its traces' measured_in still names the run that timed the store
            meta["overrides"] = _overrides()
            out.write_meta(meta)
            out.write_config(redacted_yaml(cfg))
            log.info("job %s finished before: results copied from %s (resume=false to re-run)", key.digest, done)
            return True  # a cached job is not cached again
        if done.exists() and problem:
            log.warning("cached job %s not reused: %s; running it again", done, problem)
        run_job(cfg, out_dir, job)
        out.write_config(redacted_yaml(cfg))
        log.info(_caches_line(out.meta()))
    except KeyboardInterrupt:
        _STATE["interrupted"] = True
        _record_failure(cfg, out_dir, key, "interrupted (Ctrl-C) before the job finished")
        return False
    except Exception as exc:  # recorded, reported, never a traceback for the user
        reason = error_line(exc)
        log.error("job failed: %s", reason)
        log.debug("job failure details", exc_info=True)
        _record_failure(cfg, out_dir, key, reason)
        return False
    try:
        run.save_job(out_dir, Path(cfg.paths.cache) / "jobs", key, exclude=NOT_CACHED)
    except OSError as exc:
        _warn_fault(f"the job finished but could not be cached in {Path(cfg.paths.cache) / 'jobs'}: {error_line(exc)}")
    return True


def _overrides() -> list[str]:
    """This job's command-line overrides, secrets redacted (empty outside a Hydra job)."""
    try:
        return [redact_override(o) for o in HydraConfig.get().overrides.task]
    except ValueError:  # HydraConfig not set (an in-process call)
        return []


def _record_failure(cfg: DictConfig, out_dir: Path, key: run.Key | None, reason: str) -> None:
    try:
        overrides = _overrides()
        out_dir.mkdir(parents=True, exist_ok=True)
        RunDir(out_dir).write_failed({"job_key": key.digest if key else None, "reason": reason,
                                      "backend": cfg.backend.get("_target_"), "overrides": overrides})
    except Exception as exc:  # noqa: BLE001  (an unwritable run directory: the console line is all we can leave)
        log.error("could not record the failure in %s: %s", out_dir, error_line(exc))


def finish_run(run_dir: Path, latest: Path | None, *, defer: bool = False) -> None:
    """The run's report (``defer``: the short one, ``bench.report.markdown.write_deferred_report``), ``latest`` updated,
    the verdict and the corpus's label defects on the console."""
    from bench.analysis.tables import write_tables
    from bench.report.markdown import write_deferred_report, write_report

    report = write_deferred_report(run_dir) if defer else write_report(run_dir, write_tables(run_dir))
    if latest is not None:
        run.publish_latest(run_dir, latest)
    if defer:
        log.info("report deferred (defer_report=true): recallbench report %s writes the full one", run_dir)
    for line in verdict_lines(RunDir(run_dir)):
        log.info("%s", line)
    for m in {m.get("dataset"): m for m in RunDir(run_dir).jobs()}.values():  # one line per dataset: its label defects by kind
        if m.get("defects"):
            log.warning("%s: %s (listed in the report's dataset card)", m.get("dataset"), m.get("defects_summary"))
        else:
            log.info("%s: no label defects", m.get("dataset"))
    from bench.embedders.coverage import warning_line

    for (dataset, _), m in {(m.get("dataset"), m.get("embedder")): m for m in RunDir(run_dir).jobs()}.items():
        line = warning_line(m.get("coverage") or {}, dataset)  # one line per (dataset, embedder) a model cannot read
        if line:
            log.warning(line)
    log.info("report: %s%s", report, f" (latest -> {run_dir})" if latest else "")


def plain(text) -> str:
    """Markdown of the first screen as console text: no code-span backticks, no escaping backslashes."""
    return re.sub(r"\\(.)", r"\1", str(text).replace("`", ""))


def plain_table(header, rows) -> list[str]:
    """Rows of cells as aligned plain text (two spaces between columns)."""
    cells = [list(header), *(list(r) for r in rows)]
    width = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in cells]


def verdict_lines(run: RunDir) -> list[str]:
    """The first screen per dataset (``bench.analysis.verdict.first_screen``): the verdict, the "what to ship" table,
    what its intervals are about, and why (or how sure)."""
    if not (run.path / ANALYSIS / "verdict.csv").is_file():
        return []
    from bench.analysis.tables import load_settings
    from bench.analysis.verdict import first_screen

    verdicts, points, cfg = run.table("verdict"), run.table("recommendation"), load_settings(run)
    shortlist = run.table("shortlist") if (run.path / ANALYSIS / "shortlist.csv").is_file() else None
    out = []
    for _, v in verdicts.iterrows():
        screen = first_screen(v.to_dict(), shortlist, points, cfg)
        out.append(f"{v['dataset']}: {plain(screen.headline)}")
        if screen.rows:
            out += ["  " + line for line in plain_table(screen.header, [[plain(c) for c in r] for r in screen.rows])]
            out.append(f"  {plain(screen.about)}")
        best = points[(points["dataset"] == v["dataset"]) & points["best"]]
        if v["kind"] == "too_little_data":
            out.append(f"  why: {plain(v['reasons'])}")
        elif v["kind"] == "use" and len(best):
            b = best.iloc[0]
            stable = (f"the threshold is chosen in {b['threshold_share']:.0%} of bootstrap resamples; "
                      if pd.notna(b["threshold_share"]) else "")
            out.append(f"  how sure: {stable}the runner-up is significantly worse (paired t test over {b['n_conversations']} "
                       "conversations, Holm-corrected) or there is none")
    return out


def _finish(run_dir: Path, cfg) -> None:
    """The report of what finished, ``reports/latest`` updated; faults become one line and the exit code."""
    try:
        publish = as_bool("publish_latest", cfg.publish_latest) and not _STATE["interrupted"]  # a run cut short is not the latest
        finish_run(run_dir, Path(cfg.paths.reports) / "latest" if publish else None, defer=as_bool("defer_report", cfg.get("defer_report", False)))
    except KeyboardInterrupt:
        _STATE["interrupted"] = True
        log.error("interrupted (Ctrl-C) while writing the report; the results are in %s (make report RUN=%s rebuilds it)", run_dir, run_dir)
    except Exception as exc:
        log.error("report failed: %s; the results are in %s", error_line(exc), run_dir)
        _STATE["exit"] = _STATE["exit"] or 1


MULTIRUN_YAML = "multirun.yaml"  # Hydra's copy of the sweep's config and raw overrides, written before the first job


def redact_multirun_yaml(sweep_dir: Path) -> None:
    """Rewrite Hydra's ``multirun.yaml`` with secrets redacted (``bench.output.redact``; its override lists by
    ``redact_override``). Hydra writes it raw before the first job: every job start and the multirun's end redo this."""
    path = Path(sweep_dir) / MULTIRUN_YAML
    try:
        if not path.is_file():
            return
        text = path.read_text()
        clean = OmegaConf.to_yaml(OmegaConf.create(redact(OmegaConf.to_container(OmegaConf.load(path), resolve=False))))
        if clean != text:
            write_atomic(path, lambda p: p.write_text(clean))
    except Exception as exc:  # noqa: BLE001  (unreadable or unwritable: it must not stay as it is)
        log.error("could not redact %s (%s); deleting it", path, error_line(exc))
        path.unlink(missing_ok=True)


class CollectRuns(Callback):
    """After a multirun: merge every job's results into the sweep directory and write one report."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        _STATE["sweep_dir"] = str(config.hydra.sweep.dir)  # main() redacts its multirun.yaml whatever happens next

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        redact_multirun_yaml(sweep_dir)
        try:
            finished = collect_jobs(sweep_dir)
        except Exception as exc:
            log.error("could not merge the jobs of %s: %s", sweep_dir, error_line(exc))
            _STATE["exit"] = _STATE["exit"] or 1
            return
        jobs = RunDir(sweep_dir).all_job_dirs()
        if any(j.has(FAULTS) for j in jobs):
            _STATE["exit"] = _STATE["exit"] or 1
        if any("interrupted" in f.get("reason", "") for j in jobs if j.has(FAILED) for f in j.failed()):
            _STATE["interrupted"] = True
        if finished:
            _finish(sweep_dir, config)
        else:
            _STATE["exit"] = _STATE["exit"] or 1
        if _STATE["interrupted"]:
            n = sum(1 for j in jobs if j.has(SUMMARY))
            log.error("interrupted (Ctrl-C): %d job(s) finished%s; reports/latest is unchanged", n,
                      f"; their report: {sweep_dir / REPORT_MD}" if finished else "")


# --- the process --------------------------------------------------------------------------------

def like_for_like_layout(args: list[str]) -> dict[str, str] | None:
    """A multirun that sweeps stores (``swept_stores``) whose configs default to different layouts
    (``configs/backend/*.yaml``: the embedded stores one collection per conversation, servers and Pinecone one shared
    collection) and gives no ``backend.layout``: {store: its default layout}, so ``main`` can run them all in ``shared``
    (their latency then compares like for like). None otherwise (not a multirun, one store, one layout, a layout given,
    or overrides Hydra will reject itself)."""
    from bench.backends.catalog import backend_config
    from bench.backends.layout import SHARED

    stores = swept_stores(args)
    if not stores or any(a.split("=", 1)[0].lstrip("+~") == "backend.layout" for a in args if "=" in a):
        return None
    try:
        layouts = {n: str(backend_config(n).get("layout", SHARED)) for n in stores}
    except Exception:  # noqa: BLE001  (an unknown store: Hydra says what is wrong with it)
        return None
    return layouts if len(set(layouts.values())) > 1 else None


FRESH = ("trace_cache", "resume")  # off in a comparison of stores unless given: every store's latency timed in this run


def swept_stores(args: list[str]) -> list[str]:
    """The stores a multirun sweeps with ``backend=a,b`` (``choice``/``glob`` too); [] when not a multirun, one store
    is named, or the overrides are ones Hydra will reject itself."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from bench.resources import plugin_names

    if not {"-m", "--multirun"} & set(args):
        return []
    try:
        for o in OverridesParser.create().parse_overrides([a for a in args if "=" in a and not a.startswith("-")]):
            if o.key_or_group == "backend" and o.is_sweep_override():
                v = o.value()
                names = v.filter(plugin_names("backend")) if hasattr(v, "filter") else list(o.sweep_string_iterator())
                return list(dict.fromkeys(names)) if len(set(names)) > 1 else []
    except Exception:  # noqa: BLE001  (a bad override: Hydra says what is wrong with it)
        return []
    return []


def like_for_like(args: list[str]) -> tuple[list[str], list[str]]:
    """(overrides to add, one note line each) so the stores a multirun compares run like for like: one layout
    (``like_for_like_layout``) and latency timed in this run (``trace_cache=false resume=false`` unless either is given:
    a cached trace or job carries the latency of the run that measured it). The depth is the run's ``depth`` for every
    store; the report names any store whose largest k cut it (``bench.report.latency``)."""
    stores = swept_stores(args)
    if not stores:
        return [], []
    extra, notes = [], []
    mixed = like_for_like_layout(args)
    if mixed:
        extra.append("backend.layout=shared")
        notes.append("the stores swept default to different layouts (" + ", ".join(f"{n} {lay}" for n, lay in mixed.items())
                     + "): all run with backend.layout=shared so they compare like for like (give backend.layout=... to choose)")
    given = {a.split("=", 1)[0].lstrip("+~") for a in args if "=" in a}
    if not given & set(FRESH):
        extra += [f"{k}=false" for k in FRESH]
        notes.append(f"comparing stores ({', '.join(stores)}): every store's latency is timed in this run "
                     "(trace_cache=false resume=false; give trace_cache=true resume=true to reuse cached results)")
    return extra, notes


def main() -> int:
    import os

    import hydra

    verbose = any(a in ("-v", "--verbose") for a in sys.argv[1:])  # ours, not Hydra's: the libraries' INFO lines too
    sys.argv = [a for a in sys.argv if a not in ("-v", "--verbose")]
    install_scrubbing(sys.argv[1:])
    run.new_run_id()
    extra, notes = like_for_like(sys.argv[1:])  # one layout, fresh latency: the stores swept compare like for like
    sys.argv += extra
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    debug = os.environ.get("HYDRA_FULL_ERROR") == "1"  # the user asked for tracebacks
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises its own start-up errors to us instead of printing a traceback
    _STATE.update(interrupted=False, exit=0, sweep_dir=None)

    @hydra.main(version_base="1.3", config_path=str(configs_dir()), config_name="config")
    def _app(cfg: DictConfig) -> None:
        from bench.cli.common import quiet_third_party

        quiet_third_party(verbose)  # after Hydra's logging setup, which resets every logger's level
        hc = HydraConfig.get()
        out_dir = Path(hc.runtime.output_dir)
        if _STATE["interrupted"]:  # a multirun after Ctrl-C: the remaining jobs are not started
            _record_failure(cfg, out_dir, None, "not started: the run was interrupted (Ctrl-C)")
            return
        if hc.mode == RunMode.MULTIRUN:
            redact_multirun_yaml(Path(hc.sweep.dir))
        ok = run_or_resume(cfg, out_dir)
        if hc.mode == RunMode.MULTIRUN:
            return
        if _STATE["interrupted"]:
            log.error("interrupted (Ctrl-C): the job did not finish; nothing was published (earlier results are untouched)")
            return
        if not ok:
            _STATE["exit"] = 1
            return
        _finish(out_dir, cfg)

    try:
        try:
            _app()
        finally:
            if _STATE.get("sweep_dir"):  # a multirun that stopped before its first job (a bad override) too
                redact_multirun_yaml(Path(_STATE.pop("sweep_dir")))
    except KeyboardInterrupt:
        log.error("interrupted (Ctrl-C)")
        _STATE["interrupted"] = True
    except SystemExit as exc:
        if exc.code not in (0, None):
            return int(exc.code) if isinstance(exc.code, int) else 1
    except Exception as exc:  # a bad override, or Hydra's own start-up (run directory, logging) on a bad disk
        if debug:
            raise
        print(f"error: {explain_override_error(exc, sys.argv[1:]) or error_line(exc)}", file=sys.stderr)
        return 1
    if _STATE["interrupted"]:
        return EXIT_INTERRUPTED
    return _STATE["exit"]


if __name__ == "__main__":
    sys.exit(main())
