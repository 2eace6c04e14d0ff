"""Ranked metrics (bench.metrics.ranked): hand-worked fixtures, LongMemEval's turn->session rule, and ir_measures to 1e-9."""

import math

import numpy as np
import pandas as pd
import pytest

from bench.metrics import ranked as R
from bench.replay.trace import TRACE_COLUMNS, Trace
from bench.types import Conversation, Corpus, Question, Turn

L3, L4, L6 = math.log2(3), math.log2(4), math.log2(6)

# ranked a..e; gold {b, e, z}: b at rank 2, e at rank 5, z never returned
RANKED, GOLD = ["a", "b", "c", "d", "e"], ["b", "e", "z"]


def test_turn_level_hand_worked():
    assert R.gold_ranks(ranked=RANKED, gold=GOLD) == [2, 5]
    assert R.recall_any(ranked=RANKED, gold=GOLD, k=1) == 0.0
    assert R.recall_any(ranked=RANKED, gold=GOLD, k=2) == 1.0
    assert R.recall_all(ranked=RANKED, gold=GOLD, k=5) == 0.0  # z was never returned
    assert R.recall_all(ranked=RANKED, gold=["b", "e"], k=5) == 1.0 and R.recall_all(ranked=RANKED, gold=["b", "e"], k=4) == 0.0
    # nDCG@3: DCG = 1/log2(3) (b at 2); ideal = 3 gold at ranks 1..3 = 1 + 1/log2(3) + 1/log2(4) -> 0.296082
    assert R.ndcg(ranked=RANKED, gold=GOLD, k=3) == pytest.approx((1 / L3) / (1 + 1 / L3 + 1 / L4), abs=1e-15)
    assert R.ndcg(ranked=RANKED, gold=GOLD, k=3) == pytest.approx(0.2960819, abs=1e-7)
    # nDCG@5: DCG = 1/log2(3) + 1/log2(6); ideal still min(3, 5) = 3 items -> 0.477623
    assert R.ndcg(ranked=RANKED, gold=GOLD, k=5) == pytest.approx((1 / L3 + 1 / L6) / (1 + 1 / L3 + 1 / L4), abs=1e-15)
    assert R.ndcg(ranked=RANKED, gold=["a"], k=1) == 1.0 and R.ndcg(ranked=RANKED, gold=["q"], k=10) == 0.0
    assert R.reciprocal_rank(ranked=RANKED, gold=GOLD) == 0.5
    assert R.reciprocal_rank(ranked=RANKED, gold=["z"]) == 0.0


def test_no_gold_is_nan_never_zero():
    for f in (R.recall_any, R.recall_all, R.ndcg):
        assert math.isnan(f(ranked=RANKED, gold=[], k=3))
    assert math.isnan(R.reciprocal_rank(ranked=RANKED, gold=[]))
    assert all(math.isnan(v) for v in R.from_ranks(ranks=[], n_gold=0, ks=(1, 5)).values())


# The per-question definitions written plainly, one metric at a time: the oracle of ``from_ranks`` (the package's
# one implementation, which ``R.recall_any`` & co. are views of).
def _ranks(ranked, gold):
    seen, out = set(), []
    for i, x in enumerate(ranked, 1):
        if x in gold and x not in seen:
            out.append(i)
            seen.add(x)
    return out


def oracle(ranked, gold, k):
    g = set(gold)
    ranks = _ranks(ranked, g)
    dcg = sum(1.0 / math.log2(r + 1) for r in ranks if r <= k)
    ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(len(g), k) + 1))
    return {"recall_any": float(any(r <= k for r in ranks)), "recall_all": float(sum(r <= k for r in ranks) == len(g)),
            "ndcg": dcg / ideal, "mrr": 1.0 / ranks[0] if ranks else 0.0}


def test_from_ranks_equals_the_oracle():
    cases = [(RANKED, GOLD), (RANKED, ["b", "e"]), (RANKED, ["a"]), (RANKED, ["q"]), (["a", "a", "b"], ["a", "b"]), ([], ["a"])]
    for ranked, gold in cases:
        got = R.from_ranks(ranks=R.gold_ranks(ranked=ranked, gold=gold), n_gold=len(set(gold)), ks=(1, 2, 3, 5, 10))
        for k in (1, 2, 3, 5, 10):
            want = oracle(ranked, gold, k)
            for m in ("recall_any", "recall_all", "ndcg"):
                assert got[m, k] == want[m], (ranked, gold, m, k)
                assert getattr(R, m)(ranked=ranked, gold=gold, k=k) == want[m]
        assert got["mrr", None] == want["mrr"] == R.reciprocal_rank(ranked=ranked, gold=gold)
    assert R.from_ranks(ranks=R.gold_ranks(ranked=RANKED, gold=GOLD), n_gold=3, ks=(1,))["mrr", None] == 0.5


