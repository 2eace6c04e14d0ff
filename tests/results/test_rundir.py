"""bench/results/rundir.py, the one owner of the run directory, and bench/data/snapshot.py (the corpus a job keeps).

Hand-worked: a tiny job directory written through RunDir's writers and read back; a multirun merge
(numeric job order, failed jobs listed, colliding configurations labelled); the corpus snapshot round
trip and its digest check; a real job written by the CLI read back; and a report rebuilt after the
dataset files were deleted (calibration and attribution come from the run directory alone).
"""

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from demo_run import demo_run

from bench.results import rundir
from bench.data import snapshot
from bench.data.own import load_own
from bench.run import corpus_digest, labels_digest
from bench.results.rundir import RunDir, collect_jobs, strategy_record
from bench.strategies.spec import load_spec, load_specs
from bench.replay.trace import Trace
from bench.types import Conversation, Corpus, Defect, Hit, Question, Turn

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "datasets" / "demo"

TINY = Corpus(
    name="tiny",
    conversations=(
        Conversation("c1", (
            Turn("c1", "t1", "user", "Ana", "hi, I'm Ana", 100.0, 0, 0),
            Turn("c1", "t2", "assistant", "bot", "Hello Ana: 你好", 100.25, 1, 0),  # non-ASCII kept as is
            Turn("c1", "t3", "user", "Ana", "I moved to Oslo", None, 2, 1),  # no timestamp
        )),
        Conversation("c2", (Turn("c2", "t1", "user", "user", "x", 5, 0, 0),)),  # an int timestamp stays an int
    ),
    questions=(
        Question("q1", "c1", "where does Ana live?", None, ("t3",), "single-hop", False, "Oslo"),
        Question("q2", "c2", "what did I say about Paris?", 10.5, (), "adversarial", True, ""),
    ),
    defects=(Defect("tiny.json", "c1/qa[0]", "evidence[1]", "evidence_out_of_range", "'t9'", "dropped from gold"),),
    source="/somewhere/tiny.json",
)
LIMIT3 = {"name": "top3", "thresholded": False, "fn": {"_target_": "bench.strategies.vector.limit", "_partial_": True, "k": 3}}
THRESHOLD = {"name": "cosine", "thresholded": True, "roles": ["user"], "fn": {"_target_": "bench.strategies.vector.threshold", "_partial_": True}}


# --------------------------------------------------------------------------- corpus snapshot

def test_snapshot_round_trip_keeps_every_field(tmp_path):
    path = snapshot.dump(TINY, tmp_path / "c.json.gz")
    back = snapshot.load(path)
    assert back == TINY and corpus_digest(back) == corpus_digest(TINY)
    assert back.source == "/somewhere/tiny.json" and back.defects[0].action == "dropped from gold"
    assert back.questions[0].evidence == ("t3",) and back.questions[0].asked_at is None and back.questions[1].adversarial is True
    assert back.conversations[0].turns[2].timestamp is None and back.conversations[1].turns[0].timestamp == 5
    assert type(back.conversations[1].turns[0].timestamp) is int  # 5, not 5.0: the digest would differ
    assert back.conversations[0].turns[1].text == "Hello Ana: 你好" and back.conversations[0].turns[1].key == "c1|t2"
    assert snapshot.dump(TINY, tmp_path / "again.json.gz").read_bytes() == path.read_bytes()  # deterministic bytes


def test_snapshot_of_a_loaded_corpus_round_trips(tmp_path):
    demo = load_own(path=DEMO)
    assert snapshot.load(snapshot.dump(demo, tmp_path / "demo.json.gz")) == demo


@pytest.mark.parametrize("corpus", [TINY, Corpus("empty", (), ())], ids=["tiny", "empty"])
def test_snapshot_is_json_lines_and_a_v1_document_still_reads(tmp_path, corpus):
    # v2: a head with the number of conversations, a line per conversation, then questions and defects
    import gzip
    import json

    path = snapshot.dump(corpus, tmp_path / "c.json.gz")
    lines = gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()
    assert json.loads(lines[0]) == {"format": "recallbench-corpus-v2", "name": corpus.name, "source": corpus.source,
                                    "conversations": len(corpus.conversations)}
    assert [json.loads(x)["conversation_id"] for x in lines[1:-1]] == [c.conversation_id for c in corpus.conversations]
    assert sorted(json.loads(lines[-1])) == ["defects", "questions"] and snapshot.load(path) == corpus
    v1 = tmp_path / "v1.json.gz"  # a snapshot written before v2: one JSON document
    v1.write_bytes(gzip.compress(json.dumps(snapshot.to_plain(corpus), ensure_ascii=False).encode("utf-8")))
    assert snapshot.load(v1) == corpus
    path.write_bytes(gzip.compress("\n".join(lines[:-1]).encode("utf-8")))  # cut before its questions
    with pytest.raises(ValueError, match=r"c.json.gz: not a readable corpus snapshot \(JSONDecodeError"):
        snapshot.load(path)


