"""bench.tools.regress: the CI gate's rules on hand-worked tables, and end to end on the demo corpus
(exact + sqlite_vec): a baseline, an identical second run that passes, an injected regression that fails."""

import json
import dataclasses
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.backends.exact import ExactBackend
from bench.tools import regress as R
from bench.tools.regress.checks.common import label, operating_points
from bench.tools.regress.checks.coverage import coverage_checks
from bench.tools.regress.checks.latency import LATENCY_COLUMNS, latency_checks, latency_ratios
from bench.tools.regress.checks.quality import quality_checks, sign_flip_test
from bench.tools.regress.checks.tokens import token_checks
from bench.tools.regress.gate import gate
from bench.tools.regress.latency_pass import _Slowed, parse_fault_slow, time_searches
from bench.tools.regress.render import render_markdown
from bench.tools.regress.runs import RunData, job_dirs
from bench.tools.regress.settings import GateConfig, gate_config
from bench.types import Conversation, Corpus, MemoryBatch, Question, Turn

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "datasets" / "demo"
NAN = float("nan")
CFG = GateConfig.defaults()  # tolerance 0.02, alpha 0.05, 10000 resamples, budget 1.10, latency 1.4, noise z 3


def qrows(backend: str, strategy: str, threshold: float, recall, *, tokens=100, embedder="emb", dataset="ds") -> pd.DataFrame:
    """Per-question rows of one configuration; precision = recall = F1 per question (hand-checkable)."""
    recall = np.asarray(recall, float)
    n = len(recall)
    tok = np.broadcast_to(np.asarray(tokens, float), (n,))
    return pd.DataFrame({
        "dataset": dataset, "embedder": embedder, "backend": backend, "strategy": strategy, "threshold": threshold,
        "format": "A", "question_id": [f"q{i}" for i in range(n)], "conversation_id": [f"c{i % 2}" for i in range(n)],
        "category": "x", "adversarial": False, "n_gold": 1, "n_selected": 1, "n_correct": recall.astype(int),
        "precision": recall, "recall": recall, "f1": recall, "hit": recall, "empty": 0.0,
        "tokens_injected": tok, "tokens_full": 1000, "latency_ns": 1e6,
    })


def run_of(rows: pd.DataFrame, latency: pd.DataFrame | None = None, path="run") -> RunData:
    """A run (or baseline) of these rows; latency: one pass of one query, sqlite_vec at 2x exact, unless given."""
    from bench.selection.sweep import summarise

    rows = rows.assign(depth_saturated=False)
    latency = lat([[2.0]], [[1.0]]) if latency is None else latency
    return RunData(Path(path), summarise(rows), rows, {}, latency)


# --------------------------------------------------------------------------------------- settings

def test_gate_config_rejects_unknown_and_mistyped_settings():
    assert GateConfig.from_mapping({"tolerance": 0.05, "metrics": ["recall"]}).metrics == ("recall",)
    with pytest.raises(ValueError, match=r"job0/config_resolved.yaml: regress: unknown regress setting\(s\) \['tolerence'\]"):
        GateConfig.from_mapping({"tolerence": 0.05}, where="job0/config_resolved.yaml: regress")
    with pytest.raises(ValueError, match="budget_ratio_max must be a number"):
        GateConfig.from_mapping({"budget_ratio_max": "1.1"})
    with pytest.raises(ValueError, match="latency_ratio_max must be a ratio >= 1"):
        GateConfig.defaults(latency_ratio_max=0.5)
    with pytest.raises(ValueError, match="latency_noise_z must be > 0"):
        GateConfig.defaults(latency_noise_z=0)
    with pytest.raises(ValueError, match="metrics must be a non-empty subset"):
        GateConfig.defaults(metrics=("tokens",))


def test_the_experiment_config_gate_block_is_the_only_copy_of_the_defaults(tmp_path, monkeypatch):
    import yaml

    y = yaml.safe_load((REPO / "configs" / "experiment" / "regress.yaml").read_text())
    cfg = GateConfig.defaults()
    assert (cfg.tolerance, cfg.alpha, cfg.budget_ratio_max, cfg.latency_ratio_max, cfg.latency_ratio_max_other_machine,
            cfg.latency_repeats, cfg.latency_noise_z) == (0.02, 0.05, 1.10, 1.4, 2.0, 7, 3.0)
    assert cfg == GateConfig.from_mapping(y["regress"]) and cfg.metrics == ("recall", "f1", "precision")
    assert y["hydra"]["sweeper"]["params"]["backend"] == "exact,sqlite_vec,seekdb"
    assert GateConfig.from_mapping({"tolerance": 0.1}) == GateConfig.defaults(tolerance=0.1)  # the rest from the YAML
    conf = tmp_path / "configs"
    (conf / "experiment").mkdir(parents=True)
    (conf / "experiment" / "regress.yaml").write_text(yaml.safe_dump({**y, "regress": {**y["regress"], "tolerance": 0.07}}))
    monkeypatch.setattr("bench.resources.configs_dir", lambda: conf)
    assert GateConfig.defaults().tolerance == 0.07  # an edited YAML is the new default: nothing repeats it


