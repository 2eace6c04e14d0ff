"""Smoke test of the whole pipeline (python -m bench) on the demo corpus: offline, default store."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "datasets" / "demo"


def run_bench(tmp: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATA_DIR"}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1")  # no network
    cmd = [sys.executable, "-m", "bench", f"paths.reports={tmp}", "dataset=own", f"dataset.path={DEMO}", "progress=false", *overrides]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reports")
    first = run_bench(tmp)
    assert first.returncode == 0, first.stderr[-3000:]
    meta1 = json.loads((tmp / "latest" / "meta.json").read_text())
    second = run_bench(tmp, "resume=false")  # re-run the job: the trace and embeddings come from the cache
    assert second.returncode == 0, second.stderr[-3000:]
    return tmp, meta1, json.loads((tmp / "latest" / "meta.json").read_text())


def test_summary_has_17_thresholds_and_monotone_recall(two_runs):
    tmp, _, _ = two_runs
    s = pd.read_csv(tmp / "latest" / "summary.csv")
    for col in ["dataset", "embedder", "backend", "strategy", "threshold", "n_questions", "precision", "recall", "f1",
                "hit_rate", "empty_rate", "tokens_injected_mean", "tokens_full_mean", "token_savings", "latency_p50_ms", "latency_p99_ms"]:
        assert col in s.columns, col
    assert set(s["backend"]) == {"seekdb"}  # the default store
    assert set(s["dataset"]) == {"demo"}
    thr = s[s["strategy"] == "threshold"].sort_values("threshold")
    assert len(thr) == 17 and thr["threshold"].round(2).tolist()[:2] == [0.10, 0.15]
    assert (thr["recall"].diff().dropna() <= 1e-12).all()  # recall never rises with the threshold
    assert len(s[s["strategy"] == "hybrid5"]) == 17
    assert s[s["strategy"] == "limit5"]["threshold"].isna().all()
    full = s[s["strategy"] == "full_context"].iloc[0]
    assert full["recall"] == 1.0 and full["token_savings"] == 0.0
    assert (s["n_questions"] == 22).all()  # 25 demo questions, 3 adversarial


def test_report_and_plots_written(two_runs):
    tmp, _, _ = two_runs
    latest = tmp / "latest"
    report = (latest / "report.md").read_text()
    assert "Seed claims, re-measured" in report and "limit-5 saves tokens" in report
    pngs = list(latest.glob("*.png"))
    assert len(pngs) == 3 and all(p.stat().st_size > 5000 for p in pngs)
    assert (latest / "questions.parquet").exists() and (latest / "config_resolved.yaml").exists()


def test_second_run_embeds_nothing_and_reuses_the_trace(two_runs):
    _, meta1, meta2 = two_runs
    assert meta1["embed_cache"]["misses"] > 150  # 163 turns + 25 questions, deduplicated
    assert meta2["embed_cache"]["misses"] == 0
    assert "reused_from" in meta2 and "reused_from" not in meta1


def test_bad_override_is_a_clear_error(tmp_path):
    proc = run_bench(tmp_path, "backend=nosuchstore")
    assert proc.returncode != 0
    assert "nosuchstore" in proc.stderr and "Traceback" not in proc.stderr


def test_identical_job_is_resumed_not_rerun(two_runs):
    tmp, _, _ = two_runs
    third = run_bench(tmp)
    assert third.returncode == 0, third.stderr[-3000:]
    out = third.stdout + third.stderr  # Hydra logs to stdout
    assert "finished before" in out
    assert "trace:" not in out and "embedding cache" not in out
