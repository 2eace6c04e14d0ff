"""The run directory: the one owner of its file names, the writers the job uses and the readers everybody else uses.

A **job** directory (a single run, or ``job<N>/`` of a multirun) holds what one job measured::

    summary.csv          one row per (dataset, embedder, store, strategy, threshold, format)
    ranked.csv           ranked retrieval metrics of the traces (bench.metrics.ranked): per store, level, metric, k
    questions.parquet    one row per question and configuration (no text)
    meta.json            the job's metadata: traces, caches, corpus_sha256, embedder identity, ...
    corpus.json.gz       the loaded corpus, every field (``bench.data.snapshot``), checked against corpus_sha256
    strategies.json      each strategy: name, kind, roles, params and its plain config (``load_specs`` rebuilds it)
    dataset_card.md      the corpus's card (sizes, label defects)
    trace[_<roles>]/     the trace of each role filter (``bench.replay.trace.Trace``)
    degradation.csv      recall and tokens kept under per-query timeouts and injected store faults (bench.selection.degrade)
    latency_e2e.csv      per query: embedding, store, injected-text time (bench.selection.e2e); _summary.csv: p50/p99 per part
    config_resolved.yaml the command's resolved config, secrets redacted: report-time settings (recommend, regress)
    failed.json          instead of the results when the job failed; faults.json: faults it survived

Every CSV is written by ``bench.output.write_csv`` (text cells a spreadsheet would run as a formula get a leading
"'") and read back by the readers below (``bench.output.read_csv``: the values as they were); parquet is raw.
    cli.log              the console log

A **multirun** directory holds ``job<N>/`` directories and, once ``collect_jobs`` merged the finished
ones, the same summary.csv, questions.parquet and dataset_card.md over every job, ``jobs.json`` (every
job's metadata) and ``failed.json`` (every failed job). Either kind then gets the report: report.md,
report.html, figures, and ``analysis/`` (the analysis tables). ``regress`` adds ``latency.csv``.

Nothing here computes results; it names, writes and reads them.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.output import read_csv, redact, write_atomic, write_csv
from bench.types import Corpus

log = logging.getLogger(__name__)

SUMMARY = "summary.csv"
QUESTIONS = "questions.parquet"
META = "meta.json"
JOBS = "jobs.json"
FAILED = "failed.json"
FAULTS = "faults.json"
CARD = "dataset_card.md"
CONFIG = "config_resolved.yaml"
CORPUS = "corpus.json.gz"
STRATEGIES = "strategies.json"
LATENCY = "latency.csv"
RANKED = "ranked.csv"  # ranked retrieval metrics of the job's traces (bench.metrics.ranked)
LOG = "cli.log"  # the job's console log (named by configs/config.yaml)
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
STRATEGIES_MD = "strategies.md"
ANALYSIS = "analysis"  # folder of the analysis tables and their figures
MISSES = "attribution.parquet"  # in ANALYSIS: one row per missed gold memory
TRACE = "trace"  # trace folders: trace (every role) or trace_<role>_<role>

RESULTS = (SUMMARY, QUESTIONS, META, CORPUS, STRATEGIES)  # what a finished job holds (a cached job must too)
NOT_CACHED = (CONFIG, FAULTS)  # written per command: never part of a cached job


def _json(path: Path, data) -> Path:
    """``data`` as JSON, secrets redacted (``bench.output.redact``: every JSON file of a run goes through it)."""
    data = redact(data)
    return write_atomic(path, lambda p: p.write_text(json.dumps(data, indent=2, default=str)))


def trace_dirname(roles: Sequence[str] | None) -> str:
    return TRACE if not roles else f"{TRACE}_{'_'.join(roles)}"


def strategy_record(spec, node: Mapping) -> dict:
    """What strategies.json keeps of one strategy: what it is (kind, params, roles, flags) and its plain config."""
    return {"name": spec.name, "kind": spec.kind, "roles": list(spec.roles) if spec.roles else None, "params": spec.params,
            "thresholded": spec.thresholded, "uses_store": spec.uses_store, "threshold_on": spec.threshold_on,
            "thresholds": list(spec.thresholds) if spec.thresholds else None, "config": dict(node)}


def strategy_names(strategies: Sequence[Mapping], kind: str, *, roles: Sequence[str] | None = None, **params) -> list[str]:
    """Names of the strategies of ``kind`` with role filter ``roles`` whose parameters include ``params``
    (``strategy_names(s, "limit", k=5)``: the limit strategy with k=5, whatever the user called it)."""
    want = list(roles) if roles else None
    return [s["name"] for s in strategies
            if s.get("kind") == kind and (s.get("roles") or None) == want
            and all((s.get("params") or {}).get(k, object()) == v for k, v in params.items())]


@dataclass(frozen=True)
class RunDir:
    """A finished (or failed) single run, multirun or job directory."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    def file(self, name: str) -> Path:
        return self.path / name

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    # --- what kind of directory -------------------------------------------------------------------

    def finished(self) -> bool:
        """True when it holds results (a finished job, or a multirun whose jobs were merged)."""
        return self.has(SUMMARY)

    def all_job_dirs(self) -> list["RunDir"]:
        """Every ``job<N>/`` of a multirun in job order (finished or not); [] for a single run."""
        jobs = [p for p in self.path.glob("job*") if p.is_dir() and re.fullmatch(r"job\d+", p.name)]
        return [RunDir(p) for p in sorted(jobs, key=lambda p: int(p.name[3:]))]

    def job_dirs(self) -> list["RunDir"]:
        """The finished jobs: ``[self]`` for a single run (or a job), else the multirun's finished ``job<N>/``."""
        if self.has(JOBS) or not self.has(META):  # a multirun, merged or not
            return [j for j in self.all_job_dirs() if j.finished()]
        return [self] if self.finished() else []

    # --- readers -----------------------------------------------------------------------------------

    def summary(self) -> pd.DataFrame:
        return read_csv(self.file(SUMMARY))

    def questions(self) -> pd.DataFrame:
        return pd.read_parquet(self.file(QUESTIONS))

    def meta(self) -> dict:
        return json.loads(self.file(META).read_text())

    def jobs(self) -> list[dict]:
        """Every finished job's metadata: jobs.json of a multirun, else this job's meta.json ([] when none)."""
        if self.has(JOBS):
            return json.loads(self.file(JOBS).read_text())
        return [self.meta()] if self.has(META) else []

    def failed(self) -> list[dict]:
        """Failed jobs (a multirun: each with its ``job``; a single run: its own record); [] when none."""
        if not self.has(FAILED):
            return []
        data = json.loads(self.file(FAILED).read_text())
        return data if isinstance(data, list) else [data]

    def faults(self) -> list[str]:
        return json.loads(self.file(FAULTS).read_text()) if self.has(FAULTS) else []

    def card(self) -> str:
        return self.file(CARD).read_text() if self.has(CARD) else ""

    def ranked(self) -> pd.DataFrame | None:
        """ranked.csv (bench.metrics.ranked.TABLE_COLUMNS), None when the run has none (written before it existed)."""
        return read_csv(self.file(RANKED), dtype={"k": "Int64"}, keep_default_na=False, na_values=[""]) if self.has(RANKED) else None

    def latency(self) -> pd.DataFrame | None:
        return read_csv(self.file(LATENCY)) if self.has(LATENCY) else None

    def settings_file(self) -> Path | None:
        """The config_resolved.yaml that holds the run's report-time settings (a multirun: its first finished job's)."""
        for d in [self, *self.job_dirs()]:
            if d.has(CONFIG):
                return d.file(CONFIG)
        return None

    def settings(self) -> dict:
        """The run's resolved config as plain data (``{}`` when there is none): read with PyYAML, never Hydra."""
        import yaml

        path = self.settings_file()
        if path is None:
            return {}
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping, got {type(data).__name__}")
        return data

    def corpus(self) -> Corpus:
        """The corpus this job measured, from its snapshot, checked against meta.json's ``corpus_sha256``."""
        from bench.data import snapshot
        from bench.run import corpus_digest

        path = self.file(CORPUS)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found (the job wrote no corpus snapshot; re-run it)")
        corpus = snapshot.load(path)
        want = self.meta().get("corpus_sha256") if self.has(META) else None
        if want and corpus_digest(corpus) != want:
            raise ValueError(f"{path}: the corpus differs from the one measured (sha256 != meta.json corpus_sha256)")
        return corpus

    def digest(self, kind: str) -> str | None:
        """This job's ``labels`` or ``turns`` digest (``bench.run.labels_digest`` / ``turns_digest``): meta.json's
        ``<kind>_sha256``, else computed from its corpus snapshot, else None (unknown: an old run)."""
        from bench import run

        value = (self.meta() if self.has(META) else {}).get(f"{kind}_sha256")
        if value is None and self.has(CORPUS):
            value = {"labels": run.labels_digest, "turns": run.turns_digest}[kind](self.corpus())
        return value

    def labels(self) -> dict[str, str | None]:
        """dataset -> the labels digest its jobs scored against (``digest("labels")``). Several digests for one
        dataset within this run: they are joined with '|' (never equal to another run's); None when one is unknown."""
        found: dict[str, set] = {}
        for job in self.job_dirs():
            meta = job.meta() if job.has(META) else {}
            found.setdefault(str(meta.get("dataset", "")), set()).add(job.digest("labels"))
        return {d: (None if None in v else "|".join(sorted(v))) for d, v in found.items()}

    def strategies(self) -> list[dict]:
        """strategies.json of this job, or the union over a multirun's jobs (by name, first wins): what the job wrote,
        never rebuilt (``bench.strategies.spec.load_specs`` rebuilds the specs from these records). A job written before
        strategies.json existed: none."""
        if self.job_dirs() != [self]:
            seen: dict[str, dict] = {}
            for j in self.job_dirs():
                for s in j.strategies():
                    seen.setdefault(s["name"], s)
            return list(seen.values())
        if self.has(STRATEGIES):
            return json.loads(self.file(STRATEGIES).read_text())
        log.warning("%s not found (a run written before strategies.json existed): its strategies are unknown", self.file(STRATEGIES))
        return []

    def strategy_names(self, kind: str, *, roles: Sequence[str] | None = None, **params) -> list[str]:
        """Names of this run's strategies of ``kind`` (see :func:`strategy_names`)."""
        return strategy_names(self.strategies(), kind, roles=roles, **params)

    def trace_dirs(self) -> list[Path]:
        return sorted(p for p in self.path.glob(f"{TRACE}*") if p.is_dir() and re.fullmatch(rf"{TRACE}(_\w+)?", p.name))

    def traces(self) -> list:
        """The job's traces (one per role filter), as ``bench.replay.trace.Trace``."""
        from bench.replay.trace import Trace

        return [Trace.load(d) for d in self.trace_dirs()]

    def table(self, name: str) -> pd.DataFrame:
        """An analysis table (``analysis/<name>.csv``) written with the report."""
        return read_csv(self.path / ANALYSIS / f"{name}.csv")

    def misses(self) -> pd.DataFrame:
        return pd.read_parquet(self.path / ANALYSIS / MISSES)

    # --- writers (the job: bench.cli.sweep; the report and the tools) ------------------------------

    def trace_dir(self, roles: Sequence[str] | None) -> Path:
        return self.path / trace_dirname(roles)

    def write_results(self, rows: pd.DataFrame, summary: pd.DataFrame) -> None:
        """questions.parquet, then summary.csv (whose presence marks finished results)."""
        write_atomic(self.file(QUESTIONS), lambda p: rows.to_parquet(p, index=False))
        write_csv(self.file(SUMMARY), summary)

    def write_card(self, text: str) -> Path:
        return write_atomic(self.file(CARD), lambda p: p.write_text(text))

    def write_meta(self, meta: Mapping) -> Path:
        return _json(self.file(META), dict(meta))

    def write_corpus(self, corpus) -> Path:
        from bench.data import snapshot

        return write_atomic(self.file(CORPUS), lambda p: snapshot.dump(corpus, p))

    def write_strategies(self, records: Sequence[Mapping]) -> Path:
        return _json(self.file(STRATEGIES), list(records))

    def write_config(self, text: str) -> Path:
        return write_atomic(self.file(CONFIG), lambda p: p.write_text(text))

    def write_failed(self, record) -> Path:
        return _json(self.file(FAILED), record)

    def add_fault(self, line: str) -> Path:
        return _json(self.file(FAULTS), self.faults() + [line])

    def write_ranked(self, table: pd.DataFrame) -> Path:
        return write_csv(self.file(RANKED), table)

    def write_latency(self, latency: pd.DataFrame) -> Path:
        return write_csv(self.file(LATENCY), latency)

    def write_table(self, name: str, df: pd.DataFrame) -> Path:
        return write_csv(self.path / ANALYSIS / f"{name}.csv", df)

    def write_misses(self, misses: pd.DataFrame) -> Path:
        return write_atomic(self.path / ANALYSIS / MISSES, lambda p: misses.to_parquet(p, index=False))

    def write_text(self, name: str, text: str) -> Path:
        """report.md, report.html, strategies.md (``name`` one of the constants above)."""
        return write_atomic(self.file(name), lambda p: p.write_text(text, encoding="utf-8"))


