"""bench.analysis.verdict: one rule (the paired t test over conversations), stated minimums, an honest power estimate.

"use" needs >= min_conversations (5) conversations, a stable threshold, and a runner-up that differs on >= min_untied (6)
questions and is significantly worse; power comes from the same t test. The end-to-end tests build a tiny run directory
(questions.parquet + summary.csv) and read ``bench.analysis.tables.analyse``'s verdict, as the report does.
"""

import math
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as sstats

from bench.analysis.recommend import RecommendConfig
from bench.analysis.tables import analyse
from bench.analysis.verdict import conversations_for_significance, more_data, runner_up, verdict, verdict_table
from bench.results.rundir import RunDir

BEST = {"dataset": "demo", "strategy": "hybrid5", "threshold": 0.4, "backend": "seekdb", "embedder": "minilm",
        "threshold_share": 0.85, "n_conversations": 10, "n_questions": 44, "best": True}
OTHER = {"strategy": "threshold", "threshold": 0.35, "backend": "seekdb", "embedder": "minilm"}
KW = {"min_stable_share": 0.6, "alpha": 0.05, "metric": "f1", "min_conversations": 5, "min_untied": 6}


def sig(significant: bool, diff=0.025, se=0.01, g=10, p=0.04, p_holm=0.04, wins=10, losses=4, n=44, holm_level=0.05) -> dict:
    half = sstats.t.ppf(0.975, g - 1) * se if g >= 2 else math.nan
    return {"a": BEST, "b": OTHER, "n": n, "n_conversations": g, "mean_a": 0.33, "mean_b": 0.33 - diff, "diff": diff, "se": se,
            "ci_low": diff - half, "ci_high": diff + half, "p": p, "p_holm": p_holm, "holm_level": holm_level,
            "significant": significant, "wins": wins, "ties": n - wins - losses, "losses": losses}


def test_shipped_minimums_and_old_configs_still_load():
    cfg = RecommendConfig.defaults()
    assert (cfg.min_conversations, cfg.min_untied) == (5, 6)
    # a run made before the t test recorded the permutation test's settings: they load (and are ignored)
    old = RecommendConfig.from_settings({"seed": 0, "recommend": {"test_unit": "conversation", "test_resamples": 2000}})
    assert old == RecommendConfig.defaults(seed=0)
    with pytest.raises(ValueError, match="min_conversations must be >= 2"):
        RecommendConfig.defaults(min_conversations=1)


def test_conversations_for_significance_by_hand():
    # d = 0.025, se = 0.01 on 5 conversations: se' = 0.01 sqrt(4 / (G' - 1)); significant when t_{G'-1} < 1.25 sqrt(G' - 1):
    # G' = 5: t_4 = 2.776 > 2.500; G' = 6: t_5 = 2.571 < 2.795 -> 6
    assert conversations_for_significance(diff=0.025, se=0.01, n_conversations=5, level=0.05) == 6.0
    assert conversations_for_significance(diff=0.05, se=0.01, n_conversations=5, level=0.05) == 5.0  # t = 5 > 2.776 already
    assert conversations_for_significance(diff=0.0, se=0.01, n_conversations=5, level=0.05) == math.inf
    assert conversations_for_significance(diff=1e-9, se=0.01, n_conversations=5, level=0.05) == math.inf  # > a million
    assert math.isnan(conversations_for_significance(diff=0.1, se=math.nan, n_conversations=1, level=0.05))


def test_power_needs_the_test_the_minimums_and_enough_questions_that_differ():
    # 5 conversations, 22 questions, 4 differ (3 won, 1 lost): the t test needs 6 conversations (above); 6 questions that
    # differ at 4 per 22 need ceil(6 * 5 / 4) = 8 conversations -> 3 more, ceil(3 * 22 / 5) = 14 more questions
    r = sig(False, diff=0.025, se=0.01, g=5, wins=3, losses=1, n=22)
    more_c, more_q, text = more_data(r, n_conversations=5, n_questions=22, min_conversations=5, min_untied=6, alpha=0.05)
    assert (more_c, more_q) == (3.0, 14.0)
    assert text == ("about 3 more conversations (~14 labelled questions) like these would be needed: at 6 conversations the "
                    "observed difference would be significant (t test at the Holm level 0.05), if it holds; 8 give 6 questions "
                    "that score differently at the observed rate (4 of 22)")
    # the Holm level of a runner-up with a smaller p than another comparison's: alpha / 2 -> t_{G'-1} at 0.9875
    assert more_data({**r, "holm_level": 0.025}, n_conversations=5, n_questions=22, min_conversations=5, min_untied=6,
                     alpha=0.05)[2].startswith("about 3 more conversations")


