"""Imported rankings (bench.replay.rankings, bench.analysis.systems, `recallbench score`): hand-worked values, the TREC path, bad files."""

import json
import math
import shutil

import pandas as pd
import pytest
from demo_run import demo_run

from bench.replay import trec
from bench.metrics import ranked
from bench.analysis import systems
from bench.replay.rankings import read_ranking
from bench.types import Conversation, Corpus, Question, Turn


def _t(conv, tid, i, session):
    return Turn(conv, tid, "user", "user", f"{conv} {tid}", float(i), i, session)


# c1: t0 t1 | t2 t3 | t4 (sessions 0, 1, 2); c2: u0 | u1 u2; c3: v0 | v1. Every turn said before every question.
CORPUS = Corpus(
    name="tiny",
    conversations=(Conversation("c1", (_t("c1", "t0", 0, 0), _t("c1", "t1", 1, 0), _t("c1", "t2", 2, 1), _t("c1", "t3", 3, 1),
                                       _t("c1", "t4", 4, 2))),
                   Conversation("c2", (_t("c2", "u0", 0, 0), _t("c2", "u1", 1, 1), _t("c2", "u2", 2, 1))),
                   Conversation("c3", (_t("c3", "v0", 0, 0), _t("c3", "v1", 1, 1)))),
    questions=(Question("q1", "c1", "?", 10.0, ("t2",)),
               Question("q2", "c2", "?", None, ("u0", "u2")),
               Question("q3", "c3", "?", None, ("v1",)),
               Question("qa", "c1", "?", None, ("t0",), adversarial=True)),  # ranked, never scored
    source="tiny.json",
)
KS = (1, 3)
L3 = 1 / math.log2(3)  # the discount at rank 2

# turn ids (memory keys, or the bare turn id of the question's conversation)
TURNS = {"q1": ["c1|t0", "c1|t2", "c1|t4"], "q2": ["u2", "c2|u1"], "q3": ["c3|v0"], "qa": ["c1|t0"]}
TURN_EXPECTED = {  # (level, metric, k) -> per question q1, q2, q3
    ("turn", "recall_any", 1): [0, 1, 0], ("turn", "recall_any", 3): [1, 1, 0],
    ("turn", "recall_all", 3): [1, 0, 0],
    ("turn", "ndcg", 3): [L3, 1 / (1 + L3), 0],  # q2: u2 at rank 1 of gold {u0, u2}: 1 / (1 + 1/log2 3)
    ("turn", "mrr", None): [0.5, 1, 0],
    # sessions of the ranked turns, deduplicated: q1 [s0, s1, s2], q2 [s1], q3 [s0]; gold q1 {s1}, q2 {s0, s1}, q3 {s1}
    ("session", "recall_any", 1): [0, 1, 0], ("session", "recall_all", 3): [1, 0, 0],
    ("session", "ndcg", 3): [L3, 1 / (1 + L3), 0], ("session", "mrr", None): [0.5, 1, 0],
}
SESSIONS = {"q1": ["c1|session2", "c1|session1"], "q2": ["c2|session0", "c2|session1"], "q3": ["c3|session1"]}
SESSION_EXPECTED = {
    ("session", "recall_any", 1): [0, 1, 1], ("session", "recall_any", 3): [1, 1, 1],
    ("session", "recall_all", 1): [0, 0, 1], ("session", "recall_all", 3): [1, 1, 1],
    ("session", "ndcg", 3): [L3, 1, 1], ("session", "mrr", None): [0.5, 1, 1],
}


def _write(path, data):
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _values(rows, key):
    return rows.set_index("question_id").loc[["q1", "q2", "q3"], ranked.column(*key)].tolist()


def test_json_turn_ids_hand_worked(tmp_path):
    r = read_ranking(_write(tmp_path / "mine.json", TURNS), CORPUS)
    assert (r.name, r.format, r.level) == ("mine", "json", "turn")
    assert r.ranked["q2"] == ("c2|u2", "c2|u1")
    rows = systems.ranking_rows(r, CORPUS, ks=KS)
    assert list(rows["question_id"]) == ["q1", "q2", "q3"]  # qa (adversarial) is not scored
    for key, want in TURN_EXPECTED.items():
        assert _values(rows, key) == pytest.approx(want, abs=1e-12), key


