"""recallbench stores: every store in both layouts, side by side (bench/tools/stores.py), on a tiny synthetic set."""

from __future__ import annotations

import numpy as np
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