def test_gate_config_is_read_from_the_first_finished_job(tmp_path):
    """A multirun's regress: block comes from its first finished job's config_resolved.yaml (plain YAML)."""
    run = tmp_path / "run"
    for i, tol in ((1, 0.09), (10, 0.5)):
        (run / f"job{i}").mkdir(parents=True)
        (run / f"job{i}" / "summary.csv").write_text("x\n1\n")
        (run / f"job{i}" / "config_resolved.yaml").write_text(f"seed: 0\nregress:\n  tolerance: {tol}\n")
    (run / "job0").mkdir()  # failed: no results, no config
    assert gate_config(run) == GateConfig.defaults(tolerance=0.09)
    assert job_dirs(run) == [run / "job1", run / "job10"]  # numeric order
    assert gate_config(tmp_path / "empty") == GateConfig.defaults()


# ---------------------------------------------------------------------------------------- points

def test_operating_points_are_best_f1_thresholds_of_the_baseline_and_untresholded_strategies():
    rows = pd.concat([
        qrows("exact", "limit5", NAN, [1, 0, 1, 0]),          # f1 0.5
        qrows("exact", "threshold", 0.3, [1, 0, 0, 0]),       # f1 0.25
        qrows("exact", "threshold", 0.35, [1, 1, 1, 0]),      # f1 0.75 <- best
        qrows("exact", "threshold", 0.4, [1, 1, 1, 0]),       # f1 0.75 (tie: the lower threshold wins)
        qrows("sqlite_vec", "threshold", 0.3, [1, 1, 0, 0]),  # f1 0.5 <- best
        qrows("sqlite_vec", "threshold", 0.35, [0, 0, 0, 0]),
    ], ignore_index=True)
    base = run_of(rows)
    pts = operating_points(base.summary, base.rows)
    assert [(b, s) for b, s, _ in pts] == [("exact", "limit5"), ("exact", "threshold"), ("sqlite_vec", "threshold")]
    assert math.isnan(pts[0][2]) and pts[1][2] == 0.35 and pts[2][2] == 0.3
    assert label(pts[1]) == "exact / threshold @ 0.35" and label(pts[0]) == "exact / limit5"


# --------------------------------------------------------------------------------------- quality

def _quality(cur_recall, base_recall=None, allow=frozenset()):
    base = qrows("exact", "limit5", NAN, base_recall if base_recall is not None else [1.0] * 20)
    cur = qrows("exact", "limit5", NAN, cur_recall)
    return quality_checks(base, cur, [("exact", "limit5", NAN)], CFG, allow=allow).set_index("metric")


def test_sign_flip_test_is_exact_over_the_changed_questions():
    # d = (-1, -0.5, -0.5) and two ties: of the 2**3 sign patterns of the changed three, only all-minus and
    # all-plus reach |sum| 2: p = 2/8 = the smallest p three changed questions allow
    assert sign_flip_test(np.array([-1.0, -0.5, -0.5, 0.0, 0.0])) == (0.25, 3, 0.25, "exact sign-flip, all 8 patterns")
    # d = (-1, -1, +1): |sum| 1 is reached by 6 of 8 patterns (all but --- and +++ ... which reach 3): p = 8/8
    assert sign_flip_test(np.array([-1.0, -1.0, 1.0]))[0] == 1.0
    # d = (-1, -1, -1, +0.5): |sum| >= 2.5 for ---+, ---- and their mirrors: p = 4/16
    assert sign_flip_test(np.array([-1.0, -1.0, -1.0, 0.5]))[:3] == (0.25, 4, 0.125)
    assert sign_flip_test(np.zeros(4)) == (1.0, 0, 1.0, "nothing changed")
    p, n, p_min, name = sign_flip_test(np.full(20, -0.5), n_resamples=1000)  # 20 > 16: random patterns
    assert (n, name) == (20, "sign-flip, 1000 random patterns") and p == pytest.approx(1 / 1001) and p_min == pytest.approx(1 / 1001)


def test_identical_tables_pass_and_unchanged_checks_are_not_tested():
    q = _quality([1.0] * 20)
    assert list(q.index) == ["recall", "f1", "precision"]
    assert (q["delta"] == 0).all() and q["p_holm"].isna().all() and (q["verdict"] == "ok").all()


def test_a_large_consistent_drop_fails_and_names_the_metric():
    q = _quality([0.5] * 20)  # every question loses half its recall: 1.0 -> 0.5
    r = q.loc["recall"]
    assert (r["baseline"], r["current"], r["delta"]) == (1.0, 0.5, -0.5)
    # 20 paired losses: sign-flip p ~ 1/10001 (random patterns: 20 > 16); recall, f1 and precision carry the same values here, so
    # they are one test and Holm leaves its p as it is
    assert r["p_holm"] < 0.0005 and r["verdict"] == "FAIL"
    assert (q["p_holm"] == r["p_holm"]).all() and (q["verdict"] == "FAIL").all()
    base, cur = run_of(qrows("exact", "limit5", NAN, [1.0] * 20), path="base"), run_of(qrows("exact", "limit5", NAN, [0.5] * 20))
    res = gate(base, cur, CFG)
    assert res.failed and res.verdict.startswith("regress FAIL: 3 regression(s) vs base: ")
    assert "recall exact / limit5: 1.000 -> 0.500 (-0.500, Holm p" in res.verdict


