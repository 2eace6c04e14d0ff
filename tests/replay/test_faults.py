"""bench.replay.faults: injected store faults, deterministic with a seed, on the replay's question timeline.

Fixture: ten questions q0..q9 in conversation c1; q7 asked at 1.0 and q3 at 2.0, the others without asked_at. Replay
order (asked_at first, then file order): q7, q3, q0, q1, q2, q4, q5, q6, q8, q9, so at 1 question per second the
clock is q7=0 s, q3=1, q0=2, q1=3, q2=4, q4=5, q5=6, q6=7, q8=8, q9=9; at 2 per second every clock halves.
"""

import json

import numpy as np
import pandas as pd
import pytest

from bench import pipeline
from bench.backends.exact import ExactBackend
from bench.data.units import UnitSpec
from bench.embedders.hashing import HashingEmbedder
from bench.replay import faults as F
from bench.replay.trace import build_trace
from bench.results.rundir import RunDir
from bench.types import Conversation, Corpus, Question, Turn

TURNS = tuple(Turn("c1", f"t{i}", "user", "user", f"turn number {i} about topic {i}", None, i) for i in range(6))
ASKED = {"q7": 1.0, "q3": 2.0}
QUESTIONS = tuple(Question(f"q{i}", "c1", f"question {i} about topic {i % 6}", ASKED.get(f"q{i}"), (f"t{i % 6}",)) for i in range(10))
CORPUS = Corpus("tiny", (Conversation("c1", TURNS),), QUESTIONS)


def failed(plan, kind):
    return [q.question_id for q, f in zip(QUESTIONS, plan) if f == kind]


def test_the_clock_is_the_replay_order_at_rate_qps():
    assert dict(zip([q.question_id for q in QUESTIONS], F.question_clock(QUESTIONS).tolist())) == {
        "q7": 0, "q3": 1, "q0": 2, "q1": 3, "q2": 4, "q4": 5, "q5": 6, "q6": 7, "q8": 8, "q9": 9}
    assert F.question_clock(QUESTIONS, 2.0)[7] == 0.0 and F.question_clock(QUESTIONS, 2.0)[9] == 4.5


def test_an_outage_fails_exactly_the_questions_inside_its_window():
    plan = F.schedule(F.from_config({"outage": {"start_s": 2, "seconds": 3}}), QUESTIONS)  # [2, 5): clocks 2, 3, 4
    assert failed(plan, "outage") == ["q0", "q1", "q2"] and failed(plan, "error") == []
    plan = F.schedule(F.from_config({"outage": {"start_s": 2, "seconds": 3}, "rate_qps": 2}), QUESTIONS)  # 3 s x 2/s
    assert failed(plan, "outage") == ["q2", "q4", "q5", "q6", "q8", "q9"]  # clocks 2.0 .. 4.5
    assert F.schedule(F.from_config({"outage": {"start_s": 10, "seconds": 300}}), QUESTIONS) == [""] * 10  # after the last


def test_an_error_rate_with_a_seed_fails_the_exact_count_the_same_way_every_time():
    for rate, want in ((0.3, 3), (0.25, 2), (0.0, 0), (1.0, 10)):  # round(rate x 10)
        plan = F.schedule(F.from_config({"error_rate": rate, "seed": 7}), QUESTIONS)
        assert len(failed(plan, "error")) == want
    a = F.schedule(F.Faults(error_rate=0.3, seed=7), QUESTIONS)
    assert a == F.schedule(F.Faults(error_rate=0.3, seed=7), QUESTIONS)
    both = F.schedule(F.Faults(error_rate=1.0, outage_start_s=0, outage_seconds=2), QUESTIONS)  # the outage wins
    assert failed(both, "outage") == ["q3", "q7"] and len(failed(both, "error")) == 8


@pytest.mark.parametrize("node, field", [({"error_rate": 1.5}, "faults.error_rate"), ({"outage": {"start_s": 1}}, "faults.outage"),
                                         ({"slow": 3}, "unknown field(s) slow"), ({"seed": 0.5}, "faults.seed"),
                                         ({"rate_qps": 0}, "faults.rate_qps")])
def test_a_bad_setting_is_one_line_naming_the_field(node, field):
    with pytest.raises(ValueError, match=field.replace("(", r"\(").replace(")", r"\)")):
        F.from_config(node)


