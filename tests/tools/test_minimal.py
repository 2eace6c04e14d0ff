"""bench.tools.minimal (the independent script of make bench P6/P7) computes the run's summary rows exactly."""

import math

import numpy as np
import pytest

from bench.cli import config
from bench.cli.config import build
from bench import pipeline
from bench.cli.sweep import plain_job
from bench.embedders.cache import CachedEmbedder
from bench.tools import minimal as M
from bench.tools.perf.common import REPO
from bench.types import Conversation, Corpus, Question, Turn

COMPARED = ["n_questions", "precision", "recall", "f1", "tokens_injected_mean", "tokens_full_mean"]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9


def test_minimal_equals_the_run_on_the_demo_corpus(tmp_path):
    demo = REPO / "datasets" / "demo"
    cfg = config.compose([f"paths.root={REPO}", "dataset=own", f"dataset.path={demo}", "embedder=hashing", "backend=exact",
                          f"paths.cache={tmp_path / 'cache'}", "progress=false", "publish_latest=false"])
    ours = pipeline.run(*plain_job(cfg), tmp_path / "run").summary
    ours = ours[ours["format"] == "A"]
    corpus = build(cfg.dataset)
    model_dir = CachedEmbedder(build(cfg.embedder), tmp_path / "cache" / "embeddings").dir
    rows = M.summary(corpus, model_dir)
    assert len(rows) == len(ours) == 36
    # the demo has adversarial and time-bounded questions: both rules are exercised
    assert any(q.adversarial for q in corpus.questions) and any(q.asked_at is not None for q in corpus.questions)
    for r, (_, o) in zip(rows, ours.iterrows()):
        assert (r["strategy"], r["threshold"]) == (o["strategy"], o["threshold"]) or (math.isnan(r["threshold"]) and o["threshold"] != o["threshold"])
        for c in COMPARED:
            assert _same(float(r[c]), float(o[c])), (r["strategy"], r["threshold"], c, r[c], o[c])
    assert any(math.isnan(r["precision"]) for r in rows)  # a threshold that selects nothing: precision undefined


def _turn(i: int, role: str, text: str, ts: float) -> Turn:
    return Turn("c", f"t{i}", role, role, text, ts, i)


def test_sweep_stage_hand_worked():
    # 3 turns said at 1, 2, 3; q1 (gold t0, t2) asked after all; q2 adversarial; q3 asked at 1.5 (sees t0 only, gold t0)
    turns = (_turn(0, "user", "a", 1.0), _turn(1, "assistant", "b", 2.0), _turn(2, "user", "c", 3.0))
    qs = (Question("q1", "c", "x", None, ("t0", "t2")), Question("q2", "c", "y", None, ("t1",), adversarial=True),
          Question("q3", "c", "z", 1.5, ("t0",)))
    corpus = Corpus("hand", (Conversation("c", turns),), qs)
    tv = np.eye(3, dtype=np.float32)
    qv = np.array([[0.6, 0.8, 0.0], [0, 1, 0], [0.0, 0.6, 0.8]], dtype=np.float32)  # q1: t1 0.8, t0 0.6, t2 0; q3 sees t0 (0)
    ranked = M.rank(corpus, tv, qv)
    assert [list(r["ranked"]) for r in ranked] == [[1, 0, 2], [1, 0, 2], [0]] and [r["scored"] for r in ranked] == [True, False, True]
    keys = np.array([t.key for t in turns], dtype=object)
    lines = ["user: a", "assistant: b", "user: c"]
    alone, joined = np.array([2, 3, 2]), np.array([3, 4, 3])  # hand-made counts: a line + "\n" costs one more
    rows = M.sweep(ranked, keys, alone, joined, np.ones(3, bool), None, lines, thresholds=(0.5, 0.7, 0.9))
    got = {(r["strategy"], r["threshold"]): r for r in rows}
    lim = got[("limit5", rows[0]["threshold"])]
    # limit5: q1 takes t1, t0, t2 (2 of 3 correct), q3 takes t0: precision (2/3 + 1) / 2, recall (1 + 1) / 2
    assert lim["n_questions"] == 2 and lim["precision"] == pytest.approx((2 / 3 + 1) / 2) and lim["recall"] == 1.0
    # tokens: q1 = joined t1 + joined t0 + alone t2 = 4 + 3 + 2; q3 = alone t0 = 2; full context the same
    assert lim["tokens_injected_mean"] == (9 + 2) / 2 and lim["tokens_full_mean"] == (9 + 2) / 2
    t7 = got[("threshold", 0.7)]  # q1 takes t1 (0.8, wrong), q3 nothing (0 < 0.7)
    assert t7["precision"] == 0.0 and t7["recall"] == 0.0 and t7["f1"] == 0.0 and t7["tokens_injected_mean"] == (3 + 0) / 2
    t5 = got[("threshold", 0.5)]  # q1: t1, t0 -> p 1/2, r 1/2, f1 1/2; q3: nothing -> p NaN (left out), r 0, f1 0
    assert t5["precision"] == 0.5 and t5["recall"] == 0.25 and t5["f1"] == 0.25 and t5["tokens_injected_mean"] == (4 + 2) / 2
    h5 = got[("hybrid5", 0.9)]  # nothing selected anywhere: precision undefined
    assert math.isnan(h5["precision"]) and h5["recall"] == 0.0 and h5["tokens_injected_mean"] == 0.0
