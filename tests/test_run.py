"""Run identity (bench/run.py): content keys, cached-job manifests, unique names, reports/latest."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import run
from bench.types import Conversation, Corpus, Question, Turn

REPO = Path(__file__).resolve().parent.parent


def tiny(text="I like tea", evidence=("t1",), asked_at=None, source="/a/turns.jsonl") -> Corpus:
    turns = (Turn("c1", "t1", "user", "u", text, 10.0, 0), Turn("c1", "t2", "assistant", "a", "noted", 11.0, 1))
    q = Question("q1", "c1", "what do I like?", asked_at, tuple(evidence))
    return Corpus("own", (Conversation("c1", turns),), (q,), source=source)


def test_corpus_digest_follows_content_not_place():
    base = run.corpus_digest(tiny())
    assert base == run.corpus_digest(tiny(source="/elsewhere/copy"))  # same content, another path: same key
    assert len({base, run.corpus_digest(tiny(text="I like coffee")), run.corpus_digest(tiny(evidence=("t2",))),
                run.corpus_digest(tiny(asked_at=10.5)), run.corpus_digest(tiny(evidence=()))}) == 5
    c = tiny()
    renamed = dataclasses.replace(c, name="other")
    assert run.corpus_digest(renamed) != base


def test_labels_digest_follows_questions_and_gold_not_turn_text():
    base = run.labels_digest(tiny())
    assert base == run.labels_digest(tiny(text="I like coffee"))  # a turn's text is not a label
    assert base == run.labels_digest(tiny(evidence=("t1",), source="/b"))
    assert len({base, run.labels_digest(tiny(evidence=("t2",))), run.labels_digest(tiny(evidence=())),
                run.labels_digest(tiny(asked_at=10.5))}) == 4
    c = tiny()
    two = dataclasses.replace(c, questions=(*c.questions, Question("q0", "c1", "who?", None, ("t2",))))
    flipped = dataclasses.replace(two, questions=tuple(reversed(two.questions)))
    assert run.labels_digest(two) == run.labels_digest(flipped) != base  # question order does not matter
    assert run.labels_digest(dataclasses.replace(c, questions=(dataclasses.replace(c.questions[0], evidence=("t1", "t2")),))) \
        == run.labels_digest(dataclasses.replace(c, questions=(dataclasses.replace(c.questions[0], evidence=("t2", "t1")),)))


def test_code_digest_and_module_of():
    assert run.module_of("bench.backends.seekdb.SeekdbBackend") == "backends/seekdb"
    assert run.module_of("bench.embedders.synthetic.SyntheticEmbedder") == "embedders/synthetic"
    assert run.module_of("somepkg.Store") == ""
    assert run.code_digest("replay/trace") != run.code_digest("types")
    assert run.code_digest("replay/trace", "types") == run.code_digest("replay/trace", "types")
    assert len(run.code_digest("*")) == 16


def test_trace_key_ignores_where_a_store_writes_but_not_what_it_computes():
    kw = dict(corpus_sha="c", embedder={"model_id": "m", "endpoint": "http://a/v1"}, depth=10, roles=None, warmup=5)
    store = {"_target_": "bench.backends.exact.ExactBackend"}
    k = run.trace_key(backend={**store, "path": "/x", "collection": "a"}, **kw).digest
    assert k == run.trace_key(backend={**store, "path": "/y", "collection": "b"}, **kw).digest
    others = [run.trace_key(backend={**store, "ef_search": 64}, **kw),
              run.trace_key(backend={**store, "layout": "per_conversation"}, **kw),  # bench.backends.layout
              run.trace_key(backend={**store, "metric": "l2"}, **kw),  # the store's native metric (bench.backends.scores)
              run.trace_key(backend=store, **{**kw, "depth": 11}),
              run.trace_key(backend=store, **{**kw, "roles": ("user",)}),
              run.trace_key(backend=store, **{**kw, "embedder": {"model_id": "m", "endpoint": "http://b/v1"}}),
              run.trace_key(backend=store, **{**kw, "corpus_sha": "d"}),
              run.trace_key(backend=store, **{**kw, "metadata_filter": {"project": {"eq": "alpha"}}}),
              run.trace_key(backend=store, **{**kw, "metadata_filter": {"project": {"eq": "beta"}}})]
    assert k not in {o.digest for o in others} and len({o.digest for o in others}) == 9
    assert run.trace_key(backend=store, **{**kw, "metadata_filter": None}).digest == run.trace_key(backend=store, **kw).digest
    inputs = run.trace_key(backend=store, **kw).describe()["inputs"]
    assert inputs["code"] == run.code_digest(*run.TRACE_CODE, "backends/exact")  # the store adapter's own code counts


def test_the_score_basis_is_part_of_the_job_key_not_of_the_trace_key():
    from bench.pipeline import job_settings

    jobs = {run.job_key(settings=job_settings({"score": basis, "paths": {"reports": "x"}}), corpus_sha="c", embedder={}).digest
            for basis in ("similarity", "native", "one_minus_distance")}
    assert len(jobs) == 3  # what thresholds compare with decides the results (bench.selection.basis); the trace is the same


def job_dir(tmp_path: Path) -> Path:
    out = tmp_path / "run" / "job0"
    (out / "trace").mkdir(parents=True)
    (out / "summary.csv").write_text("a,b\n1,2\n")
    (out / "questions.parquet").write_bytes(b"PAR1...")
    (out / "trace" / "trace.parquet").write_bytes(b"PAR1 trace")
    (out / "cli.log").write_text("log lines are not results")
    (out / "config_resolved.yaml").write_text("recommend: {objective: max_f1}\n")
    return out


def test_cached_job_is_checked_file_by_file(tmp_path):
    key = run.Key("job", {"x": 1})
    done = run.save_job(job_dir(tmp_path), tmp_path / "jobs", key, exclude=("config_resolved.yaml",))
    assert done.name == key.digest
    manifest = json.loads((done / run.MANIFEST).read_text())
    assert sorted(manifest["files"]) == ["questions.parquet", "summary.csv", "trace/trace.parquet"]  # no log, no config
    assert manifest["inputs"] == {"x": 1}
    assert run.check_job(done, key) == ""
    assert run.check_job(done, key, required=("summary.csv", "questions.parquet")) == ""
    assert run.check_job(done, key, required=("summary.csv", "corpus.json.gz")) == "corpus.json.gz missing from the manifest"
    assert run.check_job(done, run.Key("job", {"x": 2})) == "manifest is for another key"
    (done / "summary.csv").write_text("a,b\n")  # rows lost
    assert run.check_job(done, key) == "summary.csv changed since it was cached (sha256 mismatch)"
    run.save_job(job_dir(tmp_path / "again"), tmp_path / "jobs", key)  # replaced whole
    assert run.check_job(done, key) == ""
    (done / "trace" / "trace.parquet").unlink()
    assert run.check_job(done, key) == "trace/trace.parquet missing"
    assert run.check_job(tmp_path / "nowhere", key) == "no manifest"


def test_restore_copies_results_not_the_manifest(tmp_path):
    key = run.Key("job", {})
    done = run.save_job(job_dir(tmp_path), tmp_path / "jobs", key)
    out = tmp_path / "restored"
    run.restore_job(done, out)
    assert (out / "summary.csv").read_text() == "a,b\n1,2\n" and not (out / run.MANIFEST).exists()


def test_publish_latest_is_a_symlink_swapped_in_one_rename(tmp_path):
    reports = tmp_path / "reports"
    a, b = reports / "runs" / "a", reports / "runs" / "b"
    for d in (a, b):
        d.mkdir(parents=True)
        (d / "report.md").write_text(d.name)
    (reports / "latest").mkdir()  # a copy left by an older version
    (reports / "latest" / "report.md").write_text("old copy")
    run.publish_latest(a, reports / "latest")
    assert (reports / "latest").is_symlink() and os.readlink(reports / "latest") == "runs/a"
    assert (reports / "latest" / "report.md").read_text() == "a"
    run.publish_latest(b, reports / "latest")
    assert (reports / "latest" / "report.md").read_text() == "b"
    assert sorted(p.name for p in reports.iterdir()) == ["latest", "runs"]  # no temp link left behind


def test_process_token_is_unique_per_process_and_stable_within_one():
    assert run.process_token() == run.process_token()
    code = "from bench import run; print(run.process_token())"
    others = {subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
              for _ in range(2)}
    assert len(others) == 2 and run.process_token() not in others
    assert all(t.split("x")[0].isdigit() for t in others)


def test_run_id_is_fresh_per_command_and_shared_with_workers(monkeypatch):
    monkeypatch.delenv(run.RUN_ID_ENV, raising=False)
    first = run.new_run_id()
    assert run.run_id() == first == os.environ[run.RUN_ID_ENV]  # workers inherit the environment
    assert run.new_run_id() != first


# A store directory owned by a process whose PID this namespace does not see (another PID namespace, or a reused
# PID): the child pretends its PID is 4194304 (above every pid_max, so no /proc entry here ever has it).
OWNER = """
import os, sys
os.getpid = lambda: 4194304
from pathlib import Path
from bench import run
d = run.private_store_dir(Path(sys.argv[1]))
(d / "index.bin").write_bytes(b"live")
print(d, flush=True)
sys.stdin.readline()  # holds its lock until the test closes stdin
"""


def test_a_live_store_dir_is_kept_whatever_its_pid_and_removed_once_its_owner_ends(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "seekdb")], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        live = Path(owner.stdout.readline().strip())
        assert live.name == f"proc-{4194304}x{live.name.split('x')[1]}" and not Path("/proc/4194304").exists()
        assert run.remove_stale_store_dirs(tmp_path) == 0  # its PID is nowhere here, but its lock is held: alive
        assert (live / "index.bin").read_bytes() == b"live"
    finally:
        owner.stdin.close()
        owner.wait()
    assert run.remove_stale_store_dirs(tmp_path) == 1  # the owner ended: its lock can be taken
    assert not live.exists() and not live.with_name(live.name + ".lock").exists()


def test_only_store_dirs_with_an_owner_lock_are_ever_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    unowned = tmp_path / "seekdb" / f"proc-{dead.stdout.strip()}xabc123"  # an older version's, or made by hand
    mine = run.private_store_dir(tmp_path / "seekdb")
    other_store = tmp_path / "chroma" / "unrelated"
    for d in (unowned, other_store):
        d.mkdir(parents=True)
    assert mine.is_dir() and mine.with_name(mine.name + ".lock").is_file()
    assert run.private_store_dir(tmp_path / "seekdb") == mine  # once per process and path
    assert run.remove_stale_store_dirs(tmp_path) == 0
    assert unowned.exists() and mine.exists() and other_store.exists()


def test_two_saves_of_one_job_at_once_leave_one_complete_entry(tmp_path, monkeypatch):
    """Process B's complete entry lands at ``done`` between process A's two renames (A moved the old entry aside):
    the old code's rename onto it raised OSError 'Directory not empty'; now A keeps B's entry."""
    key = run.Key("job", {"x": 1})
    theirs = run.save_job(job_dir(tmp_path / "b"), tmp_path / "other" / "jobs", key)
    (theirs / "summary.csv").write_text("a,b\n3,4\n")  # B's results (its manifest updated to match below)
    manifest = json.loads((theirs / run.MANIFEST).read_text())
    manifest["files"]["summary.csv"] = run.sha256_file(theirs / "summary.csv")
    (theirs / run.MANIFEST).write_text(json.dumps(manifest))
    done = run.save_job(job_dir(tmp_path / "first"), tmp_path / "jobs", key)
    real_rename, real_replace = os.rename, os.replace
    raced = []

    def racing(src, dst, *a, **kw):
        move = real_rename if racing.name == "rename" else real_replace
        if Path(dst) == done and Path(src).name.startswith(f".{key.digest}.") and not raced:
            raced.append(src)
            import shutil
            shutil.copytree(theirs, done)  # B finished first
        return move(src, dst, *a, **kw)

    for name in ("rename", "replace"):
        fn = lambda src, dst, *a, _n=name, **kw: (setattr(racing, "name", _n), racing(src, dst, *a, **kw))[1]  # noqa: E731
        monkeypatch.setattr(run.os, name, fn)
    assert run.save_job(job_dir(tmp_path / "a"), tmp_path / "jobs", key) == done
    assert raced and run.check_job(done, key) == ""
    assert (done / "summary.csv").read_text() == "a,b\n3,4\n"  # one complete entry: B's
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == [key.digest]  # nothing left aside


@pytest.mark.parametrize("value", ["sk-1", {"a": [1, 2]}, None])
def test_fingerprint_is_canonical(value):
    assert run.fingerprint({"k": value, "j": 1}) == run.fingerprint({"j": 1, "k": value})
