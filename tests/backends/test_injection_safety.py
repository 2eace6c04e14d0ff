"""Injection safety of the SQL-speaking stores (sqlite_vec; seekdb embedded and server).

Metadata values and ids full of quotes and SQL metacharacters are written and filtered on: every
filter returns exactly the rows holding that value (never all rows, never an SQL error), and the
tables survive. seekdb's client escapes string literals with backslashes, so the adapter removes
NO_BACKSLASH_ESCAPES from every session (tested by switching it on first). Collection names from
user input are reduced to safe names that stay inside the store directory and never collide.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pytest

from bench.backends import chroma, seekdb, sqlite_vec
from bench.types import MemoryBatch, Where, memory_key

NASTY = [
    "x' OR '1'='1",
    'x"; DROP TABLE memories; --',
    "Robert'); DROP TABLE memory_ids;--",
    "back\\slash",
    "y\\' OR 1=1 -- ",
    "100%",
    "%s",
    "_",
    "*",
    "`tick`",
    "new\nline",
    "nul\x00byte",
    "ünï'cödé 名前",
]
HOSTILE_COLLECTION = "rb'; DROP TABLE x; -- ../../etc/passwd"
DIM = 8


def _batch() -> MemoryBatch:
    rng = np.random.default_rng(7)
    n = 2 * len(NASTY)
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    convs = tuple(c for c in NASTY for _ in range(2))
    return MemoryBatch(ids=tuple(memory_key(c, f"t{i % 2}'\"") for i, c in enumerate(convs)), vectors=v,
                       conversation_ids=convs, roles=("user", "assistant") * len(NASTY),
                       timestamps=tuple(float(i) for i in range(n)))


def _check_round_trip(backend) -> None:
    batch = _batch()
    backend.open(dim=DIM)
    backend.add(batch)
    backend.wait_ready(timeout_s=120)
    q = np.ones(DIM, np.float32) / np.sqrt(DIM)
    for value in NASTY:
        want = {i for i, c in zip(batch.ids, batch.conversation_ids) if c == value}
        got = {h.id for h in backend.search(q, k=100, where=Where(conversation_id=value))}
        assert got == want, repr(value)
        users = [h.id for h in backend.search(q, k=100, where=Where(conversation_id=value, roles=("user",)))]
        assert users == [memory_key(value, "t0'\"")], repr(value)
    assert backend.search(q, k=100, where=Where(conversation_id="nothing' OR '1'='1")) == []
    assert backend.search(q, k=100, where=Where(roles=("user' OR '1'='1",))) == []
    assert {h.id for h in backend.search(q, k=100, where=Where())} == set(batch.ids)  # nothing dropped


def test_sqlite_vec_binds_every_value(tmp_path):
    b = sqlite_vec.SqliteVecBackend(path=str(tmp_path / "store"), collection=HOSTILE_COLLECTION)
    try:
        _check_round_trip(b)
    finally:
        b.drop()
    assert b.file.parent == tmp_path / "store" and re.fullmatch(r"[A-Za-z0-9_.-]+\.db", b.file.name)
    assert list((tmp_path / "store").iterdir()) == [] and not (tmp_path / "etc").exists()


@pytest.fixture(scope="module")
def seekdb_dir():
    # The embedded engine lives until the process exits and may still flush sstables here after the tests:
    # a cleanup error is not a test failure.
    with tempfile.TemporaryDirectory(prefix="rb-inject-seekdb-", ignore_cleanup_errors=True) as d:
        yield d


def test_seekdb_embedded_escapes_every_value_even_if_the_session_disabled_backslash_escapes(seekdb_dir):
    b = seekdb.SeekdbBackend(path=seekdb_dir, collection=HOSTILE_COLLECTION)
    try:
        b.open(dim=DIM)
        server = b._client._server
        server._execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
        assert "NO_BACKSLASH_ESCAPES" in str(server._execute("SELECT @@sql_mode AS m"))
        seekdb._backslash_escapes_on(server)  # what every new session of the adapter does
        assert "NO_BACKSLASH_ESCAPES" not in str(server._execute("SELECT @@sql_mode AS m"))
        _check_round_trip(b)
    finally:
        b.drop()
        b.close()


def test_seekdb_server_sessions_drop_no_backslash_escapes(server_seekdb_server):
    admin = seekdb.SeekdbBackend(collection="rb_inject_admin", **server_seekdb_server)
    admin.open(dim=DIM)
    srv = admin._client._server
    old = srv._execute("SELECT @@global.sql_mode AS m")[0]
    old = str(old[0] if not isinstance(old, dict) else next(iter(old.values())))
    b = seekdb.SeekdbBackend(collection=HOSTILE_COLLECTION, **server_seekdb_server)
    try:
        srv._execute(f"SET GLOBAL sql_mode = '{old},NO_BACKSLASH_ESCAPES'")  # new sessions start with it
        assert "NO_BACKSLASH_ESCAPES" in str(srv._execute("SELECT @@global.sql_mode AS m"))
        _check_round_trip(b)  # the adapter's new session removed it
        assert "NO_BACKSLASH_ESCAPES" not in str(b._client._server._execute("SELECT @@sql_mode AS m"))
    finally:
        srv._execute(f"SET GLOBAL sql_mode = '{old}'")
        b.drop()
        b.close()
        admin.drop()
        admin.close()


@pytest.mark.parametrize("name", [HOSTILE_COLLECTION, "a b", "a_b", "../x", "x" * 300, "名前", "c$v1$x", "DROP TABLE"])
def test_collection_names_from_user_input_are_sanitised(name):
    s = seekdb.safe_collection_name(name)
    assert re.fullmatch(r"[A-Za-z0-9_]{1,200}", s)
    f = sqlite_vec.safe_name(name)
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", f) and not f.startswith(".") and "/" not in f and len(f) <= 111
    c = chroma.safe_collection_name(name)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]", c) and ".." not in c


def test_sanitised_names_do_not_collide():
    names = ["a b", "a_b", "a-b", "a.b", "a'b", "a;b", "A b"]
    for fn in (seekdb.safe_collection_name, sqlite_vec.safe_name, chroma.safe_collection_name):
        assert len({fn(n) for n in names}) == len(names), fn.__module__
    assert seekdb.safe_collection_name("plain_name") == "plain_name"  # safe names are kept as they are
    with pytest.raises(ValueError, match="non-empty string"):
        sqlite_vec.safe_name("")


def test_sqlite_vec_file_stays_inside_its_directory(tmp_path):
    b = sqlite_vec.SqliteVecBackend(path=str(tmp_path / "s"), collection="../../../tmp/evil")
    assert b.file.parent == tmp_path / "s"
    assert Path(b.file).resolve().is_relative_to((tmp_path / "s").resolve())


# --- CSV tables (bench.output.write_csv): cells a spreadsheet would run as a formula ---------------------------------
def test_csv_text_cells_starting_a_formula_are_neutralised_numbers_are_not(tmp_path):
    import csv

    import pandas as pd

    from bench.output import csv_cell, read_csv, write_csv

    df = pd.DataFrame({"category": ['=HYPERLINK("https://evil.example","x")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "'quoted",
                                    "-0.5", "plain"],
                       "f1": [-0.25, 0.5, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0]})
    path = write_csv(tmp_path / "t.csv", df)
    with path.open(newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert [r[0] for r in rows] == ["'=HYPERLINK(\"https://evil.example\",\"x\")", "'+1+1", "'-2+3", "'@SUM(A1)", "'\tx",
                                    "''quoted", "-0.5", "plain"]
    assert [r[1] for r in rows] == ["-0.25", "0.5", "-1.0", "0.0", "1.0", "2.0", "3.0", "4.0"]  # numbers stay numbers
    assert csv_cell("\rx") == "'\rx" and csv_cell(-1.5) == -1.5 and csv_cell("1e-3") == "1e-3"
    back = read_csv(path)
    assert back["category"].tolist() == df["category"].tolist() and back["f1"].tolist() == df["f1"].tolist()


def test_run_dir_tables_are_neutralised_on_disk_and_read_back_as_they_were(tmp_path):
    import pandas as pd

    from bench.results.rundir import RunDir

    run = RunDir(tmp_path)
    df = pd.DataFrame({"dataset": ["=1+1"], "category": ["@x"], "f1": [-0.5]})
    run.write_table("categories", df)
    run.write_results(df, df)
    assert (tmp_path / "analysis" / "categories.csv").read_text().splitlines()[1] == "'=1+1,'@x,-0.5"
    assert (tmp_path / "summary.csv").read_text().splitlines()[1] == "'=1+1,'@x,-0.5"
    assert run.table("categories").to_dict("list") == run.summary().to_dict("list") == {"dataset": ["=1+1"], "category": ["@x"], "f1": [-0.5]}
    assert pd.read_parquet(tmp_path / "questions.parquet")["dataset"].tolist() == ["=1+1"]  # parquet is data: raw
