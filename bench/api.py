"""The Python API: run a benchmark or read a finished one from a notebook or a script.

```python
from bench.api import load_run, run

r = run(["embedder=hashing", "backend=exact"])  # one job, in this process -> reports/runs/<time>_<id>/
r.summary                                       # one row per (dataset, embedder, store, strategy, threshold)
r.recommendation                                # the report's recommendation table
load_run("reports/latest").questions            # any finished run, also one written by `recallbench sweep`
```

``run(overrides)`` takes the same overrides as ``recallbench sweep`` (one job: no ``-m``). Paths are
anchored at the current directory as on the command line (``reports/`` beside the notebook), or
set ``paths.reports=...``. Hydra stays in ``bench.cli``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

__all__ = ["Run", "load_run", "run"]


@dataclass(frozen=True, eq=False)
class Run:
    """A finished run directory, read once.

    ``summary``: summary.csv (one row per dataset, embedder, store, strategy, threshold, format);
    ``questions``: questions.parquet (one row per question and configuration); ``jobs``: each job's
    meta.json (one for a single run, every finished job of a multirun); ``failed``: the failed jobs'
    records; ``report``: report.md (None when no report was written); ``recommendation``: the
    report's recommendation table (``analysis/recommendation.csv``; None without a report).
    """

    path: Path
    summary: pd.DataFrame = field(repr=False)
    questions: pd.DataFrame = field(repr=False)
    jobs: tuple[dict, ...] = field(repr=False)
    failed: tuple[dict, ...] = field(repr=False)
    report: Path | None
    recommendation: pd.DataFrame | None = field(repr=False)

    @property
    def meta(self) -> dict:
        """The metadata (meta.json) of a single-job run; a multirun has one per job in ``jobs``."""
        if len(self.jobs) != 1:
            raise ValueError(f"{self.path} holds {len(self.jobs)} jobs: read Run.jobs")
        return self.jobs[0]


def run(overrides: Sequence[str] | None = None) -> Run:
    """Run one job of ``recallbench sweep <overrides>`` in this process and return its finished run."""
    from bench.cli.main import run_in_process

    return load_run(run_in_process(list(overrides or ())))


def load_run(path: str | Path) -> Run:
    """Read a finished run directory (``reports/latest`` is followed to the run it points at)."""
    path = Path(path).expanduser().resolve()
    return Run(path=path, **_read_run_dir(path))


def _read_run_dir(path: Path) -> dict:
    """Today's run-directory files -> the fields of ``Run``.

    MERGE: the one reader of run directories is ``bench.rundir.RunDir``; this function becomes
    ``d = RunDir(path)`` and its readers (summary, questions, jobs, failed, the analysis table).
    """
    if not (path / "summary.csv").is_file():
        raise FileNotFoundError(f"{path}: not a finished run (no summary.csv)")
    if (path / "jobs.json").is_file():
        jobs = json.loads((path / "jobs.json").read_text())
    else:
        jobs = [json.loads((path / "meta.json").read_text())]
    failed = json.loads((path / "failed.json").read_text()) if (path / "failed.json").is_file() else []
    report = path / "report.md"
    rec = path / "analysis" / "recommendation.csv"
    return {"summary": pd.read_csv(path / "summary.csv"), "questions": pd.read_parquet(path / "questions.parquet"),
            "jobs": tuple(jobs), "failed": tuple(failed if isinstance(failed, list) else [failed]),
            "report": report if report.is_file() else None,
            "recommendation": pd.read_csv(rec) if rec.is_file() else None}
