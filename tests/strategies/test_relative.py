"""Thresholds that transfer: the calibrated, relative and adaptive strategies (bench.strategies.relative)
and the out-of-fold P(relevant) they read (bench.selection.relevance), on hand-worked fixtures."""

import math

import numpy as np
import pandas as pd
import pytest

from bench.selection import relevance as R
from bench.analysis import transfer as TR
from bench.strategies import relative as X
from bench.strategies.spec import StrategySpec
from bench.selection.sweep import sweep
from bench.replay.trace import Trace
from bench.types import Conversation, Corpus, Hit, Hits, Question, Turn

# scores chosen as exact binary fractions so every boundary below is exact
HITS = Hits(("m1", "m2", "m3", "m4", "m5"), (0.75, 0.625, 0.5, 0.25, 0.125))


def ids(sel):
    return [h.id for h in sel]


@pytest.mark.parametrize("delta, expected", [
    (0.0, ["m1"]),                      # only the best (>= 0.75)
    (0.125, ["m1", "m2"]),              # >= 0.625: inclusive
    (0.25, ["m1", "m2", "m3"]),         # >= 0.5
    (0.3, ["m1", "m2", "m3"]),          # >= 0.45
    (1.0, ["m1", "m2", "m3", "m4", "m5"]),
])
def test_relative_delta_keeps_everything_within_delta_of_the_best(delta, expected):
    assert ids(X.relative_delta(HITS, threshold=delta)) == expected
    assert ids(X.relative_delta(list(HITS), threshold=delta)) == expected  # plain Hit tuples too


@pytest.mark.parametrize("alpha, expected", [
    (1.0, ["m1"]),                       # >= 0.75 (ties with the best only)
    (0.8, ["m1", "m2"]),                 # >= 0.6
    (0.5, ["m1", "m2", "m3"]),           # >= 0.375
    (0.25, ["m1", "m2", "m3", "m4"]),    # >= 0.1875
    (0.125, ["m1", "m2", "m3", "m4", "m5"]),  # >= 0.09375
])
def test_relative_ratio_keeps_everything_above_alpha_times_the_best(alpha, expected):
    assert ids(X.relative_ratio(HITS, threshold=alpha)) == expected


def test_relative_cuts_edge_cases():
    assert ids(X.relative_delta(Hits(), threshold=0.1)) == [] and ids(X.relative_ratio(Hits(), threshold=0.5)) == []
    negative = Hits(("a", "b"), (-0.25, -0.5))
    assert ids(X.relative_ratio(negative, threshold=0.5)) == []  # best score <= 0: nothing to be relative to
    assert ids(X.relative_delta(negative, threshold=0.25)) == ["a", "b"]  # -0.5 >= -0.25 - 0.25
    with pytest.raises(ValueError, match="relative_delta: a threshold"):
        X.relative_delta(HITS, threshold=None)


def test_largest_gap_cuts_at_the_largest_drop_within_the_top_k():
    # gaps after m1..m4: 0.125, 0.125, 0.25, 0.125 -> largest after m3 -> keep m1..m3
    assert ids(X.largest_gap(HITS, k=10)) == ["m1", "m2", "m3"]
    # k=2: gaps after m1 and m2 only: 0.125, 0.125 -> the first -> keep m1
    assert ids(X.largest_gap(HITS, k=2)) == ["m1"]
    # k=3: gaps 0.125, 0.125, 0.25 (the gap after m3 counts: m4 exists) -> keep m1..m3
    assert ids(X.largest_gap(HITS, k=3)) == ["m1", "m2", "m3"]
    drop = Hits(("a", "b", "c"), (0.9, 0.3, 0.25))
    assert ids(X.largest_gap(drop, k=10)) == ["a"]
    assert ids(X.largest_gap(Hits(("a",), (0.5,)), k=5)) == ["a"] and ids(X.largest_gap(Hits(), k=5)) == []
    assert ids(X.largest_gap([Hit("a", 0.5), Hit("b", 0.1), Hit("c", 0.05)], k=5)) == ["a"]
    with pytest.raises(ValueError, match="k must be >= 1"):
        X.largest_gap(HITS, k=0)


