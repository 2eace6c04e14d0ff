"""``recallbench``: the dispatcher (bench.cli.main), its help, and the tools' shared entry (bench.cli.common)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import common
from bench.cli import main as M
from bench.resources import configs_dir, demo_dir, plugin_names

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("report", "compare", "export", "score", "answer", "stores", "tradeoff", "regress", "harden", "bench", "data", "load", "ray")
# Run the dispatcher in a child process as the console script does (``recallbench = bench.cli.main:main``).
RECALLBENCH = [sys.executable, "-c", "import sys; from bench.cli.main import main; sys.exit(main())"]
QUICK = ["dataset=own", f"dataset.path={demo_dir()}", "embedder=hashing", "progress=false", "publish_latest=false"]


def recallbench(*args: str, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k not in ("BENCH_DATA_DIR", "HYDRA_FULL_ERROR")}, **(env or {})}
    return subprocess.run([*RECALLBENCH, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# --- recallbench --help and the dispatch ----------------------------------------------------------

def test_help_lists_every_command_with_one_line_and_examples(capsys):
    assert M.main(["--help"]) == 0
    out = capsys.readouterr().out
    commands = out.split("commands:\n")[1].split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in commands] == ["sweep", *TOOLS]  # one line each, in this order
    assert all(len(line.split(maxsplit=1)[1]) > 20 for line in commands)  # each says what it does
    examples = out.split("examples:\n")[1].split("\n\n")[0].splitlines()
    assert len(examples) >= 5 and all(e.strip().startswith("recallbench ") for e in examples)
    assert "recallbench sweep -m strategy='glob(*)'" in out


def test_no_command_prints_usage_on_stderr_exit_2(capsys):
    assert M.main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("usage: recallbench <command>")


def test_unknown_command_is_one_error_line_exit_2(capsys):
    assert M.main(["sweeep"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("error: unknown command 'sweeep' (commands: sweep, report, compare, export, score, answer, stores, tradeoff, regress, harden, "
                            "bench, data, load, ray; recallbench --help)\n")


@pytest.mark.parametrize("command", TOOLS)
def test_every_tool_has_its_help_with_examples(command, capsys):
    with pytest.raises(SystemExit) as done:
        M.main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: recallbench {command} ")
    assert "\nexamples:\n" in out and f"  recallbench {command}" in out.split("\nexamples:\n")[1]


def test_data_fetch_is_reached_through_data(capsys):
    with pytest.raises(SystemExit) as done:
        M.main(["data", "fetch", "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: recallbench data fetch ")
    assert M.main(["data", "fetch", "--only", "nope", "--offline"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown manifest(s) nope; have ") and err.count("\n") == 1


@pytest.mark.slow
def test_sweep_help_is_ours_with_the_config_groups_read_from_configs(tmp_path):
    proc = recallbench("sweep", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("recallbench sweep: ")
    assert "usage: recallbench sweep [-m] [group=option ...] [key=value ...]" in out
    assert "recallbench sweep -m strategy='glob(*)'" in out and "dataset.path=$HOME/my-data" in out
    groups = sorted(p.name for p in configs_dir().iterdir() if p.is_dir() and p.name != "hydra")
    assert groups == ["backend", "dataset", "embedder", "experiment", "llm", "paths", "recommend", "strategy"]  # llm: recallbench answer
    for group in groups:  # every option of every group, as Hydra reads them from configs/
        assert f"\n{group}: {', '.join(plugin_names(group))}\n" in out, group
    assert "Powered by Hydra" not in out  # not Hydra's generic page
    same = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert same.returncode == 0 and same.stdout == out  # python -m bench is the same command


@pytest.mark.slow
def test_sweep_passes_overrides_and_multirun_to_the_hydra_app(tmp_path):
    reports = tmp_path / "reports"
    proc = recallbench("sweep", "-m", "backend=exact", "strategy=[limit,threshold]", "thresholds.step=0.2", *QUICK,
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (reports / "runs").iterdir()  # under the current directory (paths.root)
    assert (run_dir / "job0" / "summary.csv").is_file() and (run_dir / "report.md").is_file()  # a multirun, merged
    jobs = json.loads((run_dir / "jobs.json").read_text())
    assert [j["backend"] for j in jobs] == ["exact"] and jobs[0]["strategies"] == ["limit5", "threshold"]
    assert jobs[0]["thresholds"] == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.9])


def test_sweep_errors_stay_one_line(tmp_path):
    proc = recallbench("sweep", "backend=nope", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: backend=nope: no such option (options: chroma, chroma_server, exact, ")
    assert proc.stderr.count("\n") == 1


# --- a store whose extra is not installed -------------------------------------------------------------

HIDE = """
import sys
from importlib.abc import MetaPathFinder