def test_holm_counts_each_distinct_testable_check_once():
    base = pd.concat([qrows("exact", "limit5", NAN, [1.0] * 20), qrows("sqlite_vec", "limit5", NAN, [1.0] * 20),
                      qrows("exact", "full_context", NAN, [1.0] * 20)])
    lost8 = [0.5] * 8 + [1.0] * 12  # 8 losses of 0.5: exact p = 2/2**8, randomised ~0.008
    cur = pd.concat([qrows("exact", "limit5", NAN, [0.5] * 20), qrows("sqlite_vec", "limit5", NAN, [0.5] * 20),
                     qrows("exact", "full_context", NAN, lost8)])
    pts = [("exact", "limit5", NAN), ("sqlite_vec", "limit5", NAN), ("exact", "full_context", NAN)]
    q = quality_checks(base, cur, pts, GateConfig.defaults(metrics=("recall",)))
    p20 = sign_flip_test(np.full(20, -0.5))[0]  # 1/10001
    p8 = sign_flip_test(np.full(8, -0.5))[0]  # exact: 2/2**8
    assert p20 == pytest.approx(1 / 10001) and p8 == 2 / 256
    # two distinct tests (exact and sqlite_vec limit5 are the same data): Holm = (2 * p20, max(2 * p20, p8))
    assert q["p_holm"].tolist() == pytest.approx([2 * p20, 2 * p20, max(2 * p20, p8)])
    assert q["verdict"].tolist() == ["FAIL", "FAIL", "FAIL"]
    assert q["delta"].tolist() == pytest.approx([-0.5, -0.5, -0.2])


def test_a_drop_on_too_few_questions_to_test_fails_unless_allowed():
    q = _quality([0.0] + [1.0] * 19)  # mean 1.0 -> 0.95: delta -0.05 < -0.02, but one loss: p >= 2/2**1
    r = q.loc["recall"]
    assert r["delta"] == pytest.approx(-0.05) and math.isnan(r["p_holm"]) and (r["n_changed"], r["p_min"]) == (1, 1.0)
    assert r["verdict"] == "FAIL (cannot tell: 1 changed questions, smallest reachable p 1 > 0.05; --allow untestable accepts it)"
    assert r["rule"] == "exact sign-flip, all 2 patterns over the 1 changed questions"
    # 5 of 22 questions lose their gold (the demo's issue): p_min 2/2**5 = 0.0625 > 0.05 -> cannot tell -> FAIL
    q = _quality([0.0] * 5 + [1.0] * 17, base_recall=[1.0] * 22)
    assert q.loc["recall", "p_min"] == 0.0625 and q.loc["recall", "verdict"].startswith("FAIL (cannot tell: 5 changed questions")
    q = _quality([0.0] * 5 + [1.0] * 17, base_recall=[1.0] * 22, allow=frozenset({"untestable"}))
    assert q.loc["recall", "verdict"] == ("ok (cannot tell: 5 changed questions, smallest reachable p 0.0625 > 0.05; "
                                          "allowed by --allow untestable)")
    q = _quality([0.0] * 6 + [1.0] * 14)  # six losses: the smallest p (2/2**6) can pass alpha, so it is tested
    assert q.loc["recall", "verdict"] == "FAIL" and q.loc["recall", "p_holm"] == 2 / 64


def test_a_drop_holm_could_never_find_is_untestable_too():
    """Two distinct drops of 6 questions each: m = 2, Holm's strictest level 0.025 < p_min 2/2**6: cannot tell."""
    base = pd.concat([qrows("exact", "limit5", NAN, [1.0] * 20), qrows("exact", "full_context", NAN, [1.0] * 20)])
    cur = pd.concat([qrows("exact", "limit5", NAN, [0.0] * 6 + [1.0] * 14), qrows("exact", "full_context", NAN, [0.5] * 6 + [1.0] * 14)])
    q = quality_checks(base, cur, [("exact", "limit5", NAN), ("exact", "full_context", NAN)], GateConfig.defaults(metrics=("recall",)))
    assert q["p_holm"].tolist() == [2 / 64 * 2, 2 / 64 * 2] and q["limit"].tolist() == [0.025, 0.025]
    assert q["verdict"].str.startswith("FAIL (cannot tell: 6 changed questions, smallest reachable p 0.0312 > 0.025").all()


def test_a_drop_that_is_not_significant_passes():
    q = _quality([0.0] * 4 + [1.0] * 12 + [0.5] * 4, base_recall=[1.0] * 16 + [0.0] * 4)  # 4 losses of 1, 4 gains of 0.5
    assert q.loc["recall", "delta"] == pytest.approx(-0.1)
    assert q.loc["recall", "p_holm"] > 0.1 and q.loc["recall", "verdict"] == "ok (drop not significant)"


def test_a_significant_drop_within_tolerance_passes():
    q = _quality([0.49] * 20, base_recall=[0.5] * 20)  # -0.01 on every question: significant, but within 0.02
    assert q.loc["recall", "delta"] == pytest.approx(-0.01) and q.loc["recall", "p_holm"] < 0.002
    assert q.loc["recall", "verdict"] == "ok"