def test_calibrated_threshold_keeps_the_hits_whose_probability_passes():
    p = [0.5, 0.25, 0.25, 0.0, 0.0]
    assert ids(X.calibrated_threshold(HITS, threshold=0.25, calibrated=p)) == ["m1", "m2", "m3"]  # inclusive
    assert ids(X.calibrated_threshold(HITS, threshold=0.3, calibrated=p)) == ["m1"]
    assert ids(X.calibrated_threshold(HITS, threshold=0.0, calibrated=p)) == ["m1", "m2", "m3", "m4", "m5"]
    assert ids(X.calibrated_threshold(HITS, threshold=0.0, calibrated=[math.nan] * 5)) == []  # undefined never passes
    assert ids(X.calibrated_threshold(HITS, threshold=0.2, calibrated=[0.1, 0.3, 0, 0.3, 0])) == ["m2", "m4"]  # not a prefix: still right
    with pytest.raises(ValueError, match="2 calibrated values for 5 hits"):
        X.calibrated_threshold(HITS, threshold=0.1, calibrated=[0.1, 0.2])


# --- bench.selection.relevance: PAV and the out-of-fold column ----------------------------------------------------

def test_isotonic_pools_adjacent_violators():
    xs, v = R.isotonic([1, 2, 3, 4], [0, 1, 0, 1])
    assert xs.tolist() == [1, 2, 3, 4] and v.tolist() == [0, 0.5, 0.5, 1]  # 1 then 0: pooled to 0.5
    xs, v = R.isotonic([3, 1, 1, 2], [1, 1, 0, 0])  # ties pooled first: x=1 -> 0.5 (weight 2); x=2 -> 0 violates: (1+0)/3
    assert xs.tolist() == [1, 2, 3] and np.allclose(v, [1 / 3, 1 / 3, 1])
    xs, v = R.isotonic([1, 2], [1, 0], w=[3, 1])  # weighted: (3*1 + 1*0) / 4
    assert np.allclose(v, [0.75, 0.75])
    xs, v = R.isotonic([], [])
    assert len(xs) == 0 and np.isnan(R.predict(xs, v, [0.5])).all()


def test_predict_is_the_step_of_the_largest_fitted_x_not_above():
    xs, v = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 0.5, 0.5, 1.0])
    assert R.predict(xs, v, [0.5, 1.0, 2.5, 4.0, 10.0]).tolist() == [0.0, 0.0, 0.5, 1.0, 1.0]


def _turns(conv, n):
    return tuple(Turn(conv, f"t{i}", "user", "u", f"{conv} turn {i}", float(i), i, 0) for i in range(1, n + 1))


# two conversations; q_a1's gold a|t1 scores 0.9, q_b1's gold b|t1 scores 0.8; q_adv is adversarial (never fitted on)
CORPUS = Corpus("two", (Conversation("a", _turns("a", 2)), Conversation("b", _turns("b", 3))), (
    Question("q_a1", "a", "?", None, ("t1",)),
    Question("q_adv", "a", "?", None, ("t2",), adversarial=True),
    Question("q_b1", "b", "?", None, ("t1",)),
))
TABLE = pd.DataFrame({
    "question_id": ["q_a1", "q_adv", "q_b1"], "conversation_id": ["a", "a", "b"], "latency_ns": [1, 1, 1],
    "hit_ids": [["a|t1", "a|t2"], ["a|t2"], ["b|t1", "b|t2", "b|t3"]],
    "hit_scores": [[0.9, 0.5], [0.7], [0.8, 0.6, 0.4]],
})


def test_out_of_fold_fits_on_the_other_conversations_only():
    p = R.out_of_fold(TABLE, CORPUS)
    # fold a (fitted on b: .4->0, .6->0, .8->1): .9 -> 1, .5 -> 0 (step of .4); q_adv .7 -> 0 (step of .6)
    assert p["q_a1"].tolist() == [1.0, 0.0] and p["q_adv"].tolist() == [0.0]
    # fold b (fitted on q_a1 only, q_adv excluded: .5->0, .9->1): .8, .6 -> 0; .4 below .5 -> the first step, 0
    assert p["q_b1"].tolist() == [0.0, 0.0, 0.0]
    assert R.folds(TABLE, CORPUS).tolist() == ["a", "a", "b"]


