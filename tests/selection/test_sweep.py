"""Offline sweep over a hand-built trace: exact threshold labels, metrics per question, summary."""

import dataclasses
import functools
import math

import pandas as pd
import pytest

from bench.strategies import baselines as B
from bench.strategies import vector as V
from bench.strategies.spec import StrategySpec
from bench.selection.sweep import summarise, sweep, threshold_grid
from bench.replay.trace import Trace
from bench.types import Conversation, Corpus, Hit, Question, Turn


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
    StrategySpec("limit2", lambda h, **kw: V.limit(h, k=2, **kw), thresholded=False),
    StrategySpec("threshold", V.threshold, thresholded=True),
    StrategySpec("full_context", B.full_context, thresholded=False, uses_store=False),
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


# ---- formats, stateful replay, token inputs, routes, tiers, role filter --------------------------

from bench.selection import formats as F  # noqa: E402
from bench import metrics  # noqa: E402
from bench.strategies.spec import Selection  # noqa: E402
from bench.selection.sweep import format_tokens_table, replay_order  # noqa: E402


def chars(texts):
    return [len(t) for t in texts]


def test_rows_repeat_per_format_with_that_formats_tokens():
    table = F.token_table(CORPUS.turns(), chars)
    rows = sweep(TRACE, CORPUS, SPECS[:1], (), TOKENS, formats=("A", "B", "C"), format_tokens=table)
    assert list(rows["format"]) == ["A", "A", "B", "B", "C", "C"]
    q1 = rows[rows.question_id == "q1"].set_index("format")
    # limit2 on q1 selects t2, t1: every format priced by the table (characters of the rendered text), A too
    t = {x.turn_id: x for x in CORPUS.turns()}
    assert q1.loc["A", "tokens_injected"] == len("user: text 2\nassistant: text 1") == len(F.render("A", [t["t2"], t["t1"]]))
    assert q1.loc["B", "tokens_injected"] == len(F.render("B", [t["t2"], t["t1"]]))
    assert q1.loc["C", "tokens_injected"] == len(F.render("C", [t["t2"], t["t1"]]))
    assert q1.loc["C", "tokens_full"] == len(F.render("C", [t["t0"], t["t1"], t["t2"]]))
    assert (q1["recall"] == 0.5).all()  # the selection does not depend on the format
    fc = sweep(TRACE, CORPUS, [SPECS[-1]], (), TOKENS, formats=("A", "B", "C"), format_tokens=table)
    fc1 = fc[fc.question_id == "q1"].set_index("format")  # full context, priced once per view: the rendered text of every turn
    for f in "ABC":
        assert fc1.loc[f, "tokens_injected"] == fc1.loc[f, "tokens_full"] == len(F.render(f, [t["t0"], t["t1"], t["t2"]]))
    s = summarise(rows)
    assert list(s["format"]) == ["A", "B", "C"]
    with pytest.raises(ValueError, match="need format_tokens"):
        sweep(TRACE, CORPUS, SPECS[:1], (), TOKENS, formats=("A", "B"))


def _history(hits, *, question, eligible, threshold, state=None):
    seen = (state or ()) + (question.question_id,)
    return Selection((), route="|".join(seen), state=seen)


TIMED = Corpus(
    name="timed",
    conversations=(Conversation("c1", (turn(0, "user", 1.0),)), Conversation("c2", (Turn("c2", "t0", "user", "user", "x", 1.0, 0),))),
    questions=(
        Question("late", "c1", "?", 5.0, ("t0",)),
        Question("none", "c1", "?", None, ("t0",)),
        Question("early", "c1", "?", 1.0, ("t0",)),
        Question("other", "c2", "?", 2.0, ("t0",)),
    ),
)
TIMED_TRACE = Trace(
    pd.DataFrame({"question_id": ["late", "none", "early", "other"], "conversation_id": ["c1", "c1", "c1", "c2"],
                  "latency_ns": [1, 1, 1, 1], "hit_ids": [[]] * 4, "hit_scores": [[]] * 4, "exact_scores": [[]] * 4}),
    {"dataset": "timed", "embedder": "fake", "backend": "exact", "roles": None},
)


