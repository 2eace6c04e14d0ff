"""Runner on a tiny hand-built corpus: trace contents, filters, warm-up discarded, streaming ingest, store metrics."""

import json

import numpy as np
import pytest

from bench.backends.exact import ExactBackend
from bench.embedders.base import EmbedderCapabilities, TwoSided
from bench.replay.trace import (
    TRACE_COLUMNS,
    Trace,
    batches,
    build_trace,
    embed_texts,
    exact_top,
    store_metrics,
)
from bench.types import Conversation, Corpus, Hits, Question, Turn, Where

# 2-d unit vectors chosen by hand; cosines with q=(1,0) are the x components.
VEC = {
    "a0": (1.0, 0.0), "a1": (0.6, 0.8), "a2": (0.8, 0.6), "a3": (0.0, 1.0), "a4": (0.6, -0.8),
    "b0": (1.0, 0.0), "b1": (0.8, -0.6),
    "qa": (1.0, 0.0), "qb": (0.0, 1.0), "qlate": (1.0, 0.0),
}


class FakeEmbedder(TwoSided):
    model_id = "fake-2d"
    identity = {"model_id": "fake-2d"}
    dim = 2
    capabilities = EmbedderCapabilities(for_results=False)

    def __init__(self):
        self.calls = []

    def embed(self, texts):
        self.calls.append(len(texts))
        return np.array([VEC[t] for t in texts], dtype=np.float32)


def t(conv, i, role, ts):
    return Turn(conv, f"t{i}", role, role, f"{conv}{i}", ts, i)


# ca: five turns at ts 1..5 (a4 is the latest); cb: two turns. q1 asked at ts 3 sees a0..a2 only.
CORPUS = Corpus(
    "tiny",
    (Conversation("a", (t("a", 0, "user", 1.0), t("a", 1, "assistant", 2.0), t("a", 2, "user", 3.0),
                        t("a", 3, "assistant", 4.0), t("a", 4, "user", 5.0))),
     Conversation("b", (t("b", 0, "user", 1.0), t("b", 1, "assistant", 2.0)))),
    (Question("q1", "a", "qa", 3.0, ("t2",)), Question("q2", "a", "qb", None, ("t3",)), Question("q3", "b", "qlate", None, ("t1",))),
)


class Spy(ExactBackend):
    """The exact store, recording every add() batch size and every search() question vector."""

    def __init__(self):
        super().__init__()
        self.added, self.searched = [], []

    def add(self, batch):
        self.added.append(len(batch.ids))
        super().add(batch)

    def search(self, vector, *, k, where):
        self.searched.append((tuple(np.round(vector, 3)), where.conversation_id))
        return super().search(vector, k=k, where=where)


@pytest.fixture(scope="module")
def traced():
    spy = Spy()
    trace = build_trace(CORPUS, FakeEmbedder(), spy, depth=3, warmup=2, batch_size=3, progress=False)
    return trace, spy


def test_trace_rows_hand_worked(traced):
    trace, _ = traced
    tab = trace.table.set_index("question_id")
    assert list(trace.table.columns) == TRACE_COLUMNS and list(trace.table["question_id"]) == ["q1", "q2", "q3"]
    # q1 = (1,0) at ts 3: a0 (1.0), a2 (0.8), a1 (0.6); a3/a4 are later, conversation b is filtered out
    assert tab.loc["q1", "hit_ids"] == ["a|t0", "a|t2", "a|t1"]
    np.testing.assert_allclose(tab.loc["q1", "hit_scores"], [1.0, 0.8, 0.6], atol=1e-6)
    np.testing.assert_allclose(tab.loc["q1", "exact_scores"], [1.0, 0.8, 0.6], atol=1e-6)
    # q2 = (0,1) after everything, depth 3: a3 (1.0), a1 (0.8), a2 (0.6)
    assert tab.loc["q2", "hit_ids"] == ["a|t3", "a|t1", "a|t2"]
    # q3 in conversation b only: b0 (1.0), b1 (0.8) -- fewer than depth because b has two turns
    assert tab.loc["q3", "hit_ids"] == ["b|t0", "b|t1"]
    assert (trace.table["latency_ns"] > 0).all()
    # each gold memory's exact rank among what the question may see (not limited by the depth):
    # q1's a2 (.8) after a0 (1.0); q2's a3 (1.0) first of five; q3's b1 (.8) after b0 (1.0)
    assert tab["gold_ids"].tolist() == [["a|t2"], ["a|t3"], ["b|t1"]]
    assert tab["gold_exact_ranks"].tolist() == [[2], [1], [2]]