def test_ties_and_a_zero_difference_cannot_be_separated_by_more_data():
    kw = {"n_conversations": 5, "n_questions": 22, "min_conversations": 5, "min_untied": 6, "alpha": 0.05}
    tied = more_data(sig(False, diff=0.0, se=0.0, g=5, wins=0, losses=0, n=22), **kw)
    assert tied == (math.inf, math.inf, "they score the same on all 22 questions: more data like these would not separate them")
    zero = more_data(sig(False, diff=0.0, se=0.01, g=5, wins=2, losses=2, n=22), **kw)
    assert zero[:2] == (math.inf, math.inf) and "mean difference is 0" in zero[2]


def test_use_needs_every_condition():
    v = verdict(BEST, sig(True), **KW)
    assert (v.kind, v.headline, v.reasons) == ("use", "use `hybrid5` at 0.40 on `seekdb` / `MiniLM`", ())
    assert verdict(BEST, None, **KW).kind == "use"  # nothing else feasible
    assert verdict({**BEST, "threshold_share": math.nan}, sig(True), **KW).kind == "use"  # no threshold: stability does not apply
    unstable = verdict({**BEST, "threshold_share": 0.19}, sig(True), **KW)
    assert unstable.headline == "too little data to be sure of the threshold of `hybrid5` at 0.40 on `seekdb` / `MiniLM`"
    assert unstable.reasons == ("0.40 is chosen in only 19% of bootstrap resamples (a stable choice: ≥ 60%)",)
    few_untied = verdict(BEST, sig(True, wins=4, losses=1), **KW)  # significant, but 5 questions differ
    assert few_untied.kind == "too_little_data"
    assert few_untied.headline == "too little data to choose between `hybrid5` at 0.40 on `seekdb` / `MiniLM` and `threshold` at 0.35"
    assert few_untied.reasons[0] == "only 5 of 44 questions score differently between them (a choice needs at least 6: `recommend.min_untied`)"
    close = verdict(BEST, sig(False, p=0.2, p_holm=0.2), **KW)
    assert close.reasons[0] == ("the runner-up `threshold` at 0.35 is not significantly worse (f1 difference +0.025 [+0.002, +0.048], "
                                "t test over 10 conversations p 0.2, Holm p 0.2 ≥ 0.05)")


def test_below_the_minimum_of_conversations_the_headline_never_says_use():
    three = {**BEST, "n_conversations": 3, "n_questions": 30}
    v = verdict(three, sig(True, g=3, p=0.004, p_holm=0.012), **KW)  # the runner-up IS significantly worse
    assert v.kind == "too_little_data" and "use" not in v.headline
    assert v.headline == "3 conversations: too few to choose; best so far `hybrid5` at 0.40 on `seekdb` / `MiniLM`"
    assert v.reasons[0] == "3 conversations: a choice needs at least 5 (`recommend.min_conversations`)"
    assert v.reasons[1].startswith("the runner-up `threshold` at 0.35 is significantly worse (f1 difference +0.025 [")
    assert v.reasons[-1] == "about 2 more conversations (~20 labelled questions) like these would be needed: a choice needs 5 conversations"
    alone = verdict(three, None, **KW)
    assert alone.headline.startswith("3 conversations: too few to choose") and alone.more_conversations == 2.0


def test_table_one_verdict_per_dataset_and_the_closest_runner_up():
    points = pd.DataFrame([BEST, {**BEST, "dataset": "locomo", "best": False}])
    far = {**sig(True, diff=0.2), "dataset": "demo"}
    near = {**sig(False, p=0.3, p_holm=0.3), "dataset": "demo"}
    table = pd.DataFrame([far, near])
    assert runner_up(table)["diff"] == pytest.approx(0.025)
    t = verdict_table(points, table, RecommendConfig.defaults(), metric="f1")
    assert t["dataset"].tolist() == ["demo", "locomo"] and t["kind"].tolist() == ["too_little_data", "none"]
    assert t.loc[1, "headline"] == "no configuration meets the constraints: relax them"


# --- end to end: a run directory of two strategies (``a`` = 0.5 + delta on some questions, ``b`` = 0.5), the report's verdict

def write_run(d: Path, sizes: dict, deltas: dict) -> RunDir:
    out = []
    for strategy in ("a", "b"):
        for c, n in sizes.items():
            for i in range(n):
                q = f"{c}-q{i}"
                v = 0.5 + (deltas.get(q, 0.0) if strategy == "a" else 0.0)
                out.append({"dataset": "ds", "embedder": "emb", "backend": "exact", "strategy": strategy, "threshold": math.nan,
                            "question_id": q, "conversation_id": c, "category": "x", "adversarial": False, "n_gold": 1,
                            "f1": v, "recall": v, "precision": v, "tokens_injected": 10.0, "empty": 0.0, "latency_ns": 1e6})
    rows = pd.DataFrame(out)
    d.mkdir()
    rows.to_parquet(d / "questions.parquet")
    rows.groupby(["dataset", "embedder", "backend", "strategy", "threshold"], dropna=False).agg(
        recall=("recall", "mean"), f1=("f1", "mean"), tokens_injected_mean=("tokens_injected", "mean")
    ).reset_index().to_csv(d / "summary.csv", index=False)
    return RunDir(d)