# --- a multirun ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobInputs:
    """What replaying a finished job needs, as the job wrote it: its corpus snapshot, traces and strategies.json records."""

    job_dir: Path
    corpus: Corpus
    traces: tuple  # bench.replay.trace.Trace, one per role filter
    strategies: tuple[dict, ...]  # strategies.json records (``bench.strategies.spec.load_specs`` rebuilds the specs)
    embedder: str
    token_encoding: str
    token_counts: Path | None = None  # the job's token-count cache (bench.data.tokens.counts_file), when its config names one


def load_job(job: RunDir | Path, memo: dict | None = None) -> JobInputs:
    """Everything calibration, miss attribution and the LLM evaluation read from one finished job directory (a
    ``RunDir`` or a path): the corpus from its snapshot, its traces, its strategies.json records.

    ``memo`` (a dict the caller keeps) shares one corpus between jobs that measured the same content.
    """
    from bench.data.tokens import counts_file

    job = job if isinstance(job, RunDir) else RunDir(job)
    meta = job.meta()
    memo = {} if memo is None else memo
    key = ("corpus", meta.get("corpus_sha256") or str(job.path))
    corpus = memo[key] if key in memo else memo.setdefault(key, job.corpus())
    settings = job.settings()
    encoding = str(meta.get("tokens_encoding") or (settings.get("tokens") or {}).get("encoding"))
    cache, sha = (settings.get("paths") or {}).get("cache"), meta.get("corpus_sha256")
    return JobInputs(job.path, corpus, tuple(job.traces()), tuple(job.strategies()), str(meta["embedder"]), encoding,
                     counts_file(cache, encoding, sha) if cache and sha else None)


