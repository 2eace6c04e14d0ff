"""Answer coverage (bench.metrics.answers): SQuAD normalisation, token recall and containment, hand-worked; the index equals
the plain functions; the sweep's columns and summary."""

import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from bench.metrics.answers import STOP_WORDS, AnswerIndex, answer_tokens, contained, prefix_coverage, token_recall
from bench.metrics.text import normalise
from bench.strategies.spec import load_spec
from bench.selection.sweep import summarise, sweep
from bench.replay.trace import TRACE_COLUMNS, Trace
from bench.types import Conversation, Corpus, Question, Turn


def test_squad_normalisation():
    assert normalise("The Eiffel-Tower, in Paris!") == ["eiffeltower", "in", "paris"]
    assert normalise("  An apple a DAY ") == ["apple", "day"]
    assert normalise("7 May 2023") == ["7", "may", "2023"]
    assert normalise("the.") == []


def test_token_recall_and_containment_hand_worked():
    ctx = ["Caroline went to the LGBTQ support group on 7 May 2023.", "She liked it."]
    # answer tokens [7, may, 2023]: all present -> 1; contained as a phrase in memory 0
    assert token_recall(answer="7 May 2023", context=ctx) == 1.0 and contained(answer="7 May 2023", context=ctx) == 1.0
    # [8, may, 2023]: 2 of 3 tokens -> 2/3; not contained
    assert token_recall(answer="8 May 2023", context=ctx) == pytest.approx(2 / 3) and contained(answer="8 May 2023", context=ctx) == 0.0
    # multiset: "may may" needs two 'may's, the context has one -> 1/2
    assert token_recall(answer="may may", context=ctx) == 0.5
    # a phrase split across two memories is not contained, though every token is there
    assert token_recall(answer="2023 liked", context=ctx) == 1.0 and contained(answer="2023 liked", context=ctx) == 0.0
    # word boundaries: "go" is not inside "group"
    assert contained(answer="go", context=ctx) == 0.0 and token_recall(answer="go", context=ctx) == 0.0
    assert token_recall(answer="x", context=[]) == 0.0 and contained(answer="x", context=[]) == 0.0
    for f in (token_recall, contained):  # no answer: undefined, never 0 (nor an answer made of stop words only)
        assert math.isnan(f(answer="", context=ctx)) and math.isnan(f(answer="The!", context=ctx))
        assert math.isnan(f(answer="She", context=ctx))


def test_answer_tokens_keep_initials_together_and_drop_function_words():
    for name in ("C. S.Lewis", "C.S. Lewis", "CS Lewis", "c s lewis"):  # SQuAD: "c slewis", "cs lewis", "cs lewis"
        assert answer_tokens(name) == ["cs", "lewis"], name
    assert answer_tokens("U.S.") == answer_tokens("US") == ["us"]
    assert answer_tokens("The Eiffel-Tower, in Paris!") == ["eiffel", "tower", "paris"]  # "in" is a stop word
    assert answer_tokens("$1,000 and 3.5 don't") == ["1000", "35", "dont"]  # digits and apostrophes as SQuAD
    assert answer_tokens("He said no, not at all") == ["said", "no", "not", "all"]  # negations stay
    assert answer_tokens("a week in Plan B") == ["week", "plan", "b"]  # "a" is a word, never an initial
    assert {"in", "on", "at", "of", "to", "and"} <= STOP_WORDS and not STOP_WORDS & {"no", "not", "never", "us"}
    assert normalise("C. S.Lewis") == ["c", "slewis"]  # SQuAD's (bench.evaluation.qa's token F1) is unchanged


