"""Offline sweep over a hand-built trace: exact threshold labels, metrics per question, summary."""

import math

import pandas as pd
import pytest

from bench import strategies as S
from bench.runner import Trace
from bench.sweep import StrategySpec, summarise, sweep, threshold_grid
from bench.types import Conversation, Corpus, Question, Turn


def turn(i, role, ts):
    return Turn("c1", f"t{i}", role, role, f"text {i}", ts, i)


# c1: four turns; q1 asked at ts=3 sees t0..t2 only (t3 is later); q2 adversarial, asked after all.
CORPUS = Corpus(
    name="tiny",
    conversations=(Conversation("c1", (turn(0, "user", 1.0), turn(1, "assistant", 2.0), turn(2, "user", 3.0), turn(3, "user", 4.0))),),
    questions=(
        Question("q1", "c1", "where?", 3.0, ("t0", "t2"), "single-hop"),
        Question("q2", "c1", "weather?", None, (), "adversarial", adversarial=True),
    ),
)
TOKENS = {"c1|t0": 10, "c1|t1": 20, "c1|t2": 30, "c1|t3": 40}
TRACE = Trace(
    pd.DataFrame({
        "question_id": ["q1", "q2"], "conversation_id": ["c1", "c1"], "latency_ns": [2_000_000, 4_000_000],
        "hit_ids": [["c1|t2", "c1|t1", "c1|t0"], ["c1|t3", "c1|t0"]],
        "hit_scores": [[0.80, 0.55, 0.30], [0.45, 0.20]],
        "exact_scores": [[0.80, 0.55, 0.30], [0.45, 0.20]],
    }),
    {"dataset": "tiny", "embedder": "fake", "backend": "exact", "roles": None},
)
SPECS = [
    StrategySpec("limit2", lambda h, **kw: S.limit(h, k=2, **kw), thresholded=False),
    StrategySpec("threshold", S.threshold, thresholded=True),
    StrategySpec("full_context", S.full_context, thresholded=False, uses_store=False),
]


def test_threshold_grid_is_exact_decimals():
    grid = threshold_grid(0.10, 0.90, 0.05)
    assert len(grid) == 17
    assert grid[0] == 0.1 and grid[-1] == 0.9 and grid[5] == 0.35  # not 0.35000000000000003
    assert [f"{t:.2f}" for t in grid][:3] == ["0.10", "0.15", "0.20"]
    with pytest.raises(ValueError, match="outside"):
        threshold_grid(0.5, 1.5, 0.5)


def test_sweep_rows_hand_worked():
    rows = sweep(TRACE, CORPUS, SPECS, (0.5, 0.9), TOKENS, separator_tokens=1)
    # limit2 on q1: {t2, t1}; gold {t0, t2}: P 1/2, R 1/2; tokens 30 + 20 + 1 separator
    lim = rows[(rows.strategy == "limit2") & (rows.question_id == "q1")].iloc[0]
    assert (lim.precision, lim.recall, lim.tokens_injected) == (0.5, 0.5, 51)
    # full context for q1 = turns visible at ts 3: t0, t1, t2 -> 10+20+30+2 = 62 tokens
    assert lim.tokens_full == 62
    # threshold 0.5 on q1: {t2, t1}; threshold 0.9: nothing -> F1 0, precision NaN
    t5 = rows[(rows.strategy == "threshold") & (rows.threshold == 0.5) & (rows.question_id == "q1")].iloc[0]
    t9 = rows[(rows.strategy == "threshold") & (rows.threshold == 0.9) & (rows.question_id == "q1")].iloc[0]
    assert t5.n_selected == 2 and t5.recall == 0.5
    assert t9.f1 == 0.0 and math.isnan(t9.precision) and t9["empty"] == 1.0
    fc = rows[(rows.strategy == "full_context") & (rows.question_id == "q1")].iloc[0]
    assert fc.recall == 1.0 and math.isnan(fc.latency_ns)
    # adversarial q2 at 0.5: nothing recalled (0.45 < 0.5) -> abstained
    a = rows[(rows.strategy == "threshold") & (rows.threshold == 0.5) & (rows.question_id == "q2")].iloc[0]
    assert a.adversarial and a["empty"] == 1.0
    assert len(rows) == 2 * (1 + 2 + 1)


def test_summary_one_row_per_strategy_threshold():
    s = summarise(sweep(TRACE, CORPUS, SPECS, (0.5, 0.9), TOKENS))
    assert list(zip(s.strategy, s.threshold.fillna(-1))) == [("limit2", -1), ("threshold", 0.5), ("threshold", 0.9), ("full_context", -1)]
    t9 = s[(s.strategy == "threshold") & (s.threshold == 0.9)].iloc[0]
    assert t9.n_questions == 1 and t9.f1 == 0.0 and t9.precision_n == 0 and t9.adversarial_abstain_rate == 1.0
    lim = s[s.strategy == "limit2"].iloc[0]
    assert lim.token_savings == pytest.approx(1 - 50 / 60)  # default: no separator tokens
    assert lim.adversarial_abstain_rate == 0.0  # limit always recalls something
    assert lim.latency_p50_ms == pytest.approx(3.0)  # median of 2 ms and 4 ms (all queries of the trace)
    assert math.isnan(s[s.strategy == "full_context"].iloc[0].latency_p50_ms)