# turns a, b in session 1; c, e in session 2; d in session 3. Gold turns {c, d} -> gold sessions {s2, s3}
SESSION = {"a": "s1", "b": "s1", "c": "s2", "d": "s3", "e": "s2"}


def test_session_level_deduplicates_in_rank_order():
    assert R.session_ranking(ranked=RANKED, session_of=SESSION.__getitem__) == ["s1", "s2", "s3"]
    got = R.question_metrics(ranked=RANKED, gold=["c", "d"], ks=(1, 2, 3), session_of=SESSION.__getitem__)
    # LongMemEval turn2session at k=2: the effective depth grows to 3 turns (a, b, c) = sessions {s1, s2}:
    # any gold session -> 1, all -> 0; at k=3: (a..d) = {s1, s2, s3} -> all -> 1
    assert (got["session", "recall_any", 1], got["session", "recall_any", 2], got["session", "recall_all", 2]) == (0.0, 1.0, 0.0)
    assert got["session", "recall_all", 3] == 1.0
    # session nDCG@3: gold sessions at ranks 2, 3; ideal 2 items -> (1/log2 3 + 1/log2 4) / (1 + 1/log2 3) = 0.693426
    assert got["session", "ndcg", 3] == pytest.approx((1 / L3 + 1 / L4) / (1 + 1 / L3), abs=1e-15)
    assert got["session", "mrr", None] == 0.5
    # turn level of the same question: c at rank 3, d at rank 4
    assert got["turn", "mrr", None] == pytest.approx(1 / 3) and got["turn", "recall_all", 3] == 0.0


def _fixture(seed=7, n_queries=8):
    """Queries with distinct scores (no ties): (run {qid: {doc: score}}, qrels {qid: {doc: 1}}, sessions {doc: session})."""
    rng = np.random.default_rng(seed)
    run, qrels, sessions = {}, {}, {}
    for q in range(n_queries):
        n = int(rng.integers(6, 16))
        docs = [f"q{q}d{i}" for i in range(n + 3)]  # the last 3 are never retrieved
        for i, d in enumerate(docs):
            sessions[d] = f"q{q}s{i % 4}"
        scores = rng.permutation(n) / n + 0.01  # distinct
        run[f"q{q}"] = {d: float(s) for d, s in zip(docs[:n], scores)}
        gold = rng.choice(len(docs), size=int(rng.integers(1, 5)), replace=False)
        qrels[f"q{q}"] = {docs[i]: 1 for i in gold}
    return run, qrels, sessions


def _ours(run, qrels, ks, session_of):
    out = {}
    for q, scores in run.items():
        ranked = sorted(scores, key=lambda d: -scores[d])
        out[q] = R.question_metrics(ranked=ranked, gold=list(qrels[q]), ks=ks, session_of=session_of)
    return out


def test_agrees_with_ir_measures_to_1e9_turn_and_session_level():
    ir = pytest.importorskip("ir_measures")
    from ir_measures import RR, Success, nDCG
    from ir_measures import R as Rk

    ks = (1, 3, 5, 10)
    run, qrels, sessions = _fixture()
    ours = _ours(run, qrels, ks, sessions.__getitem__)
    # session level for ir_measures: a session's score = its best turn's score; qrels = the gold turns' sessions
    srun = {q: {} for q in run}
    for q, scores in run.items():
        for d, s in scores.items():
            srun[q][sessions[d]] = max(s, srun[q].get(sessions[d], -1.0))
    sqrels = {q: {sessions[d]: 1 for d in g} for q, g in qrels.items()}
    assert all(len(set(v.values())) == len(v) for v in srun.values())  # no ties at session level either
    measures = [nDCG @ k for k in ks] + [Rk @ k for k in ks] + [Success @ k for k in ks] + [RR]
    checked = 0
    for level, (qr, rn) in {"turn": (qrels, run), "session": (sqrels, srun)}.items():
        for m in ir.iter_calc(measures, qr, rn):
            mine = ours[m.query_id]
            name, k = str(m.measure).split("@") if "@" in str(m.measure) else (str(m.measure), None)
            if name == "nDCG":
                assert mine[level, "ndcg", int(k)] == pytest.approx(m.value, abs=1e-9, rel=0)
            elif name == "Success":
                assert mine[level, "recall_any", int(k)] == pytest.approx(m.value, abs=1e-9, rel=0)
            elif name == "R":  # recall_all@k = 1 exactly when R@k (share of gold in the top k) is 1
                assert mine[level, "recall_all", int(k)] == float(abs(m.value - 1.0) < 1e-12)
            else:
                assert mine[level, "mrr", None] == pytest.approx(m.value, abs=1e-9, rel=0)
            checked += 1
    assert checked == 2 * len(run) * len(measures)
    # the mean over queries too (what the table reports)
    agg = ir.calc_aggregate([nDCG @ 5, RR], qrels, run)
    assert np.mean([ours[q]["turn", "ndcg", 5] for q in run]) == pytest.approx(agg[nDCG @ 5], abs=1e-9, rel=0)
    assert np.mean([ours[q]["turn", "mrr", None] for q in run]) == pytest.approx(agg[RR], abs=1e-9, rel=0)


