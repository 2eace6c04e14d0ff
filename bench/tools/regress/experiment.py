"""Running the experiment: ``python -m bench -m experiment=regress`` into the run directory, then the latency pass (a child
process) and meta.json (``finish_run``); ``write_baseline`` replaces ``reports/baseline/<dataset>/`` with a run's files.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench.results.rundir import JOBS, LATENCY, RunDir
from bench.tools.regress.runs import load_run, question_set_id
from bench.tools.regress.settings import BASELINE_FILES, REPO, RUN_FLAGS, GateConfig, RegressError, gate_config

log = logging.getLogger("bench.tools.regress")  # the package's logger: its lines read as before the split


def machine() -> dict:
    """What the latency ratios depend on besides the code: CPU (vendor, family, model, stepping, name, a digest of its
    flags, from /proc/cpuinfo where there is one), architecture and usable cores. Two runs compare their latency at
    ``latency_ratio_max`` only when these are equal."""
    import hashlib
    import platform

    cpu: dict[str, str] = {}
    try:
        first = Path("/proc/cpuinfo").read_text(errors="replace").split("\n\n")[0]
    except OSError:
        first = ""
    for line in first.splitlines():
        key, _, value = line.partition(":")
        cpu[key.strip()] = value.strip()
    flags = cpu.get("flags", "")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu.get("model name") or platform.processor() or None, "vendor": cpu.get("vendor_id"),
            "family": cpu.get("cpu family"), "model": cpu.get("model"), "stepping": cpu.get("stepping"),
            "flags_sha256": hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:16] if flags else None,
            "arch": platform.machine(), "cores": cores}


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run_experiment(run_dir: Path, overrides: Sequence[str], log_path: Path) -> None:
    """``python -m bench -m experiment=regress`` into ``run_dir`` (replaced), output to ``log_path``."""
    run_dir = Path(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    from bench.cli.config import sweep_dir_override

    cmd = [sys.executable, "-m", "bench", "-m", "experiment=regress", sweep_dir_override(run_dir), *RUN_FLAGS, *overrides]
    log.info("running: %s", " ".join(cmd))
    t0 = time.perf_counter()
    with open(log_path, "w") as f:
        proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.info("experiment finished in %.0f s (exit %d); log: %s", time.perf_counter() - t0, proc.returncode, log_path)
    if proc.returncode != 0 or not RunDir(run_dir).finished():
        tail = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-1:] or ["no output"]
        raise RegressError(f"regress FAIL: the experiment did not run (exit {proc.returncode}): {tail[0][:300]} (log: {log_path})")


def finish_run(run_dir: Path, overrides: Sequence[str], stores_dir: Path, slow: Sequence[str] = ()) -> GateConfig:
    """After the experiment: the latency pass (latency.csv, in a child process) and meta.json in ``run_dir``."""
    run = RunDir(run_dir)
    cfg = gate_config(run_dir)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench.tools.regress", "--latency-pass", str(run_dir), "--out", str(stores_dir),
                           *[f"--fault-slow={s}" for s in slow]], cwd=REPO, stdin=subprocess.DEVNULL)
    if proc.returncode != 0 or not run.has(LATENCY):
        raise RegressError(f"regress FAIL: the latency pass over {run_dir} failed (exit {proc.returncode}; its error is above)")
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    log.info("latency pass finished in %.0f s (load average %s)", time.perf_counter() - t0, load)
    rows = run.questions()
    jobs = run.jobs() if run.has(JOBS) else []
    failed = run.failed()
    meta = {"made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_commit": git_commit(),
            "command": "python -m bench -m experiment=regress " + " ".join([*RUN_FLAGS, *overrides]),
            "dataset": str(rows["dataset"].iloc[0]), "dataset_source": jobs[0].get("dataset_source") if jobs else None,
            "embedder": str(rows["embedder"].iloc[0]), "backends": sorted(rows["backend"].unique().tolist()),
            "strategies": list(dict.fromkeys(rows["strategy"])), "n_questions": int(rows["question_id"].nunique()),
            "question_set": question_set_id(rows), "labels_sha256": run.labels().get(str(rows["dataset"].iloc[0])),
            "load_average": load, "machine": machine(), "fault_slow": list(slow) or None,
            "gate": asdict(cfg), "failed_jobs": failed, "jobs": jobs}
    run.write_meta(meta)
    return cfg


BASELINE_README = """# Regression baseline: {dataset}

Written by `make baseline` (`python -m bench.tools.regress --write-baseline`) on {made_at}, commit {commit}.
Never written automatically: `make regress` only reads it. Review the diff and commit it on purpose.

- Dataset: **{dataset}** ({n_questions} questions; {source}).
  {needs}
- Embedder: {embedder}. Stores: {backends}. Strategies: {strategies}.
- Command: `{command}`
- Files: `summary.csv`, `questions.parquet` (per-question rows, no text), `meta.json` (the run's
  settings and job metadata, the machine's load average), `latency.csv` (latency pass: per store, pass and query
  its search time and the exact store's right after it).
"""


def write_baseline(run_dir: Path, baseline_root: Path) -> Path:
    """Replace ``baseline_root/<dataset>/`` with the run's files (staged, then swapped by renames)."""
    run = load_run(run_dir)
    dest = Path(baseline_root) / run.dataset
    stage, old = dest.with_name(f".{dest.name}.tmp"), dest.with_name(f".{dest.name}.old")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    for name in BASELINE_FILES:
        if RunDir(run_dir).has(name):
            shutil.copyfile(RunDir(run_dir).file(name), stage / name)
            os.chmod(stage / name, 0o644)
    m = run.meta
    needs = ("Needs LoCoMo (original release) at `$BENCH_DATA_DIR/locomo/locomo10.json`; without it `make regress` "
             "runs on the demo corpus and is gated against `reports/baseline/demo/`."
             if run.dataset != "demo" else "Needs nothing: the demo corpus ships in `datasets/demo/`.")
    from bench.output import scrub

    (stage / "README.md").write_text(scrub(BASELINE_README.format(
        dataset=run.dataset, made_at=m.get("made_at", "?"), commit=m.get("git_commit") or "?", n_questions=m.get("n_questions", "?"),
        source=m.get("dataset_source") or "?", needs=needs, embedder=run.embedder, backends=", ".join(m.get("backends", [])),
        strategies=", ".join(m.get("strategies", [])), command=m.get("command", "?"))))
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        os.replace(dest, old)
    os.replace(stage, dest)
    shutil.rmtree(old, ignore_errors=True)
    return dest
