"""Per-conversation layout with a bounded number of open collections (bench.backends.layout, issue 29)."""

import errno
import resource

import numpy as np
import pytest

from bench.backends.layout import MAX_OPEN, PerConversation, build_store, default_max_open, sub_collection
from bench.types import MemoryBatch, Where

DIM = 4


def batch(convs):
    """Two rows per conversation: a user turn along e0, an assistant turn along e1."""
    ids, vecs, cs, roles = [], [], [], []
    for c in convs:
        for j, role in enumerate(("user", "assistant")):
            ids.append(f"{c}-{j}")
            v = np.zeros(DIM, np.float32)
            v[j] = 1.0
            vecs.append(v)
            cs.append(c)
            roles.append(role)
    return MemoryBatch(ids=tuple(ids), vectors=np.array(vecs), conversation_ids=tuple(cs), roles=tuple(roles),
                       timestamps=tuple(1.0 for _ in ids))


def sqlite_store(tmp_path, **kw):
    pytest.importorskip("sqlite_vec")
    return build_store({"_target_": "bench.backends.sqlite_vec.SqliteVecBackend", "path": str(tmp_path), "layout": "per_conversation",
                        **kw})


def test_sqlite_vec_keeps_at_most_max_open_collections_open_and_finds_every_user(tmp_path):
    store = sqlite_store(tmp_path, max_open=3)
    store.open(dim=DIM)
    convs = [f"user{i}" for i in range(10)]
    store.add(batch(convs))
    store.wait_ready()
    assert store.n_collections == 10 and len(store._subs) == 3  # 10 users, 3 files open
    for c in reversed(convs):  # every user asked again: closed ones reopen, still 3 open
        h = store.search(np.array([1, 0, 0, 0], np.float32), k=5, where=Where(conversation_id=c))
        assert list(h.ids) == [f"{c}-0", f"{c}-1"]
        assert len(store._subs) <= 3
    assert store.reopened >= 7
    every = store.search(np.array([0, 1, 0, 0], np.float32), k=100, where=Where())  # no conversation: all of them, merged
    assert len(every) == 20 and len(store._subs) == 3
    store.drop()
    assert not list(tmp_path.glob("*.db"))


def test_a_new_instance_opens_nothing_until_asked(tmp_path):
    first = sqlite_store(tmp_path, max_open=2)
    first.open(dim=DIM)
    first.add(batch(["a", "b", "c"]))
    first.close()
    second = sqlite_store(tmp_path, max_open=2)
    second.open(dim=DIM)
    assert second.n_collections == 3 and len(second._subs) == 0
    assert list(second.search(np.array([1, 0, 0, 0], np.float32), k=1, where=Where(conversation_id="b")).ids) == ["b-0"]
    assert len(second._subs) == 1
    second.drop()


def test_per_user_sqlite_files_take_small_chunks(tmp_path):
    store = sqlite_store(tmp_path)
    store.open(dim=DIM)
    store.add(batch(["a"]))
    sub = store.sub(sub_collection(store.collection, "a"))
    assert sub.chunk_size == 64  # per_conversation_settings; a shared sqlite-vec store keeps vec0's default
    shared = build_store({"_target_": "bench.backends.sqlite_vec.SqliteVecBackend", "path": str(tmp_path / "s")})
    assert shared.chunk_size is None
    store.drop()


def test_an_in_ram_store_keeps_every_collection_open():
    store = build_store({"_target_": "bench.backends.exact.ExactBackend", "layout": "per_conversation", "max_open": 2})
    assert store.max_open is None  # closing an in-RAM collection would lose it
    store.open(dim=DIM)
    store.add(batch(["a", "b", "c"]))
    assert len(store._subs) == 3
    store.close()


def test_default_bound_follows_the_open_file_limit(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda _: (64, 64))
    assert default_max_open() == 16
    monkeypatch.setattr(resource, "getrlimit", lambda _: (100_000, 100_000))
    assert default_max_open() == MAX_OPEN
    monkeypatch.setattr(resource, "getrlimit", lambda _: (8, 8))
    assert default_max_open() == 4


class _Fails:
    """A store whose open() fails as SQLite does at the open-file limit."""

    name = "fake"
    reopens_cheaply = True

    def __init__(self, collection):
        from bench.backends.base import FILTER_KINDS, Capabilities

        self.collection = collection
        self.capabilities = Capabilities(exact=True, filters=FILTER_KINDS, persistent=True, server=False)

    def open(self, *, dim, metric="cosine"):
        raise RuntimeError("unable to open database file")

    def close(self):
        pass

    def list_collections(self):
        return []


def test_hitting_the_open_file_limit_is_one_line_naming_layout_store_and_limit():
    store = PerConversation(_Fails, "c", max_open=5)
    store.open(dim=DIM)
    with pytest.raises(OSError) as e:
        store.add(batch(["a"]))
    msg = str(e.value)
    assert e.value.errno == errno.EMFILE and "\n" not in msg
    assert msg.startswith("[Errno 24] fake per_conversation layout: could not open collection")
    assert "open-file limit (ulimit -n) is" in msg and "max_open=5" in msg and "backend.layout=shared" in msg


