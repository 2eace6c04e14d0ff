"""Store faults: a store that raises, one that times out, and a REAL chroma server killed mid-run.

One multirun (python -m bench -m backend=exact,fault_raise,fault_timeout,kill_chroma; demo corpus,
hashing embedder): each failing job ends with failed.json and a one-line reason, the exact job
finishes, the report lists the failures, nothing prints a traceback. A second multirun
(backend=exact,fault_crash resume=true) skips the finished job (same config hash) and is then SIGKILLed mid-run:
the earlier results stay byte-identical. A process killed while rewriting a result file leaves the
old file intact. The fault stores are ``bench.tools.harden.doubles.FaultBackend`` via test-only configs written
to a temp dir and added with ``hydra.searchpath`` (never configs/backend/).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from server_fixtures import server_unavailable

from bench.output import write_atomic
from bench.tools.harden.cases import DEMO, count_tracebacks, run_cli
from bench.tools.harden.doubles import FaultBackend
from bench.tools.harden.run import (
    fault_configs,
    fingerprints,
    finished_artefacts,
    kill_during_write,
)
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
    from bench.backends.servers import ServerStartError, chroma_cli, run_chroma_server

    try:
        chroma_cli()
        cm = run_chroma_server(tmp_path_factory.mktemp("chroma_victim"))
        info = cm.__enter__()
    except (FileNotFoundError, ServerStartError) as e:
        server_unavailable(f"chroma server cannot run here: {e}")
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
    # resume=true: a comparison of stores times every store afresh by default (bench.cli.sweep.like_for_like); this one
    # asks to reuse the finished job
    second = run_cli(["-m", "backend=exact,fault_crash", "resume=true", *base])
    sweep2 = [p for p in sorted((reports / "runs").iterdir()) if p != sweep1][-1]
    return SimpleNamespace(reports=reports, first=first, sweep1=sweep1, finished=finished, before=before,
                           second=second, sweep2=sweep2, pid=chroma.pid)


def _failed(sweep: Path) -> dict[str, str]:
    return {p.parent.name: json.loads(p.read_text())["reason"] for p in sorted(sweep.glob("job*/failed.json"))}


@pytest.mark.slow
def test_each_failing_job_records_a_one_line_reason(runs):
    reasons = _failed(runs.sweep1)
    assert sorted(reasons) == ["job1", "job2", "job3"]
    assert reasons["job1"] == "RuntimeError: injected fault: the store raised on search 8"
    assert reasons["job2"] == "TimeoutError: injected fault: the store did not answer search 8 within 0.5 s"
    assert "Connection refused" in reasons["job3"] or "Connect" in reasons["job3"], reasons["job3"]
    assert all("\n" not in r for r in reasons.values())


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_real_server_was_killed_mid_run(runs):
    status = Path(f"/proc/{runs.pid}/status")
    assert not status.exists() or "zombie" in status.read_text().lower()
    log = (runs.sweep1 / "job3" / "cli.log").read_text()
    assert "killing the server process group" in log and "trace:" not in log  # died during the searches


@pytest.mark.slow
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


# --- faults of the run itself: unwritable or full directories, Ctrl-C ----------------------------

from bench.tools.harden.cases import REPO, cli_env  # noqa: E402

FAST = ["embedder=hashing", "dataset=own", f"dataset.path={DEMO}", "strategy=[limit,threshold]", "progress=false"]


@contextlib.contextmanager
def tmpfs(path: Path, *, size: str = "64m", read_only: bool = False):
    """A small (or read-only) file system mounted at ``path`` for one test; skipped where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if read_only else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode}); needs root with CAP_SYS_ADMIN")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def one_line_fault(proc: subprocess.CompletedProcess, *needles: str) -> str:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "Logging error" not in out, out[-3000:]
    assert proc.returncode != 0, out[-3000:]
    for n in needles:
        assert n in out, (n, out[-3000:])
    return out


@pytest.mark.slow
def test_an_unwritable_job_cache_names_it_and_keeps_the_report(tmp_path):
    reports = tmp_path / "reports"
    with tmpfs(reports / "cache" / "jobs", read_only=True):
        proc = run_cli([f"paths.reports={reports}", "backend=exact", *FAST])
        one_line_fault(proc, "the job finished but could not be cached in", "Read-only file system")
    assert (reports / "latest" / "report.md").exists()  # what finished is reported and published
    assert json.loads((reports / "latest" / "faults.json").read_text())[0].startswith("the job finished but could not be cached")