def test_stateful_strategies_replay_each_conversation_in_time_order():
    assert replay_order(TIMED.questions) == [2, 3, 0, 1]  # early (1.0), other (2.0), late (5.0), none (None = last)
    spec = StrategySpec("hist", _history, thresholded=True, stateful=True)
    rows = sweep(TIMED_TRACE, TIMED, [spec], (0.5, 0.9), {"c1|t0": 1, "c2|t0": 1})
    for t in (0.5, 0.9):  # a fresh state per threshold and per conversation
        r = rows[rows.threshold == t].set_index("question_id")["route"]
        assert r.to_dict() == {"late": "early|late", "none": "early|late|none", "early": "early", "other": "other"}
    assert list(rows["question_id"][:4]) == ["late", "none", "early", "other"]  # rows stay in trace order


def test_needs_tokens_passes_the_token_counts():
    spec = StrategySpec("budget", lambda h, **kw: V.token_budget(h, budget=25, **kw), thresholded=False, needs_tokens=True)
    rows = sweep(TRACE, CORPUS, [spec], (), TOKENS)
    # q1 hits t2 (30 tokens) first: over 25 -> nothing; q2 hits t3 (40): nothing either
    assert list(rows["n_selected"]) == [0, 0]
    spec = StrategySpec("budget", lambda h, **kw: V.token_budget(h, budget=55, **kw), thresholded=False, needs_tokens=True)
    assert list(sweep(TRACE, CORPUS, [spec], (), TOKENS)["tokens_injected"]) == [50, 50]  # q1: t2+t1 = 50 (t0 would be 60); q2: t3+t0 = 50


def _router(hits, *, question, eligible, threshold):
    return Selection(tuple(hits[:1]), route="first" if question.question_id == "q1" else "second")


def test_routes_get_summary_rows_with_their_share():
    rows = sweep(TRACE, CORPUS, [StrategySpec("router", _router, thresholded=False)], (), TOKENS)
    assert list(rows["route"]) == ["first", "second"]
    s = summarise(rows).set_index("strategy")
    assert list(s.index) == ["router", "router/first", "router/second"]
    assert list(s["question_share"]) == [1.0, 0.5, 0.5]
    assert list(s["route"]) == ["", "first", "second"]
    assert s.loc["router/first", "recall"] == 0.5  # q1: t2 of gold {t0, t2}
    assert s.loc["router/second", "n_questions"] == 0 and s.loc["router/second", "n_adversarial"] == 1


def _tiered(hits, *, question, eligible, threshold):
    # L1 = the last eligible turn, L2 = the best hit (if not already in L1)
    l1 = [Hit(eligible[-1].key, float("nan"))]
    l2 = [h for h in hits[:1] if h.id != l1[0].id]
    return Selection(tuple(l1 + l2), tiers=("L1",) * len(l1) + ("L2",) * len(l2))


def test_tier_columns_and_summary():
    rows = sweep(TRACE, CORPUS, [StrategySpec("tiered", _tiered, thresholded=False), SPECS[0]], (), TOKENS)
    q1 = rows[(rows.strategy == "tiered") & (rows.question_id == "q1")].iloc[0]
    # q1 sees t0..t2: L1 = t2 (gold), best hit = t2 too -> L2 empty
    assert (q1.n_selected, q1.l1_selected, q1.l1_correct, q1.n_correct) == (1, 1.0, 1.0, 1)
    assert math.isnan(rows[rows.strategy == "limit2"].iloc[0].l1_selected)
    s = summarise(rows).set_index("strategy")
    assert s.loc["tiered", "gold_via_l1"] == 0.5 and s.loc["tiered", "gold_via_l2"] == 0.0  # 1 of 2 gold via L1
    assert s.loc["tiered", "l2_noise_mean"] == 0.0 and s.loc["tiered", "noise_mean"] == 0.0
    assert math.isnan(s.loc["limit2", "gold_via_l1"])
    assert s.loc["limit2", "noise_mean"] == 1.0  # limit2 on q1: t2 gold, t1 not


