"""On-disk embedding cache: a wrapper that embeds only texts it has not seen for this model.

Layout: ``<cache_dir>/<sanitised model_id>-<key>/``, where the key is the fingerprint of the
embedder's full ``identity`` (model file hashes, endpoint, dimension, preprocessing, code), holds
``IDENTITY.json`` (that identity, for humans: it never holds a key) and shards ``shard-*.npz``, each with ``keys`` (sha256 hex of the UTF-8
text the model sees: the side's prefix + the text, see ``bench.embedders.base``; a symmetric model
shares one vector between the sides, a prefixed one never mixes them) and ``vectors`` (float32,
n x dim) and ``digest`` (sha256 of the keys' and vectors' bytes).

Written as it goes: the distinct texts an ``embed_documents`` / ``embed_queries`` call misses are
embedded ``flush_every`` at a time (``FLUSH_EVERY``), and each part is written as one shard to a temp
file, fsynced and renamed into place (``os.replace``) before the next part starts. An interrupted cold
run therefore keeps everything but the part in flight (at most ``flush_every`` texts), and a crash
leaves at worst a stray temp file, which loading ignores. A shard whose digest, shape, dim or values
do not check out (truncated, bit-flipped, another model's) is logged and skipped, never used: its
texts are embedded again. All shards are read into an in-memory index when the wrapper is created.
A text asked several times (haystacks sharing sessions) is embedded once. With more than
``flush_every`` texts to embed, progress (done/total, rate, ETA) goes to the log (a bar on a terminal,
``bench.progress``). Texts are never stored, only their hashes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import time
import uuid
from dataclasses import replace
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.embedders.base import Embedder, embed_side, side_prefix
from bench.output import file_mode, named_os_error

log = logging.getLogger(__name__)

SHARD_GLOB = "shard-*.npz"
FLUSH_EVERY = 2048  # distinct texts per shard in a cold run: what an interrupt can lose (MiniLM on 2 cores: ~10-30 s)


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def shard_digest(keys: np.ndarray, vectors: np.ndarray) -> str:
    """sha256 of a shard's content: its keys (UTF-32 as stored) and its float32 vectors (C order)."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(keys).tobytes())
    h.update(np.ascontiguousarray(vectors).tobytes())
    return h.hexdigest()


def model_dir_name(model_id: str, identity: dict) -> str:
    """Filesystem-safe directory name: the readable model id plus the key of the full identity."""
    from bench.run import fingerprint

    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("._")[:80] or "model"
    return f"{safe}-{fingerprint('embeddings', identity)}"


