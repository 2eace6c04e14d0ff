"""Every configs/strategy/*.yaml (found by glob) composes with Hydra, builds, and runs through sweep()
on a tiny hand-built trace; plus hand-worked expectations for the seed strategies on that trace."""

import functools
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hydra import compose, initialize_config_dir

from bench.cli.config import build_strategies
from bench.strategies import spec as SP
from bench.strategies import vector as V
from bench.selection.sweep import summarise, sweep
from bench.replay.trace import Trace
from bench.types import Conversation, Corpus, Question, Turn

REPO = Path(__file__).resolve().parents[2]
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
    assert len(rows) == 3 * (len(spec.thresholds or (0.5, 0.75)) if spec.thresholded else 1)  # its own grid, else the run's
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


def test_every_strategy_declares_a_family_its_inputs_fit():
    """What a strategy is comes from its function (``@strategy(family=..., ...)``), read here for every config: a family
    named in ``FAMILIES`` whose rule its inputs keep (a cut sweeps a threshold, a baseline ignores the store, ...)."""
    for spec in specs(CONFIGS):
        assert spec.family in SP.FAMILIES, f"{spec.name}: family {spec.family!r}"
        assert SP.FAMILIES[spec.family].breaks(SP.inputs_of(spec.fn)) == [], f"{spec.name}: {spec.family}"


# hand-worked: the family of the seed strategies, by what they do (not read back from the declarations)
SEED_FAMILIES = {"limit5": "top_k", "threshold": "cut", "full_context": "baseline", "dual_tier": "tiered", "adaptive10": "adaptive",
                 "relative_delta": "cut", "bm25_5": "baseline"}


def test_the_seed_strategies_are_in_the_families_they_belong_to():
    got = {s.name: s.family for s in specs(CONFIGS)}
    assert {n: got[n] for n in SEED_FAMILIES} == SEED_FAMILIES


def test_a_family_rules_out_inputs_that_contradict_it():
    def fn(hits, **kw):
        return tuple(hits)

    with pytest.raises(ValueError, match=r"strategy .*fn: family 'cut' rules out thresholded=False"):
        SP.strategy(family="cut", thresholded=False)(fn)
    with pytest.raises(ValueError, match=r"strategy .*fn: family 'baseline' rules out uses_store=True"):
        SP.strategy(family="baseline", thresholded=False)(fn)
    with pytest.raises(ValueError, match="family must be one of top_k, cut, adaptive, baseline, tiered"):
        SP.strategy(family="vector", thresholded=True)
    assert SP.FAMILIES["tiered"].breaks(SP.Inputs(thresholded=True, stateful=False)) == ["stateful=False"]


def test_inputs_come_from_the_function_and_the_yaml_holds_only_name_roles_and_parameters():
    for name in CONFIGS:
        node = yaml.safe_load((REPO / "configs" / "strategy" / f"{name}.yaml").read_text())
        allowed = {"name", "roles", "fn", "thresholds"}  # thresholds: a strategy's own grid (delta, alpha, p)
        assert set(node) <= allowed, f"{name}.yaml: {sorted(set(node) - allowed)}"


PLAIN = {"name": "hyb", "fn": {"_target_": "bench.strategies.vector.hybrid", "_partial_": True, "k": 3}}


def undeclared(hits, *, question=None, eligible=(), threshold=None):
    return tuple(hits)


def test_load_spec_reads_the_declaration_through_the_partial():
    spec = SP.load_spec(PLAIN)
    assert (spec.name, spec.kind, spec.params, spec.thresholded, spec.uses_store, spec.roles) == ("hyb", "hybrid", {"k": 3}, True, True, None)
    assert SP.inputs_of(spec.fn) == SP.Inputs(thresholded=True) == V.hybrid.inputs
    # a config may repeat a flag (run configs written before the flags moved) when it agrees with the function
    assert SP.load_spec({**PLAIN, "thresholded": True, "uses_store": True}).thresholded is True
    assert SP.load_spec({**PLAIN, "roles": ["user"]}).roles == ("user",)


@pytest.mark.parametrize("node, fn, message", [
    ({**PLAIN, "thresholded": False}, None, "strategy hyb: field 'thresholded' is False but its function bench.strategies.vector.hybrid declares True"),
    ({**PLAIN, "stateful": "yes"}, None, "field 'stateful' is 'yes' but its function"),
    ({**PLAIN, "color": 1}, None, r"strategy hyb: unknown field\(s\) color \(allowed: name, fn, roles, thresholds\)"),
    ({**PLAIN, "thresholds": {"start": 0.5, "stop": 0.1, "step": 0.1}}, None, r"strategy hyb: field 'thresholds': threshold grid: need start <= stop"),
    ({**PLAIN, "thresholds": [0.1, 0.2]}, None, "strategy hyb: field 'thresholds' must be a mapping with start, stop and step"),
    ({"name": "lim", "fn": {"_target_": "bench.strategies.vector.limit", "_partial_": True}, "thresholds": {"start": 0, "stop": 1, "step": 0.5}},
     None, "strategy lim: field 'thresholds' is set but its function sweeps no threshold"),
    ({**PLAIN, "roles": ["robot"]}, None, "field 'roles' must be a non-empty list"),
    ({"fn": PLAIN["fn"]}, None, "field 'name' must be a non-empty string"),
    ({"name": "mine"}, functools.partial(undeclared), r"strategy mine: function .*undeclared declares no inputs \(decorate it with "
                                                     r"@bench.strategies.spec.strategy"),
])
def test_bad_strategy_config_is_one_clear_line(node, fn, message):
    with pytest.raises(ValueError, match=message):
        SP.spec_from_config(node, fn) if fn is not None else SP.load_spec(node)


