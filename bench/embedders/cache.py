"""On-disk embedding cache: a wrapper that embeds only texts it has not seen for this model.

Layout: ``<cache_dir>/<sanitised model_id>-<key>/``, where the key is the fingerprint of the
embedder's full ``identity`` (model file hashes, endpoint, dimension, preprocessing, code), holds
``IDENTITY.json`` (that identity, for humans: it never holds a key) and shards ``shard-*.npz``, each with ``keys`` (sha256 hex of the UTF-8
text the model sees: the side's prefix + the text, see ``bench.embedders.base``; a symmetric model
shares one vector between the sides, a prefixed one never mixes them) and ``vectors`` (float32,
n x dim). Every ``embed_documents`` / ``embed_queries`` call that has misses writes one new shard
to a temp file and renames it into place (``os.replace``), so a crash leaves at worst a stray temp
file, which loading ignores; an unreadable shard is logged and skipped, never fatal. All shards are
read into an in-memory index when the wrapper is created. Texts are never stored, only their hashes.
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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.embedders.base import Embedder, embed_side, side_prefix
from bench.output import file_mode, named_os_error

log = logging.getLogger(__name__)

SHARD_GLOB = "shard-*.npz"


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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

    def __init__(self, inner: Embedder, cache_dir: str | Path) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.identity = dict(inner.identity)
        self.for_results = inner.for_results
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
                problem = self._check_shard(keys, vectors)
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
                np.savez(f, keys=np.array(keys, dtype="U64"), vectors=vectors)
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
            started = time.perf_counter()
            new = np.asarray(embed_side(self.inner, side, list(todo.values())))
            self.last_embed_seconds = time.perf_counter() - started
            self.total_embed_seconds += self.last_embed_seconds
            self._validate(new, len(todo))
            new = new.astype(np.float32, copy=False)
            self._write_shard(list(todo), new)
            for k, v in zip(todo, new):
                self._index[k] = v
            self.embedded += len(todo)
            log.info("embedding cache %s (%s): %d hits, %d embedded in %.2f s",
                     self.model_id, side, len(keys) - n_miss, len(todo), self.last_embed_seconds)
        if not keys:
            return np.empty((0, self._expected_dim() or 0), dtype=np.float32)
        return np.stack([self._index[k] for k in keys]).astype(np.float32, copy=False)

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
