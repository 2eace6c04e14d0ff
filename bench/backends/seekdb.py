"""seekdb store (pyseekdb 1.4): one adapter, two modes — embedded (``path``) and server (``host``/``port``).

Owns: the collection (HNSW, cosine distance, ``embedding_function=None``), metadata keys
``conversation_id``, ``role``, ``ts`` filtered as seekdb pre-filters (``$eq``, ``$in``, ``$lte``),
the per-connection session variables, the async-index wait, the restart warm-up, and the
one-embedded-instance-per-process guard.

Facts it is built on (FACTS.md, re-checked with pyseekdb 1.4.0.post1):
- cosine distance = 1 - cos, ascending (``metric: cosine``); ``metric: l2``: the Euclidean distance, not squared;
  converted by ``bench.backends.scores`` only (the distance kept as the native score). ``inner_product`` is
  never offered (sorted the wrong way in this version).
- ``HNSWConfiguration(ef_search=...)`` is ignored at query time: the session variable
  ``ob_hnsw_ef_search`` decides. Each search runs with ef = max(``ef_search``, k); the variable is
  set on the connection only when that value changes.
- The vector index is updated asynchronously: rows are invisible to vector queries for 0.1-0.3 s
  after small writes, up to ~24 s after a 20k bulk load. ``wait_ready`` polls real searches for
  one probe row per written chunk and calls ``refresh_index()`` when they lag.
- ``refresh_index()`` (``CALL dbms_index_manager.refresh()``) waits for the change stream behind the
  async index with its own fixed ~30 s limit, whatever ``ob_query_timeout`` says: it fails with error
  4012 (Timeout) when the index needs longer (14,726 x 1536 on a loaded 2-core machine). That is
  "not caught up yet", not a failure: ``wait_ready`` keeps polling and calls it again, within its
  own ``timeout_s``.
- After a restart the first vector query reloads the index (24-27 s on 20k rows), more than the
  default 10 s ``ob_query_timeout``: the timeout is raised (``query_timeout_s``) and ``open`` runs a
  warm-up query on a non-empty collection.
- Embedded: the server binary runs as a child process, one instance per Python process; a second
  ``Client(path=B)`` silently attaches to instance A. This module records the path in use: opening
  another path while a backend on the first is open raises ``EmbeddedInstanceInUse``; once every
  backend on it is closed, the instance is shut down and the new path opened (~2 s). A closed
  backend leaves the instance running, so close()+open() on the same path is instant.
- A metadata filter (``where``) is evaluated on every row of the collection before the HNSW search: at LongMemEval_S
  size (245,613 rows, 498 users in one collection) 498 searches filtered by user did not finish in 12 minutes. A
  generated column holding the conversation id with a B-tree index, added while the table is empty, is read through
  that index by plain SQL (``conversation_index``): 100,000 rows of 200 users, k=10: 3.2 ms, exact; the same index
  created on the filled table did not finish in 15 minutes. ``APPROXIMATE`` with that filter returned no rows, so the
  scan is exact (no ``APPROXIMATE``).
- ``add`` has upsert semantics: a chunk with an id already stored is re-written (delete + insert).
- Injection safety: pyseekdb writes ids and metadata as string literals escaped with
  ``pymysql.escape_string`` (filter values are bound parameters in server mode and rendered with the
  same escaping in embedded mode). That escaping is only safe while the session's ``sql_mode`` lacks
  ``NO_BACKSLASH_ESCAPES`` (with it, a value holding a quote breaks out of its literal), so every
  session this adapter opens removes that mode. Collection names are reduced to ``[A-Za-z0-9_]``
  (``safe_collection_name``); only integers computed here are formatted into SQL.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import logging
import math
import os
import re
import threading
import time
import weakref

import numpy as np

from bench.backends.base import (
    FILTER_KINDS,
    BackendUnavailable,
    Capabilities,
    Client,
    check_metric,
    native_hits,
    client_collections,
    import_client,
    mongo_filter,
    store_metadata,
)
from bench.output import check_env_name
from bench.backends.scores import similarity
from bench.types import Hits, MemoryBatch, Where

log = logging.getLogger(__name__)
CLIENTS = (Client("pyseekdb", "pyseekdb", "seekdb"), Client("pylibseekdb", "pylibseekdb", "seekdb"))  # client, embedded server

MAX_K = 16_384  # pyseekdb's n_results bound (OceanBase vector-search k limit)
_PROBE_K = 20  # neighbours fetched when checking that a probe row is searchable
CONV_COLUMN = "rb_conversation"  # the generated, indexed conversation id column (``conversation_index``)
MAX_CONV_BYTES = 512
_REFRESH_LIMIT_S = 30.0  # server-side limit of CALL dbms_index_manager.refresh() (error 4012 after it)
_SETTLE_S = 10.0  # probes polled this long after refresh_index() returned before a stored, unfound one is let go


class EmbeddedInstanceInUse(RuntimeError):
    """A second embedded seekdb path was opened while the first is still in use in this process."""


# Client connections shared by backends with ``share_client`` (per-conversation collections): place -> [client, users].
_SHARED_LOCK = threading.Lock()
_SHARED: dict[tuple, list] = {}

# One embedded seekdb instance per process: the path it serves and how many open backends use it.
_EMBEDDED_LOCK = threading.Lock()
_EMBEDDED: dict[str, object] = {"path": None, "users": 0}


# metric -> what seekdb returns (FACTS.md, pyseekdb 1.4.0.post1): cosine 1 - cos; l2 the Euclidean distance (not
# squared). Not ip: its inner_product search returns the k LEAST similar rows (a bug of that release).
SCORES = (("cosine", "cosine_distance"), ("l2", "l2"))


def safe_collection_name(name: str) -> str:
    """seekdb collection names allow only [a-zA-Z0-9_]; anything else is replaced, plus a hash suffix."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"seekdb: collection must be a non-empty string (got {name!r})")
    clean = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if clean != name:
        clean = f"{clean}_{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    if len(clean) > 200:
        clean = f"{clean[:191]}_{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return clean


