"""A store's own score (bench/backends/scores.py, issue 27 part 5), hand-worked on four unit vectors.

q = (1, 0, 0, 0) against
    t0 = (1, 0, 0, 0)     cos 1.0   gold
    t1 = (.8, .6, 0, 0)   cos 0.8   gold
    t2 = (.6, .8, 0, 0)   cos 0.6
    t3 = (0, 1, 0, 0)     cos 0.0
chroma / exact / LanceDB ``l2`` return the SQUARED distance 2 - 2c: 0, 0.4, 0.8, 2.0; 1 - d = 1, 0.6, 0.2, -1.
sqlite-vec ``l2`` returns the distance sqrt(2 - 2c): 0, 0.632, 0.894, 1.414; 1 - d = 1, 0.368, 0.106, -0.414.
Either way a threshold 0.3 on 1 - distance keeps {t0, t1} and 0.7 keeps {t0}; a threshold on the distance itself
(score=native, lower is better) keeps d <= t: 0.3 -> {t0}, 0.9 -> {t0, t1, t2}. The cosine 0.3 on 1 - distance stands
for: chroma (1 + 0.3) / 2 = 0.65; sqlite-vec 1 - 0.7^2 / 2 = 0.755.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from bench.backends import scores as S
from bench.backends.catalog import load_backend
from bench.replay.trace import TRACE_COLUMNS, Trace, score_meta
from bench.selection.basis import apply_basis, threshold_line
from bench.selection.sweep import sweep
from bench.strategies import vector as V
from bench.strategies.spec import StrategySpec
from bench.types import Conversation, Corpus, MemoryBatch, Question, Turn, Where

Q = np.array([1, 0, 0, 0], np.float32)
VECS = np.array([[1, 0, 0, 0], [.8, .6, 0, 0], [.6, .8, 0, 0], [0, 1, 0, 0]], np.float32)
COS = [1.0, 0.8, 0.6, 0.0]
KEYS = [f"c1|t{i}" for i in range(4)]
CORPUS = Corpus(name="four", conversations=(Conversation("c1", tuple(Turn("c1", f"t{i}", "user", "user", f"text {i}", 1.0 + i, i)
                                                                      for i in range(4))),),
                questions=(Question("q1", "c1", "which?", None, ("t0", "t1"), "single-hop"),))
TOKENS = dict.fromkeys(KEYS, 10)
THRESHOLD = StrategySpec("threshold", V.threshold, thresholded=True)


def test_every_kind_converts_back_to_the_cosine():
    c = np.array([1.0, 0.8, 0.6, 0.0, -1.0])
    for name in S.KINDS:
        native = S.native_of(name, c)
        assert [S.similarity(name, x) for x in native] == pytest.approx(c.tolist(), abs=1e-12), name
        order = np.argsort(native if S.kind(name).lower_is_better else -native, kind="stable")
        assert order.tolist() == [0, 1, 2, 3, 4], name  # best first either way
    assert S.native_of("l2_squared", c).tolist() == pytest.approx([0, 0.4, 0.8, 2.0, 4.0])
    assert S.native_of("l2", c).tolist() == pytest.approx([0, math.sqrt(0.4), math.sqrt(0.8), math.sqrt(2), 2.0])
    assert S.native_of("negative_dot", c).tolist() == pytest.approx([-1, -0.8, -0.6, 0, 1])


def test_a_threshold_on_one_minus_distance_is_a_stated_cosine():
    assert S.cosine_at("l2_squared", "one_minus_distance", 0.3) == pytest.approx(0.65)  # chroma's default space
    assert S.cosine_at("l2", "one_minus_distance", 0.3) == pytest.approx(1 - 0.49 / 2)
    assert S.cosine_at("cosine_distance", "one_minus_distance", 0.3) == pytest.approx(0.3)
    assert S.cosine_at("l2_squared", "native", 0.4) == pytest.approx(0.8)
    assert S.cosine_at(None, "similarity", 0.3) == 0.3


def test_a_metric_a_store_does_not_offer_is_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^sqlite_vec: metric 'ip' is not offered by this store \(it offers cosine, l2\)"):
        load_backend("sqlite_vec", stores_dir=tmp_path, metric="ip")
    with pytest.raises(ValueError, match=r"^pinecone: metric 'l2' is not offered.*it offers cosine\)"):
        load_backend("pinecone", stores_dir=tmp_path, metric="l2")
    with pytest.raises(ValueError, match=r"^exact: metric must be one of cosine, l2, ip \(got 'euclid'\)"):
        load_backend("exact", stores_dir=tmp_path, metric="euclid")


def test_a_basis_that_does_not_apply_is_one_line():
    with pytest.raises(ValueError, match="one_minus_distance: store exact returns a similarity"):
        S.check_basis("one_minus_distance", "cosine", "store exact")
    with pytest.raises(ValueError, match="recorded no native scores"):
        S.check_basis("native", None, "store trec")
    with pytest.raises(ValueError, match="score must be one of"):
        S.check_basis("distance", "l2", "x")


def _search(store: str, metric: str, tmp_path):
    b = load_backend(store, stores_dir=tmp_path, metric=metric, collection=f"rbscores_{store}")
    b.open(dim=4)
    try:
        b.add(MemoryBatch(ids=tuple(KEYS), vectors=VECS, conversation_ids=("c1",) * 4, roles=("user",) * 4,
                          timestamps=(1.0, 2.0, 3.0, 4.0)))
        b.wait_ready()
        hits = b.search(Q, k=4, where=Where(conversation_id="c1"))
        unfiltered = b.search(Q, k=4, where=Where())  # the per-conversation layout merges collections: natives kept
        meta = {"dataset": "four", "embedder": "fake", "backend": b.name, "roles": None, "score": score_meta(b)}
    finally:
        b.drop()
        b.close()
    assert unfiltered.native == hits.native
    return hits, meta


def _trace(hits, meta) -> Trace:
    row = {"question_id": "q1", "conversation_id": "c1", "latency_ns": 1.0, "hit_ids": list(hits.ids),
           "hit_scores": list(hits.scores), "exact_scores": COS, "gold_ids": [], "gold_exact_ranks": [],
           "native_scores": list(hits.native)}
    return Trace(pd.DataFrame([row], columns=TRACE_COLUMNS), meta)


def _selected(trace: Trace, basis: str, thresholds) -> dict[float, list[str]]:
    rows = sweep(apply_basis(trace, basis), CORPUS, [THRESHOLD], thresholds, TOKENS, record=(record := {}))
    assert sorted(rows["threshold"].tolist()) == sorted(thresholds)  # the rows keep the thresholds as given
    return {t: sorted(record[("threshold", t)]["q1"]) for t in thresholds}


@pytest.mark.parametrize(("store", "native", "at_03"), [
    ("chroma", [0.0, 0.4, 0.8, 2.0], 0.65),  # chroma's l2 space: the SQUARED distance 2 - 2c
    ("exact", [0.0, 0.4, 0.8, 2.0], 0.65),  # the exact store follows chroma's convention
    ("sqlite_vec", [0.0, math.sqrt(0.4), math.sqrt(0.8), math.sqrt(2.0)], 0.755),  # vec0's l2: the distance, not squared
])
def test_an_l2_space_store_keeps_its_own_distance_and_thresholds_on_it(store, native, at_03, tmp_path):
    hits, meta = _search(store, "l2", tmp_path)
    assert hits.ids == tuple(KEYS)
    assert list(hits.native) == pytest.approx(native, abs=1e-6)  # the store's own number
    assert list(hits.scores) == pytest.approx(COS, abs=1e-6)  # the similarity made from it
    assert meta["score"]["metric"] == "l2" and meta["score"]["lower_is_better"]
    trace = _trace(hits, meta)
    # 1 - distance (what an application on chroma's default space thresholds): 0.3 keeps t0, t1; 0.7 keeps t0
    assert _selected(trace, "one_minus_distance", (0.3, 0.7)) == {0.3: KEYS[:2], 0.7: KEYS[:1]}
    # the distance itself, lower is better: d <= 0.3 keeps t0; d <= 0.9 keeps t0, t1, t2
    assert _selected(trace, "native", (0.3, 0.9)) == {0.3: KEYS[:1], 0.9: KEYS[:3]}
    # the cosine, as before: 0.65 keeps t0, t1 (the cosine a 0.3 on chroma's 1 - d stands for)
    assert _selected(trace, "similarity", (0.65,)) == {0.65: KEYS[:2]}
    line = threshold_line(apply_basis(trace, "one_minus_distance").meta)
    assert f"a threshold of 0.3 there is cosine {at_03:.2f}" in line and "metric l2" in line


def test_the_cosine_default_keeps_the_similarity_unchanged(tmp_path):
    hits, meta = _search("chroma", "cosine", tmp_path)
    assert list(hits.native) == pytest.approx([0.0, 0.2, 0.4, 1.0], abs=1e-6)  # 1 - cos
    trace = _trace(hits, meta)
    assert apply_basis(trace, "similarity").table is trace.table  # nothing remapped
    assert _selected(trace, "one_minus_distance", (0.7,)) == {0.7: KEYS[:2]}  # 1 - (1 - c) = c