def _tokens_ref(text):
    """``answer_tokens``'s rule written plainly (the module docstring's, character by character)."""
    import re
    import string

    text = re.sub(rf"(?<=\d)[{re.escape(string.punctuation)}](?=\d)", "", text.lower().replace("'", "").replace("\u2018", "").replace("\u2019", ""))
    text = "".join(" " if ch in string.punctuation + "\u201c\u201d\u2013\u2014\u2026" else ch for ch in text)
    out, run = [], False
    for tok in text.split():
        single = len(tok) == 1 and tok.isalpha() and tok not in ("a", "i")
        if single and run:
            out[-1] += tok
        else:
            out.append(tok)
        run = single
    return [t for t in out if t not in STOP_WORDS]


def test_answer_tokens_equal_the_rule_on_separators_digits_and_initials():
    texts = ["1,2,3 and 1,,2 or 4.5.6", "x y z then a b c, I J K", "tab\tsep\x1cfile\x1dgroup\x1erecord\x1funit",
             "don't  WON'T", "e.g. i.e. U.S.A.", "B. C. D", "Café in Z\u00fcrich, C. S.\u00a0Lewis", "7-11 3:30 pm", "", "   ",
             "x", "q r", "a\x0bb\x0cc\rd"]
    for x in texts:
        assert answer_tokens(x) == _tokens_ref(x), x
    assert answer_tokens("file\x1cunit") == ["file", "unit"] and answer_tokens("1,2,3") == ["123"]


def test_function_words_earn_no_answer_coverage():
    # SQuAD tokens ["in", "paris"]: "in" matched the context -> 0.5 on 7255a18; now only "paris" counts -> 0
    assert token_recall(answer="in Paris", context=["We live in Rome."]) == 0.0
    assert token_recall(answer="at the beach on Sunday", context=["We met at noon on Monday."]) == 0.0
    assert token_recall(answer="C. S.Lewis", context=["She loves C.S. Lewis books."]) == 1.0
    assert contained(answer="C. S.Lewis", context=["She loves C.S. Lewis books."]) == 1.0


def _t(i, text, ts=None):
    return Turn("c1", f"t{i}", "user", "Ann", text, float(i) if ts is None else ts, i)


CORPUS = Corpus(
    name="tiny",
    conversations=(Conversation("c1", (_t(0, "We moved to Oslo in 2019."), _t(1, "Oslo is cold."), _t(2, "I adopted a cat named Miso."))),),
    questions=(Question("q1", "c1", "Where did they move?", None, ("t0",), answer="Oslo"),
               Question("q2", "c1", "Cat's name and city?", None, ("t2",), answer="Miso, Oslo"),
               Question("q3", "c1", "Dog?", None, ("t1",), answer=""),  # no answer: NaN
               Question("q4", "c1", "Adversarial?", None, ("t1",), adversarial=True, answer="Oslo")),
)


# The module docstring's definitions written plainly, per question: the oracle of ``AnswerIndex`` (the package's one
# implementation, which ``token_recall`` and ``contained`` are views of).
def token_recall_ref(*, answer, context):
    want = Counter(answer_tokens(answer))
    if not want:
        return math.nan
    have = Counter(t for text in context for t in answer_tokens(text))
    return sum(min(c, have[t]) for t, c in want.items()) / sum(want.values())


def contained_ref(*, answer, context):
    phrase = " ".join(answer_tokens(answer))
    if not phrase:
        return math.nan
    return float(any(f" {phrase} " in f" {' '.join(answer_tokens(text))} " for text in context))


def test_the_functions_equal_the_oracle():
    ctx = ["We met on 7 May 2023 in Oslo.", "May I? I liked 2023.", "C.S. Lewis, U.S. don't 1,000"]
    for answer in ("7 May 2023", "8 May 2023", "may may", "2023 liked", "go", "x", "", "the", "C. S.Lewis", "us 1000 dont"):
        for c in ([], ctx[:1], ctx, ctx[::-1]):
            assert token_recall(answer=answer, context=c) == pytest.approx(token_recall_ref(answer=answer, context=c), nan_ok=True)
            assert contained(answer=answer, context=c) == pytest.approx(contained_ref(answer=answer, context=c), nan_ok=True)


