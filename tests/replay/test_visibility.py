"""bench.replay.visibility: who may see a memory (scalar and vectorised forms agree) and the exact order of what it may see.

Fixture, conversation c1 (five turns) and c2 (two turns), by hand:

    c1|t0 user       ts 1.0     c2|t0 user       ts 1.0
    c1|t1 assistant  ts 2.0     c2|t1 assistant  ts None (no timestamp: counts as 0.0)
    c1|t2 user       ts 3.0
    c1|t3 user       ts None (no timestamp: counts as 0.0)
    c1|t4 assistant  ts 5.0

q_mid asks c1 at 3.0 -> sees t0, t1, t2, t3 (t4 is later); q_all asks c1 without asked_at -> all five;
q_early asks c2 at 0.5 -> sees only c2|t1 (no timestamp); q_lost asks a conversation not in the corpus -> nothing.
"""

import math

import numpy as np
import pytest

from bench.types import Conversation, Corpus, Question, Turn, Where
from bench.replay.visibility import (
    Memories,
    Visibility,
    admits,
    keys_of,
    question_filter,
    texts_of,
    visible,
)


def turn(conv, i, role, ts):
    return Turn(conv, f"t{i}", role, role, f"{conv} {i}", ts, i)


C1 = (turn("c1", 0, "user", 1.0), turn("c1", 1, "assistant", 2.0), turn("c1", 2, "user", 3.0),
      turn("c1", 3, "user", None), turn("c1", 4, "assistant", 5.0))
C2 = (turn("c2", 0, "user", 1.0), turn("c2", 1, "assistant", None))
Q_MID = Question("q_mid", "c1", "?", 3.0, ("t2",))
Q_ALL = Question("q_all", "c1", "?", None, ("t4",))
Q_EARLY = Question("q_early", "c2", "?", 0.5, ())
Q_LOST = Question("q_lost", "nowhere", "?", None, ())
CORPUS = Corpus("tiny", (Conversation("c1", C1), Conversation("c2", C2)), (Q_MID, Q_ALL, Q_EARLY, Q_LOST))
USER = ("user",)

# question, roles -> keys it may see, in conversation order (worked by hand from the table above)
EXPECTED = {
    ("q_mid", None): ["c1|t0", "c1|t1", "c1|t2", "c1|t3"],
    ("q_mid", USER): ["c1|t0", "c1|t2", "c1|t3"],
    ("q_all", None): ["c1|t0", "c1|t1", "c1|t2", "c1|t3", "c1|t4"],
    ("q_all", USER): ["c1|t0", "c1|t2", "c1|t3"],
    ("q_all", ("assistant",)): ["c1|t1", "c1|t4"],
    ("q_early", None): ["c2|t1"],
    ("q_early", USER): [],
    ("q_lost", None): [],
}
QUESTIONS = {q.question_id: q for q in CORPUS.questions}


def test_question_filter_is_conversation_roles_and_asked_at():
    assert question_filter(Q_MID) == Where(conversation_id="c1", roles=None, before=3.0)
    assert question_filter(Q_ALL, roles=USER) == Where(conversation_id="c1", roles=("user",), before=None)


def test_admits_each_part_of_the_rule():
    w = Where(conversation_id="c1", roles=USER, before=3.0)
    assert admits(w, conversation_id="c1", role="user", timestamp=3.0)  # said exactly when asked: visible
    assert not admits(w, conversation_id="c1", role="user", timestamp=3.5)  # said later
    assert not admits(w, conversation_id="c2", role="user", timestamp=1.0)  # another conversation
    assert not admits(w, conversation_id="c1", role="assistant", timestamp=1.0)  # another role
    assert admits(w, conversation_id="c1", role="user", timestamp=None)  # no timestamp counts as 0.0
    assert not admits(Where(before=-1.0), conversation_id="c1", role="user", timestamp=None)  # 0.0 > -1.0
    assert not admits(Where(before=3.0), conversation_id="c1", role="user", timestamp=math.nan)  # NaN is never <= anything
    assert admits(Where(), conversation_id="x", role="anything", timestamp=1e12)  # no constraint


@pytest.mark.parametrize("qid, roles", list(EXPECTED))
def test_scalar_and_vectorised_forms_agree_with_the_hand_worked_sets(qid, roles):
    q = QUESTIONS[qid]
    scalar = [t.key for t in C1 + C2 if visible(t, question_filter(q, roles=roles))]
    vis = Visibility(CORPUS)
    assert scalar == EXPECTED[(qid, roles)]
    assert vis.visible_keys(q, roles).tolist() == EXPECTED[(qid, roles)]
    assert [t.key for t in vis.visible_turns(q, roles)] == EXPECTED[(qid, roles)]
    start, end = vis.span(q.conversation_id)
    assert vis.keys[start + vis.local(q, roles)].tolist() == EXPECTED[(qid, roles)]
    assert vis.mask(q, roles).sum() == len(EXPECTED[(qid, roles)]) and len(vis.mask(q, roles)) == end - start


