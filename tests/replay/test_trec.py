"""TREC runs in and out (bench.replay.trec, `recallbench export`, `sweep run_file=`): formats, bad input, and the round trip."""

import os
import subprocess
import sys

import pandas as pd
import pytest
from demo_run import DEMO, REPO, demo_run

from bench.replay import trec
from bench.cli import export
from bench.replay.trace import TRACE_COLUMNS, Trace
from bench.types import Conversation, Corpus, Question, Turn


def _turn(conv, i, role="user", ts=None):
    return Turn(conv, f"t{i}", role, role, f"x{i}", float(i) if ts is None else ts, i)


CORPUS = Corpus(
    name="tiny",
    conversations=(Conversation("c1", (_turn("c1", 0), _turn("c1", 1, "assistant"), _turn("c1", 2), _turn("c1", 3))),
                   Conversation("c2", (_turn("c2", 0), _turn("c2", 1)))),
    questions=(Question("q1", "c1", "?", 2.0, ("t2",)),  # asked at time 2: may see t0, t1, t2
               Question("q2", "c2", "?", None, ("t0", "t1")),
               Question("q3", "c2", "?", None, ())),
    source="tiny.json",
)


def _trace():
    rows = [{"question_id": "q1", "conversation_id": "c1", "latency_ns": 5.0, "hit_ids": ["c1|t2", "c1|t0"], "hit_scores": [0.75, 0.1],
             "exact_scores": [0.75, 0.1], "gold_ids": ["c1|t2"], "gold_exact_ranks": [1]},
            {"question_id": "q2", "conversation_id": "c2", "latency_ns": 5.0, "hit_ids": ["c2|t1"], "hit_scores": [1 / 3],
             "exact_scores": [1 / 3], "gold_ids": ["c2|t0", "c2|t1"], "gold_exact_ranks": [2, 1]},
            {"question_id": "q3", "conversation_id": "c2", "latency_ns": 5.0, "hit_ids": [], "hit_scores": [],
             "exact_scores": [], "gold_ids": [], "gold_exact_ranks": []}]
    return Trace(pd.DataFrame(rows, columns=TRACE_COLUMNS), {"dataset": "tiny", "embedder": "e", "backend": "seekdb (ef 64)", "roles": None})


def test_export_writes_run_and_qrels_hand_worked(tmp_path):
    run, qrels = trec.export_trace(_trace(), tmp_path, CORPUS)
    assert run.read_text().splitlines() == ["q1 Q0 c1|t2 1 0.75 seekdb_(ef_64)", "q1 Q0 c1|t0 2 0.1 seekdb_(ef_64)",
                                            f"q2 Q0 c2|t1 1 {1 / 3!r} seekdb_(ef_64)"]
    assert qrels.read_text().splitlines() == ["q1 0 c1|t2 1", "q2 0 c2|t0 1", "q2 0 c2|t1 1"]
    hits, tag = trec.read_run(run, CORPUS)
    assert tag == "seekdb_(ef_64)" and hits == {"q1": [("c1|t2", 0.75), ("c1|t0", 0.1)], "q2": [("c2|t1", 1 / 3)]}  # exact floats


def _ir_measures_means(run, qrels, ks) -> dict:
    """ranked.csv's turn-level (metric, k) -> mean, computed by ir_measures from the exported files alone."""
    ir = pytest.importorskip("ir_measures")
    from ir_measures import RR, R, Success, nDCG

    names = {**{nDCG @ k: ("ndcg", k) for k in ks}, **{Success @ k: ("recall_any", k) for k in ks}, RR: ("mrr", None),
             **{R @ k: ("recall_all", k) for k in ks}}
    per: dict = {}
    for m in ir.iter_calc(list(names), list(ir.read_trec_qrels(str(qrels))), list(ir.read_trec_run(str(run)))):
        metric, k = names[m.measure]
        per.setdefault((metric, k), []).append(float(m.value == 1.0) if metric == "recall_all" else m.value)
    return {key: sum(v) / len(v) for key, v in per.items()}


def _ranked_means(table) -> dict:
    t = table[table["level"] == "turn"]
    return {(m, None if pd.isna(k) else int(k)): v for m, k, v in zip(t["metric"], t["k"], t["mean"])}