def test_index_equals_the_plain_functions():
    idx = AnswerIndex.build(CORPUS)
    texts = {t.key: t.text for t in CORPUS.conversations[0].turns}
    for q in CORPUS.questions:
        for ids in ([], ["c1|t0"], ["c1|t1", "c1|t2"], list(texts), ["c9|t0"]):
            got = idx.score(q.question_id, ids)
            want = (token_recall_ref(answer=q.answer, context=[texts[i] for i in ids if i in texts]),
                    contained_ref(answer=q.answer, context=[texts[i] for i in ids if i in texts]))
            assert got == pytest.approx(want, nan_ok=True), (q.question_id, ids)
    assert idx.score("q2", ["c1|t1"]) == (0.5, 0.0)  # "oslo" of ["miso", "oslo"]; the phrase "miso oslo" is nowhere


def test_index_equals_the_plain_functions_on_initials_and_stop_words():
    turns = (_t(0, "She loves C.S. Lewis books."), _t(1, "We met at noon on Monday."), _t(2, "Lunch in Paris, at the U.S. embassy."))
    corpus = Corpus(name="tiny2", conversations=(Conversation("c1", turns),),
                    questions=(Question("q1", "c1", "?", None, ("t0",), answer="C. S.Lewis"),
                               Question("q2", "c1", "?", None, ("t1",), answer="at the beach on Sunday"),
                               Question("q3", "c1", "?", None, ("t2",), answer="in Paris at the US embassy"),
                               Question("q4", "c1", "?", None, ("t2",), answer="At it")))  # stop words only: NaN
    idx, texts = AnswerIndex.build(corpus), {t.key: t.text for t in turns}
    for q in corpus.questions:
        for ids in ([], ["c1|t0"], ["c1|t1", "c1|t2"], list(texts)):
            want = (token_recall_ref(answer=q.answer, context=[texts[i] for i in ids]), contained_ref(answer=q.answer, context=[texts[i] for i in ids]))
            assert idx.score(q.question_id, ids) == pytest.approx(want, nan_ok=True), (q.question_id, ids)
            recall, inside = idx.prefixes(q.question_id, ids)
            assert (recall[-1], inside[-1]) == pytest.approx(want, nan_ok=True)
    assert idx.score("q1", ["c1|t0"]) == (1.0, 1.0) and idx.score("q2", list(texts)) == (0.0, 0.0)
    assert idx.score("q3", ["c1|t2"]) == (1.0, 1.0)  # ["paris", "us", "embassy"]: "US" = "U.S."


def test_prefix_curves_equal_scoring_every_prefix():
    idx = AnswerIndex.build(CORPUS)
    ids = ["c1|t2", "c9|t0", "c1|t0", "c1|t1"]  # c9|t0 is another conversation's: it adds nothing
    for q in CORPUS.questions:
        recall, inside = idx.prefixes(q.question_id, ids)
        assert len(recall) == len(inside) == len(ids) + 1
        for n in range(len(ids) + 1):
            assert (recall[n], inside[n]) == pytest.approx(idx.score(q.question_id, ids[:n]), nan_ok=True), (q.question_id, n)
    recall, inside = idx.prefixes("q2", ["c1|t1", "c1|t2"])
    assert recall.tolist() == [0.0, 0.5, 1.0] and inside.tolist() == [0.0, 0.0, 0.0]  # oslo, then miso; the phrase in neither