def test_snapshot_never_encodes_the_whole_corpus_at_once(tmp_path, monkeypatch):
    import json

    sizes, real = [], json.dumps
    monkeypatch.setattr(snapshot.json, "dumps", lambda *a, **kw: sizes.append(len(out := real(*a, **kw))) or out)
    path = snapshot.dump(TINY, tmp_path / "c.json.gz")
    whole = len(real(snapshot.to_plain(TINY), ensure_ascii=False, separators=(",", ":")))
    assert len(sizes) == 4 and max(sizes) < whole  # head, two conversations, questions and defects: each on its own
    assert snapshot.load(path) == TINY


def test_damaged_snapshot_is_one_clear_error(tmp_path):
    bad = tmp_path / "corpus.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(ValueError, match=r"corpus.json.gz: not a readable corpus snapshot \(BadGzipFile"):
        snapshot.load(bad)
    bad.write_bytes(gzip.compress(json.dumps({"format": "other"}).encode()))
    with pytest.raises(ValueError, match=r"corpus.json.gz: field format is 'other', expected 'recallbench-corpus-v2' or 'recallbench-corpus-v1'"):
        snapshot.load(bad)


def test_corpus_is_checked_against_the_jobs_digest(tmp_path):
    run = RunDir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"corpus.json.gz: not found \(the job wrote no corpus snapshot"):
        run.corpus()
    run.write_meta({"corpus_sha256": corpus_digest(TINY)})
    run.write_corpus(TINY)
    assert run.corpus() == TINY
    edited = Corpus(TINY.name, TINY.conversations[1:], TINY.questions, TINY.defects, TINY.source)
    run.write_corpus(edited)  # not the corpus the job measured
    with pytest.raises(ValueError, match=r"corpus.json.gz: the corpus differs from the one measured \(sha256 != meta.json corpus_sha256\)"):
        run.corpus()


# --------------------------------------------------------------------------- one job

def write_tiny_job(path: Path, *, dataset="tiny", backend="exact", strategy="top3", overrides=(), config=True) -> RunDir:
    run = RunDir(path)
    rows = pd.DataFrame({"dataset": dataset, "embedder": "e", "backend": backend, "strategy": strategy, "threshold": [float("nan")] * 2,
                         "question_id": ["q1", "q2"], "recall": [1.0, float("nan")]})
    summary = pd.DataFrame({"dataset": [dataset], "embedder": ["e"], "backend": [backend], "strategy": [strategy],
                            "threshold": [float("nan")], "recall": [1.0]})
    run.write_results(rows, summary)
    run.write_card(f"card of {dataset}")
    run.write_corpus(TINY)
    run.write_strategies([strategy_record(load_spec(n), n) for n in (LIMIT3, THRESHOLD)])
    table = pd.DataFrame({"question_id": ["q1", "q2"], "conversation_id": ["c1", "c2"], "latency_ns": [1, 2],
                          "hit_ids": [["c1|t3", "c1|t1"], ["c2|t1"]], "hit_scores": [[0.9, 0.1], [0.2]], "exact_scores": [[0.9, 0.1], [0.2]]})
    Trace(table, {"dataset": dataset, "backend": backend, "roles": ["user"]}).save(run.trace_dir(("user",)))
    run.write_meta({"dataset": dataset, "backend": backend, "embedder": "e", "corpus_sha256": corpus_digest(TINY), "overrides": list(overrides)})
    if config:
        run.write_config(yaml.safe_dump({"seed": 3, "recommend": {"n_resamples": 10}, "strategy": {"limit": LIMIT3}}))
    return run


