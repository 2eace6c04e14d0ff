"""The Python API: run a benchmark or read a finished one from a notebook or a script.

```python
from bench.api import load_run, run

r = run(["embedder=hashing", "backend=exact"])  # one job, in this process -> reports/runs/<time>_<id>/
r.summary                                       # one row per (dataset, embedder, store, strategy, threshold)
r.recommendation                                # the report's recommendation table
r.report                                        # the path of report.md (r.report.read_text(): its text)
load_run("reports/latest").questions            # any finished run, also one written by `recallbench sweep`
```

``run(overrides)`` takes the same overrides as ``recallbench sweep`` (one job: no ``-m``). Paths are
anchored at the current directory as on the command line (``reports/`` beside the notebook), or
set ``paths.reports=...``. Hydra stays in ``bench.cli``.
"""

from __future__ import annotations

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
    records; ``report``: the path of report.md (a Path; ``report.read_text()`` is its text; None when no
    report was written); ``recommendation``: the
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
    """Run one job of ``recallbench sweep <overrides>`` in this process and return its finished run.

    The overrides are composed and checked by the CLI (the one door to Hydra: ``bench.cli.main.job_in_process``), the
    job runs in ``bench.pipeline.run`` (caches, resume, failure record), then the report is written and
    ``reports/latest`` follows it (``publish_latest=false`` keeps it). A failed job raises ``RuntimeError`` with its
    one line; Ctrl-C raises ``KeyboardInterrupt`` after the failure is recorded."""
    from bench import pipeline
    from bench.cli.main import failure_line, finish_in_process, job_in_process

    job = job_in_process(list(overrides or ()))
    try:
        pipeline.run(job.inputs, job.settings, job.run_dir)
    except Exception:  # noqa: BLE001  (recorded in failed.json by the pipeline: raised as its one line)
        raise RuntimeError(failure_line(job.run_dir)) from None
    return load_run(finish_in_process(job))


def load_run(path: str | Path) -> Run:
    """Read a finished run directory (``reports/latest`` is followed to the run it points at)."""
    path = Path(path).expanduser().resolve()
    return Run(path=path, **_read_run_dir(path))


def _read_run_dir(path: Path) -> dict:
    """A finished run directory (read by ``bench.results.rundir.RunDir``, the one reader) -> the fields of ``Run``."""
    from bench.results.rundir import ANALYSIS, REPORT_MD, SUMMARY, RunDir

    d = RunDir(path)
    if not d.finished():
        raise FileNotFoundError(f"{path}: not a finished run (no {SUMMARY})")
    rec = d.path / ANALYSIS / "recommendation.csv"
    return {"summary": d.summary(), "questions": d.questions(), "jobs": tuple(d.jobs()), "failed": tuple(d.failed()),
            "report": d.file(REPORT_MD) if d.has(REPORT_MD) else None,
            "recommendation": d.table("recommendation") if rec.is_file() else None}
