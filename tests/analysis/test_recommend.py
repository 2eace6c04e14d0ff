"""bench.analysis.recommend: objectives, tie-breaking, CIs, threshold stability, LOCO, categories, transfer.

Fixture (hand-made per-question rows, expected values worked out beside them):
dataset ds1, conversations c1 = {q1, q2}, c2 = {q3, q4 (adversarial)}; strategy ``thr`` at 0.3/0.5,
strategy ``lim`` without a threshold.

      thr@0.3                      thr@0.5                        lim
q1    f1 .5 rec 1  tok 30          f1 1  rec 1  tok 10            f1 .5 tok 40
q2    f1 .4 rec .5 tok 30          f1 0  rec 0  tok 0 (empty)     f1 .5 tok 40
q3    f1 .6 rec 1  tok 90          f1 .2 rec .5 tok 20            f1 .5 tok 40
q4    adversarial: recalls 1 memory at 0.3, nothing at 0.5; lim recalls 5

Means over q1..q3: thr@0.3 F1 0.5, recall 2.5/3, tokens 50; thr@0.5 F1 0.4, recall 0.5, tokens 10;
lim F1 0.5, tokens 40 -> lim ties thr@0.3 on F1 and wins on tokens.
"""

import math

import numpy as np
import pandas as pd
import pytest

from bench import metrics
from bench.analysis.recommend import (
    METRICS,
    RecommendConfig,
    build_grids,
    choose,
    loco,
    neighbours,
    one_format,
    pareto_front,
    recommend,
)


def row(q, conv, cat, adv, strategy, t, f1, rec, prec, tok, empty, dataset="ds1"):
    return {"dataset": dataset, "embedder": "emb", "backend": "exact", "strategy": strategy, "threshold": t,
            "question_id": q, "conversation_id": conv, "category": cat, "adversarial": adv,
            "f1": f1, "recall": rec, "precision": prec, "tokens_injected": tok, "empty": empty,
            "latency_ns": 1e6, "n_gold": 0 if adv else 2, "n_selected": 0, "n_correct": 0, "hit": np.nan, "tokens_full": 100}


NAN = np.nan
ROWS = pd.DataFrame([
    row("q1", "c1", "single-hop", False, "thr", 0.3, 0.5, 1.0, 1 / 3, 30, 0.0),
    row("q2", "c1", "multi-hop", False, "thr", 0.3, 0.4, 0.5, 1 / 3, 30, 0.0),
    row("q3", "c2", "single-hop", False, "thr", 0.3, 0.6, 1.0, 3 / 7, 90, 0.0),
    row("q4", "c2", "adversarial", True, "thr", 0.3, NAN, NAN, 0.0, 20, 0.0),
    row("q1", "c1", "single-hop", False, "thr", 0.5, 1.0, 1.0, 1.0, 10, 0.0),
    row("q2", "c1", "multi-hop", False, "thr", 0.5, 0.0, 0.0, NAN, 0, 1.0),
    row("q3", "c2", "single-hop", False, "thr", 0.5, 0.2, 0.5, 0.125, 20, 0.0),
    row("q4", "c2", "adversarial", True, "thr", 0.5, NAN, NAN, NAN, 0, 1.0),
    row("q1", "c1", "single-hop", False, "lim", NAN, 0.5, 0.5, 0.5, 40, 0.0),
    row("q2", "c1", "multi-hop", False, "lim", NAN, 0.5, 0.5, 0.5, 40, 0.0),
    row("q3", "c2", "single-hop", False, "lim", NAN, 0.5, 0.5, 0.5, 40, 0.0),
    row("q4", "c2", "adversarial", True, "lim", NAN, NAN, NAN, 0.0, 40, 0.0),
])


def point(rec, strategy):
    return rec.points[rec.points["strategy"] == strategy].iloc[0]


def f1cfg(**changes) -> RecommendConfig:
    """Plain max F1, no recall target: the objective these hand-worked cases were written for (the shipped default is
    min_tokens with min_recall 0.7, test_defaults_come_from_the_shipped_yaml_only and tests/analysis/test_first_screen.py)."""
    return RecommendConfig.defaults(**{"objective": "max_f1", "min_recall": None, **changes})