def test_prefix_coverage_hand_worked():
    # answer "oslo miso oslo": want oslo 2, miso 1 (3 tokens). Of 5 selected memories, position 3 holds "oslo" once and
    # the whole answer, position 1 "miso" and "oslo" once each (given out of order); the others hold nothing.
    rec, cont = prefix_coverage(positions=np.array([3, 1]), counts=np.array([[1, 0], [1, 1]]), inside=np.array([True, False]),
                                want=np.array([2, 1]), n=5)
    # first 0 or 1: nothing; first 2..3: oslo 1 + miso 1 = 2/3; first 4..5: oslo 2 + miso 1 = 3/3, contained from 4 on
    assert rec.tolist() == [0.0, 0.0, 2 / 3, 2 / 3, 1.0, 1.0] and cont.tolist() == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    # capped at the answer's counts: a memory with three "oslo"s covers 2 of 3
    rec, cont = prefix_coverage(positions=np.array([0]), counts=np.array([[3, 0]]), inside=np.array([False]), want=np.array([2, 1]), n=1)
    assert rec.tolist() == [0.0, 2 / 3] and cont.tolist() == [0.0, 0.0]
    rec, cont = prefix_coverage(positions=np.zeros(0, np.int64), counts=np.zeros((0, 2), np.int64), inside=np.zeros(0, bool),
                                want=np.array([2, 1]), n=2)
    assert rec.tolist() == [0.0, 0.0, 0.0] and cont.tolist() == [0.0, 0.0, 0.0]


def test_hot_memories_and_score_many():
    idx = AnswerIndex.build(CORPUS)
    # q2 "Miso, Oslo": t0 and t1 hold "oslo", t2 "miso"; the phrase "miso oslo" is in none
    keys, counts, inside, want = idx.hot("q2")
    assert keys == ("c1|t0", "c1|t1", "c1|t2") and counts.tolist() == [[0, 1], [0, 1], [1, 0]] and want.tolist() == [1, 1]
    assert inside.tolist() == [False, False, False] and idx.hot("q3") is None  # no answer
    assert idx.hot("q1")[0] == ("c1|t0", "c1|t1") and idx.hot("q1")[2].tolist() == [True, True]
    qids = [q.question_id for q in CORPUS.questions]
    for ids in ([], ["c1|t1"], ["c1|t2", "c9|t0"], ["c1|t0", "c1|t1", "c1|t2"]):
        rec, cont = idx.score_many(qids, ids)
        np.testing.assert_array_equal(np.array([rec, cont]).T, np.array([idx.score(q, ids) for q in qids]), err_msg=str(ids))
    assert idx.score_many(["q1", "q2"], ["c1|t1"]) == ([1.0, 0.5], [1.0, 0.0])

def _trace(hits):
    rows = [{"question_id": q.question_id, "conversation_id": "c1", "latency_ns": 1.0, "hit_ids": hits[q.question_id],
             "hit_scores": [0.9 - 0.2 * i for i in range(len(hits[q.question_id]))], "exact_scores": [], "gold_ids": [],
             "gold_exact_ranks": []} for q in CORPUS.questions]
    return Trace(pd.DataFrame(rows, columns=TRACE_COLUMNS), {"dataset": "tiny", "embedder": "e", "backend": "exact", "roles": None})


def test_sweep_rows_and_summary_carry_answer_coverage():
    limit1 = load_spec({"name": "limit1", "fn": {"_target_": "bench.strategies.vector.limit", "_partial_": True, "k": 1}})
    hits = {"q1": ["c1|t1", "c1|t0"], "q2": ["c1|t2", "c1|t1"], "q3": ["c1|t1"], "q4": ["c1|t1"]}
    rows = sweep(_trace(hits), CORPUS, [limit1], (0.5,), {t.key: 3 for t in CORPUS.turns()})
    by = rows.set_index("question_id")
    # q1: injected t1 "Oslo is cold." -> evidence missed (t0 is gold) but the answer is there: recall 0, answer 1
    assert (by.loc["q1", "recall"], by.loc["q1", "answer_recall"], by.loc["q1", "answer_contained"]) == (0.0, 1.0, 1.0)
    # q2: t2 "...cat named Miso." -> answer tokens [miso, oslo]: 1/2, phrase not contained; evidence hit
    assert (by.loc["q2", "recall"], by.loc["q2", "answer_recall"], by.loc["q2", "answer_contained"]) == (1.0, 0.5, 0.0)
    assert math.isnan(by.loc["q3", "answer_recall"]) and math.isnan(by.loc["q3", "answer_contained"])
    s = summarise(rows).iloc[0]
    # scored: q1, q2, q3 (non-adversarial, with gold); with an answer: q1, q2. The adversarial q4 only counts for abstention.
    assert (s["n_questions"], s["n_answer"]) == (3, 2)
    assert s["answer_recall"] == pytest.approx(0.75) and s["answer_contained"] == pytest.approx(0.5)
    assert s["adversarial_abstain_rate"] == 0.0 and s["n_adversarial"] == 1