def test_spans_and_lookup():
    vis = Visibility(CORPUS)
    assert vis.spans == {"c1": (0, 5), "c2": (5, 7)} and vis.span("nowhere") == (0, 0)
    assert vis.lookup(["c2|t1", "c1|t0"]).tolist() == [6, 0]
    assert vis.lookup(["c1|t4", "ghost|t9"]).tolist() == [4, -1]  # not in the corpus
    assert vis.lookup(["c1|t3"]).tolist() == [3] and vis.lookup([]).tolist() == []


# exact order: similarity descending, then key. sims per c1 row: t0 .5, t1 .9, t2 .5, t3 .7, t4 .9
SIMS = np.array([0.5, 0.9, 0.5, 0.7, 0.9])


def test_top_orders_by_similarity_then_key():
    vis = Visibility(CORPUS)
    every = vis.local(Q_ALL)
    # t1 and t4 tie at .9 (key t1 < t4), then t3 .7, then t0 and t2 tie at .5 (t0 < t2)
    assert vis.top(0, every, SIMS, 5).tolist() == ["c1|t1", "c1|t4", "c1|t3", "c1|t0", "c1|t2"]
    assert vis.top(0, every, SIMS, 4).tolist() == ["c1|t1", "c1|t4", "c1|t3", "c1|t0"]  # the tie at the 4th place kept exact
    assert vis.top(0, every, SIMS, 1).tolist() == ["c1|t1"]
    assert vis.top(0, vis.local(Q_MID, USER), SIMS, 9).tolist() == ["c1|t3", "c1|t0", "c1|t2"]  # user turns said by 3.0


def test_ranks_agree_with_top():
    vis = Visibility(CORPUS)
    every = vis.local(Q_ALL)
    assert vis.ranks(0, every, SIMS, np.array([2, 0, 4, 1, 3])).tolist() == [5, 4, 2, 1, 3]  # t2, t0, t4, t1, t3
    mid_user = vis.local(Q_MID, USER)  # t0, t2, t3
    assert vis.ranks(0, mid_user, SIMS, np.array([3, 2])).tolist() == [1, 3]
    order = vis.top(0, every, SIMS, 5).tolist()
    ranks = vis.ranks(0, every, SIMS, every)
    assert [order.index(k) + 1 for k in vis.keys[every]] == ranks.tolist()


def test_visible_turns_are_memories_with_their_keys_and_texts_computed_once():
    seen = Visibility(CORPUS).visible_turns(Q_MID, USER)
    assert isinstance(seen, Memories) and seen == C1[:1] + C1[2:4]  # t0, t2, t3: still a plain tuple to compare and slice
    assert seen.keys == ("c1|t0", "c1|t2", "c1|t3") and seen.keys is seen.keys  # computed once, kept on the tuple
    assert seen.texts == ("c1 0", "c1 2", "c1 3")
    assert keys_of(seen) is seen.keys and texts_of(seen) is seen.texts
    assert keys_of(list(seen)) == seen.keys and texts_of(C2) == ("c2 0", "c2 1")  # any sequence of Turns
    assert type(seen[1:]) is tuple and keys_of(seen[1:]) == ("c1|t2", "c1|t3")  # a slice is a plain tuple again


# ---------------------------------------------------------------- metadata filter (Where.metadata)
from bench.replay.trace import PostFiltered  # noqa: E402
from bench.replay.visibility import check_filter, filter_spec, meta_admits, parse_filter  # noqa: E402
from bench.types import Hits  # noqa: E402


def test_parse_filter_forms_and_round_trip():
    conds = parse_filter({"project": "alpha", "memory_type": ["fact", "preference"], "priority": {"gte": 2, "lt": 5}})
    assert conds == (("memory_type", "in", ("fact", "preference")), ("priority", "gte", 2), ("priority", "lt", 5),
                     ("project", "eq", "alpha"))
    assert hash(Where(metadata=conds))  # part of a frozen, hashable Where
    assert filter_spec(conds) == {"memory_type": {"in": ["fact", "preference"]}, "priority": {"gte": 2, "lt": 5},
                                  "project": {"eq": "alpha"}}
    assert parse_filter(filter_spec(conds)) == conds
    assert parse_filter(None) is None and parse_filter({}) is None


@pytest.mark.parametrize("spec, message", [
    ({"p": {"near": 1}}, "filter: field 'p': unknown operator 'near' (one of eq, in, gte, lte, gt, lt)"),
    ({"p": {"gte": "a"}}, "filter: field 'p': 'gte' takes a number, got 'a'"),
    ({"p": {"gte": True}}, "filter: field 'p': 'gte' takes a number, got True"),
    ({"p": {"in": "a"}}, "filter: field 'p': 'in' takes a non-empty list of strings, numbers or booleans, got 'a'"),
    ({"p": []}, "filter: field 'p': 'in' takes a non-empty list of strings, numbers or booleans, got []"),
    ({"p": {}}, "filter: field 'p': an empty mapping filters nothing; give {op: value}"),
    ("p=a", "filter: must be a mapping field -> value, list or {op: value}, got 'p=a'"),
])
def test_parse_filter_errors_are_one_line(spec, message):
    with pytest.raises(ValueError) as e:
        parse_filter(spec)
    assert str(e.value) == message


