"""Imported rankings of a session-unit corpus (memory.unit=session, roles=user; issue 29 part 4): its memory ids ARE
session ids. Fixture (hand-worked), every question asked after everything was said:

turns (u = user, a = assistant)       sessions                 units (roles=user)          gold
e1: t0 u, t1 a | t2 u, t3 a | t4 u    s0, s1, s2               e1|s0, e1|s1, e1|s2          t2 -> e1|s1
e2: u0 u, u1 a | u2 u                 s0, s1                   e2|s0, e2|s1                 u1 (assistant) -> none: not scored
e3: v0 u | v1 u                       s0, s1                   e3|s0, e3|s1                 v1 -> e3|s1
e4: w0 u | w1 u (abstention question) s0, s1                   e4|s0, e4|s1                 adversarial: not scored

Imported ranking (the corpus's memory ids, as a BM25 run over its units writes them; e3 as bare ids):
e1 [e1|s2, e1|s1, e1|s0] -> gold session 1 at rank 2; e3 [s1, s0] -> rank 1.
"""

import json

from bench.data.units import UnitSpec, build_units
from bench.replay.rankings import read_ranking
from bench.types import Conversation, Corpus, Question, Turn

SESSION_UNIT = {"unit": "session", "roles": "user"}  # meta.json "memory" of such a run


def _t(conv, tid, role, i, session):
    return Turn(conv, tid, role, role, f"{conv} {tid}", float(i), i, session)


TURNS = Corpus(
    name="tiny",
    conversations=(
        Conversation("e1", (_t("e1", "t0", "user", 0, 0), _t("e1", "t1", "assistant", 1, 0), _t("e1", "t2", "user", 2, 1),
                            _t("e1", "t3", "assistant", 3, 1), _t("e1", "t4", "user", 4, 2))),
        Conversation("e2", (_t("e2", "u0", "user", 0, 0), _t("e2", "u1", "assistant", 1, 0), _t("e2", "u2", "user", 2, 1))),
        Conversation("e3", (_t("e3", "v0", "user", 0, 0), _t("e3", "v1", "user", 1, 1))),
        Conversation("e4", (_t("e4", "w0", "user", 0, 0), _t("e4", "w1", "user", 1, 1)))),
    questions=(Question("e1", "e1", "?", None, ("t2",)), Question("e2", "e2", "?", None, ("u1",)),
               Question("e3", "e3", "?", None, ("v1",)), Question("e4", "e4", "?", None, (), adversarial=True)),
    source="tiny.json",
)
UNITS = build_units(TURNS, UnitSpec(unit="session", roles="user"))[0]
IMPORTED = {"e1": ["e1|s2", "e1|s1", "e1|s0"], "e3": ["s1", "s0"]}


def write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_the_fixture_is_what_the_docstring_says():
    assert UNITS.name == "tiny-session-user"
    assert [t.key for t in UNITS.turns()] == ["e1|s0", "e1|s1", "e1|s2", "e2|s0", "e2|s1", "e3|s0", "e3|s1", "e4|s0", "e4|s1"]
    assert [q.evidence for q in UNITS.questions] == [("s1",), (), ("s1",), ()]


def test_memory_ids_of_a_session_unit_corpus_are_session_ids(tmp_path):
    path = write(tmp_path / "mine.json", IMPORTED)
    r = read_ranking(path, UNITS, unit="session")
    assert (r.level, r.dropped) == ("session", 0)
    assert r.ranked == {"e1": ("e1|session2", "e1|session1", "e1|session0"), "e3": ("e3|session1", "e3|session0")}
    # the session ids `recallbench export --format json-sessions` writes read to the same ranking
    same = read_ranking(write(tmp_path / "s.json", {"e1": ["e1|session2", "e1|session1", "e1|session0"],
                                                    "e3": ["e3|session1", "e3|session0"]}), UNITS, unit="session")
    assert same.level == "session" and same.ranked == r.ranked
    # a turn-unit reading (no unit given) takes them for turns: what the report announced as "turn ids"
    assert read_ranking(path, UNITS).level == "turn"


def test_export_of_a_session_unit_run_reads_back_as_session_ids(tmp_path):
    """`recallbench export --format json` (memory ids) and `--format json-sessions` give the same session ranking."""
    import pandas as pd

    from bench.cli.export import json_ranking

    trace = type("T", (), {"table": pd.DataFrame({"question_id": ["e1", "e3"], "hit_ids": [["e1|s1", "e1|s0"], ["e3|s0", "e3|s1"]]})})()
    a = read_ranking(write(tmp_path / "a.json", json_ranking(trace, UNITS)), UNITS, unit="session")
    b = read_ranking(write(tmp_path / "b.json", json_ranking(trace, UNITS, sessions=True)), UNITS, unit="session")
    assert a.level == b.level == "session" and a.ranked == b.ranked == {"e1": ("e1|session1", "e1|session0"),
                                                                         "e3": ("e3|session0", "e3|session1")}