def test_out_of_fold_without_two_conversations_uses_question_folds_and_nan_without_training_data():
    one = Corpus("one", (Conversation("a", _turns("a", 2)),), (Question("q_a1", "a", "?", None, ("t1",)),))
    table = TABLE.iloc[:1]
    assert R.folds(table, one).tolist() == ["part0"]
    assert np.isnan(R.out_of_fold(table, one)["q_a1"]).all()  # its only fold has nothing to fit on: undefined


def test_the_sweep_feeds_the_calibrated_column_and_each_strategy_its_own_grid(tmp_path):
    trace = Trace(TABLE, {"dataset": "two", "embedder": "fake", "backend": "exact"})
    spec = StrategySpec("cal", X.calibrated_threshold, thresholded=True, calibrated=True, thresholds=(0.5,))
    delta = StrategySpec("rel", X.relative_delta, thresholded=True, thresholds=(0.0, 0.25))
    tokens = {t.key: 5 for c in CORPUS.conversations for t in c.turns}
    rows = sweep(trace, CORPUS, [spec, delta], (0.1, 0.2, 0.3), tokens)
    cal = rows[rows.strategy == "cal"].set_index("question_id")
    assert cal.threshold.unique().tolist() == [0.5]  # its own grid, not the run's
    assert cal.loc["q_a1", "n_selected"] == 1 and cal.loc["q_a1", "recall"] == 1.0
    assert cal.loc["q_b1", "n_selected"] == 0 and cal.loc["q_b1", "f1"] == 0.0
    rel = rows[rows.strategy == "rel"]
    assert sorted(rel.threshold.unique()) == [0.0, 0.25]
    # delta 0.25 on q_b1: >= 0.55 -> b|t1, b|t2
    assert rel[(rel.threshold == 0.25) & (rel.question_id == "q_b1")].n_selected.iloc[0] == 2
    # a given column is used as is (here: everything passes)
    given = {q: np.ones(len(h)) for q, h in zip(TABLE.question_id, TABLE.hit_ids)}
    rows = sweep(trace, CORPUS, [spec], (), tokens, calibrated=given)
    assert rows.set_index("question_id").loc["q_b1", "n_selected"] == 3
    with pytest.raises(ValueError, match="no calibrated scores for question 'q_b1'"):
        sweep(trace, CORPUS, [spec], (), tokens, calibrated={"q_a1": np.ones(2), "q_adv": np.ones(1)})


def test_the_cached_column_round_trips_and_is_refused_when_it_does_not_fit_the_trace(tmp_path):
    p = R.out_of_fold(TABLE, CORPUS)
    R.save(tmp_path / "c", p, {"key": "k"})
    back = R.load_checked(tmp_path / "c", TABLE)
    assert back is not None and all(np.array_equal(back[q], p[q]) for q in p)
    other = TABLE.assign(hit_ids=[["a|t1"], ["a|t2"], ["b|t1", "b|t2", "b|t3"]], hit_scores=[[0.9], [0.7], [0.8, 0.6, 0.4]])
    assert R.load_checked(tmp_path / "c", other) is None  # a row with another number of hits
    assert R.trace_digest(TABLE) != R.trace_digest(TABLE.assign(hit_scores=[[0.9, 0.5], [0.7], [0.8, 0.6, 0.41]]))


# --- bench.analysis.transfer: the regret arithmetic, worked by hand ------------------------------------


F1 = {  # embedder -> question -> F1 at (threshold .3, threshold .5, relative_delta .1, relative_delta .2)
    "A": {"q1": (0.2, 0.6, 0.5, 0.4), "q2": (0.4, 0.0, 0.5, 0.4), "q3": (0.9, 0.3, 0.2, 0.6)},
    "B": {"q1": (0.0, 0.8, 0.7, 0.1), "q2": (0.2, 0.6, 0.3, 0.1), "q3": (0.1, 0.7, 0.8, 0.4)},
}
SETTINGS = (("threshold", 0.3), ("threshold", 0.5), ("relative_delta", 0.1), ("relative_delta", 0.2))
CONV = {"q1": "c1", "q2": "c1", "q3": "c2", "q_adv": "c2"}


def transfer_rows():
    rows = []
    for emb, qs in F1.items():
        for qid, values in {**qs, "q_adv": (0.0,) * 4}.items():
            for (strategy, t), f1 in zip(SETTINGS + (("limit5", None),), values + (0.99,)):
                rows.append({"dataset": "d", "embedder": emb, "backend": "exact", "strategy": strategy,
                             "threshold": float("nan") if t is None else t, "question_id": qid, "conversation_id": CONV[qid],
                             "adversarial": qid == "q_adv", "n_gold": 0 if qid == "q_adv" else 1, "f1": f1})
    return pd.DataFrame(rows)


