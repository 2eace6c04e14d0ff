"""bench.report.degradation: the end-to-end latency section of a multirun whose two jobs share dataset, embedder and
store (a repeated run) renders a row per job instead of failing (a part's row was looked up in both jobs at once); the
degradation section shows each strategy at the report's best-F1 threshold (``bench.report.markdown.best_by_f1``)."""

import pandas as pd

from bench.report.degradation import E2E_TITLE, degrade_section, e2e_section
from bench.results.rundir import RunDir
from bench.selection import degrade, e2e


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


def _faulted_job(path):
    # thr: F1 0.5 at threshold 0.3, 0.7 at 0.5 (its best); limit5 has no threshold. degradation.csv holds both thresholds.
    path.mkdir(parents=True)
    key = {"dataset": "demo", "embedder": "h", "backend": "exact"}
    pd.DataFrame([{**key, "strategy": "thr", "threshold": 0.3, "f1": 0.5}, {**key, "strategy": "thr", "threshold": 0.5, "f1": 0.7},
                  {**key, "strategy": "limit5", "threshold": float("nan"), "f1": 0.4}]).to_csv(path / "summary.csv", index=False)
    rows = [{**key, "strategy": s, "threshold": t, "format": "A", "cause": cause, "policy": policy, "timeout_ms": ms,
             "recall": recall, "recall_kept": 0.5, "failed_share": 0.25, "tokens_injected_mean": 10.0}
            for s, t, recall in (("thr", 0.3, 0.6), ("thr", 0.5, 0.8), ("limit5", float("nan"), 0.9))
            for cause, policy, ms in (("none", "empty", float("nan")), ("timeout", "empty", 10.0), ("timeout", "last_k", 10.0))]
    pd.DataFrame(rows).to_csv(path / degrade.FILE, index=False)
    (path.parent / "summary.csv").write_text((path / "summary.csv").read_text())  # the multirun's merged summary


def test_degradation_rows_are_the_report_s_best_by_f1(tmp_path, monkeypatch):
    import bench.report.markdown as markdown

    _faulted_job(tmp_path / "run" / "job0")
    rows = [ln for ln in degrade_section(RunDir(tmp_path / "run")) if ln.startswith("| demo")]
    # thr at its best-F1 threshold 0.5 (recall 0.8), limit5 without a threshold (recall 0.9)
    assert [r.split(" | ")[2:4] for r in rows] == [["thr @ 0.50", "0.800"], ["limit5", "0.900"]]
    worst = lambda s: s.dropna(subset=["f1"]).loc[s.dropna(subset=["f1"]).groupby("strategy", sort=False)["f1"].idxmin()]
    monkeypatch.setattr(markdown, "best_by_f1", worst)  # one rule for "best" in the whole report: the section follows it
    rows = [ln for ln in degrade_section(RunDir(tmp_path / "run")) if ln.startswith("| demo")]
    assert [r.split(" | ")[2] for r in rows] == ["thr @ 0.30", "limit5"]