def test_max_open_must_be_positive():
    with pytest.raises(ValueError, match="max_open must be a positive integer"):
        PerConversation(_Fails, "c", max_open=0)


def five_users_ranked(store):
    """Every hit of a search per user (two queries each), after ingesting 5 users of 2 rows."""
    convs = [f"user{i}" for i in range(5)]
    store.open(dim=DIM)
    store.add(batch(convs))
    store.wait_ready()
    got = {}
    for c in convs:
        for q in ([1, 0, 0, 0], [0, 1, 0, 0]):
            h = store.search(np.array(q, np.float32), k=2, where=Where(conversation_id=c))
            got[(c, tuple(q))] = list(h.ids)
    return got


def files_open_under(path) -> int:
    import os

    return sum(os.readlink(f"/proc/self/fd/{fd}").startswith(str(path)) for fd in os.listdir("/proc/self/fd")
               if os.path.islink(f"/proc/self/fd/{fd}"))


# files open in the store's directory after 5 users, bounded to 2 collections and unbounded: a sqlite-vec file per open
# collection; LanceDB holds none between calls (what it bounds is the table handles and their memory)
@pytest.mark.parametrize("target, module, files", [("bench.backends.lancedb.LanceDBBackend", "lancedb", (0, 0)),
                                                   ("bench.backends.sqlite_vec.SqliteVecBackend", "sqlite_vec", (2, 5))])
def test_max_open_2_over_5_users_keeps_2_open_and_finds_what_unbounded_finds(tmp_path, target, module, files):
    pytest.importorskip(module)
    stores = {mo: build_store({"_target_": target, "path": str(tmp_path / f"s{mo}"), "layout": "per_conversation",
                               "collection": f"b{mo}", "max_open": mo}) for mo in (2, 100)}
    bounded, unbounded = stores[2], stores[100]
    assert bounded.max_open == 2
    got = five_users_ranked(bounded)
    assert len(bounded._subs) == 2 and bounded.n_collections == 5 and bounded.reopened >= 3
    assert files_open_under(tmp_path / "s2") == files[0]
    want = five_users_ranked(unbounded)
    assert len(unbounded._subs) == 5 and files_open_under(tmp_path / "s100") == files[1]
    assert got == want
    assert got[("user3", (1, 0, 0, 0))] == ["user3-0", "user3-1"]  # the user turn lies along e0, the assistant's along e1
    for s in stores.values():
        s.drop()
        s.close()


def test_a_per_user_lancedb_table_builds_no_conversation_index(tmp_path):
    pytest.importorskip("lancedb")
    store = build_store({"_target_": "bench.backends.lancedb.LanceDBBackend", "path": str(tmp_path), "layout": "per_conversation"})
    store.open(dim=DIM)
    store.add(batch(["a"]))
    store.wait_ready()
    sub = store.sub(sub_collection(store.collection, "a"))
    assert sub.conversation_index is False and sub._table.list_indices() == []
    shared = build_store({"_target_": "bench.backends.lancedb.LanceDBBackend", "path": str(tmp_path / "s")})
    shared.open(dim=DIM)
    shared.add(batch(["a"]))
    shared.wait_ready()
    assert [i.columns for i in shared._table.list_indices()] == [["conversation_id"]]
    store.drop()
    shared.drop()


class _Pending:
    """Records what the layout calls on a store with writes that become searchable only in wait_ready."""

    name = "pending"
    reopens_cheaply = True
    calls: list = []

    def __init__(self, collection):
        from bench.backends.base import FILTER_KINDS, Capabilities

        self.collection = collection
        self.capabilities = Capabilities(exact=True, filters=FILTER_KINDS, persistent=True, server=False)

    def open(self, *, dim, metric="cosine"):
        pass

    def add(self, batch):
        self.calls.append(("add", self.collection))

    def wait_ready(self, timeout_s=300.0):
        self.calls.append(("wait_ready", self.collection))

    def close(self):
        self.calls.append(("close", self.collection))

    def list_collections(self):
        return []


def test_a_collection_with_pending_writes_waits_before_it_is_closed():
    _Pending.calls = []
    store = PerConversation(_Pending, "c", max_open=1)
    store.open(dim=DIM)
    store.add(batch(["a", "b"]))
    a, b = sub_collection("c", "a"), sub_collection("c", "b")
    assert _Pending.calls == [("add", a), ("wait_ready", a), ("close", a), ("add", b)]
    store.wait_ready()  # only b is still pending
    assert _Pending.calls[-1] == ("wait_ready", b) and ("wait_ready", a) not in _Pending.calls[4:]