def test_config_validation_names_the_problem():
    with pytest.raises(ValueError, match="max_recall needs token_budget"):
        RecommendConfig.defaults(objective="max_recall")
    with pytest.raises(ValueError, match="min_tokens needs min_recall"):
        RecommendConfig.defaults(objective="min_tokens", min_recall=None)
    with pytest.raises(ValueError, match="objective must be one of"):
        RecommendConfig.defaults(objective="best")
    with pytest.raises(ValueError, match=r"conf.yaml: recommend has unknown key\(s\) \['objectve'\]"):
        RecommendConfig.from_mapping({"objectve": "max_f1"}, source="conf.yaml")
    with pytest.raises(ValueError, match="conf.yaml: .*min_recall must be in"):
        RecommendConfig.from_mapping({"objective": "min_tokens", "min_recall": 2}, source="conf.yaml")
    assert RecommendConfig.defaults(objective="max_recall", token_budget=300).describe() == "maximise recall subject to mean injected tokens <= 300"


def test_defaults_come_from_the_shipped_yaml_only(tmp_path, monkeypatch):
    """configs/recommend/default.yaml is the one copy: a partial block keeps the others' shipped values,
    ``seed: ${seed}`` follows config.yaml's seed, and an edited YAML changes the defaults."""
    import yaml

    from bench.analysis import recommend as R
    from bench.resources import configs_dir

    shipped = yaml.safe_load((configs_dir() / "recommend" / "default.yaml").read_text())
    d = RecommendConfig.defaults()
    assert d.n_resamples == shipped["n_resamples"] == 1000 and d.objective == shipped["objective"] == "min_tokens"
    assert d.min_recall == shipped["min_recall"] == 0.7 == d.usable_recall  # one recall target (usable_recall is retired)
    assert shipped["seed"] == "${seed}" and d.seed == yaml.safe_load((configs_dir() / "config.yaml").read_text())["seed"] == 0
    assert RecommendConfig.from_mapping({"alpha": 0.01}) == RecommendConfig.defaults(alpha=0.01)
    assert RecommendConfig.from_settings({"seed": 7, "recommend": {"n_resamples": 30}}) == RecommendConfig.defaults(seed=7, n_resamples=30)
    assert RecommendConfig.from_settings({"seed": 7, "recommend": {"seed": 2}}).seed == 2  # the block wins
    conf = tmp_path / "configs"
    (conf / "recommend").mkdir(parents=True)
    (conf / "config.yaml").write_text("seed: 5\n")
    (conf / "recommend" / "default.yaml").write_text(yaml.safe_dump({**shipped, "n_resamples": 77}))
    monkeypatch.setattr("bench.resources.configs_dir", lambda: conf)
    R._shipped.cache_clear()
    try:
        assert (RecommendConfig.defaults().n_resamples, RecommendConfig.defaults().seed) == (77, 5)
    finally:
        R._shipped.cache_clear()


def test_choose_objectives_and_ties():
    m = np.full((len(METRICS), 3), np.nan)
    i = {k: j for j, k in enumerate(METRICS)}
    m[i["f1"]] = [0.3, 0.5, 0.5]  # thresholds 0 and 1 ... f1 tie between columns 1 and 2
    m[i["tokens"]] = [100, 60, 40]
    m[i["recall"]] = [0.9, 0.7, 0.6]
    assert int(choose(m, f1cfg())) == 2  # F1 tie -> fewer tokens
    assert int(choose(m, f1cfg(objective="max_recall", token_budget=70))) == 1  # col 0 over budget
    assert int(choose(m, f1cfg(objective="min_tokens", min_recall=0.65))) == 1  # col 2 too little recall
    assert int(choose(m, f1cfg(objective="min_tokens", min_recall=0.95))) == -1  # infeasible
    assert int(choose(m, f1cfg(token_budget=50))) == 2
    batch = np.stack([m, m[:, ::-1]])  # leading batch axis
    assert choose(batch, f1cfg()).tolist() == [2, 0]


def test_pareto_front_hand_worked():
    cost = np.array([10, 20, 5, 20, np.nan, 30])
    benefit = np.array([0.5, 0.6, 0.5, 0.4, 1.0, 0.6])
    # by cost: (5, .5) front; (10, .5) dominated by it; (20, .6) front; (20, .4) no; (30, .6) no (not more); NaN never
    assert pareto_front(cost, benefit).tolist() == [False, True, True, False, False, False]


