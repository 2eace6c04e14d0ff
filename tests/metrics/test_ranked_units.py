"""bench.metrics.ranked and the run's memory spec (issue 29 part 4): ``roles`` names the indexed roles, and on a
session-unit corpus the unit's level is the session level (ranked.csv has no "turn" rows repeating it).
Fixture and hand-worked hits: tests/replay/test_rankings_session_unit.py, tests/analysis/test_systems_table.py."""

import pandas as pd
import pytest

from bench.metrics import ranked as R
from tests.analysis.test_systems_table import our_rows


@pytest.mark.parametrize("trace_roles,memory,label", [
    (None, None, "all"), (("user",), None, "user"), (("user", "assistant"), {"roles": "all"}, "user,assistant"),
    (None, {"unit": "session", "roles": "user"}, "user"), (("user",), {"roles": "user"}, "user, filter user"),
])
def test_roles_label(trace_roles, memory, label):
    assert R.roles_label(trace_roles, memory) == label


def test_session_unit_values_are_at_session_level_only():
    """e1: gold session at rank 1, e3: at rank 2 -> session recall_any@1 [1, 0], mrr [1, 0.5]; turn cells NaN."""
    rows = our_rows().set_index("question_id")
    assert rows.index.tolist() == ["e1", "e3"]  # e2 (assistant gold under roles=user) and e4 (abstention) not scored
    assert rows["session/recall_any@1"].tolist() == [1.0, 0.0] and rows["session/mrr"].tolist() == [1.0, 0.5]
    assert rows[[c for c in rows.columns if c.startswith("turn/")]].isna().all().all()
    # without the memory spec the same ranking was scored twice under two names (turn == session): the wart fixed
    old = our_rows(memory=None).set_index("question_id")
    assert old["turn/recall_any@1"].tolist() == old["session/recall_any@1"].tolist() == [1.0, 0.0]


def test_the_report_table_shows_the_session_unit_once():
    t = R.table(our_rows(), ks=(1, 3), n_resamples=10)
    assert (t.loc[t["level"] == "turn", "n_questions"] == 0).all()
    assert (t.loc[t["level"] == "session", "n_questions"] == 2).all()
    lines = R.report_table(t)
    assert not [ln for ln in lines if "| turn |" in ln]
    assert [ln.split(" | ")[4:6] for ln in lines if "| session |" in ln] == [["session", m] for m in R.METRICS]
    assert "| tiny-session-user | e | exact | user | session | recall_any | 0.500" in "\n".join(lines)


def test_a_turn_unit_spec_changes_nothing():
    """memory turn/all (every LoCoMo run) gives the rows of a run without a memory spec, byte for byte."""
    from tests.metrics.test_ranked import CORPUS, _trace

    a = R.per_question(_trace(), CORPUS, ks=(1, 2))
    b = R.per_question(_trace(), CORPUS, ks=(1, 2), memory={"unit": "turn", "roles": "all"})
    pd.testing.assert_frame_equal(a, b)
