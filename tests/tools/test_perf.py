"""The measuring code of ``make bench`` on tiny inputs: verdicts, ratios, interleaving, hand-written loops, RSS.

Functional only: nothing here asserts how fast anything is.
"""

import json
import math
import os
import sys

import numpy as np
import pytest

from bench.backends.catalog import load_backend, store_names
from bench.backends.session import open_session
from bench.data.synthetic import generate
from bench.embedders.synthetic import SyntheticEmbedder
from bench.tools import perf as P
from bench.tools.perf import common as C
from bench.tools.perf import p1, p2, p3a, p3b, p4, p6, pe, pl
from bench.replay.trace import batches, embed_corpus, question_filter


def test_check_and_verdict_lines():
    assert C.check(1.1, "<=", 1.1) and not C.check(1.11, "<=", 1.1)
    assert C.check(0.9, ">=", 0.9) and not C.check(3.99, ">=", 4.0) and C.check(3.99, "<", 4.0)
    assert not C.check(float("nan"), "<=", 1.0)  # not measured never passes
    with pytest.raises(ValueError, match="unknown comparison"):
        C.check(1.0, "==", 1.0)
    ok = C.Ratio("P1", "sweep / single", 1.05, "<=", 1.1)
    bad = C.Ratio("P5", "peak RSS", 4.2, "<", 4.0, "GB")
    na = C.Ratio("P3a", "multirun", float("nan"), "<=", 120.0, "s")
    assert ok.passed and "PASS" in ok.line() and "target <= 1.100" in ok.line()
    assert not bad.passed and "FAIL" in bad.line() and "4.20 GB" in bad.line() and "target < 4.00 GB" in bad.line()
    assert "NOT MEASURED" in na.line() and "n/a" in na.line()
    info = C.Ratio("P2/info", "reference pass", 171.9, "<=", 100.0, "%", info=True)  # over its limit, yet information only
    assert info.passed and "information, no target" in info.line() and "FAIL" not in info.line() and "171.9 %" in info.line()


def test_harness_ratio_hand_worked():
    # 1000 questions, store 2 s in total = 2 ms per query; loop overhead 100 us, reference pass 500 us per query
    meta = {"store_search_seconds": 2.0, "harness_ns_per_query": 100_000.0, "postprocess_ns_per_query": 500_000.0}
    loop, post, per_q = p2.harness_ratio(meta, 1000)
    assert (loop, post, per_q) == (pytest.approx(0.05), pytest.approx(0.25), pytest.approx(2e6))
    assert all(math.isnan(x) for x in p2.harness_ratio({**meta, "store_search_seconds": 0.0}, 1000))


def test_alternate_interleaves_and_discards_warmup():
    calls = []

    def timed(label, ns):  # a store call as the session times it: returns its nanoseconds
        return lambda i: calls.append((label, i)) or ns + i

    a, b = C.alternate(timed("a", 100), timed("b", 200), 4, warmup=1)
    assert calls[:2] == [("a", 0), ("b", 0)]  # warm-up pair, not kept
    assert calls[2:] == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3)]
    assert a == [100, 101, 102, 103] and b == [200, 201, 202, 203]  # each side keeps its own times, in query order


def test_throughput_counts_texts():
    assert p3b.throughput(lambda texts: None, ["x"] * 10) > 0


@pytest.fixture(scope="module")
def tiny():
    corpus = generate(120, conversation_size=40, session_size=8, questions_per_conversation=4, seed=3)
    tv, qv, _ = embed_corpus(corpus, SyntheticEmbedder(dim=32))
    return corpus, tv, qv


@pytest.mark.parametrize("store", ["exact", "sqlite_vec", "lancedb"])
def test_reference_query_returns_what_the_adapter_returns(store, tiny, tmp_path):
    """P4's hand-written side is the store's own reference_query: the same rows and similarities as search."""
    corpus, tv, qv = tiny
    with open_session(load_backend(store, stores_dir=tmp_path, collection="perf_t"), dim=tv.shape[1]) as s:
        s.ingest(batches(corpus.turns(), tv, 50))
        for i, q in enumerate(corpus.questions):
            w = question_filter(q)
            hits = s.backend.search(qv[i], k=15, where=w)
            ids, sims = s.backend.reference_query(qv[i], k=15, where=w)
            assert sorted(hits.ids) == sorted(ids) and len(ids) > 0
            np.testing.assert_allclose(sorted(hits.scores), sorted(sims), atol=1e-5)