def test_point_estimates_match_metrics_aggregate():
    rec = recommend(ROWS, f1cfg(n_resamples=200))
    agg = metrics.aggregate(ROWS, ["strategy", "threshold"])
    thr = rec.curves[rec.curves["strategy"] == "thr"]
    for t in (0.3, 0.5):
        a = agg[(agg["strategy"] == "thr") & (agg["threshold"] == t)].iloc[0]
        c = thr[thr["threshold"] == t].iloc[0]
        for mine, theirs in (("f1", "f1"), ("recall", "recall"), ("precision", "precision"), ("tokens", "tokens_injected_mean"),
                             ("abstained", "adversarial_abstain_rate")):
            assert c[mine] == pytest.approx(a[theirs]), (t, mine)
    assert thr["f1"].tolist() == pytest.approx([0.5, 0.4])
    assert thr["precision"].tolist() == pytest.approx([(1 / 3 + 1 / 3 + 3 / 7) / 3, (1 + 0.125) / 2])  # NaN skipped
    # F1 with abstention credit: adversarial q4 scores its abstention (0 at 0.3, 1 at 0.5)
    assert thr["f1_abstain"].tolist() == pytest.approx([(0.5 + 0.4 + 0.6 + 0) / 4, (1 + 0 + 0.2 + 1) / 4])


def test_max_f1_choice_ci_and_best_across_configs():
    rec = recommend(ROWS, f1cfg(n_resamples=2000, seed=3))
    thr, lim = point(rec, "thr"), point(rec, "lim")
    assert thr["threshold"] == 0.3 and thr["f1"] == pytest.approx(0.5) and thr["tokens"] == pytest.approx(50)
    # t interval of F1 at 0.3 (2 conversations: 1 df, t = 12.71): c1 sum 0.9 over 2, c2 0.6 over 1, mean 0.5;
    # residuals -0.1, +0.1; se = sqrt(2/1 * 0.02) / 3 = 0.0667; 0.5 -+ 0.847 clipped to F1's range [0, 1]
    assert (thr["f1_lo"], thr["f1_hi"]) == (0.0, 1.0)
    # chosen threshold per resample: c1c1 -> 0.5 (means .45 vs .5), c1c2 -> 0.3, c2c2 -> 0.3: 0.3 in ~3/4
    assert abs(thr["threshold_share"] - 0.75) < 0.04
    assert (thr["threshold_lo"], thr["threshold_hi"]) == (0.3, 0.5)
    assert math.isnan(lim["threshold"]) and lim["f1"] == pytest.approx(0.5) and lim["tokens"] == 40
    assert (lim["f1_lo"], lim["f1_hi"]) == (0.5, 0.5)  # every question 0.5
    # tie on F1 (0.5) -> fewer tokens (40 < 50): lim is the dataset's recommendation
    assert rec.best()["strategy"].tolist() == ["lim"]
    assert thr["n_questions"] == 3 and thr["n_adversarial"] == 1 and thr["n_conversations"] == 2
    assert thr["abstained"] == 0.0 and point(rec, "lim")["abstained"] == 0.0


def test_intervals_are_t_based_with_a_prediction_interval_never_the_min_max_of_two_conversations():
    """Two conversations: the old default (percentile cluster bootstrap) printed the min-max of their means as a
    "95 % CI"; the default is now Student t with 1 df, and each point also carries a prediction interval."""
    from scipy import stats as sstats

    q = sstats.t.ppf(0.975, 1)  # 12.706
    thr = point(recommend(ROWS), "thr")
    # tokens at 0.3: c1 60 over 2, c2 90 over 1 -> mean 50; residuals 60 - 100 = -40, 90 - 50 = +40;
    # se = sqrt(2/1 * 3200) / 3 = 80/3; CI 50 -+ q * 80/3 = [-288.8, 388.8], clipped at 0 (tokens >= 0)
    assert thr["tokens_lo"] == 0.0 and thr["tokens_hi"] == pytest.approx(50 + q * 80 / 3)
    # prediction interval for a new corpus of 2 conversations: sqrt(1 + 2/2) wider
    assert thr["tokens_pred_lo"] == 0.0 and thr["tokens_pred_hi"] == pytest.approx(50 + q * 80 / 3 * 2 ** 0.5)
    assert thr["f1_pred_lo"] == 0.0 and thr["f1_pred_hi"] == 1.0  # 0.5 -+ 1.2, clipped to [0, 1]
    # one new conversation: sqrt(1 + 2/1) wider
    one = point(recommend(ROWS, f1cfg(new_conversations=1)), "thr")
    assert one["tokens_pred_hi"] == pytest.approx(50 + q * 80 / 3 * 3 ** 0.5)
    # the bootstrap is still selectable: its percentile interval is the min-max of c1c1 0.45, c1c2 0.5, c2c2 0.6
    boot = point(recommend(ROWS, f1cfg(ci_method="percentile", n_resamples=2000, seed=3)), "thr")
    assert (boot["f1_lo"], boot["f1_hi"]) == pytest.approx((0.45, 0.6))
    assert boot["f1_pred_hi"] == 1.0  # the prediction interval is t whatever ci_method says
    with pytest.raises(ValueError, match="new_conversations must be >= 1"):
        f1cfg(new_conversations=0)


