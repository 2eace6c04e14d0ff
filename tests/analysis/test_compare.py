"""recallbench compare RUN_A RUN_B: paired significance table between two finished runs.

Fixture (per-question F1 of strategy ``thr``; q1, q2 in conversation c1, q3, q4 in c2):
run A (store sA): 0.3 -> 1 1 1 0 (mean .75), 0.5 -> 0 0 0 0: A recommends 0.3
run B (store sB): 0.3 -> 0 0 0 0,            0.5 -> 0 0 1 0 (mean .25): B recommends 0.5
"""

import json
import math

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


F1_CONFIG = "recommend: {objective: max_f1, min_recall: null}\n"  # these runs compare F1 at each one's F1-optimal threshold
# (the shipped objective, fewest tokens at recall >= 0.7, finds nothing in runs whose recall tops out at 0.75 / 0.25)


@pytest.fixture()
def runs(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    for d in (a, b):
        (d / "config_resolved.yaml").write_text(F1_CONFIG)
    rows("sA", {0.3: [1, 1, 1, 0], 0.5: [0, 0, 0, 0]}).to_parquet(a / "questions.parquet")
    rows("sB", {0.3: [0, 0, 0, 0], 0.5: [0, 0, 1, 0]}).to_parquet(b / "questions.parquet")
    return a, b


def test_each_run_at_its_recommended_threshold(runs, capsys):
    a, b = runs
    assert compare_cli.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    # d = (1, 1 | 0, 0): mean +0.5; t test over 2 conversations: sums (2, 0), residuals (1, -1), se^2 = 2 * 2 / 16 -> se 0.5,
    # t = 1 on 1 df: p = 1 - 2 atan(1) / pi = 0.5 (one pair: Holm p = p); CI 0.5 +- 12.706 * 0.5 = [-5.853, 6.853]:
    # it contains 0 as p >= 0.05 says (on 7255a18 a bootstrap CI [+0.0000, +1.0000] stood beside a permutation p)
    assert ("| ds | thr | emb / sA @ 0.30 | emb / sB @ 0.50 | 2 | 4 | 0.750 | 0.250 | 0.500 [-5.853, 6.853] | 0.5000 | 0.5000 | no "
            "| 2/2/0 |") in out
    assert f"A = {a}" in out and "Holm p adjusts p for the 1 pairs" in out and "excludes 0 exactly when p < 0.05" in out


def test_all_thresholds_holm(runs, capsys):
    a, b = runs
    assert compare_cli.main([str(a), str(b), "--all-thresholds", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [r["a"]["threshold"] for r in res] == [0.3, 0.5]
    # 0.3: d = (1, 1 | 1, 0): sums (2, 1), m 0.75, se 0.25, t = 3 on 1 df -> p = 1 - 2 atan(3) / pi = 0.2048;
    # 0.5: d = (0, 0 | -1, 0): sums (0, -1), m -0.25, se 0.25, t = 1 -> p = 0.5. Holm: 0.2048 * 2 = 0.4097, then max(0.4097, 0.5)
    p3 = 1 - 2 * math.atan(3) / math.pi
    assert [r["p"] for r in res] == pytest.approx([p3, 0.5])
    assert [r["p_holm"] for r in res] == pytest.approx([2 * p3, 0.5])
    assert [(r["wins"], r["ties"], r["losses"]) for r in res] == [(3, 1, 0), (0, 3, 1)]
    assert [r["n_conversations"] for r in res] == [2, 2] and not any(r["significant"] for r in res)


def test_one_conversation_has_no_interval_and_no_test(tmp_path, capsys):
    a, b = tmp_path / "A1", tmp_path / "B1"
    a.mkdir()
    b.mkdir()
    for d in (a, b):
        (d / "config_resolved.yaml").write_text(F1_CONFIG)
    rows("sA", {0.3: [1, 1, 1, 0]}).assign(conversation_id="c1").to_parquet(a / "questions.parquet")
    rows("sB", {0.3: [0, 0, 1, 0]}).assign(conversation_id="c1").to_parquet(b / "questions.parquet")
    assert compare_cli.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 4 | 0.750 | 0.250 | 0.500 (no interval with 1 conversation) | n/a | n/a | no | 2/2/0 |" in out
    assert "nan" not in out


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
