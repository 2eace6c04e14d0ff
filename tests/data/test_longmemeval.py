"""LongMemEval loader: two tiny per-question files (one with has_answer gold, one _abs needing the
session fallback), list format, leak check, errors, the Hydra config, and all 500 real questions."""

import json
from collections import Counter
from dataclasses import fields
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bench.data.longmemeval import load_longmemeval, parse_lme_date
from bench.types import Defect, Turn

ADV = "not scored: an adversarial question's correct recall is nothing (scored by abstention only)"  # README, Metric conventions: an adversarial question's gold is reported, never scored

FIX = Path(__file__).parents[1] / "fixtures" / "data" / "lme"
REPO = Path(__file__).resolve().parents[2]

MAY20_0302 = 1684551720.0  # "2023/05/20 (Sat) 03:02" UTC
MAY21_0930 = 1684661400.0  # "2023/05/21 (Sun) 09:30"
MAY22_1342 = 1684762920.0  # "2023/05/22 (Mon) 13:42"
JUN01_1200 = 1685620800.0  # "2023/06/01 (Thu) 12:00"


@pytest.fixture(scope="module")
def corpus():
    return load_longmemeval(path=FIX)


def test_dates():
    assert parse_lme_date("2023/05/20 (Sat) 03:02") == MAY20_0302
    with pytest.raises(ValueError, match="unparseable"):
        parse_lme_date("May 20")


def test_turns_one_conversation_per_question(corpus):
    # sorted by question_id (q1 < q2_abs), although the file of q2_abs sorts first by name
    assert [c.conversation_id for c in corpus.conversations] == ["q1", "q2_abs"]
    assert corpus.conversations[0].turns == (
        Turn("q1", "s0:t0", "user", "user", "Recommend a sci-fi book.", MAY20_0302, 0, 0),
        Turn("q1", "s0:t1", "assistant", "assistant", "Try Dune.", MAY20_0302, 1, 0),
        Turn("q1", "s1:t0", "user", "user", "My two cats keep scratching the sofa.", MAY21_0930, 2, 1),
        Turn("q1", "s1:t1", "assistant", "assistant", "Get them a scratching post.", MAY21_0930, 3, 1),
        Turn("q1", "s1:t2", "user", "user", "Both cats ignore it.", MAY21_0930, 4, 1),
    )
    assert [t.turn_id for t in corpus.conversations[1].turns] == ["s0:t0", "s0:t1", "s1:t0"]


def test_no_session_id_leaks_into_turns(corpus):
    # the fixture's session ids are "answer_q1_1", "answer_q2_abs_0": the label must not reach a retriever
    for t in corpus.turns():
        for f in fields(Turn):
            assert "answer_" not in str(getattr(t, f.name)), (t, f.name)


def test_questions_gold_and_fallback(corpus):
    q1, q2 = corpus.questions
    assert (q1.question_id, q1.conversation_id, q1.text) == ("q1", "q1", "How many cats do I have?")
    assert q1.evidence == ("s1:t0", "s1:t2")       # has_answer: true
    assert (q1.asked_at, q1.category, q1.adversarial, q1.answer) == (MAY22_1342, "single-session-user", False, "2")
    assert q2.evidence == ("s0:t0", "s0:t1")       # no has_answer: all turns of session answer_q2_abs_0
    assert (q2.asked_at, q2.adversarial) == (JUN01_1200, True)
    assert q2.answer == "You did not mention this information."
    assert list(corpus.defects) == [
        Defect(str(FIX / "2_q1.json"), "q1", "answer", "answer_not_string", "2", "converted to str"),
        Defect(str(FIX / "1_q2_abs.json"), "q2_abs", "has_answer", "gold_fallback_to_session",
               "no turn has has_answer: true", "gold = all 2 turns of 1 answer session(s)"),
        Defect(str(FIX / "1_q2_abs.json"), "q2_abs", "answer_session_ids", "adversarial_with_gold", "['s0:t0', 's0:t1']",
               ADV),
    ]


def test_list_and_single_object_files(tmp_path, corpus):
    items = [json.loads((FIX / n).read_text()) for n in ("1_q2_abs.json", "2_q1.json")]
    (tmp_path / "list.json").write_text(json.dumps(items))
    c = load_longmemeval(path=tmp_path / "list.json")
    assert [q.question_id for q in c.questions] == ["q2_abs", "q1"]  # file order kept
    assert set(c.conversations) == set(corpus.conversations) and set(c.questions) == set(corpus.questions)
    (tmp_path / "one.json").write_text(json.dumps(items[1]))
    assert load_longmemeval(path=tmp_path / "one.json").questions == corpus.questions[:1]


