"""defer_report=true: the run writes a short report.md (no analysis, no figures); `recallbench report` writes the full one."""

import os
import subprocess
import sys

import pytest

from bench.analysis.tables import write_tables
from bench.report.markdown import DEFERRED_TITLE, write_report
from bench.results.rundir import ANALYSIS

from tests.demo_run import DEMO, REPO


@pytest.mark.slow
def test_deferred_report_then_the_full_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATA_DIR"}
    cmd = [sys.executable, "-m", "bench", f"paths.reports={tmp_path}", f"paths.cache={tmp_path / 'cache'}", "dataset=own",
           f"dataset.path={DEMO}", "embedder=hashing", "backend=exact", "progress=false", "defer_report=true"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = (tmp_path / "latest").resolve()
    short = (run / "report.md").read_text()
    assert short.startswith(DEFERRED_TITLE) and f"recallbench report {run}" in short
    assert "| demo | " in short and "threshold" in short and "full_context" in short  # the best thresholds and the fixed strategies
    assert not (run / ANALYSIS).exists() and not list(run.glob("*.png"))  # no analysis, no figure at run time
    assert "report deferred (defer_report=true)" in proc.stdout + proc.stderr
    write_report(run, write_tables(run))  # what `recallbench report <run>` does
    full = (run / "report.md").read_text()
    assert not full.startswith(DEFERRED_TITLE) and "## Recommendation" in full and (run / ANALYSIS / "verdict.csv").is_file()
