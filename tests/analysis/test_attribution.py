"""bench.analysis.attribution: every missed gold memory gets one cause; selections come from the real sweep,
exact ranks from the trace (columns gold_ids / gold_exact_ranks, written by the trace's exact pass).

Fixture: one conversation c1 of five turns (t0 user, t1 assistant, t2 user, t3 user, t4 assistant,
said at times 1..5). Exact cosine to every question (all vectors 2-d, question = [1, 0]):
t2 .8, t1 .75, t3 .7, t0 .5, t4 .3 -> exact ranks t2 1, t1 2, t3 3, t0 4, t4 5.
q1 (asked after everything) has gold t0, t1, t3, t4; the store returned t2 .8, t3 .7, t0 .5, t4 .3
(t1 missing: an ANN miss). q2 is adversarial. q3 is asked at time 3 with gold t3 (said at 4).
User-only (t0, t2, t3 visible to q1): t2 1, t3 2, t0 3.
"""

import functools
import math

import numpy as np
import pandas as pd
import pytest

from bench import types as T
from bench.analysis import attribution as A
from bench.backends.exact import ExactBackend
from bench.embedders.base import EmbedderCapabilities, TwoSided
from bench.strategies import vector as V
from bench.strategies.spec import StrategySpec
from bench.replay.trace import Trace, build_trace
from bench.types import Conversation, Corpus, Question, Turn

ROLES = ["user", "assistant", "user", "user", "assistant"]
TURNS = tuple(Turn("c1", f"t{i}", r, r, f"text {i}", float(i + 1), i) for i, r in enumerate(ROLES))
CORPUS = Corpus(
    name="tiny",
    conversations=(Conversation("c1", TURNS),),
    questions=(
        Question("q1", "c1", "what?", None, ("t0", "t1", "t3", "t4"), "single-hop"),
        Question("q2", "c1", "weather?", None, (), "adversarial", adversarial=True),
        Question("q3", "c1", "later?", 3.0, ("t3",), "temporal"),
    ),
)
SIMS = [0.5, 0.75, 0.8, 0.7, 0.3]  # t0..t4
TV = np.array([[s, math.sqrt(1 - s * s)] for s in SIMS], dtype=np.float32)
QV = np.array([[1.0, 0.0]] * 3, dtype=np.float32)
TRACE = Trace(pd.DataFrame({
    "question_id": ["q1", "q2", "q3"], "conversation_id": ["c1"] * 3, "latency_ns": [1000, 1000, 1000],
    "hit_ids": [["c1|t2", "c1|t3", "c1|t0", "c1|t4"], ["c1|t0"], ["c1|t2", "c1|t0"]],
    "hit_scores": [[0.8, 0.7, 0.5, 0.3], [0.2], [0.8, 0.5]],
    "exact_scores": [[0.8, 0.7, 0.5, 0.3], [0.2], [0.8, 0.5]],
    # what the trace's exact pass records: q1's gold at exact ranks 4, 2, 3, 5; q3's t3 is said after q3 (0: hidden)
    "gold_ids": [["c1|t0", "c1|t1", "c1|t3", "c1|t4"], [], ["c1|t3"]],
    "gold_exact_ranks": [[4, 2, 3, 5], [], [0]],
}), {"dataset": "tiny", "embedder": "fake", "backend": "ann", "roles": None})
# the same store answers, traced user-only: q1's user gold t0 (rank 3) and t3 (rank 2); t1, t4 are the assistant's (0)
USER_TRACE = Trace(TRACE.table.assign(gold_exact_ranks=[[3, 0, 2, 0], [], [0]]), {**TRACE.meta, "roles": ["user"]})
TOKENS = {t.key: 10 for t in TURNS}

HYBRID = StrategySpec("hybrid1", functools.partial(V.hybrid, k=1), thresholded=True)
USER_THR = StrategySpec("user_thr", V.threshold, thresholded=True, roles=("user",))