def test_constrained_objectives():
    r = recommend(ROWS, f1cfg(objective="max_recall", token_budget=40, n_resamples=50))
    assert point(r, "thr")["threshold"] == 0.5 and point(r, "thr")["recall"] == pytest.approx(0.5)  # 0.3 costs 50
    assert point(r, "lim")["feasible"]  # 40 <= 40
    assert r.best()["strategy"].tolist() == ["thr"]  # recall 0.5 = lim's 0.5, fewer tokens (10)
    r = recommend(ROWS, f1cfg(objective="max_recall", token_budget=60, n_resamples=50))
    assert point(r, "thr")["threshold"] == 0.3 and r.best()["strategy"].tolist() == ["thr"]
    r = recommend(ROWS, f1cfg(objective="min_tokens", min_recall=0.8, n_resamples=50))
    assert point(r, "thr")["threshold"] == 0.3 and not point(r, "lim")["feasible"]
    r = recommend(ROWS, f1cfg(objective="min_tokens", min_recall=0.9, n_resamples=50))
    p = point(r, "thr")
    assert not p["feasible"] and math.isnan(p["threshold"]) and "constraints" in p["note"]
    assert r.best().empty
    r = recommend(ROWS, f1cfg(max_p99_ms=0.5, n_resamples=50))  # every store call took 1 ms
    assert not r.points["feasible"].any() and "p99 latency 1.0 ms > 0.5 ms" in point(r, "thr")["note"]
    r = recommend(ROWS, f1cfg(objective="max_f1_abstain", n_resamples=50))
    assert point(r, "thr")["threshold"] == 0.5 and point(r, "thr")["f1_abstain"] == pytest.approx(0.55)


def test_loco_hand_worked():
    grid = [g for g in build_grids(ROWS) if g.key[3] == "thr"][0]
    summary, folds = loco(grid, f1cfg())
    f = folds.set_index("conversation_id")
    # leave out c1: tune on c2 (F1 .6 at 0.3, .2 at 0.5) -> 0.3; train .6; c1 at 0.3 = (.5+.4)/2 = .45; gap .15;
    # c1's own best is 0.5 (F1 .5): regret .05
    assert f.loc["c1", "threshold"] == 0.3
    assert (f.loc["c1", "train"], f.loc["c1", "held_out"], f.loc["c1", "gap"]) == pytest.approx((0.6, 0.45, 0.15))
    assert (f.loc["c1", "held_out_best_threshold"], f.loc["c1", "regret"]) == (0.5, pytest.approx(0.05))
    # leave out c2: tune on c1 (.45 at 0.3, .5 at 0.5) -> 0.5; train .5; c2 at 0.5 = .2; gap .3; own best 0.3 (.6): regret .4
    assert f.loc["c2", "threshold"] == 0.5
    assert (f.loc["c2", "train"], f.loc["c2", "held_out"], f.loc["c2", "gap"], f.loc["c2", "regret"]) == pytest.approx((0.5, 0.2, 0.3, 0.4))
    assert f["n_questions"].tolist() == [2, 1]
    assert summary["mean_gap"] == pytest.approx(0.225)
    assert (summary["threshold_min"], summary["threshold_max"], summary["n_distinct_thresholds"]) == (0.3, 0.5, 2)
    assert summary["threshold_std"] == pytest.approx(0.1)
    # pooled held-out = (.45*2 + .2*1)/3; in-sample = .5 at 0.3; optimism = .5 - 1.1/3
    assert summary["pooled_held_out"] == pytest.approx(1.1 / 3)
    assert summary["in_sample"] == pytest.approx(0.5) and summary["optimism"] == pytest.approx(0.5 - 1.1 / 3)
    assert summary["share_same_as_full"] == 0.5 and math.isnan(summary["violated_share"])