def test_a_job_written_through_rundir_reads_back(tmp_path):
    run = write_tiny_job(tmp_path / "job")
    assert sorted(p.name for p in run.path.iterdir()) == sorted(
        [rundir.SUMMARY, rundir.QUESTIONS, rundir.CARD, rundir.CORPUS, rundir.STRATEGIES, rundir.META, rundir.CONFIG, "trace_user"])
    assert run.finished() and run.job_dirs() == [run] and run.all_job_dirs() == []
    assert run.jobs() == [run.meta()] and run.meta()["dataset"] == "tiny"
    assert run.summary()["recall"].tolist() == [1.0] and run.questions()["question_id"].tolist() == ["q1", "q2"]
    assert run.card() == "card of tiny" and run.failed() == [] and run.latency() is None and run.corpus() == TINY
    assert run.labels() == {"tiny": labels_digest(TINY)}  # no labels_sha256 in meta.json: from the corpus snapshot
    assert run.settings() == {"seed": 3, "recommend": {"n_resamples": 10}, "strategy": {"limit": LIMIT3}}
    s = run.strategies()
    assert [(x["name"], x["kind"], x["roles"], x["params"], x["thresholded"]) for x in s] == [
        ("top3", "limit", None, {"k": 3}, False), ("cosine", "threshold", ["user"], {}, True)]
    assert run.strategy_names("limit", k=3) == ["top3"] and run.strategy_names("limit", k=5) == []
    assert run.strategy_names("threshold") == [] and run.strategy_names("threshold", roles=["user"]) == ["cosine"]
    specs = load_specs(run.strategies())  # rebuilt from the plain configs strategies.json keeps, no Hydra
    assert [(x.name, x.kind, x.params, x.roles) for x in specs] == [("top3", "limit", {"k": 3}, None), ("cosine", "threshold", {}, ("user",))]
    hits = tuple(Hit(f"c1|t{i}", 1 - i / 10) for i in range(5))
    assert [h.id for h in specs[0].fn(hits, question=TINY.questions[0], eligible=(), threshold=None)] == ["c1|t0", "c1|t1", "c1|t2"]
    (trace,) = run.traces()
    assert trace.meta["roles"] == ["user"] and trace.table["hit_ids"].map(list).tolist() == [["c1|t3", "c1|t1"], ["c2|t1"]]
    run.add_fault("cache not written")
    run.add_fault("second")
    assert run.faults() == ["cache not written", "second"]


def test_a_run_written_before_strategies_json_has_no_strategies_and_says_so(tmp_path, caplog):
    run = write_tiny_job(tmp_path / "old")
    run.file(rundir.STRATEGIES).unlink()
    assert run.strategies() == []  # read what was written: nothing is rebuilt from the config
    assert "strategies.json not found" in caplog.text


def test_load_job_reads_what_the_job_wrote(tmp_path):
    run = write_tiny_job(tmp_path / "job")
    job = rundir.load_job(run.path, memo := {})
    assert job.corpus == TINY and job.embedder == "e" and job.strategies == tuple(run.strategies())
    assert [t.meta["roles"] for t in job.traces] == [["user"]]
    assert rundir.load_job(run, memo).corpus is job.corpus  # one corpus per content digest, shared through memo
    assert job.token_counts is None  # its config names no cache
    run.write_config(yaml.safe_dump({"paths": {"cache": str(tmp_path / "c")}, "tokens": {"encoding": "o200k_base"}}))
    from bench.data.tokens import counts_file

    assert rundir.load_job(run).token_counts == counts_file(tmp_path / "c", "o200k_base", corpus_digest(TINY))
    assert rundir.load_job(run).token_counts.parent == tmp_path / "c" / "tokens"


def test_a_failed_single_run_has_no_results(tmp_path):
    run = RunDir(tmp_path)
    run.write_failed({"reason": "BackendUnavailable: no server", "overrides": ["backend=x"]})
    assert not run.finished() and run.job_dirs() == [] and run.jobs() == []
    assert run.failed() == [{"reason": "BackendUnavailable: no server", "overrides": ["backend=x"]}]
    assert run.settings_file() is None and run.settings() == {}


# --------------------------------------------------------------------------- a multirun