def test_store_lists_come_from_the_configs():
    embedded = p3a.embedded_stores()
    assert sorted(embedded) == store_names("embedded") and {"exact", "sqlite_vec", "lancedb"} <= set(embedded)
    assert "pinecone" not in embedded and "seekdb_server" not in embedded
    assert embedded.index("chroma") < embedded.index("exact")  # approximate stores first (slowest: joblib dispatches in order)


def test_p4_skips_a_cloud_store_with_the_reason(caplog):
    assert p4.p4_all(["pinecone"], n_memories=100) == []
    assert "P4 skipped pinecone: a cloud store" in caplog.text


def test_p4_adapter_ratio_on_the_exact_store(tiny, tmp_path):
    corpus, tv, qv = tiny
    r = p4.p4_adapter("exact", corpus, tv, qv, stores_dir=tmp_path, depth=20)
    assert r.key == "P4/exact" and r.op == "<=" and r.limit == 1.2
    assert r.value > 0 and r.details["queries"] == len(corpus.questions) and r.details["same_result_sizes_of_20"] == 12


def test_layout_ratio_hand_worked():
    """PL's formula: p50 of the per-conversation query times / p50 of the unfiltered ones."""
    assert pl.filtered_over_unfiltered([3, 1, 2], [4, 1, 9, 2]) == pytest.approx(2 / 3)  # medians 2 and (2+4)/2 = 3
    assert pl.filtered_over_unfiltered([5, 5, 100], [10, 10]) == pytest.approx(0.5)  # a median, not a mean: the 100 is noise
    assert math.isnan(pl.filtered_over_unfiltered([], [1])) and math.isnan(pl.filtered_over_unfiltered([1], []))


def test_pl_layout_on_the_exact_store(tiny, tmp_path):
    """Both layouts of one store side by side: the per-conversation query returns what the shared filtered one does."""
    corpus, tv, qv = tiny
    main, info = pl.pl_layout("exact", corpus, tv, qv, stores_dir=tmp_path, k=20)
    assert (main.key, main.op, main.limit, main.info) == ("PL/exact", "<=", 1.3, False)
    assert info.key == "PL/exact/shared" and info.info
    assert main.value > 0 and main.details["k"] == 20
    assert main.details["ingest"]["per_conversation"]["collections"] == 3  # 120 memories / 40 per conversation
    assert main.details["ingest"]["shared"]["collections"] == 1
    assert main.details["same_ids_as_shared_filtered_of_20"] == 12  # every one of the 12 questions


def test_p2_on_a_small_corpus():
    loop, info = p2.p2_harness(600, depth=50, questions_per_conversation=20)
    assert loop.key == "P2" and loop.unit == "%" and loop.limit == 5.0 and loop.value >= 0
    assert info.key == "P2/info" and info.details["queries"] == 20 and info.details["store_us_per_query"] > 0


def test_tree_rss_and_run_measured_see_a_child_allocation():
    assert C.tree_rss_bytes(os.getpid()) > 10_000_000  # this interpreter with numpy loaded
    assert C.tree_rss_bytes(2**22 + 12345) == 0  # no such process
    code = "import time; b = bytearray(150_000_000); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.6)"
    proc = C.run_measured([sys.executable, "-c", code], sample_s=0.05, timeout_s=120)
    assert proc.returncode == 0 and proc.wall_s > 0.5
    assert proc.maxrss_bytes >= 150_000_000 and proc.tree_peak_bytes >= 150_000_000 and proc.hwm_bytes >= 150_000_000
    failed = C.run_measured([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])
    assert failed.returncode == 3 and "boom" in failed.stderr_tail


def test_peak_rss_of_a_child_excludes_the_launchers_own_memory():
    ballast = bytearray(400_000_000)  # the launcher holds 400 MB resident while a ~10 MB child runs
    ballast[::4096] = b"x" * len(ballast[::4096])
    proc = C.run_measured([sys.executable, "-c", "import time; time.sleep(0.5)"], sample_s=0.05, timeout_s=120)
    assert proc.returncode == 0 and 0 < proc.hwm_bytes < 100_000_000  # VmHWM: the child's own address space since exec
    assert C.vm_hwm_bytes(2**22 + 12345) == 0  # no such process
    del ballast