def test_role_filtered_trace_sees_only_its_roles_but_full_context_counts_every_turn():
    user = Trace(TRACE.table, {**TRACE.meta, "roles": ["user"]})
    spec = StrategySpec("recent", lambda h, **kw: B.recency(h, k=5, **kw), thresholded=False, uses_store=False, roles=("user",))
    q1 = sweep(user, CORPUS, [spec], (), TOKENS).iloc[0]
    assert q1.n_selected == 2 and q1.tokens_injected == 40  # user turns t0, t2 (t1 is the assistant's)
    assert q1.tokens_full == 60  # but full context is every turn q1 may see: t0 + t1 + t2


def test_vectorised_metrics_equal_the_metric_functions():
    rows = sweep(TRACE, CORPUS, SPECS, (0.2, 0.5, 0.9), TOKENS)
    for r in rows.itertuples():
        n_sel, n_cor, n_gold = r.n_selected, r.n_correct, r.n_gold
        sel = [f"s{i}" for i in range(n_sel)]
        gold = sel[:n_cor] + [f"g{i}" for i in range(n_gold - n_cor)]
        for name in ("precision", "recall", "f1", "hit"):
            want, got = getattr(metrics, name)(selected=sel, gold=gold), getattr(r, name)
            assert (math.isnan(want) and math.isnan(got)) or want == got, (name, r)


def test_trace_question_missing_from_corpus_is_an_error():
    bad = Trace(TRACE.table.assign(question_id=["q1", "nope"]), TRACE.meta)
    with pytest.raises(ValueError, match="trace question 'nope' is not in corpus 'tiny'"):
        sweep(bad, CORPUS, SPECS, (0.5,), TOKENS)


def test_format_tokens_table_prices_the_seed_settings():
    table = F.token_table(CORPUS.turns(), chars)
    recs = format_tokens_table(TRACE, CORPUS, SPECS, TOKENS, table)
    got = {(r["strategy"], r["threshold"], r["format"]) for r in recs}
    assert ("threshold", 0.5, "B") in got and ("threshold", 0.1, "C") in got and ("full_context", None, "A") in got
    assert ("limit2", None, "A") not in got  # a lambda around limit: not a seed kind
    assert {r["threshold"] for r in recs if r["strategy"] == "threshold"} == {0.1, 0.3, 0.5, 0.7}
    fc = next(r for r in recs if r["strategy"] == "full_context" and r["format"] == "A")
    # q1 only (q2 is adversarial): t0..t2 as A lines, 12 + 1 + 17 + 1 + 12 characters
    assert fc["tokens_injected_mean"] == 43 and fc["token_savings"] == 0.0 and fc["kind"] == "full_context"


def test_format_seed_goes_by_what_a_strategy_is_not_its_name():
    table = F.token_table(CORPUS.turns(), chars)
    renamed = [StrategySpec("top5", functools.partial(V.limit, k=5), thresholded=False),
               StrategySpec("cut", V.threshold, thresholded=True),
               StrategySpec("everything", B.full_context, thresholded=False, uses_store=False),
               StrategySpec("threshold", functools.partial(V.hybrid, k=1), thresholded=True)]  # a hybrid named "threshold"
    recs = format_tokens_table(TRACE, CORPUS, renamed, TOKENS, table)
    got = {(r["strategy"], r["kind"]) for r in recs}
    assert got == {("top5", "limit"), ("cut", "threshold"), ("everything", "full_context")}
    assert {r["threshold"] for r in recs if r["strategy"] == "cut"} == {0.1, 0.3, 0.5, 0.7}


def test_kind_column_is_the_strategy_functions_name():
    specs = [StrategySpec("top2", functools.partial(V.limit, k=2), thresholded=False), SPECS[1], SPECS[2],
             StrategySpec("router", _router, thresholded=False)]
    rows = sweep(TRACE, CORPUS, specs, (0.5,), TOKENS)
    assert list(rows.columns[:8]) == ["dataset", "embedder", "backend", "layout", "strategy", "kind", "threshold", "format"]
    assert dict(zip(rows["strategy"], rows["kind"])) == {"top2": "limit", "threshold": "threshold",
                                                         "full_context": "full_context", "router": "_router"}
    s = summarise(rows)
    assert list(s.columns[:6]) == ["dataset", "embedder", "backend", "layout", "strategy", "kind"]
    # a route's own rows keep the router's kind
    assert dict(zip(s["strategy"], s["kind"])) == {"top2": "limit", "threshold": "threshold", "full_context": "full_context",
                                                   "router": "_router", "router/first": "_router", "router/second": "_router"}