def test_a_significant_gain_is_reported_as_improved():
    q = _quality([1.0] * 20, base_recall=[0.5] * 20)
    assert q.loc["recall", "verdict"] == "improved"


# ---------------------------------------------------------------------------------------- tokens

@pytest.mark.parametrize("base_tok, cur_tok, ratio, verdict", [
    (100, 105, 1.05, "ok"),
    (100, 110, 1.10, "ok"),       # at the budget: not above it
    (100, 120, 1.20, "FAIL"),
    ([100, 300], [100, 340], 1.10, "ok"),   # means 200 -> 220
    ([100, 300], [100, 360], 1.15, "FAIL"),  # means 200 -> 230
    (0, 0, 1.0, "ok"),
    (0, 5, math.inf, "FAIL"),
])
def test_token_budget_ratio(base_tok, cur_tok, ratio, verdict):
    n = 2
    base = qrows("exact", "limit5", NAN, [1.0] * n, tokens=base_tok)
    cur = qrows("exact", "limit5", NAN, [1.0] * n, tokens=cur_tok)
    t = token_checks(base, cur, [("exact", "limit5", NAN)], CFG).iloc[0]
    assert t["ratio"] == pytest.approx(ratio) and t["verdict"] == verdict
    assert t["metric"] == "tokens_injected_mean"


# --------------------------------------------------------------------------------------- latency

def lat(store_ms, ref_ms, backend="sqlite_vec") -> pd.DataFrame:
    """latency.csv rows of one store: ``store_ms`` and ``ref_ms`` are (passes, queries) arrays."""
    s, e = np.asarray(store_ms, float), np.asarray(ref_ms, float)
    return pd.DataFrame([(backend, r, q, s[r, q], e[r, q]) for r in range(s.shape[0]) for q in range(s.shape[1])],
                        columns=LATENCY_COLUMNS)


def test_latency_ratio_is_per_query_minima_over_passes_with_a_leave_one_pass_out_error():
    t = lat([[3, 5], [2, 6], [4, 4]], [[1, 1], [1, 2], [2, 1]])
    r = latency_ratios(t).iloc[0]
    # per-query minima: store (2, 4) -> median 3; exact beside it (1, 1) -> median 1
    assert (r["backend"], r["p50_ms"], r["ref_p50_ms"], r["ratio"], r["repeats"], r["n"]) == ("sqlite_vec", 3.0, 1.0, 3.0, 3, 2)
    # leaving out pass 0, 1, 2: ratios 3, 3.5, 3.5; jackknife se of the logs = 2/3 * ln(3.5 / 3)
    assert r["se"] == pytest.approx(2 / 3 * math.log(3.5 / 3))
    # a second store whose exact timings (right after it) are slower, e.g. after a wait on a server process: the
    # reference of every store is the per-query minimum over ALL exact timings of the pass, here sqlite_vec's
    two = pd.concat([t, lat([[10, 10]] * 3, [[2, 2]] * 3, backend="seekdb")], ignore_index=True)
    r2 = latency_ratios(two).set_index("backend")
    assert r2.loc["seekdb", "ratio"] == 10.0 and r2.loc["seekdb", "ref_p50_ms"] == 1.0 and r2.loc["sqlite_vec", "ratio"] == 3.0
    with pytest.raises(ValueError, match=r"missing column\(s\) \['ms', 'query', 'ref_ms'\].*re-run make baseline"):
        latency_ratios(pd.DataFrame({"backend": ["exact"], "repeat": [0], "p50_ms": [1.0]}))


def test_a_loaded_machine_alone_cannot_fail_the_latency_gate():
    quiet = lat([[2.0, 2.0]] * 3, [[1.0, 1.0]] * 3)
    busy = lat([[20.0, 2.0], [2.0, 30.0], [2.2, 2.4]], [[1.0, 9.0], [8.0, 1.0], [1.1, 1.2]])  # load hits both sides
    c = latency_checks(quiet, busy, CFG).iloc[0]
    assert (c["config"], c["baseline"], c["current"], c["ratio"], c["limit"], c["verdict"]) == ("sqlite_vec", 2.0, 2.0, 1.0, 1.4, "ok")


@pytest.mark.parametrize("store_ms, ratio, verdict", [(2.6, 1.3, "ok"), (2.8, 1.4, "ok"), (4.0, 2.0, "FAIL")])
def test_latency_fails_when_the_store_slows_relative_to_exact(store_ms, ratio, verdict):
    base = lat([[2.0, 2.0]] * 3, [[1.0, 1.0]] * 3)
    cur = lat([[store_ms, store_ms]] * 3, [[1.0, 1.0]] * 3)
    c = latency_checks(base, cur, CFG).iloc[0]
    assert c["ratio"] == pytest.approx(ratio) and c["verdict"] == verdict


