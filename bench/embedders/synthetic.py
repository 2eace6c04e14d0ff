"""The embedder that goes with ``bench.data.synthetic``: clustered vectors from the markers in its texts, no model.

See ``bench/data/synthetic.py`` for how the vectors are clustered. Plumbing and performance only
(``capabilities.for_results`` False).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from bench.embedders.base import EmbedderCapabilities, TwoSided, sides_identity
from bench.types import SYNTHETIC_MARK

_TABLE = 1024  # rows per random table; a jitter/fact vector mixes one row of each of two tables


class SyntheticEmbedder(TwoSided):
    """Deterministic clustered vectors for the marked texts of ``generate`` (no model). Plumbing only."""

    capabilities = EmbedderCapabilities(for_results=False, cacheable=False)  # a vector costs less than a cache read

    def __init__(self, dim: int = 384, noise: float = 0.8, fact_weight: float = 1.0, topics: int = 50, seed: int = 0) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2:
            raise ValueError(f"synthetic embedder: dim must be an integer >= 2 (got {dim!r})")
        for field, value in (("noise", noise), ("fact_weight", fact_weight)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"synthetic embedder: {field} must be a number >= 0 (got {value!r})")
        if isinstance(topics, bool) or not isinstance(topics, int) or topics < 1:
            raise ValueError(f"synthetic embedder: topics must be an integer >= 1 (got {topics!r})")
        self.dim, self.noise, self.fact_weight, self.topics, self.seed = dim, float(noise), float(fact_weight), topics, seed
        self.model_id = f"synthetic-v1/dim{dim}/noise{self.noise:g}/fact{self.fact_weight:g}/topics{topics}/seed{seed}"
        rng = np.random.default_rng([seed, dim])

        def unit(rows: int) -> np.ndarray:
            t = rng.standard_normal((rows, dim)).astype(np.float32)
            return t / np.linalg.norm(t, axis=1, keepdims=True)

        self._centres, self._fa, self._fb, self._ja, self._jb = unit(topics), unit(_TABLE), unit(_TABLE), unit(_TABLE), unit(_TABLE)

    @property
    def identity(self) -> dict:
        from bench.run import code_digest

        return {"embedder": "synthetic", "model_id": self.model_id, "dim": self.dim, "noise": self.noise, "fact_weight": self.fact_weight,
                "topics": self.topics, "seed": self.seed, **sides_identity(self), "code": code_digest("embedders/synthetic", "data/synthetic")}

    def __repr__(self) -> str:
        return f"SyntheticEmbedder({self.model_id})"

    @staticmethod
    def _mix(h: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """A near-unit pseudo-random vector per hash: row h % 1024 of ``a`` plus row h // 1024 % 1024 of ``b``."""
        return (a[h % _TABLE] + b[(h // _TABLE) % _TABLE]) * np.float32(1 / np.sqrt(2))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        n = len(texts)
        topic = np.empty(n, dtype=np.int64)
        fact = np.full(n, -1, dtype=np.int64)
        jitter = np.empty(n, dtype=np.int64)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"synthetic embedder: texts[{i}] is {type(t).__name__}, expected str")
            h = zlib.crc32(t.encode("utf-8"))
            jitter[i] = h
            m = SYNTHETIC_MARK.match(t)
            if m is None:
                topic[i] = h % self.topics
            else:
                topic[i] = int(m.group(1)) % self.topics
                if m.group(2) is not None:
                    fact[i] = int(m.group(2))
        out = self._centres[topic] + np.float32(self.noise) * self._mix(jitter, self._ja, self._jb)
        has = fact >= 0
        if has.any():
            out[has] += np.float32(self.fact_weight) * self._mix(fact[has] * 2_654_435_761 % (1 << 32), self._fa, self._fb)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out.astype(np.float32, copy=False)
