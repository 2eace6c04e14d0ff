"""The per-user part of ``recallbench stores`` (bench/tools/peruser.py, issue 29 part 5)."""

from pathlib import Path

import numpy as np
import pytest

from bench.tools import peruser

REPO = Path(__file__).resolve().parents[2]
DIM = 4


def tiny(users=("a", "b", "c"), per_user=5):
    """``per_user`` rows per user, row j of a user along e_(j mod 4) scaled down with j (so its top-1 is row 0 for a
    query along e0); one query per user along e0."""
    vecs, conv = [], []
    for u in users:
        for j in range(per_user):
            v = np.full(DIM, 0.1, np.float32)
            v[j % DIM] = 1.0 - 0.1 * j
            vecs.append(v / np.linalg.norm(v))
            conv.append(u)
    n = len(vecs)
    q = np.array([[1, 0, 0, 0]] * len(users), np.float32)
    return (np.array(vecs, np.float32), np.array(conv, dtype=object), np.array(["user", "assistant"] * (n // 2) + ["user"] * (n % 2), dtype=object),
            np.arange(n, dtype=np.float64), q, list(users))


def test_truth_is_the_users_own_top_k_plus_ties():
    vecs = np.array([[1, 0], [1, 0], [0.6, 0.8], [1, 0]], np.float32)  # rows 0 and 1 tie; row 3 is another user's
    data = (vecs, np.array(["a", "a", "a", "b"], dtype=object), None, None, np.array([[1, 0]], np.float32), ["a"])
    assert peruser.per_user_truth(data, 1) == [["m0", "m1"]]  # the tie with the 1st counts, user b's row never
    assert peruser.per_user_truth(data, 2) == [["m0", "m1"]]
    assert peruser.per_user_truth(data, 3) == [["m0", "m1", "m2"]]


def test_synthetic_vectors_keep_the_real_per_user_counts():
    vecs, conv, roles, ts, qv, qconv = peruser.synthetic_per_user({"u1": 3, "u2": 2}, ["u2", "u1"], dim=8)
    assert conv.tolist() == ["u1", "u1", "u1", "u2", "u2"] and qconv == ["u2", "u1"]
    assert vecs.shape == (5, 8) and qv.shape == (2, 8) and roles.tolist() == ["user", "assistant", "user", "assistant", "user"]
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1) and np.allclose(np.linalg.norm(qv, axis=1), 1)


def test_the_part_runs_and_its_exact_row_is_the_reference(tmp_path):
    pytest.importorskip("sqlite_vec")
    data = tiny()
    seen = []
    df = peruser.per_user_part(["sqlite_vec", "exact"], data, kind="synthetic", workdir=tmp_path, k=2, warmup=0, overrides={},
                               progress=False, max_open=2, on_row=lambda d: seen.append(len(d)))
    assert list(df.columns) == [c for c in peruser.COLUMNS if c != "error"]
    assert df["store"].tolist() == ["exact", "sqlite_vec"] and seen == [1, 2]  # exact first, the csv rewritten per store
    ex = df.iloc[0]
    assert (ex["layout"], ex["vectors"], ex["users"], ex["rows"], ex["collections"], ex["max_open"], ex["reopened"]) == \
        ("per_conversation", "synthetic", 3, 15, 3, "all", 0)
    assert ex["fidelity_at_k"] == 1.0 and ex["short_lists"] == 0 and ex["ingest_rows_per_s"] > 0
    assert 0 < ex["p50_ms"] <= ex["p99_ms"] and ex["peak_rss_gb"] > 0 and ex["max_open_fds"] > 0
    sq = df.iloc[1]
    # 2 of 3 files open: ingesting c closes a; wait_ready touches the open ones in name order (c's name sorts before
    # b's), so b is the most recent; asking a reopens it (closes c), b is open, c reopens: 2 reopens
    assert (sq["collections"], sq["max_open"], sq["reopened"], sq["fidelity_at_k"], sq["short_lists"]) == (3, 2, 2, 1.0, 0)


def test_a_store_that_fails_is_one_row_with_its_error(tmp_path):
    df = peruser.per_user_part(["exact", "no_such_store"], tiny(), kind="synthetic", workdir=tmp_path, k=2, warmup=0,
                               overrides={}, progress=False)
    assert df["store"].tolist() == ["exact", "no_such_store"]
    assert df["error"].isna().tolist() == [True, False] and "no_such_store" in df["error"].iloc[1]


def test_the_cache_view_reads_shards_and_writes_nothing_back(tmp_path):
    src = tmp_path / "cache" / "embeddings" / "model-abc"
    src.mkdir(parents=True)
    (src / "shard-1.npz").write_bytes(b"shard")
    (src / "IDENTITY.json").write_text("{}")
    view = peruser.read_only_view(tmp_path / "cache" / "embeddings", tmp_path / "view")
    assert (view / "model-abc" / "shard-1.npz").is_symlink() and (view / "model-abc" / "shard-1.npz").read_bytes() == b"shard"
    (view / "model-abc" / "IDENTITY.json").write_text("changed")  # a copy
    (view / "model-abc" / "shard-2.npz").write_bytes(b"new")
    assert (src / "IDENTITY.json").read_text() == "{}" and sorted(p.name for p in src.iterdir()) == ["IDENTITY.json", "shard-1.npz"]


def test_without_the_vectors_in_the_cache_it_says_synthetic_with_the_real_counts(tmp_path):
    target = tmp_path / "data" / "longmemeval_s" / "lme_jsons_s"
    target.mkdir(parents=True)
    names = ("3_001be529.json", "3_06878be2.json")
    for name in names:
        (target / name).write_bytes((REPO / "tests" / "fixtures" / "data" / "lme_s_slice" / name).read_bytes())
    data, label, kind = peruser.corpus_data(["dataset=longmemeval_s", f"paths.datasets={tmp_path / 'data'}"], cache=None, users=1)
    vecs, conv, _, _, qv, qconv = data
    assert kind == "synthetic" and "synthetic clustered vectors with the real per-user counts (no embedding cache given)" in label
    assert set(conv.tolist()) == {"001be529"} and qconv == ["001be529"] and len(qv) == 1
    from bench.data.longmemeval import load_longmemeval

    one = load_longmemeval(path=target / names[0], name="longmemeval_s")
    assert len(vecs) == len(one.turns()) and f"1 users, {len(one.turns()):,} turns" in label


def test_peak_counts_the_files_and_memory_of_child_processes():
    import os
    import subprocess
    import sys

    from bench.tools.layout_scale import Peak, descendants, open_fds

    with Peak(every=0.05) as peak:
        child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(50_000_000); time.sleep(30)"])
        try:
            for _ in range(100):  # until its 50 MB are resident
                peak.sample()
                if peak.children_rss > 50_000_000:
                    break
                __import__("time").sleep(0.05)
            assert child.pid in descendants()
            kid_fds, own = len(os.listdir(f"/proc/{child.pid}/fd")), open_fds()
        finally:
            child.kill()
            child.wait()
    assert peak.fds >= own + kid_fds and peak.children_rss > 50_000_000
    assert peak.rss_bytes > peak.children_rss and peak.start_bytes > 0


def test_recallbench_stores_per_user_writes_the_table(tmp_path, monkeypatch):
    from bench.tools import stores

    target = tmp_path / "data" / "longmemeval_s" / "lme_jsons_s"
    target.mkdir(parents=True)
    for name in ("3_001be529.json", "3_06878be2.json"):
        (target / name).write_bytes((REPO / "tests" / "fixtures" / "data" / "lme_s_slice" / name).read_bytes())
    monkeypatch.setenv("BENCH_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "out"
    assert stores.main(["--no-locomo", "--no-scale", "--per-user", "--stores", "exact", "--per-user-cache", str(tmp_path / "none"),
                        "--out", str(out), "--warmup", "0", "--no-progress"]) == 0
    import pandas as pd

    df = pd.read_csv(out / "per_user.csv")
    assert df["store"].tolist() == ["exact"] and df["users"].tolist() == [2] and df["fidelity_at_k"].tolist() == [1.0]
    text = (out / "README.md").read_text()
    assert "## Per user (longmemeval_s, 2 users," in text and "synthetic clustered vectors with the real per-user counts" in text
    assert "| store | layout | vectors | users | rows | ingest_s | ingest_rows_per_s |" in text


def test_the_shared_layout_is_one_collection_filtered_by_user(tmp_path):
    pytest.importorskip("sqlite_vec")
    df = peruser.per_user_part(["sqlite_vec"], tiny(), kind="synthetic", workdir=tmp_path, k=2, warmup=0, overrides={},
                               progress=False, layouts=("per_conversation", "shared"))
    assert df["layout"].tolist() == ["per_conversation", "shared"] and df["collections"].tolist() == [3, 1]
    assert df["fidelity_at_k"].tolist() == [1.0, 1.0] and df["short_lists"].tolist() == [0, 0]


def test_seekdb_keeps_users_apart_in_one_collection_by_its_indexed_column(tmp_path):
    """With no layout asked for, seekdb runs the shared layout (``USER_LAYOUT``): one collection, each user's search
    read through the conversation column's index, exact (fidelity 1.0 against the user's own rows)."""
    pytest.importorskip("pyseekdb")
    df = peruser.per_user_part(["exact", "seekdb"], tiny(users=("a", "b", "c", "d"), per_user=6), kind="synthetic",
                               workdir=tmp_path, k=3, warmup=0, overrides={}, progress=False)
    assert df["store"].tolist() == ["exact", "seekdb"] and df["layout"].tolist() == ["per_conversation", "shared"]
    assert df["collections"].tolist() == [4, 1] and df["fidelity_at_k"].tolist() == [1.0, 1.0]
    assert df["short_lists"].tolist() == [0, 0] and "error" not in df


def test_with_every_text_in_the_cache_it_reads_real_vectors_and_writes_nothing_there(tmp_path):
    from bench.tools.perf.common import cached_embedder

    target = tmp_path / "data" / "longmemeval_s" / "lme_jsons_s"
    target.mkdir(parents=True)
    (target / "3_001be529.json").write_bytes((REPO / "tests" / "fixtures" / "data" / "lme_s_slice" / "3_001be529.json").read_bytes())
    overrides = ["dataset=longmemeval_s", f"paths.datasets={tmp_path / 'data'}", "embedder=hashing"]
    corpus, emb = cached_embedder(overrides, tmp_path / "cache" / "embeddings")  # every text of the corpus in the cache
    before = sorted((str(p), p.stat().st_mtime_ns) for p in (tmp_path / "cache").rglob("*"))
    data, label, kind = peruser.corpus_data(overrides, cache=tmp_path / "cache")
    assert kind == "real" and f"vectors from the embedding cache of {tmp_path / 'cache'}" in label
    vecs, conv, roles, ts, qv, qconv = data
    assert np.array_equal(vecs, emb.embed_documents([t.text for t in corpus.turns()]))
    assert np.array_equal(qv, emb.embed_queries([q.text for q in corpus.questions])) and qconv == ["001be529"]
    assert sorted((str(p), p.stat().st_mtime_ns) for p in (tmp_path / "cache").rglob("*")) == before