def test_json_session_ids_hand_worked_turn_cells_nan(tmp_path):
    r = read_ranking(_write(tmp_path / "s.json", SESSIONS), CORPUS)
    assert r.level == "session"
    rows = systems.ranking_rows(r, CORPUS, ks=KS)
    for key, want in SESSION_EXPECTED.items():
        assert _values(rows, key) == pytest.approx(want, abs=1e-12), key
    assert rows[[c for c in rows.columns if c.startswith("turn/")]].isna().all().all()


def test_longmemeval_log_records_read_as_the_dict(tmp_path):
    lines = [json.dumps({"question_id": q, "question": "?", "retrieval_results": {"ranked_items": [{"corpus_id": i, "text": "x"} for i in ids]}})
             for q, ids in TURNS.items()]
    jsonl = read_ranking(_write(tmp_path / "log.jsonl", "\n".join(lines) + "\n"), CORPUS)
    listed = read_ranking(_write(tmp_path / "log.json", "[" + ",".join(lines) + "]"), CORPUS)
    plain = read_ranking(_write(tmp_path / "d.json", TURNS), CORPUS)
    assert jsonl.format == listed.format == "longmemeval-log"
    assert jsonl.ranked == listed.ranked == plain.ranked


def test_same_ranking_as_trec_run_scores_identically(tmp_path):
    """The TREC path (read_run and sweep run_file='s trace) and the JSON path give the same per-question values."""
    run = tmp_path / "x.run"
    run.write_text("".join(f"{q} Q0 {d if '|' in d else f'c2|{d}'} {i} {1 - i / 10} sys\n"
                           for q, ids in TURNS.items() for i, d in enumerate(ids, 1)))
    a, b = read_ranking(run, CORPUS), read_ranking(_write(tmp_path / "x.json", TURNS), CORPUS)
    assert (a.format, a.name) == ("trec", "sys") and a.ranked == b.ranked
    ra, rb = systems.ranking_rows(a, CORPUS, ks=KS), systems.ranking_rows(b, CORPUS, ks=KS)
    cols = [c for c in ra.columns if "/" in c]
    pd.testing.assert_frame_equal(ra[cols], rb[cols])
    via_trace = ranked.per_question(trec.trace_from_run(run, CORPUS), CORPUS, ks=KS)
    pd.testing.assert_frame_equal(ra[cols], via_trace[cols])


def test_longmemeval_source_ids_map_to_sessions_and_turns(tmp_path):
    from bench.data.longmemeval import load_longmemeval

    turn = lambda c, a=False: {"role": "user", "content": c, **({"has_answer": True} if a else {})}  # noqa: E731
    item = {"question_id": "e1", "question_type": "single-session-user", "question": "?", "answer": "a",
            "question_date": "2023/05/30 (Tue) 23:40", "haystack_session_ids": ["sharegpt_x_0", "answer_e1_1"],
            "haystack_dates": ["2023/05/20 (Sat) 03:02", "2023/05/21 (Sun) 03:02"],
            "haystack_sessions": [[turn("a"), turn("b")], [turn("c"), turn("d", True)]], "answer_session_ids": ["answer_e1_1"]}
    (tmp_path / "src").mkdir()
    _write(tmp_path / "src" / "e1.json", item)
    corpus = load_longmemeval(path=tmp_path / "src")
    s = read_ranking(_write(tmp_path / "s.json", {"e1": ["sharegpt_x_0", "answer_e1_1"]}), corpus)
    assert s.level == "session" and s.ranked == {"e1": ("e1|session0", "e1|session1")}
    n = read_ranking(_write(tmp_path / "n.json", {"e1": ["noans_e1_1"]}), corpus)  # run_retrieval.py's name for it
    assert n.ranked == {"e1": ("e1|session1",)}
    # LongMemEval's turn ids: <session id>_<1-based turn>, 'answer' written 'noans' for a turn without the answer
    t = read_ranking(_write(tmp_path / "t.json", {"e1": ["noans_e1_1_1", "answer_e1_1_2", "sharegpt_x_0_2"]}), corpus)
    assert t.level == "turn" and t.ranked == {"e1": ("e1|s1:t0", "e1|s1:t1", "e1|s0:t1")}
    rows = systems.ranking_rows(t, corpus, ks=(1, 3))
    assert rows["turn/recall_any@1"].tolist() == [0.0] and rows["turn/mrr"].tolist() == [0.5]
    assert rows["session/recall_any@1"].tolist() == [1.0]