def test_raw_onnx_loop_matches_the_embedder():
    from bench.embedders.minilm import MiniLMEmbedder

    texts = ["I went hiking last weekend.", "What is your favourite book?", "ok"]
    raw = C.RawOnnx(threads=1).embed(texts)
    ours = MiniLMEmbedder(threads=1, progress=False).embed(texts)
    np.testing.assert_allclose((raw * ours).sum(axis=1), 1.0, atol=1e-5)  # the same computation


def test_all_strategies_and_results_files(tmp_path):
    s = p1.all_strategies()
    assert s.startswith("[") and "limit" in s and "threshold" in s and "full_context" in s
    rs = [C.Ratio("P1", "x", 1.0, "<=", 1.1, method="m", details={"a": 1}), C.Ratio("P5", "y", 5.0, "<", 4.0, "GB")]
    P.write_results(rs, tmp_path)
    rows = json.loads((tmp_path / "perfbench.json").read_text())
    assert [r["passed"] for r in rows] == [True, False]
    md = (tmp_path / "perfbench.md").read_text()
    assert "P1" in md and "FAIL" in md and "**P1**: m" in md


def test_unknown_part_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        P.main(["--only", "P9"])
    assert "unknown part(s) ['P9']" in capsys.readouterr().err


def test_job_breakdown_reads_each_job(tmp_path):
    job = tmp_path / "job0"
    job.mkdir()
    (job / "meta.json").write_text(json.dumps({"backend": "exact", "traces": [
        {"ingest_seconds": 1.0, "ready_seconds": 0.5, "search_loop_seconds": 2.0, "store_search_seconds": 1.5},
        {"ingest_seconds": 1.0, "ready_seconds": 0.5, "search_loop_seconds": 3.0, "store_search_seconds": 2.5}]}))
    (job / "cli.log").write_text("[2026-01-01 10:00:00,000][bench][INFO] - start\nnoise line\n[2026-01-01 10:01:30,500][bench][INFO] - end\n")
    (tmp_path / "job1").mkdir()  # a failed job has no meta.json: skipped
    assert p3a.job_breakdown(tmp_path) == [{"job": "job0", "backend": "exact", "ingest_seconds": 2.0, "ready_seconds": 1.0,
                                          "search_loop_seconds": 5.0, "store_search_seconds": 4.0, "job_wall_s": 90.5}]


def test_p1_by_pieces_on_the_demo_corpus(tmp_path):
    demo = C.REPO / "datasets" / "demo"
    r = p1.p1_threshold_sweep(backend="exact", strategies="[limit,threshold]", embeddings_dir=tmp_path / "emb",
                             data=["dataset=own", f"dataset.path={demo}", "embedder=hashing"])
    d = r.details
    assert r.key == "P1" and r.limit == 1.1 and r.value > 0
    assert d["traces"] == 1 and d["texts_embedded_to_warm"] > 0 and d["store_search_s"] > 0
    assert d["cold_single_job_s"] > 0 and d["warm_grid17_s"] > 0 and d["warm_single_s"] > 0
    # the ratio is exactly (trace + warm 17) / (trace + warm 1)
    assert r.value == pytest.approx((d["trace_s"] + d["warm_grid17_s"]) / (d["trace_s"] + d["warm_single_s"]))


def test_best_ratio_hand_worked():
    assert C.best_ratio([11.2, 10.0, 12.0], [0.9, 0.8]) == pytest.approx(12.5)  # best of each side: 10.0 / 0.8
    assert math.isnan(C.best_ratio([], [1.0])) and math.isnan(C.best_ratio([1.0], []))


def test_rows_max_diff_hand_worked():
    import pandas as pd

    nan = float("nan")
    summary = pd.DataFrame({"strategy": ["limit5", "threshold", "limit5"], "format": ["A", "A", "B"], "threshold": [nan, 0.5, nan],
                            "n_questions": [3, 3, 3], "precision": [0.5, nan, 0.5], "recall": [0.25, 0.0, 0.25],
                            "f1": [0.3, 0.0, 0.3], "tokens_injected_mean": [10.0, 0.0, 99.0], "tokens_full_mean": [40.0, 40.0, 80.0]})
    rows = [{"strategy": "limit5", "threshold": nan, "n_questions": 3, "precision": 0.5, "recall": 0.25, "f1": 0.3,
             "tokens_injected_mean": 10.5, "tokens_full_mean": 40.0},
            {"strategy": "threshold", "threshold": 0.5, "n_questions": 3, "precision": nan, "recall": 0.0, "f1": 0.0,
             "tokens_injected_mean": 0.0, "tokens_full_mean": 40.0}]
    assert p6.rows_max_diff(summary, rows) == 0.5  # format B rows are ignored; 10.0 vs 10.5 is the largest difference
    assert p6.rows_max_diff(summary, [rows[0], {**rows[1], "precision": 0.0}]) == float("inf")  # NaN against a number
    assert p6.rows_max_diff(summary, rows[:1]) == float("inf")  # rows missing


