"""Metrics against hand-worked values and an independent implementation (ir_measures SetP/SetR)."""

import math

import numpy as np
import pandas as pd
import pytest

from bench.metrics import setwise as M

# gold = {g1, g2, g3}; selected = {g1, x, g2, y}: 2 correct
SEL, GOLD = ["g1", "x", "g2", "y"], ["g1", "g2", "g3"]


def test_hand_worked_values():
    assert M.precision(selected=SEL, gold=GOLD) == pytest.approx(2 / 4)
    assert M.recall(selected=SEL, gold=GOLD) == pytest.approx(2 / 3)
    assert M.f1(selected=SEL, gold=GOLD) == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))  # 0.5714
    assert M.hit(selected=SEL, gold=GOLD) == 1.0


def test_edge_cases_are_explicit():
    # gold but nothing recalled: recall 0, precision undefined, F1 0 (recalling nothing never wins)
    assert M.recall(selected=[], gold=GOLD) == 0.0
    assert math.isnan(M.precision(selected=[], gold=GOLD))
    assert M.f1(selected=[], gold=GOLD) == 0.0
    assert M.hit(selected=[], gold=GOLD) == 0.0
    # no gold: recall/F1/hit undefined
    assert math.isnan(M.recall(selected=["a"], gold=[]))
    assert math.isnan(M.f1(selected=["a"], gold=[]))
    # recalled only wrong memories: precision 0, F1 0
    assert M.precision(selected=["x"], gold=GOLD) == 0.0 and M.f1(selected=["x"], gold=GOLD) == 0.0
    assert M.abstained(selected=[]) == 1.0 and M.abstained(selected=["x"]) == 0.0


def test_prf_from_counts_vectorised_hand_worked():
    # (selected, correct, gold) per question, expected (P, R, F1) beside:
    n_sel = [4, 0, 0, 1, 2, 3]
    n_cor = [2, 0, 0, 0, 0, 3]
    n_gold = [3, 3, 0, 3, 0, 3]
    p, r, f1 = M.prf(n_sel, n_cor, n_gold)
    nan = math.nan
    want = [(0.5, 2 / 3, 2 * 0.5 * (2 / 3) / (0.5 + 2 / 3)),  # SEL/GOLD above: 0.5714
            (nan, 0.0, 0.0),  # gold, nothing selected: F1 0 (recalling nothing never wins)
            (nan, nan, nan),  # no gold, nothing selected
            (0.0, 0.0, 0.0),  # only a wrong memory
            (0.0, nan, nan),  # no gold, two selected
            (1.0, 1.0, 1.0)]
    for i, w in enumerate(want):
        np.testing.assert_allclose([p[i], r[i], f1[i]], w, rtol=0, atol=1e-15, equal_nan=True)
    assert p.dtype == r.dtype == f1.dtype == np.float64 and p.shape == (6,)
    p1, r1, f11 = M.prf(4, 2, 3)  # scalars give 0-d arrays
    assert (float(p1), float(r1)) == (0.5, 2 / 3) and float(f11) == M.f1(selected=SEL, gold=GOLD)


def test_scalar_functions_are_prf_of_the_sets():
    # duplicates count once: selected {g1, x} of gold {g1, g2}
    assert M.precision(selected=["g1", "g1", "x"], gold=["g1", "g2", "g2"]) == 0.5
    assert M.recall(selected=["g1", "g1", "x"], gold=["g1", "g2", "g2"]) == 0.5
    for sel, gold in ((SEL, GOLD), ([], GOLD), (["a"], []), (["x"], GOLD), ([], [])):
        n = (len(set(sel)), len(set(sel) & set(gold)), len(set(gold)))
        for got, want in zip((M.precision(selected=sel, gold=gold), M.recall(selected=sel, gold=gold), M.f1(selected=sel, gold=gold)),
                             M.prf(*n)):
            assert (math.isnan(got) and math.isnan(want)) or got == want


