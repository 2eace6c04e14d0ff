"""Own format: tiny JSONL and CSV fixtures, every error path (message names file, line, field),
defects, atomic round-trip through write_own, and the Hydra config with a path override."""

import json
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bench.data.locomo import load_locomo
from bench.data.longmemeval import load_longmemeval
from bench.data.own import load_own, write_own
from bench.types import Conversation, Corpus, Defect, Question, Turn

DATA = Path(__file__).parents[1] / "fixtures" / "data"
OWN = DATA / "own_tiny"
REPO = Path(__file__).resolve().parents[2]

MAR1_1000Z = 1709287200.0  # "2024-03-01T10:00:00Z" == "2024-03-01T11:00:00+01:00"
MAR2_0000Z = 1709337600.0  # "2024-03-02T00:00:00Z"
JAN1_0900Z = 1704099600.0  # the number in the file

EXPECTED_TURNS = {
    "c1": (Turn("c1", "t1", "user", "Alex", "I moved to Berlin.", MAR1_1000Z, 0, 0),
           Turn("c1", "t2", "assistant", "assistant", "Welcome to Berlin!", MAR1_1000Z, 1, 0),  # speaker = role
           Turn("c1", "t3", "user", "Alex", "I started learning Go.", None, 2, 1)),
    "c2": (Turn("c2", "t1", "user", "user", "Hola, soy Ana.", JAN1_0900Z, 0, 0),),
}


def test_load_jsonl():
    c = load_own(path=OWN)
    assert c.name == "own_tiny" and c.source == str(OWN)
    # c1 first (first appearance), its turns in file order although c2 interleaves; blank line skipped
    assert c.conversations == tuple(Conversation(k, v) for k, v in EXPECTED_TURNS.items())
    assert c.questions == (
        Question("q1", "c1", "Where do I live?", None, ("t1",), "profile", False, "Berlin"),
        Question("q2", "c1", "What am I learning?", MAR2_0000Z, ("t3",), "", False, ""),
        Question("q3", "c2", "What is my dog's name?", None, (), "", True, ""),  # adversarial: empty is fine
    )
    q = str(OWN / "questions.jsonl")
    assert c.defects == (
        Defect(q, "line 2 (q2)", "evidence[1]", "evidence_not_found", "'t9'",
               "dropped from gold (no such turn in the conversation)"),
        Defect(q, "line 2 (q2)", "evidence[2]", "evidence_duplicate", "'t3'", "duplicate dropped"),
    )


def test_csv_reads_like_jsonl():
    c = load_own(path=DATA / "own_tiny_csv", name="csv")
    assert c.name == "csv"
    assert c.conversations == load_own(path=OWN).conversations
    assert c.questions == load_own(path=OWN).questions


def _write(d: Path, turns: str | bytes, questions: str = "", turns_name: str = "turns.jsonl") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / turns_name
    p.write_bytes(turns if isinstance(turns, bytes) else turns.encode())
    (d / "questions.jsonl").write_text(questions)
    return d


T1 = '{"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "hi"}\n'
Q1 = '{"question_id": "q1", "conversation_id": "c1", "text": "?", "evidence": ["t1"]}\n'

TURN_ERRORS = [  # (turns.jsonl content, expected message after the file name)
    (T1 + '{"conversation_id": "c1", "turn_id": "D1:3", "role": "bot", "text": "x"}\n',
     ':2 (turn_id \'D1:3\'): field \'role\' must be "user" or "assistant", got \'bot\''),
    (T1 + "\n" + '{"conversation_id": "c1", "turn_id": "t2", "role": "user", "text": "x"\n',
     ":3: malformed JSON (column 71): Expecting ',' delimiter"),  # line is 70 chars, no closing }
    (T1 + "\n" + '{"conversation_id": "c1"}\n', ":3: field 'turn_id' is required"),  # blank line 2 counted
    ('["c1", "t1"]\n', ":1: expected a JSON object, got list"),
    ('{"conversation_id": "c1", "turn_id": "t1", "role": "user"}\n', ":1 (turn_id 't1'): field 'text' is required"),
    ('{"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "  "}\n',
     ":1 (turn_id 't1'): field 'text' must be a non-empty string"),
    ('{"conversation_id": 1, "turn_id": "t1", "role": "user", "text": "x"}\n',
     ":1 (turn_id 't1'): field 'conversation_id' must be a string, got 1"),
    ('{"conversation_id": "c1", "turn_id": "t1", "text": "x"}\n', ":1 (turn_id 't1'): field 'role' is required"),
    ('{"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "x", "session": "1"}\n',
     ":1 (turn_id 't1'): field 'session' must be an integer, got '1'"),
    ('{"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "x", "session": true}\n',
     ":1 (turn_id 't1'): field 'session' must be an integer, got True"),
    ('{"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "x", "timestamp": "last May"}\n',
     ":1 (turn_id 't1'): field 'timestamp' must be an ISO-8601 date-time or a number, got 'last May'"),
    (T1 + T1, ":2 (turn_id 't1'): field 'turn_id' duplicate in conversation 'c1' (first at line 1)"),
]


