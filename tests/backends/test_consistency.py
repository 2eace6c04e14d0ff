"""Consistency: identical runs give identical quality metrics; persistent stores survive a restart;
read-after-write lag is measured.

* Two identical jobs of the real pipeline (default store seekdb embedded, default embedder MiniLM,
  demo corpus; trace cache and resume off so both ingest and query the store afresh) give the same
  quality metrics, value for value.
* Persistence: one process writes into sqlite_vec, chroma (local) and seekdb (embedded) and exits;
  a second process opens the same paths and gets the same answers. A real chroma server is stopped
  and started again on its directory and still answers the same.
* Lag: ``bench.tools.load.measure_lag`` (reported by ``make load`` / ``make harden``) is ~0 for a
  store whose writes are visible at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from server_fixtures import server_unavailable

from bench.tools.harden.cases import DEMO, count_tracebacks, run_cli
from bench.tools.load import measure_lag
from bench.types import MemoryBatch, Where

REPO = Path(__file__).resolve().parents[2]
QUALITY = ["n_questions", "precision", "recall", "f1", "micro_f1", "hit_rate", "empty_rate", "tokens_injected_mean",
           "token_savings"]


@pytest.mark.slow
def test_two_identical_runs_give_identical_quality_metrics(tmp_path):
    proc = run_cli(["-m", "+repeat=1,2", f"paths.reports={tmp_path}", "dataset=own", f"dataset.path={DEMO}",
                    "strategy=[limit,threshold,hybrid]", "trace_cache=false", "resume=false", "progress=false",
                    "publish_latest=false"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert count_tracebacks(proc.stdout + proc.stderr) == 0
    sweep = next((tmp_path / "runs").iterdir())
    a, b = (pd.read_csv(sweep / j / "summary.csv") for j in ("job0", "job1"))
    assert set(a["backend"]) == {"seekdb"} and len(a) == len(b) > 30
    assert (a["recall"] > 0).any()
    key = ["strategy", "threshold"]
    a, b = a.sort_values(key, na_position="first").reset_index(drop=True), b.sort_values(key, na_position="first").reset_index(drop=True)
    cols = [c for c in QUALITY if c in a.columns]
    assert len(cols) >= 6
    pd.testing.assert_frame_equal(a[key + cols], b[key + cols], check_exact=True)
    m0, m1 = (json.loads((sweep / j / "meta.json").read_text()) for j in ("job0", "job1"))
    assert "reused_from" not in m0 and "reused_from" not in m1  # both really queried the store


WRITER = r"""
import json, sys, numpy as np
from bench.backends.catalog import load_backend
from bench.types import MemoryBatch, Where
root, mode = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(3)
v = rng.standard_normal((40, 16)).astype(np.float32); v /= np.linalg.norm(v, axis=1, keepdims=True)
out = {}
for name in ("sqlite_vec", "chroma", "seekdb"):
    b = load_backend(name, stores_dir=root, collection="persist")
    b.open(dim=16)
    if mode == "write":
        b.add(MemoryBatch(ids=tuple(f"m{i}" for i in range(40)), vectors=v, conversation_ids=tuple(f"c{i % 2}" for i in range(40)),
                          roles=("user", "assistant") * 20, timestamps=tuple(float(i) for i in range(40))))
        b.wait_ready()
    out[name] = [[(h.id, round(h.score, 5)) for h in b.search(v[i], k=5, where=Where(conversation_id="c0"))] for i in range(0, 40, 7)]
    b.close()
print(json.dumps(out))
"""


def _persist(root: Path, mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", WRITER, str(root), mode], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_persistent_stores_survive_a_process_restart(tmp_path):
    written = _persist(tmp_path, "write")
    reread = _persist(tmp_path, "read")  # a new process: nothing is written, everything is read back
    assert sorted(reread) == ["chroma", "seekdb", "sqlite_vec"]
    for name, answers in written.items():
        assert all(len(a) == 5 for a in answers), name
        assert answers[0][0][0] == "m0" and answers[0][0][1] == pytest.approx(1.0, abs=1e-4)  # a row finds itself
        assert reread[name] == answers, name


@pytest.mark.slow
def test_chroma_server_keeps_data_across_a_restart(tmp_path):
    from bench.backends.chroma import ChromaBackend
    from bench.backends.servers import ServerStartError, chroma_cli, run_chroma_server

    try:
        chroma_cli()
    except FileNotFoundError as e:
        server_unavailable(f"chroma server cannot run here: {e}")
    v = np.eye(4, dtype=np.float32) + np.arange(16, dtype=np.float32).reshape(4, 4) / 100  # no ties
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    batch = MemoryBatch(ids=("a", "b", "c", "d"), vectors=v, conversation_ids=("x",) * 4, roles=("user",) * 4,
                        timestamps=(0.0,) * 4)
    answers = []
    for start in range(2):
        try:
            with run_chroma_server(tmp_path / "data") as info:
                b = ChromaBackend(collection="persist", **info.overrides())
                b.open(dim=4)
                if start == 0:
                    b.add(batch)
                    b.wait_ready()
                answers.append([[(h.id, round(h.score, 5)) for h in b.search(v[i], k=3, where=Where(conversation_id="x"))]
                                for i in range(4)])
                b.close()
        except ServerStartError as e:
            server_unavailable(f"chroma server cannot start here: {e}")
    assert answers[0] == answers[1] and [a[0][0] for a in answers[1]] == ["a", "b", "c", "d"]


def test_read_after_write_lag_is_measured(tmp_path):
    from bench.backends.exact import ExactBackend
    from bench.backends.sqlite_vec import SqliteVecBackend

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        for backend in (SqliteVecBackend(path=d, collection="lag"), ExactBackend()):
            backend.open(dim=8)
            lags = measure_lag(backend, 8, probes=3, rng=rng)
            assert len(lags) == 3 and all(0.0 <= x < 0.5 for x in lags), (backend.name, lags)
            backend.drop()