def test_store_strategies_slice_columnar_hits_like_a_list():
    from bench.types import Hits

    h = Hits(("a", "b", "c", "d"), (0.9, 0.8, 0.7, 0.1))
    want = [Hit("a", 0.9), Hit("b", 0.8), Hit("c", 0.7), Hit("d", 0.1)]
    # threshold 0.75 keeps a, b; hybrid k=1 caps that at a; limit 3 takes a, b, c -- each a Hits slice, no Hit objects built
    for got, expect in ((V.threshold(h, threshold=0.75), want[:2]), (V.hybrid(h, threshold=0.75, k=1), want[:1]),
                        (V.limit(h, k=3), want[:3]), (V.threshold(h, threshold=0.95), [])):
        assert isinstance(got, Hits) and got == expect
    assert V.above(h, 0.1) == 4 and V.above(h, 0.8) == 2 and V.above(h, 0.95) == 0
    assert V.hybrid(want, threshold=0.75, k=1) == tuple(want[:1]) and V.threshold(want, threshold=0.75) == tuple(want[:2])  # plain list: tuples


# ---- questions without gold, exact format-A tokens, depth saturation ------------------------------

# CORPUS plus q3: not adversarial, asked after everything, no gold -> excluded from every quality column
NOGOLD = Corpus(name="tiny", conversations=CORPUS.conversations,
                questions=CORPUS.questions + (Question("q3", "c1", "who?", None, (), "open-domain"),))
NOGOLD_TRACE = Trace(
    pd.concat([TRACE.table, pd.DataFrame({
        "question_id": ["q3"], "conversation_id": ["c1"], "latency_ns": [6_000_000],
        "hit_ids": [["c1|t3", "c1|t1"]], "hit_scores": [[0.9, 0.7]], "exact_scores": [[0.9, 0.7]]})], ignore_index=True),
    TRACE.meta,
)


def test_a_question_without_gold_is_excluded_from_every_quality_column():
    s = summarise(sweep(NOGOLD_TRACE, NOGOLD, SPECS, (0.5,), TOKENS)).set_index("strategy")
    lim = s.loc["limit2"]
    # q1 alone: {t2, t1} of gold {t0, t2}: P .5, noise 1, 30 + 20 = 50 tokens of 60; q3 would add P 0, noise 2,
    # 40 + 20 = 60 tokens of 100, and q2 is adversarial
    assert (lim.n_questions, lim.n_excluded, lim.n_adversarial) == (1, 1, 1)
    assert (lim.precision, lim.recall, lim.f1, lim.micro_precision, lim.hit_rate, lim.empty_rate) == (0.5, 0.5, 0.5, 0.5, 1.0, 0.0)
    assert (lim.selected_mean, lim.noise_mean, lim.tokens_injected_mean, lim.tokens_full_mean) == (2.0, 1.0, 50.0, 60.0)
    assert lim.token_savings == pytest.approx(1 - 50 / 60)
    assert lim.latency_p50_ms == pytest.approx(4.0)  # latency: every query of the trace (2, 4 and 6 ms)
    fc = s.loc["full_context"]
    assert (fc.n_questions, fc.n_excluded, fc.tokens_full_mean, fc.tokens_injected_mean) == (1, 1, 60.0, 60.0)


