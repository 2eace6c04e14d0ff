"""bench.analysis.systems on a session-unit, user-roles corpus (issue 29 part 4): our row is named by the run's
memory spec ("roles user", not "all"), and an imported session ranking is paired with ours at session level only.
Fixture: tests/replay/test_rankings_session_unit.py (its docstring works the corpus out).

Ours: e1 [e1|s1, e1|s0, e1|s2] (gold s1 at rank 1), e3 [e3|s0, e3|s1] (gold s1 at rank 2).
Imported: e1 gold at rank 2, e3 gold at rank 1. Session recall_any@1: imported [0, 1], ours [1, 0]; mrr imported
[0.5, 1], ours [1, 0.5]. Differences (imported - ours) [-1, +1]: mean 0, two conversations, se 1, t 0, p 1.
"""

from types import SimpleNamespace

import pandas as pd
import pytest

from bench.analysis import systems
from bench.metrics import ranked
from bench.replay.rankings import read_ranking
from tests.replay.test_rankings_session_unit import IMPORTED, SESSION_UNIT, UNITS, write

KS = (1, 3)


def our_rows(memory=SESSION_UNIT, roles=None) -> pd.DataFrame:
    hits = {"e1": ["e1|s1", "e1|s0", "e1|s2"], "e2": ["e2|s1", "e2|s0"], "e3": ["e3|s0", "e3|s1"], "e4": ["e4|s0"]}
    qs = UNITS.questions
    table = pd.DataFrame({"question_id": [q.question_id for q in qs], "conversation_id": [q.conversation_id for q in qs],
                          "hit_ids": [hits[q.question_id] for q in qs],
                          "gold_ids": [[f"{q.conversation_id}|{e}" for e in q.evidence] for q in qs]})
    meta = {"dataset": UNITS.name, "embedder": "e", "backend": "exact", "roles": roles}
    return ranked.per_question(SimpleNamespace(table=table, meta=meta), UNITS, ks=KS, memory=memory)


def compare(tmp_path):
    r = read_ranking(write(tmp_path / "mine.json", IMPORTED), UNITS, unit="session")
    return systems.compare(our_rows(), [(r, systems.ranking_rows(r, UNITS, ks=KS))], ks=KS)


def test_imported_session_ranking_beside_ours_hand_worked(tmp_path):
    t = compare(tmp_path)
    pick = lambda kind, lv, m, k: t[(t["kind"] == kind) & (t["level"] == lv) & (t["metric"] == m) & (t["k"].fillna(-1) == k)].iloc[0]  # noqa: E731
    imp, our = pick("imported", "session", "recall_any", 1), pick("ours", "session", "recall_any", 1)
    assert imp["ranking_level"] == "session" and (imp["n_questions"], imp["mean"]) == (2, 0.5)
    assert our["system"] == "exact (e, roles user)"
    assert (our["n_questions"], our["mean"], our["diff"], our["n_conversations"]) == (2, 0.5, 0.0, 2)
    assert our["p_value"] == pytest.approx(1.0)
    assert (our["wins"], our["ties"], our["losses"]) == (1, 0, 1)
    mrr = pick("imported", "session", "mrr", -1)
    assert mrr["mean"] == pytest.approx(0.75)
    # the unit is the session: nothing is scored at "turn" level, neither the import nor ours
    assert (t.loc[t["level"] == "turn", "n_questions"] == 0).all()


def test_our_row_names_the_indexed_roles_of_the_memory_spec():
    assert our_rows()["roles"].unique().tolist() == ["user"]
    assert our_rows(roles=["user"])["roles"].unique().tolist() == ["user, filter user"]  # a filtered trace stays apart
    assert our_rows(memory={"unit": "session", "roles": "all"})["roles"].unique().tolist() == ["all"]
    assert our_rows(memory=None)["roles"].unique().tolist() == ["all"]  # a run without a memory spec: as before
    assert systems.system_label(our_rows().iloc[0]) == "exact (e, roles user)"


def test_run_unit_reads_the_jobs_memory_spec():
    job = lambda meta: SimpleNamespace(has=lambda name: meta is not None, meta=lambda: meta)  # noqa: E731
    assert systems.run_unit(job({"memory": SESSION_UNIT})) == "session"
    assert systems.run_unit(job({"memory": {"unit": "turn", "roles": "all"}})) == "turn"
    assert systems.run_unit(job({})) == "turn" and systems.run_unit(job(None)) == "turn"
