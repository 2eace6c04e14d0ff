"""bench.analysis.recommend: a conversation holding only adversarial (abstention) questions is not one of the
intervals' conversations (issue 29: LongMemEval's 30 abstention questions are 30 conversations of their own).

Fixture (hand-worked): strategy ``lim`` (no threshold), conversations c1, c2, c3 with one scored question each,
F1 0.4, 0.5, 0.6; c4 holds one adversarial question only.
Mean 0.5; residuals -0.1, 0, 0.1; CR1 se^2 = G/(G-1) * 0.02 / N^2 = 3/2 * 0.02 / 9 = 1/300 (G = 3 conversations,
N = 3 questions); t_{0.975, 2 df} = 4.302653 -> CI 0.5 +- 0.248414; the prediction interval for a new corpus of as
many (3) conversations is 0.5 +- 0.248414 * sqrt(2) = 0.5 +- 0.351309. With c4 counted, G would be 4 (3 df).
"""

import numpy as np
import pandas as pd
import pytest

from bench.analysis.recommend import RecommendConfig, recommend


def row(q, conv, adv, f1, empty=0.0):
    return {"dataset": "ds", "embedder": "emb", "backend": "exact", "strategy": "lim", "threshold": np.nan,
            "question_id": q, "conversation_id": conv, "category": "abstention" if adv else "single-hop", "adversarial": adv,
            "f1": np.nan if adv else f1, "recall": np.nan if adv else 1.0, "precision": np.nan if adv else f1,
            "tokens_injected": 40, "empty": empty, "latency_ns": 1e6, "n_gold": 0 if adv else 1, "n_selected": 1,
            "n_correct": 0 if adv else 1, "hit": np.nan, "tokens_full": 100}


ROWS = pd.DataFrame([row("q1", "c1", False, 0.4), row("q2", "c2", False, 0.5), row("q3", "c3", False, 0.6),
                     row("q4", "c4", True, np.nan)])
HALF = 4.302653 * np.sqrt(1 / 300)  # 0.248414


def test_conversations_count_only_those_with_a_scored_question():
    rec = recommend(ROWS, RecommendConfig.defaults(objective="max_f1", min_recall=None))
    p = rec.points.iloc[0]
    assert (p["n_questions"], p["n_adversarial"], p["n_conversations"]) == (3, 1, 3)
    assert p["f1"] == pytest.approx(0.5)
    assert (p["f1_lo"], p["f1_hi"]) == pytest.approx((0.5 - HALF, 0.5 + HALF), abs=1e-6)  # t with 3 - 1 df
    assert (p["f1_pred_lo"], p["f1_pred_hi"]) == pytest.approx((0.5 - HALF * np.sqrt(2), 0.5 + HALF * np.sqrt(2)), abs=1e-6)


def test_without_the_abstention_conversation_nothing_changes():
    """The same numbers as a corpus without c4: c4 never entered the F1 interval, only the count said 4."""
    cfg = RecommendConfig.defaults(objective="max_f1", min_recall=None)
    a, b = recommend(ROWS, cfg).points.iloc[0], recommend(ROWS.iloc[:3], cfg).points.iloc[0]
    for col in ("f1", "f1_lo", "f1_hi", "f1_pred_lo", "f1_pred_hi", "n_conversations", "n_questions"):
        assert a[col] == pytest.approx(b[col]), col