def _embedded_children() -> list[int]:
    """Process ids of this process's embedded seekdb children (Linux /proc)."""
    pids = []
    for f in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        try:
            pids += [int(p) for p in open(f).read().split()]
        except OSError:
            continue
    out = []
    for pid in set(pids):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"/seekdb") and b"--embedded" in cmd:
            out.append(pid)
    return out


def _acquire_embedded(path: str) -> None:
    with _EMBEDDED_LOCK:
        current = _EMBEDDED["path"]
        if current is not None and current != path:
            if int(_EMBEDDED["users"]) > 0:
                raise EmbeddedInstanceInUse(
                    f"seekdb: this process already serves embedded path {current!r} "
                    f"({_EMBEDDED['users']} open backend(s)); one embedded instance per process, so "
                    f"{path!r} cannot be opened until they are closed (run it in another process, "
                    "or use the seekdb server mode)"
                )
            _shutdown_embedded(str(current))
        _EMBEDDED["path"] = path
        _EMBEDDED["users"] = int(_EMBEDDED["users"]) + 1


def _release_embedded(path: str) -> None:
    with _EMBEDDED_LOCK:
        if _EMBEDDED["path"] == path and int(_EMBEDDED["users"]) > 0:
            _EMBEDDED["users"] = int(_EMBEDDED["users"]) - 1


def _shutdown_embedded(path: str) -> None:
    """Close the process's embedded instance (serving ``path``) and reap its child process."""
    pylibseekdb = CLIENTS[1].load("seekdb")

    children = _embedded_children()
    log.info("seekdb: closing the embedded instance on %s to open another path", path)
    pylibseekdb.close()
    deadline = time.monotonic() + 10.0
    for pid in children:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done or time.monotonic() > deadline:
                if not done:
                    log.warning("seekdb: embedded child %d still running 10 s after close", pid)
                break
            time.sleep(0.05)


