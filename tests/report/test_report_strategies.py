"""Strategy report sections from a hand-made summary: the seed-claims table's derived numbers, and the
seed settings found by what a strategy is (kind and parameters in strategies.json), not by its name."""

import math

import pandas as pd

from bench.report.strategies import strategy_sections

NAN = math.nan
BASE = {"dataset": "d", "embedder": "e", "backend": "exact", "format": "A", "route": NAN, "question_share": 1.0, "n_questions": 10,
        "n_scored": 10, "precision": 0.5, "recall": 0.5, "f1": 0.5, "hit_rate": 0.5, "tokens_injected_mean": 100.0,
        "token_savings": 0.9, "noise_mean": 1.0, "adversarial_abstain_rate": NAN, "selected_mean": 2.0,
        "l1_selected_mean": NAN, "gold_via_l1": NAN, "gold_via_l2": NAN, "l2_noise_mean": NAN}


def row(strategy, threshold=NAN, **kw):
    return {**BASE, "strategy": strategy, "threshold": threshold, **kw}


SUMMARY = pd.DataFrame([
    row("limit5", recall=0.61, token_savings=0.95),
    row("threshold", 0.65, recall=0.4, noise_mean=3.0),
    row("threshold", 0.70, recall=0.3, noise_mean=2.0, f1=0.6),
    row("dual_tier", 0.70, recall=0.35, noise_mean=6.0, l2_noise_mean=1.5, l1_selected_mean=5.0, selected_mean=6.0,
        gold_via_l1=0.1, gold_via_l2=0.3),
    row("routing", recall=0.45),
    row("routing/profile", route="profile", question_share=0.25, recall=0.8, n_questions=2),
    row("routing/other", route="other", question_share=0.75, recall=0.3, n_questions=8),
])


def rec(name, kind, *, roles=None, thresholded=False, **params):
    """One strategies.json record (bench.results.rundir.strategy_record) without its config."""
    return {"name": name, "kind": kind, "roles": roles, "params": params, "thresholded": thresholded, "uses_store": True}


STRATEGIES = [
    rec("limit5", "limit", k=5), rec("threshold", "threshold", thresholded=True),
    rec("dual_tier", "dual_tier", thresholded=True, l1_turns=5, promote=0.15),
    rec("routing", "route_by_query", roles=["user"], profile_k=3, other_threshold=0.65, other_k=5),
    rec("full_context", "full_context"),
]
JOBS = [{"format_tokens": [
    {"dataset": "d", "embedder": "e", "backend": "exact", "strategy": "threshold", "threshold": 0.5, "format": f,
     "tokens_injected_mean": v, "tokens_full_mean": 1000.0, "token_savings": 1 - v / 1000, "recall": 0.45}
    for f, v in (("A", 100.0), ("B", 180.0), ("C", 120.0))]}]


def test_seed_table_hand_worked():
    text = "\n".join(strategy_sections(SUMMARY, JOBS, STRATEGIES))
    assert "## Claims from strategy articles, measured on your data" in text and "Seed" not in text
    # limit5 row: recall 0.610, savings 0.950
    assert "| seekdb agent-memory | limit-5 recall saves tokens | limit5 | 0.610 |" in text
    assert "0.950" in text
    # routing shares and per-route recall
    assert "profile: share 0.25, recall 0.800; other: share 0.75, recall 0.300" in text
    # dual tier @ 0.70: L2 noise 1.5 vs threshold 2.0 -> -25 %; total 6.0 vs 2.0 -> +200 %
    assert "L2 noise 1.50 vs plain threshold 2.00: -25 % (claimed -34 %); with L1: +200 %" in text
    # L1 share of recalled gold 0.1 / (0.1 + 0.3) = 0.25; of injected memories 5 / 6 = 0.83
    assert "L1 share of recalled gold 0.25; L1 share of injected memories 0.83" in text
    # formats: B +80 %, C +20 % vs A
    assert "100.0 / 180.0 / 120.0" in text and "B +80 %, C +20 % vs A" in text
    assert "## Query routing" in text and "## Dual-tier memory" in text and "## Injection formats" in text