def test_per_user_seekdb_collections_share_one_connection(tmp_path):
    pytest.importorskip("pyseekdb")
    from bench.backends import seekdb

    store = build_store({"_target_": "bench.backends.seekdb.SeekdbBackend", "path": str(tmp_path / "s"), "layout": "per_conversation",
                         "max_open": 2})
    assert store.max_open is None  # nothing to bound: a collection costs no file descriptor
    got = five_users_ranked(store)
    assert got[("user3", (1, 0, 0, 0))] == ["user3-0", "user3-1"] and got[("user1", (0, 1, 0, 0))] == ["user1-1", "user1-0"]
    subs = list(store._subs.values())
    assert len(subs) == 5 and all(s.share_client for s in subs) and len({id(s._client) for s in subs}) == 1
    assert all(s.conversation_index is False and s._conv_table is None for s in subs)  # every row is the user's: no column
    assert list(seekdb._SHARED.values())[0][1] == 5  # five users of one connection
    store.drop()
    store.close()
    assert seekdb._SHARED == {}  # closed with the last of them


def test_chroma_dropping_an_unwritten_index_is_one_line_naming_cache_layout_and_limit(monkeypatch):
    from bench.backends import chroma

    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))

    class B:
        _name, layout = "u1", "per_conversation"

    line = chroma.evicted_line(B(), RuntimeError("Error executing plan: Internal error: Error creating hnsw segment reader: "
                                                 "Nothing found on disk"))
    assert line.startswith("chroma per_conversation layout: collection 'u1' could not be read back") and "\n" not in line
    assert "its cache of 204 loaded indexes (the open-file limit (ulimit -n) // 5)" in line and "backend.layout=shared" in line
    assert chroma.evicted_line(B(), RuntimeError("some other failure")) == ""


def test_per_user_chroma_collections_write_their_index_every_100_rows(tmp_path):
    pytest.importorskip("chromadb")
    store = build_store({"_target_": "bench.backends.chroma.ChromaBackend", "path": str(tmp_path), "layout": "per_conversation"})
    store.open(dim=DIM)
    store.add(batch(["a"]))
    import warnings

    with warnings.catch_warnings():  # chroma 1.5: "legacy embedding function config" for None
        warnings.simplefilter("ignore", DeprecationWarning)
        hnsw = store.sub(sub_collection(store.collection, "a"))._col.configuration["hnsw"]
    assert hnsw["sync_threshold"] == 100  # chroma's own: 1000
    store.drop()
    store.close()


CHROMA_EVICTS = """
import numpy as np, sys
from bench.backends.layout import build_store
from bench.types import MemoryBatch, Where
users, rows = int(sys.argv[1]), int(sys.argv[2])
store = build_store({"_target_": "bench.backends.chroma.ChromaBackend", "path": sys.argv[3], "layout": "per_conversation"})
store.open(dim=8)
v = np.random.default_rng(0).standard_normal((users * rows, 8)).astype(np.float32)
for u in range(users):
    s = slice(u * rows, (u + 1) * rows)
    store.add(MemoryBatch(ids=tuple(f"m{i}" for i in range(s.start, s.stop)), vectors=v[s], conversation_ids=(f"u{u}",) * rows,
                          roles=("user",) * rows, timestamps=(1.0,) * rows))
    store.wait_ready()
found = 0
for u in range(users):
    for j in (u * rows, u * rows + rows - 1):
        found += store.search(v[j], k=1, where=Where(conversation_id=f"u{u}")).ids[0] == f"m{j}"
print(found)
"""


@pytest.mark.parametrize("rows, found, error", [(100, "84", None), (4, None, "could not be read back after chroma dropped")])
def test_chroma_past_its_cache_of_loaded_indexes(tmp_path, rows, found, error):
    """Under ulimit -n 200 chroma keeps 40 indexes loaded: 42 users of 100 rows (written to disk) are all found again,
    first and last row; 42 users of 4 rows (never written) fail with the one line."""
    pytest.importorskip("chromadb")
    import subprocess
    import sys

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    proc = subprocess.run([sys.executable, "-c", CHROMA_EVICTS, "42", str(rows), str(tmp_path)], capture_output=True, text=True,
                          preexec_fn=low_limit, timeout=600)
    if found:
        assert proc.returncode == 0 and proc.stdout.split() == [found], proc.stderr[-500:]
    else:
        assert proc.returncode != 0 and error in proc.stderr.strip().splitlines()[-1]


class _OutOfMemory(_Pending):
    name = "seekdb"
    reopens_cheaply = False

    def add(self, batch):
        raise RuntimeError("SeekdbError: No memory or server runtime memory limit reached failed: code=4013")


def test_a_store_out_of_memory_is_one_line_naming_layout_store_and_limit():
    store = PerConversation(_OutOfMemory, "c")
    store.open(dim=DIM)
    with pytest.raises(OSError) as e:
        store.add(batch(["a"]))
    msg = str(e.value)
    assert e.value.errno == errno.ENOMEM and "\n" not in msg
    assert msg.startswith("[Errno 12] seekdb per_conversation layout: could not write to collection")
    assert "(1 collections, 1 open, every collection kept open" in msg and "reached its memory limit" in msg and "code=4013" in msg


def test_an_ordinary_write_error_is_left_as_it_is():
    class Broken(_Pending):
        def add(self, batch):
            raise ValueError("vector dim 3 != collection dim 4")

    store = PerConversation(Broken, "c")
    store.open(dim=DIM)
    with pytest.raises(ValueError, match="vector dim 3"):
        store.add(batch(["a"]))
