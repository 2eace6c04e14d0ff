"""bench.pipeline.run on plain values: a hand-made corpus, the hashing embedder, the exact store.

Each question repeats one turn word for word, so that turn is its nearest memory at cosine 1 (the hashing embedder
is deterministic, the same text gives the same unit vector) and every other turn scores well below 0.95:
  q1 = t1, gold {t1}      -> top 1 = t1: precision 1, recall 1,   F1 1
  q2 = t3, gold {t3, t4}  -> top 1 = t3: precision 1, recall 1/2, F1 2/3
so limit1 and the cut at 0.95 both score precision 1, recall 3/4, F1 5/6; limit3 (three of the four turns)
finds t3 and t4 for q2 but also two others for each.
"""

import json
from dataclasses import replace

import pytest

from bench import pipeline
from bench.data.units import UnitSpec
from bench.embedders.hashing import HashingEmbedder
from bench.results.rundir import RunDir

TURNS = [
    ("t1", "user", "I adopted a grey cat named Miso last spring."),  # gold of q1
    ("t2", "assistant", "Lovely name. How is she settling in?"),
    ("t3", "user", "I work night shifts as a nurse in Lyon."),  # gold of q2
    ("t4", "user", "Those shifts at the hospital start at seven."),  # gold of q2
]
QUESTIONS = [("q1", "I adopted a grey cat named Miso last spring.", ["t1"]),
             ("q2", "I work night shifts as a nurse in Lyon.", ["t3", "t4"])]


def limit(k: int) -> dict:
    return {"name": f"limit{k}", "fn": {"_target_": "bench.strategies.vector.limit", "_partial_": True, "k": k}}


THRESHOLD = {"name": "threshold", "fn": {"_target_": "bench.strategies.vector.threshold", "_partial_": True}}


@pytest.fixture
def job(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "turns.jsonl").write_text("".join(json.dumps({"conversation_id": "c1", "turn_id": t, "role": r, "text": x}) + "\n"
                                              for t, r, x in TURNS))
    (data / "questions.jsonl").write_text("".join(json.dumps({"question_id": q, "conversation_id": "c1", "text": x, "evidence": e}) + "\n"
                                                  for q, x, e in QUESTIONS))
    inputs = pipeline.Inputs(corpus={"_target_": "bench.data.own.load_own", "path": str(data), "name": "tiny"},
                             embedder=HashingEmbedder(dim=256), store={"_target_": "bench.backends.exact.ExactBackend"},
                             strategies=(limit(1), limit(3), THRESHOLD))
    config = {"dataset": {"path": str(data)}, "embedder": "hashing", "backend": "exact", "depth": None, "paths": {"cache": "x"}}
    settings = pipeline.Settings(cache=tmp_path / "cache", config=config, thresholds=(0.95, 0.95, 0.05), warmup=0,
                                 memory=UnitSpec(), overrides=("backend=exact",), record="# the command's config\n")
    return inputs, settings


def rows(result, strategy):
    s = result.summary
    return s[(s["strategy"] == strategy) & (s["format"] == "A")]


def test_run_scores_the_hand_worked_corpus(job, tmp_path):
    inputs, settings = job
    r = pipeline.run(inputs, settings, tmp_path / "run")
    assert r.path == tmp_path / "run" and not r.resumed and r.faults == ()
    for name in ("limit1", "threshold"):  # t1 for q1, t3 for q2: both right, half of q2's gold
        row = rows(r, name).iloc[0]
        assert (row["n_questions"], row["precision"], row["recall"]) == (2, 1.0, 0.75)
        assert row["f1"] == pytest.approx((1 + 2 / 3) / 2)
    assert rows(r, "threshold").iloc[0]["threshold"] == 0.95
    three = rows(r, "limit3").iloc[0]  # q1: 1 of 3 right, all its gold; q2: 2 of 3 right (t3, t4), all its gold
    assert (three["precision"], three["recall"]) == (pytest.approx((1 / 3 + 2 / 3) / 2), 1.0)
    out = RunDir(r.path)
    q = out.questions()
    q2 = q[(q.strategy == "limit1") & (q.question_id == "q2") & (q.format == "A")].iloc[0]
    assert (q2["n_gold"], q2["n_selected"], q2["n_correct"], q2["recall"]) == (2, 1, 1, 0.5)
    meta = out.meta()
    assert meta["caches"]["job"] == {**r.key.describe(), "status": "miss"} and meta["overrides"] == ["backend=exact"]
    assert [t["status"] for t in meta["caches"]["traces"]] == ["miss"]
    assert (r.path / "config_resolved.yaml").read_text() == "# the command's config\n"
    assert list(out.summary()["recall"]) == pytest.approx(list(r.summary["recall"]))  # the table returned is the one written