class CachedEmbedder:
    """Embedder wrapper with a persistent per-model cache keyed by sha256(text).

    Counters (cumulative): ``hits`` texts answered from the cache, ``misses`` texts not in the cache
    when asked, ``embedded`` distinct texts sent to the inner embedder. ``last_embed_seconds`` is the
    wall time of the inner embedding in the last call (0.0 when everything was cached);
    ``total_embed_seconds`` sums it.
    """

    def __init__(self, inner: Embedder, cache_dir: str | Path, *, flush_every: int = FLUSH_EVERY, progress: bool = True) -> None:
        if flush_every < 1:
            raise ValueError(f"embedding cache: flush_every must be >= 1 (got {flush_every})")
        self.inner = inner
        self.flush_every = flush_every
        self.progress = progress
        self.model_id = inner.model_id
        self.identity = dict(inner.identity)
        # what the inner model declares; the cache batches itself (bench.replay.trace.embed_texts passes every text in one call:
        # the cache splits, writes and reports progress) and offers none of the inner model's extra methods
        self.capabilities = replace(inner.capabilities, batches_itself=True, counts_unknown=False, loads_lazily=False,
                                    own_progress=False)
        self.query_prefix = inner.query_prefix
        self.document_prefix = inner.document_prefix
        self.dir = Path(cache_dir) / model_dir_name(inner.model_id, self.identity)
        self.hits = 0
        self.misses = 0
        self.embedded = 0
        self.last_embed_seconds = 0.0
        self.total_embed_seconds = 0.0
        self._index: dict[str, np.ndarray] = {}
        self._load()

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, dir={str(self.dir)!r}, entries={len(self._index)})"

    def __len__(self) -> int:
        return len(self._index)

    @property
    def dim(self) -> int:
        """The inner embedder's dim; for one that learns it from its first reply (HTTP without a
        configured dim), the dim of the cached vectors until then."""
        try:
            return self.inner.dim
        except RuntimeError:
            if self._index:
                return len(next(iter(self._index.values())))
            raise

    def _expected_dim(self) -> int | None:
        try:
            return self.dim
        except RuntimeError:
            return None

    def stats(self) -> dict[str, float]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "embedded": self.embedded,
            "entries": len(self._index),
            "last_embed_seconds": self.last_embed_seconds,
            "total_embed_seconds": self.total_embed_seconds,
        }

    def _load(self) -> None:
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.glob(SHARD_GLOB)):
            try:
                with np.load(path, allow_pickle=False) as z:
                    keys, vectors = z["keys"], z["vectors"]
                    digest = str(z["digest"]) if "digest" in z.files else None
                problem = self._check_shard(keys, vectors)
                if not problem and digest is not None and digest != shard_digest(keys, vectors):
                    problem = "content does not match its digest (damaged)"
            except Exception as e:  # noqa: BLE001  (a damaged shard must not break a run)
                problem = f"unreadable ({type(e).__name__}: {e})"
            if problem:
                log.warning("embedding cache: skipping shard %s: %s", path, problem)
                continue
            for k, v in zip(keys.tolist(), vectors):
                self._index[k] = v
        log.debug("embedding cache %s: %d entries loaded", self.dir, len(self._index))

    def _check_shard(self, keys: np.ndarray, vectors: np.ndarray) -> str:
        if keys.ndim != 1 or vectors.ndim != 2 or len(keys) != len(vectors):
            return f"shape mismatch (keys {keys.shape}, vectors {vectors.shape})"
        dim = self._expected_dim()
        if dim is not None and vectors.shape[1] != dim:
            return f"dim {vectors.shape[1]} != embedder dim {dim}"
        if vectors.dtype != np.float32 or not np.isfinite(vectors).all():
            return "vectors are not finite float32"
        return ""

    def _write_shard(self, keys: list[str], vectors: np.ndarray) -> None:
        try:
            self._write_shard_in(keys, vectors)
        except OSError as e:
            raise named_os_error(e, f"writing the embedding cache {self.dir}") from None

    def _write_shard_in(self, keys: list[str], vectors: np.ndarray) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        marker = self.dir / "IDENTITY.json"
        if not marker.exists():
            _atomic_write_bytes(marker, (json.dumps(self.identity, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8"))
        name = f"shard-{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}.npz"
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as f:
                karr = np.array(keys, dtype="U64")
                np.savez(f, keys=karr, vectors=vectors, digest=np.array(shard_digest(karr, vectors)))
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, file_mode())  # mkstemp makes 0600
            os.replace(tmp, self.dir / name)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed("documents", texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed("queries", texts)

    def _keys(self, side: str, texts: Sequence[str]) -> list[str]:
        prefix = side_prefix(self.inner, side)
        keys = []
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"embedding cache: texts[{i}] is {type(t).__name__}, expected str")
            keys.append(text_key(prefix + t))
        return keys

    def uncached(self, side: str, texts: Sequence[str]) -> list[str]:
        """The model inputs (prefix + text) of ``texts`` on ``side`` not in the cache, deduplicated, in order."""
        prefix = side_prefix(self.inner, side)
        return list({k: prefix + t for k, t in zip(self._keys(side, texts), texts) if k not in self._index}.values())

    def _embed(self, side: str, texts: Sequence[str]) -> np.ndarray:
        keys = self._keys(side, texts)
        todo: dict[str, str] = {}  # key -> text (without the prefix: the inner embedder adds it), first occurrence order, deduplicated
        for k, t in zip(keys, texts):
            if k not in self._index:
                todo.setdefault(k, t)
        n_miss = sum(1 for k in keys if k in todo)
        self.misses += n_miss
        self.hits += len(keys) - n_miss
        self.last_embed_seconds = 0.0
        if todo:
            self._embed_missing(side, list(todo.items()), n_keys=len(keys), hits=len(keys) - n_miss)
        if not keys:
            return np.empty((0, self._expected_dim() or 0), dtype=np.float32)
        return np.stack([self._index[k] for k in keys]).astype(np.float32, copy=False)

    def _embed_missing(self, side: str, items: list[tuple[str, str]], *, n_keys: int, hits: int) -> None:
        """Embed ``items`` (key, text) ``flush_every`` at a time, each part written to its own shard before the next starts."""
        from bench.progress import progress as progress_bar

        parts = range(0, len(items), self.flush_every)
        chunked = len(parts) > 1
        if chunked:
            log.info("embedding cache %s (%s): %d texts asked, %d distinct to embed, %d already cached; writing every %d",
                     self.model_id, side, n_keys, len(items), len(self._index), self.flush_every)
        quiet = chunked and self.inner.capabilities.own_progress  # our bar replaces the inner one per part
        was = self.inner.progress if quiet else None
        try:
            if quiet:
                self.inner.progress = False
            with progress_bar(len(items), f"embed {self.model_id} {side}", unit="text", enabled=self.progress and chunked,
                              every=0.02, min_interval=10.0) as bar:
                for lo in parts:
                    part = items[lo : lo + self.flush_every]
                    started = time.perf_counter()
                    new = np.asarray(embed_side(self.inner, side, [t for _, t in part]))
                    spent = time.perf_counter() - started
                    self.last_embed_seconds += spent
                    self.total_embed_seconds += spent
                    self._validate(new, len(part))
                    new = new.astype(np.float32, copy=False)
                    self._write_shard([k for k, _ in part], new)  # on disk before the next part: an interrupt loses one part at most
                    for (k, _), v in zip(part, new):
                        self._index[k] = v
                    self.embedded += len(part)
                    bar.update(len(part))
        finally:
            if quiet:
                self.inner.progress = was
        log.info("embedding cache %s (%s): %d hits, %d embedded in %.2f s",
                 self.model_id, side, hits, len(items), self.last_embed_seconds)

    def _validate(self, new: np.ndarray, n: int) -> None:
        """Never cache garbage: shape, finiteness and unit norm of what the inner embedder returned."""
        who = f"embedding cache: {self.model_id}"
        dim = self.dim
        if new.ndim != 2 or new.shape != (n, dim):
            raise ValueError(f"{who} returned shape {new.shape}, expected ({n}, {dim})")
        bad = ~np.isfinite(new).all(axis=1)
        if bad.any():
            raise ValueError(f"{who} returned a non-finite vector for item {int(np.argmax(bad))}")
        norms = np.linalg.norm(new, axis=1)
        off = np.abs(norms - 1.0) > 1e-3
        if off.any():
            i = int(np.argmax(off))
            raise ValueError(f"{who} returned a vector with norm {norms[i]:.4f} for item {i} (expected 1)")

    def compact(self) -> None:
        """Merge all shards into one (atomic: the new shard is in place before old ones are removed)."""
        old = sorted(self.dir.glob(SHARD_GLOB)) if self.dir.is_dir() else []
        if len(old) < 2:
            return
        self._load()  # pick up shards other processes wrote since we loaded
        keys = list(self._index)
        self._write_shard(keys, np.stack([self._index[k] for k in keys]).astype(np.float32))
        for p in old:
            _unlink_quietly(p)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _unlink_quietly(path: str | Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