def load_error(tmp_path, mutate) -> str:
    """The one-line error of loading the fixture 2_q1.json after ``mutate`` changed it."""
    d = json.loads((FIX / "2_q1.json").read_text())
    mutate(d)
    (tmp_path / "x.json").write_text(json.dumps(d))
    with pytest.raises(ValueError) as e:
        load_longmemeval(path=tmp_path)
    return str(e.value)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["haystack_sessions"][1][0].update(role="bot"),
     "record q1: field 'haystack_sessions[1][0].role' must be \"user\" or \"assistant\", got 'bot'"),
    (lambda d: d["haystack_dates"].pop(), "record q1: fields 'haystack_sessions', 'haystack_dates', "
                                          "'haystack_session_ids' differ in length (2, 1, 2)"),
    (lambda d: d.pop("question"), "record q1: missing field 'question'"),
    (lambda d: d.update(question_id=7), "record [0]: field 'question_id' must be a non-empty string, got 7"),
])
def test_errors_name_file_record_field(tmp_path, mutate, message):
    assert load_error(tmp_path, mutate) == f"{tmp_path / 'x.json'}: {message}"


def test_missing_path_and_empty_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="BENCH_DATA_DIR"):
        load_longmemeval(path=tmp_path / "absent")
    with pytest.raises(ValueError, match="no \\*.json files"):
        load_longmemeval(path=tmp_path)


def test_hydra_config(tmp_path):
    from hydra.utils import instantiate

    target = tmp_path / "longmemeval_oracle" / "lme_jsons_oracle"
    target.mkdir(parents=True)
    for f in FIX.glob("*.json"):
        (target / f.name).write_bytes(f.read_bytes())
    cfg = OmegaConf.create({"paths": {"datasets": str(tmp_path)},
                            "dataset": OmegaConf.load(REPO / "configs" / "dataset" / "longmemeval_oracle.yaml")})
    c = instantiate(cfg.dataset)
    assert c.name == "longmemeval_oracle" and [q.question_id for q in c.questions] == ["q1", "q2_abs"]


def test_real_oracle_all_500(bench_data_dir):
    path = bench_data_dir / "longmemeval_oracle" / "lme_jsons_oracle"
    if not path.is_dir():
        pytest.skip(f"{path} absent (set BENCH_DATA_DIR to the directory holding longmemeval_oracle/)")
    c = load_longmemeval(path=path)
    assert len(c.questions) == len(c.conversations) == 500
    assert sum(q.adversarial for q in c.questions) == 30
    assert Counter(q.category for q in c.questions) == {
        "single-session-user": 70, "single-session-assistant": 56, "single-session-preference": 30,
        "multi-session": 133, "temporal-reasoning": 133, "knowledge-update": 78}
    assert len(c.turns()) == 10960
    kinds = Counter(d.kind for d in c.defects)
    assert kinds == {"answer_not_string": 32, "gold_fallback_to_session": 21,  # SOURCE.md: 21 questions, all _abs
                     # has_answer turns in sessions dated after question_date (59 temporal-reasoning, 3
                     # knowledge-update), in 42 questions; 16 questions are asked before their first session
                     "gold_after_asked_at": 62, "asked_before_conversation": 16,
                     "adversarial_with_gold": 30}  # every _abs question has gold (has_answer or its answer session)
    late = [d for d in c.defects if d.kind == "gold_after_asked_at"]
    assert len({d.record for d in late}) == 42
    assert next(d for d in late if d.record == "0bb5a684") == Defect(
        str(path / "2_0bb5a684.json"), "0bb5a684", "haystack_sessions[1][0].has_answer", "gold_after_asked_at",
        "'s1:t0' at 2023-01-13T21:38:00Z > asked_at 2023-01-13T19:39:00Z", "kept in gold: unreachable, scored as a miss")
    assert all(d.record.endswith("_abs") for d in c.defects if d.kind == "gold_fallback_to_session")
    assert all(q.evidence for q in c.questions)
    assert [q.question_id for q in c.questions] == sorted(q.question_id for q in c.questions)
    assert not any("answer_" in t.turn_id or "answer_" in t.speaker for t in c.turns())
    assert all(q.asked_at is not None for q in c.questions) and all(t.timestamp is not None for t in c.turns())


# --- reachability of gold and date range (tests/fixtures/data/lme_unreachable)
UNREACH = FIX.parent / "lme_unreachable"
LATE = "kept in gold: unreachable, scored as a miss"


