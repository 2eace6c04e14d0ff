"""bench.tools.load: a short concurrent run on the in-process stores, and the answer checks that count errors."""

from __future__ import annotations

import math
import subprocess
import sys

from bench.resources import plugin_names
from bench.tools.load import _check, format_table, run_load
from bench.types import Hit

CONV = {"m1": "c1", "m2": "c1", "m3": "c2"}


def test_answer_checks_count_what_is_wrong():
    assert _check([Hit("m1", 0.9), Hit("m2", 0.5)], 2, CONV, "c1") == ""
    assert _check([Hit("m1", 0.9), Hit("m2", 0.5)], 1, CONV, "c1") == "2 hits for k=1"
    assert _check([Hit("m1", 0.9), Hit("m1", 0.5)], 5, CONV, "c1") == "duplicate ids"
    assert _check([Hit("m1", 0.9), Hit("m3", 0.5)], 5, CONV, "c1") == "hit outside conversation 'c1'"
    assert _check([Hit("m2", 0.4), Hit("m1", 0.9)], 5, CONV, "c1") == "hits not sorted by similarity"


def test_short_concurrent_run_on_local_stores(tmp_path):
    results = run_load(("exact", "sqlite_vec", "lancedb"), threads=4, queries=25, rows=300, dim=16, workdir=tmp_path, lag_probes=2)
    assert [r.store for r in results] == ["exact", "sqlite_vec", "lancedb"]
    for r in results:
        assert (r.queries, r.errors, r.first_error) == (100, 0, ""), r
        assert 0 < r.p50_ms <= r.p99_ms and r.qps > 0 and math.isfinite(r.lag_max_ms)
    table = format_table(results)
    assert table.count("\n") == 4 and "| exact | 300 | 4 x 25 | 0 |" in table


def test_a_store_that_cannot_start_counts_every_query_as_an_error(tmp_path):
    (tmp_path / "stores").write_text("a file where the store directory should be")
    [r] = run_load(("sqlite_vec",), threads=2, queries=5, rows=10, dim=4, workdir=tmp_path, lag_probes=1)
    assert r.errors == r.exceptions == 10 and r.first_error.startswith("setup: ")


def test_cli_rejects_unknown_stores():
    proc = subprocess.run([sys.executable, "-m", "bench.tools.load", "--stores", "exact,nosuch"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown store(s) ['nosuch']" in proc.stderr
    assert f"(known: {', '.join(plugin_names('backend'))})" in proc.stderr  # the configs/backend/*.yaml names


def test_cli_skips_a_cloud_store_with_the_reason():
    proc = subprocess.run([sys.executable, "-m", "bench.tools.load", "--stores", "pinecone"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "skipped pinecone: a cloud store (network and an API key)" in proc.stdout and "load errors: 0" in proc.stdout
