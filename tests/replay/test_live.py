"""Live replay (bench.replay.live) on a hand-made corpus: timeline order, batches, the asked_at rule, read-after-write
misses against a loopback double whose rows become searchable late, the trace contract, the tables, the pipeline."""

import json

import numpy as np
import pandas as pd
import pytest

from bench import pipeline
from bench import run as rid
from bench.analysis.live import bucket_of, live_tables
from bench.backends.exact import ExactBackend
from bench.data.units import UnitSpec
from bench.embedders.hashing import HashingEmbedder
from bench.replay.live import build_live_trace, timeline, write_batches
from bench.replay.trace import TRACE_COLUMNS, Trace
from bench.types import Conversation, Corpus, Question, Turn


def t(conv, i, session, ts):
    return Turn(conv, f"{conv}{i}", "user" if i % 2 == 0 else "assistant", "x", f"{conv}{i}", ts, i, session)


# a: sessions 0 (ts 1), 1 (ts 3), 2 (ts 5); b: sessions 0 (ts 2), 1 (ts 4). Conversations interleave by time.
CORPUS = Corpus("tiny", (
    Conversation("a", (t("a", 0, 0, 1.0), t("a", 1, 0, 1.0), t("a", 2, 1, 3.0), t("a", 3, 1, 3.0), t("a", 4, 2, 5.0))),
    Conversation("b", (t("b", 0, 0, 2.0), t("b", 1, 0, 2.0), t("b", 2, 1, 4.0)))),
    (Question("qa1", "a", "qa1", None, ("a1",)),  # no asked_at: after a's session 0 (latest gold a1), clock 1
     Question("qa3", "a", "qa3", 1.0, ("a2",)),  # asked at 1: after a0, a1; its gold a2 is said later (not visible)
     Question("qa2", "a", "qa2", 4.0, ("a2",)),  # asked at 4: after a0..a3, before b2 (same clock, a comes first)
     Question("qb1", "b", "qb1", None, ("b0", "b2")),  # no asked_at: latest gold b2, session 1 = end of b
     Question("qb2", "b", "qb2", None, (), adversarial=True)))  # no gold: after the whole of b
# the order worked out by hand (module doc of bench.replay.live): writes by clock, a question after the writes before it
ORDER = ["a0", "a1", "qa1", "qa3", "b0", "b1", "a2", "a3", "qa2", "b2", "qb1", "qb2", "a4"]

# 2-d unit vectors: each question points at one turn (qa1 = a1, qa2 = a2, qb1 = b2), so that turn is its exact rank 1
ANGLE = {"a0": 0, "a1": 40, "a2": 80, "a3": 120, "a4": 160, "b0": 200, "b1": 240, "b2": 280,
         "qa1": 40, "qa3": 80, "qa2": 80, "qb1": 280, "qb2": 0}


def vec(name):
    r = np.deg2rad(ANGLE[name])
    return np.array([np.cos(r), np.sin(r)], dtype=np.float32)


VECTORS = (np.stack([vec(x.text) for x in CORPUS.turns()]), np.stack([vec(q.text) for q in CORPUS.questions]))


class Dims:
    model_id, dim = "hand-2d", 2


class Late(ExactBackend):
    """Loopback double: the exact store whose rows become searchable only after ``lag`` later store calls (add or
    search): a row added at call c is seen by a search at call c' when c' - c > lag. Records every call in order."""

    def __init__(self, lag=0):
        super().__init__()
        self.lag, self.calls, self.pending, self.log = lag, 0, [], []

    def drop(self):  # keep the call log for the test (the exact store's drop re-runs __init__)
        ExactBackend.__init__(self, self.collection)

    def add(self, batch):
        self.calls += 1
        self.log.append(("w", [i.split("|")[1] for i in batch.ids]))
        self.pending.append((self.calls, batch))

    def search(self, vector, *, k, where):
        self.calls += 1
        self.log.append(("q", where.conversation_id))
        due = [b for c, b in self.pending if self.calls - c > self.lag]
        self.pending = [(c, b) for c, b in self.pending if self.calls - c <= self.lag]
        for b in due:
            super().add(b)
        return super().search(vector, k=k, where=where)

    def wait_ready(self, timeout_s=300.0):
        raise AssertionError("live replay must not wait for the store")


