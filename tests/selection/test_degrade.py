"""bench.selection.degrade: the timeout policy and the injected faults' cost, on hand-made sweep rows.

Conversation c1: six user turns t0..t5 without timestamps (every question sees all six); fallback k=2 = the last two,
t4 and t5. A selection of n memories costs 3n tokens in the fallback (``cost``). Strategy s at threshold 0.5:

    question  gold      store ms  selected  correct  tokens | fallback t4,t5: correct
    qa        t1        1         2         1        10     |   0
    qb        t5        3         1         1        5      |   1 (t5)
    qc        t0, t4    8         2         1        12     |   1 of 2 (t4)
    qd        (adversarial, no gold) 9 ms: not scored, but counted in failed_share

No timeout: recall (1 + 1 + 1/2) / 3 = 5/6, tokens (10 + 5 + 12) / 3 = 9.
"""

import numpy as np
import pandas as pd
import pytest

from bench.replay.visibility import Visibility
from bench.selection import degrade as D
from bench.types import Conversation, Corpus, Question, Turn

TURNS = tuple(Turn("c1", f"t{i}", "user" if i % 2 == 0 else "assistant", "x", f"text {i}", None, i) for i in range(6))
QS = (Question("qa", "c1", "a?", None, ("t1",)), Question("qb", "c1", "b?", None, ("t5",)),
      Question("qc", "c1", "c?", None, ("t0", "t4")), Question("qd", "c1", "d?", None, (), adversarial=True))
CORPUS = Corpus("tiny", (Conversation("c1", TURNS),), QS)
# question -> (n_gold, store ms, selected, correct, tokens)
ROWS = {"qa": (1, 1, 2, 1, 10), "qb": (1, 3, 1, 1, 5), "qc": (2, 8, 2, 1, 12), "qd": (0, 9, 1, 0, 4)}


def cost(fmt, keys):
    return 3 * len(keys)


def rows() -> pd.DataFrame:
    out = []
    for q, (g, ms, sel, cor, tok) in ROWS.items():
        out.append({"dataset": "tiny", "embedder": "e", "backend": "exact", "strategy": "s", "threshold": 0.5, "format": "A",
                    "question_id": q, "adversarial": q == "qd", "n_gold": g, "n_selected": sel, "n_correct": cor,
                    "precision": cor / sel, "recall": cor / g if g else np.nan, "f1": np.nan, "hit": np.nan, "empty": 0.0,
                    "tokens_injected": tok, "latency_ns": ms * 1e6})
    base = pd.DataFrame(out)
    full = base.assign(strategy="full_context", latency_ns=np.nan)  # ignores the store: never degraded
    return pd.concat([base, full], ignore_index=True)


def test_last_visible_is_the_last_k_memories_the_question_may_see():
    vis = Visibility(CORPUS)
    assert D.last_visible(vis, QS[0], k=2) == ("c1|t4", "c1|t5")
    assert D.last_visible(vis, QS[0], k=2, roles=("user",)) == ("c1|t2", "c1|t4")  # t0, t2, t4 are the user turns
    assert D.last_visible(vis, QS[0], k=0) == ()
    said = Corpus("t", (Conversation("c1", tuple(Turn("c1", f"t{i}", "user", "x", "y", float(i + 1), i) for i in range(6))),),
                  (Question("q", "c1", "?", 3.0, ()),))  # asked at 3.0: sees t0, t1, t2 (said at 1, 2, 3)
    assert D.last_visible(Visibility(said), said.questions[0], k=2) == ("c1|t1", "c1|t2")