def test_exported_run_and_qrels_score_like_ranked_csv_with_ir_measures(tmp_path):
    """The qrels hold the scored questions only (q2, adversarial with LoCoMo-style evidence, is left out as in
    ranked.csv); q3 (scored, no hits) counts 0 in both; q4's gold t1 ties with t3 and keeps the trace's order."""
    from bench.metrics import ranked

    corpus = Corpus(name="tiny", conversations=(Conversation("c1", tuple(_turn("c1", i) for i in range(4))),),
                    questions=(Question("q1", "c1", "?", None, ("t2",)),
                               Question("q2", "c1", "?", None, ("t0",), adversarial=True),  # adversarial with evidence
                               Question("q3", "c1", "?", None, ("t1",)),  # scored, the store returned nothing
                               Question("q4", "c1", "?", None, ("t1",)),  # gold t1 tied with t3, t1 first in the trace
                               Question("q5", "c1", "?", None, ())))  # no gold: excluded
    hits = {"q1": (["c1|t0", "c1|t2"], [0.9, 0.5]), "q2": (["c1|t0", "c1|t1"], [0.8, 0.7]), "q3": ([], []),
            "q4": (["c1|t1", "c1|t3", "c1|t0"], [0.6, 0.6, 0.1]), "q5": (["c1|t0"], [0.3])}
    gold = {q.question_id: [f"c1|{e}" for e in q.evidence] for q in corpus.questions}
    table = pd.DataFrame([{"question_id": q, "conversation_id": "c1", "latency_ns": 1.0, "hit_ids": ids, "hit_scores": sc,
                           "exact_scores": sc, "gold_ids": gold[q], "gold_exact_ranks": [1] * len(gold[q])}
                          for q, (ids, sc) in hits.items()], columns=TRACE_COLUMNS)
    trace = Trace(table, {"dataset": "tiny", "embedder": "e", "backend": "exact", "roles": None})
    run, qrels = trec.export_trace(trace, tmp_path, corpus=corpus)
    assert qrels.read_text().splitlines() == ["q1 0 c1|t2 1", "q3 0 c1|t1 1", "q4 0 c1|t1 1"]
    assert "q2 Q0 c1|t0 1 0.8 exact" in run.read_text()  # the run keeps every question (read back: same summary)
    want = _ranked_means(ranked.for_traces([trace], corpus, ks=(1, 3, 5, 10)))
    # hand-worked: q1 gold at rank 2, q3 nothing, q4 gold at rank 1 -> MRR (1/2 + 0 + 1) / 3
    assert want["mrr", None] == pytest.approx(0.5)
    got = _ir_measures_means(run, qrels, (1, 3, 5, 10))
    assert set(got) == set(want)
    assert all(abs(got[k] - want[k]) <= 1e-9 for k in want), {k: (got[k], want[k]) for k in want}