BAD = [  # (file content, the one line after '<path>: ')
    ("", "the file is empty (a ranking: JSON {question_id: [id, ...]}, a LongMemEval retrieval log, or a TREC run)"),
    ("  \n", "the file is empty (a ranking: JSON {question_id: [id, ...]}, a LongMemEval retrieval log, or a TREC run)"),
    ('{"q1": ["c1|t0",]}', "invalid JSON at line 1 column 17: Expecting value"),
    ('{\n"q1": [\n"c1|t0"\n', "invalid JSON at line 4 column 1: Expecting ',' delimiter"),
    ({}, "the file ranks no question"),
    ({"q9": ["c1|t0"]}, "question 'q9': question id 'q9' is not a question of tiny (tiny.json)"),
    ({"q1": ["c1|t9"]}, "question 'q1': field [0]: id 'c1|t9' is not a turn or session of question 'q1' (conversation 'c1') in tiny "
                        "(turns: '<conversation_id>|<turn_id>' or the turn id; sessions: '<conversation_id>|session<n>')"),
    ({"q1": ["c2|u0"]}, "question 'q1': field [0]: id 'c2|u0' is a memory of conversation 'c2', not of question 'q1', whose conversation is 'c1'"),
    ({"q1": ["c1|t0", "t0"]}, "question 'q1': field [1]: id 't0' repeated in the list of question 'q1'"),
    ({"q1": "c1|t0"}, "question 'q1': value 'c1|t0' (str) is not a list of ids ranked best first"),
    ({"q1": ["c1|t0", 3]}, "question 'q1': field [1]: id 3 (int) is not a string"),
    ({"q1": ["c1|t0", "c1|session1"]}, "question 'q1': field [1]: id 'c1|session1' is a session id but the file's first id is a turn id "
                                       "(one level per file)"),
    ('{"question_id": "q1", "retrieval_results": {"ranked_items": [{"corpus_id": "c1|t0"}]}}\n{"question_id": 5}\n',
     "line 2: field question_id 5 (int) is not a string"),
    ([{"question_id": "q1", "retrieval_results": {"ranked_items": ["c1|t0"]}}],
     "record [0] (question 'q1'): field retrieval_results.ranked_items[0] 'c1|t0' (str) is not an object with a corpus_id"),
]


@pytest.mark.parametrize("content,line", BAD, ids=range(len(BAD)))
def test_bad_file_is_one_line_naming_file_question_field(tmp_path, content, line):
    path = _write(tmp_path / "bad.json", content)
    with pytest.raises(ValueError) as e:
        read_ranking(path, CORPUS)
    assert str(e.value) == f"{path}: {line}"