def test_the_strategy_decorator_sets_the_inputs_and_returns_the_function():
    def fn(hits, **kw):
        return tuple(hits)

    marked = SP.strategy(family="tiered", thresholded=True, stateful=True)(fn)
    assert marked is fn and marked.inputs == SP.Inputs(thresholded=True, uses_store=True, stateful=True, needs_tokens=False)
    assert marked.family == "tiered"
    assert SP.inputs_of(functools.partial(functools.partial(marked, a=1), b=2)) == marked.inputs
    assert SP.inputs_of(undeclared) is None


def test_the_strategies_experiment_runs_every_strategy_in_every_format():
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=strategies"])
    assert sorted(cfg.strategy) == CONFIGS  # every configs/strategy/*.yaml, read from the folder (strategy_sets/every)
    # the experiment's list fixes the order of the outputs; any strategy it does not list follows, by name
    listed = yaml.safe_load((REPO / "configs" / "experiment" / "strategies.yaml").read_text())["defaults"][1]["override /strategy"]
    assert list(cfg.strategy)[:len(listed)] == listed
    assert list(cfg.strategy)[len(listed):] == sorted(set(CONFIGS) - set(listed))
    assert list(cfg.formats) == ["A", "B", "C"]


def test_a_new_strategy_yaml_joins_the_strategies_experiment_after_the_listed_ones(tmp_path, monkeypatch):
    import shutil

    from bench.cli import config as C

    shutil.copytree(REPO / "configs", tmp_path / "configs")
    (tmp_path / "configs" / "strategy" / "aaa_new.yaml").write_text(
        "# @package strategy.aaa_new\nname: new${.fn.k}\nfn: {_target_: bench.strategies.vector.limit, _partial_: true, k: 2}\n")
    monkeypatch.setattr(C, "configs_dir", lambda: tmp_path / "configs")
    monkeypatch.setattr(C, "plugin_names", lambda group: sorted(p.stem for p in (tmp_path / "configs" / group).glob("*.yaml")))
    try:
        C._register_every_strategy()
        with initialize_config_dir(config_dir=str(tmp_path / "configs"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=["experiment=strategies", "strategy.limit.fn.k=7"])
    finally:
        monkeypatch.undo()
        C._register_every_strategy()  # the shipped configs again
    listed = yaml.safe_load((REPO / "configs" / "experiment" / "strategies.yaml").read_text())["defaults"][1]["override /strategy"]
    assert list(cfg.strategy) == listed + sorted(set(CONFIGS) - set(listed) | {"aaa_new"})  # the listed ones, then by name
    names = {s.name for s in build_strategies(cfg.strategy)}
    assert {"limit7", "new2"} <= names  # an override still reaches a listed one; the new one is built like any other


# --- k is a first-class knob: the name follows it (issue 24) ---------------------------------------------------------

@pytest.mark.parametrize("strategy, override, name", [
    ("limit", "strategy.limit.fn.k=1", "limit1"), ("limit", "strategy.limit.fn.k=10", "limit10"),
    ("hybrid", "strategy.hybrid.fn.k=3", "hybrid3"), ("bm25", "strategy.bm25.fn.k=7", "bm25_7"),
    ("token_budget", "strategy.token_budget.fn.budget=512", "budget512"), ("hybrid_user", "strategy.hybrid_user.fn.k=2", "hybrid2_user"),
])
def test_a_top_k_name_follows_its_k(strategy, override, name):
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"strategy=[{strategy}]", override])
    (spec,) = build_strategies(cfg.strategy)
    key, value = override.rsplit(".", 1)[1].split("=")
    assert spec.name == name and spec.params[key] == int(value)
    rows = sweep(trace(spec.roles), CORPUS, [spec], (0.5,), TOKENS)
    assert set(rows["strategy"]) == {name}


def test_the_shipped_names_are_unchanged_at_the_shipped_k():
    assert {s.name for s in specs(["limit", "hybrid", "token_budget", "bm25", "rrf", "recency", "keyword", "adaptive"])} == {
        "limit5", "hybrid5", "budget256", "bm25_5", "rrf5", "recency5", "keyword5", "adaptive10"}


@pytest.mark.parametrize("k, message", [
    (-1, "strategy lim: k must be an integer >= 0 (got -1)"),
    ("3", "strategy lim: k must be an integer >= 0 (got '3')"),
    (2.5, r"strategy lim: k must be an integer >= 0 \(got 2.5\)"),
    (True, "strategy lim: k must be an integer >= 0 (got True)"),
])
def test_a_bad_k_is_one_line_when_the_strategy_is_built(k, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)") if "\\" not in message else message):
        SP.load_spec({"name": "lim", "fn": {"_target_": "bench.strategies.vector.limit", "_partial_": True, "k": k}})


def test_an_unknown_strategy_parameter_says_the_closest():
    with pytest.raises(ValueError, match=r"^strategy lim: limit has no parameter 'kk'; did you mean k\?$"):
        SP.load_spec({"name": "lim", "fn": {"_target_": "bench.strategies.vector.limit", "_partial_": True, "kk": 3}})
    assert SP.load_spec({"name": "h", "fn": {"_target_": "bench.strategies.vector.route_by_query", "_partial_": True}}).name == "h"