class Hidden(MetaPathFinder):  # as if the chroma extra were not installed
    def find_spec(self, name, path=None, target=None):
        if name == "chromadb" or name.startswith("chromadb."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Hidden())
from bench.cli.main import main
sys.exit(main())
"""


@pytest.fixture(scope="module")
def without_chromadb(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("nochroma")
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_DATA_DIR", "HYDRA_FULL_ERROR")}
    proc = subprocess.run([sys.executable, "-c", HIDE, "sweep", "backend=chroma", "strategy=limit", *QUICK], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)
    errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "[ERROR]" in ln or ln.startswith("error:")]
    return proc, errors


def test_a_missing_store_extra_is_one_line_naming_the_package(without_chromadb):
    proc, errors = without_chromadb
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out
    assert len(errors) == 1 and "chromadb" in errors[0], errors


def test_a_missing_store_extra_names_the_extra_to_install(without_chromadb):
    _, errors = without_chromadb
    assert len(errors) == 1 and "pip install 'recallbench[chroma]'" in errors[0], errors


# --- bench.cli.common ----------------------------------------------------------------------------

def test_default_paths_follow_the_current_directory_never_the_package(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert common.work_dir() == tmp_path
    assert common.reports_dir("compare") == tmp_path / "reports" / "compare"
    assert M.main(["report"]) == 2  # default run: reports/latest under the current directory
    assert capsys.readouterr().err == f"error: {tmp_path / 'reports' / 'latest'}/summary.csv not found (run `recallbench sweep` first)\n"


def test_entry_turns_an_unhandled_fault_into_one_line(capsys, monkeypatch):
    def broken(argv):
        raise OSError(28, "No space left on device")

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.delenv(common.DEBUG_ENV, raising=False)
    assert common.entry(broken, []) == 1
    assert capsys.readouterr().err == "error: OSError: [Errno 28] No space left on device\n"
    assert common.entry(interrupted, []) == 130
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C)\n"
    assert common.entry(lambda argv: 3, []) == 3

    def reader_gone(argv):  # `recallbench ... | head`
        raise BrokenPipeError(32, "Broken pipe")

    assert common.entry(reader_gone, []) == 141
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(common.DEBUG_ENV, "1")  # the user asked for the traceback
    with pytest.raises(OSError):
        common.entry(broken, [])


def test_tools_use_the_shared_entry():
    """Every tool's main builds its parser and logging with bench.cli.common (no argparse or basicConfig of its own)."""
    files = ["bench/tools/regress/__init__.py", "bench/tools/perf/__init__.py", "bench/tools/stores.py", "bench/tools/tradeoff.py", "bench/tools/load.py",
             "bench/tools/harden/run.py", "bench/tools/ray_run.py", "bench/cli/report.py", "bench/cli/compare.py", "bench/cli/data.py",
             "bench/cli/export.py", "bench/cli/score.py", "bench/cli/answer.py"]
    for f in files:
        text = (REPO / f).read_text()
        assert "argparse.ArgumentParser(" not in text and "logging.basicConfig(" not in text, f
        assert "parser(" in text and "setup_logging(" in text, f
        assert "PACKAGE_DIR" not in text, f  # no default path inside the installed package


# --- third-party loggers, typos through the console script (issue 24) ---------------------------------------------------

def test_setup_logging_puts_the_store_clients_at_warning_unless_verbose():
    import logging

    common.setup_logging()
    assert all(logging.getLogger(n).level == logging.WARNING for n in ("httpx", "pyseekdb", "chromadb", "urllib3"))
    common.setup_logging(verbose=True)
    assert all(logging.getLogger(n).level == logging.NOTSET for n in ("httpx", "pyseekdb", "chromadb", "urllib3"))
    common.quiet_third_party()


def test_a_typo_through_recallbench_sweep_is_one_line_with_the_closest_name(tmp_path):
    proc = recallbench("sweep", "dataset.pth=/x", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "error: dataset.pth: no such setting in dataset=auto (its settings: datasets_dir, default_dir, demo_dir); path is a "
        "setting of dataset=locomo, locomo_2025, locomo_observations, locomo_summaries, longmemeval_oracle, longmemeval_s, own: did you mean "
        "dataset=own dataset.path=/x?"]
