"""Hashing embedder: exact hand-checked values, determinism, identical/different texts."""

import subprocess
import sys
import zlib

import numpy as np
import pytest

from bench.embedders.base import Embedder
from bench.embedders.hashing import HashingEmbedder

ROOT = __file__.rsplit("/tests/", 1)[0]


def test_protocol_and_flags():
    e = HashingEmbedder(dim=64)
    assert isinstance(e, Embedder)
    assert e.dim == 64
    assert e.capabilities.for_results is False  # plumbing only
    assert e.model_id != HashingEmbedder(dim=32).model_id


def test_hand_worked_vector():
    # "hi" -> features w:hi, c:<hi, c:hi>.  crc32: w:hi=1729765164 (bucket 12 of 16, top bit 0 -> -1),
    # c:<hi=857589474 (bucket 2, -1), c:hi>=3032266136 (bucket 8, top bit 1 -> +1); norm sqrt(3).
    assert zlib.crc32(b"w:hi") == 1729765164
    v = HashingEmbedder(dim=16).embed(["hi"])[0]
    expected = np.zeros(16, dtype=np.float32)
    expected[[12, 2, 8]] = np.array([-1, -1, 1]) / np.sqrt(3)
    np.testing.assert_allclose(v, expected, atol=1e-7)
    # punctuation and case are dropped: same features
    np.testing.assert_array_equal(HashingEmbedder(dim=16).embed(["Hi!"])[0], v)


def test_empty_text_is_a_unit_sentinel():
    v = HashingEmbedder(dim=16).embed([""])[0]
    assert v[zlib.crc32(b"<empty>") % 16] == 1.0  # bucket 9
    assert float(np.linalg.norm(v)) == 1.0


def test_identical_same_different_differ_unit_norm():
    e = HashingEmbedder()
    v = e.embed(["I moved to Boston in May", "I moved to Boston in May", "My dog is called Rex", ""])
    assert v.shape == (4, 256) and v.dtype == np.float32
    np.testing.assert_array_equal(v[0], v[1])
    assert float(v[0] @ v[2]) < 0.5
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6)


def test_deterministic_across_processes():
    # Python's str hash is salted per process; crc32 is not. Compare with a fresh interpreter.
    code = "from bench.embedders.hashing import HashingEmbedder as H; print(H().embed(['recall me later'])[0].tobytes().hex())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": ROOT, "PYTHONHASHSEED": "123"})
    here = HashingEmbedder().embed(["recall me later"])[0]
    assert bytes.fromhex(out.stdout.strip()) == here.tobytes()


def test_bad_input():
    with pytest.raises(ValueError, match=r"texts\[0\] is NoneType"):
        HashingEmbedder().embed([None])
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(dim=1)
