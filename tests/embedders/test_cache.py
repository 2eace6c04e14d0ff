"""Embedding cache: hits/misses, reload from disk, model isolation, dedup, crash leftovers."""

import json
import logging

import numpy as np
import pytest

from bench.embedders.base import Embedder, EmbedderCapabilities, TwoSided
from bench.embedders.cache import CachedEmbedder, model_dir_name, text_key

FAKE_ID = {"model_id": "fake/v1", "dim": 4}  # CountingEmbedder()'s identity


class CountingEmbedder(TwoSided):
    """Fake inner embedder: vector = one-hot-ish from the text length, records every call."""

    capabilities = EmbedderCapabilities()

    def __init__(self, model_id: str = "fake/v1", dim: int = 4, **identity) -> None:
        self.model_id = model_id
        self.dim = dim
        self.identity = {"model_id": model_id, "dim": dim, **identity}
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i, len(t) % self.dim] = 1.0
        return out


def test_second_call_embeds_nothing(tmp_path):
    inner = CountingEmbedder()
    c = CachedEmbedder(inner, tmp_path)
    assert isinstance(c, Embedder)
    assert (c.model_id, c.dim, c.capabilities.for_results, c.capabilities.batches_itself) == ("fake/v1", 4, True, True)
    v1 = c.embed_documents(["a", "bb", "ccc"])
    # len 1 -> e1, len 2 -> e2, len 3 -> e3
    np.testing.assert_array_equal(v1, np.eye(4, dtype=np.float32)[[1, 2, 3]])
    assert inner.calls == [["a", "bb", "ccc"]]
    assert (c.hits, c.misses, c.embedded) == (0, 3, 3)
    assert c.last_embed_seconds > 0.0
    v2 = c.embed_documents(["ccc", "a"])
    np.testing.assert_array_equal(v2, v1[[2, 0]])
    assert len(inner.calls) == 1  # nothing re-embedded
    assert (c.hits, c.misses, c.embedded) == (2, 3, 3)
    assert c.last_embed_seconds == 0.0
    assert c.stats()["entries"] == 3


def test_only_misses_are_embedded_and_order_kept(tmp_path):
    inner = CountingEmbedder()
    c = CachedEmbedder(inner, tmp_path)
    c.embed_documents(["a", "bb"])
    v = c.embed_documents(["bb", "dddd", "a", "eeeee"])
    assert inner.calls[-1] == ["dddd", "eeeee"]
    np.testing.assert_array_equal(v, np.eye(4, dtype=np.float32)[[2, 0, 1, 1]])


def test_survives_a_new_instance(tmp_path):
    CachedEmbedder(CountingEmbedder(), tmp_path).embed_documents(["x", "yy"])
    inner = CountingEmbedder()
    c = CachedEmbedder(inner, tmp_path)
    assert len(c) == 2
    v = c.embed_documents(["yy", "x"])
    assert inner.calls == []
    np.testing.assert_array_equal(v, np.eye(4, dtype=np.float32)[[2, 1]])
    shards = list((tmp_path / model_dir_name("fake/v1", FAKE_ID)).glob("shard-*.npz"))
    assert len(shards) == 1
    assert json.loads((tmp_path / model_dir_name("fake/v1", FAKE_ID) / "IDENTITY.json").read_text()) == FAKE_ID


def test_different_model_ids_do_not_collide(tmp_path):
    CachedEmbedder(CountingEmbedder("fake/v1"), tmp_path).embed_documents(["x"])
    # ids that sanitise to the same string still get different directories
    assert model_dir_name("a/b", {"model_id": "a/b"}) != model_dir_name("a_b", {"model_id": "a_b"})
    other = CountingEmbedder("fake:v1")
    c = CachedEmbedder(other, tmp_path)
    assert len(c) == 0
    c.embed_documents(["x"])
    assert other.calls == [["x"]]


