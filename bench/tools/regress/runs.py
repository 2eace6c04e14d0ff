"""Reading what the gate compares: a run or baseline directory (``load_run`` -> ``RunData``: summary, per-question rows of
one format, meta.json, latency.csv) and a regress run's finished jobs with their resolved configs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.results.rundir import META, QUESTIONS, SUMMARY, RunDir
from bench.tools.regress.settings import QUALITY_METRICS, REPO, RegressError


@dataclass(frozen=True)
class RunData:
    """What the gate reads of a run (or a baseline) directory."""

    path: Path
    summary: pd.DataFrame
    rows: pd.DataFrame  # per-question rows, one injection format
    meta: dict
    latency: pd.DataFrame | None  # latency.csv (None when absent)

    @property
    def dataset(self) -> str:
        return str(self.rows["dataset"].iloc[0])

    @property
    def embedder(self) -> str:
        return str(self.rows["embedder"].iloc[0])


def load_run(path: Path) -> RunData:
    """Read summary.csv, questions.parquet, meta.json and latency.csv (optional) of a run or baseline."""
    from bench.analysis.recommend import one_format

    run = RunDir(path)
    path = run.path
    for name in (SUMMARY, QUESTIONS):
        if not run.has(name):
            raise RegressError(f"{run.file(name)}: not found (is {path} a finished regress run or a baseline?)")
    rows = one_format(run.questions())
    need = {"dataset", "embedder", "backend", "strategy", "threshold", "question_id", "conversation_id", "adversarial",
            "tokens_injected", *QUALITY_METRICS}
    missing = sorted(need - set(rows.columns))
    if missing:
        raise RegressError(f"{run.file(QUESTIONS)}: missing column(s) {missing}")
    if rows.empty:
        raise RegressError(f"{run.file(QUESTIONS)}: no rows")
    for col in ("dataset", "embedder"):
        if rows[col].nunique() != 1:
            raise RegressError(f"{run.file(QUESTIONS)}: field {col!r} must have one value, has {sorted(rows[col].unique())}")
    summary = run.summary()
    if "format" in summary:
        summary = summary[summary["format"] == rows["format"].iloc[0]] if "format" in rows else summary
    try:
        meta = run.meta() if run.has(META) else {}
    except ValueError as e:
        raise RegressError(f"{run.file(META)}: not valid JSON ({e})") from None
    return RunData(path, summary, rows, meta, run.latency())


def show(path: Path) -> str:
    """A path as the user should read it: relative to the repo when inside it."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def question_set_id(rows: pd.DataFrame) -> str:
    ids = sorted(set(rows["question_id"].astype(str)))
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def job_dirs(run_dir: Path) -> list[Path]:
    return [j.path for j in RunDir(run_dir).all_job_dirs() if j.finished()]


def load_job_config(job: Path) -> dict:
    """A finished job's resolved config as plain data (``RunDir.settings``)."""
    run = RunDir(job)
    if run.settings_file() is None:
        raise RegressError(f"{job}: no resolved config (a finished job writes it)")
    return run.settings()
