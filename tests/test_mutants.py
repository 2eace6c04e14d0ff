"""Six rules that a mutation spot-check (issue 25) could break without any test failing, each pinned here.

Every test names the rule it holds (quoted from the code's own docstring) and was shown to fail on the mutant
that survived before (the mutant is named in each test's docstring): tiny hand-worked fixtures, values beside them.
"""

import json
import math

import pandas as pd
import pytest

from bench.metrics import ranked as R
from bench.replay import trec
from bench.analysis import compare
from bench.analysis.verdict import verdict
from bench.metrics.answers import AnswerIndex, contained
from bench.evaluation.qa import abstains
from bench.results.rundir import RunDir
from bench.tools.regress.checks.coverage import coverage_checks
from bench.tools.regress.settings import FAIL
from bench.replay.trace import TRACE_COLUMNS, Trace
from bench.types import Conversation, Corpus, Question, Turn

# --------------------------------------------------------------------------------------- (a) adversarial with gold

# c1: turns t0..t3, sessions 0, 0, 1, 1. q1 is scored; q2 is adversarial, yet its source gave it gold (t2) and the
# trace carries it: "only the scored questions (non-adversarial, with gold) enter the table" (bench.metrics.ranked).
TURNS = tuple(Turn("c1", f"t{i}", "user", "u", f"text {i}", float(i), i, i // 2) for i in range(4))
ADV = Corpus("tiny", (Conversation("c1", TURNS),),
             (Question("q1", "c1", "?", None, ("t1",)), Question("q2", "c1", "?", None, ("t2",), adversarial=True)))


def _trace(gold: dict[str, list[str]]) -> Trace:
    hits = ["c1|t2", "c1|t1", "c1|t0", "c1|t3"]
    rows = [{"question_id": q.question_id, "conversation_id": "c1", "latency_ns": 1.0, "hit_ids": hits,
             "hit_scores": [0.9, 0.8, 0.7, 0.6], "exact_scores": [], "gold_ids": gold[q.question_id], "gold_exact_ranks": []}
            for q in ADV.questions]
    return Trace(pd.DataFrame(rows, columns=TRACE_COLUMNS), {"dataset": "tiny", "embedder": "e", "backend": "exact", "roles": None})


def test_an_adversarial_question_with_gold_stays_out_of_the_ranked_metrics():
    """Mutant: ``per_question`` without ``q.adversarial`` in its skip test (q2's t2 at rank 1 would lift MRR to 3/4)."""
    rows = R.per_question(_trace({"q1": ["c1|t1"], "q2": ["c1|t2"]}), ADV, ks=(1,))
    assert rows["question_id"].tolist() == ["q1"]
    assert rows["turn/mrr"].tolist() == [0.5]  # q1: gold t1 at rank 2
    t = R.for_traces([_trace({"q1": ["c1|t1"], "q2": ["c1|t2"]})], ADV, ks=(1,), n_resamples=10)
    mrr = t[(t["level"] == "turn") & (t["metric"] == "mrr")].iloc[0]
    assert (mrr["n_questions"], mrr["mean"]) == (1, 0.5)


def test_an_adversarial_question_with_gold_has_no_qrels():
    """Mutant: ``qrels_lines`` without ``q.adversarial`` (trec_eval would then score q2, which ranked.csv does not)."""
    lines = trec.qrels_lines(_trace({"q1": ["c1|t1"], "q2": ["c1|t2"]}).table, ADV)
    assert lines == ["q1 0 c1|t1 1"]


# --------------------------------------------------------------------------------------- (b) AnswerIndex inside a word

def test_answer_index_never_matches_inside_a_longer_word():
    """``answer_contained``: the answer's tokens *as a token sequence* in one memory. Mutant: the phrase searched
    without its surrounding spaces, so "cat" is found inside "concatenate" and "cats" (and "red car" inside "bored
    cart"). Turn t0 holds the answer only inside longer words, t1 holds it as words."""
    turns = (Turn("c1", "t0", "user", "u", "I concatenate cats; bored cart.", 0.0, 0),
             Turn("c1", "t1", "user", "u", "The cat sat by the red car.", 1.0, 1))
    corpus = Corpus("words", (Conversation("c1", turns),),
                    (Question("q1", "c1", "pet?", None, ("t1",), answer="cat"),
                     Question("q2", "c1", "car?", None, ("t1",), answer="red car")))
    index = AnswerIndex.build(corpus)
    # token recall: "cat" is not a token of t0 ("concatenate", "cats"), so 0; in t1 it is, so 1
    assert index.score("q1", ["c1|t0"]) == (0.0, 0.0) == (0.0, contained(answer="cat", context=[turns[0].text]))
    assert index.score("q1", ["c1|t1"]) == (1.0, 1.0)
    assert index.score("q2", ["c1|t0"]) == (0.0, 0.0)  # "bored" and "cart" are not "red" and "car"
    assert index.score("q2", ["c1|t1"]) == (1.0, 1.0)
    recall, inside = index.prefixes("q1", ["c1|t0", "c1|t1"])
    assert recall.tolist() == [0.0, 0.0, 1.0] and inside.tolist() == [0.0, 0.0, 1.0]


# --------------------------------------------------------------------------------------- (c) unknown labels digest

def _job(path, labels: str | None):
    path.mkdir()
    meta = {"dataset": "ds"} | ({"labels_sha256": labels} if labels else {})  # no labels_sha256, no corpus snapshot: unknown
    (path / "meta.json").write_text(json.dumps(meta))
    (path / "summary.csv").write_text("dataset\nds\n")
    return path


def test_a_run_whose_labels_are_unknown_is_said_so_never_taken_for_a_mismatch(tmp_path):
    """``RunDir.labels``: "None when one is unknown"; ``label_check``: unknown labels are *unknowns* (a warning),
    not mismatches (a refusal). Mutants: ``a is None and b is None`` (one unknown side becomes a mismatch), and
    ``labels`` dropping the None (an unknown run would join as the known digest)."""
    known, unknown = _job(tmp_path / "A", "a" * 64), _job(tmp_path / "B", None)
    assert RunDir(unknown).digest("labels") is None and RunDir(unknown).labels() == {"ds": None}
    assert compare.label_check(known, unknown) == (
        [], ["ds: the labels of run B are unknown (made before runs recorded them)"])
    assert compare.label_check(unknown, known) == (
        [], ["ds: the labels of run A are unknown (made before runs recorded them)"])
    assert compare.label_check(unknown, unknown)[0] == []
    # a job of known labels beside one of unknown labels for the same dataset: the run's labels are unknown
    both = tmp_path / "multi"
    both.mkdir()
    _job(both / "job0", "a" * 64)
    _job(both / "job1", None)
    assert RunDir(both).labels() == {"ds": None}
    assert compare.label_check(known, both)[0] == []


def test_the_gate_checks_labels_only_when_both_are_known():
    """``coverage_checks``: labels "checked when both are known". Mutants: ``if lc and lb != lc`` / ``if lb and lb != lc``
    (an unknown baseline or run would fail the gate); the known pair that differs must still fail."""
    rows = pd.DataFrame({"backend": ["exact"], "strategy": ["limit5"], "threshold": [math.nan], "question_id": ["q0"]})

    def labels_rows(lb, lc):
        c = coverage_checks(rows, rows, [], labels=(lb, lc))
        return c[c["metric"] == "labels"]

    assert labels_rows(None, "b" * 64).empty and labels_rows("a" * 64, None).empty and labels_rows(None, None).empty
    assert labels_rows("a" * 64, "a" * 64).empty
    bad = labels_rows("a" * 64, "b" * 64)
    assert bad["verdict"].tolist() == [FAIL]


# --------------------------------------------------------------------------------------- (d) abstention with extra words

@pytest.mark.parametrize("reply", [
    "No information available",
    "No information available.",
    "NO INFORMATION AVAILABLE in these memories, sorry",  # extra words and another case: still an abstention
    "I'm afraid there is no information available about that",
])
def test_an_abstention_with_extra_words_is_an_abstention(reply):
    """"the reader abstains (its normalised answer *contains* the normalised ABSTAIN phrase)" (bench.evaluation.qa). Mutants:
    ``==`` instead of ``in`` (extra words graded WRONG), and the un-normalised reply (another case graded WRONG)."""
    assert abstains(reply)


@pytest.mark.parametrize("reply", ["Rex", "No information", "information available", ""])
def test_a_reply_without_the_whole_phrase_is_no_abstention(reply):
    assert not abstains(reply)


# --------------------------------------------------------------------------------------- (e) stability share boundary

BEST = {"dataset": "demo", "strategy": "hybrid5", "threshold": 0.4, "backend": "seekdb", "embedder": "minilm",
        "threshold_share": 0.6, "n_conversations": 5, "n_questions": 44, "best": True}
KW = {"min_stable_share": 0.6, "alpha": 0.05, "metric": "f1", "min_conversations": 5, "min_untied": 6}
RUNNER_UP = {"a": BEST, "b": {"strategy": "threshold", "threshold": 0.35, "backend": "seekdb", "embedder": "minilm"},
             "n": 44, "n_conversations": 5, "mean_a": 0.33, "mean_b": 0.3, "diff": 0.03, "se": 0.005, "ci_low": 0.016,
             "ci_high": 0.044, "p": 0.004, "p_holm": 0.004, "holm_level": 0.05, "significant": True, "wins": 4, "ties": 38,
             "losses": 2}


def test_a_threshold_chosen_in_exactly_the_stable_share_is_stable():
    """"chosen in *at least* ``min_stable_share`` of the bootstrap resamples" (bench.analysis.verdict). Mutant:
    ``share <= min_stable_share``. The other minimums sit at their boundaries too: exactly 5 conversations
    (``min_conversations`` 5) and exactly 6 questions that differ (4 wins + 2 losses, ``min_untied`` 6)."""
    v = verdict(BEST, RUNNER_UP, **KW)
    assert (v.kind, v.reasons) == ("use", ())
    below = verdict({**BEST, "threshold_share": 0.59}, RUNNER_UP, **KW)
    assert below.kind == "too_little_data"
    assert below.reasons[0] == "0.40 is chosen in only 59% of bootstrap resamples (a stable choice: ≥ 60%)"
    assert verdict(BEST, {**RUNNER_UP, "losses": 1}, **KW).kind == "too_little_data"  # 5 questions differ
    assert verdict({**BEST, "n_conversations": 4}, RUNNER_UP, **KW).kind == "too_little_data"


# --------------------------------------------------------------------------------------- (f) repeated gold id

def test_a_repeated_gold_id_counts_once_in_qrels():
    """qrels: "one line per *distinct* gold memory". Mutant: ``for d in gold`` (a repeated (qid, docid) line, which
    trec_eval reads as one judgement but ir_measures and ranx reject or double)."""
    tr = _trace({"q1": ["c1|t1", "c1|t1", "c1|t3"], "q2": []})
    assert trec.qrels_lines(tr.table, ADV) == ["q1 0 c1|t1 1", "q1 0 c1|t3 1"]


def test_a_repeated_gold_id_counts_once_in_the_ranked_metrics():
    """``gold`` = "the question's *distinct* gold memories". Mutant: ``question_metrics`` without ``dict.fromkeys``
    (n_gold 2 for one memory: recall_all could never be 1, nDCG's ideal would count a second item)."""
    session = {"a": "s1", "b": "s1", "c": "s2"}.__getitem__
    twice = R.question_metrics(ranked=["b", "a", "c"], gold=["a", "a"], ks=(2,), session_of=session)
    once = R.question_metrics(ranked=["b", "a", "c"], gold=["a"], ks=(2,), session_of=session)
    assert twice == once
    # a at rank 2: recall_all@2 1, nDCG@2 = (1 / log2 3) / 1, MRR 1/2; its session s1 ranks first: all 1
    assert twice["turn", "recall_all", 2] == 1.0 and twice["turn", "ndcg", 2] == pytest.approx(1 / math.log2(3), abs=1e-15)
    assert twice["turn", "mrr", None] == 0.5 and twice["session", "ndcg", 2] == 1.0
    rows = R.per_question(_trace({"q1": ["c1|t1", "c1|t1"], "q2": []}), ADV, ks=(1, 2))
    assert rows["turn/recall_all@2"].tolist() == [1.0] and rows["turn/ndcg@2"].tolist() == pytest.approx([1 / math.log2(3)])
