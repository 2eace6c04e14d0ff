"""Every metric once, and the one table of them: name -> (function, direction, range, what it measures).

Modules (each owns its metrics' definitions and NaN rules, in its docstring):

- ``setwise``: a selection against the gold memories: precision, recall, F1, hit, abstention, F1 with abstention
  credited, injected tokens, store latency percentiles; ``aggregate`` (the summary's per-configuration means).
- ``ranked``: the store's ranking (no threshold): recall_any@k, recall_all@k, nDCG@k (trec_eval), MRR (ranked.csv).
- ``conventions``: LongMemEval's arithmetic of recall_any/recall_all/nDCG (conventions.csv).
- ``answers``: answer coverage of the injected memories, offline (answer_recall, answer_contained).
- ``text``: SQuAD's normalisation and token F1 of a generated answer (``bench.evaluation.qa``).

``METRICS`` is the table the recommender (``bench.analysis.recommend.OBJECTIVES``), the regression gate and the
report read a metric's direction from (``direction``): +1 when higher is better, -1 when lower is. ``from
bench.metrics import X`` keeps working for every public name of the former ``bench/metrics.py`` (now ``setwise``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from bench.metrics import answers, conventions, ranked, setwise, text
from bench.metrics.setwise import (  # noqa: F401  (the former bench.metrics: re-exported)
    NAN,
    abstained,
    aggregate,
    excluded,
    f1,
    f1_abstain,
    group_rows,
    hit,
    percentile_ms,
    precision,
    prf,
    recall,
    scored,
    series_mean,
    tokens,
    with_abstention,
)

HIGHER, LOWER = 1, -1


@dataclass(frozen=True)
class Metric:
    name: str
    function: Callable[..., float]  # its definition for one question (keyword-only arguments); NaN where undefined
    direction: int  # HIGHER (+1): higher is better; LOWER (-1): lower is better
    low: float  # the range of a per-question value
    high: float
    description: str


def _table(*rows: tuple) -> dict[str, Metric]:
    return {r[0]: Metric(*r) for r in rows}


UNIT = (0.0, 1.0)
METRICS: dict[str, Metric] = _table(
    # set metrics of a selection (questions.parquet / summary.csv columns of the same names)
    ("precision", setwise.precision, HIGHER, *UNIT, "selected memories that are gold; NaN when nothing is selected"),
    ("recall", setwise.recall, HIGHER, *UNIT, "gold memories selected; NaN without gold"),
    ("f1", setwise.f1, HIGHER, *UNIT, "harmonic mean of precision and recall; 0 when nothing is selected, NaN without gold"),
    ("hit", setwise.hit, HIGHER, *UNIT, "1 when a gold memory is selected; NaN without gold"),
    ("abstained", setwise.abstained, HIGHER, *UNIT, "adversarial questions: 1 when nothing is recalled"),
    ("f1_abstain", setwise.f1_abstain, HIGHER, *UNIT, "F1, with an adversarial question's abstention counted as its F1"),
    ("tokens", setwise.tokens, LOWER, 0.0, math.inf, "tokens injected into the prompt (column tokens_injected)"),
    ("latency_ms", setwise.percentile_ms, LOWER, 0.0, math.inf, "store latency percentile over every query of a trace"),
    # answer coverage (questions.parquet / summary.csv answer_recall, answer_contained)
    ("answer_recall", answers.token_recall, HIGHER, *UNIT, "answer tokens found in the injected memories; NaN without an answer"),
    ("answer_contained", answers.contained, HIGHER, *UNIT, "1 when the whole answer is inside one injected memory"),
    # ranked retrieval of the store's order (ranked.csv metric column)
    ("ranked.recall_any", ranked.recall_any, HIGHER, *UNIT, "a gold item in the top k"),
    ("ranked.recall_all", ranked.recall_all, HIGHER, *UNIT, "every gold item in the top k"),
    ("ranked.ndcg", ranked.ndcg, HIGHER, *UNIT, "nDCG@k, trec_eval's ndcg_cut"),
    ("ranked.mrr", ranked.reciprocal_rank, HIGHER, *UNIT, "1 / rank of the first gold item, 0 when none was returned"),
    # LongMemEval's arithmetic (conventions.csv metric column)
    ("conventions.recall_any", conventions.recall_any, HIGHER, *UNIT, "LongMemEval recall_any@k"),
    ("conventions.recall_all", conventions.recall_all, HIGHER, *UNIT, "LongMemEval recall_all@k"),
    ("conventions.ndcg", conventions.ndcg, HIGHER, *UNIT, "LongMemEval nDCG@k (its dcg: ranks 1 and 2 count in full)"),
    # a generated answer against the gold one (bench.evaluation.qa)
    ("token_f1", text.token_f1, HIGHER, *UNIT, "SQuAD token F1 of an answer against the gold answer"),
)


def direction(name: str) -> int:
    """+1 when higher is better, -1 when lower is (``METRICS``); one clear line for an unknown name."""
    try:
        return METRICS[name].direction
    except KeyError:
        raise ValueError(f"unknown metric {name!r} (known: {sorted(METRICS)})") from None
