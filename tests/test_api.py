"""bench.api, used as a notebook would: in-process, from a directory that is not the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from bench import api
from bench.resources import demo_dir

OVERRIDES = ["embedder=hashing", "backend=exact", "progress=false"]
DEMO_QUESTIONS = [json.loads(line)["question_id"] for line in (demo_dir() / "questions.jsonl").read_text().splitlines() if line.strip()]
# Default strategies of configs/config.yaml and the 17 thresholds 0.10..0.90: limit5 and full_context take none.
EXPECTED_ROWS = {"limit5": 1, "threshold": 17, "hybrid5": 17, "full_context": 1}


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    """A notebook's working directory (no datasets/ there: the default dataset falls back to the demo corpus)."""
    cwd = tmp_path_factory.mktemp("notebook")
    old, env = os.getcwd(), os.environ.pop("BENCH_DATA_DIR", None)
    os.chdir(cwd)
    try:
        yield cwd, api.run(OVERRIDES)
    finally:
        os.chdir(old)
        if env is not None:
            os.environ["BENCH_DATA_DIR"] = env


@pytest.mark.slow
def test_run_writes_a_finished_run_under_the_current_directory(notebook):
    cwd, r = notebook
    assert r.path.parent == cwd / "reports" / "runs"  # paths.root = where the notebook runs
    assert (cwd / "reports" / "latest").resolve() == r.path  # published like a CLI run
    assert (r.path / "config_resolved.yaml").is_file() and (r.path / "report.html").is_file()
    assert r.report == r.path / "report.md" and r.report.read_text().startswith("# ")


def test_run_returns_its_tables(notebook):
    _, r = notebook
    s = r.summary
    assert set(s["dataset"]) == {"demo"} and set(s["backend"]) == {"exact"} and set(s["embedder"]) == {"hashing-v1/word12-char3/crc32/256"}
    assert s.groupby("strategy").size().to_dict() == EXPECTED_ROWS
    assert (s["n_questions"] == 22).all() and (s["n_adversarial"] == 3).all()  # demo: 25 questions, 3 adversarial
    full = s[s["strategy"] == "full_context"].iloc[0]
    assert full["recall"] == 1.0 and full["token_savings"] == 0.0  # every earlier turn: all gold, nothing saved
    assert sorted(set(r.questions["question_id"])) == sorted(DEMO_QUESTIONS)
    assert len(r.questions) == len(DEMO_QUESTIONS) * sum(EXPECTED_ROWS.values())
    assert r.meta["backend"] == "exact" and r.meta["dataset"] == "demo" and len(r.jobs) == 1 and r.failed == ()
    rec = r.recommendation
    assert rec is not None and rec["best"].sum() == 1  # one configuration to ship per dataset
    best = rec[rec["best"]].iloc[0]
    row = s[(s["strategy"] == best["strategy"]) & ((s["threshold"] == best["threshold"]) | s["threshold"].isna() & pd.isna(best["threshold"]))]
    assert best["f1"] == pytest.approx(row["f1"].iloc[0])  # the recommendation's F1 is the summary's


def test_load_run_reads_the_same_run(notebook):
    cwd, r = notebook
    again = api.load_run(cwd / "reports" / "latest")
    assert again.path == r.path
    pd.testing.assert_frame_equal(again.summary, r.summary)
    pd.testing.assert_frame_equal(again.questions, r.questions)
    assert again.jobs == r.jobs and again.report == r.report
    pd.testing.assert_frame_equal(again.recommendation, r.recommendation)