class SeekdbBackend:
    """seekdb via pyseekdb. Embedded when ``host`` is None (``path`` required), else a seekdb server."""

    name = "seekdb"
    capabilities = Capabilities(exact=False, filters=FILTER_KINDS, persistent=True, server=False, max_k=MAX_K, clients=CLIENTS,
                                scores=SCORES)
    # a per-conversation collection shares one client connection with the others of its place (``share_client``): a
    # connection each cost a file descriptor here and one in the server per user (measured: 500 users, 510 + ~500 fds),
    # closing and reopening them ~18-45 ms per search; shared, a collection is a handle in this process and the
    # collections' rows and indexes live in the server, whose memory seekdb itself manages (bench.backends.layout)
    per_conversation_settings = {"share_client": True, "conversation_index": False}

    def __init__(
        self,
        collection: str = "recallbench",
        path: str | None = None,
        host: str | None = None,
        port: int = 2881,
        tenant: str = "sys",
        database: str = "test",
        user: str = "root",
        password_env: str | None = None,
        ef_search: int = 200,
        ef_construction: int = 200,
        m: int = 16,
        query_timeout_s: float = 120.0,
        batch_size: int = 500,
        refresh_after_s: float = 1.0,
        metric: str = "cosine",
        share_client: bool | None = None,
        conversation_index: bool | None = None,
    ) -> None:
        """share_client: use one client connection with every other backend of this process on the same place (path,
        or host, port, tenant, database and user) that shares too, closed with the last of them (None: no, except in
        a per-conversation collection, ``per_conversation_settings``).

        conversation_index: a new collection gets a generated column holding each row's conversation id, with a
        B-tree index on it, and a search within one conversation reads that conversation's rows through the index and
        ranks them exactly (role, time and metadata filters applied in the same statement) instead of asking the HNSW
        index with a metadata filter, which scans every row of the collection (None: yes, except in a
        per-conversation collection, where every row is the conversation's). A collection created without the
        column keeps the filtered HNSW search, said once when it is opened."""
        if host is None and not path:
            raise ValueError("seekdb: give `path` (embedded mode) or `host` (server mode)")
        self.share_client = share_client
        self.conversation_index = conversation_index
        for field, value in (("ef_search", ef_search), ("ef_construction", ef_construction), ("m", m),
                             ("batch_size", batch_size), ("port", port)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"seekdb: {field} must be a positive integer (got {value!r})")
        if not query_timeout_s or query_timeout_s <= 0:
            raise ValueError(f"seekdb: query_timeout_s must be positive (got {query_timeout_s!r})")
        if host is not None:
            self.name = "seekdb_server"
            self.capabilities = Capabilities(exact=False, filters=FILTER_KINDS, persistent=True, server=True,
                                             max_k=MAX_K, local_server="seekdb", clients=CLIENTS, scores=SCORES)
        self.metric = metric  # the HNSW distance (cosine | l2), fixed when the collection is created
        self._kind = self.capabilities.native_kind(check_metric(None, self))
        self.collection = collection
        self._table = safe_collection_name(collection)
        self.path = os.path.abspath(path) if (path and host is None) else None
        self.host, self.port, self.tenant, self.database, self.user = host, port, tenant, database, user
        check_env_name("seekdb: password_env", password_env)  # a password typed here is refused without echo
        self.password_env = password_env
        self.ef_search = ef_search
        self.ef_construction = ef_construction
        self.m = m
        self.query_timeout_s = float(query_timeout_s)
        self.batch_size = batch_size
        self.refresh_after_s = refresh_after_s
        self._client = None
        self._col = None
        self._dim = 0
        self._conn = None  # raw connection the session variables were applied to
        self._ef_now = 0
        self._hold = None  # weakref.finalize releasing the embedded instance (also if never closed)
        self._probes: list[tuple[str, list[float]]] = []
        self._conv_table: str | None = None  # the collection's table when it has the indexed conversation column

    # ---------------------------------------------------------------- connection

    def _where(self) -> str:
        return f"embedded {self.path}" if self.host is None else f"server {self.host}:{self.port}"

    def _place(self) -> tuple:
        return (self.path,) if self.host is None else (self.host, self.port, self.tenant, self.database, self.user)

    def _connect(self) -> None:
        if self._client is not None:
            return
        if self.share_client:
            with _SHARED_LOCK:
                entry = _SHARED.get(self._place())
                if entry is not None:
                    if self.host is None:
                        _acquire_embedded(self.path)
                        self._hold = weakref.finalize(self, _release_embedded, self.path)
                    entry[1] += 1
                    self._client = entry[0]
                    self._session()
                    return
        self._connect_own()
        if self.share_client:
            with _SHARED_LOCK:
                _SHARED[self._place()] = [self._client, 1]

    def _connect_own(self) -> None:
        pyseekdb = _client("pyseekdb")
        if self.host is None:
            _acquire_embedded(self.path)
            self._hold = weakref.finalize(self, _release_embedded, self.path)
            try:
                self._client = pyseekdb.Client(path=self.path, database=self.database)
                self._session()
            except Exception:
                self._client = None
                self._hold()
                raise
            return
        password = ""
        if self.password_env:
            password = os.environ.get(self.password_env, "")
            if not password:
                log.debug("seekdb: environment variable %s is empty or unset; no password", self.password_env)
        client = pyseekdb.Client(host=self.host, port=self.port, tenant=self.tenant, database=self.database,
                                 user=self.user, password=password, connect_timeout=10,
                                 read_timeout=self.query_timeout_s + 60, write_timeout=self.query_timeout_s + 60)
        try:
            client._server.get_raw_connection()
        except Exception as exc:  # pymysql OperationalError: refused, unknown host, access denied
            raise BackendUnavailable(
                f"seekdb server {self.host}:{self.port} (user {self.user}@{self.tenant}, database "
                f"{self.database}) is unavailable: {type(exc).__name__}: {exc}"
            ) from exc
        self._client = client
        self._session()

    def _session(self):
        """The server connection with this backend's session variables applied (again after a reconnect)."""
        server = self._client._server
        conn = server.get_raw_connection()
        if conn is not self._conn:
            _backslash_escapes_on(server)
            server._execute(f"SET ob_query_timeout = {int(self.query_timeout_s * 1_000_000)}")
            server._execute(f"SET ob_hnsw_ef_search = {self.ef_search}")
            self._conn, self._ef_now = conn, self.ef_search
        return server

    def _set_ef(self, ef: int) -> None:
        server = self._session()
        if ef != self._ef_now:
            server._execute(f"SET ob_hnsw_ef_search = {int(ef)}")
            self._ef_now = ef

    def _disconnect(self) -> None:
        if self._client is not None and self.share_client:
            with _SHARED_LOCK:
                entry = _SHARED.get(self._place())
                if entry is not None and entry[0] is self._client:
                    entry[1] -= 1
                    if entry[1] > 0:  # others still use it
                        self._client = self._col = self._conn = None
                        if self._hold is not None:
                            self._hold()
                            self._hold = None
                        return
                    del _SHARED[self._place()]
        if self._client is not None:
            try:
                self._client._server._cleanup()
            except Exception as exc:  # closing a dead connection
                log.debug("seekdb: closing the connection failed: %s", exc)
        self._client = self._col = self._conn = None
        if self._hold is not None:
            self._hold()  # runs _release_embedded once
            self._hold = None

    # ---------------------------------------------------------------- contract

    def open(self, *, dim: int, metric: str | None = None) -> None:
        check_metric(metric, self)
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"seekdb: dim must be a positive integer (got {dim!r})")
        was_connected = self._client is not None
        self._connect()
        try:
            self._open_collection(dim)
        except Exception:
            if not was_connected:  # leave no connection (nor a hold on the embedded instance) behind
                self._disconnect()
            raise

    def _open_collection(self, dim: int) -> None:
        pyseekdb = _client("pyseekdb")
        client = self._client
        if client.has_collection(self._table):
            col = client.get_collection(self._table, embedding_function=None)
            if col.dimension != dim or str(col.distance).lower() != self.metric:
                raise ValueError(
                    f"seekdb ({self._where()}): collection {self.collection!r} exists with dimension "
                    f"{col.dimension} and distance {col.distance!r}; this run needs dimension {dim}, {self.metric} "
                    "(use another collection name or drop it)"
                )
            self._col, self._dim = col, dim
            self._conv_table = self._indexed_table(create=False)
            self._warm_up()
        else:
            config = pyseekdb.HNSWConfiguration(dimension=dim, distance=self.metric, M=self.m,
                                                ef_construction=self.ef_construction)
            self._col = client.create_collection(self._table, configuration=config, embedding_function=None)
            self._dim = dim
            self._conv_table = self._indexed_table(create=True)
            log.info("seekdb (%s): created collection %s (dim %d)", self._where(), self._table, dim)

    def _indexed_table(self, *, create: bool) -> str | None:
        """The collection's table name when conversation filters go through ``CONV_COLUMN``: added with its index
        when ``create`` (an empty table: adding it later re-indexes every row), else looked up; None otherwise."""
        if self.conversation_index is False:
            return None
        col = self._col
        table = f"c$v2${col.id}" if getattr(col, "id", None) else f"c$v1${col.name}"  # pyseekdb's CollectionNames
        if not re.fullmatch(r"c\$v[12]\$[A-Za-z0-9_]+", table):
            raise RuntimeError(f"seekdb: unexpected table name {table!r} for collection {self.collection!r}")
        server = self._session()
        if create:
            server._execute(f"ALTER TABLE `{table}` ADD COLUMN {CONV_COLUMN} VARCHAR({MAX_CONV_BYTES}) GENERATED ALWAYS "
                            "AS (JSON_UNQUOTE(JSON_EXTRACT(metadata, '$.conversation_id'))) VIRTUAL")
            server._execute(f"CREATE INDEX idx_{CONV_COLUMN} ON `{table}` ({CONV_COLUMN})")
            return table
        if any(_first(row) == CONV_COLUMN for row in server._execute(f"SHOW COLUMNS FROM `{table}`")):
            return table
        log.info("seekdb (%s): collection %s was created without the indexed conversation column; a search within "
                 "one conversation asks the HNSW index with a filter that scans every row (recreate the collection "
                 "to index it)", self._where(), self._table)
        return None

    def _warm_up(self) -> None:
        """First vector query after a (re)start reloads the index: run it now, not in a timed search."""
        if self._col.count() == 0:
            return
        t0 = time.monotonic()
        self._session()
        self._col.query(query_embeddings=[0.0] * (self._dim - 1) + [1.0], n_results=1, include=[])
        log.info("seekdb (%s): warm-up query on %s took %.2f s", self._where(), self._table, time.monotonic() - t0)

    def _require_open(self) -> None:
        if self._col is None:
            raise RuntimeError(f"seekdb: collection {self.collection!r} is not open (call open(dim=...) first)")

    def add(self, batch: MemoryBatch) -> None:
        self._require_open()
        vectors = np.asarray(batch.vectors, dtype=np.float32)
        if vectors.shape[1] != self._dim:
            raise ValueError(f"seekdb: vector dim {vectors.shape[1]} != collection dim {self._dim}")
        if len(batch.ids) == 0:
            return
        if not np.isfinite(vectors).all():
            bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise ValueError(f"seekdb: vector of id {batch.ids[bad]!r} has NaN/inf values")
        for i, (mid, conv, role, ts) in enumerate(zip(batch.ids, batch.conversation_ids, batch.roles,
                                                      batch.timestamps, strict=True)):
            if not isinstance(mid, str) or not mid or len(mid.encode()) > 512:
                raise ValueError(f"seekdb: batch row {i}: id must be a non-empty string of <= 512 bytes (got {mid!r})")
            if not isinstance(ts, (int, float)) or not math.isfinite(ts):
                raise ValueError(f"seekdb: batch row {i} (id {mid!r}): timestamp must be a finite number (got {ts!r})")
            if self._conv_table is not None and len(str(conv).encode()) > MAX_CONV_BYTES:
                raise ValueError(f"seekdb: batch row {i} (id {mid!r}): conversation id of {len(str(conv).encode())} bytes; "
                                 f"the indexed conversation column holds <= {MAX_CONV_BYTES} (conversation_index: false "
                                 "stores it in the metadata only)")
        self._session()
        for start in range(0, len(batch.ids), self.batch_size):
            end = min(start + self.batch_size, len(batch.ids))
            ids = list(batch.ids[start:end])
            embeddings = vectors[start:end].tolist()
            metadatas = [
                {"conversation_id": str(c), "role": str(r), "ts": float(t)}
                for c, r, t in zip(batch.conversation_ids[start:end], batch.roles[start:end],
                                   batch.timestamps[start:end], strict=True)
            ]
            if batch.metadata:  # the corpus's own fields (bench.backends.base.store_metadata)
                metadatas = [{**m, **store_metadata(batch, start + j)} for j, m in enumerate(metadatas)]
            try:
                self._col.add(ids=ids, embeddings=embeddings, metadatas=metadatas)
            except Exception as exc:
                if "Duplicate entry" not in str(exc) and "1062" not in str(exc):
                    raise
                log.debug("seekdb: chunk has stored ids; re-writing it (upsert)")
                self._col.delete(ids=ids)
                self._col.add(ids=ids, embeddings=embeddings, metadatas=metadatas)
            self._probes.append((ids[-1], embeddings[-1]))

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Poll real searches until one probe row per written chunk is found; refresh the index if it lags. Probes
        still missing ``_SETTLE_S`` after a refresh that returned, whose rows are stored, are rows the approximate
        search does not return for their own vector (the index holds them): said once, not waited for."""
        self._require_open()
        if not self._probes:
            return
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        refreshed = None  # when refresh_index() returned
        refresh_timeouts = 0
        pause = 0.05
        while True:
            self._set_ef(max(self.ef_search, _PROBE_K))
            self._probes = [p for p in self._probes if not self._probe_found(*p)]
            if not self._probes:
                log.debug("seekdb: written rows searchable after %.2f s", time.monotonic() - t0)
                return
            now = time.monotonic()
            if refreshed is not None and now - refreshed >= _SETTLE_S and self._all_stored([m for m, _ in self._probes]):
                log.info("seekdb (%s): %d probe row(s) of collection %r (e.g. id %r) are stored and the index refreshed "
                         "%.0f s ago, but the approximate search does not return them among their own vector's %d "
                         "nearest; not waiting for them", self._where(), len(self._probes), self.collection,
                         self._probes[0][0], now - refreshed, _PROBE_K)
                self._probes = []
                return
            if now >= deadline:
                raise TimeoutError(
                    f"seekdb ({self._where()}): {len(self._probes)} written chunk(s) of collection "
                    f"{self.collection!r} still not returned by search after {timeout_s:.0f} s "
                    f"(e.g. id {self._probes[0][0]!r}); the async vector index has not caught up"
                )
            # refresh_index() blocks up to _REFRESH_LIMIT_S and then fails with 4012 while the index is
            # still catching up (not broken): called again after each 4012 while that fits before the deadline.
            if (refreshed is None and now - t0 >= self.refresh_after_s
                    and (refresh_timeouts == 0 or deadline - now >= _REFRESH_LIMIT_S)):
                log.debug("seekdb: index lags after %.1f s; calling refresh_index()", now - t0)
                try:
                    self._col.refresh_index()
                    refreshed = time.monotonic()
                except Exception as exc:
                    if not _is_timeout(exc):
                        raise
                    refresh_timeouts += 1
                    log.info("seekdb (%s): refresh_index() timed out (%d time(s), %.0f s into wait_ready; "
                             "%d chunk(s) not searchable yet); polling and refreshing again",
                             self._where(), refresh_timeouts, time.monotonic() - t0, len(self._probes))
                continue
            time.sleep(min(pause, max(0.0, deadline - now)))
            pause = min(pause * 2, 0.5)

    def _all_stored(self, ids: list[str]) -> bool:
        return set(self._col.get(ids=ids, include=[])["ids"]) >= set(ids)

    def _probe_found(self, mid: str, vector: list[float]) -> bool:
        res = self._col.query(query_embeddings=vector, n_results=_PROBE_K, include=[])
        ids, dists = res["ids"][0], res["distances"][0]
        if mid in ids:
            return True
        # Crowded out by >= _PROBE_K exact duplicates of its vector: those rows are searchable.
        return len(ids) == _PROBE_K and float(dists[-1]) <= 1e-6

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        self._require_open()
        if not isinstance(k, (int, np.integer)) or k <= 0:
            raise ValueError(f"seekdb: k must be a positive integer (got {k!r})")
        if k > MAX_K:
            raise ValueError(f"seekdb: k={k} exceeds the store's limit of {MAX_K} neighbours per query")
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self._dim:
            raise ValueError(f"seekdb: query dim {q.shape[0]} != collection dim {self._dim}")
        if where.roles is not None and len(where.roles) == 0:
            return Hits()
        if self._conv_table is not None and where.conversation_id is not None:
            ids, dists = self._conversation_scan(q, k=int(k), where=where)
            return native_hits(ids, dists, self._kind)
        self._set_ef(max(self.ef_search, int(k)))
        res = self._col.query(query_embeddings=q.tolist(), n_results=int(k), where=_native_filter(where), include=[])
        ids = [m.decode() if isinstance(m, bytes) else str(m) for m in res["ids"][0]]
        return native_hits(ids, res["distances"][0], self._kind)

    def _conversation_scan(self, q: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        """The k nearest rows of one conversation, exactly: its rows found through the conversation column's index,
        each one's distance computed, the other filters rendered by pyseekdb's own filter builder (bound values)."""
        from pyseekdb.client.filters import FilterBuilder

        server = self._session()
        rest = _native_filter(dataclasses.replace(where, conversation_id=None))
        clause, params = FilterBuilder.build_metadata_filter(rest, "metadata") if rest else ("", [])
        fn = "cosine_distance" if self.metric == "cosine" else "l2_distance"
        vec = "X'" + q.astype("<f4").tobytes().hex() + "'"  # pyseekdb's vector literal (its _embedding_to_hexstring)
        sql = (f"SELECT _id, {fn}(embedding, {vec}) AS distance FROM `{self._conv_table}` WHERE {CONV_COLUMN} = %s"
               f"{' AND ' + clause if clause else ''} ORDER BY distance, _id LIMIT {int(k)}")
        rows = server._execute_query_with_cursor(server.get_raw_connection(), sql, [str(where.conversation_id), *params])
        return ([r["_id"].decode() if isinstance(r["_id"], bytes) else str(r["_id"]) for r in rows],
                [float(r["distance"]) for r in rows])

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        """With the connection's current ``ob_hnsw_ef_search`` (``search`` sets it to max(ef_search, k))."""
        res = self._col.query(query_embeddings=vector.tolist(), n_results=k, where=_native_filter(where), include=[])
        return res["ids"][0], [similarity(self._kind, d) for d in res["distances"][0]]

    def close(self) -> None:
        self._probes = []
        self._disconnect()

    def list_collections(self) -> list[str]:
        """Names of the collections this client's database holds (connects if needed; creates nothing)."""
        return client_collections(self)

    def drop(self) -> None:
        was_open = self._col is not None
        try:
            self._connect()
            if self._client.has_collection(self._table):
                self._client.delete_collection(self._table)
                log.info("seekdb (%s): dropped collection %s", self._where(), self._table)
        finally:
            self._col = None
            self._probes = []
            if not was_open:
                self._disconnect()


