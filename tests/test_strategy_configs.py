"""Every configs/strategy/*.yaml (found by glob) composes with Hydra, builds, and runs through sweep()
on a tiny hand-built trace; plus hand-worked expectations for the seed strategies on that trace."""

import math
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from bench.cli.config import build_strategies
from bench.sweep import summarise, sweep
from bench.trace import Trace
from bench.types import Conversation, Corpus, Question, Turn

REPO = Path(__file__).resolve().parent.parent
CONFIGS = sorted(p.stem for p in (REPO / "configs" / "strategy").glob("*.yaml"))
DAY = 86_400.0

# one conversation, 8 turns over 8 days; user turns are even positions
TEXTS = ["I adopted a dog named Rex.", "Nice, what breed?", "Rex is a beagle and loves the park.", "Parks are great.",
         "My name is Ann and I am a nurse.", "Cool job!", "I work night shifts at the hospital.", "That sounds hard."]
TURNS = tuple(Turn("c", f"t{i}", "user" if i % 2 == 0 else "assistant", "x", TEXTS[i], i * DAY, i, i // 2) for i in range(8))
CORPUS = Corpus("tiny", (Conversation("c", TURNS),), (
    Question("q_dog", "c", "What is the dog's name?", None, ("t0", "t2")),
    Question("q_me", "c", "What is my job?", None, ("t4", "t6")),
    Question("q_adv", "c", "Which cat did Ann adopt?", None, (), adversarial=True),
))
TOKENS = {t.key: 10 + i for i, t in enumerate(TURNS)}


def trace(roles):
    keep = [t for t in TURNS if roles is None or t.role in roles]
    # hand-made similarities per question (best first after sorting)
    sims = {"q_dog": {"t0": 0.9, "t2": 0.8, "t1": 0.7, "t3": 0.4}, "q_me": {"t4": 0.85, "t5": 0.6, "t6": 0.66, "t7": 0.3},
            "q_adv": {"t0": 0.5, "t1": 0.2}}
    rows = []
    for q in CORPUS.questions:
        hits = sorted(((f"c|{k}", v) for k, v in sims[q.question_id].items() if any(t.turn_id == k for t in keep)), key=lambda x: -x[1])
        rows.append({"question_id": q.question_id, "conversation_id": "c", "latency_ns": 1_000_000,
                     "hit_ids": [h for h, _ in hits], "hit_scores": [s for _, s in hits], "exact_scores": [s for _, s in hits]})
    return Trace(pd.DataFrame(rows), {"dataset": "tiny", "embedder": "fake", "backend": "exact", "roles": list(roles) if roles else None})


def specs(names):
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"strategy=[{','.join(names)}]"])
    return build_strategies(cfg.strategy)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_strategy_config_composes_and_sweeps(name):
    (spec,) = specs([name])
    rows = sweep(trace(spec.roles), CORPUS, [spec], (0.5, 0.75), TOKENS)
    assert len(rows) == 3 * (2 if spec.thresholded else 1)
    assert set(rows["strategy"]) == {spec.name}
    s = summarise(rows)
    assert s["n_questions"].iloc[0] == 2 and not s["recall"].isna().all()
    assert (rows["tokens_full"] == sum(TOKENS.values())).all()  # full context: all 8 turns, whatever the roles


def test_all_configs_together_have_unique_names_and_hand_worked_values():
    all_specs = specs(CONFIGS)
    by_name = {s.name: s for s in all_specs}
    assert len(by_name) == len(all_specs) == len(CONFIGS)
    rows = []
    for roles in dict.fromkeys(s.roles for s in all_specs):
        rows.append(sweep(trace(roles), CORPUS, [s for s in all_specs if s.roles == roles], (0.5, 0.75), TOKENS))
    rows = pd.concat(rows, ignore_index=True)

    def sel(strategy, qid, t=None):
        r = rows[(rows.strategy == strategy) & (rows.question_id == qid)]
        r = r[r.threshold.isna()] if t is None else r[r.threshold == t]
        return r.iloc[0]

    assert sel("limit5", "q_dog").n_selected == 4 and sel("limit5", "q_dog").recall == 1.0
    assert sel("threshold", "q_dog", 0.75).n_correct == 2 and sel("threshold", "q_dog", 0.75).n_selected == 2
    # user-only role filter: assistant turns never reach hybrid5_user; q_me user hits t4 .85, t6 .66
    assert sel("hybrid5_user", "q_me", 0.5).recall == 1.0 and sel("hybrid5_user", "q_me", 0.5).n_selected == 2
    assert sel("hybrid5_assistant", "q_me", 0.5).n_correct == 0
    # routing: "What is my job?" is a profile question -> limit 3 user-only: t4, t6 (only 2 user hits)
    assert sel("routing", "q_me").route == "profile" and sel("routing", "q_me").recall == 1.0
    # "What is the dog's name?" -> other route: user hits >= 0.65: t0 .9, t2 .8
    assert sel("routing", "q_dog").route == "other" and sel("routing", "q_dog").recall == 1.0
    # recency: last 5 turns t3..t7 -> q_me gold t4, t6
    assert sel("recency5", "q_me").n_correct == 2 and sel("recency5", "q_dog").n_correct == 0
    # keyword: "dog" and "name" (stopwords dropped) -> t4 ("My name is Ann") and t0 ("dog named Rex"), most recent first
    assert sel("keyword5", "q_dog").n_selected == 2 and sel("keyword5", "q_dog").n_correct == 1
    # token budget 256 takes every q_dog hit (10 + 12 + 11 + 13 tokens)
    assert sel("budget256", "q_dog").tokens_injected == 46
    # dual tier: L1 = the last 5 turns (t3..t7); L2 >= 0.75 for q_dog: t0 (7 days old), t2 (5 days old)
    # retention 0.5 * exp(-0.07 * age): t0 0.306, t2 0.352 -> both above the 0.1 floor
    dt = sel("dual_tier", "q_dog", 0.75)
    assert (dt.l1_selected, dt.n_selected, dt.n_correct) == (5.0, 7, 2)
    assert sel("full_context", "q_adv").n_selected == 8
    assert math.isnan(sel("full_context", "q_dog").latency_ns)


def test_the_strategies_experiment_runs_every_strategy_in_every_format():
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=strategies"])
    assert sorted(cfg.strategy) == CONFIGS  # a new configs/strategy/*.yaml must be added to the experiment too
    assert list(cfg.formats) == ["A", "B", "C"]