def test_trace_cache_check_rejects_a_trace_without_the_gold_rank_columns(tmp_path, traced):
    trace, _ = traced
    trace.save(tmp_path / "new")
    loaded, problem = Trace.load_checked(tmp_path / "new", CORPUS)
    assert problem == "" and loaded.table["gold_exact_ranks"].tolist() == [[2], [1], [2]]
    old = Trace(trace.table.drop(columns=["gold_ids", "gold_exact_ranks"]), trace.meta)  # written by an older version
    old.save(tmp_path / "old")
    loaded, problem = Trace.load_checked(tmp_path / "old", CORPUS)
    assert loaded is None and problem.startswith("columns [") and "gold_exact_ranks" in problem


def test_save_copy_copies_a_cached_trace_or_writes_it_anew(tmp_path, traced):
    trace, _ = traced
    trace.save(tmp_path / "cache")
    loaded, _ = Trace.load_checked(tmp_path / "cache", CORPUS)
    Trace(loaded.table, {**loaded.meta, "reused_from": str(tmp_path / "cache")}).save_copy(tmp_path / "cache", tmp_path / "run")
    assert (tmp_path / "run" / "trace.parquet").read_bytes() == (tmp_path / "cache" / "trace.parquet").read_bytes()
    copied, problem = Trace.load_checked(tmp_path / "run", CORPUS)
    assert problem == "" and copied.meta["reused_from"] == str(tmp_path / "cache") and copied.table.equals(loaded.table)
    other = Trace(loaded.table.assign(latency_ns=loaded.table["latency_ns"] + 1), loaded.meta)
    other.save(tmp_path / "other")  # the source file changed since it was loaded: its sha256 no longer matches
    meta = json.loads((tmp_path / "cache" / "trace_meta.json").read_text())
    (tmp_path / "other" / "trace_meta.json").write_text(json.dumps(meta))
    loaded.save_copy(tmp_path / "other", tmp_path / "run2")
    again, problem = Trace.load_checked(tmp_path / "run2", CORPUS)
    assert problem == "" and again.table.equals(loaded.table)  # written from the table, not copied


def test_warmup_queries_run_first_and_are_not_in_the_trace(traced):
    trace, spy = traced
    # 2 warm-up searches (questions 1 and 2) + 3 timed ones; the trace has 3 rows
    assert len(spy.searched) == 5 and len(trace.table) == 3
    assert spy.searched[:2] == spy.searched[2:4]
    assert trace.meta["warmup_queries"] == 2


def test_streaming_ingest_batches_and_meta(traced):
    trace, spy = traced
    assert spy.added == [3, 3, 1]  # 7 turns in batches of 3
    m = trace.meta
    assert m["ingest_batches"] == 3 and m["ingest_batch_size"] == 3 and m["n_memories"] == 7
    assert m["store_search_seconds"] == pytest.approx(trace.table["latency_ns"].sum() / 1e9)
    assert m["search_loop_seconds"] >= m["store_search_seconds"] and m["harness_ns_per_query"] >= 0
    # fidelity@10 with depth 3: q1 3/3, q2 3 of its 5 visible rows, q3 2/2 -> (1 + 0.6 + 1) / 3; never short of min(depth, visible)
    assert m["fidelity_at_10"] == pytest.approx(2.6 / 3) and m["short_result_rate"] == 0.0 and m["score_mismatches_1e4"] == 0
    assert m["score_pairs"] == 8  # 3 + 3 + 2 hits


def test_batches_are_lazy_views():
    turns = CORPUS.turns()
    vecs = np.arange(14, dtype=np.float32).reshape(7, 2)
    gen = batches(turns, vecs, 3)
    assert not isinstance(gen, (list, tuple))
    first = next(gen)
    assert first.ids == ("a|t0", "a|t1", "a|t2") and np.shares_memory(first.vectors, vecs)  # no copy
    assert [len(b.ids) for b in gen] == [3, 1]
    with pytest.raises(ValueError, match="batch size must be positive"):
        list(batches(turns, vecs, 0))


def test_role_filter_pushed_down():
    trace = build_trace(CORPUS, FakeEmbedder(), ExactBackend(), depth=5, roles=("user",), warmup=0, progress=False)
    tab = trace.table.set_index("question_id")
    assert tab.loc["q1", "hit_ids"] == ["a|t0", "a|t2"]  # a1 is the assistant's
    assert tab.loc["q2", "hit_ids"] == ["a|t2", "a|t0", "a|t4"]  # (0,1): a2 .6, a0 0, a4 -.8
    assert trace.meta["roles"] == ["user"]
    # gold under the same filter: q1's a2 after a0; q2's a3 and q3's b1 are the assistant's (0: hidden)
    assert tab["gold_exact_ranks"].tolist() == [[2], [0], [0]]


