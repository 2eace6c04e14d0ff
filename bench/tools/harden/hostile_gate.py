"""Class 7, a regression gate that cannot tell: the gate, run black-box (``python -m bench.tools.regress --run``) on
doctored copies of the committed demo baseline, must exit 1 whenever it cannot vouch for the run: a large drop on
few questions, another embedder, a narrower threshold grid, a store's rows or some questions' rows missing, no
baseline at all. An identical copy must pass (exit 0), so a gate that always fails is not "handled"."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from bench.tools.harden.cases import REPO, cli_env
from bench.tools.harden.hostile import Check

BASELINE = REPO / "reports" / "baseline" / "demo"  # the committed demo baseline: 25 questions, 22 scored, 3 stores
METRICS = ("recall", "f1", "precision", "hit")


def _copy(d: Path) -> tuple[Path, Path]:
    """(baseline root holding demo/, run dir): both copies of the committed demo baseline."""
    root, run = d / "baseline", d / "run"
    shutil.copytree(BASELINE, root / "demo")
    shutil.copytree(BASELINE, run)
    return root, run


def _gate(d: Path, root: Path, run: Path, out: str = "out") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.tools.regress", "--run", str(run), "--baseline-root", str(root),
                           "--out", str(d / out)], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120)


def _last(p: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else (p.stderr.strip().splitlines() or ["no output"])[-1][:300]


def _rows(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / "questions.parquet")


def _write(run: Path, rows: pd.DataFrame) -> None:
    rows.to_parquet(run / "questions.parquet", index=False)


def _expect_fail(d: Path, doctor) -> tuple[bool, str]:
    """An untouched copy passes, the doctored one (``doctor(root, run) -> what``) exits 1."""
    root, run = _copy(d)
    same = _gate(d, root, run, "same")
    if same.returncode != 0:
        return False, f"an identical copy of the baseline did not pass (exit {same.returncode}): {_last(same)}"
    what = doctor(root, run)
    p = _gate(d, root, run)
    return p.returncode == 1, f"{what}: exit {p.returncode}: {_last(p)}"


def _lose_gold(root: Path, run: Path) -> str:
    rows = _rows(run)
    lim = (rows["strategy"] == "limit5") & ~rows["adversarial"].astype(bool)
    hit = rows[lim & (rows["recall"] > 0)]
    lost = sorted(hit["question_id"].astype(str).unique())[:5]
    before = rows[lim].groupby("backend")["recall"].mean()
    m = lim & rows["question_id"].astype(str).isin(lost)
    for col in METRICS:
        rows.loc[m, col] = 0.0
    rows.loc[m, "n_correct"] = 0
    _write(run, rows)
    after = rows[lim].groupby("backend")["recall"].mean()
    return (f"5 of {rows.loc[lim, 'question_id'].nunique()} scored questions lose their gold at limit5 "
            f"(recall {before.mean():.3f} -> {after.mean():.3f} on {len(after)} stores)")


def _other_embedder(root: Path, run: Path) -> str:
    rows = _rows(run).assign(embedder="bge-small-en-v1.5/other")
    _write(run, rows)
    s = pd.read_csv(run / "summary.csv").assign(embedder="bge-small-en-v1.5/other")
    s.to_csv(run / "summary.csv", index=False)
    return "the run uses another embedder than the baseline"


def _narrow_grid(root: Path, run: Path) -> str:
    rows = _rows(run)
    keep = rows["threshold"].isna() | (rows["threshold"] <= 0.3 + 1e-9)
    _write(run, rows[keep])
    return f"threshold grid cut to <= 0.3 ({rows.loc[keep, 'threshold'].nunique()} of {rows['threshold'].nunique()} thresholds)"


def _store_rows_missing(root: Path, run: Path) -> str:
    rows = _rows(run)
    _write(run, rows[rows["backend"] != "seekdb"])
    return "every seekdb row missing (its job is in meta.json)"


def _some_questions_missing(root: Path, run: Path) -> str:
    rows = _rows(run)
    qs = sorted(rows["question_id"].astype(str).unique())[:5]
    drop = (rows["backend"] == "sqlite_vec") & (rows["strategy"] == "limit5") & rows["question_id"].astype(str).isin(qs)
    _write(run, rows[~drop])
    return "sqlite_vec limit5 rows of 5 questions missing (the other stores have them)"


def _no_baseline(root: Path, run: Path) -> str:
    shutil.rmtree(root / "demo")
    (root / "locomo_ci").mkdir()
    return "no baseline for the run's dataset"



CHECKS = [
    Check(7, "gate: 5 of 22 demo questions lose their gold (limit5 recall 0.659 -> ~0.455) -> exit 1",
          lambda d: _expect_fail(d, _lose_gold)),
    Check(7, "gate: run made with another embedder than the baseline -> exit 1", lambda d: _expect_fail(d, _other_embedder)),
    Check(7, "gate: narrower threshold grid than the baseline -> exit 1", lambda d: _expect_fail(d, _narrow_grid)),
    Check(7, "gate: a store's rows missing from the run -> exit 1", lambda d: _expect_fail(d, _store_rows_missing)),
    Check(7, "gate: one point's rows missing for 5 questions -> exit 1", lambda d: _expect_fail(d, _some_questions_missing)),
    Check(7, "gate: no baseline for the run's dataset -> exit 1", lambda d: _expect_fail(d, _no_baseline)),
]