def test_loco_with_a_constraint_reports_violations():
    grid = [g for g in build_grids(ROWS) if g.key[3] == "thr"][0]
    cfg = f1cfg(objective="max_recall", token_budget=45)
    summary, folds = loco(grid, cfg)
    f = folds.set_index("conversation_id")
    # leave out c1: on c2 tokens are 90 (0.3) and 20 (0.5): only 0.5 fits; c1 at 0.5 uses 5 tokens: no violation
    # leave out c2: on c1 tokens 30 and 5: both fit, recall .75 vs .5 -> 0.3; c2 at 0.3 uses 90 > 45: violated
    assert f["threshold"].tolist() == [0.5, 0.3] and f["violated"].tolist() == [False, True]
    assert summary["violated_share"] == 0.5


def test_categories_with_and_without_own_thresholds():
    rec = recommend(ROWS, f1cfg(per_category=True, n_resamples=400))
    c = rec.categories[rec.categories["strategy"] == "thr"].set_index("category")
    assert c.loc["single-hop", "f1"] == pytest.approx(0.55) and c.loc["multi-hop", "f1"] == pytest.approx(0.4)  # at 0.3
    assert c.loc["single-hop", "n"] == 2 and c.loc["adversarial", "abstained"] == 0.0
    # single-hop: q1 (c1) .5, q3 (c2) .6 -> mean .55, se = sqrt(2 * (.05^2 + .05^2)) / 2 = .05, t(1 df) 12.71:
    # .55 -+ .635 clipped to [0, 1]; multi-hop only in c1: one conversation, no interval (the bootstrap said [.4, .4])
    assert (c.loc["single-hop", "f1_lo"], c.loc["single-hop", "f1_hi"]) == (0.0, 1.0)
    assert math.isnan(c.loc["multi-hop", "f1_lo"]) and math.isnan(c.loc["multi-hop", "f1_hi"])
    assert math.isnan(c.loc["adversarial", "f1"]) and bool(c.loc["adversarial", "adversarial"])
    # single-hop on its own: 0.3 -> .55, 0.5 -> (1 + .2)/2 = .6: own threshold 0.5, gain .05; multi-hop keeps 0.3
    assert (c.loc["single-hop", "own_threshold"], c.loc["single-hop", "own_f1"]) == (0.5, pytest.approx(0.6))
    assert c.loc["single-hop", "own_gain"] == pytest.approx(0.05)
    assert (c.loc["multi-hop", "own_threshold"], c.loc["multi-hop", "own_gain"]) == (0.3, 0.0)
    plain = recommend(ROWS, f1cfg(n_resamples=50)).categories
    assert "own_threshold" not in plain


def test_cross_dataset_transfer():
    other = pd.DataFrame([
        row("p1", "d1", "x", False, "thr", 0.3, 0.1, 0.5, 0.1, 5, 0.0, dataset="ds2"),
        row("p1", "d1", "x", False, "thr", 0.5, 0.7, 0.5, 0.9, 3, 0.0, dataset="ds2"),
    ])
    rec = recommend(pd.concat([ROWS, other], ignore_index=True), f1cfg(n_resamples=50))
    t = rec.transfer.set_index(["source", "target"])
    # ds1 chooses 0.3 -> ds2 at 0.3 = .1; ds2's own choice 0.5 = .7: gap .6
    a = t.loc[("ds1", "ds2")]
    assert (a["source_threshold"], a["target_f1_at_source_threshold"], a["target_threshold"], a["gap"]) == (0.3, 0.1, 0.5, pytest.approx(0.6))
    # ds2 chooses 0.5 -> ds1 at 0.5 = .4; ds1's own .5: gap .1
    b = t.loc[("ds2", "ds1")]
    assert (b["target_f1_at_source_threshold"], b["gap"]) == (pytest.approx(0.4), pytest.approx(0.1))
    assert len(rec.transfer) == 2  # lim has no threshold; ds2 has no lim
    assert rec.best()["dataset"].tolist() == ["ds1", "ds2"]
    assert set(rec.transfer["relation"]) == {"another corpus"}  # conversations d1 vs c1, c2
    # a release of the same conversations with other labels measures label robustness, not another corpus
    relabelled = ROWS.assign(dataset="ds1_2025")
    rel = recommend(pd.concat([ROWS, relabelled], ignore_index=True), f1cfg(n_resamples=50)).transfer
    assert len(rel) == 2 and set(rel["relation"]) == {"same conversations, other labels"}