def live(store, batch=1, depth=10):
    return build_live_trace(CORPUS, Dims(), store, depth=depth, batch=batch, vectors=VECTORS)


def test_timeline_order_worked_by_hand():
    turns, qs = CORPUS.turns(), CORPUS.questions
    got = [turns[e.index].turn_id if e.kind == "w" else qs[e.index].question_id for e in timeline(CORPUS)]
    assert got == ORDER
    rules = {qs[e.index].question_id: e.rule for e in timeline(CORPUS) if e.kind == "q"}
    assert rules == {"qa1": "after gold session", "qa3": "asked_at", "qa2": "asked_at", "qb1": "after gold session",
                     "qb2": "after conversation"}


def test_sessions_listed_out_of_date_order_are_written_at_their_date():
    # c lists session 1 (ts 5) before session 0 (ts 1), as 210 of LongMemEval_S's haystacks do; asked at 3, the
    # question sees c2, c3 (ts 1) and its gold c3 is written before it. d has a turn without a timestamp: position order
    # (d0 before d1, though d1 is dated earlier), clocks made non-decreasing (d1's 1.0 and d2's none become 2.0).
    corpus = Corpus("dates", (Conversation("c", (t("c", 0, 1, 5.0), t("c", 1, 1, 5.0), t("c", 2, 0, 1.0), t("c", 3, 0, 1.0))),
                              Conversation("d", (t("d", 0, 1, 2.0), t("d", 1, 0, 1.0), t("d", 2, 0, None)))),
                    (Question("cq", "c", "cq", 3.0, ("c3",)), Question("dq", "d", "dq", 3.0, ("d1",))))
    turns, qs = corpus.turns(), corpus.questions
    got = [turns[e.index].turn_id if e.kind == "w" else qs[e.index].question_id for e in timeline(corpus)]
    assert got == ["c2", "c3", "d0", "d1", "d2", "cq", "dq", "c0", "c1"]


def test_the_store_sees_writes_in_timeline_order_one_per_turn():
    store = Late(lag=0)
    live(store)
    writes = [w[0] for kind, w in store.log if kind == "w"]
    assert writes == [x for x in ORDER if not x.startswith("q")]  # batch 1: one add per turn, in timeline order
    assert [kind for kind, _ in store.log] == ["q" if x.startswith("q") else "w" for x in ORDER]


def test_batches_hold_one_session_and_end_at_a_question():
    store = Late(lag=0)
    _, record = live(store, batch=2)
    assert [w for kind, w in store.log if kind == "w"] == [["a0", "a1"], ["b0", "b1"], ["a2", "a3"], ["b2"], ["a4"]]
    assert record.writes["rows"].tolist() == [2, 2, 2, 1, 1]
    steps = write_batches(timeline(CORPUS), CORPUS.turns(), 3)  # 3 per write: a session still ends a write
    assert [len(w) for kind, w in steps if kind == "w"] == [2, 2, 2, 1, 1]
    with pytest.raises(ValueError, match="live.batch"):
        write_batches(timeline(CORPUS), CORPUS.turns(), 0)