def collect_jobs(sweep_dir: Path) -> bool:
    """Merge the finished ``job<N>/`` of a multirun into ``sweep_dir`` (summary, questions, jobs.json, card)
    and list the failed ones in its failed.json. False when no job finished."""
    run = RunDir(sweep_dir)
    every = run.all_job_dirs()
    failed = [{**json.loads(j.file(FAILED).read_text()), "job": j.path.name} for j in every if j.has(FAILED)]
    run.write_failed(failed)
    jobs = [j for j in every if j.finished()]
    if not jobs:
        log.error("no finished jobs under %s", sweep_dir)
        return False
    summaries = [j.summary() for j in jobs]
    rows_of = [j.questions() for j in jobs]
    metas = [{**j.meta(), "job": j.path.name} for j in jobs]
    labels = _labels_of_colliding_jobs(summaries, metas)
    for i, label in labels.items():  # e.g. -m backend.ef_search=64,200
        for t in (summaries[i], rows_of[i]):
            t["backend"] = t["backend"].astype(str) + f" ({label})"
        metas[i]["backend"] = f"{metas[i]['backend']} ({label})"
    _json(run.file(JOBS), metas)
    run.write_card("\n\n".join(dict.fromkeys(j.card() for j in jobs if j.has(CARD))))
    ranked = [_relabel(j.ranked(), labels.get(i)) for i, j in enumerate(jobs) if j.has(RANKED)]
    if ranked:
        run.write_ranked(pd.concat(ranked, ignore_index=True))
    run.write_results(pd.concat(rows_of, ignore_index=True), pd.concat(summaries, ignore_index=True))
    return True