@pytest.mark.slow
def test_score_cli_round_trip_on_the_demo_run(tmp_path_factory, tmp_path, capsys):
    """Our run exported as JSON (turn ids, and session ids) and scored back: the same numbers as ranked.csv, Δ 0;
    a bad file writes nothing."""
    from bench.cli import export, score
    from bench.output import read_csv

    run = tmp_path / "run"
    shutil.copytree(demo_run(tmp_path_factory.getbasetemp()).resolve(), run)
    assert export.main([str(run), "--format", "json", "--out", str(tmp_path / "j")]) == 0
    assert export.main([str(run), "--format", "json-sessions", "--out", str(tmp_path / "j")]) == 0
    bad = _write(tmp_path / "bad.json", {"nope": []})
    with pytest.raises(ValueError, match="question id 'nope' is not a question"):
        score.main([str(run), str(tmp_path / "j" / "trace.json"), str(bad), "--no-report"])
    assert not (run / systems.SYSTEMS_CSV).exists()
    assert score.main([str(run), str(tmp_path / "j" / "trace.json"), str(tmp_path / "j" / "trace_sessions.json")]) == 0
    table = read_csv(run / systems.SYSTEMS_CSV, dtype={"k": "Int64"}, keep_default_na=False, na_values=[""])
    ours = pd.read_csv(run / "ranked.csv", dtype={"k": "Int64"})
    for name, levels in (("trace", ("turn", "session")), ("trace_sessions", ("session",))):
        t = table[table["ranking"] == name]
        imp, our = t[t["kind"] == "imported"], t[t["kind"] == "ours"]
        assert len(imp) and len(our) == len(imp)
        for lv in levels:
            a = imp[imp["level"] == lv].set_index(["metric", "k"])["mean"]
            b = our[our["level"] == lv].set_index(["metric", "k"])["mean"]
            c = ours[ours["level"] == lv].set_index(["metric", "k"])["mean"]
            pd.testing.assert_series_equal(a, b, check_names=False)
            pd.testing.assert_series_equal(a, c.loc[a.index], check_names=False)
            assert (our[our["level"] == lv]["diff"].fillna(0) == 0).all()
    report = (run / "report.md").read_text()
    assert "## Systems: imported rankings beside ours" in report and "import:trace_sessions" in report


def test_a_turn_said_after_the_question_is_dropped_not_credited(tmp_path):
    """q1 is asked at 10; a turn said at 11 is dropped from the ranking (as sweep run_file= drops it), and counted."""
    late = Corpus(name="late", conversations=(Conversation("c1", (_t("c1", "t0", 0, 0), _t("c1", "t1", 11, 1))),),
                  questions=(Question("q1", "c1", "?", 10.0, ("t1",)),), source="late.json")
    r = read_ranking(_write(tmp_path / "l.json", {"q1": ["c1|t1", "c1|t0"]}), late)
    assert r.ranked == {"q1": ("c1|t0",)} and r.dropped == 1
    assert systems.ranking_rows(r, late, ks=(1,))["turn/recall_any@1"].tolist() == [0.0]


def _our_rows(hits: dict) -> pd.DataFrame:
    """Our per-question rows (bench.metrics.ranked.per_question) of a trace whose hits are ``hits``."""
    from types import SimpleNamespace

    qs = [q for q in CORPUS.questions]
    table = pd.DataFrame({"question_id": [q.question_id for q in qs], "conversation_id": [q.conversation_id for q in qs],
                          "hit_ids": [hits.get(q.question_id, []) for q in qs],
                          "gold_ids": [[f"{q.conversation_id}|{e}" for e in q.evidence] for q in qs]})
    meta = {"dataset": "tiny", "embedder": "e", "backend": "exact", "roles": None}
    return ranked.per_question(SimpleNamespace(table=table, meta=meta), CORPUS, ks=KS)


