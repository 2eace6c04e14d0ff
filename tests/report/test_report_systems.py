"""bench.report.systems: on a session-unit corpus an imported session ranking is announced as "session ids" and its
table is printed once, at session level (fixture and values: tests/analysis/test_systems_table.py)."""

from bench.report.systems import text_table
from tests.analysis.test_systems_table import compare


def test_session_unit_ranking_is_one_session_table(tmp_path):
    lines = text_table(compare(tmp_path))
    heads = [ln for ln in lines if ln.endswith("level:")]
    assert heads == ["**mine** (json, session ids, file mine.json), session level:"]
    rows = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| system")]
    assert rows == ["| import:mine | 2 | 0.500 | 1.000 | 0.500 | 1.000 | 0.500 | 0.815 | 0.750 |",
                    "| exact (e, roles user) | 2 | 0.500 (Δ +0.000, p 1.000) | 1.000 (Δ +0.000, p 1.000) | 0.500 (Δ +0.000, p 1.000) "
                    "| 1.000 (Δ +0.000, p 1.000) | 0.500 (Δ +0.000, p 1.000) | 0.815 (Δ +0.000, p 1.000) | 0.750 (Δ +0.000, p 1.000) |"]