def test_format_a_tokens_are_the_count_of_the_joined_text():
    from bench.data import tokens

    # cl100k: "assistant: hello world" 4 tokens, "user: I went hiking." 6; a newline after "world" is a token of
    # its own (198), after "hiking." it merges into ".\n" (627)
    conv = Conversation("c1", (Turn("c1", "t0", "assistant", "Bob", "hello world", 1.0, 0),
                               Turn("c1", "t1", "user", "Ann", "I went hiking.", 2.0, 1)))
    corpus = Corpus("hi", (conv,), (Question("q1", "c1", "?", None, ("t0",)),))
    trace = Trace(pd.DataFrame({"question_id": ["q1"], "conversation_id": ["c1"], "latency_ns": [1], "hit_ids": [["c1|t0", "c1|t1"]],
                                "hit_scores": [[0.9, 0.8]], "exact_scores": [[0.9, 0.8]]}),
                  {"dataset": "hi", "embedder": "fake", "backend": "exact", "roles": None})
    table = F.token_table(corpus.turns(), tokens.count_tokens_many)
    counts = dict(table.memory["A"])  # what the CLI passes as token_counts: per-line counts (4 and 6)
    rows = sweep(trace, corpus, [SPECS[0], SPECS[2]], (), counts, format_tokens=table)
    lim, fc = rows.iloc[0], rows.iloc[1]
    assert lim.tokens_injected == 4 + 1 + 6 == tokens.count_tokens("assistant: hello world\nuser: I went hiking.")  # 11, not 10
    assert fc.tokens_injected == fc.tokens_full == 11  # full context: every visible turn, in conversation order
    flipped = Trace(trace.table.assign(hit_ids=[["c1|t1", "c1|t0"]]), trace.meta)
    assert sweep(flipped, corpus, [SPECS[0]], (), counts, format_tokens=table).iloc[0].tokens_injected == 6 + 0 + 4  # ".\n" merges


# q1 sees t0..t2; the store returned 2 of them (t1, t0). q2 (adversarial) sees t0..t3; the store returned t3, t0.
SHALLOW = Trace(TRACE.table.assign(hit_ids=[["c1|t1", "c1|t0"], ["c1|t3", "c1|t0"]], hit_scores=[[0.55, 0.30], [0.45, 0.20]]), TRACE.meta)


def _l1_plus(n):
    # L1 = the last turn the question may see (never a hit here), then the first n hits as L2
    def fn(hits, *, question, eligible, threshold):
        return Selection((Hit(eligible[-1].key, float("nan")),) + tuple(hits[:n]), tiers=("L1",) + ("L2",) * len(hits[:n]))
    return fn


def test_depth_saturated_hand_worked():
    specs = [SPECS[1], SPECS[2], StrategySpec("l1_all", _l1_plus(9), thresholded=False), StrategySpec("l1_best", _l1_plus(1), thresholded=False)]
    rows = sweep(SHALLOW, CORPUS, specs, (0.1, 0.25, 0.5), TOKENS)
    sat = {(r.strategy, r.threshold if r.threshold == r.threshold else None, r.question_id): bool(r.depth_saturated) for r in rows.itertuples()}
    # threshold 0.1: q1 keeps t1, t0 = every candidate, and 2 < 3 visible turns -> a deeper search could add t2: True
    assert sat[("threshold", 0.1, "q1")] is True and sat[("threshold", 0.1, "q2")] is True  # q2: both of 2 < 4
    # threshold 0.25: q1 keeps both (0.55, 0.30) -> True; q2 keeps t3 only (0.20 < 0.25) -> False
    assert sat[("threshold", 0.25, "q1")] is True and sat[("threshold", 0.25, "q2")] is False
    # threshold 0.5: q1 keeps t1 only, q2 nothing -> False
    assert sat[("threshold", 0.5, "q1")] is False and sat[("threshold", 0.5, "q2")] is False
    assert not any(v for (name, _, _), v in sat.items() if name == "full_context")  # does not read the store
    # a tiered selection that adds its own L1 memory: l1_all keeps every candidate (3 selected, 2 returned) -> True;
    # l1_best keeps t2 + t1 (2 selected, as many as returned) but not t0 -> False
    assert sat[("l1_all", None, "q1")] is True and sat[("l1_best", None, "q1")] is False
    s = summarise(rows)
    assert s[s.strategy == "threshold"]["depth_saturated_rate"].tolist() == [1.0, 0.5, 0.0]