def drop_all(hits, *, question=None, eligible=(), threshold=None):  # a "tier" policy that keeps nothing
    return ()


def last_turn(hits, *, question=None, eligible=(), threshold=None):
    return tuple(T.Hit(t.key, 0.0) for t in eligible[-1:])


TIER = StrategySpec("tier", drop_all, thresholded=True)
RECENT = StrategySpec("recent1", last_turn, thresholded=False, uses_store=False)


@pytest.mark.parametrize("kwargs, cause", [
    (dict(visible_=False), "filter"),
    (dict(uses_store=False), "policy"),
    (dict(exact_rank=11), "embedding"),
    (dict(exact_rank=None, store_rank=None), "unreturned"),
    (dict(store_rank=None), "store"),
    (dict(store_score=0.4), "threshold"),
    (dict(store_score=float("nan")), "threshold"),
    (dict(rank_passing=5), "cap"),
    ({}, "decay/tier"),
])
def test_classify_order(kwargs, cause):
    base = dict(visible_=True, uses_store=True, exact_rank=3, top_n=10, store_rank=2, store_score=0.6,
                threshold=0.5, cap_k=5, rank_passing=2)
    assert A.classify(**{**base, **kwargs}) == cause


class FakeEmbedder(TwoSided):
    """Texts of the fixture -> its hand-made 2-d vectors."""

    model_id = "fake-2d"
    identity = {"model_id": "fake-2d"}
    dim = 2
    capabilities = EmbedderCapabilities(for_results=False)

    def __init__(self, turn_vectors):
        self.vec = {**{t.text: v for t, v in zip(TURNS, turn_vectors)}, **{q.text: QV[i] for i, q in enumerate(CORPUS.questions)}}

    def embed(self, texts):
        return np.array([self.vec[t] for t in texts], dtype=np.float32)


def traced_ranks(turn_vectors=TV, roles=None):
    trace = build_trace(CORPUS, FakeEmbedder(turn_vectors), ExactBackend(), depth=5, roles=roles, warmup=0, progress=False)
    return trace.table, A.gold_ranks(trace.table)


def test_the_trace_records_each_gold_memorys_exact_rank_with_filters_and_ties():
    table, ranks = traced_ranks()
    assert table["gold_ids"].tolist() == TRACE.table["gold_ids"].tolist()  # the hand-written trace above is what it records
    assert table["gold_exact_ranks"].tolist() == TRACE.table["gold_exact_ranks"].tolist()
    assert ranks["q1"] == {"c1|t0": 4, "c1|t1": 2, "c1|t3": 3, "c1|t4": 5}
    assert ranks["q3"] == {}  # t3 is said after q3 was asked: not visible, no rank
    assert ranks["q2"] == {}  # no gold
    user_table, user = traced_ranks(roles=("user",))
    assert user["q1"] == {"c1|t0": 3, "c1|t3": 2}  # visible: t0 .5, t2 .8, t3 .7
    assert user_table["gold_exact_ranks"].tolist() == USER_TRACE.table["gold_exact_ranks"].tolist()
    tie = TV.copy()
    tie[3] = tie[0]  # t3 now scores .5 like t0: key order puts t0 first
    assert traced_ranks(tie)[1]["q1"] == {"c1|t0": 3, "c1|t1": 2, "c1|t3": 4, "c1|t4": 5}


def test_gold_ranks_read_the_trace_columns_only():
    assert A.gold_ranks(TRACE.table) == {"q1": {"c1|t0": 4, "c1|t1": 2, "c1|t3": 3, "c1|t4": 5}, "q2": {}, "q3": {}}
    old = TRACE.table.drop(columns=["gold_ids", "gold_exact_ranks"])  # a trace written before the columns existed
    assert A.gold_ranks(old) == {}


