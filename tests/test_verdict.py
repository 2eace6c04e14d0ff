"""bench.analysis.verdict: "use" only when the choice is stable and the runner-up significantly worse; power by hand."""

import math

import pandas as pd
import pytest

from bench.analysis.verdict import more_data, runner_up, verdict, verdict_table

BEST = {"dataset": "demo", "strategy": "hybrid5", "threshold": 0.4, "backend": "seekdb", "embedder": "minilm",
        "threshold_share": 0.85, "n_conversations": 5, "n_questions": 22, "best": True}
OTHER = {"strategy": "threshold", "threshold": 0.35, "backend": "seekdb", "embedder": "minilm"}
KW = {"min_stable_share": 0.6, "alpha": 0.05, "metric": "f1"}


def sig(significant: bool, diff=0.025, lo=0.0, hi=0.07, p_holm=0.38) -> dict:
    return {"a": BEST, "b": OTHER, "mean_a": 0.33, "mean_b": 0.33 - diff, "diff": diff, "ci_low": lo, "ci_high": hi,
            "p_holm": p_holm, "significant": significant}


def test_more_data_by_hand():
    # half-width (0.07 - 0.0) / 2 = 0.035; (0.035 / 0.025)^2 = 1.96; 5 * 1.96 = 9.8 -> 10 conversations: 5 more,
    # 22 questions / 5 conversations -> 5 * 4.4 = 22 more questions
    assert more_data(diff=0.025, ci_low=0.0, ci_high=0.07, n_conversations=5, n_questions=22) == (5.0, 22.0)
    assert more_data(diff=0.05, ci_low=0.01, ci_high=0.09, n_conversations=5, n_questions=22) == (0.0, 0.0)  # already clear of 0
    assert more_data(diff=0.0, ci_low=-0.1, ci_high=0.1, n_conversations=5, n_questions=22) == (math.inf, math.inf)
    assert all(math.isnan(x) for x in more_data(diff=math.nan, ci_low=0, ci_high=1, n_conversations=5, n_questions=22))


def test_a_stable_choice_against_a_significantly_worse_runner_up_is_a_use():
    v = verdict(BEST, sig(True, lo=0.01, p_holm=0.01), **KW)
    assert (v.kind, v.headline, v.reasons) == ("use", "use `hybrid5` at 0.40 on `seekdb` / `minilm`", ())
    assert verdict(BEST, None, **KW).kind == "use"  # nothing else feasible


def test_unstable_threshold_or_indistinct_runner_up_is_too_little_data():
    v = verdict({**BEST, "threshold_share": 0.19}, sig(False), **KW)
    assert v.kind == "too_little_data"
    assert v.headline == "too little data to choose between `hybrid5` at 0.40 on `seekdb` / `minilm` and `threshold` at 0.35"
    assert v.reasons == ("0.40 is chosen in only 19% of bootstrap resamples (a stable choice: ≥ 60%)",
                         "the runner-up `threshold` at 0.35 is not significantly worse (f1 difference +0.025 [+0.000, +0.070], Holm p 0.38 ≥ 0.05)",
                         "about 5 more conversations (~22 labelled questions) like these would make the observed difference significant, if it holds")
    assert (v.more_conversations, v.more_questions) == (5.0, 22.0)
    only_unstable = verdict({**BEST, "threshold_share": 0.5}, sig(True, lo=0.01, p_holm=0.01), **KW)
    assert only_unstable.kind == "too_little_data" and only_unstable.headline.startswith("too little data to be sure of the threshold of `hybrid5`")
    assert verdict({**BEST, "threshold_share": math.nan}, sig(True), **KW).kind == "use"  # no threshold: stability does not apply
    same = verdict(BEST, sig(False, diff=0.0, lo=-0.05, hi=0.05), **KW)
    assert same.reasons[-1] == "they score the same on these questions: more data would not separate them"


def test_table_one_verdict_per_dataset_and_the_closest_runner_up():
    points = pd.DataFrame([BEST, {**BEST, "dataset": "locomo", "best": False}])
    far = {**sig(True, diff=0.2, lo=0.1, hi=0.3, p_holm=0.001), "dataset": "demo"}
    near = {**sig(False), "dataset": "demo"}
    table = pd.DataFrame([far, near])
    assert runner_up(table)["diff"] == pytest.approx(0.025)
    t = verdict_table(points, table, **KW)
    assert t["dataset"].tolist() == ["demo", "locomo"] and t["kind"].tolist() == ["too_little_data", "none"]
    assert t.loc[1, "headline"] == "no configuration meets the constraints: relax them"
