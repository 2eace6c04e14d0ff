"""The conventions table (bench/metrics/conventions.py): LongMemEval's arithmetic, checked by hand and against a transcription
of LongMemEval's own scorer on the 20-question _s slice; abstention exclusion; the report section and its CSV."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from bench.metrics import conventions as CV
from bench.data.longmemeval import load_longmemeval
from bench.data.units import UnitSpec, build_units
from bench.types import Conversation, Corpus, Question, Turn

SLICE = Path(__file__).parents[1] / "fixtures" / "data" / "lme_s_slice"


# --- LongMemEval src/retrieval/eval_utils.py (github.com/xiaowu0162/LongMemEval @ 9e0b455, MIT), transcribed:
# only np.asfarray (removed in numpy 2) became np.asarray(..., dtype=float).
def lme_dcg(relevances, k):
    relevances = np.asarray(relevances, dtype=float)[:k]
    if relevances.size:
        return relevances[0] + np.sum(relevances[1:] / np.log2(np.arange(2, relevances.size + 1)))
    return 0.


def lme_ndcg(rankings, correct_docs, corpus_ids, k=10):
    relevances = [1 if doc_id in correct_docs else 0 for doc_id in corpus_ids]
    sorted_relevances = [relevances[idx] for idx in rankings[:k]]
    ideal_relevance = sorted(relevances, reverse=True)
    ideal_dcg = lme_dcg(ideal_relevance, k)
    actual_dcg = lme_dcg(sorted_relevances, k)
    if ideal_dcg == 0:
        return 0.
    return actual_dcg / ideal_dcg


def lme_evaluate_retrieval(rankings, correct_docs, corpus_ids, k=10):
    recalled_docs = set(corpus_ids[idx] for idx in rankings[:k])
    recall_any = float(any(doc in recalled_docs for doc in correct_docs))
    recall_all = float(all(doc in recalled_docs for doc in correct_docs))
    ndcg_score = lme_ndcg(rankings, correct_docs, corpus_ids, k)
    return recall_any, recall_all, ndcg_score


def lme_evaluate_retrieval_turn2session(rankings, correct_docs, corpus_ids, k=10):
    def strip_turn_id(docid):
        return '_'.join(docid.split('_')[:-1])
    correct_docs = list(set([strip_turn_id(x) for x in correct_docs]))
    corpus_ids = [strip_turn_id(x) for x in corpus_ids]
    effective_k = k
    unique_docids = set(corpus_ids[idx] for idx in rankings[:effective_k])
    while effective_k <= len(corpus_ids) and len(unique_docids) < k:
        effective_k += 1
        unique_docids = set(corpus_ids[idx] for idx in rankings[:effective_k])
    return lme_evaluate_retrieval(rankings, correct_docs, corpus_ids, k=effective_k)
# --- end of the transcription


def test_dcg_by_hand():
    # ranks 1 and 2 undiscounted, rank 3 / log2(3), rank 4 / 2
    assert CV.lme_dcg([1, 1, 1, 1], 4) == pytest.approx(1 + 1 + 1 / math.log2(3) + 0.5)
    assert CV.lme_dcg([0, 1], 1) == 0.0 and CV.lme_dcg([], 5) == 0.0


def test_scores_by_hand():
    # gold {a, c}; ranking b a d c; k=2: any 1, all 0, ndcg = (0 + 1/log2(2)) / (1 + 1) = 0.5
    assert CV.lme_scores(ranked=["b", "a", "d", "c"], gold={"a", "c"}, n_relevant=2, k=2) == (1.0, 0.0, 0.5)
    # k=4: all 1; dcg = 1 + 1/log2(4) = 1.5 over ideal 2 -> 0.75
    assert CV.lme_scores(ranked=["b", "a", "d", "c"], gold={"a", "c"}, n_relevant=2, k=4) == (1.0, 1.0, 0.75)
    assert CV.effective_k(ranked=["x", "x", "y", "x", "z"], k=2) == 3
    assert CV.effective_k(ranked=["x", "x"], k=2) == 3  # the list ends first: LongMemEval's loop overshoots by one
    # a time-filtered ranking shorter than the haystack (4 units): the cut-off runs to the haystack's size, as
    # LongMemEval's loop over its whole corpus does (the ideal then covers min(relevant, k') items)
    assert CV.effective_k(ranked=["x", "x"], k=2, n_items=4) == 5


def test_a_ranking_that_leaves_units_out_scores_as_longmemeval():
    """Fails on the first version, which stopped the turn-to-session cut-off at the ranking's end."""
    ranked, ids = [0, 1], ["answer_0_a", "answer_0_b", "other_1_c", "answer_2_d"]  # units 2, 3 unseen (said later)
    correct = ["answer_0_a", "answer_2_d"]
    want = lme_evaluate_retrieval_turn2session(ranked, correct, ids, k=3)
    got = CV.question_scores(ranked=["u0", "u1"], gold=["u0", "u3"], session_of={"u0": "s0", "u1": "s0", "u2": "s1", "u3": "s2"},
                             units_per_session={"s0": 2, "s1": 1, "s2": 1}, unit="turn", ks=(3,), n_units=4)
    assert tuple(got["session", m, 3] for m in CV.METRICS) == pytest.approx(want, abs=1e-12)
    assert want[2] == pytest.approx(2 / (2 + 1 / math.log2(3)))  # relevant at ranks 1, 2 over an ideal of 3 relevant units


