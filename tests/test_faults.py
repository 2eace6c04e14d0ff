"""Store faults: a store that raises, one that times out, and a REAL chroma server killed mid-run.

One multirun (python -m bench -m backend=exact,fault_raise,fault_timeout,kill_chroma; demo corpus,
hashing embedder): each failing job ends with failed.json and a one-line reason, the exact job
finishes, the report lists the failures, nothing prints a traceback. A second multirun
(backend=exact,fault_crash) skips the finished job (same config hash) and is then SIGKILLed mid-run:
the earlier results stay byte-identical. A process killed while rewriting a result file leaves the
old file intact. The fault stores are ``bench.harden.FaultBackend`` via test-only configs written
to a temp dir and added with ``hydra.searchpath`` (never configs/backend/).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bench.harden import (DEMO, FaultBackend, count_tracebacks, fault_configs, finished_artefacts, fingerprints,
                          kill_during_write, run_cli)
from bench.results import write_atomic
from bench.types import MemoryBatch, Where


def test_fault_backend_fails_exactly_when_told():
    b = FaultBackend(fault="raise", after=2)
    b.open(dim=2)
    b.add(MemoryBatch(ids=("a",), vectors=np.array([[1.0, 0.0]], np.float32), conversation_ids=("c",), roles=("user",),
                      timestamps=(0.0,)))
    b.wait_ready()
    assert [h.id for h in b.search(np.array([1.0, 0.0], np.float32), k=1, where=Where())] == ["a"]
    with pytest.raises(RuntimeError, match="^injected fault: the store raised on search 2$"):
        b.search(np.array([1.0, 0.0], np.float32), k=1, where=Where())
    assert b.name == "exact+raise" and b.capabilities.exact
    t = FaultBackend(fault="timeout", after=1, delay_s=0.2)
    t.open(dim=2)
    with pytest.raises(TimeoutError, match="did not answer search 1 within 0.2 s"):
        t.search(np.array([1.0, 0.0], np.float32), k=1, where=Where())
    with pytest.raises(ValueError, match="unknown fault 'flaky'"):
        FaultBackend(fault="flaky")


@pytest.fixture(scope="module")
def chroma(tmp_path_factory):
    """A chroma server of our own (the session one is shared with other tests; this one gets killed)."""
    from bench.servers import ServerStartError, chroma_cli, run_chroma_server

    try:
        chroma_cli()
        cm = run_chroma_server(tmp_path_factory.mktemp("chroma_victim"))
        info = cm.__enter__()
    except (FileNotFoundError, ServerStartError) as e:
        pytest.skip(f"chroma server cannot run here: {e}")
    yield info
    cm.__exit__(None, None, None)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, chroma):
    root = tmp_path_factory.mktemp("faults")
    reports = root / "reports"
    conf = fault_configs(root / "conf", {
        "fault_raise": {"fault": "raise"},
        "fault_timeout": {"fault": "timeout", "delay_s": 0.5},
        "fault_crash": {"fault": "crash"},
        "kill_chroma": {"fault": "kill", "kill_pid": chroma.pid, "inner": "bench.backends.chroma.ChromaBackend",
                        "inner_kwargs": chroma.overrides()},
    })
    base = [f"hydra.searchpath=[file://{conf}]", f"paths.reports={reports}", "embedder=hashing", "dataset=own",
            f"dataset.path={DEMO}", "strategy=[limit,threshold]", "progress=false", "publish_latest=true"]
    first = run_cli(["-m", "backend=exact,fault_raise,fault_timeout,kill_chroma", *base])
    sweep1 = sorted((reports / "runs").iterdir())[-1]
    finished = finished_artefacts(reports)
    before = fingerprints(finished)
    second = run_cli(["-m", "backend=exact,fault_crash", *base])
    sweep2 = [p for p in sorted((reports / "runs").iterdir()) if p != sweep1][-1]
    return SimpleNamespace(reports=reports, first=first, sweep1=sweep1, finished=finished, before=before,
                           second=second, sweep2=sweep2, pid=chroma.pid)


def _failed(sweep: Path) -> dict[str, str]:
    return {p.parent.name: json.loads(p.read_text())["reason"] for p in sorted(sweep.glob("job*/failed.json"))}


def test_each_failing_job_records_a_one_line_reason(runs):
    reasons = _failed(runs.sweep1)
    assert sorted(reasons) == ["job1", "job2", "job3"]
    assert reasons["job1"] == "RuntimeError: injected fault: the store raised on search 8"
    assert reasons["job2"] == "TimeoutError: injected fault: the store did not answer search 8 within 0.5 s"
    assert "Connection refused" in reasons["job3"] or "Connect" in reasons["job3"], reasons["job3"]
    assert all("\n" not in r for r in reasons.values())


def test_the_other_job_finishes_and_the_report_lists_the_failures(runs):
    assert runs.first.returncode == 0, runs.first.stderr[-2000:]
    assert (runs.sweep1 / "job0" / "summary.csv").exists()
    assert not any((runs.sweep1 / f"job{i}" / "summary.csv").exists() for i in (1, 2, 3))  # nothing half-written
    report = (runs.sweep1 / "report.md").read_text()
    assert "**3 job(s) failed**" in report
    for job, reason in _failed(runs.sweep1).items():
        assert f"- `{job}` (" in report and reason in report
    assert json.loads((runs.sweep1 / "failed.json").read_text())[0]["job"] == "job1"
    assert count_tracebacks(runs.first.stdout + runs.first.stderr, runs.sweep1) == 0


def test_the_real_server_was_killed_mid_run(runs):
    status = Path(f"/proc/{runs.pid}/status")
    assert not status.exists() or "zombie" in status.read_text().lower()
    log = (runs.sweep1 / "job3" / "cli.log").read_text()
    assert "killing the server process group" in log and "trace:" not in log  # died during the searches


def test_a_rerun_skips_the_finished_job_and_a_crash_keeps_earlier_results(runs):
    out = runs.second.stdout + runs.second.stderr
    assert runs.second.returncode == -signal.SIGKILL  # the crash store killed the whole multirun
    assert "finished before" in out  # job0 resumed by its config hash, not run again
    assert (runs.sweep2 / "job0" / "summary.csv").read_bytes() == (runs.sweep1 / "job0" / "summary.csv").read_bytes()
    assert not (runs.sweep2 / "job1" / "summary.csv").exists()
    assert len(runs.before) >= 6 and fingerprints(runs.finished) == runs.before
    assert not list(runs.reports.rglob("*.tmp"))


def test_a_kill_during_a_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "summary.csv"
    target.write_text("strategy,recall\nlimit5,0.5\n")
    assert kill_during_write(target, size_mb=32) == (True, "")
    assert target.read_text() == "strategy,recall\nlimit5,0.5\n"


def test_a_failing_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "meta.json"
    target.write_text('{"v": 1}')

    def half(p: Path) -> None:
        p.write_text('{"v": 2, "trunc')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, half)
    assert target.read_text() == '{"v": 1}' and sorted(x.name for x in tmp_path.iterdir()) == ["meta.json"]