FAM = TR.families([{"name": "threshold", "kind": "threshold"}, {"name": "relative_delta", "kind": "relative_delta"},
                   {"name": "limit5", "kind": "limit"}, {"name": "thr_user", "kind": "threshold", "roles": ["user"]}])


def test_families_are_read_from_the_kinds_of_unfiltered_strategies():
    assert FAM == {"threshold": "cosine", "relative_delta": "relative δ"}


def test_leave_one_conversation_out_regret_by_hand():
    out, folds = TR.transfer(transfer_rows(), FAM)
    loco = out[(out.protocol == "loco") & (out.embedder == "A")].set_index("family")
    # fold c1 (train on c2 = q3): cosine picks .3 -> c1 mean (.2+.4)/2 = .3; delta picks .2 -> (.4+.4)/2 = .4; c1's best cosine .3
    # fold c2 (train on c1): cosine .3 and .5 tie at .3 -> the first, .3 -> q3 .9; delta picks .1 (.5) -> .2; c2's best cosine .9
    cos, rel = loco.loc["cosine"], loco.loc["relative δ"]
    assert cos.n_folds == 2 and cos.n_questions == 3  # q_adv is not scored
    assert cos.f1_held_out == pytest.approx(0.5) and cos.f1_hindsight == pytest.approx(0.5) and cos.regret == pytest.approx(0.0)
    assert rel.f1_held_out == pytest.approx((0.4 * 2 + 0.2) / 3) and rel.regret == pytest.approx(0.5 - 1 / 3)
    assert (rel.regret_min, rel.regret_max) == (pytest.approx(-0.1), pytest.approx(0.7))
    assert (rel.param_min, rel.param_max) == (0.1, 0.2) and rel.strategy == "relative_delta"
    assert rel.f1_best_fixed == pytest.approx(0.5) and rel.regret_vs_fixed == pytest.approx(0.5 - 1 / 3)
    assert rel.f1_in_sample == pytest.approx(1.4 / 3)
    f = folds[(folds.embedder == "A") & (folds.family == "relative δ")].set_index("conversation_id")
    assert f.loc["c1", "param"] == 0.2 and f.loc["c2", "param"] == 0.1 and f.loc["c2", "regret"] == pytest.approx(0.7)


def test_across_embedders_regret_by_hand():
    out, _ = TR.transfer(transfer_rows(), FAM)
    emb = out[out.protocol == "embedders"].set_index(["source", "embedder", "family"])
    # A -> B: cosine chosen on A = .3 (A mean .5) -> B .1; B's best cosine in hindsight .5 -> .7: regret .6
    r = emb.loc[("A", "B", "cosine")]
    assert (r.param_min, r.f1_held_out, r.f1_hindsight, r.regret) == (0.3, pytest.approx(0.1), pytest.approx(0.7), pytest.approx(0.6))
    # A -> B: delta chosen on A = .2 (A mean 1.4/3 > 1.2/3) -> B .2: regret .5; B's own best delta .6
    r = emb.loc[("A", "B", "relative δ")]
    assert (r.param_min, r.f1_held_out, r.regret, r.f1_in_sample) == (0.2, pytest.approx(0.2), pytest.approx(0.5), pytest.approx(0.6))
    # B -> A: cosine .5 (B .7) -> A .3, A's best fixed .5: regret .2; delta .1 (B .6) -> A .4: regret .1
    assert emb.loc[("B", "A", "cosine")].regret == pytest.approx(0.2)
    assert emb.loc[("B", "A", "relative δ")].regret == pytest.approx(0.1)
    assert len(emb) == 4 and list(out.columns) == TR.COLUMNS


def test_one_conversation_or_no_cosine_reference_gives_no_loco_row():
    rows = transfer_rows()
    one = rows[rows.conversation_id == "c1"]
    out, folds = TR.transfer(one[one.embedder == "A"], FAM)
    assert out.empty and folds.empty
    out, _ = TR.transfer(rows[rows.strategy != "threshold"], {"relative_delta": "relative δ"})
    assert out.empty  # nothing to compare with: no raw cosine threshold in the run