@pytest.mark.slow
def test_the_api_run_equals_the_cli_run(notebook):
    cwd, r = notebook
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_DATA_DIR", "HYDRA_FULL_ERROR")}
    proc = subprocess.run([sys.executable, "-m", "bench", *OVERRIDES, "resume=false", "trace_cache=false", "publish_latest=false",
                           "paths.reports=cli-reports"], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (cli_run,) = (cwd / "cli-reports" / "runs").iterdir()
    cli = api.load_run(cli_run)
    timing = [c for c in r.summary.columns if c.startswith("latency_")]
    pd.testing.assert_frame_equal(cli.summary.drop(columns=timing), r.summary.drop(columns=timing))
    pd.testing.assert_frame_equal(cli.questions.drop(columns="latency_ns"), r.questions.drop(columns="latency_ns"))


@pytest.mark.slow
def test_a_notebooks_own_hydra_is_left_as_it_was(tmp_path, monkeypatch):
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    with initialize_config_dir(config_dir=str(tmp_path / "conf"), version_base="1.3"):
        mine = GlobalHydra.instance().hydra
        r = api.run([*OVERRIDES, "strategy=limit", "publish_latest=false"])
        assert GlobalHydra.instance().hydra is mine
    assert r.summary["strategy"].tolist() == ["limit5"] and not (tmp_path / "reports" / "latest").exists()


@pytest.mark.slow
def test_overrides_go_to_the_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = api.run([*OVERRIDES, "strategy=threshold", "thresholds.start=0.3", "thresholds.stop=0.5", "thresholds.step=0.1",
                 f"paths.reports={tmp_path / 'elsewhere'}"])
    assert r.path.parent == tmp_path / "elsewhere" / "runs"
    assert r.summary["threshold"].tolist() == pytest.approx([0.3, 0.4, 0.5])


def test_failures_raise_with_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"runs one job; for a multirun use `recallbench sweep -m"):
        api.run(["-m", "backend=exact"])
    with pytest.raises(ValueError, match=r"^backend=nope: no such option \(options: chroma, "):
        api.run(["backend=nope"])
    with pytest.raises(ValueError, match=r"^backend=exct: no such option; did you mean exact\? \(options: "):
        api.run(["backend=exct"])
    with pytest.raises(ValueError, match=r"^dataset.pth: no such setting in dataset=own; did you mean dataset.path\?$"):
        api.run([*OVERRIDES, "dataset=own", "dataset.pth=/x"])
    with pytest.raises(RuntimeError, match=r"config strict: expected true or false \(or yes/no, 1/0\), got 'flase'; did you mean false\?"):
        api.run([*OVERRIDES, "strict=flase"])
    assert not (tmp_path / "reports" / "latest").exists()
    with pytest.raises(RuntimeError) as failed:
        api.run([*OVERRIDES, "dataset=own", f"dataset.path={tmp_path / 'missing'}"])
    assert str(failed.value).startswith("the job failed: FileNotFoundError: dataset path not found: ")
    assert str(failed.value).endswith("failed.json)") and "\n" not in str(failed.value)
    with pytest.raises(FileNotFoundError, match=r"not a finished run \(no summary.csv\)"):
        api.load_run(tmp_path)


def test_a_multirun_has_one_meta_per_job(notebook, tmp_path):
    _, r = notebook
    multi = tmp_path / "multi"
    shutil.copytree(r.path, multi)
    (multi / "jobs.json").write_text(json.dumps([r.meta, {**r.meta, "backend": "sqlite_vec"}]))
    m = api.load_run(multi)
    assert [j["backend"] for j in m.jobs] == ["exact", "sqlite_vec"]
    with pytest.raises(ValueError, match="holds 2 jobs: read Run.jobs"):
        m.meta


def test_run_report_is_what_the_readme_and_the_docstring_say(notebook):
    """The README said r.report "is report.md" beside r.meta (a dict): it is the path of report.md, and both say so."""
    from pathlib import Path

    _, r = notebook
    assert isinstance(r.report, Path) and r.report.name == "report.md" and r.report.read_text().startswith("# ")
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "r.report           # the path of report.md (a pathlib.Path; r.report.read_text() is its text)" in readme
    assert "the path of report.md" in api.Run.__doc__ and "the path of report.md" in api.__doc__