def test_a_baseline_from_another_machine_is_judged_at_the_other_machine_limit():
    # measured: the same code moved seekdb/exact x1.43 between two machines of this workplace (18.19x -> 26.14x)
    base = lat([[2.0, 2.0]] * 3, [[1.0, 1.0]] * 3)
    cur = lat([[2.9, 2.9]] * 3, [[1.0, 1.0]] * 3)  # x1.45
    assert latency_checks(base, cur, CFG).iloc[0]["verdict"] == "FAIL"
    c = latency_checks(base, cur, CFG, same_machine=False).iloc[0]
    assert (c["limit"], c["verdict"]) == (2.0, "ok") and "baseline from another machine" in c["rule"]
    slow = lat([[4.2, 4.2]] * 3, [[1.0, 1.0]] * 3)  # x2.1: a store twice as slow still fails across machines
    assert latency_checks(base, slow, CFG, same_machine=False).iloc[0]["verdict"] == "FAIL"


def test_same_machine_needs_both_runs_to_name_the_same_one():
    from bench.tools.regress.experiment import machine
    from bench.tools.regress.gate import same_machine

    here = machine()
    assert here["cores"] >= 1 and here["arch"]
    assert same_machine({"machine": here}, {"machine": dict(here)})
    assert not same_machine({"machine": here}, {"machine": {**here, "model": "other"}})
    assert not same_machine({}, {"machine": here}) and not same_machine({}, {})  # a baseline that does not say


def test_the_noise_floor_widens_the_limit_and_only_a_noise_limit_of_2_skips():
    base = lat([[2.0, 2.0]] * 3, [[1.0, 1.0]] * 3)  # se 0
    cur = lat([[3, 5], [2, 6], [4, 4]], [[1, 1], [1, 2], [2, 1]])  # ratio 3 (x1.5), se 2/3 ln(3.5/3)
    c = latency_checks(base, cur, CFG).iloc[0]
    noise = math.exp(3.0 * 2 / 3 * math.log(3.5 / 3))  # 1.36: below 1.4, the floor stays 1.4
    assert c["limit"] == pytest.approx(1.4) and c["rule"] == f"fail if x > max(1.4, noise {noise:.2f})" and c["verdict"] == "FAIL"
    c = latency_checks(base, cur, GateConfig.defaults(latency_noise_z=6.0)).iloc[0]  # noise limit 1.85 > x 1.5
    assert c["limit"] == pytest.approx(noise ** 2) and c["verdict"] == "ok"
    c = latency_checks(base, cur, GateConfig.defaults(latency_noise_z=7.0)).iloc[0]  # noise limit 2.05 >= 2
    assert c["verdict"] == "skipped (too noisy: noise limit x2.05 >= 2)"


def test_latency_checks_fail_when_they_cannot_run():
    c = latency_checks(None, lat([[1.0]], [[1.0]]), CFG).iloc[0]
    assert c["verdict"] == "FAIL (no latency.csv in the baseline: re-run make baseline)"
    old = pd.DataFrame({"backend": ["exact"], "repeat": [0], "p50_ms": [1.0]})
    assert latency_checks(old, lat([[1.0]], [[1.0]]), CFG).iloc[0]["verdict"].startswith("FAIL (latency table: missing column(s)")


class _Slow(ExactBackend):
    name = "slow"

    def search(self, vector, *, k, where):
        time.sleep(0.002)
        return super().search(vector, k=k, where=where)