@pytest.mark.slow
def test_locomo_export_scores_like_ranked_csv(tmp_path, bench_data_dir):
    """The real thing on two LoCoMo conversations (hashing embedder: seconds): 304 questions, adversarial ones with
    evidence; ir_measures on the exported files equals ranked.csv's turn level to 1e-9."""
    if not (bench_data_dir / "locomo" / "locomo10.json").is_file():
        pytest.skip(f"LoCoMo not under {bench_data_dir} (set BENCH_DATA_DIR)")
    env = {**_env(), "BENCH_DATA_DIR": str(bench_data_dir)}
    cmd = [sys.executable, "-m", "bench", f"paths.reports={tmp_path}", "dataset=locomo_ci", "embedder=hashing",
           "backend=exact", "progress=false", "defer_report=true"]
    proc = subprocess.run(cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert export.main([str(tmp_path / "latest"), "--out", str(tmp_path / "trec")]) == 0
    want = _ranked_means(pd.read_csv(tmp_path / "latest" / "ranked.csv"))
    got = _ir_measures_means(tmp_path / "trec" / "trace.run", tmp_path / "trec" / "trace.qrels", (1, 3, 5, 10))
    assert all(abs(got[k] - want[k]) <= 1e-9 for k in want), {k: (got[k], want[k]) for k in want}


def test_an_id_with_whitespace_cannot_be_exported(tmp_path):
    t = _trace()
    t.table.loc[0, "question_id"] = "q 1"
    with pytest.raises(ValueError, match="question id 'q 1' is empty or holds whitespace"):
        trec.export_trace(t, tmp_path, CORPUS)


def test_a_tag_with_a_path_is_kept_as_it_is(tmp_path):
    p = tmp_path / "r.trec"
    p.write_text("q1 Q0 c1|t0 1 0.9 ../../evil\n")
    assert trec.read_run(p, CORPUS)[1] == "../../evil"  # the report slugs file names made from it (hostile_forge.py)


def test_read_run_orders_by_score_then_rank(tmp_path):
    p = tmp_path / "r.trec"
    p.write_text("q2 Q0 c2|t0 2 0.5 sys\n\nq2 Q0 c2|t1 1 0.5 sys\nq1 Q0 c1|t0 7 0.9 sys\nq1 Q0 c1|t1 1 -2 sys\n")
    hits, tag = trec.read_run(p, CORPUS)
    assert hits == {"q2": [("c2|t1", 0.5), ("c2|t0", 0.5)], "q1": [("c1|t0", 0.9), ("c1|t1", -2.0)]} and tag == "sys"


@pytest.mark.parametrize("line,message", [
    ("q9 Q0 c1|t0 1 0.5 sys", "line 2: field qid 'q9' is not a question of tiny (tiny.json)"),
    ("q1 Q0 c1|t9 1 0.5 sys", "line 2: field docid 'c1|t9' is not a memory of tiny"),
    ("q1 Q0 t0 1 0.5 sys", "line 2: field docid 't0' is not a memory"),
    ("q1 Q0 c1|t1 x 0.5 sys", "line 2: field rank 'x' is not an integer"),
    ("q1 Q0 c1|t1 1 high sys", "line 2: field score 'high' is not a number"),
    ("q1 Q0 c1|t1 1 nan sys", "line 2: field score is NaN"),
    ("q1 Q0 c1|t1 1 0.5", "line 2: expected 6 fields 'qid Q0 docid rank score tag', got 5"),
    ("q1 Q0 c1|t1 1 0.5 other", "line 2: field tag 'other' differs from 'sys'"),
    ("q1 Q0 c1|t0 2 0.4 sys", "line 2: field docid 'c1|t0' repeated for question 'q1'"),
    ("q1 Q0 c1|t1 1 0.5 \x1b[31mred", "line 2: field tag '\\x1b[31mred' holds a control character"),
])
def test_bad_run_lines_are_one_clear_line_naming_file_line_and_field(tmp_path, line, message):
    p = tmp_path / "bad.trec"
    p.write_text(f"q1 Q0 c1|t0 1 0.9 sys\n{line}\n")
    with pytest.raises(ValueError) as e:
        trec.read_run(p, CORPUS)
    assert str(e.value).startswith(f"{p}: ") and message in str(e.value) and "\n" not in str(e.value)


def test_trace_from_run_keeps_what_the_question_may_see(tmp_path, caplog):
    p = tmp_path / "r.trec"
    # q1 (asked at 2): t3 is said later, c2|t0 is another conversation: both dropped; q3 has no line
    p.write_text("q1 Q0 c1|t3 1 0.9 sys\nq1 Q0 c1|t1 2 0.8 sys\nq1 Q0 c2|t0 3 0.7 sys\nq1 Q0 c1|t2 4 0.6 sys\nq2 Q0 c2|t0 1 0.3 sys\n")
    t = trec.trace_from_run(p, CORPUS)
    assert list(t.table.columns) == TRACE_COLUMNS and t.table["question_id"].tolist() == ["q1", "q2", "q3"]
    assert t.table["hit_ids"].tolist() == [["c1|t1", "c1|t2"], ["c2|t0"], []]
    assert t.table["hit_scores"].tolist() == [[0.8, 0.6], [0.3], []]
    assert t.table["latency_ns"].isna().all() and t.table["gold_ids"].tolist() == [["c1|t2"], ["c2|t0", "c2|t1"], []]
    assert (t.meta["backend"], t.meta["hits_dropped_not_visible"], t.meta["questions_without_lines"], t.meta["depth"]) == ("run:sys", 2, 1, 2)
    assert "2 hits the questions may not see" in caplog.text and "1 of 3 questions have no line" in caplog.text
    user = trec.trace_from_run(p, CORPUS, roles=("user",))  # c1|t1 is the assistant's
    assert user.table["hit_ids"].tolist()[0] == ["c1|t2"] and user.meta["hits_filtered_by_role"] == 1


def _env():
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATA_DIR"}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    return env


@pytest.mark.slow
def test_export_then_import_gives_the_same_summary(tmp_path_factory, tmp_path, capsys):
    """A run exported as TREC and read back with run_file=: every summary column equal except the store's name
    (``run:<tag>``), its layout (a run file has no store: ``none``) and the latency columns (no latency: NaN)."""
    base = tmp_path_factory.mktemp("trec_roundtrip")
    original = demo_run(base).resolve()  # latest moves to the re-imported run
    assert export.main([str(original), "--out", str(tmp_path / "trec")]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "trec" / "trace.run"), str(tmp_path / "trec" / "trace.qrels")]
    cmd = [sys.executable, "-m", "bench", f"paths.reports={base / 'demo_run'}", "dataset=own", f"dataset.path={DEMO}",
           "embedder=hashing", "progress=false", f"run_file={tmp_path / 'trec' / 'trace.run'}"]
    proc = subprocess.run(cmd, check=False, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    latest = base / "demo_run" / "latest"
    assert latest.resolve() != original.resolve()
    a, b = pd.read_csv(original / "summary.csv"), pd.read_csv(latest / "summary.csv")
    assert set(a["backend"]) == {"exact"} and set(b["backend"]) == {"run:exact"} and set(b["layout"]) == {"none"}
    latency = [c for c in a.columns if c.startswith("latency_")]
    assert latency and b[latency].isna().all().all() and a[latency].notna().any().any()
    same = [c for c in a.columns if c not in latency and c not in ("backend", "layout")]
    assert {"recall", "f1", "precision", "tokens_injected_mean", "token_savings", "adversarial_abstain_rate"} <= set(same)
    pd.testing.assert_frame_equal(a[same], b[same])
    ra, rb = pd.read_csv(original / "ranked.csv"), pd.read_csv(latest / "ranked.csv")
    pd.testing.assert_frame_equal(ra.drop(columns=["backend", "layout"], errors="ignore"), rb.drop(columns=["backend", "layout"], errors="ignore"))
    assert "store `run:exact`" in (latest / "report.md").read_text()


def test_a_missing_run_file_is_one_line(tmp_path):
    cmd = [sys.executable, "-m", "bench", f"paths.reports={tmp_path}", "dataset=own", f"dataset.path={DEMO}", "embedder=hashing",
           "progress=false", f"run_file={tmp_path / 'nope.trec'}"]
    proc = subprocess.run(cmd, check=False, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out and f"run_file: {tmp_path / 'nope.trec'} not found" in out


@pytest.mark.slow
def test_export_of_a_multirun_writes_one_folder_per_job(tmp_path, capsys):
    from tests.results.test_rundir import write_tiny_job

    from bench.results.rundir import collect_jobs

    sweep = tmp_path / "sweep"
    for job in ("job0", "job1"):
        write_tiny_job(sweep / job, overrides=[f"backend.ef={job}"])  # its trace predates gold_ids: gold from the corpus snapshot
    assert collect_jobs(sweep)
    assert export.main([str(sweep), "--out", str(tmp_path / "out")]) == 0
    for job in ("job0", "job1"):
        assert (tmp_path / "out" / job / "trace_user.run").read_text().splitlines() == [
            "q1 Q0 c1|t3 1 0.9 exact", "q1 Q0 c1|t1 2 0.1 exact", "q2 Q0 c2|t1 1 0.2 exact"]
        assert (tmp_path / "out" / job / "trace_user.qrels").read_text().splitlines() == ["q1 0 c1|t3 1"]
    assert len(capsys.readouterr().out.split()) == 4
    assert export.main([str(tmp_path / "nothing")]) == 2
