"""One finished run of the whole pipeline on the demo corpus (hashing embedder, exact store),
shared by tests/report/test_report.py and tests/report/test_html.py: made once per pytest session."""

import functools
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "datasets" / "demo"


@functools.cache
def demo_run(base: Path) -> Path:
    """``base``/demo_run/latest after ``python -m bench`` (offline: proxies point at a closed port)."""
    reports = Path(base) / "demo_run"
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATA_DIR"}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "bench", f"paths.reports={reports}", "dataset=own", f"dataset.path={DEMO}",
           "embedder=hashing", "backend=exact", "progress=false",
           # the shipped objective (fewest tokens at recall >= recommend.min_recall) with a target the test-only hashing
           # embedder reaches with a threshold (0.7: full context only), so every section of the report has a thresholded point
           "recommend.min_recall=0.4"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"demo run failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return reports / "latest"