def test_meta_admits_semantics():
    m = {"memory_type": "fact", "priority": 2, "weight": 0.5, "pinned": True, "tags": ("work", "deadline")}
    yes = [{"memory_type": "fact"}, {"memory_type": ["fact", "x"]}, {"priority": {"gte": 2, "lte": 2}},
           {"weight": {"gt": 0.4, "lt": 0.6}}, {"pinned": True}, {"tags": "work"}, {"tags": ["x", "deadline"]},
           {"priority": 2.0}]
    no = [{"memory_type": "preference"}, {"priority": {"gt": 2}}, {"priority": {"lt": 2}}, {"project": "alpha"},  # absent
          {"pinned": 1}, {"priority": True},  # a boolean is not the number 1 (nor the reverse)
          {"tags": "home"}, {"tags": {"gte": 1}}, {"memory_type": {"gte": 1}}]
    assert [meta_admits(parse_filter(s), m) for s in yes] == [True] * len(yes)
    assert [meta_admits(parse_filter(s), m) for s in no] == [False] * len(no)
    assert meta_admits(parse_filter({"memory_type": "fact"}), tuple(m.items()))  # Turn.metadata pairs too


def _meta_corpus() -> Corpus:
    md = [(("kind", "fact"), ("prio", 3)), (("kind", "ack"), ("prio", 1)), (), (("kind", "fact"), ("prio", 1))]
    turns = tuple(Turn("c", f"t{i}", "user", "u", f"x{i}", float(i), i, 0, m) for i, m in enumerate(md))
    return Corpus("m", (Conversation("c", turns),), (Question("q", "c", "?", 2.0, ("t0",)),))


def test_visibility_and_admits_apply_the_metadata_filter_alike():
    corpus = _meta_corpus()
    conds = parse_filter({"kind": "fact"})
    q = corpus.questions[0]
    vis = Visibility(corpus, conds)
    # asked at 2.0: t0, t1, t2 said; kind fact: t0 only (t2 has no metadata, t3 is later)
    assert vis.visible_keys(q).tolist() == ["c|t0"]
    assert [t.key for t in corpus.turns() if visible(t, question_filter(q, metadata=conds))] == ["c|t0"]
    assert Visibility(corpus).visible_keys(q).tolist() == ["c|t0", "c|t1", "c|t2"]  # no filter: unchanged
    assert question_filter(q, metadata=()) == question_filter(q)  # an empty filter is no filter


def test_check_filter_names_unknown_fields_and_ranges_on_text():
    corpus = _meta_corpus()
    check_filter(parse_filter({"kind": "fact", "prio": {"gte": 2}}), corpus)
    with pytest.raises(ValueError, match=r"^filter: field 'knd' is not a metadata field of corpus 'm' \(its fields: kind, prio\)$"):
        check_filter(parse_filter({"knd": "fact"}), corpus)
    with pytest.raises(ValueError, match=r"^filter: field 'kind': 'gte' needs an integer or number field, it holds \['str'\]$"):
        check_filter(parse_filter({"kind": {"gte": 1}}), corpus)
    with pytest.raises(ValueError, match=r"^filter: field 'prio': '3' is a str, the field holds \['number'\] \(a filter value"):
        check_filter(parse_filter({"prio": "3"}), corpus)
    with pytest.raises(ValueError, match=r"^filter: field 'kind': True is a bool, the field holds \['str'\]"):
        check_filter(parse_filter({"kind": ["fact", True]}), corpus)


class _Ranked:
    """A store double ranking ids a0..a9 (disallowed) before b0..b9, counting the k it was asked for."""

    class capabilities:  # noqa: N801
        max_k = 100
        filters = frozenset()

    name = "ranked"

    def __init__(self):
        self.asked = []

    def search(self, vector, *, k, where):
        assert where.metadata is None  # the metadata conditions never reach a store that cannot apply them
        self.asked.append(k)
        ids = [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)]
        return Hits(tuple(ids[:k]), tuple(1.0 - j / 100 for j in range(min(k, 20))))


def test_post_filter_over_fetches_until_k_pass_or_the_store_runs_out():
    inner = _Ranked()
    store = PostFiltered(inner, {f"b{i}" for i in range(10)})
    where = Where(metadata=parse_filter({"kind": "fact"}))
    hits = store.search(np.zeros(2), k=3, where=where)
    assert hits.ids == ("b0", "b1", "b2") and hits.scores == (0.9, 0.89, 0.88)  # the store's own scores, its order
    assert inner.asked == [12, 48]  # 4 x 3 gave no b; 4 x 12 = 48 gave 20 (all): enough
    inner.asked.clear()
    assert store.search(np.zeros(2), k=30, where=where).ids == tuple(f"b{i}" for i in range(10))  # all it has
    assert inner.asked == [100]  # 4 x 30 capped at max_k
    assert store.name == "ranked" and store.search(np.zeros(2), k=2, where=Where()).ids == ("a0", "a1")  # no filter: as is