def test_embed_texts_in_chunks():
    e = FakeEmbedder()
    out = embed_texts(e, ["a0", "a1", "a2", "a3", "a4"], side="documents", chunk=2)
    assert e.calls == [2, 2, 1]
    np.testing.assert_array_equal(out, np.array([VEC[k] for k in ["a0", "a1", "a2", "a3", "a4"]], dtype=np.float32))


def test_store_metrics_catch_a_bad_store():
    """A store that drops the best row, misorders and mis-scores: fidelity, short results and score gaps show it."""
    tv = np.array([VEC[x.text] for x in CORPUS.turns()], dtype=np.float32)
    qv = np.array([VEC[q.text] for q in CORPUS.questions], dtype=np.float32)
    import pandas as pd

    table = pd.DataFrame({
        "question_id": ["q1", "q2", "q3"], "conversation_id": ["a", "a", "b"], "latency_ns": [1, 1, 1],
        "hit_ids": [["a|t2", "a|t1"], ["a|t3", "a|t1", "a|t2", "a|t0", "a|t4"], ["b|t1", "b|t0"]],
        "hit_scores": [[0.8, 0.6], [1.0, 0.8, 0.6, 0.0, -0.8], [0.9, 1.0]],  # b|t1 is really 0.8
        "exact_scores": [[0.8, 0.6], [1.0, 0.8, 0.6, 0.0, -0.8], [0.8, 1.0]],
    })
    m = store_metrics(table, CORPUS, tv, qv, roles=None, k=2, depth=5)
    # q1: exact top-2 {a0, a2}, store top-2 {a2, a1} -> 1/2; q2 and q3 complete -> mean (0.5 + 1 + 1) / 3
    assert m["fidelity_at_2"] == pytest.approx(2.5 / 3)
    assert m["short_result_rate"] == pytest.approx(1 / 3)  # q1 returned 2 of the 3 rows it may see
    assert m["short_results"] == 1 and m["short_example"] == "question 'q1': 2 hits of 3 asked (3 eligible)"
    assert m["eligible_median"] == 3.0  # q1 sees 3 rows, q2 5, q3 2
    assert m["score_max_abs_diff"] == pytest.approx(0.1, abs=1e-6) and m["score_mismatches_1e4"] == 1
    assert m["score_pairs"] == 9


def test_exact_top_breaks_ties_by_key():
    tv = np.array([VEC[x.text] for x in CORPUS.turns()], dtype=np.float32)
    qv = np.array([VEC[q.text] for q in CORPUS.questions], dtype=np.float32)
    tv[2] = tv[0]  # a2 ties with a0 at cosine 1.0 for q1
    assert exact_top(CORPUS, tv, qv, roles=None, k=2)[0] == ["a|t0", "a|t2"]
    assert exact_top(CORPUS, tv, qv, roles=("assistant",), k=9)[1] == ["a|t3", "a|t1"]


def test_hits_outside_the_corpus_get_nan_exact_scores():
    from bench.replay.trace import exact_pass

    tv = np.array([VEC[x.text] for x in CORPUS.turns()], dtype=np.float32)
    qv = np.array([VEC[q.text] for q in CORPUS.questions], dtype=np.float32)
    exact = exact_pass(CORPUS, tv, qv, [["ghost|t9", "a|t0"], [], []], [[0.5, 1.0], [], []], roles=None, k=1, depth=2)[0]
    assert np.isnan(exact[0][0]) and exact[0][1] == pytest.approx(1.0)


GOOD = ([["a|t0", "a|t2", "a|t1"], ["a|t3", "a|t1", "a|t2"], ["b|t0", "b|t1"]], [[1.0, 0.8, 0.6], [1.0, 0.8, 0.6], [1.0, 0.8]])


def _lie(q: int, ids=None, scores=None):
    hit_ids, hit_scores = [list(x) for x in GOOD[0]], [list(x) for x in GOOD[1]]
    if ids is not None:
        hit_ids[q] = ids
    if scores is not None:
        hit_scores[q] = scores
    return hit_ids, hit_scores