@pytest.mark.slow
def test_a_full_disk_ends_with_one_line_naming_the_file(tmp_path):
    reports = tmp_path / "reports"
    with tmpfs(reports, size="96k"):
        proc = run_cli([f"paths.reports={reports}", "backend=exact", *FAST])
        one_line_fault(proc, "No space left on device")
        assert not (reports / "latest").exists()


@pytest.mark.slow
def test_a_disk_full_before_the_start_and_a_read_only_run_dir(tmp_path):
    full = tmp_path / "full"
    with tmpfs(full, size="64k"):
        with contextlib.suppress(OSError):
            (full / "filler").write_bytes(b"x" * 200_000)
        proc = run_cli([f"paths.reports={full}", "backend=exact", *FAST])
        out = one_line_fault(proc)
        assert "No space left on device" in out or "error:" in out
    ro = tmp_path / "ro"
    with tmpfs(ro, read_only=True):
        proc = run_cli([f"paths.reports={ro}", "backend=exact", *FAST])
        one_line_fault(proc, "error: OSError: [Errno 30] Read-only file system")


def interrupt_when(args: list[str], marker: str, *, delay_s: float = 1.0) -> subprocess.CompletedProcess:
    """Run the CLI in its own session, send Ctrl-C (SIGINT to the group) once ``marker`` is printed."""
    env = {**cli_env(), "PYTHONUNBUFFERED": "1"}
    # SIGINT back to its default in the child, as in a user's terminal: a shell's background job (CI, `make test &`)
    # ignores SIGINT, and a Python started with SIGINT ignored never raises KeyboardInterrupt
    p = subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in p.stdout:
            lines.append(line)
            if marker in line:
                seen.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    assert seen.wait(300), "".join(lines)[-3000:]
    time.sleep(delay_s)  # the job is blocked inside the store call: Ctrl-C lands there
    os.killpg(p.pid, signal.SIGINT)
    p.wait(120)
    t.join(10)
    return subprocess.CompletedProcess(p.args, p.returncode, "".join(lines), "")


@pytest.fixture
def hang_conf(tmp_path):
    return fault_configs(tmp_path / "conf", {"fault_hang": {"fault": "timeout", "after": 3, "delay_s": 120}})


@pytest.mark.slow
def test_ctrl_c_in_a_single_run_exits_130_and_leaves_earlier_results(tmp_path, hang_conf):
    reports = tmp_path / "reports"
    first = run_cli([f"paths.reports={reports}", "backend=exact", *FAST])
    assert first.returncode == 0
    before = os.readlink(reports / "latest")
    proc = interrupt_when([f"hydra.searchpath=[file://{hang_conf}]", f"paths.reports={reports}", "backend=fault_hang", *FAST],
                          "injected fault: search 3 blocks")
    out = proc.stdout
    assert proc.returncode == 130, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    assert "interrupted (Ctrl-C): the job did not finish; nothing was published" in out
    assert os.readlink(reports / "latest") == before
    (failed,) = [p for p in (reports / "runs").glob("*/failed.json")]
    assert json.loads(failed.read_text())["reason"] == "interrupted (Ctrl-C) before the job finished"


@pytest.mark.slow
def test_ctrl_c_in_a_multirun_keeps_the_report_of_the_finished_jobs(tmp_path, hang_conf):
    reports = tmp_path / "reports"
    first = run_cli([f"paths.reports={reports}", "backend=exact", *FAST])
    assert first.returncode == 0
    before = os.readlink(reports / "latest")
    proc = interrupt_when(["-m", f"hydra.searchpath=[file://{hang_conf}]", f"paths.reports={reports}",
                           "backend=exact,fault_hang,sqlite_vec", *FAST], "injected fault: search 3 blocks")
    out = proc.stdout
    assert proc.returncode == 130, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    assert "interrupted (Ctrl-C): 1 job(s) finished; their report:" in out and "reports/latest is unchanged" in out
    (sweep,) = [d for d in (reports / "runs").iterdir() if f"runs/{d.name}" != before]
    assert (sweep / "job0" / "summary.csv").exists() and (sweep / "report.md").exists()
    reasons = {f["job"]: f["reason"] for f in json.loads((sweep / "failed.json").read_text())}
    assert reasons == {"job1": "interrupted (Ctrl-C) before the job finished",
                       "job2": "not started: the run was interrupted (Ctrl-C)"}
    assert os.readlink(reports / "latest") == before  # a multirun cut short is not the latest run (it was, before)