def test_an_identical_job_is_copied_and_a_new_setting_reuses_the_trace(job, tmp_path):
    inputs, settings = job
    first = pipeline.run(inputs, settings, tmp_path / "a")
    again = pipeline.run(inputs, replace(settings, overrides=("again",)), tmp_path / "b")
    assert again.resumed and again.key == first.key  # the job key ignores the overrides (a record, not a setting)
    assert RunDir(again.path).meta()["caches"]["job"]["status"] == "hit"
    assert RunDir(again.path).meta()["overrides"] == ["again"]
    assert (tmp_path / "b" / "summary.csv").read_bytes() == (tmp_path / "a" / "summary.csv").read_bytes()
    # another threshold grid decides other results (a new job key) but not the trace: no store query
    wider = pipeline.run(inputs, replace(settings, config={**settings.config, "thresholds": [0.5]}, thresholds=(0.5, 0.95, 0.45)),
                         tmp_path / "c")
    assert not wider.resumed and wider.key != first.key
    assert [t["status"] for t in RunDir(wider.path).meta()["caches"]["traces"]] == ["hit"]
    assert sorted(rows(wider, "threshold")["threshold"]) == [0.5, 0.95]
    # trace_cache=false and resume=false: measured again
    fresh = pipeline.run(inputs, replace(settings, resume=False, trace_cache=False), tmp_path / "d")
    assert not fresh.resumed and [t["status"] for t in RunDir(fresh.path).meta()["caches"]["traces"]] == ["miss"]


def test_the_job_key_is_the_settings_that_decide_results(job):
    _, settings = job
    base = pipeline.job_settings(settings.config)
    assert base == {"dataset": {"path": settings.config["dataset"]["path"]}, "embedder": "hashing", "backend": "exact", "depth": None}
    moved = {**settings.config, "paths": {"cache": "elsewhere"}, "progress": False, "resume": False, "recommend": {"x": 1}}
    assert pipeline.job_settings(moved) == base  # where it writes and how it is reported: not the job
    store = {**settings.config, "backend": {"_target_": "x", "path": "/a", "collection": "c", "ef": 8}}
    assert pipeline.job_settings(store)["backend"] == {"_target_": "x", "ef": 8}  # where the store writes: not the job


def test_a_failure_is_recorded_with_its_key_when_known(job, tmp_path):
    inputs, settings = job
    missing = replace(inputs, corpus={"_target_": "bench.data.own.load_own", "path": str(tmp_path / "nowhere")})
    with pytest.raises(FileNotFoundError):
        pipeline.run(missing, settings, tmp_path / "x")
    rec = RunDir(tmp_path / "x").failed()
    assert rec[0]["job_key"] is None and rec[0]["reason"].startswith("FileNotFoundError: ")
    assert rec[0]["backend"] == "bench.backends.exact.ExactBackend" and rec[0]["overrides"] == ["backend=exact"]
    twice = replace(inputs, strategies=(limit(1), limit(1)))  # after the key: the key is in the record
    with pytest.raises(ValueError, match="limit1 used twice"):
        pipeline.run(twice, settings, tmp_path / "y")
    assert RunDir(tmp_path / "y").failed()[0]["job_key"] is not None