def test_each_section_once_with_a_row_per_configuration():
    two = pd.concat([SUMMARY, SUMMARY.assign(backend="sqlite_vec")], ignore_index=True)
    text = "\n".join(strategy_sections(two, JOBS, STRATEGIES))
    assert text.count("## Strategies side by side") == 1 and text.count("## Claims from strategy articles") == 1
    side = text.split("## Strategies side by side")[1].split("\n## ")[0]
    assert "| configuration | strategy | threshold |" in side
    assert side.count("| exact | limit5 |") == 1 and side.count("| sqlite_vec | limit5 |") == 1


def test_sections_skip_strategies_that_were_not_run():
    only = SUMMARY[SUMMARY.strategy == "limit5"]
    text = "\n".join(strategy_sections(only, [], STRATEGIES))
    assert "limit5" in text and "Dual-tier" not in text and "Query routing" not in text and "Injection formats" not in text
    assert "(none of the articles' settings were run)" in "\n".join(strategy_sections(SUMMARY[SUMMARY.strategy == "routing/other"], [], STRATEGIES))


def test_units_section_compares_with_the_raw_turn_full_context():
    both = pd.concat([SUMMARY.assign(dataset="locomo"),
                      pd.DataFrame([row("limit5", dataset="locomo_observations", n_questions=8, n_scored=8, n_excluded=2, tokens_injected_mean=50.0),
                                    row("full_context", dataset="locomo", tokens_injected_mean=1000.0)])], ignore_index=True)
    text = "\n".join(strategy_sections(both, [], STRATEGIES))
    assert "## Per dataset / memory unit" in text
    # 50 tokens of observations / 1000 tokens of raw-turn full context = 0.0500; 8 scored questions (2 without unit gold excluded)
    assert "| locomo_observations | exact | limit5 | n/a | 8 |" in text and text.rstrip().endswith("| 0.0500 |")


def test_seed_settings_are_found_by_kind_and_parameters_whatever_their_names():
    """The user called the limit-5 strategy "top5" and the plain threshold "cosine"; a limit with k=3 and a
    threshold restricted to user turns are not the seed settings."""
    names = {"limit5": "top5", "threshold": "cosine"}
    renamed = SUMMARY.assign(strategy=SUMMARY["strategy"].replace(names))
    extra = pd.DataFrame([row("limit3", recall=0.99), row("cosine_user", 0.65, recall=0.98)])
    strategies = [{**s, "name": names.get(s["name"], s["name"])} for s in STRATEGIES]
    strategies += [rec("limit3", "limit", k=3), rec("cosine_user", "threshold", roles=["user"], thresholded=True)]
    jobs = [{"format_tokens": [{**r, "strategy": "cosine"} for r in JOBS[0]["format_tokens"]]}]
    text = "\n".join(strategy_sections(pd.concat([renamed, extra], ignore_index=True), jobs, strategies))
    assert "| seekdb agent-memory | limit-5 recall saves tokens | top5 | 0.610 |" in text  # labelled with the user's name
    assert "| seekdb agent-memory | a similarity threshold saves tokens | cosine >= 0.65 | 0.400 |" in text
    assert "L2 noise 1.50 vs plain threshold 2.00: -25 %" in text  # dual tier compared with "cosine" at 0.70
    assert "| code-agent | injection format A plain / B JSON / C labelled sections | cosine >= 0.5 |" in text
    assert "limit-5 recall saves tokens | limit3" not in text and "0.980" not in text.split("## Strategies side by side")[0]
    without = "\n".join(strategy_sections(renamed, jobs, [rec("top5", "limit", k=3)]))  # the only limit has k=3: no seed
    assert "limit-5 recall saves tokens" not in without