def test_replay_records_the_sweeps_selections():
    seen = A.replay(TRACE, CORPUS, [HYBRID, TIER, RECENT], [0.55], TOKENS)
    # hybrid k=1 at .55: passing t2 .8, t3 .7 -> t2
    assert seen[("hybrid1", 0.55)] == {"q1": ("c1|t2",), "q2": (), "q3": ("c1|t2",)}
    assert seen[("tier", 0.55)] == {"q1": (), "q2": (), "q3": ()}
    assert seen[("recent1", None)]["q1"] == ("c1|t4",) and seen[("recent1", None)]["q3"] == ("c1|t2",)


def causes(misses):
    return dict(zip(misses["question_id"] + ":" + misses["memory"].str.slice(3), misses["cause"]))


def test_attribute_every_cause_hand_worked():
    ranks = A.gold_ranks(TRACE.table)
    seen = A.replay(TRACE, CORPUS, [HYBRID, TIER, RECENT, USER_THR], [0.55], TOKENS)
    m = A.attribute(TRACE, CORPUS, HYBRID, 0.55, seen[("hybrid1", 0.55)], ranks, top_n=4)
    # t0 returned at .5 < .55 (rank 4 <= 4): threshold; t1 rank 2, not returned: store; t3 passes but the
    # k=1 cap took t2: cap; t4 rank 5 > top 4: embedding; q3's gold t3 is said after q3: filter
    assert causes(m) == {"q1:t0": "threshold", "q1:t1": "store", "q1:t3": "cap", "q1:t4": "embedding", "q3:t3": "filter"}
    r = m.set_index(["question_id", "memory"]).loc[("q1", "c1|t3")]
    assert (r["exact_rank"], r["store_rank"], r["store_score"], r["threshold"], r["backend"]) == (3, 2, 0.7, 0.55, "ann")
    tier = A.attribute(TRACE, CORPUS, TIER, 0.55, seen[("tier", 0.55)], ranks, top_n=4)
    assert causes(tier)["q1:t3"] == "decay/tier"  # passed store and threshold, no cap: the policy dropped it
    recent = A.attribute(TRACE, CORPUS, RECENT, None, seen[("recent1", None)], ranks, top_n=4)
    assert causes(recent) == {"q1:t0": "policy", "q1:t1": "policy", "q1:t3": "policy", "q3:t3": "filter"}
    assert math.isnan(recent["threshold"].iloc[0])
    user_ranks = A.gold_ranks(USER_TRACE.table)
    user = A.attribute(USER_TRACE, CORPUS, USER_THR, 0.55, seen[("user_thr", 0.55)], user_ranks, top_n=4)
    assert causes(user) == {"q1:t0": "threshold", "q1:t1": "filter", "q1:t4": "filter", "q3:t3": "filter"}
    unknown = A.attribute(TRACE, CORPUS, HYBRID, 0.55, seen[("hybrid1", 0.55)], {}, top_n=4)
    assert causes(unknown)["q1:t1"] == "unreturned" and causes(unknown)["q1:t4"] == "threshold"


def test_counts_per_group():
    ranks = A.gold_ranks(TRACE.table)
    seen = A.replay(TRACE, CORPUS, [HYBRID], [0.55], TOKENS)
    m = A.attribute(TRACE, CORPUS, HYBRID, 0.55, seen[("hybrid1", 0.55)], ranks, top_n=4)
    by_strategy = A.counts(m, by=["strategy", "threshold"]).iloc[0]
    assert by_strategy["missed"] == 5
    assert [by_strategy[f"{c} miss"] for c in A.CAUSES] == [1, 0, 1, 0, 1, 1, 1, 0]
    by_cat = A.counts(m).set_index("category")
    assert by_cat.loc["single-hop", "missed"] == 4 and by_cat.loc["temporal", "filter miss"] == 1
    empty = A.counts(m.iloc[0:0])
    assert empty.empty and "embedding miss" in empty.columns