def test_duplicates_embedded_once(tmp_path):
    inner = CountingEmbedder()
    c = CachedEmbedder(inner, tmp_path)
    v = c.embed_documents(["same", "other1", "same", "same"])
    assert inner.calls == [["same", "other1"]]
    assert (c.hits, c.misses, c.embedded) == (0, 4, 2)
    np.testing.assert_array_equal(v[0], v[2])
    np.testing.assert_array_equal(v[0], v[3])


def test_partial_temp_file_and_corrupt_shard_are_ignored(tmp_path, caplog):
    CachedEmbedder(CountingEmbedder(), tmp_path).embed_documents(["x"])
    d = tmp_path / model_dir_name("fake/v1", FAKE_ID)
    good = next(d.glob("shard-*.npz")).read_bytes()
    (d / ".tmp-crashed.npz").write_bytes(good[: len(good) // 2])  # crash before os.replace
    (d / "shard-99999999999999999999-1-deadbeef.npz").write_bytes(good[: len(good) // 2])  # damaged copy
    with caplog.at_level(logging.WARNING, logger="bench.embedders.cache"):
        c = CachedEmbedder(CountingEmbedder(), tmp_path)
    assert len(c) == 1  # the good shard only
    assert "skipping shard" in caplog.text and "deadbeef" in caplog.text
    assert ".tmp-crashed" not in caplog.text  # temp files are not even looked at


def test_shard_of_wrong_dim_is_skipped(tmp_path):
    CachedEmbedder(CountingEmbedder(dim=4), tmp_path).embed_documents(["x"])
    c = CachedEmbedder(CountingEmbedder(dim=8), tmp_path)  # same id, different dim: skip, re-embed
    assert len(c) == 0
    assert c.embed_documents(["x"]).shape == (1, 8)


def test_empty_input(tmp_path):
    inner = CountingEmbedder()
    c = CachedEmbedder(inner, tmp_path)
    assert c.embed_documents([]).shape == (0, 4)
    assert inner.calls == []
    assert not (tmp_path / model_dir_name("fake/v1", FAKE_ID)).exists()


def test_garbage_from_inner_is_not_cached(tmp_path):
    class Bad(CountingEmbedder):
        def embed(self, texts):
            out = super().embed(texts)
            out[1, 0] = np.nan
            return out

    c = CachedEmbedder(Bad(), tmp_path)
    with pytest.raises(ValueError, match="non-finite vector for item 1"):
        c.embed_documents(["a", "b"])
    assert len(c) == 0
    assert not list(tmp_path.rglob("shard-*.npz"))

    class Unnormalised(CountingEmbedder):
        def embed(self, texts):
            return 2 * super().embed(texts)

    with pytest.raises(ValueError, match="norm 2.0000 for item 0"):
        CachedEmbedder(Unnormalised("u"), tmp_path).embed_documents(["a"])


def test_compact_merges_shards(tmp_path):
    c = CachedEmbedder(CountingEmbedder(), tmp_path)
    for t in ["a", "bb", "ccc"]:
        c.embed_documents([t])
    d = tmp_path / model_dir_name("fake/v1", FAKE_ID)
    assert len(list(d.glob("shard-*.npz"))) == 3
    c.compact()
    assert len(list(d.glob("shard-*.npz"))) == 1
    inner = CountingEmbedder()
    v = CachedEmbedder(inner, tmp_path).embed_documents(["ccc", "a", "bb"])
    assert inner.calls == []
    np.testing.assert_array_equal(v, np.eye(4, dtype=np.float32)[[3, 1, 2]])


def test_text_key_is_sha256_of_utf8():
    # sha256("abc") is the FIPS 180-2 test vector
    assert text_key("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


class LearnsDim(CountingEmbedder):
    """Like the HTTP embedder without a configured dim: dim unknown until the first reply."""

    def __init__(self):
        super().__init__("learns/v1", dim=4)
        self.known = False

    @property
    def dim(self):
        if not self.known:
            raise RuntimeError("dimension unknown before the first embed()")
        return 4

    @dim.setter
    def dim(self, value):
        pass

    def embed(self, texts):
        self.known = True
        self.calls.append(list(texts))
        return np.eye(4, dtype=np.float32)[[len(t) % 4 for t in texts]]


def test_inner_that_learns_its_dim(tmp_path):
    c = CachedEmbedder(LearnsDim(), tmp_path)  # constructing must not need the dim
    assert c.embed_documents([]).shape == (0, 0)
    with pytest.raises(RuntimeError, match="dimension unknown"):
        _ = c.dim
    c.embed_documents(["a"])
    assert c.dim == 4
    inner = LearnsDim()
    again = CachedEmbedder(inner, tmp_path)
    assert again.dim == 4  # from the cached vectors, before the inner embedder knows
    np.testing.assert_array_equal(again.embed_documents(["a"]), [[0, 1, 0, 0]])
    assert inner.calls == []


def test_same_model_name_with_another_identity_does_not_reuse_vectors(tmp_path):
    """The key is the full identity: the same model name served by another endpoint is another cache."""
    CachedEmbedder(CountingEmbedder("http:m", endpoint="http://127.0.0.1:1/v1"), tmp_path).embed_documents(["x"])
    again = CountingEmbedder("http:m", endpoint="http://127.0.0.1:1/v1")
    assert len(CachedEmbedder(again, tmp_path)) == 1  # same identity: cached
    other = CountingEmbedder("http:m", endpoint="http://127.0.0.1:2/v1")
    c = CachedEmbedder(other, tmp_path)
    assert len(c) == 0
    c.embed_documents(["x"])
    assert other.calls == [["x"]]


class Prefixed(CountingEmbedder):
    """An asymmetric model: vector = one-hot of len(prefix + text) % 4, prefixes as e5's."""

    query_prefix = "q: "  # len 3
    document_prefix = "doc: "  # len 5


def test_sides_are_keyed_by_what_the_model_sees(tmp_path):
    inner = Prefixed("pre/v1")
    c = CachedEmbedder(inner, tmp_path)
    assert (c.query_prefix, c.document_prefix) == ("q: ", "doc: ")
    d = c.embed_documents(["ab"])  # the model sees "doc: ab": len 7 -> e3
    q = c.embed_queries(["ab"])  # "q: ab": len 5 -> e1; not the document's vector
    np.testing.assert_array_equal(d, [[0, 0, 0, 1]])
    np.testing.assert_array_equal(q, [[0, 1, 0, 0]])
    assert inner.calls == [["doc: ab"], ["q: ab"]]
    assert (c.hits, c.misses) == (0, 2)
    # keys are sha256 of prefix + text: the same text as a query again is a hit, on a new instance too
    again = CachedEmbedder(Prefixed("pre/v1"), tmp_path)
    np.testing.assert_array_equal(again.embed_queries(["ab"]), q)
    np.testing.assert_array_equal(again.embed_documents(["ab"]), d)
    assert again.inner.calls == [] and again.hits == 2
    assert c.uncached("queries", ["ab", "cd", "cd"]) == ["q: cd"]  # the model inputs still to embed, deduplicated
    assert c.uncached("documents", ["ab"]) == []


def test_a_symmetric_model_shares_one_vector_between_the_sides(tmp_path):
    inner = CountingEmbedder()
    c = CachedEmbedder(inner, tmp_path)
    v = c.embed_documents(["abc"])
    np.testing.assert_array_equal(c.embed_queries(["abc"]), v)
    assert inner.calls == [["abc"]] and c.hits == 1
    with pytest.raises(ValueError, match="side must be 'documents' or 'queries'"):
        c.uncached("memories", ["abc"])


class DyingEmbedder(CountingEmbedder):
    """Embeds in model batches of ``batch`` texts (like MiniLM) and raises after ``die_after`` batches: a killed cold run.
    ``work`` lists every text a batch computed, finished or not written."""

    def __init__(self, batch: int = 8, die_after: int | None = None) -> None:
        super().__init__()
        self.batch, self.die_after, self.batches, self.work = batch, die_after, 0, []

    def embed(self, texts):
        for lo in range(0, len(texts), self.batch):
            if self.die_after is not None and self.batches >= self.die_after:
                raise KeyboardInterrupt("killed")
            self.batches += 1
            self.work += list(texts[lo : lo + self.batch])
        return super().embed(texts)


def test_interrupted_cold_run_keeps_what_it_embedded(tmp_path):
    texts = [f"text number {i}" for i in range(1000)]
    first = DyingEmbedder(batch=8, die_after=75)  # killed after 600 texts computed, in the middle of a part of 64
    with pytest.raises(KeyboardInterrupt):
        CachedEmbedder(first, tmp_path, flush_every=64).embed_documents(texts)
    assert len(first.work) == 600
    second = DyingEmbedder(batch=8)
    c = CachedEmbedder(second, tmp_path, flush_every=64)
    assert len(c) == 576  # 9 parts of 64 written; the 10th (24 of 64 done) lost
    v = c.embed_documents(texts)
    again = set(first.work) & set(second.work)
    assert len(again) == 24 and len(again) <= 0.05 * len(first.work)  # 4 % of the first run's work re-embedded
    assert len(second.work) == 1000 - 576
    np.testing.assert_array_equal(v, CountingEmbedder().embed(texts))


def test_each_distinct_text_is_embedded_once_across_parts(tmp_path):
    inner = DyingEmbedder(batch=4)
    texts = [f"s{i % 10}" for i in range(100)]  # 10 distinct texts, each asked 10 times (haystacks sharing sessions)
    v = CachedEmbedder(inner, tmp_path, flush_every=3).embed_documents(texts)
    assert sorted(inner.work) == sorted(f"s{i}" for i in range(10))
    assert [len(c) for c in inner.calls] == [3, 3, 3, 1]
    assert len(list(tmp_path.rglob("shard-*.npz"))) == 4
    np.testing.assert_array_equal(v, CountingEmbedder().embed(texts))


def test_progress_with_rate_and_eta_is_logged_without_a_terminal(tmp_path, caplog, monkeypatch):
    import bench.progress as P

    monkeypatch.setattr(P.sys.stderr, "isatty", lambda: False, raising=False)
    caplog.set_level(logging.INFO)
    CachedEmbedder(CountingEmbedder(), tmp_path, flush_every=10).embed_documents([f"t{i}" for i in range(50)])
    lines = [r.getMessage() for r in caplog.records if r.name == "bench.progress"]
    assert lines and lines[-1].startswith("embed fake/v1 documents: 100% (50/50 text)")
    assert "text/s" in lines[-1] or "in " in lines[-1]
    assert any("50 texts asked, 50 distinct to embed, 0 already cached" in r.getMessage() for r in caplog.records)


def test_bit_flipped_shard_is_detected_and_re_embedded(tmp_path, caplog):
    CachedEmbedder(CountingEmbedder(), tmp_path).embed_documents(["a", "bb", "ccc"])
    shard = next(tmp_path.rglob("shard-*.npz"))
    with np.load(shard) as z:
        keys, vectors, digest = z["keys"], z["vectors"].copy(), z["digest"]
    vectors[0, 1] = 0.5  # still finite float32 of the right shape: only the digest tells
    np.savez(shard, keys=keys, vectors=vectors, digest=digest)
    inner = CountingEmbedder()
    with caplog.at_level(logging.WARNING):
        c = CachedEmbedder(inner, tmp_path)
    assert len(c) == 0 and "does not match its digest" in caplog.text
    np.testing.assert_array_equal(c.embed_documents(["a"]), np.eye(4, dtype=np.float32)[[1]])
    assert inner.calls == [["a"]]


def test_embed_texts_hands_the_whole_list_to_the_cache(tmp_path):
    from bench.replay.trace import embed_texts

    inner = CountingEmbedder()
    c = CachedEmbedder(inner, tmp_path, flush_every=5)
    v = embed_texts(c, [f"x{i}" for i in range(12)], side="documents", chunk=4)
    assert v.shape == (12, 4) and [len(x) for x in inner.calls] == [5, 5, 2]
