"""bench.report.degradation: the end-to-end latency section of a multirun whose two jobs share dataset, embedder and
store (a repeated run) renders a row per job instead of failing (a part's row was looked up in both jobs at once)."""

import pandas as pd

from bench.report.degradation import E2E_TITLE, e2e_section
from bench.results.rundir import RunDir
from bench.selection import e2e


def _job(path, embed_ms):
    path.mkdir(parents=True)
    (path / "summary.csv").write_text("dataset\n")  # a finished job (RunDir.finished)
    rows = [{"dataset": "demo", "embedder": "h", "backend": "exact", "strategy": "limit5", "threshold": float("nan"),
             "format": "A", "part": part, "n": 4, "p50_ms": ms, "p99_ms": 2 * ms, "share_of_e2e": 0.5, "dominant": "embed"}
            for part, ms in (("embed", embed_ms), ("http", float("nan")), ("store", 0.1), ("format", 0.01), ("e2e", embed_ms + 0.11))]
    pd.DataFrame(rows).assign(n=[4, 0, 4, 4, 4]).to_csv(path / e2e.SUMMARY_FILE, index=False)


def test_two_jobs_with_the_same_store_give_two_rows(tmp_path):
    _job(tmp_path / "job0", 1.0)
    _job(tmp_path / "job1", 3.0)
    lines = e2e_section(RunDir(tmp_path))
    assert lines[0] == E2E_TITLE
    rows = [ln for ln in lines if ln.startswith("| demo")]
    assert len(rows) == 2
    assert "| 1.000 / 2.000 | n/a | 0.100 / 0.200 |" in rows[0] and "| 3.000 / 6.000 | n/a |" in rows[1]
