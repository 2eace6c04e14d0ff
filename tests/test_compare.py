"""recallbench compare RUN_A RUN_B: paired significance table between two finished runs.

Fixture (per-question F1 of strategy ``thr``; q1, q2 in conversation c1, q3, q4 in c2):
run A (store sA): 0.3 -> 1 1 1 0 (mean .75), 0.5 -> 0 0 0 0: A recommends 0.3
run B (store sB): 0.3 -> 0 0 0 0,            0.5 -> 0 0 1 0 (mean .25): B recommends 0.5
"""

import json

import numpy as np
import pandas as pd
import pytest

from bench.analysis import compare
from bench.cli import compare as compare_cli


def rows(backend: str, f1: dict) -> pd.DataFrame:
    out = []
    for t, values in f1.items():
        for i, v in enumerate(values):
            out.append({"dataset": "ds", "embedder": "emb", "backend": backend, "strategy": "thr", "threshold": t,
                        "question_id": f"q{i + 1}", "conversation_id": "c1" if i < 2 else "c2", "category": "single-hop",
                        "adversarial": False, "f1": v, "recall": v, "precision": v if v else np.nan,
                        "tokens_injected": 10 * v, "empty": float(not v), "latency_ns": 1e6})
    return pd.DataFrame(out)


@pytest.fixture()
def runs(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    rows("sA", {0.3: [1, 1, 1, 0], 0.5: [0, 0, 0, 0]}).to_parquet(a / "questions.parquet")
    rows("sB", {0.3: [0, 0, 0, 0], 0.5: [0, 0, 1, 0]}).to_parquet(b / "questions.parquet")
    return a, b


def test_each_run_at_its_recommended_threshold(runs, capsys):
    a, b = runs
    assert compare_cli.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    # d = (1, 1, 0, 0): mean +0.5; 16 sign patterns, T = +0.5 in 4 -> two-sided p = 0.5 (one pair: Holm p = p)
    # CI: conversation means of d: c1 = 1, c2 = 0 -> resamples 1, 0.5, 0 -> [0, 1]; q3 and q4 tie
    assert "| ds | thr | emb / sA @ 0.30 | emb / sB @ 0.50 | 4 | 0.7500 | 0.2500 | +0.5000 [+0.0000, +1.0000] | 0.5 | 0.5 |  | 2/2/0 |" in out
    assert f"A = {a}" in out and "Holm-corrected across the 1 pairs" in out


def test_all_thresholds_holm(runs, capsys):
    a, b = runs
    assert compare_cli.main([str(a), str(b), "--all-thresholds", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [r["a"]["threshold"] for r in res] == [0.3, 0.5]
    # 0.3: d = (1, 1, 1, 0) -> p = 2 * 2/16 = 0.25; 0.5: d = (0, 0, -1, 0) -> |T| is always .25 -> p = 1.
    # Holm: 0.25 * 2 = 0.5, then max(0.5, 1 * 1) = 1
    assert [r["p"] for r in res] == pytest.approx([0.25, 1.0])
    assert [r["p_holm"] for r in res] == pytest.approx([0.5, 1.0])
    assert [(r["wins"], r["ties"], r["losses"]) for r in res] == [(3, 1, 0), (0, 3, 1)]
    assert not any(r["significant"] for r in res)


def test_compare_runs_api_metric_choice(runs):
    a, b = runs
    res, cfg = compare.compare_runs(a, b, metric="tokens_injected")
    assert res.iloc[0]["metric"] == "tokens_injected" and res.iloc[0]["diff"] == pytest.approx(5.0)  # 7.5 - 2.5 tokens
    assert cfg.alpha == 0.05


def test_clear_errors(runs, tmp_path, capsys):
    a, _ = runs
    assert compare_cli.main([str(a), str(tmp_path / "nope")]) == 2
    assert f"{tmp_path / 'nope' / 'questions.parquet'}: not found" in capsys.readouterr().err
    other = tmp_path / "C"
    other.mkdir()
    rows("sA", {0.3: [1, 0, 0, 0]}).assign(strategy="other").to_parquet(other / "questions.parquet")
    assert compare_cli.main([str(a), str(other)]) == 2
    assert "share no (dataset, strategy)" in capsys.readouterr().err


def _labels(run, digest):
    (run / "meta.json").write_text(json.dumps({"dataset": "ds", "labels_sha256": digest}))
    (run / "summary.csv").write_text("dataset\nds\n")


def test_refuses_runs_scored_on_different_labels(runs, capsys):
    a, b = runs
    _labels(a, "a" * 64)
    _labels(b, "b" * 64)
    assert compare_cli.main([str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "scored different questions or gold labels (ds: A scored labels aaaaaaaaaaaa, B scored labels bbbbbbbbbbbb)" in err
    assert "--allow-label-mismatch" in err
    assert compare_cli.main([str(a), str(b), "--allow-label-mismatch"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("**WARNING: DIFFERENT LABELS, compared anyway: ds: A scored labels aaaaaaaaaaaa, B scored labels bbbbbbbbbbbb**\n")


def test_same_labels_compare_without_warning(runs, capsys):
    a, b = runs
    _labels(a, "c" * 64)
    _labels(b, "c" * 64)
    assert compare_cli.main([str(a), str(b)]) == 0
    assert capsys.readouterr().out.startswith(f"A = {a}")
    assert compare.label_check(a, b) == ([], [])