def test_not_depth_saturated_when_the_store_returned_every_visible_memory():
    # TRACE returns t2, t1, t0 for q1: all 3 turns q1 may see; taking all of them cannot be cut by the depth
    rows = sweep(TRACE, CORPUS, [SPECS[1]], (0.1,), TOKENS)
    q1 = rows[rows.question_id == "q1"].iloc[0]
    assert q1.n_selected == 3 and not q1.depth_saturated


def test_prefix_strategies_vectorised_equal_their_functions():
    """limit / threshold / hybrid take the sweep's vectorised path; wrapped in a lambda they are called one by one:
    the rows are identical, in every format, with unsorted, repeated and non-finite hits, an unsafe A line, a hit from
    another conversation, an id that is no memory, and token counts keyed in another order than the corpus's."""
    import numpy as np

    rng = np.random.default_rng(7)
    turns = tuple(Turn("c1", f"t{i}", "_tool" if i == 5 else ("user", "assistant")[i % 2], "s", f"text {i} " * (i % 4 + 1),
                       float(i), i, session=i // 4) for i in range(12))
    qs = tuple(Question(f"q{j}", "c1", "?", None if j % 3 else 8.0, tuple(f"t{g}" for g in rng.choice(12, 2, replace=False)),
                        adversarial=j == 4, answer=f"text {j}" if j % 2 else "") for j in range(9))  # answers: coverage columns too
    other = tuple(Turn("c2", f"t{i}", "user", "s", f"other {i}", float(i), i, session=0) for i in range(3))
    corpus = Corpus("rand", (Conversation("c1", turns), Conversation("c2", other)), qs)
    ids, scores = [], []
    for j in range(9):
        k = int(rng.integers(0, 12))
        pick = rng.choice(12, k, replace=False)
        s = sorted(rng.uniform(0, 1, k).round(2), reverse=True)
        if j == 6 and k > 2:
            s[0], s[1] = s[1], s[0]  # not sorted
        if j == 7 and k > 1:
            pick[1] = pick[0]  # a repeated id
        if j == 8 and k:
            s[-1] = float("nan")
        ids.append([f"c1|t{x}" for x in pick] + (["c2|t1"] if j == 5 else ["zz|t0"] if j == 3 else []))
        scores.append(list(s) + ([-0.5] if j in (3, 5) else []))
    trace = Trace(pd.DataFrame({"question_id": [q.question_id for q in qs], "conversation_id": ["c1"] * 9, "latency_ns": [1.0] * 9,
                                "hit_ids": ids, "hit_scores": scores, "exact_scores": scores}),
                  {"dataset": "rand", "embedder": "fake", "backend": "exact", "roles": None})
    table = F.token_table(corpus.turns(), chars)
    fast = [StrategySpec("limit", functools.partial(V.limit, k=3), thresholded=False),
            StrategySpec("threshold", V.threshold, thresholded=True),
            StrategySpec("hybrid", functools.partial(V.hybrid, k=2), thresholded=True)]
    slow = [StrategySpec(s.name, functools.partial(lambda h, _f=s.fn, **kw: _f(h, **kw)), thresholded=s.thresholded) for s in fast]
    from bench.selection.sweep import _prefix_rule

    assert all(_prefix_rule(s) is not None for s in fast) and all(_prefix_rule(s) is None for s in slow)
    grid = threshold_grid(0.1, 0.9, 0.05)
    counts = {t.key: len(t.text) for t in turns + other}
    for kw in ({"formats": ("A", "B", "C"), "format_tokens": table}, {"separator_tokens": 1}, {"separator_tokens": 1, "rev": True}):
        n = dict(reversed(counts.items())) if kw.pop("rev", False) else counts  # not the corpus's order: ids looked up in one table
        a = sweep(trace, corpus, fast, grid, n, **kw)
        b = sweep(trace, corpus, slow, grid, n, **kw)
        pd.testing.assert_frame_equal(a.drop(columns="kind"), b.drop(columns="kind"))
        assert len(a) == 9 * (1 + 17 + 17) * len(kw.get("formats", "A")) and a["n_selected"].sum() > 100
        assert a["answer_recall"].notna().sum() > 50 and 0 < a["answer_recall"].mean() < 1


def test_an_adversarial_question_with_gold_is_scored_as_adversarial_only():
    """q2 is adversarial but its source gave it gold t3 (the defect adversarial_with_gold): its rows carry no gold
    (n_gold 0, recall and F1 NaN, nothing counted correct), exactly as the same question without gold, and the
    summary is unchanged. Before, its limit2 row read recall 1.0 (t3 was its best hit)."""
    with_gold = dataclasses.replace(CORPUS, questions=(CORPUS.questions[0], dataclasses.replace(CORPUS.questions[1], evidence=("t3",))))
    rows, plain = sweep(TRACE, with_gold, SPECS, (0.5, 0.9), TOKENS), sweep(TRACE, CORPUS, SPECS, (0.5, 0.9), TOKENS)
    q2 = rows[rows.question_id == "q2"]
    assert (q2.n_gold == 0).all() and (q2.n_correct == 0).all() and q2.recall.isna().all() and q2.f1.isna().all()
    pd.testing.assert_frame_equal(rows, plain)
    pd.testing.assert_frame_equal(summarise(rows), summarise(plain))


def test_full_context_per_view_equals_calling_it_per_question():
    """full_context takes the sweep's per-view path (one selection per conversation and asked_at); wrapped in a lambda it
    is called question by question: identical rows and records, in every format, on a role-filtered trace too."""
    turns = tuple(Turn(c, f"t{i}", ("user", "assistant")[i % 2], "s", f"oslo {i} miso" if i % 3 else f"text {i}", float(i), i,
                       session=i // 3) for c in ("c1", "c2") for i in range(7))
    qs = tuple(Question(f"q{j}", ("c1", "c2")[j % 2], "?", (None, 3.0, 5.0)[j % 3], ("t1", "t4") if j != 4 else (),
                        adversarial=j == 5, answer=("oslo", "", "miso 4", "text 3")[j % 4]) for j in range(8))
    corpus = Corpus("views", (Conversation("c1", turns[:7]), Conversation("c2", turns[7:])), qs)
    hits = [[f"{q.conversation_id}|t{i}" for i in (2, 1)] for q in qs]
    table = F.token_table(corpus.turns(), chars)
    fast = [StrategySpec("full_context", B.full_context, thresholded=False, uses_store=False)]
    slow = [StrategySpec("full_context", lambda h, **kw: B.full_context(h, **kw), thresholded=False, uses_store=False)]
    from bench.selection.sweep import _is_full_context

    assert _is_full_context(fast[0]) and not _is_full_context(slow[0])
    for roles in (None, ["user"]):
        trace = Trace(pd.DataFrame({"question_id": [q.question_id for q in qs], "conversation_id": [q.conversation_id for q in qs],
                                    "latency_ns": [1.0] * 8, "hit_ids": hits, "hit_scores": [[0.9, 0.5]] * 8,
                                    "exact_scores": [[0.9, 0.5]] * 8}),
                      {"dataset": "views", "embedder": "fake", "backend": "exact", "roles": roles})
        rec_a, rec_b = {}, {}
        a = sweep(trace, corpus, fast, (0.5,), {t.key: len(t.text) for t in turns}, formats=("A", "B", "C"), format_tokens=table, record=rec_a)
        b = sweep(trace, corpus, slow, (0.5,), {t.key: len(t.text) for t in turns}, formats=("A", "B", "C"), format_tokens=table, record=rec_b)
        pd.testing.assert_frame_equal(a.drop(columns="kind"), b.drop(columns="kind"))
        assert rec_a == rec_b
        # q1 (c2, asked at 3.0) sees t0..t3; with roles=user t0, t2; gold t1: recalled only when assistants count
        q1 = a[(a.question_id == "q1") & (a.format == "A")].iloc[0]
        assert (q1.n_selected, q1.n_correct) == ((4, 1) if roles is None else (2, 0))
        assert a["answer_recall"].notna().sum() > 5