@pytest.mark.slow
def test_the_report_shows_answer_coverage_with_its_plot(tmp_path_factory):
    from demo_run import demo_run

    run = demo_run(tmp_path_factory.mktemp("answers_report"))
    s = pd.read_csv(run / "summary.csv")
    assert {"n_answer", "answer_recall", "answer_contained"} <= set(s.columns) and (s["n_answer"] > 0).all()
    full = s[s["kind"] == "full_context"].iloc[0]
    assert full["answer_recall"] >= s["answer_recall"].max() - 1e-12  # everything injected: the most answer words
    text = (run / "report.md").read_text()
    assert "## Answer coverage" in text and "evidence_missed_answer_in" in text
    assert (run / "answer_coverage_vs_tokens_0.png").stat().st_size > 1000


def test_prefilter_skips_only_turns_that_cannot_hold_an_answer_token(monkeypatch):
    """Answer tokens made by deleting or joining over punctuation (U.S. -> us, don't -> dont, 1,000 -> 1000, split by a
    no-break space) are still found; a turn with none of them is skipped; the index equals the one without the prefilter."""
    import sys

    import bench.metrics.answers as A

    assert set(A.SPACES) == {chr(i) for i in range(sys.maxunicode + 1) if chr(i).isspace()}
    texts = ["We met in the U.S. last year", "I don't know", "it cost 1,000 dollars", "nothing\u00a0here", "Paris\u2003trip"]
    turns = tuple(Turn("c", f"t{i}", "user", "user", t, float(i), i) for i, t in enumerate(texts))
    qs = (Question("q1", "c", "where?", None, ("t0",), answer="US"), Question("q2", "c", "what?", None, ("t1",), answer="dont"),
          Question("q3", "c", "cost?", None, ("t2",), answer="1000"), Question("q4", "c", "trip?", None, ("t4",), answer="Paris trip"))
    corpus = Corpus("pf", (Conversation("c", turns),), qs)
    ids = [t.key for t in turns]
    fast = AnswerIndex.build(corpus)
    monkeypatch.setattr(A, "PREFILTER_MAX", -1)  # every turn tokenised
    slow = AnswerIndex.build(corpus)
    for q in qs:
        for n in range(len(ids) + 1):
            assert fast.score(q.question_id, ids[:n]) == slow.score(q.question_id, ids[:n])
    assert fast.score("q1", ids[:1]) == (1.0, 1.0) and fast.score("q2", ids[1:2]) == (1.0, 1.0)
    assert fast.score("q3", ids[2:3]) == (1.0, 1.0) and fast.score("q4", ids[4:5]) == (1.0, 1.0)
    assert fast.score("q1", ids[3:4]) == (0.0, 0.0)
    assert A.squash("The U.S.\u00a0don't 1,000") == "theusdont1000"


