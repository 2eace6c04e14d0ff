"""Opt-in (RECALLBENCH_RAY_TEST=1, with recallbench[ray] installed): the same multirun under the joblib launcher and
on a Ray cluster (a local head on loopback, two worker processes, started and stopped by bench.tools.ray_run)
gives the same merged summary, every column but the store latencies.

Both runs share the embedding cache (content-keyed) but neither reuses a trace or a job (trace_cache=false,
resume=false): each queries its stores. LoCoMo's CI subset when BENCH_DATA_DIR has LoCoMo, else the demo corpus.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess

import pandas as pd
import pytest

from bench.tools import ray_run

if os.environ.get("RECALLBENCH_RAY_TEST") != "1":
    pytest.skip("opt-in: set RECALLBENCH_RAY_TEST=1 (starts a Ray head on 127.0.0.1, about 2 minutes)", allow_module_level=True)
if importlib.util.find_spec("ray") is None or importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None:
    pytest.skip("Ray is not installed: pip install 'recallbench[ray]'", allow_module_level=True)

OVERRIDES = ["dataset=locomo_ci", "backend=exact,sqlite_vec", "embedder=minilm", "strategy=[limit,threshold,hybrid]",
             "progress=false", "trace_cache=false", "resume=false"]
KEYS = ["dataset", "embedder", "backend", "layout", "strategy", "threshold", "format"]


def merged_summary(tmp_path, launcher: str, address: str | None) -> pd.DataFrame:
    root = tmp_path / launcher
    root.mkdir()
    cmd = ray_run.multirun_cmd(address, [*OVERRIDES, f"paths.cache={tmp_path / 'cache'}"], launcher=launcher, root=root)
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900, check=False)
    (root / "multirun.log").write_text(proc.stderr)
    print(f"--- {launcher}: {' '.join(cmd[2:])}\n" + "\n".join(proc.stderr.splitlines()[-15:]))
    assert proc.returncode == 0, f"see {root / 'multirun.log'}: " + proc.stderr[-3000:]
    s = pd.read_csv(root / "reports" / "latest" / "summary.csv")
    return s.sort_values([k for k in KEYS if k in s]).reset_index(drop=True)


@pytest.mark.slow
@pytest.mark.timeout(2100)  # two multiruns, up to 900 s each
def test_ray_and_joblib_give_the_same_quality(tmp_path):
    joblib = merged_summary(tmp_path, "joblib", None)
    with ray_run.local_head(log_file=tmp_path / "head.log") as (address, _started):
        ray = merged_summary(tmp_path, "ray", address)
    assert set(joblib["backend"]) == set(ray["backend"]) == {"exact", "sqlite_vec"}
    quality = [c for c in joblib.columns if not c.startswith("latency")]
    assert len(joblib) == len(ray) > 0
    pd.testing.assert_frame_equal(joblib[quality], ray[quality])
