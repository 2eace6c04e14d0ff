"""Hashing embedder: deterministic signed feature hashing of word and character n-grams.

For plumbing tests only (``capabilities.for_results`` False): it needs no model, is fast and gives the same
vectors on every machine and process (crc32, not Python's salted ``hash``). Never report it as a
result. Features: lower-cased word unigrams and bigrams, and character trigrams of each word
padded with ``<`` and ``>``. An empty text maps to a fixed sentinel feature so every row is unit length.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from bench.embedders.base import EmbedderCapabilities, TwoSided, sides_identity

_WORD = re.compile(r"\w+", re.UNICODE)


def _features(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    feats = [f"w:{w}" for w in words]
    feats += [f"b:{a} {b}" for a, b in pairwise(words)]
    for w in words:
        padded = f"<{w}>"
        feats += [f"c:{padded[i:i + 3]}" for i in range(len(padded) - 2)]
    return feats or ["<empty>"]


class HashingEmbedder(TwoSided):
    """Signed feature hashing into ``dim`` buckets, L2-normalised. Plumbing only."""

    capabilities = EmbedderCapabilities(for_results=False)

    def __init__(self, dim: int = 256) -> None:
        if dim < 2:
            raise ValueError(f"hashing: dim must be >= 2 (got {dim})")
        self.dim = dim
        self.model_id = f"hashing-v1/word12-char3/crc32/{dim}"

    @property
    def identity(self) -> dict:
        from bench.run import code_digest

        return {"embedder": "hashing", "model_id": self.model_id, "dim": self.dim, **sides_identity(self),
                "code": code_digest("embedders/hashing")}

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"hashing: texts[{row}] is {type(text).__name__}, expected str")
            for f in _features(text):
                h = zlib.crc32(f.encode("utf-8"))
                out[row, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm == 0.0:  # every feature cancelled out: fall back to the sentinel bucket
                out[row, zlib.crc32(b"<empty>") % self.dim] = 1.0
            else:
                out[row] /= norm
        return out