def test_prefilter_on_accented_and_nul_texts(monkeypatch):
    """ASCII texts are squashed as bytes, the others as str, joined in UTF-8: the same squash, the same index (a text
    holding NUL falls back to testing turn by turn)."""
    import string

    import bench.metrics.answers as A

    for x in ("The U.S.\u00a0don't 1,000", string.printable + "\x1c\x1d\x1e\x1f", "Caf\u00e9 in Z\u00fcrich", "\u0130stanbul \u2019s"):
        assert A._squashed(x) == A.squash(x).encode(), x
    for texts, hot in ((["We flew to Z\u00fcrich.", "Caf\u00e9 au lait \u2014 no sugar", "nothing here"], [0, 1]),
                       (["a\0b", "Z\u00fcrich again", "none"], [1])):
        turns = tuple(Turn("c", f"t{i}", "user", "user", t, float(i), i) for i, t in enumerate(texts))
        qs = (Question("q1", "c", "where?", None, ("t0",), answer="Z\u00fcrich"), Question("q2", "c", "drink?", None, ("t1",), answer="caf\u00e9"))
        corpus = Corpus("pf", (Conversation("c", turns),), qs)
        assert A._candidates(turns, {"z\u00fcrich", "caf\u00e9"}) == hot
        fast = AnswerIndex.build(corpus)
        with monkeypatch.context() as m:
            m.setattr(A, "PREFILTER_MAX", -1)  # every turn tokenised
            slow = AnswerIndex.build(corpus)
        ids = [t.key for t in turns]
        for q in qs:
            for n in range(len(ids) + 1):
                assert fast.score(q.question_id, ids[:n]) == slow.score(q.question_id, ids[:n])
        assert fast.score("q1", ids[hot[0] : hot[0] + 1])[0] == 1.0 and fast.score("q1", ids[2:])[0] == 0.0


def test_the_index_as_arrays_reads_back_the_same():
    """``to_arrays`` / ``from_arrays`` (the job's answer-index cache) give back the index ``build`` made; arrays that do not
    fit the corpus are one ValueError."""
    turns = (_t(0, "She loves C.S. Lewis books."), _t(1, "We met at noon on Monday."), _t(2, "Lunch in Paris, at the U.S. embassy."))
    other_turns = tuple(Turn("c2", t.turn_id, t.role, t.speaker, t.text, t.timestamp, t.position) for t in CORPUS.conversations[0].turns)
    corpus = Corpus(name="tiny2", conversations=(Conversation("c1", turns), Conversation("c2", other_turns)),
                    questions=(Question("q1", "c1", "?", None, ("t0",), answer="C. S.Lewis"), Question("q2", "c1", "?", None, ("t1",), answer="At it"),
                               Question("q3", "c2", "?", None, ("t0",), answer="Miso, Oslo"), Question("q4", "c2", "?", None, ("t0",), answer="Oslo 2019")))
    built = AnswerIndex.build(corpus)
    arrays = built.to_arrays()
    assert arrays["question_id"].tolist() == ["q1", "q3", "q4"]  # q2: stop words only, no answer
    back = AnswerIndex.from_arrays(corpus, arrays)
    assert back.questions["q2"] is None
    for q in corpus.questions:
        conv = next(c for c in corpus.conversations if c.conversation_id == q.conversation_id)
        ids = [t.key for t in conv.turns]
        for n in range(len(ids) + 1):
            assert back.score(q.question_id, ids[:n]) == pytest.approx(built.score(q.question_id, ids[:n]), nan_ok=True)
            assert np.allclose(back.score_many([q.question_id], ids[:n]), built.score_many([q.question_id], ids[:n]), equal_nan=True)
    assert back.score("q4", ["c2|t0"]) == (1.0, 1.0) and back.score("q3", ["c2|t1"]) == (0.5, 0.0)
    other = Corpus(name="x", conversations=corpus.conversations, questions=corpus.questions[1:])
    with pytest.raises(ValueError, match="question 'q1' is not in corpus 'x'"):
        AnswerIndex.from_arrays(other, arrays)
    with pytest.raises(ValueError, match="do not agree"):
        AnswerIndex.from_arrays(corpus, {**arrays, "want": arrays["want"][:-1]})
    with pytest.raises(ValueError, match="names a memory"):
        AnswerIndex.from_arrays(corpus, {**arrays, "hot": arrays["hot"] + 10})