def test_against_ir_measures_setp_setr():
    ir_measures = pytest.importorskip("ir_measures")
    qrels = [ir_measures.Qrel("q1", d, 1) for d in GOLD] + [ir_measures.Qrel("q2", "a", 1), ir_measures.Qrel("q2", "b", 1)]
    run = [ir_measures.ScoredDoc("q1", d, 10 - i) for i, d in enumerate(SEL)] + [ir_measures.ScoredDoc("q2", "b", 1.0), ir_measures.ScoredDoc("q2", "z", 0.5)]
    got = {(m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc([ir_measures.SetP, ir_measures.SetR], qrels, run)}
    assert M.precision(selected=SEL, gold=GOLD) == pytest.approx(got[("q1", "SetP")])
    assert M.recall(selected=SEL, gold=GOLD) == pytest.approx(got[("q1", "SetR")])
    assert M.precision(selected=["b", "z"], gold=["a", "b"]) == pytest.approx(got[("q2", "SetP")])
    assert M.recall(selected=["b", "z"], gold=["a", "b"]) == pytest.approx(got[("q2", "SetR")])


def _row(qid, sel, gold, adversarial=False, tokens=(10, 100), lat=1_000_000):
    return {
        "g": "x", "question_id": qid, "adversarial": adversarial, "n_gold": len(gold), "n_selected": len(sel),
        "n_correct": len(set(sel) & set(gold)),
        "precision": M.precision(selected=sel, gold=gold), "recall": M.recall(selected=sel, gold=gold),
        "f1": M.f1(selected=sel, gold=gold), "hit": M.hit(selected=sel, gold=gold), "empty": float(not sel),
        "tokens_injected": tokens[0], "tokens_full": tokens[1], "latency_ns": lat,
    }


def test_aggregate_macro_micro_and_adversarial():
    rows = pd.DataFrame([
        _row("q1", ["a", "x"], ["a"], tokens=(20, 100), lat=1_000_000),  # P 0.5 R 1 F1 0.667
        _row("q2", [], ["b", "c"], tokens=(0, 100), lat=3_000_000),  # P nan R 0 F1 0
        _row("q3", ["x"], [], adversarial=True, tokens=(5, 50), lat=2_000_000),  # adversarial, recalled something
    ])
    s = M.aggregate(rows, ["g"]).iloc[0]
    assert s["n_questions"] == 2 and s["n_adversarial"] == 1
    assert s["precision"] == pytest.approx(0.5) and s["precision_n"] == 1  # only q1 defines precision
    assert s["recall"] == pytest.approx(0.5)
    assert s["f1"] == pytest.approx((2 / 3 + 0) / 2)
    assert s["micro_precision"] == pytest.approx(1 / 2)  # 1 correct of 2 selected
    assert s["micro_recall"] == pytest.approx(1 / 3)  # 1 correct of 3 gold
    assert s["micro_f1"] == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
    assert s["empty_rate"] == pytest.approx(0.5) and s["hit_rate"] == pytest.approx(0.5)
    assert s["tokens_injected_mean"] == pytest.approx(10) and s["token_savings"] == pytest.approx(0.9)
    assert s["adversarial_abstain_rate"] == pytest.approx(0.0)
    # latency percentiles over every query of the trace (3 queries: 1, 2, 3 ms)
    assert s["latency_p50_ms"] == pytest.approx(2.0)
    assert s["latency_p99_ms"] == pytest.approx(np.percentile([1, 2, 3], 99))


def test_micro_metrics_use_pooled_counts_and_stay_undefined_when_nothing_is_selected():
    rows = pd.DataFrame([_row("q1", [], ["a"]), _row("q2", [], ["b", "c"])])  # gold, nothing selected anywhere
    s = M.aggregate(rows, ["g"]).iloc[0]
    assert s["f1"] == 0.0 and s["micro_recall"] == 0.0  # macro F1 0 per question; pooled recall 0 of 3
    assert math.isnan(s["micro_precision"]) and math.isnan(s["micro_f1"])  # pooled precision undefined, so micro F1 too
    wrong = M.aggregate(pd.DataFrame([_row("q1", ["x"], ["a"]), _row("q2", ["y", "z"], ["b"])]), ["g"]).iloc[0]
    assert (wrong["micro_precision"], wrong["micro_recall"], wrong["micro_f1"]) == (0.0, 0.0, 0.0)  # 0 correct of 3 selected


def test_a_question_without_gold_is_excluded_from_every_quality_column():
    # the three questions above plus q4: not adversarial, no gold, recalls 3 memories (precision 0, 300 of 400
    # tokens, not empty). It must move no quality column; it is counted in n_excluded and timed in latency.
    rows = pd.DataFrame([
        _row("q1", ["a", "x"], ["a"], tokens=(20, 100), lat=1_000_000),
        _row("q2", [], ["b", "c"], tokens=(0, 100), lat=3_000_000),
        _row("q3", ["x"], [], adversarial=True, tokens=(5, 50), lat=2_000_000),
        _row("q4", ["x", "y", "z"], [], tokens=(300, 400), lat=4_000_000),
    ])
    s = M.aggregate(rows, ["g"]).iloc[0]
    assert (s["n_questions"], s["n_excluded"], s["n_adversarial"], s["n_scored"]) == (2, 1, 1, 2)
    # the same values as without q4 (test above); with q4 they would be P 0.25, micro P 1/5, empty 1/3, ...
    assert s["precision"] == pytest.approx(0.5) and s["precision_n"] == 1
    assert s["recall"] == pytest.approx(0.5) and s["f1"] == pytest.approx(1 / 3) and s["hit_rate"] == pytest.approx(0.5)
    assert s["micro_precision"] == pytest.approx(1 / 2) and s["micro_recall"] == pytest.approx(1 / 3)
    assert s["empty_rate"] == pytest.approx(0.5) and s["selected_mean"] == pytest.approx(1.0)
    assert s["tokens_injected_mean"] == pytest.approx(10) and s["tokens_full_mean"] == pytest.approx(100)
    assert s["token_savings"] == pytest.approx(0.9) and s["adversarial_abstain_rate"] == 0.0
    assert s["latency_p50_ms"] == pytest.approx(2.5)  # every query: 1, 2, 3, 4 ms


def test_scored_mask_reads_n_gold_else_recall_else_f1():
    rows = pd.DataFrame({"adversarial": [False, False, True], "n_gold": [2, 0, 0], "recall": [0.5, math.nan, math.nan], "f1": [0.0, math.nan, math.nan]})
    assert M.scored(rows).tolist() == [True, False, False] and M.excluded(rows).tolist() == [False, True, False]
    assert M.scored(rows.drop(columns="n_gold")).tolist() == [True, False, False]
    assert M.scored(rows.drop(columns=["n_gold", "recall"])).tolist() == [True, False, False]
    with pytest.raises(ValueError, match="need column 'n_gold'"):
        M.scored(rows[["adversarial"]])



def test_question_rule_is_written_once_in_the_same_words():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### Metric conventions"):]
    section = section[: section.index("\n## ")]
    bullets = re.findall(r"^- Questions counted:.*?(?=^- |\Z)", section, re.DOTALL | re.MULTILINE)
    assert len(bullets) == 1, "README 'Metric conventions' must state the question rule once"
    def words(text):
        return " ".join(text.split())

    assert words(bullets[0]) in words(M.__doc__)
    assert "n_excluded" in bullets[0] and "latency" in bullets[0]