def _is_timeout(exc: BaseException) -> bool:
    """seekdb error 4012 (Timeout): pymysql ``(4012, msg)`` in server mode, ``SeekdbError('... code=4012')`` embedded."""
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int) and abs(args[0]) == 4012:
        return True
    text = str(exc).lower()
    return "code=4012" in text or "code=-4012" in text


def _backslash_escapes_on(server) -> None:
    """Remove NO_BACKSLASH_ESCAPES from the session's sql_mode (pyseekdb's literal escaping relies on it)."""
    rows = server._execute("SELECT @@sql_mode AS sql_mode")
    row = rows[0] if rows else ("",)
    mode = str(_first(row) or "")
    parts = [m for m in mode.upper().split(",") if m]
    if "NO_BACKSLASH_ESCAPES" not in parts:
        return
    safe = ",".join(m for m in parts if m != "NO_BACKSLASH_ESCAPES")
    if not re.fullmatch(r"[A-Z_,]*", safe):
        raise RuntimeError(f"seekdb: unexpected sql_mode {mode!r}; refusing to run with NO_BACKSLASH_ESCAPES")
    server._execute(f"SET SESSION sql_mode = '{safe}'")
    log.info("seekdb: removed NO_BACKSLASH_ESCAPES from the session sql_mode (string escaping relies on backslashes)")


def _first(row):
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def _native_filter(where: Where) -> dict | None:
    return mongo_filter(where, "seekdb")


def _client(module: str):
    return import_client(module, store="seekdb", package=CLIENTS[0].package, extra=CLIENTS[0].extra)