def _random_trace(corpus, seed=0):
    """A ranking of every unit of each question's haystack (no time filter, as LongMemEval ranks), shuffled."""
    rng = np.random.default_rng(seed)
    table = []
    for q in corpus.questions:
        keys = [t.key for t in next(c for c in corpus.conversations if c.conversation_id == q.conversation_id).turns]
        table.append({"question_id": q.question_id, "conversation_id": q.conversation_id,
                      "hit_ids": [keys[i] for i in rng.permutation(len(keys))]})
    return SimpleNamespace(table=pd.DataFrame(table), meta={"backend": "exact", "roles": None})


@pytest.fixture(scope="module")
def lme_slice():
    return load_longmemeval(path=SLICE, name="longmemeval_s_slice")


def _lme_ids(base, unit_corpus, ptr, level):
    """LongMemEval-style ids of the units: '<session>' (session) / '<session>_<turn>' (turn), where a gold unit's
    session is 'answer_<n>' and any other 'other_<n>'; the same gold as ours, named the way its scorer reads them."""
    out = {}
    for q in unit_corpus.questions:
        gold = set(q.evidence)
        for u in next(c for c in unit_corpus.conversations if c.conversation_id == q.conversation_id).turns:
            sess = f"answer_{u.session}" if (level == "session" and u.turn_id in gold) else f"other_{u.session}"
            if level == "turn":
                gold_sessions = {x.session for x in unit_corpus.turns() if x.conversation_id == q.conversation_id and x.turn_id in gold}
                sess = f"answer_{u.session}" if u.session in gold_sessions else f"other_{u.session}"
                out[q.question_id, u.key] = (f"{sess}_{u.turn_id.replace(':', '')}", u.turn_id in gold)
            else:
                out[q.question_id, u.key] = (sess, u.turn_id in gold)
    return out


@pytest.mark.parametrize("unit", ["session", "turn"])
def test_same_numbers_as_longmemeval_scorer_on_the_slice(lme_slice, unit):
    u, ptr = build_units(lme_slice, UnitSpec(unit, "user"))
    trace = _random_trace(u, seed=7)
    ours = CV.per_question(trace, u, unit=unit, ks=CV.KS).set_index("question_id")
    ids = _lme_ids(lme_slice, u, ptr, unit)
    kept = []
    for q in u.questions:
        if q.adversarial or not q.evidence:  # LongMemEval: '_abs' and "no target turns from the user side"
            assert q.question_id not in ours.index
            continue
        kept.append(q.question_id)
        conv = next(c for c in u.conversations if c.conversation_id == q.conversation_id).turns
        corpus_ids = [ids[q.question_id, t.key][0] for t in conv]
        pos = {t.key: i for i, t in enumerate(conv)}
        rankings = [pos[k] for k in trace.table.set_index("question_id").loc[q.question_id, "hit_ids"]]
        correct = [ids[q.question_id, t.key][0] for t in conv if ids[q.question_id, t.key][1]]
        for k in CV.KS:
            want = lme_evaluate_retrieval(rankings, correct, corpus_ids, k=k)
            got = tuple(ours.loc[q.question_id, f"{unit}/{m}@{k}"] for m in CV.METRICS)
            assert got == pytest.approx(want, abs=1e-12), (q.question_id, unit, k)
            if unit == "turn":
                want_s = lme_evaluate_retrieval_turn2session(rankings, correct, corpus_ids, k=k)
                got_s = tuple(ours.loc[q.question_id, f"session/{m}@{k}"] for m in CV.METRICS)
                assert got_s == pytest.approx(want_s, abs=1e-12), (q.question_id, "session", k)
    assert len(kept) == 15 and sorted(ours.index) == sorted(kept)  # 20 - 2 abstention - 3 assistant-only


def _two_session_corpus():
    t = [Turn("c", "s0:t0", "user", "user", "tea", 1.0, 0, 0), Turn("c", "s0:t1", "user", "user", "more tea", 1.0, 1, 0),
         Turn("c", "s1:t0", "user", "user", "dog", 2.0, 2, 1)]
    qs = (Question("q1", "c", "dog?", None, ("s1:t0",), "single"), Question("q2", "c", "tea?", None, ("s0:t1",), "multi"),
          Question("q_abs", "c", "cat?", None, ("s0:t0",), "single", adversarial=True))
    return Corpus("two", (Conversation("c", tuple(t)),), qs, (), "two.json")


