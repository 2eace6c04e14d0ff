"""LanceDB store (lancedb 0.40): embedded, one Lance table per collection in the directory ``path``.

Owns the LanceDB adapter. Table columns: ``id`` (string), ``vector`` (fixed-size list of float32),
``conversation_id``, ``role`` (strings), ``ts`` (float64). The table has NO vector index, so every
search is LanceDB's flat scan: brute force, exact (the contract test checks it against numpy; a
store with an IVF/HNSW index would be approximate and say so in ``capabilities``).

- Cosine distance (``distance_type("cosine")``) is 1 - cos in float32; ``_similarity`` turns it into
  the similarity. Hits go through ``best_first`` (ties by id).
- Filters are SQL predicates applied before the top-k (``where(..., prefilter=True)``):
  ``conversation_id = '...'``, ``role IN (...)``, ``ts <= x``. String values are quoted by doubling
  single quotes (``_quote``), the SQL standard LanceDB's parser follows; only floats computed here
  are formatted as numbers. ``wait_ready`` (re)builds a BTree scalar index on ``conversation_id`` after
  writes, so the per-conversation pre-filter reads that conversation's rows only.
- ``add`` is an upsert (``merge_insert`` on ``id``): re-adding an id replaces its row. A write is
  visible to this process's searches when ``add`` returns; ``wait_ready`` still checks, in one scan
  of the ``id`` column, that every id written since the last call is stored (a stored row is found by
  every flat scan whose filter it matches).
- Table names are the collection reduced to ``[A-Za-z0-9_.-]`` (with a hash suffix when changed).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import time

import numpy as np

from bench.backends.base import (
    FILTER_KINDS,
    Capabilities,
    Client,
    check_metric,
    native_hits,
)
from bench.backends.scores import similarity
from bench.types import Hits, MemoryBatch, Where

log = logging.getLogger(__name__)
CLIENT = Client("lancedb", "lancedb", "lancedb")  # the client this store imports, and the extra that installs it

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


# metric -> what LanceDB's flat scan returns (bench.backends.scores; measured with lancedb 0.40): cosine 1 - cos,
# l2 the SQUARED Euclidean distance, ip (distance_type "dot") 1 - q.v
SCORES = (("cosine", "cosine_distance"), ("l2", "l2_squared"), ("ip", "one_minus_dot"))
_DISTANCE_TYPE = {"cosine": "cosine", "l2": "l2", "ip": "dot"}


def _quote(value: str) -> str:
    """A SQL string literal: single quotes doubled (backslashes are plain characters in LanceDB's SQL)."""
    return "'" + str(value).replace("'", "''") + "'"


def table_name(collection: str) -> str:
    """A LanceDB-valid table name for ``collection``: itself when valid, else a cleaned form plus a hash."""
    if not isinstance(collection, str) or not collection:
        raise ValueError(f"lancedb: collection must be a non-empty string (got {collection!r})")
    cleaned = _SAFE.sub("_", collection)[:100].lstrip(".")
    if cleaned == collection:
        return cleaned
    return f"{cleaned or 'c'}-{hashlib.sha1(collection.encode()).hexdigest()[:10]}"


def _predicate(where: Where) -> str | None:
    """The SQL pre-filter for ``where``; None when nothing is filtered. Raises on a NaN time."""
    clauses = []
    if where.conversation_id is not None:
        clauses.append(f"conversation_id = {_quote(where.conversation_id)}")
    if where.roles is not None:
        clauses.append(f"role IN ({', '.join(map(_quote, where.roles))})")
    if where.before is not None and where.before != math.inf:
        if math.isnan(where.before):
            raise ValueError("lancedb: Where.before is NaN")
        clauses.append(f"ts <= {float(where.before)!r}")
    return " AND ".join(clauses) or None


def _nothing_matches(where: Where) -> bool:
    return (where.roles is not None and len(where.roles) == 0) or where.before == -math.inf


class LanceDBBackend:
    name = "lancedb"
    capabilities = Capabilities(exact=True, filters=FILTER_KINDS - {"metadata"}, persistent=True, server=False, clients=(CLIENT,),
                                scores=SCORES)
    # a table handle per collection, no file held open between calls: the per-conversation layout keeps a bounded
    # number open and reopens the others when asked (bench.backends.layout; a reopen costs nothing measurable)
    reopens_cheaply = True
    ready_when_added = True  # a write is visible to this process's searches when add() returns
    # a per-conversation table holds one user's rows and is searched without a conversation filter: no scalar index
    per_conversation_settings = {"conversation_index": False}

    def __init__(self, path: str, collection: str = "recallbench", metric: str = "cosine",
                 conversation_index: bool | None = None) -> None:
        """conversation_index: build the BTree index on conversation_id in ``wait_ready`` (None: yes, except in a
        per-conversation collection, ``per_conversation_settings``)."""
        self.conversation_index = conversation_index
        self.metric = metric  # cosine | l2 | ip: the distance_type of every search (bench.backends.scores)
        self._kind = self.capabilities.native_kind(check_metric(None, self))
        if not path:
            raise ValueError("lancedb: give `path` (the database directory)")
        self.path = os.path.abspath(path)
        self.collection = collection
        self._name = table_name(collection)
        self._db = None
        self._table = None
        self._dim = 0
        self._written: set[str] = set()  # ids written since the last wait_ready()
        self._indexed = True  # the scalar index covers every row written

    def __repr__(self) -> str:
        return f"LanceDBBackend(path={self.path!r}, table={self._name!r})"

    def _connect(self):
        if self._db is None:
            lancedb = CLIENT.load("lancedb")
            os.makedirs(self.path, exist_ok=True)
            self._db = lancedb.connect(self.path)
        return self._db

    def open(self, *, dim: int, metric: str | None = None) -> None:
        check_metric(metric, self)
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"lancedb: dim must be a positive integer (got {dim!r})")
        import pyarrow as pa  # a dependency of lancedb

        db = self._connect()
        try:
            table = db.open_table(self._name)
        except ValueError:  # "Table ... was not found"
            schema = pa.schema([pa.field("id", pa.string()), pa.field("vector", pa.list_(pa.float32(), dim)),
                                pa.field("conversation_id", pa.string()), pa.field("role", pa.string()),
                                pa.field("ts", pa.float64())])
            table = db.create_table(self._name, schema=schema)
            log.info("lancedb: created table %s in %s (dim %d)", self._name, self.path, dim)
        else:
            stored = table.schema.field("vector").type.list_size
            if stored != dim:
                raise ValueError(f"lancedb: table {self._name!r} in {self.path} holds dim={stored}, asked for dim={dim}; "
                                 "use another collection or drop it")
        self._table, self._dim, self._written = table, dim, set()

    def _require_open(self):
        if self._table is None:
            raise RuntimeError(f"lancedb: collection {self.collection!r} is not open (call open(dim=...) first)")
        return self._table

    def add(self, batch: MemoryBatch) -> None:
        import pyarrow as pa

        table = self._require_open()
        vectors = np.ascontiguousarray(batch.vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self._dim:
            raise ValueError(f"lancedb: vector dim {vectors.shape[-1]} != collection dim {self._dim}")
        if len(batch.ids) == 0:
            return
        if not np.isfinite(vectors).all():
            bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise ValueError(f"lancedb: vector of id {batch.ids[bad]!r} has NaN/inf values")
        last = {mid: i for i, mid in enumerate(batch.ids)}  # duplicates inside a batch: the last one wins
        rows = sorted(last.values())
        for i in rows:
            if not isinstance(batch.ids[i], str) or not batch.ids[i]:
                raise ValueError(f"lancedb: batch row {i}: field id must be a non-empty string (got {batch.ids[i]!r})")
            ts = batch.timestamps[i]
            if not isinstance(ts, (int, float)) or not math.isfinite(ts):
                raise ValueError(f"lancedb: batch row {i} (id {batch.ids[i]!r}): field timestamp must be a finite number")
        data = pa.table({
            "id": [batch.ids[i] for i in rows],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors[rows].reshape(-1)), self._dim),
            "conversation_id": [str(batch.conversation_ids[i]) for i in rows],
            "role": [str(batch.roles[i]) for i in rows],
            "ts": [float(batch.timestamps[i]) for i in rows],
        }, schema=table.schema)
        table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(data)
        self._written.update(data["id"].to_pylist())
        self._indexed = False

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Check that every id written since the last call is stored (one scan of the id column, polled until
        ``timeout_s``), then (re)build the scalar index on conversation_id."""
        table = self._require_open()
        t0 = time.monotonic()
        pause = 0.05
        while self._written:
            stored = set(table.search().select(["id"]).limit(None).to_arrow()["id"].to_pylist())
            self._written -= stored
            if not self._written:
                break
            if time.monotonic() - t0 >= timeout_s:
                raise TimeoutError(f"lancedb: {len(self._written)} written row(s) of table {self._name!r} still not stored "
                                   f"after {timeout_s:.0f} s (e.g. id {next(iter(self._written))!r})")
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
        if not self._indexed and self.conversation_index is not False:
            from lancedb.index import BTree

            table.create_index("conversation_id", config=BTree(), replace=True)
            self._indexed = True

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        table = self._require_open()
        if not isinstance(k, (int, np.integer)) or k <= 0:
            raise ValueError(f"lancedb: k must be a positive integer (got {k!r})")
        if k > self.capabilities.max_k:
            raise ValueError(f"lancedb: k={k} exceeds max_k={self.capabilities.max_k}")
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self._dim:
            raise ValueError(f"lancedb: query dim {q.shape[0]} != collection dim {self._dim}")
        if _nothing_matches(where):
            return Hits()
        query = table.search(q).distance_type(_DISTANCE_TYPE[self.metric]).limit(int(k)).select(["id", "_distance"])
        predicate = _predicate(where)
        if predicate is not None:
            query = query.where(predicate, prefilter=True)
        res = query.to_arrow()
        return native_hits(res["id"].to_pylist(), res["_distance"].to_pylist(), self._kind)

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        query = self._table.search(vector).distance_type(_DISTANCE_TYPE[self.metric]).limit(k).select(["id", "_distance"])
        if where != Where():
            query = query.where(_predicate(where), prefilter=True)
        res = query.to_arrow()
        return res["id"].to_pylist(), [similarity(self._kind, d) for d in res["_distance"].to_pylist()]

    def close(self) -> None:
        self._table = self._db = None
        self._written = set()

    def list_collections(self) -> list[str]:
        """Names of the tables in ``path`` (creates nothing when the directory does not exist)."""
        if not os.path.isdir(self.path):
            return []
        db = self._connect()
        names = db.list_tables() if hasattr(db, "list_tables") else db.table_names()
        return list(getattr(names, "tables", names))

    def drop(self) -> None:
        """Delete the table and its files. Idempotent; works after close()."""
        if not os.path.isdir(self.path):
            return
        self._connect().drop_table(self._name, ignore_missing=True)
        self._table, self._written, self._indexed = None, set(), True
        log.debug("lancedb: dropped table %s in %s", self._name, self.path)
