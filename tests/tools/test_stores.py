"""recallbench stores: every store in both layouts, side by side (bench/tools/stores.py), on a tiny synthetic set."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.tools import stores as S


@pytest.fixture(scope="module")
def data():
    return S.synthetic(300, 16, n_queries=12, seed=5, clusters=6, conversations=3)


def test_synthetic_layout_of_the_data(data):
    vecs, conv, _roles, _ts, _qv, qconv = data
    assert vecs.shape == (300, 16) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert sorted(set(conv)) == ["c0", "c1", "c2"] and (conv == "c1").sum() == 100  # row i -> c{i % 3}
    assert qconv[:4] == ["c0", "c1", "c2", "c0"]


@pytest.mark.parametrize("layout", ["shared", "per_conversation"])
def test_exact_store_in_each_layout_finds_the_exact_top_k(data, layout, tmp_path):
    truth, ftruth = S.exact_truth(data, 5)
    row = S.bench_store("exact", data, stores_dir=tmp_path, k=5, warmup=2, overrides={}, progress=False, layout=layout)
    assert "error" not in row, row.get("error")
    assert (row["store"], row["layout"], row["n"], row["dim"]) == ("exact", layout, 300, 16)
    assert S._recall(row["_ids"], truth) == 1.0  # unfiltered: every collection asked, merged
    assert S._recall(row["_fids"], ftruth) == 1.0  # conversation-filtered: its own collection only
    assert row["p50_ms"] > 0 and row["filtered_p50_ms"] > 0


def test_scale_part_has_a_row_per_store_and_layout_and_ratios_to_exact_of_the_same_layout(tmp_path):
    df = S.scale_part(["exact", "sqlite_vec"], [200], [8], n_queries=6, k=3, warmup=1, workdir=tmp_path, overrides={},
                      progress=False, layouts=("shared", "per_conversation"))
    assert list(zip(df["store"], df["layout"])) == [("exact", "shared"), ("exact", "per_conversation"),
                                                    ("sqlite_vec", "shared"), ("sqlite_vec", "per_conversation")]
    assert (df.loc[df["store"] == "exact", "p50_ms_ratio_to_exact"] == 1.0).all()
    assert (df["recall_at_k_vs_exact"] == 1.0).all() and (df["filtered_recall_at_k_vs_exact"] == 1.0).all()
    assert (df["short_lists"] == 0).all() and (df["filtered_short_lists"] == 0).all()


def test_a_short_list_is_fewer_hits_than_the_exact_top_k_holds():
    """min(k, eligible) is what the exact top-k holds: 2 of 3 asked is short; 1 of 1 eligible (k=3) is not."""
    truth = [["a", "b", "c"], ["a"], ["a", "b", "c"]]
    assert S._short([["a", "b"], ["a"], ["c", "b", "a"]], truth) == 1
    assert S._short([[], [], []], truth) == 3


def test_pinecone_runs_against_its_loopback_double_labelled_quality_only(data, tmp_path):
    """make stores left Pinecone out (a cloud store); now it runs against the loopback double in both layouts, and every
    row says the latency is not Pinecone's. The double scans exactly, so it finds the exact top-k."""
    truth, ftruth = S.exact_truth(data, 5)
    df = S.scale_part(["exact", "pinecone"], [300], [16], n_queries=12, k=5, warmup=2, workdir=tmp_path, overrides={},
                      progress=False, layouts=("shared", "per_conversation"), loopback=("pinecone",))
    assert S.LOOPBACK_LABEL == "pinecone (loopback double: quality only, latency is not Pinecone's)"
    assert list(zip(df["store"], df["layout"]))[2:] == [(S.LOOPBACK_LABEL, "shared"), (S.LOOPBACK_LABEL, "per_conversation")]
    assert "error" not in df or df["error"].isna().all(), df.get("error")
    assert (df["recall_at_k_vs_exact"] == 1.0).all() and (df["filtered_recall_at_k_vs_exact"] == 1.0).all()
    # above LOOPBACK_MAX_N the double is left out (it scans every row in Python per query)
    big = S.scale_part(["pinecone"], [S.LOOPBACK_MAX_N + 1], [4], n_queries=2, k=1, warmup=0, workdir=tmp_path, overrides={},
                       progress=False, loopback=("pinecone",))
    assert big.empty