def test_read_after_write_misses_counted_by_hand():
    # lag 1, calls: 1 a0, 2 a1, 3 qa1 (a1 from call 2: 3-2 = 1, not searchable yet -> miss), 4 qa3 (gold a2 not said yet:
    # no miss), 5 b0, 6 b1, 7 a2, 8 a3, 9 qa2 (a2 from call 7: searchable), 10 b2, 11 qb1 (b0 found, b2 from call 10 -> miss),
    # 12 qb2 (no gold), 13 a4.
    trace, record = live(Late(lag=1))
    q = record.questions.set_index("question_id")
    assert q["raw_misses"].to_dict() == {"qa1": 1, "qa3": 0, "qa2": 0, "qb1": 1, "qb2": 0}
    assert list(q.loc["qa1", "raw_miss_ids"]) == ["a|a1"] and list(q.loc["qb1", "raw_miss_ids"]) == ["b|b2"]
    assert q["gold_written"].to_dict() == {"qa1": 1, "qa3": 0, "qa2": 1, "qb1": 2, "qb2": 0}
    assert q["user_memories"].to_dict() == {"qa1": 2, "qa3": 2, "qa2": 4, "qb1": 3, "qb2": 3}
    assert q["written_total"].to_dict() == {"qa1": 2, "qa3": 2, "qa2": 6, "qb1": 7, "qb2": 7}
    assert trace.meta["read_after_write_misses"] == 2 and trace.meta["questions_with_raw_miss"] == 2
    rows = trace.table.set_index("question_id")
    assert list(rows.loc["qa1", "hit_ids"]) == ["a|a0"]  # a1 written but not yet searchable
    assert list(rows.loc["qa1", "gold_exact_ranks"]) == [1]  # ... although the exact scan of what was written ranks it first
    assert list(rows.loc["qa3", "gold_exact_ranks"]) == [0]  # gold said after the question: not visible, not a miss
    _, none = live(Late(lag=0))  # searchable at the next call: nothing missed
    assert none.questions["raw_misses"].sum() == 0


def test_a_gold_ranked_beyond_the_depth_is_not_a_read_after_write_miss():
    # depth 1, lag 1: qb1 (= b2) at call 11 sees b0, b1; gold b0 ranks 3rd among b0..b2 by the exact scan (b2 first):
    # beyond depth 1, so only b2 counts
    _, record = live(Late(lag=1), depth=1)
    q = record.questions.set_index("question_id")
    assert list(q.loc["qb1", "raw_miss_ids"]) == ["b|b2"]


def test_exact_pass_over_the_rows_in_the_store_worked_by_hand():
    # the exact scan live replay takes (bench.replay.trace.exact_pass, visible_rows: the rows of the question's
    # conversation written before it). Cosines (ANGLE): qa1 (40) vs a0..a4 = .766 1 .766 .174 -.5; qb1 (280) vs b0..b2 =
    # .174 .766 1. qa1 with a0, a2, a3 written: its gold a1 is not there (rank 0), eligible 3, top-2 a0, a2 = its hits
    # (fidelity 1); qa3 (asked at 1) sees a0, a1 of a0..a2: gold a2 said later, rank 0, eligible 2; qa2 (asked at 4) with
    # a0..a3: a2 first; qb1 with b0, b1: b0 second, b2 not there; qb2 all of b, no gold. Eligible 3 2 4 2 3: median 3,
    # 3 beyond depth 2; the four without hits are short lists; fidelity@2 (1 + 0 * 4) / 5.
    from bench.replay.trace import exact_pass

    tv, qv = VECTORS
    visible = [np.array([0, 2, 3]), np.array([0, 1, 2]), np.array([0, 1, 2, 3]), np.array([0, 1]), np.array([0, 1, 2])]
    hits = [["a|a0", "a|a2"], [], [], [], []]
    scores = [[0.766, 0.766], [], [], [], []]
    exact, gold, ranks, m = exact_pass(CORPUS, tv, qv, hits, scores, roles=None, k=2, depth=2, visible_rows=visible)
    assert gold == [["a|a1"], ["a|a2"], ["a|a2"], ["b|b0", "b|b2"], []]
    assert ranks == [[0], [0], [1], [2, 0], []]
    assert np.allclose(exact[0], [np.cos(np.deg2rad(40))] * 2)
    assert (m["eligible_median"], m["n_truncated"], m["short_results"], m["fidelity_at_2"]) == (3.0, 3, 4, 0.2)
    everything = exact_pass(CORPUS, tv, qv, hits, scores, roles=None, k=2, depth=2)[2]
    assert everything == [[1], [0], [1], [3, 1], []]  # every row there: the batch scan


def test_live_trace_is_a_normal_trace(tmp_path):
    trace, record = live(ExactBackend())
    assert list(trace.table.columns) == TRACE_COLUMNS
    assert trace.meta["replay"] == "live" and trace.meta["asked_by_rule"]["after gold session"] == 2
    trace.save(tmp_path)
    assert Trace.load_checked(tmp_path, CORPUS)[0] is not None
    assert record.questions["raw_misses"].sum() == 0  # the exact store sees every write at once


