"""Memory units (bench/data/units.py): unit mapping, gold mapping and role filters, on hand-made corpora and on
the 20-question LongMemEval _s slice (tests/fixtures/data/lme_s_slice, made by tests/fixtures/make_lme_s_slice.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bench.data.longmemeval import load_longmemeval
from bench.data.units import UnitSpec, apply_units, build_units, check_spec
from bench.types import Conversation, Corpus, Question, Turn

SLICE = Path(__file__).parents[1] / "fixtures" / "data" / "lme_s_slice"
LOCOMO_TINY = Path(__file__).parents[1] / "fixtures" / "data" / "locomo_tiny.json"


def tiny() -> Corpus:
    """Two sessions: s0 = u0, a1 (gold a1); s1 = u2 (gold), a3. Times 10, 20 | 30, 40."""
    t = [Turn("c", "u0", "user", "U", "I like tea", 10.0, 0, 0), Turn("c", "a1", "assistant", "A", "Tea is nice", 20.0, 1, 0),
         Turn("c", "u2", "user", "U", "My dog is Rex", 30.0, 2, 1), Turn("c", "a3", "assistant", "A", "Hi Rex", 40.0, 3, 1)]
    qs = (Question("q_dog", "c", "dog?", None, ("u2",), "single"), Question("q_tea", "c", "tea?", None, ("a1",), "assist"),
          Question("q_abs", "c", "cat?", None, ("u0",), "single", adversarial=True))
    return Corpus("tiny", (Conversation("c", tuple(t)),), qs, (), "tiny.json")


def test_default_spec_returns_the_corpus_itself():
    c = tiny()
    assert apply_units(c, UnitSpec()) is c and apply_units(c, None) is c


def test_session_units_all_roles():
    u, ptr = build_units(tiny(), UnitSpec("session", "all"))
    assert u.name == "tiny-session"
    assert [(x.turn_id, x.role, x.speaker, x.text, x.timestamp, x.position, x.session) for x in u.turns()] == [
        ("s0", "user", "session", "user: I like tea\nassistant: Tea is nice", 20.0, 0, 0),
        ("s1", "user", "session", "user: My dog is Rex\nassistant: Hi Rex", 40.0, 1, 1)]
    assert ptr == {"c|s0": ("u0", "a1"), "c|s1": ("u2", "a3")}
    assert {q.question_id: q.evidence for q in u.questions} == {"q_dog": ("s1",), "q_tea": ("s0",), "q_abs": ("s0",)}
    assert [q.adversarial for q in u.questions] == [False, False, True]
    assert not [d for d in u.defects if d.kind == "question_gold_not_covered"]


def test_session_units_user_only_drop_assistant_gold():
    u, ptr = build_units(tiny(), UnitSpec("session", "user"))
    assert u.name == "tiny-session-user"
    assert [(x.turn_id, x.text, x.timestamp) for x in u.turns()] == [("s0", "I like tea", 10.0), ("s1", "My dog is Rex", 30.0)]
    assert ptr == {"c|s0": ("u0",), "c|s1": ("u2",)}
    # q_tea's only gold turn is the assistant's: no user unit holds it (LongMemEval calls that session "noans")
    assert {q.question_id: q.evidence for q in u.questions} == {"q_dog": ("s1",), "q_tea": (), "q_abs": ("s0",)}
    (d,) = [d for d in u.defects if d.kind == "question_gold_not_covered"]
    assert (d.file, d.record, d.field) == ("tiny.json", "q_tea", "evidence") and "roles=user" in d.action


def test_turn_units_user_only():
    u, _ = build_units(tiny(), UnitSpec("turn", "user"))
    assert u.name == "tiny-turn-user"
    assert [(x.turn_id, x.position) for x in u.turns()] == [("u0", 0), ("u2", 1)]
    assert {q.question_id: q.evidence for q in u.questions} == {"q_dog": ("u2",), "q_tea": (), "q_abs": ("u0",)}


def test_chunk_units_windows_and_gold():
    from bench.data.tokens import get_encoding

    enc = get_encoding("cl100k_base")
    u, ptr = build_units(tiny(), UnitSpec("chunk", "all", chunk_tokens=6, chunk_overlap=2))
    assert u.name == "tiny-chunk6o2"
    s0 = enc.encode_ordinary("user: I like tea\n") + enc.encode_ordinary("assistant: Tea is nice")
    n0 = len(enc.encode_ordinary("user: I like tea\n"))
    starts = list(range(0, len(s0), 4))
    starts = starts[: next(i for i, s in enumerate(starts) if s + 6 >= len(s0)) + 1]
    units0 = [x for x in u.turns() if x.session == 0]
    assert [x.turn_id for x in units0] == [f"s0:c{j}" for j in range(len(starts))]
    assert [x.text for x in units0] == [enc.decode(s0[s:s + 6]).strip() for s in starts]
    for x, s in zip(units0, starts):  # a chunk holds every turn whose tokens it overlaps
        assert ptr[x.key] == tuple(tid for tid, (a, b) in (("u0", (0, n0)), ("a1", (n0, len(s0)))) if a < s + 6 and b > s)
    gold_tea = {x.turn_id for x in units0 if "a1" in ptr[x.key]}
    assert dict((q.question_id, set(q.evidence)) for q in u.questions)["q_tea"] == gold_tea and gold_tea


def test_chunk_never_crosses_sessions_and_covers_every_token():
    u, ptr = build_units(tiny(), UnitSpec("chunk", "all", chunk_tokens=1000, chunk_overlap=0))
    assert [(x.turn_id, x.session) for x in u.turns()] == [("s0:c0", 0), ("s1:c0", 1)]
    assert ptr == {"c|s0:c0": ("u0", "a1"), "c|s1:c0": ("u2", "a3")}


@pytest.mark.parametrize("settings, message", [
    ({"unit": "sentence"}, "config memory.unit: expected one of turn, session, chunk, got 'sentence'"),
    ({"roles": "assistant"}, "config memory.roles: expected one of all, user, got 'assistant'"),
    ({"chunk_tokens": 0}, "config memory.chunk_tokens: expected an integer >= 1, got 0"),
    ({"chunk_tokens": 8, "chunk_overlap": 8}, "config memory.chunk_overlap: 8 must be smaller than chunk_tokens (8)"),
    ({"size": 3}, "config memory: unknown key(s) size; expected unit, roles, chunk_tokens, chunk_overlap, encoding"),
])
def test_bad_settings_one_line(settings, message):
    with pytest.raises(ValueError) as e:
        check_spec(settings)
    assert str(e.value) == message


def test_locomo_session_units_from_its_sessions():
    from bench.data.locomo import load_locomo

    base = load_locomo(path=LOCOMO_TINY)
    u, ptr = build_units(base, UnitSpec("session", "all"))
    by_session = Counter((t.conversation_id, t.session) for t in base.turns())
    assert [x.turn_id for x in u.turns()] == [f"s{s}" for c in base.conversations for s in dict.fromkeys(t.session for t in c.turns)]
    assert sorted(len(v) for v in ptr.values()) == sorted(by_session.values())
    for q, uq in zip(base.questions, u.questions):  # gold = the sessions of the gold turns
        sessions = {t.session for t in base.turns() if t.conversation_id == q.conversation_id and t.turn_id in q.evidence}
        assert set(uq.evidence) == {f"s{s}" for s in sessions}


# --- the LongMemEval _s slice ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def lme_slice():
    return load_longmemeval(path=SLICE, name="longmemeval_s_slice")


def test_slice_reads_20_questions_2_abstention(lme_slice):
    qs = lme_slice.questions
    assert len(qs) == 20 and sum(q.adversarial for q in qs) == 2 and len(lme_slice.turns()) == 349
    assert Counter(q.category for q in qs) == {"single-session-user": 4, "knowledge-update": 4, "multi-session": 3,
                                               "single-session-preference": 3, "temporal-reasoning": 3, "single-session-assistant": 3}
    assert all(q.conversation_id == q.question_id for q in qs)  # one user per question: its haystack is its memory


def test_slice_session_units_map_gold(lme_slice):
    u, ptr = build_units(lme_slice, UnitSpec("session", "all"))
    ev = {q.question_id: q.evidence for q in u.questions}
    assert ev["00ca467f"] == ("s1", "s4")  # gold turns s1:t0, s4:t0
    assert ev["078150f1"] == ("s0", "s3")  # gold turns s0:t4, s3:t0, s3:t1
    assert ev["0e5e2d1a"] == ("s2",)  # an assistant gold turn s2:t3
    assert ptr["001be529|s1"] == ("s1:t0", "s1:t1")
    assert len(u.turns()) == sum(len({t.session for t in c.turns}) for c in lme_slice.conversations) == 72


def test_slice_user_only_drops_the_assistant_questions(lme_slice):
    u, ptr = build_units(lme_slice, UnitSpec("session", "user"))
    lost = sorted(d.record for d in u.defects if d.kind == "question_gold_not_covered")
    assert lost == ["0e5e2d1a", "1568498a", "16c90bf4"]  # the 3 single-session-assistant questions
    assert all(q.category == "single-session-assistant" for q in u.questions if q.question_id in lost)
    assert ptr["0e5e2d1a|s2"] == ("s2:t0", "s2:t2", "s2:t4")
    assert next(x for x in u.turns() if x.key == "001be529|s1").text == next(
        t.text for t in lme_slice.turns() if t.key == "001be529|s1:t0")  # one user turn: its text alone


@pytest.mark.slow
def test_a_sweep_on_session_units_of_the_slice_end_to_end(tmp_path):
    """``memory.unit=session memory.roles=user`` through the CLI: strategies, sweep, tokens, the report and
    conventions.csv work on units unchanged; one multirun holds both role settings side by side."""
    import json
    import os
    import subprocess
    import sys

    import pandas as pd

    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_DATA_DIR", "HYDRA_FULL_ERROR")}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "bench", "-m", f"paths.reports={tmp_path}", "dataset=longmemeval_s", f"dataset.path={SLICE}",
           "progress=false", "backend=exact", "embedder=hashing", "strategy=[limit,threshold]", "memory.unit=session",
           "memory.roles=user,all"]
    proc = subprocess.run(cmd, cwd=Path(__file__).parents[2], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = (tmp_path / "latest").resolve()
    jobs = sorted(p for p in run.glob("job*") if p.is_dir())
    assert [json.loads((j / "meta.json").read_text())["memory"] for j in jobs] == [{"unit": "session", "roles": "user"},
                                                                                   {"unit": "session", "roles": "all"}]
    summary = pd.read_csv(run / "summary.csv")
    assert set(summary["dataset"]) == {"longmemeval_s-session-user", "longmemeval_s-session"}
    assert set(summary["strategy"]) >= {"threshold"} and (summary["tokens_injected_mean"] > 0).any()
    conv = pd.concat([pd.read_csv(j / "conventions.csv") for j in jobs])
    n = conv[(conv["question_type"] == "overall")].groupby("dataset")["n_questions"].max().to_dict()
    assert n == {"longmemeval_s-session-user": 15, "longmemeval_s-session": 18}  # 2 abstention out; user-only: 3 more
    report = (run / "report.md").read_text()
    assert report.count("## Retrieval as published") == 1 and "**longmemeval_s-session-user, session level**: unit `session`" in report