def test_table_by_hand_abstention_excluded():
    c = _two_session_corpus()
    hits = {"q1": ["c|s0:t0", "c|s1:t0", "c|s0:t1"], "q2": ["c|s0:t1", "c|s0:t0", "c|s1:t0"], "q_abs": ["c|s0:t0"]}
    trace = SimpleNamespace(table=pd.DataFrame({"question_id": list(hits), "hit_ids": list(hits.values())}), meta={"backend": "exact"})
    df = CV.table(trace, c, unit="turn", roles="all", embedder="e", max_length=256, ks=(1, 3))
    get = df.set_index(["level", "metric", "k", "question_type"])
    # q1: its gold turn at rank 2 -> turn recall_any@1 0, @3 1; q2: rank 1 -> 1, 1
    assert get.loc[("turn", "recall_any", 1, "overall"), "mean"] == 0.5
    assert get.loc[("turn", "recall_any", 1, "single"), "mean"] == 0.0
    assert get.loc[("turn", "recall_any", 3, "overall"), "n_questions"] == 2  # q_abs left out
    # q1 turn ndcg@3: rank 2 -> 1 / 1 (rank 2 undiscounted) = 1.0
    assert get.loc[("turn", "ndcg", 3, "single"), "mean"] == 1.0
    # q1 session@1: sessions s0, s1, s0 -> the first item alone already is one distinct session: k'=1, s0 not gold -> 0
    assert get.loc[("session", "recall_any", 1, "single"), "mean"] == 0.0
    assert set(df["n_abstention_excluded"]) == {1} and set(df["n_without_gold_excluded"]) == {0}
    assert list(df.columns) == CV.COLUMNS


def test_session_unit_has_only_session_level(lme_slice):
    u, _ = build_units(lme_slice, UnitSpec("session", "user"))
    df = CV.table(_random_trace(u), u, unit="session", roles="user", embedder="e", max_length=None)
    assert set(df["level"]) == {"session"} and set(df["k"]) == set(CV.KS)
    overall = df[(df["question_type"] == "overall") & (df["metric"] == "recall_any")]
    assert set(overall["n_questions"]) == {15}
    assert set(df["n_abstention_excluded"]) == {2} and set(df["n_without_gold_excluded"]) == {3}
    assert (overall.sort_values("k")["mean"].diff().dropna() >= 0).all()  # recall_any grows with k
    assert overall.set_index("k").loc[50, "mean"] == 1.0  # every haystack of the slice has < 50 sessions


def test_report_section_and_csv(tmp_path, lme_slice):
    from bench.report.conventions import TITLE, section
    from bench.results.rundir import RunDir

    u, _ = build_units(lme_slice, UnitSpec("session", "user"))
    df = CV.table(_random_trace(u), u, unit="session", roles="user", embedder="minilm", max_length=256)
    CV.write(tmp_path / CV.FILE, df)
    (tmp_path / "meta.json").write_text("{}")
    (tmp_path / "summary.csv").write_text("x\n1\n")
    lines = section(RunDir(tmp_path))
    text = "\n".join(lines)
    assert lines[0] == TITLE
    assert ("**longmemeval_s_slice-session-user, session level**: unit `session`, indexed roles `user`, embedder `minilm` "
            "(truncation 256 tokens), store `exact`; k = 1, 3, 5, 10, 20, 30, 50") in text
    assert "2 abstention questions excluded" in text and "3 questions without gold in this unit excluded" in text
    assert "| metric | overall (n=15) |" in text
    row = next(x for x in lines if x.startswith("| recall_any@50 |"))
    assert row.startswith("| recall_any@50 | 1.000 |")
    assert section(RunDir(tmp_path / "nothing")) == []


def test_report_reads_a_conventions_csv_from_before_the_system_column(tmp_path, lme_slice):
    from bench.report.conventions import section
    from bench.results.rundir import RunDir

    u, _ = build_units(lme_slice, UnitSpec("session", "user"))
    df = CV.table(_random_trace(u), u, unit="session", roles="user", embedder="minilm", max_length=256)
    assert set(df["system"]) == {"minilm"}  # the embedder names the system unless a lexical ranker is named
    CV.write(tmp_path / CV.FILE, df.drop(columns=["system"]))
    (tmp_path / "meta.json").write_text("{}")
    (tmp_path / "summary.csv").write_text("x\n1\n")
    text = "\n".join(section(RunDir(tmp_path)))
    assert "embedder `minilm` (truncation 256 tokens)" in text and "side by side" not in text  # one system: no side-by-side
