"""sqlite-vec store: exact (brute-force) cosine KNN in a ``vec0`` virtual table, one SQLite file per collection.

Owns the sqlite-vec adapter. Layout of ``<path>/<collection>.db`` (collection name sanitised):

* ``memories``: ``vec0(conversation_id TEXT partition key, embedding float[DIM] distance_metric=cosine,
  role TEXT, ts FLOAT)``; metadata columns are filtered natively inside the KNN query
  (``conversation_id = ?``, ``role IN (...)``, ``ts <= ?``), so results are never short.
* ``memory_ids``: maps the integer vec0 rowid to the string memory id (vec0 rowids must be integers
  and ``+aux`` columns cannot be looked up efficiently).
* ``meta``: the dimension and metric the table was created with (checked on reopen).

``chunk_size`` (rows per vec0 vector chunk, a new table's setting): vec0's 1024 unless set; a per-conversation
collection (``bench.backends.layout``) takes 64, so a file holding one user's few rows is ~150 KB, not ~1.6 MB.

Duplicate ids: ``add`` replaces (delete + insert, the last row wins), like an upsert.
The stdlib ``sqlite3`` of this Python cannot load extensions, so ``sqlean`` is used instead.
Only integers computed here are formatted into SQL; every user value is a bound parameter.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from pathlib import Path

import numpy as np

from bench.backends.base import FILTER_KINDS, Capabilities, Client, check_metric
from bench.backends.scores import similarity
from bench.types import Hits, MemoryBatch, Where

log = logging.getLogger(__name__)
CLIENTS = (Client("sqlean", "sqlean.py", "sqlite"), Client("sqlite_vec", "sqlite-vec", "sqlite"))  # sqlite3 that loads extensions, vec0

MAX_K = 4096  # vec0 refuses larger k
DEFAULT_CHUNK = 1024  # vec0's chunk_size when none is given
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


# metric -> vec0 distance_metric and what it returns: cosine 1 - cos; l2 the Euclidean distance (not squared); no dot metric
SCORES = (("cosine", "cosine_distance"), ("l2", "l2"))


def safe_name(collection: str) -> str:
    """A file-system-safe name for a collection; names that had to change get a hash suffix (no collisions)."""
    if not isinstance(collection, str) or not collection:
        raise ValueError(f"sqlite_vec: collection must be a non-empty string (got {collection!r})")
    cleaned = _SAFE.sub("_", collection)[:100].lstrip(".")
    if cleaned == collection:
        return cleaned
    return f"{cleaned or 'c'}-{hashlib.sha1(collection.encode()).hexdigest()[:10]}"


class SqliteVecBackend:
    name = "sqlite_vec"
    capabilities = Capabilities(exact=True, filters=FILTER_KINDS - {"metadata"}, persistent=True, server=False, max_k=MAX_K, clients=CLIENTS,
                                scores=SCORES)
    reopens_cheaply = True  # one file per collection: the per-conversation layout keeps a bounded number open (bench.backends.layout)
    ready_when_added = True  # add() commits: rows are searchable when it returns
    # a per-conversation collection holds one user's rows: vec0 allocates vectors a chunk at a time (1024 rows by default,
    # 1.6 MB at 384-d even for two rows), so a file per user takes chunks of 64 rows (156 KB for two rows)
    per_conversation_settings = {"chunk_size": 64}

    def __init__(self, path: str, collection: str = "recallbench", chunk_size: int | None = None, metric: str = "cosine") -> None:
        """chunk_size: rows per vec0 vector chunk of a new table (a positive multiple of 8; None = vec0's 1024).
        metric: cosine | l2 (vec0's distance_metric; bench.backends.scores)."""
        self.metric = metric
        self._kind = self.capabilities.native_kind(check_metric(None, self))
        if chunk_size is not None and (type(chunk_size) is not int or chunk_size <= 0 or chunk_size % 8):
            raise ValueError(f"sqlite_vec: chunk_size must be a positive multiple of 8 (got {chunk_size!r})")
        self.path = Path(path)
        self.collection = collection
        self.chunk_size = chunk_size
        self.file = self.path / f"{safe_name(collection)}.db"
        self._conn = None
        self._dim = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SqliteVecBackend(file={str(self.file)!r})"

    def open(self, *, dim: int, metric: str | None = None) -> None:
        metric = check_metric(metric, self)
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"sqlite_vec: dim must be a positive int (got {dim!r})")
        sqlean, sqlite_vec = (c.load("sqlite_vec") for c in CLIENTS)
        self.close()
        self.path.mkdir(parents=True, exist_ok=True)
        conn = sqlean.connect(str(self.file), check_same_thread=False)
        try:
            conn.enable_load_extension(True)
            sqlite_vec.load(conn)
            conn.enable_load_extension(False)
            with conn:
                conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                stored = dict(conn.execute("SELECT key, value FROM meta").fetchall())
                if stored and (stored.get("dim") != str(dim) or stored.get("metric") != metric):
                    raise ValueError(
                        f"sqlite_vec: {self.file} holds dim={stored.get('dim')} metric={stored.get('metric')}, "
                        f"asked for dim={dim} metric={metric}; use another collection or drop it"
                    )
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS memory_ids (rowid INTEGER PRIMARY KEY, memory_id TEXT NOT NULL UNIQUE)"
                )
                conn.execute(
                    "CREATE VIRTUAL TABLE IF NOT EXISTS memories USING vec0("
                    "conversation_id TEXT partition key, "
                    f"embedding float[{int(dim)}] distance_metric={metric}, "
                    "role TEXT, ts FLOAT"
                    + (f", chunk_size={int(self.chunk_size)}" if self.chunk_size and self.chunk_size != DEFAULT_CHUNK else "") + ")"
                )
                conn.executemany(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", [("dim", str(dim)), ("metric", metric)]
                )
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._dim = dim
        log.debug("sqlite_vec: opened %s (dim %d)", self.file, dim)

    def _require_open(self):
        if self._conn is None:
            raise RuntimeError(f"sqlite_vec: {self.file} is not open; call open(dim=...) first")
        return self._conn

    def add(self, batch: MemoryBatch) -> None:
        conn = self._require_open()
        vectors = np.asarray(batch.vectors, dtype=np.float32)
        if vectors.shape[1] != self._dim:
            raise ValueError(f"sqlite_vec: vector dim {vectors.shape[1]} != collection dim {self._dim}")
        last = {mid: i for i, mid in enumerate(batch.ids)}  # duplicates inside a batch: the last one wins
        order = sorted(last.values())
        for i in order:
            if not isinstance(batch.ids[i], str) or not batch.ids[i]:
                raise ValueError(f"sqlite_vec: batch row {i}: field id must be a non-empty string (got {batch.ids[i]!r})")
            if not isinstance(batch.roles[i], str):
                raise ValueError(f"sqlite_vec: batch row {i} ({batch.ids[i]}): field role must be a string")
        with self._lock, conn:
            conn.executemany("INSERT OR IGNORE INTO memory_ids (memory_id) VALUES (?)", [(batch.ids[i],) for i in order])
            rowids = [
                conn.execute("SELECT rowid FROM memory_ids WHERE memory_id = ?", (batch.ids[i],)).fetchone()[0]
                for i in order
            ]
            conn.executemany("DELETE FROM memories WHERE rowid = ?", [(r,) for r in rowids])  # replace duplicates
            conn.executemany(
                "INSERT INTO memories (rowid, conversation_id, embedding, role, ts) VALUES (?, ?, ?, ?, ?)",
                [
                    (r, str(batch.conversation_ids[i]), vectors[i].tobytes(), batch.roles[i], float(batch.timestamps[i]))
                    for r, i in zip(rowids, order)
                ],
            )

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Writes are committed and searchable when add() returns."""
        self._require_open()

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        conn = self._require_open()
        if not 0 < k <= MAX_K:
            raise ValueError(f"sqlite_vec: k must be in 1..{MAX_K} (got {k})")
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self._dim:
            raise ValueError(f"sqlite_vec: query dim {q.shape[0]} != collection dim {self._dim}")
        if where.roles is not None and len(where.roles) == 0:
            return Hits()
        clauses, params = ["embedding MATCH ?", "k = ?"], [q.tobytes(), int(k)]
        if where.conversation_id is not None:
            clauses.append("conversation_id = ?")
            params.append(where.conversation_id)
        if where.roles is not None:
            clauses.append(f"role IN ({', '.join('?' * len(where.roles))})")
            params.extend(where.roles)
        if where.before is not None:
            clauses.append("ts <= ?")
            params.append(float(where.before))
        sql = (
            f"WITH knn AS (SELECT rowid, distance FROM memories WHERE {' AND '.join(clauses)}) "
            "SELECT memory_ids.memory_id, knn.distance FROM knn JOIN memory_ids ON memory_ids.rowid = knn.rowid "
            "ORDER BY knn.distance, memory_ids.memory_id"
        )
        with self._lock:
            rows = conn.execute(sql, params).fetchall()
        if not rows:
            return Hits()
        ids, distances = zip(*rows)  # already best first: ORDER BY distance, then id
        return Hits(ids, tuple(similarity(self._kind, d) for d in distances), tuple(map(float, distances)))

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        clauses, params = ["embedding MATCH ?", "k = ?"], [vector.tobytes(), k]
        if where.conversation_id is not None:
            clauses.append("conversation_id = ?")
            params.append(where.conversation_id)
        if where.roles is not None:
            clauses.append(f"role IN ({', '.join('?' * len(where.roles))})")
            params.extend(where.roles)
        if where.before is not None:
            clauses.append("ts <= ?")
            params.append(where.before)
        rows = self._conn.execute(
            f"WITH knn AS (SELECT rowid, distance FROM memories WHERE {' AND '.join(clauses)}) "
            "SELECT memory_ids.memory_id, knn.distance FROM knn JOIN memory_ids ON memory_ids.rowid = knn.rowid", params
        ).fetchall()
        return [i for i, _ in rows], [similarity(self._kind, d) for _, d in rows]

    def count(self) -> int:
        conn = self._require_open()
        with self._lock:
            return int(conn.execute("SELECT count(*) FROM memory_ids").fetchone()[0])

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def list_collections(self) -> list[str]:
        """Collections with a file in ``path`` (file stems: a collection's name when it needed no cleaning)."""
        return sorted(f.stem for f in self.path.glob("*.db")) if self.path.is_dir() else []

    def drop(self) -> None:
        self.close()
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                os.remove(f"{self.file}{suffix}")
            except FileNotFoundError:
                pass
        log.debug("sqlite_vec: dropped %s", self.file)