def test_the_sweep_command_caches_the_calibrated_column_by_content(tmp_path):
    from types import SimpleNamespace as NS

    from bench import pipeline

    job = NS(corpus=CORPUS, corpus_sha="sha-of-the-corpus")
    first, rec1 = pipeline.get_calibrated(job, tmp_path, Trace(TABLE, {}))
    again, rec2 = pipeline.get_calibrated(job, tmp_path, Trace(TABLE, {}))
    assert (rec1["status"], rec2["status"]) == ("miss", "hit") and rec1["key"] == rec2["key"]
    assert all(np.array_equal(first[q], again[q]) for q in first)
    moved = TABLE.assign(hit_scores=[[0.9, 0.5], [0.7], [0.8, 0.6, 0.45]])  # another measurement: another key
    _, rec3 = pipeline.get_calibrated(job, tmp_path, Trace(moved, {}))
    assert rec3["status"] == "miss" and rec3["key"] != rec1["key"]
    _, rec4 = pipeline.get_calibrated(NS(corpus=CORPUS, corpus_sha="other labels"), tmp_path, Trace(TABLE, {}))
    assert rec4["status"] == "miss"


# --- across corpora: chosen on corpus x, scored on corpus y (and back), worked by hand ------------------

CORPORA = {  # dataset -> question -> (conversation, F1 at threshold .3, .5, calibrated .5, .8)
    "x": {"q1": ("x1", 0.6, 0.4, 0.8, 0.2), "q2": ("x1", 0.4, 0.2, 0.6, 0.4), "q3": ("x2", 0.5, 0.3, 0.7, 0.0)},
    "y": {"p1": ("y1", 0.2, 0.6, 0.1, 0.5), "p2": ("y1", 0.0, 0.4, 0.3, 0.7), "p3": ("y2", 0.4, 0.8, 0.2, 0.6),
          "p4": ("y3", 0.4, 0.6, 0.2, 0.6)},
}
GOLD = {"x": ((1, 10), (2, 10), (1, 20)), "y": ((1, 4),) * 4}  # (n_gold, memories a question can recall) per question
T975 = {1: 12.706204736174707, 2: 4.302652729911275}  # Student's t 0.975 quantile by degrees of freedom


def corpora_rows(datasets=CORPORA):
    rows = []
    for ds, qs in datasets.items():
        for (qid, (conv, *values)), (gold, memories) in zip(qs.items(), GOLD[ds[0]]):
            base = {"dataset": ds, "embedder": "e", "backend": "exact", "question_id": qid, "conversation_id": conv,
                    "adversarial": False, "n_gold": gold}
            for (strategy, kind, t), f1 in zip((("threshold", "threshold", 0.3), ("threshold", "threshold", 0.5),
                                                ("calibrated", "calibrated_threshold", 0.5), ("calibrated", "calibrated_threshold", 0.8)), values):
                rows.append({**base, "strategy": strategy, "kind": kind, "threshold": t, "f1": f1, "n_selected": 1})
            rows.append({**base, "strategy": "full_context", "kind": "full_context", "threshold": float("nan"), "f1": 0.1,
                         "n_selected": memories})
    return pd.DataFrame(rows)


CFAM = {"threshold": "cosine", "calibrated": "calibrated"}