def test_systems_table_pairs_on_the_same_questions_hand_worked(tmp_path):
    """Ours finds every gold turn at rank 1: recall_any@1 ours [1, 1, 1], imported [0, 1, 0]. Differences (imported - ours)
    [-1, 0, -1]: mean -2/3, se 1/3 (three conversations, one question each), t = -2 with 2 df: p = 1 - 2/sqrt(6)."""
    ours = _our_rows({"q1": ["c1|t2"], "q2": ["c2|u0", "c2|u2"], "q3": ["c3|v1"]})
    r = read_ranking(_write(tmp_path / "mine.json", TURNS), CORPUS)
    t = systems.compare(ours, [(r, systems.ranking_rows(r, CORPUS, ks=KS))], ks=KS)
    pick = lambda kind: t[(t["kind"] == kind) & (t["level"] == "turn") & (t["metric"] == "recall_any") & (t["k"] == 1)].iloc[0]  # noqa: E731
    imp, our = pick("imported"), pick("ours")
    assert imp["system"] == "import:mine" and imp["mean"] == pytest.approx(1 / 3) and imp["n_questions"] == 3
    assert our["system"] == "exact (e, roles all)" and our["mean"] == 1.0 and our["n_questions"] == 3
    assert our["diff"] == pytest.approx(-2 / 3) and our["p_value"] == pytest.approx(1 - 2 / math.sqrt(6), abs=1e-9)
    assert (our["wins"], our["ties"], our["losses"], our["n_conversations"]) == (0, 1, 2, 3)
    from bench.report.systems import text_table

    lines = text_table(t)
    assert lines[:5] == ["**mine** (json, turn ids, file mine.json), turn level:", "",
                         "| system | questions | recall_any@1 | recall_any@3 | recall_all@1 | recall_all@3 | ndcg@1 | ndcg@3 | mrr |",
                         "|---|---|---|---|---|---|---|---|---|",
                         f"| import:mine | 3 | 0.333 | 0.667 | 0.000 | 0.333 | 0.333 | {(L3 + 1 / (1 + L3)) / 3:.3f} | 0.500 |"]
    assert lines[5].startswith("| exact (e, roles all) | 3 | 1.000 (Δ -0.667, p 0.184) | 1.000 (Δ -0.333, p 0.423) |")


def test_a_subset_ranking_is_paired_on_its_questions_only(tmp_path):
    ours = _our_rows({"q1": ["c1|t2"], "q2": ["c2|u0"], "q3": []})
    r = read_ranking(_write(tmp_path / "sub.json", {"q1": ["c1|t2"]}), CORPUS)
    t = systems.compare(ours, [(r, systems.ranking_rows(r, CORPUS, ks=KS))], ks=KS)
    row = t[(t["kind"] == "ours") & (t["level"] == "turn") & (t["metric"] == "mrr")].iloc[0]
    assert row["n_questions"] == 1 and row["mean"] == 1.0 and row["diff"] == 0.0


def test_export_json_turn_and_session_ids_hand_worked():
    from bench.cli.export import json_ranking

    trace = SimpleTrace({"q1": ["c1|t3", "c1|t2", "c1|t0", "c1|t1"], "q2": ["c2|u2", "c2|u1", "c2|u0"], "q3": []})
    assert json_ranking(trace, CORPUS) == {"q1": ["c1|t3", "c1|t2", "c1|t0", "c1|t1"], "q2": ["c2|u2", "c2|u1", "c2|u0"], "q3": []}
    assert json_ranking(trace, CORPUS, sessions=True) == {"q1": ["c1|session1", "c1|session0"], "q2": ["c2|session1", "c2|session0"],
                                                          "q3": []}


class SimpleTrace:
    def __init__(self, hits: dict):
        self.table = pd.DataFrame({"question_id": list(hits), "hit_ids": list(hits.values())})


def test_a_json_ranking_given_to_run_file_says_where_it_goes(tmp_path):
    path = _write(tmp_path / "mine.json", TURNS)
    with pytest.raises(ValueError) as e:
        trec.read_run(path, CORPUS)
    assert str(e.value) == (f"{path}: a JSON ranking, not a TREC run (run_file= reads 'qid Q0 docid rank score tag' lines); "
                            f"score it beside a finished run with `recallbench score RUN {path}`")


def test_a_session_said_wholly_after_the_question_is_dropped():
    """Session 1 (t1 at 11, t2 at 12) is after q1 (asked at 10): dropped; session 0 holds t0 (at 0): kept."""
    import tempfile
    from pathlib import Path

    late = Corpus(name="late", conversations=(Conversation("c1", (_t("c1", "t0", 0, 0), _t("c1", "t1", 11, 1), _t("c1", "t2", 12, 1))),),
                  questions=(Question("q1", "c1", "?", 10.0, ("t1",)),), source="late.json")
    path = _write(Path(tempfile.mkdtemp()) / "s.json", {"q1": ["c1|session1", "c1|session0"]})
    r = read_ranking(path, late)
    assert r.ranked == {"q1": ("c1|session0",)} and r.dropped == 1
    assert systems.ranking_rows(r, late, ks=(1,))["session/recall_any@1"].tolist() == [0.0]
