"""The embedder contract."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    model_id: str  # short display name of model + preprocessing (the ``embedder`` column of every table)
    identity: dict  # everything that decides the vectors (model file hashes, endpoint, dimension, preprocessing, code): the cache key
    dim: int
    for_results: bool  # False for plumbing-only embedders (hashing): never reported as a result

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array (len(texts), dim), each row L2-normalised."""