def test_tables_live_versus_batch_and_growth():
    trace, record = live(Late(lag=1))
    batch = Trace(pd.DataFrame({"question_id": [q.question_id for q in CORPUS.questions],
                            "hit_ids": [["a|a1"], ["a|a0"], ["a|a0"], ["b|b2", "b|b0"], []]}), {})
    tables = live_tables(trace, record, batch, CORPUS, ks=(1,))
    r = tables["recall"].set_index("metric")
    # scored: qa1, qa3, qa2, qb1 (qb2 adversarial). recall_any@1 batch: qa1 1, qa3 0, qa2 0, qb1 1 -> 0.5;
    # live (lag 1): qa1 [a0] -> 0, qa3 0, qa2 top a2 -> 1, qb1 top b1 (b2 not searchable yet) -> 0 -> 0.25;
    # live_exact (the exact scan of what was written): qa1 a1 -> 1, qa3 0, qa2 1, qb1 b2 -> 1 -> 0.75
    assert (r.loc["recall_any", "batch"], r.loc["recall_any", "live"], r.loc["recall_any", "live_exact"]) == (0.5, 0.25, 0.75)
    assert tables["summary"]["raw_misses"].item() == 2 and tables["summary"]["gold_written"].item() == 4
    assert tables["growth"]["questions"].sum() == 5 and bucket_of(49) == (0, 50) and bucket_of(50) == (50, 100)
    assert tables["writes"]["writes"].item() == 8


def test_tables_name_the_indexed_roles_and_the_role_filter_apart():
    # the trace's roles are its questions' search filter; the memories counted (user_memories, growth buckets) are every
    # memory the store holds: the run's memory.roles. A user-filtered trace on an all-roles store is not "user" memories.
    trace, record = build_live_trace(CORPUS, Dims(), ExactBackend(), depth=10, roles=("user",), vectors=VECTORS)
    batch = Trace(pd.DataFrame({"question_id": [q.question_id for q in CORPUS.questions], "hit_ids": [[]] * 5}), {})
    for memory, indexed in ((None, "all"), ({"unit": "turn", "roles": "all"}, "all"), ({"unit": "turn", "roles": "user"}, "user")):
        tables = live_tables(trace, record, batch, CORPUS, ks=(1,), memory=memory)
        for name, table in tables.items():
            assert "roles" not in table.columns, name
            assert set(table["indexed_roles"]) == {indexed} and set(table["role_filter"]) == {"user"}, name
    unfiltered, record = live(ExactBackend())
    growth = live_tables(unfiltered, record, batch, CORPUS, ks=(1,))["growth"]
    assert set(growth["role_filter"]) == {"none"}
    # qa2 is asked with a0..a3 written, user and assistant turns alike: 4 memories although its search sees a0, a2 only
    assert record.questions.set_index("question_id")["user_memories"]["qa2"] == 4


def test_growth_figure_is_drawn(tmp_path):
    from bench.report.live import growth_figure

    trace, record = live(Late(lag=1))
    batch = Trace(pd.DataFrame({"question_id": [q.question_id for q in CORPUS.questions], "hit_ids": [[]] * 5}), {})
    growth = live_tables(trace, record, batch, CORPUS, ks=(1, 3))["growth"]
    assert growth_figure(growth, tmp_path / "growth.png").stat().st_size > 1000
    assert growth_figure(growth.iloc[:0], tmp_path / "none.png") is None