@pytest.mark.slow
def test_the_command_runs_pinecone_loopback_by_default_and_skips_it_when_asked(tmp_path):
    argv = ["--stores", "exact,pinecone", "--sizes", "200", "--dims", "8", "--queries", "6", "--warmup", "1",
            "--layouts", "shared", "--no-locomo", "--no-progress"]
    assert S.main([*argv, "--out", str(tmp_path / "on")]) == 0
    text = (tmp_path / "on" / "README.md").read_text()
    assert f"| {S.LOOPBACK_LABEL} | shared | 200 | 8 |" in text and "Skipped pinecone" not in text
    assert S.main([*argv, "--out", str(tmp_path / "off"), "--no-pinecone-loopback"]) == 0
    text = (tmp_path / "off" / "README.md").read_text()
    assert "Skipped pinecone: a cloud store" in text and S.LOOPBACK_LABEL not in text


def test_locomo_part_measures_latency_fresh_by_default_and_says_where_it_was_measured(tmp_path):
    """Two LoCoMo-part runs on one cache: by default the second times the store again (``latency_origin`` "measured in
    this run"); with the caches turned back on it reads the first run's trace, and says so. The old part reused the
    cached trace silently. The Pinecone row runs against the loopback double, labelled."""
    from pathlib import Path

    demo = Path(__file__).resolve().parents[2] / "datasets" / "demo"
    extra = ("dataset=own", f"dataset.path={demo}", "embedder=hashing", f"paths.reports={tmp_path / 'reports'}")
    first = S.locomo_part(["exact", "pinecone"], out=tmp_path / "a", overrides={}, data_dir=None, extra=extra,
                          loopback=("pinecone",))
    assert "error" not in first or first["error"].isna().all(), first.get("error")
    assert first["store"].tolist() == ["exact", S.LOOPBACK_LABEL] and first["layout"].tolist() == ["shared", "shared"]
    assert first["latency_origin"].tolist() == ["measured in this run"] * 2
    assert first["depth"].nunique() == 1 and first["depth"].iloc[0] > 0  # the same depth for every store, in the table
    again = S.locomo_part(["exact"], out=tmp_path / "b", overrides={}, data_dir=None, extra=extra)
    assert again["latency_origin"].tolist() == ["measured in this run"]
    cached = S.locomo_part(["exact"], out=tmp_path / "c", overrides={}, data_dir=None,
                           extra=(*extra, "trace_cache=true", "resume=true"))
    assert cached["latency_origin"].iloc[0].startswith("cached trace of run ")
    assert cached["best_f1"].iloc[0] == first["best_f1"].iloc[0]


def test_scale_figure_plots_the_latency_each_layout_deploys_not_the_per_conversation_fan_out(tmp_path):
    # per_conversation: the unfiltered search fans out over every collection (30 ms); the deployed query reads one (1 ms)
    scale = pd.DataFrame([
        {"store": "exact", "layout": "shared", "n": 100, "dim": 8, "p50_ms": 2.0, "p99_ms": 3.0, "filtered_p50_ms": 2.5, "filtered_p99_ms": 3.5,
         "ingest_s": 0.1, "read_after_write_lag_s": 0.0, "recall_at_k_vs_exact": 1.0, "filtered_recall_at_k_vs_exact": 1.0},
        {"store": "seekdb", "layout": "per_conversation", "n": 100, "dim": 8, "p50_ms": 30.0, "p99_ms": 45.0, "filtered_p50_ms": 1.0,
         "filtered_p99_ms": 1.5, "ingest_s": 0.2, "read_after_write_lag_s": 0.1, "recall_at_k_vs_exact": 1.0, "filtered_recall_at_k_vs_exact": 1.0},
    ])
    d = S.deployed_latency(scale)
    assert d["deployed_p50_ms"].tolist() == [2.5, 1.0] and d["deployed_p99_ms"].tolist() == [3.5, 1.5]
    assert [p.name for p in S.plot(scale, tmp_path)] == ["scale_100_8.png"] and (tmp_path / "scale_100_8.png").stat().st_size > 0


def test_an_id_tied_with_the_kth_exact_neighbour_is_a_right_answer():
    """Identical texts embed to identical vectors: with rows m1 and m2 equal, the exact top-2 of the query (m0, then m1 or
    m2, tied) accepts either; k counts what is wanted (2), so a tie does not raise the bar, and a list of 1 is short."""
    vecs = np.array([[1.0, 0.0], [0.6, 0.8], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
    conv = np.array(["u1", "u1", "u2", "u2"], dtype=object)
    data = (vecs, conv, None, None, np.array([[1.0, 0.0]], dtype=np.float32), ["u2"])
    truth, ftruth = S.exact_truth(data, 2)
    assert truth == [["m0", "m1", "m2"]] and ftruth == [["m2", "m3"]]  # m2 ties m1 (cosine 0.6); u2 holds m2, m3
    assert S._recall([["m0", "m2"]], truth, 2) == 1.0 and S._recall([["m0", "m3"]], truth, 2) == 0.5
    assert S._short([["m0"]], truth, 2) == 1 and S._short([["m0", "m2"]], truth, 2) == 0