def test_unreachable_gold_is_reported_and_kept():
    c = load_longmemeval(path=UNREACH)
    f1, f2, f3 = (str(UNREACH / n) for n in ("2_u1.json", "1_u2.json", "2_u3_abs.json"))
    assert list(c.defects) == [
        # u3_abs has no has_answer: gold = both turns of its answer session (2023-07-02 08:00)
        Defect(f3, "u3_abs", "has_answer", "gold_fallback_to_session", "no turn has has_answer: true",
               "gold = all 2 turns of 1 answer session(s)"),
        # u1 asked 2023-05-20 12:00: s0:t0 (05-20 10:00) is visible, s1:t1 (05-21 10:00) is not
        Defect(f1, "u1", "haystack_sessions[1][1].has_answer", "gold_after_asked_at",
               "'s1:t1' at 2023-05-21T10:00:00Z > asked_at 2023-05-20T12:00:00Z", LATE),
        # u2 asked 2023-05-31 09:00, its only session is 2023-06-01 09:00
        Defect(f2, "u2", "question_date", "asked_before_conversation",
               "asked_at 2023-05-31T09:00:00Z < first turn 2023-06-01T09:00:00Z",
               "kept: no turn is visible when it is asked, every gold turn is a miss"),
        Defect(f2, "u2", "haystack_sessions[0][1].has_answer", "gold_after_asked_at",
               "'s0:t1' at 2023-06-01T09:00:00Z > asked_at 2023-05-31T09:00:00Z", LATE),
        # u3_abs asked 2023-07-01 20:00: its fallback gold (session 1) is the day after
        Defect(f3, "u3_abs", "answer_session_ids", "gold_after_asked_at",
               "'s1:t0' at 2023-07-02T08:00:00Z > asked_at 2023-07-01T20:00:00Z", LATE),
        Defect(f3, "u3_abs", "answer_session_ids", "gold_after_asked_at",
               "'s1:t1' at 2023-07-02T08:00:00Z > asked_at 2023-07-01T20:00:00Z", LATE),
        Defect(f3, "u3_abs", "answer_session_ids", "adversarial_with_gold", "['s1:t0', 's1:t1']", ADV),
    ]
    assert [q.evidence for q in c.questions] == [("s0:t0", "s1:t1"), ("s0:t1",), ("s1:t0", "s1:t1")]  # kept


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(question_date="2999/05/22 (Mon) 13:42"),
     "record q1: field 'question_date' is out of range: '2999/05/22 (Mon) 13:42' is year 2999, outside "
     "1900-01-01..2200-01-01 (POSIX seconds, UTC)"),
    (lambda d: d["haystack_dates"].__setitem__(1, "1899/12/31 (Sun) 23:59"),
     "record q1: field 'haystack_dates[1]' is out of range: '1899/12/31 (Sun) 23:59' is year 1899, outside "
     "1900-01-01..2200-01-01 (POSIX seconds, UTC)"),
])
def test_out_of_range_dates_are_errors(tmp_path, mutate, message):
    assert load_error(tmp_path, mutate) == f"{tmp_path / 'x.json'}: {message}"


def test_hydra_config_longmemeval_s(tmp_path):
    """dataset=longmemeval_s reads <data dir>/longmemeval_s/lme_jsons_s (here: two files of the slice fixture)."""
    from hydra.utils import instantiate

    target = tmp_path / "longmemeval_s" / "lme_jsons_s"
    target.mkdir(parents=True)
    for name in ("3_001be529.json", "3_0862e8bf_abs.json"):
        (target / name).write_bytes((REPO / "tests" / "fixtures" / "data" / "lme_s_slice" / name).read_bytes())
    cfg = OmegaConf.create({"paths": {"datasets": str(tmp_path)},
                            "dataset": OmegaConf.load(REPO / "configs" / "dataset" / "longmemeval_s.yaml")})
    c = instantiate(cfg.dataset)
    assert c.name == "longmemeval_s" and [q.question_id for q in c.questions] == ["001be529", "0862e8bf_abs"]
    assert [q.adversarial for q in c.questions] == [False, True]


def test_real_s_manifest_and_one_file(bench_data_dir):
    """The real _s split: its manifest lists the 498 files present (sizes), and one file loads as one user's haystack.
    (Loading all 498 is the documented command in datasets/README.md, not a test.)"""
    from bench.data.fetch import load_manifests

    path = bench_data_dir / "longmemeval_s" / "lme_jsons_s"
    if not path.is_dir():
        pytest.skip(f"{path} absent (set BENCH_DATA_DIR to the directory holding longmemeval_s/)")
    m = next(m for m in load_manifests() if m.name == "longmemeval_s")
    assert sorted(p.name for p in path.glob("*.json")) == sorted(f.path.split("/", 1)[1] for f in m.files)
    assert all((path.parent / f.path).stat().st_size == f.size for f in m.files)
    one = path / "45_gpt4_2655b836.json"
    tmp = load_longmemeval(path=one, name="longmemeval_s")
    (q,) = tmp.questions
    assert q.question_id == q.conversation_id == "gpt4_2655b836" and not q.adversarial
    assert len({t.session for t in tmp.turns()}) == 45 and len(tmp.turns()) > 400