# timeout ms -> (policy -> (recall, tokens, failed share over all four questions)), by hand from the module docstring
EXPECTED = {
    0.5: {"empty": (0.0, 0.0, 1.0), "last_k": ((0 + 1 + 0.5) / 3, 6.0, 1.0)},
    2: {"empty": (1 / 3, 10 / 3, 0.75), "last_k": ((1 + 1 + 0.5) / 3, (10 + 6 + 6) / 3, 0.75)},  # qb, qc, qd time out
    5: {"empty": (2 / 3, 5.0, 0.5), "last_k": ((1 + 1 + 0.5) / 3, 7.0, 0.5)},  # qc, qd
    10: {"empty": (5 / 6, 9.0, 0.0), "last_k": (5 / 6, 9.0, 0.0)},
}


def test_the_timeout_policy_keeps_the_hand_computed_recall_and_tokens():
    t = D.degradation_table(rows(), CORPUS, cost=cost, timeouts_ms=(0.5, 2, 5, 10), fallback_k=2)
    assert set(t["strategy"]) == {"s"}  # full_context reads no store
    none = t[t["cause"] == "none"].iloc[0]
    assert (none["recall"], none["tokens_injected_mean"], none["n_questions"]) == (pytest.approx(5 / 6), 9.0, 3)
    for ms, by_policy in EXPECTED.items():
        for policy, (recall, tokens, share) in by_policy.items():
            r = t[(t["cause"] == "timeout") & (t["timeout_ms"] == ms) & (t["policy"] == policy)].iloc[0]
            assert (r["recall"], r["tokens_injected_mean"], r["failed_share"]) == (pytest.approx(recall), pytest.approx(tokens), share)
            assert r["recall_kept"] == pytest.approx(recall / (5 / 6))
            assert r["fallback_k"] == (2 if policy == "last_k" else 0)


def test_faulted_questions_get_nothing_or_the_fallback():
    t = D.degradation_table(rows(), CORPUS, cost=cost, timeouts_ms=(), fallback_k=2, failed_ids=frozenset({"qb"}))
    empty = t[(t["cause"] == "fault") & (t["policy"] == "empty")].iloc[0]
    last = t[(t["cause"] == "fault") & (t["policy"] == "last_k")].iloc[0]
    assert (empty["recall"], empty["tokens_injected_mean"], empty["failed_share"]) == (pytest.approx(1.5 / 3), 22 / 3, 0.25)
    assert (last["recall"], last["tokens_injected_mean"]) == (pytest.approx(5 / 6), 28 / 3)  # qb's fallback holds t5: 6 tokens


def test_bad_settings_are_one_line_naming_the_field():
    assert D.check_settings(None) == (D.DEFAULT_TIMEOUTS_MS, 5)
    assert D.check_settings({"timeouts_ms": [1, 2.5], "fallback_k": 0}) == ((1.0, 2.5), 0)
    for node, field in (({"timeouts_ms": [-1]}, "degrade.timeouts_ms"), ({"fallback_k": 1.5}, "degrade.fallback_k"),
                        ({"timeout": 3}, "unknown field")):
        with pytest.raises(ValueError, match=field):
            D.check_settings(node)
    with pytest.raises(ValueError, match="policy"):
        D.apply_policy(rows(), np.zeros(8, bool), "retry")



def test_a_kept_share_of_nothing_is_undefined_not_infinite():
    """A strategy that recalls nothing and injects nothing without faults: qb's fallback (t4, t5) then finds its gold t5
    (recall 1/3, 6/3 tokens), but the share kept of 0 is undefined: NaN, never inf."""
    r = rows().assign(n_selected=0, n_correct=0, precision=np.nan, tokens_injected=0)
    r["recall"] = np.where(r["n_gold"] > 0, 0.0, np.nan)
    t = D.degradation_table(r, CORPUS, cost=cost, timeouts_ms=(), fallback_k=2, failed_ids=frozenset({"qb"}))
    last = t[(t["cause"] == "fault") & (t["policy"] == "last_k")].iloc[0]
    assert last["recall"] == pytest.approx(1 / 3) and last["tokens_injected_mean"] == pytest.approx(2.0)
    assert np.isnan(last["recall_kept"]) and np.isnan(last["tokens_kept"])