def test_report_section_shows_the_live_summary_of_every_job(tmp_path):
    # a multirun's jobs each keep their live/ (the merge does not combine them): one row per job. job0 lag 1 (the
    # misses and recall of test_tables_live_versus_batch_and_growth: 2 of 4 gold written; recall_any@1 .5 / .25 / .75),
    # job1 lag 0 (nothing missed: live = live exact = .75). A single run has no job column.
    from bench.analysis import live as tables
    from bench.report.live import TITLE, section
    from bench.results.rundir import RunDir

    batch = Trace(pd.DataFrame({"question_id": [q.question_id for q in CORPUS.questions],
                                "hit_ids": [["a|a1"], ["a|a0"], ["a|a0"], ["b|b2", "b|b0"], []]}), {})
    for job, lag in (("job0", 1), ("job1", 0)):
        (tmp_path / "multi" / job).mkdir(parents=True)
        (tmp_path / "multi" / job / "summary.csv").write_text("dataset\n")  # a finished job
        trace, record = live(Late(lag=lag))
        tables.write(tmp_path / "multi" / job / "live", live_tables(trace, record, batch, CORPUS, ks=(1,)))
    lines = section(RunDir(tmp_path / "multi"))
    assert lines[0] == TITLE
    rows = [ln for ln in lines if ln.startswith("| `job")]
    assert len(rows) == 2
    assert rows[0].startswith("| `job0` | `exact` | all | none | 1 |")
    assert "| 4 | 2 (0.500) | @1: 0.500 / 0.250 / 0.750 | n/a |" in rows[0]
    assert "| 4 | 0 (0.000) | @1: 0.500 / 0.750 / 0.750 | n/a |" in rows[1]
    single = tmp_path / "multi" / "job1"
    (single / "meta.json").write_text("{}")
    (single / "live" / "growth.png").write_bytes(b"png")
    rows = [ln for ln in section(RunDir(single)) if ln.startswith("| `exact`")]
    assert len(rows) == 1 and rows[0].endswith("| [growth.png](live/growth.png) |")
    assert section(RunDir(tmp_path / "none")) == []


def test_pipeline_live_job_writes_the_live_tables(tmp_path, monkeypatch):
    import bench.report.live

    drawn = []  # the figure is drawn by test_growth_figure_is_drawn (matplotlib costs seconds to import)
    monkeypatch.setattr(bench.report.live, "growth_figure", lambda table, path: drawn.append((len(table), path.name)))
    data = tmp_path / "data"
    data.mkdir()
    turns = [("t1", 0, "2025-01-01T10:00:00", "I adopted a grey cat named Miso."), ("t2", 0, "2025-01-01T10:01:00", "Lovely."),
             ("t3", 1, "2025-01-05T09:00:00", "I work night shifts as a nurse."), ("t4", 1, "2025-01-05T09:01:00", "Long nights.")]
    (data / "turns.jsonl").write_text("".join(json.dumps({"conversation_id": "c1", "turn_id": i, "role": "user", "text": x,
                                                          "timestamp": ts, "session": s}) + "\n" for i, s, ts, x in turns))
    (data / "questions.jsonl").write_text(json.dumps({"question_id": "q1", "conversation_id": "c1", "text": "my cat?", "evidence": ["t1"]}) + "\n")
    inputs = pipeline.Inputs(corpus={"_target_": "bench.data.own.load_own", "path": str(data), "name": "tiny"},
                             embedder=HashingEmbedder(dim=64), store={"_target_": "bench.backends.exact.ExactBackend"},
                             strategies=({"name": "limit1", "fn": {"_target_": "bench.strategies.vector.limit", "_partial_": True, "k": 1}},))
    config = {"backend": "exact", "replay": "live", "live": {"batch": 1}}
    settings = pipeline.Settings(cache=tmp_path / "cache", config=config, thresholds=(0.5, 0.5, 0.05), warmup=0, memory=UnitSpec(),
                                 replay="live", live={"batch": 1})
    out = pipeline.run(inputs, settings, tmp_path / "run").path
    for name in ("writes", "read_after_write", "summary", "recall", "growth"):
        assert (out / "live" / f"{name}.csv").is_file(), name
    assert drawn == [(4, "growth.png")]  # one bucket x ks 1, 3, 5, 10
    q = pd.read_csv(out / "live" / "read_after_write.csv")
    assert q["user_memories"].tolist() == [2] and q["rule"].tolist() == ["after gold session"]  # asked after session 0
    assert json.loads((out / "trace" / "trace_meta.json").read_text())["replay"] == "live"
    # live and batch never share a cache entry: the live settings are in the job's and the trace's keys
    assert pipeline.job_settings({"replay": "batch", "live": {"batch": 1}}) == {"replay": "batch"}
    key = dict(corpus_sha="x", embedder={}, backend={}, depth=1, roles=None, warmup=0)
    assert rid.trace_key(**key).digest != rid.trace_key(**key, replay={"mode": "live", "batch": 1}).digest
    assert rid.trace_key(**key, replay={"mode": "live", "batch": 1}).digest != \
        rid.trace_key(**key, replay={"mode": "live", "batch": 1, "pace_ms": 50.0}).digest
    with pytest.raises(ValueError, match="live.batch"):
        pipeline.live_batch({"batch": 0})
    with pytest.raises(ValueError, match="live.pace_ms"):
        pipeline.live_pace({"pace_ms": -1})
    assert pipeline.live_pace({}) == 0.0 and pipeline.live_pace({"pace_ms": 50}) == 50.0