def _turn(conv, i, session):
    return Turn(conv, f"t{i}", "user", "u", f"x{i}", float(i), i, session)


CORPUS = Corpus(
    name="tiny",
    conversations=(Conversation("c1", tuple(_turn("c1", i, i // 2) for i in range(4))),
                   Conversation("c2", tuple(_turn("c2", i, 0) for i in range(2)))),
    questions=(Question("q1", "c1", "?", None, ("t1",)),
               Question("q2", "c1", "?", None, ("t0", "t3")),
               Question("q3", "c2", "?", None, ("t1",)),
               Question("q4", "c2", "?", None, (), adversarial=True),  # adversarial: not in the table
               Question("q5", "c2", "?", None, ())),  # no gold: not scored
)


def _trace():
    hits = {"q1": ["c1|t1", "c1|t0", "c1|t2", "c1|t3"], "q2": ["c1|t2", "c1|t0", "c1|t1", "c1|t3"], "q3": ["c2|t0", "c2|t1"],
            "q4": ["c2|t1", "c2|t0"], "q5": ["c2|t0", "c2|t1"]}
    gold = {"q1": ["c1|t1"], "q2": ["c1|t0", "c1|t3"], "q3": ["c2|t1"], "q4": [], "q5": []}
    rows = [{"question_id": q.question_id, "conversation_id": q.conversation_id, "latency_ns": 1.0, "hit_ids": hits[q.question_id],
             "hit_scores": [0.9 - 0.1 * i for i in range(len(hits[q.question_id]))], "exact_scores": [],
             "gold_ids": gold[q.question_id], "gold_exact_ranks": []} for q in CORPUS.questions]
    return Trace(pd.DataFrame(rows, columns=TRACE_COLUMNS), {"dataset": "tiny", "embedder": "e", "backend": "exact", "roles": None})


def test_per_question_and_table_from_a_trace():
    rows = R.per_question(_trace(), CORPUS, ks=(1, 2))
    assert rows["question_id"].tolist() == ["q1", "q2", "q3"]  # adversarial and gold-less questions are not scored
    # q1: gold t1 at rank 1 -> 1; q2: gold t0 (rank 2), t3 (rank 4) -> RR 1/2; q3: t1 at rank 2 -> 1/2
    assert rows["turn/mrr"].tolist() == [1.0, 0.5, 0.5]
    # sessions of c1: t0,t1 -> session0; t2,t3 -> session1. q2 ranks session1 (t2), session0 (t0): gold both -> all@2 = 1
    # c2 holds one session: q3 has no session level (NaN), whatever was returned
    assert rows["session/recall_all@2"].tolist()[:2] == [1.0, 1.0] and math.isnan(rows["session/recall_all@2"].iloc[2])
    assert rows["session/recall_any@1"].tolist()[:2] == [1.0, 1.0] and rows["turn/recall_any@1"].tolist() == [1.0, 0.0, 0.0]
    t = R.table(rows, ks=(1, 2), n_resamples=200)
    assert list(t.columns) == R.TABLE_COLUMNS
    mrr = t[(t["level"] == "turn") & (t["metric"] == "mrr")].iloc[0]
    assert mrr["mean"] == pytest.approx(2 / 3) and mrr["n_questions"] == 3 and pd.isna(mrr["k"])
    # 2 conversations: c1 RR 1 + .5 over 2, c2 .5 over 1; residuals 1.5 - 4/3 = +1/6, .5 - 2/3 = -1/6;
    # se = sqrt(2/1 * 2/36) / 3 = 1/9; t with 1 df: 2/3 -+ 12.71/9, clipped to [0, 1] (prediction interval: wider, clipped too).
    # A percentile bootstrap prints the min-max of the two conversations (c2c2 .5, c1c1 .75) as a "95 % CI".
    assert (mrr["ci_low"], mrr["ci_high"], mrr["pred_low"], mrr["pred_high"]) == (0.0, 1.0, 0.0, 1.0)
    boot = R.table(rows, ks=(1, 2), n_resamples=2000, method="percentile")
    assert boot.loc[(boot["level"] == "turn") & (boot["metric"] == "mrr"), ["ci_low", "ci_high"]].iloc[0].tolist() == pytest.approx([0.5, 0.75])
    assert len(t) == 2 * (3 * 2 + 1)  # levels x (3 metrics x 2 cut-offs + mrr)
    lines = R.report_table(t)
    assert lines[0].startswith("| dataset") and any("| turn | mrr |" in ln and "0.667" in ln for ln in lines)


def test_a_corpus_without_sessions_gets_no_session_metrics(tmp_path):
    """An own-format corpus without ``session`` fields (every turn in session 0): every question's session-level
    ranking would find "the" session (1.000 [1.000, 1.000] on 7255a18); now NaN, n 0, and the report says why."""
    import json

    from bench.data.own import load_own

    turns = [{"conversation_id": c, "turn_id": f"t{i}", "role": "user", "text": f"turn {i}"} for c in ("c1", "c2") for i in range(3)]
    questions = [{"question_id": f"q{c}", "conversation_id": c, "text": "?", "evidence": ["t2"]} for c in ("c1", "c2")]
    (tmp_path / "turns.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    corpus = load_own(path=tmp_path)
    rows = [{"question_id": q, "conversation_id": c, "latency_ns": 1.0, "hit_ids": [f"{c}|t0", f"{c}|t1"], "hit_scores": [0.9, 0.8],
             "exact_scores": [], "gold_ids": [f"{c}|t2"], "gold_exact_ranks": []} for q, c in (("qc1", "c1"), ("qc2", "c2"))]
    trace = Trace(pd.DataFrame(rows, columns=TRACE_COLUMNS), {"dataset": "own", "embedder": "e", "backend": "exact", "roles": None})
    t = R.for_traces([trace], corpus, ks=(1, 5), n_resamples=50)
    turn, session = t[t["level"] == "turn"], t[t["level"] == "session"]
    assert (turn["n_questions"] == 2).all() and turn[turn["metric"] == "recall_any"]["mean"].tolist() == [0.0, 0.0]  # gold t2 not returned
    assert (session["n_questions"] == 0).all() and session[["mean", "ci_low", "ci_high"]].isna().all().all()
    lines = R.report_table(t)
    assert [ln for ln in lines if "| session |" in ln] == [f"| own | e | exact | all | session | {R.NO_SESSIONS} |  |  |  |"]
    assert not any("1.000" in ln for ln in lines)


def test_check_ks():
    assert R.check_ks([10, 1, 5, 5]) == (1, 5, 10)
    for bad in ([0], [1.5], [], [True]):
        with pytest.raises(ValueError, match="ranked.ks"):
            R.check_ks(bad)


def test_a_multirun_merges_each_jobs_ranked_csv_with_the_jobs_labels(tmp_path):
    from tests.results.test_rundir import write_tiny_job

    from bench.results.rundir import RunDir, collect_jobs

    sweep = tmp_path / "sweep"
    for job, ef in (("job0", 1), ("job1", 2)):
        write_tiny_job(sweep / job, overrides=["-m", f"backend.ef={ef}"])
        t = R.table(R.per_question(_trace(), CORPUS, ks=(1,)), ks=(1,), n_resamples=50)
        RunDir(sweep / job).write_ranked(t.assign(mean=t["mean"] + ef))
    assert collect_jobs(sweep) is True
    merged = RunDir(sweep).ranked()
    assert list(merged.columns) == R.TABLE_COLUMNS and len(merged) == 2 * 2 * 4
    assert merged["backend"].unique().tolist() == ["exact (backend.ef=1)", "exact (backend.ef=2)"]  # the summary's labels
    mrr = merged[(merged["level"] == "turn") & (merged["metric"] == "mrr")]
    assert mrr["k"].isna().all() and mrr["mean"].tolist() == pytest.approx([2 / 3 + 1, 2 / 3 + 2])


def _lme_turn2session(ranked, gold_turns, session_of, k):
    """LongMemEval's rule written out: grow the depth until the top turns hold k distinct sessions (or the list
    ends), then any / all of the gold sessions among those turns' sessions."""
    depth = k
    while depth <= len(ranked) and len({session_of(x) for x in ranked[:depth]}) < k:
        depth += 1
    got = {session_of(x) for x in ranked[:depth]}
    gold = {session_of(x) for x in gold_turns}
    return float(any(g in got for g in gold)), float(all(g in got for g in gold))


def test_session_recall_equals_longmemevals_effective_depth_rule():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        turns = [f"t{i}" for i in range(n)]
        session = {t: f"s{int(rng.integers(0, max(1, n // 3)))}" for t in turns}
        ranked = list(rng.permutation(turns))
        gold = list(rng.choice(turns, size=int(rng.integers(1, min(n, 4) + 1)), replace=False))
        ks = (1, 2, 3, 5, 10)
        got = R.question_metrics(ranked=ranked, gold=gold, ks=ks, session_of=session.__getitem__)
        for k in ks:
            assert (got["session", "recall_any", k], got["session", "recall_all", k]) == _lme_turn2session(ranked, gold, session.__getitem__, k)