@pytest.mark.parametrize("turns, message", TURN_ERRORS)
def test_turn_errors_name_file_line_field(tmp_path, turns, message):
    d = _write(tmp_path / "x", turns, "")
    with pytest.raises(ValueError) as e:
        load_own(path=d)
    assert str(e.value) == f"{d / 'turns.jsonl'}{message}"


QUESTION_ERRORS = [
    ('{"question_id": "q1", "conversation_id": "zz", "text": "?", "evidence": []}\n',
     ":1 (question_id 'q1'): field 'conversation_id' names unknown conversation 'zz' (not in the turns file)"),
    (Q1 + Q1, ":2 (question_id 'q1'): field 'question_id' duplicate (first at line 1)"),
    ('{"question_id": "q1", "conversation_id": "c1", "text": "?"}\n',
     ":1 (question_id 'q1'): field 'evidence' is required"),
    ('{"question_id": "q1", "conversation_id": "c1", "text": "?", "evidence": "t1"}\n',
     ":1 (question_id 'q1'): field 'evidence' must be a list, got 't1'"),
    ('{"question_id": "q1", "conversation_id": "c1", "text": "?", "evidence": [1]}\n',
     ":1 (question_id 'q1'): field 'evidence[0]' must be a string (a turn_id), got 1"),
    ('{"question_id": "q1", "conversation_id": "c1", "text": "?", "evidence": [], "adversarial": "yes"}\n',
     ":1 (question_id 'q1'): field 'adversarial' must be a boolean (true/false), got 'yes'"),
    ('{"question_id": "q1", "conversation_id": "c1", "text": "?", "evidence": [], "asked_at": true}\n',
     ":1 (question_id 'q1'): field 'asked_at' must be an ISO-8601 string, a number (POSIX seconds) or null, got True"),
    ('{"question_id": "q1", "conversation_id": "c1", "text": "?", "evidence": [], "answer": 4}\n',
     ":1 (question_id 'q1'): field 'answer' must be a string, got 4"),
]


@pytest.mark.parametrize("questions, message", QUESTION_ERRORS)
def test_question_errors_name_file_line_field(tmp_path, questions, message):
    d = _write(tmp_path / "x", T1, questions)
    with pytest.raises(ValueError) as e:
        load_own(path=d)
    assert str(e.value) == f"{d / 'questions.jsonl'}{message}"


def test_non_utf8_names_line_and_byte_offset(tmp_path):
    line2 = b'{"conversation_id": "c1", "turn_id": "t2", "role": "user", "text": "caf\xe9"}\n'  # Latin-1 e-acute
    d = _write(tmp_path / "x", T1.encode() + line2)
    with pytest.raises(ValueError) as e:
        load_own(path=d)
    offset = len(T1) + 71  # the \xe9 byte follows the 71 ASCII bytes '{"conversation_id": ... "text": "caf' of line 2
    assert str(e.value) == f"{d / 'turns.jsonl'}:2: not valid UTF-8 (byte offset {offset}: b'\\xe9')"


def test_csv_errors(tmp_path):
    d = _write(tmp_path / "a", "conversation_id,turn_id,text\nc1,t1,hi\n", turns_name="turns.csv")
    with pytest.raises(ValueError) as e:
        load_own(path=d)
    assert str(e.value) == f"{d / 'turns.csv'}:1: header lacks required column(s) role"
    # record 1 spans lines 2-3 (quoted newline), so the bad record starts on line 4
    csv_text = 'conversation_id,turn_id,role,text,session\nc1,t1,user,"two\nlines",0\nc1,t2,user,x,one\n'
    d = _write(tmp_path / "b", csv_text, turns_name="turns.csv")
    with pytest.raises(ValueError) as e:
        load_own(path=d)
    assert str(e.value) == f"{d / 'turns.csv'}:4 (turn_id 't2'): field 'session' must be an integer, got 'one'"