def test_live_and_batch_write_the_same_memories_with_their_metadata():
    # datasets/demo_meta: 12 turns with metadata fields; both replays build their writes with trace.memory_batch, so the
    # store gets every turn with its fields (c1|t4 and c2|t5 as in tests/data/test_own.py) in live replay as in batch
    from pathlib import Path

    from bench.data.own import load_own
    from bench.replay.trace import build_trace

    corpus = load_own(path=Path(__file__).resolve().parents[2] / "datasets" / "demo_meta")
    seen = {"batch": {}, "live": {}}

    class Recording(ExactBackend):
        def add(self, batch):
            self.into.update({i: dict(m) for i, m in zip(batch.ids, batch.metadata or [()] * len(batch.ids))})
            super().add(batch)

    embedder = HashingEmbedder(dim=64)
    for mode in ("batch", "live"):
        store = Recording()
        store.into = seen[mode]
        if mode == "batch":
            build_trace(corpus, embedder, store, depth=12, warmup=0, progress=False)
        else:
            build_live_trace(corpus, embedder, store, depth=12)
    assert len(seen["live"]) == 12 and seen["live"] == seen["batch"]
    assert seen["live"]["c1|t4"] == {"memory_type": "fact", "project": "beta", "priority": 3, "tags": ("work", "deadline")}
    assert seen["live"]["c2|t5"] == {"memory_type": "chitchat", "priority": 0}


def test_pace_sleeps_after_each_write_untimed(monkeypatch):
    import bench.replay.live as L

    slept = []
    monkeypatch.setattr(L.time, "sleep", slept.append)
    trace, _ = build_live_trace(CORPUS, Dims(), Late(lag=0), depth=10, batch=2,
                                pace_ms=40, vectors=VECTORS)
    assert slept == [0.04] * 5 and trace.meta["live_pace_ms"] == 40.0  # one sleep per write (5 writes of <= 2 turns)


def test_live_replay_refuses_a_metadata_filter_or_faults_in_one_line(tmp_path):
    """Live replay applies neither a metadata filter nor injected faults yet: either stops the job (never silently ignored)."""
    from types import SimpleNamespace

    from bench.pipeline import Settings, get_live

    for extra in ({"metadata_filter": {"project": "alpha"}}, {"faults": {"error_rate": 0.5, "seed": 0}}):
        settings = Settings(cache=tmp_path, replay="live", **extra)
        with pytest.raises(ValueError, match="replay=live does not apply a metadata filter or injected faults"):
            get_live(SimpleNamespace(), settings, None, None)


def test_a_live_trace_keeps_the_store_s_own_score(tmp_path):
    """As a batch trace: native_scores per hit (bench.backends.scores) and meta['score'], so score=native works live too."""
    trace, _ = build_live_trace(CORPUS, Dims(), ExactBackend(metric="l2"), depth=10, batch=1, vectors=VECTORS)
    for hits, sims, native in zip(trace.table["hit_ids"], trace.table["hit_scores"], trace.table["native_scores"]):
        assert len(native) == len(hits)
        np.testing.assert_allclose(native, [2 - 2 * s for s in sims], atol=1e-5)  # exact l2 = squared distance = 2 - 2 cos
    assert trace.meta["score"]["metric"] == "l2"