def test_a_threshold_that_is_not_a_similarity_misses_by_threshold():
    from bench.strategies import relative as X

    # relative_delta at delta .15 on q1 (hits t2 .8, t3 .7, t0 .5, t4 .3): keeps >= .65 -> t2, t3. The replay runs the
    # asked delta, not the strategy's own grid. Gold t0 returned, not kept -> "threshold" (a delta is not a similarity:
    # .5 >= .15 must not count as passing); t1 not returned, exact rank 2 -> "store"; t4 exact rank 5 > 4 -> "embedding".
    rel = StrategySpec("rel", X.relative_delta, thresholded=True, thresholds=(0.0, 0.25))
    assert rel.threshold_on == "delta"
    seen = A.replay(TRACE, CORPUS, [rel], [0.15], TOKENS)
    assert seen[("rel", 0.15)]["q1"] == ("c1|t2", "c1|t3")
    m = A.attribute(TRACE, CORPUS, rel, 0.15, seen[("rel", 0.15)], A.gold_ranks(TRACE.table), top_n=4)
    assert dict(zip(m[m.question_id == "q1"].memory, m[m.question_id == "q1"].cause)) == {
        "c1|t0": "threshold", "c1|t1": "store", "c1|t4": "embedding"}


def test_attribution_reads_the_token_counts_the_job_priced_with(tmp_path, monkeypatch):
    # the job's token-count cache holds 7 tokens per memory (a stand-in counter); attribution reads it, tokenising nothing
    from bench.data import tokens
    from bench.results.rundir import JobInputs
    from bench.selection.formats import token_table

    path = tokens.counts_file(tmp_path / "cache", "cl100k_base", "ab" * 32)
    monkeypatch.setattr(tokens, "count_tokens_many", lambda texts, encoding=None: [7] * len(list(texts)))
    count_many, save = tokens.cached_counter(path, "cl100k_base")
    token_table(CORPUS.turns(), count_many, ["A"])  # what bench.pipeline counts, into the cache file
    save()
    monkeypatch.setattr(tokens, "count_tokens_many", lambda texts, encoding=None: pytest.fail("tokenised again"))
    job = JobInputs(tmp_path, CORPUS, (TRACE,), (), "fake", "cl100k_base", token_counts=path)
    memo: dict = {}
    A.attribute_job(job, {}, memo=memo)
    assert memo[("tokens", id(CORPUS), "cl100k_base")] == {t.key: 7 for t in TURNS}
    missing = JobInputs(tmp_path, CORPUS, (TRACE,), (), "fake", "cl100k_base", token_counts=tmp_path / "absent.json")
    with pytest.raises(pytest.fail.Exception, match="tokenised again"):  # no cache file: counted as before
        A.attribute_job(missing, {}, memo={})


def test_attribution_reads_the_jobs_token_table_without_rendering_a_piece(tmp_path, monkeypatch):
    """With the job's whole token table beside its counts (bench.pipeline writes both), attribution takes the A counts
    from the table: no piece rendered, nothing hashed or tokenised, even with the counts file gone."""
    from bench.data import tokens
    from bench.results.rundir import JobInputs
    from bench.selection import formats as F

    path = tokens.counts_file(tmp_path / "cache", "cl100k_base", "cd" * 32)
    counts = F.count_pieces(CORPUS.turns(), lambda texts: [len(t) for t in texts])  # a stand-in counter: characters
    tokens.write_table(tokens.table_file(path), counts)
    want = {t.key: len(F.line_a(t)) for t in TURNS}
    monkeypatch.setattr(F, "line_a", lambda t: pytest.fail("rendered again"))
    monkeypatch.setattr(tokens, "count_tokens_many", lambda texts, encoding=None: pytest.fail("tokenised again"))
    memo: dict = {}
    A.attribute_job(JobInputs(tmp_path, CORPUS, (TRACE,), (), "fake", "cl100k_base", token_counts=path), {}, memo=memo)
    assert memo[("tokens", id(CORPUS), "cl100k_base")] == want and not path.exists()