def _relabel(table: pd.DataFrame, label: str | None) -> pd.DataFrame:
    if label:
        table["backend"] = table["backend"].astype(str) + f" ({label})"
    return table


def _labels_of_colliding_jobs(summaries: list[pd.DataFrame], metas: list[dict]) -> dict[int, str]:
    """Jobs of a multirun whose rows share a configuration (same dataset, embedder, store, strategy): a
    sweep over a setting that is not part of those names. Each gets the overrides that set it apart
    (else its job name), to be appended to its store's name so no two jobs' rows merge."""
    seen: dict[tuple, list[int]] = {}
    for i, s in enumerate(summaries):
        for key in s[["dataset", "embedder", "backend", "strategy"]].drop_duplicates().itertuples(index=False):
            seen.setdefault(tuple(key), []).append(i)
    clash = sorted({i for ids in seen.values() if len(ids) > 1 for i in ids})
    if not clash:
        return {}
    own = {i: list(metas[i].get("overrides") or []) for i in clash}
    shared = set.intersection(*(set(o) for o in own.values()))
    labels = {i: " ".join(o for o in own[i] if o not in shared) or metas[i].get("job", f"job{i}") for i in clash}
    log.warning("jobs %s measure the same configuration names; their stores are labelled %s",
                ", ".join(metas[i].get("job", str(i)) for i in clash), "; ".join(f"({v})" for v in labels.values()))
    return labels