def _tiny_stores():
    turns = tuple(Turn("c", f"t{i}", "user", "u", "x", float(i), i) for i in range(6))
    corpus = Corpus("tiny", (Conversation("c", turns),), tuple(Question(f"q{i}", "c", "?", 10.0, ("t0",)) for i in range(4)))
    rng = np.random.default_rng(0)
    v = rng.normal(size=(6, 4)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    stores = {"exact": ExactBackend(), "slow": _Slow()}
    for b in stores.values():
        b.open(dim=4)
        b.add(MemoryBatch(tuple(t.key for t in turns), v, ("c",) * 6, ("user",) * 6, tuple(float(i) for i in range(6))))
        b.wait_ready()
    return corpus, v, stores


def test_time_searches_times_each_store_and_exact_right_after_it_per_query_and_pass():
    corpus, v, stores = _tiny_stores()
    t = time_searches(stores, corpus.questions, v[:4], depth=10, repeats=3, queries=3, warmup=1)
    assert list(t.columns) == LATENCY_COLUMNS and set(t["backend"]) == {"slow"}  # exact is the reference column
    assert list(t["repeat"]) == [0] * 3 + [1] * 3 + [2] * 3 and list(t["query"]) == [0, 1, 2] * 3
    assert len(time_searches(stores, corpus.questions, v[:4], depth=10, repeats=1, queries=10, warmup=0)) == 10  # cycled
    assert (t["ms"] >= 2.0).all() and (t["ref_ms"] < t["ms"]).all()  # the 2 ms sleep is inside the timed call
    assert latency_ratios(t).iloc[0]["ratio"] > 1.0
    with pytest.raises(ValueError, match="no 'exact' store"):
        time_searches({"slow": stores["slow"]}, corpus.questions, v[:4], depth=10, repeats=1, queries=1, warmup=0)


def test_fault_slow_makes_a_store_factor_times_slower_inside_the_timed_call():
    corpus, v, stores = _tiny_stores()
    slowed = {"exact": stores["exact"], "slow": _Slowed(stores["slow"], 3.0)}
    t = time_searches(slowed, corpus.questions, v[:4], depth=10, repeats=1, queries=2, warmup=0)
    assert (t["ms"] >= 6.0).all()  # 2 ms search, busy-waited to 3x
    assert _Slowed(stores["slow"], 2.0).capabilities == stores["slow"].capabilities
    assert parse_fault_slow(["sqlite_vec=2", "seekdb=1.5"]) == {"sqlite_vec": 2.0, "seekdb": 1.5}
    for bad in ("sqlite_vec", "sqlite_vec=0.5", "=2", "x=fast"):
        with pytest.raises(ValueError, match="expected STORE=FACTOR with FACTOR >= 1"):
            parse_fault_slow([bad])


# ------------------------------------------------------------------------------------ whole gate

def test_a_store_missing_from_the_current_run_fails_coverage_with_the_job_failure():
    base = run_of(pd.concat([qrows("exact", "limit5", NAN, [1.0] * 4), qrows("seekdb", "limit5", NAN, [1.0] * 4)]), path="base")
    cur = run_of(qrows("exact", "limit5", NAN, [1.0] * 4))
    failed = [{"reason": "BackendUnavailable: seekdb would not start", "overrides": ["backend=seekdb", "experiment=regress"]}]
    res = gate(base, cur, CFG, failed_jobs=failed)
    assert res.failed
    row = res.checks[res.checks["check"] == "coverage"].iloc[0]
    assert row["config"] == "seekdb / limit5" and row["verdict"] == "FAIL (BackendUnavailable: seekdb would not start)"
    assert "rows seekdb / limit5: present -> missing" in res.verdict


def test_a_store_left_out_fails_unless_allowed_and_a_measured_store_without_rows_is_missing():
    base = run_of(pd.concat([qrows("exact", "limit5", NAN, [1.0] * 4), qrows("seekdb", "limit5", NAN, [1.0] * 4)]), path="base")
    cur = run_of(qrows("exact", "limit5", NAN, [1.0] * 4))  # e.g. make regress ARGS="hydra.sweeper.params.backend=exact"
    res = gate(base, cur, CFG)
    row = res.checks[res.checks["check"] == "coverage"].iloc[0]
    assert res.failed and (row["config"], row["verdict"]) == ("seekdb / limit5", "FAIL (store not in this run; --allow stores accepts it)")
    res = gate(base, cur, CFG, allow=frozenset({"stores"}))
    assert not res.failed
    assert res.checks[res.checks["check"] == "coverage"].iloc[0]["verdict"] == "skipped (store not in this run; allowed by --allow stores)"
    assert res.verdict.endswith("(ds, 1 operating points; 1 baseline points not in this run; 1 allowed by --allow)")
    measured = RunData(cur.path, cur.summary, cur.rows, {"jobs": [{"backend": "exact"}, {"backend": "seekdb"}]}, cur.latency)
    row = gate(base, measured, CFG).checks.iloc[0]
    assert row["verdict"] == "FAIL (no rows for this store, though the run measured it; --allow missing accepts it)"


def test_another_grid_missing_questions_or_an_extra_store_fail_unless_allowed():
    base = run_of(pd.concat([qrows("exact", "threshold", t, [1.0] * 4) for t in (0.3, 0.4, 0.5)]
                            + [qrows("exact", "limit5", NAN, [1.0] * 4)]), path="base")
    narrow = run_of(pd.concat([qrows("exact", "threshold", t, [1.0] * 4) for t in (0.3, 0.4)] + [qrows("exact", "limit5", NAN, [1.0] * 4)]))
    c = coverage_checks(base.rows, narrow.rows, operating_points(base.summary, base.rows))
    assert c[["config", "metric", "baseline", "current"]].values.tolist() == [["exact / threshold", "thresholds", "0.3, 0.4, 0.5", "0.3, 0.4"]]
    assert c.iloc[0]["verdict"] == "FAIL (another threshold grid; --allow grid accepts it)"
    assert coverage_checks(base.rows, narrow.rows, [], allow=frozenset({"grid"})).iloc[0]["verdict"].startswith("skipped (another")
    lost = pd.concat([base.rows[base.rows["strategy"] == "threshold"], qrows("exact", "limit5", NAN, [1.0] * 4).iloc[:3]])
    c = coverage_checks(base.rows, lost, [("exact", "limit5", NAN)]).iloc[0]
    assert (c["metric"], c["baseline"], c["current"], c["verdict"]) == \
        ("questions", 4.0, 3.0, "FAIL (rows of 1 of 4 questions missing; --allow missing accepts it)")
    extra = pd.concat([base.rows, qrows("chroma", "limit5", NAN, [1.0] * 4)])
    c = coverage_checks(base.rows, extra, []).iloc[0]
    assert (c["config"], c["verdict"]) == ("chroma", "FAIL (store(s) not in the baseline: not gated; --allow stores accepts it)")


def test_runs_on_other_embedders_or_question_sets_are_not_compared_silently():
    base = run_of(qrows("exact", "limit5", NAN, [1.0] * 4), path="base")
    other = run_of(qrows("exact", "limit5", NAN, [1.0] * 4, embedder="other"))
    res = gate(base, other, CFG)
    assert res.failed and res.verdict == ("regress FAIL: cannot compare: baseline base was made with embedder 'emb', this run uses "
                                          "'other'; --allow embedder skips the comparison")
    res = gate(base, other, CFG, allow=frozenset({"embedder"}))
    assert res.skipped and not res.failed and res.verdict.endswith("this run uses 'other' (allowed by --allow embedder)")
    fewer = run_of(qrows("exact", "limit5", NAN, [1.0] * 3))
    res = gate(base, fewer, CFG)
    assert res.failed and "questions dataset: 4.0 -> 3.0" in res.verdict


def test_runs_scored_on_other_gold_labels_fail_the_gate():
    rows = qrows("exact", "limit5", NAN, [1.0] * 4)
    t = lat([[2.0]], [[1.0]])
    base = RunData(Path("base"), run_of(rows).summary, rows, {"labels_sha256": "a" * 64}, t)
    same = RunData(Path("cur"), base.summary, rows, {"labels_sha256": "a" * 64}, t)
    relabelled = RunData(Path("cur"), base.summary, rows, {"labels_sha256": "b" * 64}, t)
    unknown = RunData(Path("cur"), base.summary, rows, {}, t)  # a baseline or run made before labels were recorded
    assert not gate(base, same, CFG).failed and not gate(base, unknown, CFG).failed
    res = gate(base, relabelled, CFG)
    assert res.failed and "labels dataset: aaaaaaaaaaaa -> bbbbbbbbbbbb" in res.verdict


def test_markdown_lists_failures_first_with_baseline_current_delta_and_verdict():
    box = {"machine": {"cpu": "AMD EPYC", "family": "25", "model": "1", "cores": 2}}
    base = dataclasses.replace(run_of(qrows("exact", "limit5", NAN, [1.0] * 20), lat([[2.0]], [[1.0]]), path="base"), meta=box)
    cur = dataclasses.replace(run_of(qrows("exact", "limit5", NAN, [0.5] * 20, tokens=150), lat([[2.2]], [[1.0]])), meta=box)
    res = gate(base, cur, CFG)
    md = render_markdown(res, CFG, base, cur)
    assert "- Machine: baseline AMD EPYC (family 25, model 1, 2 cores); current AMD EPYC (family 25, model 1, 2 cores): the same" in md
    other = render_markdown(gate(base, dataclasses.replace(cur, meta={}), CFG), CFG, base, dataclasses.replace(cur, meta={}))
    assert "current not recorded: not the same one (latency limit x2)" in other
    lines = md.splitlines()
    header = lines.index("| check | config | metric | baseline | current | delta | ratio | limit | changed | min p | Holm p | verdict |")
    body = lines[header + 2:]
    assert body[0].startswith("| quality | exact / limit5 | recall | 1.000 | 0.500 | -0.500 | — | 0.05 | 20 | 0.0001 |")
    assert body[0].endswith("| **FAIL** |")
    assert "| tokens | exact / limit5 | tokens_injected_mean | 100.0 | 150.0 | +50.0 | 1.50 | 1.1 | — | — | — | **FAIL** |" in body
    assert body[-1] == "| latency | sqlite_vec | store / exact (per-query min) | 2.00 | 2.20 | +0.20 | 1.10 | 1.4 | — | — | — | ok |"
    assert "Quality tests run (checks where something changed): sign-flip, 10000 random patterns over the 20 changed questions " \
           "(smallest reachable p 0.0001, Holm level 0.05)." in lines
    assert md.count("**FAIL**") == 4  # recall, f1, precision, tokens
    assert f"**{res.verdict}**" in md


def test_gating_a_run_without_a_baseline_for_its_dataset_fails_unless_allowed(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    rows = qrows("exact", "limit5", NAN, [1.0] * 4, dataset="mydata").assign(depth_saturated=False)
    rows.to_parquet(run / "questions.parquet")
    run_of(rows).summary.to_csv(run / "summary.csv", index=False)
    (tmp_path / "base" / "demo").mkdir(parents=True)
    code = R.main(["--run", str(run), "--baseline-root", str(tmp_path / "base"), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1
    assert out[-1].startswith("regress FAIL: cannot compare: no baseline for dataset 'mydata'") and out[-1].endswith("--allow baseline skips")
    code = R.main(["--run", str(run), "--baseline-root", str(tmp_path / "base"), "--out", str(tmp_path / "out"), "--allow", "baseline"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and out[-1].startswith("regress SKIPPED: no baseline for dataset 'mydata'")
    assert "SKIPPED" in (tmp_path / "out" / "summary.md").read_text()
    with pytest.raises(SystemExit):
        R.main(["--run", str(run), "--allow", "embedder,everything"])
    assert "--allow: unknown name(s) ['everything']" in capsys.readouterr().err


def test_a_missing_run_is_a_clear_failure(tmp_path, capsys):
    code = R.main(["--run", str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    assert code == 1
    assert capsys.readouterr().out.strip().endswith("nope/summary.csv: not found (is " + str(tmp_path / "nope") + " a finished regress run or a baseline?)")


# ------------------------------------------------------------------------------ end to end (demo)

def drop_best(hits, *, question=None, eligible=(), threshold=None, k=5):
    """A deliberately broken limit-k: skips the best hit. Test-only (also usable as a Hydra _target_)."""
    return tuple(hits[1:k + 1])


def run_regress(tmp: Path, out: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_DATA_DIR",)}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1",
               GITHUB_STEP_SUMMARY=str(tmp / f"{out}.step.md"))
    cmd = [sys.executable, "-m", "bench.tools.regress", "--demo", "--out", str(tmp / out), "--baseline-root", str(tmp / "baseline"),
           *args, f"paths.reports={tmp / 'reports'}", "backend=exact,sqlite_vec"]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("regress")
    first = run_regress(tmp, "out1", "--write-baseline")
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_regress(tmp, "out2", "regress.latency_ratio_max=3")  # identical code: about quality, not this machine's timing
    return tmp, first, second


@pytest.mark.slow
@pytest.mark.timeout(2100)  # demo_runs: two regress runs, up to 900 s each
def test_write_baseline_writes_the_demo_baseline_with_a_readme(demo_runs):
    tmp, first, _ = demo_runs
    base = tmp / "baseline" / "demo"
    assert first.stdout.strip().splitlines()[-1] == f"regress BASELINE written: {base} (review and commit)"
    assert sorted(p.name for p in base.iterdir()) == ["README.md", "latency.csv", "meta.json", "questions.parquet", "summary.csv"]
    meta = json.loads((base / "meta.json").read_text())
    assert meta["dataset"] == "demo" and meta["backends"] == ["exact", "sqlite_vec"] and meta["n_questions"] == 25
    assert meta["strategies"] == ["limit5", "threshold", "hybrid5", "full_context"] and meta["gate"]["budget_ratio_max"] == 1.1
    assert len(meta["load_average"]) == 3
    lat = pd.read_csv(base / "latency.csv")
    assert list(lat.columns) == LATENCY_COLUMNS and set(lat["backend"]) == {"sqlite_vec"}  # exact: the ref_ms beside it
    assert sorted(set(lat["repeat"])) == list(range(7)) and len(lat) == 7 * 200  # 25 questions cycled to 200 searches per pass
    assert "demo corpus ships in `datasets/demo/`" in (base / "README.md").read_text()
    assert not (tmp / "out1.step.md").exists()  # writing a baseline is not a gate run


@pytest.mark.slow
@pytest.mark.timeout(2100)
def test_two_identical_runs_pass(demo_runs):
    tmp, _, second = demo_runs
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    last = second.stdout.strip().splitlines()[-1]
    assert last.startswith("regress PASS: 24 quality, 8 token and 1 latency checks within limits vs ")
    checks = pd.read_csv(tmp / "out2" / "checks.csv")
    q = checks[checks["check"] == "quality"]
    assert len(q) == 2 * 4 * 3 and (q["delta"] == 0).all()  # exact and sqlite_vec are deterministic
    md = (tmp / "out2" / "summary.md").read_text()
    assert md.startswith("# recallbench regression gate") and "| quality | exact / limit5 | recall |" in md
    assert (tmp / "out2.step.md").read_text().strip() == md.strip()  # appended to $GITHUB_STEP_SUMMARY


@pytest.mark.slow
@pytest.mark.timeout(2100)
def test_an_injected_regression_fails_and_names_the_metric(demo_runs, tmp_path, capsys):
    """The second run's limit5 rows re-swept from its own traces with a strategy that drops its best hit."""
    from bench.selection import formats as F
    from bench.data import tokens
    from bench.data.own import load_own
    from bench.strategies.spec import StrategySpec
    from bench.selection.sweep import sweep
    from bench.replay.trace import Trace

    tmp, _, _ = demo_runs
    broken = tmp_path / "broken"
    shutil.copytree(tmp / "out2" / "run", broken)
    corpus = load_own(path=DEMO, name="demo")
    table = F.token_table(corpus.turns(), lambda texts: tokens.count_tokens_many(texts, "cl100k_base"), F.FORMATS)
    rows = pd.read_parquet(broken / "questions.parquet")
    parts = [rows[rows["strategy"] != "limit5"]]
    for job in job_dirs(broken):
        trace = Trace.load(job / "trace")
        parts.append(sweep(trace, corpus, [StrategySpec("limit5", drop_best, thresholded=False)], (), dict(table.memory["A"]),
                           embedder=rows["embedder"].iloc[0]))
    pd.concat(parts, ignore_index=True).to_parquet(broken / "questions.parquet", index=False)

    code = R.main(["--run", str(broken), "--baseline-root", str(tmp / "baseline"), "--out", str(tmp_path / "out")])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1
    assert last.startswith("regress FAIL: ") and "recall exact / limit5: 0.659 -> " in last
    checks = pd.read_csv(tmp_path / "out" / "checks.csv")
    bad = checks[checks["verdict"] == "FAIL"]
    assert {(c, m) for c, m in zip(bad["config"], bad["metric"])} >= {("exact / limit5", "recall"), ("sqlite_vec / limit5", "recall")}
    assert set(bad["config"]) == {"exact / limit5", "sqlite_vec / limit5"}  # nothing else moved