def the_verdict(run: RunDir) -> dict:
    # these cases are about the paired test on F1: plain max F1 (the shipped objective, min tokens at recall >= 0.7,
    # finds nothing in runs whose recall is 0.5-0.9: tests/analysis/test_first_screen.py)
    return analyse(run, RecommendConfig.defaults(objective="max_f1", min_recall=None)).verdicts.iloc[0].to_dict()


def test_one_conversation_says_no_interval_never_nan(tmp_path):
    # 12 questions of one conversation, a wins 3 by 0.2: on 7255a18 "f1 difference +0.050 [+nan, +nan]"
    v = the_verdict(write_run(tmp_path / "run", {"c1": 12}, {"c1-q0": 0.2, "c1-q1": 0.2, "c1-q2": 0.2}))
    text = v["headline"] + v["reasons"]
    assert "nan" not in text.lower() and "use" not in v["headline"].split()
    assert v["headline"] == "1 conversation: too few to choose; best so far `a` on `exact` / `emb`"
    assert "the runner-up `b`: f1 difference +0.050 (no interval with 1 conversation, so no test)" in v["reasons"]
    assert v["reasons"].endswith("label at least 4 more conversations (~48 questions) like these before a test can decide: "
                                 "with 1 the spread between conversations is unknown")


@pytest.mark.parametrize("n_conversations", [2, 3])
def test_two_or_three_conversations_never_say_use(tmp_path, n_conversations):
    # a beats b by 0.4 on every question of every conversation: on 7255a18 (questions flipped) "use `a`"
    sizes = {f"c{i}": 8 for i in range(n_conversations)}
    v = the_verdict(write_run(tmp_path / "run", sizes, {f"{c}-q{i}": 0.4 for c in sizes for i in range(8)}))
    assert v["kind"] == "too_little_data" and not v["headline"].startswith("use")
    assert v["headline"] == f"{n_conversations} conversations: too few to choose; best so far `a` on `exact` / `emb`"


def test_power_never_promises_significance_the_questions_cannot_reach(tmp_path):
    # the demo's shape: 5 conversations, 22 questions, 18 tie; a wins 3 (by 0.2) and loses 1 (by 0.1). With k questions
    # that differ no paired test on them gets below p = 2 / 2^k (5 -> 0.0625), so a promise must bring >= 6 of them.
    # On 7255a18: "about 1 more conversations (~5 labelled questions)": 27 questions, ~4.9 that differ
    v = the_verdict(write_run(tmp_path / "run", {"c1": 5, "c2": 5, "c3": 4, "c4": 4, "c5": 4},
                              {"c1-q0": 0.2, "c2-q0": 0.2, "c3-q0": 0.2, "c4-q0": -0.1}))
    assert v["more_questions"] > 0 and (22 + v["more_questions"]) * 4 / 22 >= 6
    assert "only 4 of 22 questions score differently between them" in v["reasons"]
    # t test: conversation sums of d: 0.2, 0.2, 0.2, -0.1, 0; m = 0.5 / 22; CR1 se -> t_4 p = 0.170 (significant at 9)
    assert "t test over 5 conversations p 0.17, Holm p 0.17 ≥ 0.05" in v["reasons"]
    assert v["reasons"].endswith("about 4 more conversations (~18 labelled questions) like these would be needed: at 9 "
                                 "conversations the observed difference would be significant (t test at the Holm level 0.05), "
                                 "if it holds; 8 give 6 questions that score differently at the observed rate (4 of 22)")


def test_verdict_subsets_tool_recomputes_the_verdict_on_conversation_subsets(tmp_path, capsys):
    from bench.tools import verdict_subsets

    sizes = {f"c{i}": 8 for i in range(6)}  # a beats b by 0.4 everywhere: "use" on all 6, never on fewer than 5
    run = write_run(tmp_path / "run", sizes, {f"{c}-q{i}": 0.4 for c in sizes for i in range(8)})
    assert verdict_subsets.main([str(run.path), "--sizes", "1", "3", "6", "--per-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "| 3 | c0,c4,c5 | too_little_data | a | 3 conversations: too few to choose; best so far `a` on `exact` / `emb` |" in out
    assert out.rstrip().endswith("1 conversations: 0 'use' of 2 subsets (0 name a, the whole run's best)\n"
                                 "3 conversations: 0 'use' of 2 subsets (0 name a, the whole run's best)\n"
                                 "6 conversations: 1 'use' of 1 subsets (1 name a, the whole run's best)")