def test_directory_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="BENCH_DATA_DIR"):
        load_own(path=tmp_path / "absent")
    d = _write(tmp_path / "both", T1)
    (d / "turns.csv").write_text("conversation_id,turn_id,role,text\n")
    with pytest.raises(ValueError, match="holds both turns.jsonl and turns.csv"):
        load_own(path=d)
    (tmp_path / "noq").mkdir()
    (tmp_path / "noq" / "turns.jsonl").write_text(T1)
    with pytest.raises(FileNotFoundError, match="questions.jsonl"):
        load_own(path=tmp_path / "noq")


def test_defects_not_errors(tmp_path):
    d = _write(tmp_path / "x", T1.replace("}", ', "mood": "happy"}'),
               '{"question_id": "q1", "conversation_id": "c1", "text": "?", "evidence": []}\n'
               '{"question_id": "q2", "conversation_id": "c1", "text": "?", "evidence": ["nope"]}\n')
    c = load_own(path=d)
    assert [q.evidence for q in c.questions] == [(), ()]  # both kept
    assert [(x.record, x.field, x.kind) for x in c.defects] == [
        ("line 1", "mood", "unknown_field"),
        ("line 1 (q1)", "evidence", "question_without_gold"),
        ("line 2 (q2)", "evidence[0]", "evidence_not_found"),
        ("line 2 (q2)", "evidence", "question_without_gold"),
    ]


def _same(a: Corpus, b: Corpus) -> None:
    assert a.conversations == b.conversations
    assert a.questions == b.questions


@pytest.mark.parametrize("load", [
    lambda: load_own(path=OWN),
    lambda: load_locomo(path=DATA / "locomo_tiny.json"),
    lambda: load_longmemeval(path=DATA / "lme"),
])
def test_round_trip(tmp_path, load):
    c = load()
    out = write_own(c, tmp_path / "new" / "out")       # fresh directory: temp dir renamed into place
    _same(load_own(path=out), c)
    assert sorted(os.listdir(out)) == ["questions.jsonl", "turns.jsonl"]
    write_own(c, out)                                  # existing directory: files replaced
    _same(load_own(path=out), c)
    assert sorted(os.listdir(out)) == ["questions.jsonl", "turns.jsonl"]  # no temp files left
    assert sorted(os.listdir(tmp_path / "new")) == ["out"]


def test_round_trip_keeps_odd_text_and_fractional_times(tmp_path):
    t = (Turn("c", "a", "user", "Zoë", "line\u2028sep \"quoted\" | pipe", 1.25, 0, 3),
         Turn("c", "b", "assistant", "assistant", "ok", None, 1, 3))
    c = Corpus("x", (Conversation("c", t),), (Question("q", "c", "?", 1709287200.0, ("b", "a"), "k", False, "A"),))
    out = write_own(c, tmp_path / "o")
    _same(load_own(path=out), c)
    first = json.loads((out / "turns.jsonl").read_text(encoding="utf-8").split("\n")[0])
    assert first["timestamp"] == 1.25
    assert json.loads((out / "questions.jsonl").read_text())["asked_at"] == "2024-03-01T10:00:00Z"