def test_run_measured_reports_the_childs_cpu_seconds():
    proc = C.run_measured([sys.executable, "-c", "import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass"],
                          timeout_s=120)
    assert proc.returncode == 0 and 0.3 <= proc.cpu_s <= proc.wall_s + 0.05  # a busy loop of 0.3 CPU s (plus start-up)


def test_long_texts_are_long_where_asked():
    texts = pe.long_texts(20, seed=1)
    words = [len(t.split()) for t in texts]
    assert len(texts) == 20 and sum(w >= 300 for w in words) == 7 and all(w <= 40 or 300 <= w <= 600 for w in words)  # 35 % of 20
    assert texts == pe.long_texts(20, seed=1) and texts != pe.long_texts(20, seed=2)


def test_pe_ratios_hand_worked(monkeypatch):
    fake = {"ours": {"texts_per_s": 270.0, "vm_hwm_bytes": 1_200_000_000}, "raw": {"texts_per_s": 300.0, "vm_hwm_bytes": 2_000_000_000}}
    monkeypatch.setattr(pe, "_embed_in_child", lambda which, n: fake[which])
    rss, speed, raw = pe.pe_embedding_memory(100)
    assert (rss.key, rss.value, rss.passed) == ("PE/rss", 1.2, True)
    assert (speed.key, speed.value, speed.passed) == ("PE/throughput", 0.9, True)
    assert (raw.key, raw.value, raw.info) == ("PE/raw_rss", 2.0, True)
    with pytest.raises(ValueError, match="unknown side"):
        pe.embed_child("other", 1)


def test_embed_child_runs_our_path_in_a_child():
    out = pe._embed_in_child("ours", 6)
    assert out["texts"] == 6 and 50_000_000 < out["vm_hwm_bytes"] < 4_000_000_000  # MiniLM's session is resident
    assert out["texts_per_s"] == pytest.approx(6 / out["seconds"])


def test_registry_selects_every_part_and_each_module_states_its_target():
    ids = set().union(*(f.ids for f in P.FIGURES))
    assert ids == set(P.PARTS) | set(P.SUBPARTS)  # every --only id selects a figure, and only known ids do
    assert set(P.DEFAULT_PARTS) <= set(P.PARTS)
    for f in P.FIGURES:
        assert callable(f.module.run) and "Target" in f.module.__doc__, f.module.__name__


def test_main_runs_the_figures_asked_for_and_keeps_the_ids_asked_for(monkeypatch, tmp_path):
    """--only P7 runs P6's module (P7 is measured on P6's run) and keeps P7 alone; nothing else runs."""
    ran = []

    def fake(name, keys):
        return lambda args, ctx: ran.append(name) or [C.Ratio(k, k, 1.0, "<=", 2.0) for k in keys]

    for f in P.FIGURES:
        monkeypatch.setattr(f.module, "run", fake(f.module.__name__, ["X"]))
    monkeypatch.setattr(p6, "run", fake("p6", ["P6", "P6/deferred", "P7"]))
    assert P.main(["--only", "P7", "--out", str(tmp_path)]) == 0
    assert ran == ["p6"]
    assert [r["key"] for r in json.loads((tmp_path / "perfbench.json").read_text())] == ["P7"]


def test_ps4_takes_a_filled_cache_root_and_the_synthetic_size(monkeypatch, tmp_path):
    """--ps4-cache reaches PS4's warm run (a cache a full run filled: PS4 at LongMemEval_S size in minutes); '' skips the
    synthetic trace."""
    from bench.tools.perf import ps4

    seen = []
    monkeypatch.setattr(ps4, "ps4_sweep", lambda dataset, **kw: seen.append((dataset, kw)) or [C.Ratio("PS4", "x", 1.0, "<=", 2.0)])
    assert P.main(["--only", "PS4", "--ps-dataset", "longmemeval_s", "--ps4-cache", str(tmp_path / "c"), "--ps4-synthetic", "",
                   "--out", str(tmp_path / "out")]) == 0
    assert seen == [("longmemeval_s", {"repeats": 3, "synthetic": None, "cache": str(tmp_path / "c")})]