def test_collect_jobs_merges_finished_jobs_in_job_order(tmp_path):
    sweep = tmp_path / "sweep"
    write_tiny_job(sweep / "job0", overrides=["-m", "backend.ef=1"])
    RunDir(sweep / "job1").write_failed({"reason": "BackendUnavailable: no server", "overrides": ["backend=seekdb"]})
    write_tiny_job(sweep / "job2", overrides=["-m", "backend.ef=2"])  # same configuration names as job0: labelled
    write_tiny_job(sweep / "job10", backend="sqlite_vec", strategy="top3", overrides=["backend=sqlite_vec"], config=False)
    (sweep / "jobs_old").mkdir()  # not a job directory
    run = RunDir(sweep)
    assert [j.path.name for j in run.all_job_dirs()] == ["job0", "job1", "job2", "job10"]  # 10 after 2
    assert collect_jobs(sweep) is True
    assert [j.path.name for j in run.job_dirs()] == ["job0", "job2", "job10"] and run.finished()
    assert run.summary()["backend"].tolist() == ["exact (backend.ef=1)", "exact (backend.ef=2)", "sqlite_vec"]
    assert run.questions()["backend"].tolist() == ["exact (backend.ef=1)"] * 2 + ["exact (backend.ef=2)"] * 2 + ["sqlite_vec"] * 2
    assert [(j["job"], j["backend"]) for j in run.jobs()] == [("job0", "exact (backend.ef=1)"), ("job2", "exact (backend.ef=2)"),
                                                              ("job10", "sqlite_vec")]
    assert run.failed() == [{"reason": "BackendUnavailable: no server", "overrides": ["backend=seekdb"], "job": "job1"}]
    assert run.card() == "card of tiny"  # identical cards once
    assert run.settings_file() == sweep / "job0" / rundir.CONFIG and run.settings()["seed"] == 3
    assert [s["name"] for s in run.strategies()] == ["top3", "cosine"]  # union over the jobs, by name


def test_collect_jobs_without_a_finished_job(tmp_path):
    RunDir(tmp_path / "job0").write_failed({"reason": "interrupted (Ctrl-C) before the job finished"})
    assert collect_jobs(tmp_path) is False
    assert RunDir(tmp_path).failed() == [{"reason": "interrupted (Ctrl-C) before the job finished", "job": "job0"}]


# --------------------------------------------------------------------------- real runs

@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return demo_run(tmp_path_factory.getbasetemp())


@pytest.mark.slow
def test_a_job_of_the_cli_reads_back(run):
    r = RunDir(run)
    demo = load_own(path=DEMO)
    assert r.corpus() == demo and r.meta()["corpus_sha256"] == corpus_digest(demo)
    assert r.meta()["labels_sha256"] == labels_digest(demo) and r.labels() == {"demo": labels_digest(demo)}
    assert [(s["name"], s["kind"], s["params"]) for s in r.strategies()] == [
        ("limit5", "limit", {"k": 5}), ("threshold", "threshold", {}), ("hybrid5", "hybrid", {"k": 5}), ("full_context", "full_context", {})]
    assert [load_spec(s["config"]).params for s in r.strategies()] == [{"k": 5}, {}, {"k": 5}, {}]
    (trace,) = r.traces()
    assert len(trace.table) == len(demo.questions) == 25
    assert r.settings()["dataset"]["path"] == str(DEMO) and r.table("recommendation")["best"].sum() == 1
    (cached,) = (run.resolve().parent.parent / "cache" / "jobs").iterdir()  # the cached job keeps the new files ...
    files = json.loads((cached / "manifest.json").read_text())["files"]
    assert set(rundir.RESULTS) <= set(files) and rundir.CONFIG not in files  # ... never the command's config


@pytest.mark.slow
def test_a_moved_dataset_does_not_break_the_report(tmp_path):
    """Run on a temp copy of the demo corpus, delete the copy: ``recallbench report RUN`` still writes
    calibration and attribution (from the corpus snapshot and traces in the run directory)."""
    corpus = tmp_path / "corpus"
    shutil.copytree(DEMO, corpus)
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATA_DIR"}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "bench", f"paths.reports={tmp_path / 'reports'}", "dataset=own", f"dataset.path={corpus}",
           "embedder=hashing", "backend=exact", "progress=false", "strategy=[limit,threshold]", "recommend.n_resamples=50"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.rmtree(corpus)
    latest = tmp_path / "reports" / "latest"
    for name in (rundir.REPORT_MD, f"{rundir.ANALYSIS}/{rundir.MISSES}"):
        (latest / name).unlink()
    proc = subprocess.run([sys.executable, "-m", "bench.cli.main", "report", str(latest)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (latest / rundir.REPORT_MD).read_text()
    calib = text.split("## Calibration: where relevant and irrelevant memories score")[1].split("\n## ")[0]
    assert "AUC " in calib and "Not available" not in text
    assert "| dataset | configuration | threshold | missed |" in text.split("## Why gold memories are missed (at each strategy's chosen threshold)")[1]
    misses = RunDir(latest).misses()
    assert len(misses) > 0 and set(misses["strategy"]) <= {"limit5", "threshold"}