def test_across_corpora_regret_and_its_interval_by_hand():
    out, _ = TR.transfer(corpora_rows(), CFAM)
    t = out[out.protocol == "corpora"].set_index(["source", "dataset", "family"])
    assert len(t) == 4
    # x -> y, cosine: x chooses .3 (x means .5 vs .3); y at .3 = (.2+0+.4+.4)/4 = .25; y's best cosine .5 = 2.4/4 = .6: regret .35
    # per-question regret (.6 - .2, .4 - 0, .8 - .4, .6 - .4) = (.4, .4, .4, .2); clusters y1 (sum .8, n 2), y2 (.4, 1), y3 (.2, 1)
    # residuals s - .35 n = (.1, .05, -.15): se^2 = 3/2 * .035 / 4^2; t with 2 df
    r = t.loc[("x", "y", "cosine")]
    half = T975[2] * np.sqrt(1.5 * 0.035 / 16)
    assert (r.param_min, r.f1_held_out, r.f1_hindsight, r.regret) == (0.3, pytest.approx(0.25), pytest.approx(0.6), pytest.approx(0.35))
    assert (r.regret_lo, r.regret_hi) == (pytest.approx(0.35 - half), pytest.approx(0.35 + half)) and r.n_conversations == 3
    assert r.n_questions == 4 and np.isnan(r.n_folds)
    # x -> y, calibrated: x chooses p .5 (.7 vs .2); y at p .5 = .8/4 = .2: regret .4; its own best p (.8) gives .6
    # per-question (.5, .1, .6, .4): clusters (.6, 2), (.6, 1), (.4, 1); residuals (-.2, .2, 0): se^2 = 3/2 * .08 / 16
    r = t.loc[("x", "y", "calibrated")]
    half = T975[2] * np.sqrt(1.5 * 0.08 / 16)
    assert (r.param_min, r.f1_held_out, r.regret, r.f1_in_sample) == (0.5, pytest.approx(0.2), pytest.approx(0.4), pytest.approx(0.6))
    assert (r.regret_lo, r.regret_hi) == (pytest.approx(0.4 - half), pytest.approx(0.4 + half))
    # y -> x, cosine: y chooses .5 (.6); x at .5 = .3, x's best .3 = .5: regret .2, every question .2 -> interval [.2, .2]
    r = t.loc[("y", "x", "cosine")]
    assert (r.param_min, r.regret, r.regret_lo, r.regret_hi) == (0.5, pytest.approx(0.2), pytest.approx(0.2), pytest.approx(0.2))
    # y -> x, calibrated: y chooses p .8 (.6); x at .8 = .2: regret .3; per question (.4, 0, .5), clusters x1 (.4, 2), x2 (.5, 1)
    # residuals (-.2, .2): se^2 = 2/1 * .08 / 3^2, t with 1 df: two conversations give a wide interval, never their min-max
    r = t.loc[("y", "x", "calibrated")]
    half = T975[1] * np.sqrt(2 * 0.08 / 9)
    assert (r.regret, r.regret_lo, r.regret_hi) == (pytest.approx(0.3), pytest.approx(0.3 - half), pytest.approx(0.3 + half))
    # base rates from the full-context selections: x 4 gold / 40 memories, y 4 / 16
    assert (r.gold_share, r.source_gold_share, r.gold_per_question) == (pytest.approx(0.1), pytest.approx(0.25), pytest.approx(4 / 3))
    rates = TR.base_rates(corpora_rows()).set_index("dataset")
    assert rates.loc["y", "memories_per_question"] == 4 and rates.loc["x", "gold_share"] == pytest.approx(0.1)


def test_two_releases_of_the_same_conversations_are_not_two_corpora():
    relabelled = {"x": CORPORA["x"], "x_2025": {q: ("x1" if q != "q3" else "x2", *v[1:]) for q, v in CORPORA["x"].items()}}
    out, _ = TR.transfer(corpora_rows(relabelled), CFAM)
    assert not (out.protocol == "corpora").any()  # label robustness, not transfer: no "another corpus" row
    assert set(out.protocol) == {"loco"}


def test_the_report_calls_loco_stability_and_measures_transfer_across_corpora():
    from types import SimpleNamespace as NS

    from bench.report import markdown

    rows = corpora_rows()
    out, _ = TR.transfer(rows, CFAM)
    text = "\n".join(markdown.thresholds_transfer_section(NS(transfer=out, embedders=None, cfg=NS(confidence=0.95))))
    heads = [h for h in text.splitlines() if h.startswith("#")]
    assert "### Transfer to another corpus" in heads
    assert "### Stability across conversations of this corpus (leave one conversation out)" in heads
    assert not any("transfer" in h.lower() and "conversation out" in h.lower() for h in heads)  # LOCO is not called transfer
    assert "| x → y | e | exact | calibrated | P ≥ 0.5 | 0.200 | 0.600 | 0.400 [" in text  # the regret with its t interval
    assert "x 1.33 gold per question, 10.00% of the memories" in text and "y 1.00 gold per question, 25.00% of the memories" in text


def test_readme_says_what_was_measured_not_what_was_hoped():
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("### Comparing embedders, and thresholds that transfer")[1].split("\n### ")[0]
    assert "carry over from one" not in section  # the promise nothing measured
    assert "stability across conversations of this corpus" in section and "dataset=locomo,longmemeval_oracle" in section
    assert "leave-one-conversation-out transfer" not in readme