def test_neighbours_and_grid_errors():
    rec = recommend(ROWS, f1cfg(neighbours=1, n_resamples=50))
    nb = neighbours(rec, point(rec, "thr"))
    assert nb["threshold"].tolist() == [0.3, 0.5] and nb["chosen"].tolist() == [True, False]
    with pytest.raises(ValueError, match="more than one row for question 'q1'"):
        build_grids(pd.concat([ROWS, ROWS.iloc[[0]]]), source="run/questions.parquet")
    with pytest.raises(ValueError, match=r"run/questions.parquet: missing column\(s\) \['f1'\]"):
        build_grids(ROWS.drop(columns="f1"), source="run/questions.parquet")
    with pytest.raises(ValueError, match="same questions at every threshold"):
        build_grids(ROWS.drop(index=5))


def test_one_format_keeps_format_a():
    rows = pd.concat([ROWS.assign(format="A"), ROWS.assign(format="B", tokens_injected=ROWS["tokens_injected"] * 2)])
    kept = one_format(rows)
    assert set(kept["format"]) == {"A"} and len(kept) == len(ROWS)
    assert recommend(rows, f1cfg(n_resamples=20)).points["tokens"].tolist() == pytest.approx([50, 40])


def test_edge_of_grid_is_flagged():
    rec = recommend(ROWS, f1cfg(n_resamples=20))
    # thr chooses 0.3, the lowest threshold swept
    assert point(rec, "thr")["note"] == "0.30 is the lowest threshold swept: the optimum may lie beyond it (widen `thresholds`)"
    assert point(rec, "lim")["note"] == ""


def test_questions_without_gold_are_not_in_the_grid_and_counts_agree_with_the_summary():
    # q5 (c1): not adversarial, no gold; precision 0 and 500 tokens at every setting. Left out of the grid, every
    # point estimate stays as without it (thr@0.3 tokens 50, precision (1/3 + 1/3 + 3/7) / 3) and n_questions = 3.
    nogold = [row("q5", "c1", "open-domain", False, s, t, NAN, NAN, 0.0, 500, 0.0) for s, t in (("thr", 0.3), ("thr", 0.5), ("lim", NAN))]
    rows = pd.concat([ROWS, pd.DataFrame(nogold).assign(n_gold=0)], ignore_index=True)
    grid = next(g for g in build_grids(rows) if g.key[3] == "thr")
    assert grid.question_ids.tolist() == ["q1", "q2", "q3", "q4"] and grid.n_excluded == 1
    rec = recommend(rows, f1cfg(n_resamples=200))
    thr = rec.curves[rec.curves["strategy"] == "thr"]
    assert thr["tokens"].tolist() == pytest.approx([50, 10])
    assert thr["precision"].tolist() == pytest.approx([(1 / 3 + 1 / 3 + 3 / 7) / 3, (1 + 0.125) / 2])
    p = point(rec, "thr")
    assert (p["n_questions"], p["n_adversarial"], p["n_excluded"]) == (3, 1, 1)
    agg = metrics.aggregate(rows, ["strategy", "threshold"])
    assert (agg["n_questions"] == 3).all() and (agg["n_excluded"] == 1).all()
    assert set(thr["n_questions"]) == {3}
    cats = rec.categories[rec.categories["strategy"] == "thr"].set_index("category")
    assert "open-domain" not in cats.index  # q5's category has no scored question


def test_a_plumbing_embedder_is_compared_but_never_recommended():
    # a second embedder "fake" whose thr@0.5 doubles every F1 (q1 1.0 stays 1.0 ... better than anything of "emb")
    fake = ROWS.assign(embedder="fake", f1=ROWS["f1"].where(ROWS["strategy"] != "thr", ROWS["f1"] * 2).clip(upper=1.0))
    rows = pd.concat([ROWS, fake], ignore_index=True)
    cfg = f1cfg(n_resamples=20)
    assert recommend(rows, cfg).best().iloc[0]["embedder"] == "fake"
    rec = recommend(rows, cfg, never_best=frozenset({"fake"}))
    best = rec.best()
    assert len(best) == 1 and best.iloc[0]["embedder"] == "emb" and best.iloc[0]["strategy"] == "lim"  # the fixture's own best
    assert (rec.points["embedder"] == "fake").sum() == 2  # still measured: its points are there