def test_the_wrapper_returns_nothing_for_a_failed_query_and_the_trace_records_it():
    faults = F.Faults(outage_start_s=2, outage_seconds=3, slow_ms=2.0)  # q0, q1, q2 down; every real call 2 ms slower
    trace = build_trace(CORPUS, HashingEmbedder(dim=64), ExactBackend(), depth=3, warmup=0, progress=False, faults=faults)
    n_hits = dict(zip(trace.table["question_id"], trace.table["hit_ids"].map(len)))
    assert [q for q, n in n_hits.items() if n == 0] == ["q0", "q1", "q2"]
    rec = trace.meta["faults"]
    assert rec["failed"] == {"error": [], "outage": ["q0", "q1", "q2"]} and (rec["n_outage"], rec["n_error"]) == (3, 0)
    lat = dict(zip(trace.table["question_id"], trace.table["latency_ns"]))
    assert all(lat[q] >= 2e6 for q in n_hits if q not in ("q0", "q1", "q2"))  # the sleep is inside the timed call
    assert F.failed_ids(trace.meta) == {"q0", "q1", "q2"} and F.failed_ids({}) == frozenset()
    assert trace.meta["short_results"] == 0  # an empty answer the fault gave is not a short list of the store


LIMIT1 = {"name": "limit1", "fn": {"_target_": "bench.strategies.vector.limit", "_partial_": True, "k": 1}}
FULL = {"name": "full", "fn": {"_target_": "bench.strategies.baselines.full_context", "_partial_": True}}


def tiny_inputs(tmp_path, n_questions: int, strategies) -> pipeline.Inputs:
    """The fixture's turns and first ``n_questions`` questions as an own-format corpus on disk, with the exact store."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "turns.jsonl").write_text("".join(json.dumps({"conversation_id": "c1", "turn_id": t.turn_id, "role": "user", "text": t.text})
                                              + "\n" for t in TURNS))
    (data / "questions.jsonl").write_text("".join(json.dumps({"question_id": q.question_id, "conversation_id": "c1", "text": q.text,
                                                              "evidence": list(q.evidence)}) + "\n" for q in QUESTIONS[:n_questions]))
    return pipeline.Inputs(corpus={"_target_": "bench.data.own.load_own", "path": str(data), "name": "tiny"},
                           embedder=HashingEmbedder(dim=64), store={"_target_": "bench.backends.exact.ExactBackend"},
                           strategies=tuple(strategies))


def test_faults_are_part_of_the_trace_key_and_reach_the_degradation_table(tmp_path):
    inputs = tiny_inputs(tmp_path, 4, [LIMIT1])
    base = pipeline.Settings(cache=tmp_path / "cache", config={"backend": "exact"}, thresholds=(0.5, 0.5, 0.05), warmup=0,
                             memory=UnitSpec(), e2e={"sample": 0})
    clean = pipeline.run(inputs, base, tmp_path / "clean")
    node = {"error_rate": 0.5, "seed": 0}  # 2 of the 4 questions
    hurt = pipeline.run(inputs, pipeline.Settings(**{**base.__dict__, "faults": node, "config": {"backend": "exact", "faults": node}}),
                        tmp_path / "hurt")
    m_clean, m_hurt = RunDir(clean.path).meta(), RunDir(hurt.path).meta()
    assert m_clean["trace_key"] != m_hurt["trace_key"] and "faults" not in m_clean
    assert m_hurt["faults"]["n_error"] == 2 and clean.summary["recall"].iloc[0] == 1.0  # each question finds its own turn
    d = pd.read_csv(hurt.path / "degradation.csv")
    fault = d[(d["cause"] == "fault") & (d["policy"] == "empty")].iloc[0]
    assert fault["failed_share"] == 0.5 and fault["recall"] == 0.5  # two found, two failed


def test_the_job_writes_the_end_to_end_table_without_measuring_embeddings_at_sample_zero(tmp_path):
    inputs = tiny_inputs(tmp_path, 2, [LIMIT1, FULL])
    r = pipeline.run(inputs, pipeline.Settings(cache=tmp_path / "cache", thresholds=(0.5, 0.5, 0.05), warmup=0, memory=UnitSpec(),
                                               e2e={"sample": 0}), tmp_path / "run")
    t = pd.read_csv(r.path / "latency_e2e.csv")
    assert list(t["strategy"]) == ["limit1", "limit1"]  # full context reads no store
    assert list(t["n_selected"]) == [1, 1] and not t["embed_measured"].any() and t["e2e_ns"].isna().all() and (t["store_ns"] > 0).all()


def test_faults_wrap_a_store_of_any_metric():
    """The wrapper opens the store with its configured metric (an l2 store is not opened as cosine): the native scores
    are the exact store's squared distances 2 - 2 cos for the questions that did not fail."""
    trace = build_trace(CORPUS, HashingEmbedder(dim=64), ExactBackend(metric="l2"), depth=3, warmup=0, progress=False,
                        faults=F.Faults(outage_start_s=2, outage_seconds=3))
    assert F.failed_ids(trace.meta) == {"q0", "q1", "q2"} and trace.meta["score"]["metric"] == "l2"
    for sims, native in zip(trace.table["hit_scores"], trace.table["native_scores"]):
        np.testing.assert_allclose(native, [2 - 2 * s for s in sims], atol=1e-5)