@pytest.mark.parametrize("roles, hits, line", [
    # q1 (conversation a, asked at ts 3: sees a0, a1, a2) and q3 (conversation b)
    (None, _lie(0, ids=["a|t0", "b|t0", "a|t2"]),
     "on 1 of 3 questions (1 filter ignored: conversation): question 'q1': hit 'b|t0' is from another conversation "
     "(filter conversation_id='a')"),
    (None, _lie(0, ids=["a|t0", "a|t4", "a|t2"]),
     "on 1 of 3 questions (1 filter ignored: time): question 'q1': hit 'a|t4' was said at 5, after the filter's before=3.0"),
    (("user",), ([["a|t0", "a|t2"], ["a|t2", "a|t0", "a|t4"], ["b|t0", "b|t1"]], [[1.0, 0.8], [0.6, 0.0, -0.8], [1.0, 0.8]]),
     # user turns only, but b1 is the assistant's
     "on 1 of 3 questions (1 filter ignored: role): question 'q3': hit 'b|t1' has role 'assistant' (filter roles=['user'])"),
    (None, _lie(2, ids=["b|t0", "ghost|t9"]),
     "on 1 of 3 questions (1 id outside the corpus): question 'q3': id 'ghost|t9' is not a memory of the corpus"),
    (None, _lie(1, scores=[1.7, 0.8, 0.6]),
     "on 1 of 3 questions (1 score out of range): question 'q2': hit 'a|t3' has similarity 1.7, outside [-1, 1]"),
    (None, _lie(1, scores=[float("nan"), 0.8, 0.6]),
     "on 1 of 3 questions (1 score out of range): question 'q2': hit 'a|t3' has similarity nan, outside [-1, 1]"),
    (None, _lie(1, scores=[0.6, 0.8, 1.0]),
     "on 1 of 3 questions (1 not best first): question 'q2': similarity 0.8 after 0.6"),
    (None, _lie(2, ids=["b|t0", "b|t0"]),
     "on 1 of 3 questions (1 id twice): question 'q3': id 'b|t0' twice"),
    (None, _lie(2, ids=["b|t0", "b|t1", "b|t0"], scores=[1.0, 0.8, 0.5]),  # k=3 asked: 3 hits is fine, one twice is not
     "on 1 of 3 questions (1 id twice): question 'q3': id 'b|t0' twice"),
])
def test_contract_violations_name_the_question_the_filter_and_the_hit(roles, hits, line):
    from bench.replay.trace import contract_violations

    assert contract_violations(CORPUS, *GOOD, roles=None, k=3) == ""
    assert contract_violations(CORPUS, *hits, roles=roles, k=3) == line
    assert contract_violations(CORPUS, *GOOD, roles=None, k=2) == (
        "on 2 of 3 questions (2 more than k): question 'q1': 3 hits for k=2; question 'q2': 3 hits for k=2")


def test_a_store_that_ignores_the_filter_fails_the_trace_with_one_line_naming_it():
    """Hand-worked: without a filter q1 (1, 0) gets a0 1.0, b0 1.0 (ties by key), a2 .8; q3 the same: a0 and a2 are
    conversation a's. The store is dropped and closed, and nothing is scored."""
    from bench.replay.trace import StoreContractError

    class NoFilter(ExactBackend):
        name = "exact+no_filter"

        def search(self, vector, *, k, where):
            return super().search(vector, k=k, where=Where())

    store = NoFilter()
    with pytest.raises(StoreContractError) as e:
        build_trace(CORPUS, FakeEmbedder(), store, depth=3, warmup=0, progress=False)
    assert str(e.value) == (
        "store exact+no_filter broke the search contract (bench/backends/base.py) on 2 of 3 questions "
        "(2 filter ignored: conversation): question 'q1': hit 'b|t0' is from another conversation (filter conversation_id='a'); "
        "question 'q3': hit 'a|t0' is from another conversation (filter conversation_id='b'); its results are not scored")
    assert len(store._ids) == 0  # dropped


def test_a_store_returning_a_plain_list_is_a_clear_error():
    class Old(ExactBackend):
        def search(self, vector, *, k, where):
            return list(super().search(vector, k=k, where=where))

    with pytest.raises(TypeError, match="exact: search\\(\\) returned list, not bench.types.Hits"):
        build_trace(CORPUS, FakeEmbedder(), Old(), depth=1, warmup=0, progress=False)


def test_bad_depth_is_a_clear_error():
    with pytest.raises(ValueError, match="search depth must be positive"):
        build_trace(CORPUS, FakeEmbedder(), ExactBackend(), depth=0, progress=False)