def test_write_refuses_dir_with_csv_and_unwritable_turns(tmp_path):
    c = load_own(path=OWN)
    (tmp_path / "turns.csv").write_text("x")
    with pytest.raises(ValueError, match="holds a turns.csv"):
        write_own(c, tmp_path)
    bad = Corpus("x", (Conversation("c", (Turn("c", "a", "bot", "b", "hi", None, 0),)),), ())
    with pytest.raises(ValueError, match="role 'bot'"):
        write_own(bad, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_hydra_config_and_path_override(tmp_path):
    from hydra.utils import instantiate

    base = OmegaConf.create({"paths": {"datasets": str(tmp_path)},
                             "dataset": OmegaConf.load(REPO / "configs" / "dataset" / "own.yaml")})
    assert OmegaConf.is_missing(base.dataset, "path")  # no default: dataset=own never falls back to the demo corpus
    cfg = OmegaConf.merge(base, OmegaConf.from_dotlist([f"dataset.path={OWN}"]))
    c = instantiate(cfg.dataset)
    assert c.name == "own_tiny" and len(c.questions) == 3


def test_demo_corpus_loads_cleanly():
    demo = REPO / "datasets" / "demo"
    if not (demo / "questions.jsonl").is_file():
        pytest.skip(f"{demo} absent (the demo corpus ships with the repo)")
    c = load_own(path=demo, name="demo")
    assert c.questions and not c.defects


# --- reachability of gold (bench.data.timeline) on tests/fixtures/data/own_unreachable
UNREACH = DATA / "own_unreachable"
JAN1_1000Z = 1704103200.0  # "2024-01-01T10:00:00Z"


def test_unreachable_gold_is_reported_and_kept():
    c = load_own(path=UNREACH)
    q = str(UNREACH / "questions.jsonl")
    # q1 asked 2024-01-01T10:00Z: t1 (10:00, equal) is visible, t2 (next day) is not; "t9" does not exist,
    #    so the field names the raw entry evidence[2], not the gold index 1
    # q2 asked_at null: sees the whole conversation, nothing to report
    # q3 asked 2023-12-31, before t1 and t2, but t3 has no timestamp (counts as 1970): visible, not reported
    # q4 asked 2024-02-01, its conversation's only turn is 2024-03-01: sees nothing; its gold t1 is unreachable
    assert c.defects == (
        Defect(q, "line 1 (q1)", "evidence[0]", "evidence_not_found", "'t9'",
               "dropped from gold (no such turn in the conversation)"),
        Defect(q, "line 1 (q1)", "evidence[2]", "gold_after_asked_at",
               "'t2' at 2024-01-02T10:00:00Z > asked_at 2024-01-01T10:00:00Z", "kept in gold: unreachable, scored as a miss"),
        Defect(q, "line 4 (q4)", "asked_at", "asked_before_conversation",
               "asked_at 2024-02-01T00:00:00Z < first turn 2024-03-01T00:00:00Z",
               "kept: no turn is visible when it is asked, every gold turn is a miss"),
        Defect(q, "line 4 (q4)", "evidence[0]", "gold_after_asked_at",
               "'t1' at 2024-03-01T00:00:00Z > asked_at 2024-02-01T00:00:00Z", "kept in gold: unreachable, scored as a miss"),
    )
    assert [x.evidence for x in c.questions] == [("t1", "t2"), ("t2",), ("t3",), ("t1",)]  # gold unchanged
    assert c.questions[0].asked_at == JAN1_1000Z


TIME_ERRORS = [  # (turns.jsonl, questions.jsonl, file, expected message after the file name)
    (T1 + '{"conversation_id": "c1", "turn_id": "t2", "role": "user", "text": "x", "timestamp": 1700000000000}\n', Q1,
     "turns.jsonl", ":2 (turn_id 't2'): field 'timestamp' is out of range: 1700000000000 is year 55840, outside "
     "1900-01-01..2200-01-01 (POSIX seconds, UTC); it looks like epoch milliseconds "
     "(1700000000000 / 1,000 = 2023-11-14T22:13:20Z)"),
    (T1, '{"question_id": "q1", "conversation_id": "c1", "text": "?", "evidence": ["t1"], "asked_at": "1850-06-01T00:00:00"}\n',
     "questions.jsonl", ":1 (question_id 'q1'): field 'asked_at' is out of range: '1850-06-01T00:00:00' is year 1850, "
     "outside 1900-01-01..2200-01-01 (POSIX seconds, UTC)"),
    (T1, '{"question_id": "q1", "conversation_id": "c1", "text": "?", "evidence": ["t1"], "asked_at": 1.7e15}\n',
     "questions.jsonl", ":1 (question_id 'q1'): field 'asked_at' is out of range: 1700000000000000.0 is year 53872825, "
     "outside 1900-01-01..2200-01-01 (POSIX seconds, UTC); it looks like epoch microseconds "
     "(1700000000000000.0 / 1,000,000 = 2023-11-14T22:13:20Z)"),
]


@pytest.mark.parametrize("turns, questions, file, message", TIME_ERRORS)
def test_out_of_range_times_are_errors(tmp_path, turns, questions, file, message):
    d = _write(tmp_path / "x", turns, questions)
    with pytest.raises(ValueError) as e:
        load_own(path=d)
    assert str(e.value) == f"{d / file}{message}"


def test_out_of_range_csv_timestamp_names_line(tmp_path):
    d = _write(tmp_path / "x", "conversation_id,turn_id,role,text,timestamp\nc1,t1,user,hi,-3000000000\n", Q1,
               turns_name="turns.csv")  # -3e9 s = 1874-12-07
    with pytest.raises(ValueError) as e:
        load_own(path=d)
    assert str(e.value) == (f"{d / 'turns.csv'}:2 (turn_id 't1'): field 'timestamp' is out of range: -3000000000.0 is "
                            f"year 1874, outside 1900-01-01..2200-01-01 (POSIX seconds, UTC)")


def test_an_adversarial_question_with_gold_is_a_defect_and_its_gold_is_never_scored(tmp_path):
    """The rule (README, Metric conventions): the evidence stays in the corpus, one defect says so, scoring uses none."""
    d = _write(tmp_path / "adv", '{"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "I have a dog."}\n'
                                 '{"conversation_id": "c1", "turn_id": "t2", "role": "user", "text": "It is Rex."}\n',
               '{"question_id": "q1", "conversation_id": "c1", "text": "My dog?", "evidence": ["t2"]}\n'
               '{"question_id": "q2", "conversation_id": "c1", "text": "My cat?", "evidence": ["t1", "t2"], "adversarial": true}\n'
               '{"question_id": "q3", "conversation_id": "c1", "text": "My car?", "evidence": [], "adversarial": true}\n')
    c = load_own(path=d)
    assert [(q.question_id, q.evidence, q.scored_evidence) for q in c.questions] == [
        ("q1", ("t2",), ("t2",)), ("q2", ("t1", "t2"), ()), ("q3", (), ())]
    assert c.defects == (Defect(str(d / "questions.jsonl"), "line 2 (q2)", "evidence[0], evidence[1]", "adversarial_with_gold",
                                "['t1', 't2']", "not scored: an adversarial question's correct recall is nothing "
                                "(scored by abstention only)"),)


# ---------------------------------------------------------------- metadata (metadata.json beside the turns)
SCHEMA = {"memory_type": {"type": "string", "required": True}, "project": "string", "priority": "integer",
          "weight": "number", "pinned": "boolean", "tags": "string list"}


def _meta_dir(tmp_path: Path, turns: str, schema=SCHEMA, turns_name: str = "turns.jsonl") -> Path:
    d = _write(tmp_path / "m", turns, Q1, turns_name)
    (d / "metadata.json").write_text(schema if isinstance(schema, str) else json.dumps(schema))
    return d


def test_metadata_typed_values_sorted_and_absent_fields_left_out(tmp_path):
    turns = ('{"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "hi", "memory_type": "fact", '
             '"priority": 2, "weight": 1, "pinned": false, "tags": ["a", "b"], "extra": 1}\n'
             '{"conversation_id": "c1", "turn_id": "t2", "role": "user", "text": "yo", "memory_type": "preference", '
             '"project": null}\n')
    c = load_own(path=_meta_dir(tmp_path, turns))
    t1, t2 = c.turns()
    # sorted by name; number -> float (1 -> 1.0); string list -> tuple; project absent on t1, null on t2: left out
    assert t1.metadata == (("memory_type", "fact"), ("pinned", False), ("priority", 2), ("tags", ("a", "b")), ("weight", 1.0))
    assert t2.metadata == (("memory_type", "preference"),)
    assert hash(t1) != hash(t2) and t1 == Turn("c1", "t1", "user", "user", "hi", None, 0, 0, t1.metadata)
    # an undeclared field is still an unknown_field defect, a declared one is not
    assert [(d.field, d.kind) for d in c.defects] == [("extra", "unknown_field")]


def test_without_schema_metadata_fields_stay_unknown_and_turns_unchanged(tmp_path):
    d = _write(tmp_path / "n", '{"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "hi", "memory_type": "fact"}\n', Q1)
    c = load_own(path=d)
    assert c.turns()[0].metadata == () and [(x.field, x.kind) for x in c.defects] == [("memory_type", "unknown_field")]


BASE = '{"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "hi", "memory_type": "fact"'
METADATA_ERRORS = [  # (the rest of the turn object, expected message after the file name)
    (', "priority": "2"}', ":1 (turn_id 't1'): field 'priority' must be an integer, got '2'"),
    (', "priority": true}', ":1 (turn_id 't1'): field 'priority' must be an integer, got True"),
    (', "weight": "heavy"}', ":1 (turn_id 't1'): field 'weight' must be a number, got 'heavy'"),
    (', "pinned": "yes"}', ":1 (turn_id 't1'): field 'pinned' must be a boolean (true/false), got 'yes'"),
    (', "project": 3}', ":1 (turn_id 't1'): field 'project' must be a string, got 3"),
    (', "project": " "}', ":1 (turn_id 't1'): field 'project' must be a non-empty string"),
    (', "tags": "a"}', ":1 (turn_id 't1'): field 'tags' must be a list, got 'a'"),
    (', "tags": ["a", 7]}', ":1 (turn_id 't1'): field 'tags[1]' must be a non-empty string, got 7"),
]


@pytest.mark.parametrize("rest, message", METADATA_ERRORS)
def test_metadata_errors_name_file_line_turn_field(tmp_path, rest, message):
    d = _meta_dir(tmp_path, BASE + rest + "\n")
    with pytest.raises(ValueError) as e:
        load_own(path=d)
    assert str(e.value) == f"{d / 'turns.jsonl'}{message}"


def test_metadata_required_field_missing(tmp_path):
    d = _meta_dir(tmp_path, T1)
    with pytest.raises(ValueError) as e:
        load_own(path=d)
    assert str(e.value) == f"{d / 'turns.jsonl'}:1 (turn_id 't1'): field 'memory_type' is required (metadata.json)"


SCHEMA_ERRORS = [  # (metadata.json content, expected message after the file name)
    ('{"priority": "int"}', ": field 'priority': type must be one of 'string', 'integer', 'number', 'boolean', "
                            "'string list', got 'int'"),
    ('{"role": "string"}', ": field 'role': is a turn field already; choose another name"),
    ('{"2x": "string"}', ": field '2x': a name is letters, digits and '_', not starting with a digit"),
    ('{"p": {"type": "string", "required": "yes"}}', ": field 'p': 'required' must be true or false, got 'yes'"),
    ('{"p": {"type": "string", "index": true}}', ": field 'p': unknown key(s) 'index' (expected 'type', 'required')"),
    ('["string"]', ": expected a JSON object (field name -> type), got list"),
    ('{\n"p": }', ":2: malformed JSON (column 6): Expecting value"),
]


@pytest.mark.parametrize("schema, message", SCHEMA_ERRORS)
def test_schema_errors_name_file_and_field(tmp_path, schema, message):
    d = _meta_dir(tmp_path, T1, schema)
    with pytest.raises(ValueError) as e:
        load_own(path=d)
    assert str(e.value) == f"{d / 'metadata.json'}{message}"


def test_metadata_in_csv_cells_parsed_by_type(tmp_path):
    csv_text = ('conversation_id,turn_id,role,text,memory_type,priority,weight,pinned,tags\n'
                'c1,t1,user,hi,fact,2,0.5,TRUE,"[""a""]"\n'
                'c1,t2,user,yo,preference,,,,\n')
    c = load_own(path=_meta_dir(tmp_path, csv_text, turns_name="turns.csv"))
    assert [t.metadata for t in c.turns()] == [
        (("memory_type", "fact"), ("pinned", True), ("priority", 2), ("tags", ("a",)), ("weight", 0.5)),
        (("memory_type", "preference"),)]  # empty cells: absent
    bad = _meta_dir(tmp_path / "bad", 'conversation_id,turn_id,role,text,memory_type,priority\nc1,t1,user,hi,fact,two\n',
                    turns_name="turns.csv")
    with pytest.raises(ValueError) as e:
        load_own(path=bad)
    assert str(e.value) == f"{bad / 'turns.csv'}:2 (turn_id 't1'): field 'priority' must be an integer, got 'two'"


def test_metadata_round_trip_writes_the_schema(tmp_path):
    c = load_own(path=REPO / "datasets" / "demo_meta")
    out = write_own(c, tmp_path / "copy")
    # every field written optional, with the type its values hold
    assert json.loads((out / "metadata.json").read_text()) == {"memory_type": "string", "priority": "integer",
                                                              "project": "string", "tags": "string list"}
    back = load_own(path=out, name=c.name)
    assert back.conversations == c.conversations and back.questions == c.questions
    assert not (write_own(load_own(path=OWN), tmp_path / "plain") / "metadata.json").exists()  # none without metadata


def test_demo_meta_corpus_hand_checked():
    c = load_own(path=REPO / "datasets" / "demo_meta")
    assert c.defects == () and len(c.turns()) == 12 and len(c.questions) == 4
    by = {t.key: dict(t.metadata) for t in c.turns()}
    assert by["c1|t4"] == {"memory_type": "fact", "project": "beta", "priority": 3, "tags": ("work", "deadline")}
    assert by["c2|t5"] == {"memory_type": "chitchat", "priority": 0}
