"""Tests for datasets/demo (our own English + Chinese corpus): format, labels, and hand-checked content.

The raw checks read the JSONL directly, so they hold the files to the documented own format on their
own; the last test loads the corpus through bench.data.own.load_own.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "datasets" / "demo"
CATEGORIES = {"profile", "preference", "decision", "temporal", "multi-hop", "cross-lingual", "irrelevant"}
TURN_ID = re.compile(r"^(c\d+)-s(\d+)-t(\d+)$")
CJK = re.compile(r"[\u4e00-\u9fff]")

# hand-counted from the files
TURNS_PER_CONVERSATION = {"c1": 47, "c2": 32, "c3": 37, "c4": 23, "c5": 24}
SESSIONS_PER_CONVERSATION = {"c1": 5, "c2": 4, "c3": 4, "c4": 3, "c5": 3}
QUESTIONS_PER_CATEGORY = {"profile": 4, "preference": 5, "decision": 2, "temporal": 4, "multi-hop": 5,
                          "cross-lingual": 2, "irrelevant": 3}


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if line.strip():
            row = json.loads(line)
            assert isinstance(row, dict), f"{path}:{n}: not an object"
            rows.append(row)
    return rows


def when(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    dt = datetime.fromisoformat(value)
    assert dt.tzinfo is not None, f"demo timestamps carry an explicit offset, got {value!r}"
    return dt.timestamp()


@pytest.fixture(scope="module")
def turns() -> list[dict]:
    return read_jsonl(DEMO / "turns.jsonl")


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    return read_jsonl(DEMO / "questions.jsonl")


@pytest.fixture(scope="module")
def by_key(turns) -> dict[tuple[str, str], dict]:
    return {(t["conversation_id"], t["turn_id"]): t for t in turns}


@pytest.fixture(scope="module")
def by_qid(questions) -> dict[str, dict]:
    return {q["question_id"]: q for q in questions}


def test_turn_fields_and_types(turns):
    allowed = {"conversation_id", "turn_id", "role", "speaker", "text", "timestamp", "session"}
    for i, t in enumerate(turns, start=1):
        assert set(t) <= allowed, f"turns.jsonl:{i}: unknown fields {set(t) - allowed}"
        assert isinstance(t["conversation_id"], str) and isinstance(t["turn_id"], str)
        assert t["role"] in ("user", "assistant")
        assert isinstance(t.get("speaker", ""), str)
        assert isinstance(t["text"], str) and t["text"].strip() == t["text"] and t["text"]
        assert isinstance(t["timestamp"], str) and when(t["timestamp"]) is not None
        assert isinstance(t["session"], int) and not isinstance(t["session"], bool)


def test_turn_ids_unique_and_follow_pattern(turns):
    keys = [(t["conversation_id"], t["turn_id"]) for t in turns]
    assert len(set(keys)) == len(keys)
    assert len({t["turn_id"] for t in turns}) == len(turns)  # ids are even unique across the corpus
    counters: dict[tuple[str, int], int] = Counter()
    for t in turns:
        m = TURN_ID.match(t["turn_id"])
        assert m, t["turn_id"]
        conv, s, k = m.group(1), int(m.group(2)), int(m.group(3))
        assert conv == t["conversation_id"]
        assert t["session"] == s - 1  # "s1" is the 0-based session 0
        counters[conv, s] += 1
        assert k == counters[conv, s], f"{t['turn_id']}: turns numbered 1.. in file order"


def test_counts_per_conversation(turns):
    assert len(turns) == 163
    assert Counter(t["conversation_id"] for t in turns) == TURNS_PER_CONVERSATION
    sessions = {c: len({t["session"] for t in turns if t["conversation_id"] == c}) for c in TURNS_PER_CONVERSATION}
    assert sessions == SESSIONS_PER_CONVERSATION
    roles = Counter(t["role"] for t in turns)
    assert roles == {"user": 91, "assistant": 72}


def test_time_increases_within_each_conversation_and_spans_weeks(turns):
    for conv in TURNS_PER_CONVERSATION:
        ts = [when(t["timestamp"]) for t in turns if t["conversation_id"] == conv]
        assert all(a < b for a, b in zip(ts, ts[1:])), conv
        assert ts[-1] - ts[0] >= 10 * 86400, f"{conv}: sessions should spread over weeks"


def test_both_languages_present(turns):
    zh = [t for t in turns if CJK.search(t["text"])]
    en = [t for t in turns if not CJK.search(t["text"])]
    assert len(zh) >= 50 and len(en) >= 90, (len(zh), len(en))


def test_question_labels(questions, by_key, by_qid):
    assert len(questions) == 25 and len(by_qid) == 25  # ids unique
    assert Counter(q["category"] for q in questions) == QUESTIONS_PER_CATEGORY
    for q in questions:
        cid = q["conversation_id"]
        assert cid in TURNS_PER_CONVERSATION
        assert q["category"] in CATEGORIES
        assert isinstance(q["evidence"], list) and all(isinstance(e, str) for e in q["evidence"])
        assert len(set(q["evidence"])) == len(q["evidence"])
        for e in q["evidence"]:
            assert (cid, e) in by_key, f"{q['question_id']}: evidence {e} not a turn of {cid}"
        adversarial = q.get("adversarial", False)
        assert adversarial == (q["category"] == "irrelevant")
        if adversarial:
            assert q["evidence"] == [], q["question_id"]
        else:
            assert len(q["evidence"]) >= 1, q["question_id"]
        if q["category"] == "multi-hop":
            assert len(q["evidence"]) >= 2, q["question_id"]


def test_asked_at_after_all_evidence(questions, by_key):
    timed = 0
    for q in questions:
        asked = when(q["asked_at"])
        if asked is None:
            continue
        timed += 1
        for e in q["evidence"]:
            assert when(by_key[q["conversation_id"], e]["timestamp"]) <= asked, (q["question_id"], e)
    assert timed == 4


def test_asked_at_cuts_off_later_turns(questions, turns, by_qid):
    # q17 asks "Which database does tidepool use?" before the switch to SQLite: the switch turns are later
    asked = when(by_qid["q17"]["asked_at"])
    assert asked == datetime(2025, 3, 2, 9, 0, tzinfo=timezone.utc).timestamp()
    visible = {t["turn_id"] for t in turns if t["conversation_id"] == "c3" and when(t["timestamp"]) <= asked}
    assert by_qid["q17"]["evidence"] == ["c3-s1-t2"] and "c3-s1-t2" in visible
    assert "c3-s2-t3" not in visible and len(visible) == 9
    assert by_qid["q24"]["asked_at"] == 1754006400  # numeric asked_at = 2025-08-01T00:00:00Z


def test_profile_questions_point_at_user_statements(questions, by_key, by_qid):
    assert by_qid["q01"]["text"] == "What am I good at?"
    assert "Rust and distributed systems" in by_key["c1", by_qid["q01"]["evidence"][0]]["text"]
    assert by_qid["q09"]["text"] == "我叫什么名字？"
    assert by_qid["q09"]["evidence"] == ["c2-s1-t3"] and "王小雨" in by_key["c2", "c2-s1-t3"]["text"]
    assert by_qid["q10"]["text"] == "我擅长什么？"
    assert "我擅长写 Python 和做数据分析" in by_key["c2", by_qid["q10"]["evidence"][0]]["text"]
    for q in questions:
        if q["category"] == "profile":
            assert all(by_key[q["conversation_id"], e]["role"] == "user" for e in q["evidence"]), q["question_id"]


def test_cross_lingual_questions_cross_languages(by_key, by_qid):
    zh_q, en_q = by_qid["q15"], by_qid["q20"]
    assert "认证" in zh_q["text"] and zh_q["conversation_id"] == "c3"
    ev = [by_key["c3", e]["text"] for e in zh_q["evidence"]]
    assert all(not CJK.search(t) for t in ev) and any("JWT" in t for t in ev)
    assert en_q["text"] == "What did we decide about auth?" and en_q["conversation_id"] == "c4"
    ev = [by_key["c4", e]["text"] for e in en_q["evidence"]]
    assert all(CJK.search(t) for t in ev) and any("认证" in t for t in ev) and any("登录" in t for t in ev)


def test_irrelevant_questions(by_qid):
    irrelevant = {q: by_qid[q]["text"] for q in ("q08", "q13", "q25")}
    assert irrelevant == {"q08": "How is the weather in Beijing?", "q13": "今天股市怎么样？",
                          "q25": "What's the euro to yen exchange rate today?"}
    assert all(by_qid[q]["adversarial"] is True and by_qid[q]["evidence"] == [] for q in irrelevant)


def test_some_gold_sits_in_assistant_turns(questions, by_key):
    roles = Counter(by_key[q["conversation_id"], e]["role"] for q in questions for e in q["evidence"])
    assert roles == {"user": 26, "assistant": 6}


def test_load_own_reads_demo_without_defects():
    own = pytest.importorskip("bench.data.own", reason="bench.data.own (the own-format loader) not present")
    corpus = own.load_own(path=DEMO)
    assert corpus.defects == ()
    assert [c.conversation_id for c in corpus.conversations] == list(TURNS_PER_CONVERSATION)
    assert [len(c.turns) for c in corpus.conversations] == list(TURNS_PER_CONVERSATION.values())
    first = corpus.conversations[0].turns[0]
    # "2025-02-10T19:02:00+01:00" is 18:02 UTC
    assert (first.turn_id, first.speaker, first.position, first.session) == ("c1-s1-t1", "Alex", 0, 0)
    assert first.timestamp == datetime(2025, 2, 10, 18, 2, tzinfo=timezone.utc).timestamp()
    assistant = corpus.conversations[0].turns[1]
    assert (assistant.role, assistant.speaker) == ("assistant", "assistant")  # speaker defaults to role
    q = {x.question_id: x for x in corpus.questions}
    assert q["q06"].evidence == ("c1-s4-t5", "c1-s5-t3") and q["q06"].asked_at is None
    assert q["q13"].adversarial and q["q13"].evidence == ()
    assert sum(x.adversarial for x in corpus.questions) == 3
