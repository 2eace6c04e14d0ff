"""The metrics table (bench.metrics.METRICS): every metric has a direction and a range and is callable; the
recommender's objectives and the regression gate read their directions from it."""

import math

import pytest

from bench import metrics
from bench.analysis import recommend

# One hand-worked question per family: selected {g1, x}, gold {g1, g2} -> precision 1/2, recall 1/2, F1 1/2, hit 1.
SEL, GOLD = ["g1", "x"], ["g1", "g2"]
# ranked a, g1, b, g2; gold {g1, g2}: ranks 2 and 4
RANKED = ["a", "g1", "b", "g2"]
CALLS = {  # name -> (keyword arguments, expected value)
    "precision": ({"selected": SEL, "gold": GOLD}, 0.5),
    "recall": ({"selected": SEL, "gold": GOLD}, 0.5),
    "f1": ({"selected": SEL, "gold": GOLD}, 0.5),
    "hit": ({"selected": SEL, "gold": GOLD}, 1.0),
    "abstained": ({"selected": []}, 1.0),
    "f1_abstain": ({"selected": SEL, "gold": [], "adversarial": True}, 0.0),  # adversarial, recalled something: 0
    "tokens": ({"items": [("user", "hi")]}, 3.0),  # "user: hi" = user, :, hi in cl100k_base
    "latency_ms": ({"latencies_ns": [1e6, 3e6], "q": 50}, 2.0),
    "answer_recall": ({"answer": "Oslo in May", "context": ["We moved to Oslo."]}, 0.5),  # oslo of [oslo, may]
    "answer_contained": ({"answer": "Oslo", "context": ["We moved to Oslo."]}, 1.0),
    "ranked.recall_any": ({"ranked": RANKED, "gold": GOLD, "k": 1}, 0.0),
    "ranked.recall_all": ({"ranked": RANKED, "gold": GOLD, "k": 4}, 1.0),
    "ranked.ndcg": ({"ranked": RANKED, "gold": GOLD, "k": 2}, (1 / math.log2(3)) / (1 + 1 / math.log2(3))),
    "ranked.mrr": ({"ranked": RANKED, "gold": GOLD}, 0.5),
    "conventions.recall_any": ({"ranked": RANKED, "gold": GOLD, "k": 2}, 1.0),
    "conventions.recall_all": ({"ranked": RANKED, "gold": GOLD, "k": 3}, 0.0),
    "conventions.ndcg": ({"ranked": RANKED, "gold": GOLD, "k": 2}, 0.5),  # LongMemEval: rank 2 counts in full -> 1/2
}


def test_every_metric_has_a_direction_a_range_and_is_called_by_hand():
    assert set(CALLS) | {"token_f1"} == set(metrics.METRICS)
    for name, m in metrics.METRICS.items():
        assert m.name == name and m.direction in (metrics.HIGHER, metrics.LOWER) and callable(m.function)
        assert m.low < m.high and m.description
    for name, (kwargs, want) in CALLS.items():
        assert metrics.METRICS[name].function(**kwargs) == pytest.approx(want, abs=1e-12), name
    assert metrics.METRICS["token_f1"].function("Rex the dog", "Rex") == pytest.approx(2 / 3)  # [rex, dog] vs [rex]


def test_directions():
    assert {n for n, m in metrics.METRICS.items() if m.direction == metrics.LOWER} == {"tokens", "latency_ms"}
    assert metrics.direction("f1") == 1 and metrics.direction("tokens") == -1
    with pytest.raises(ValueError, match="unknown metric 'f2'"):
        metrics.direction("f2")


def test_recommend_reads_the_table():
    assert recommend.OBJECTIVES == {"max_f1": ("f1", 1), "max_f1_abstain": ("f1_abstain", 1), "max_recall": ("recall", 1),
                                    "min_tokens": ("tokens", -1)}
    assert list(recommend.UPPER) == [1.0, 1.0, 1.0, math.inf, 1.0, 1.0]  # f1 recall precision tokens abstained f1_abstain


def test_old_imports_keep_working():
    from bench.metrics import aggregate, excluded, prf, scored  # noqa: F401  (the former bench/metrics.py)
    from bench.evaluation import qa

    assert metrics.f1 is metrics.setwise.f1 and qa.token_f1 is metrics.text.token_f1
