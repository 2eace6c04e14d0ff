"""P3a: a warm-cache LoCoMo multirun over every embedded store.

Times: the wall time of a warm-cache LoCoMo multirun over every embedded store of ``configs/backend/`` x the main
strategies (the joblib launcher with 2 jobs when installed), stores queried.
Reference: none: a budget in seconds (issue 17).
Target: <= 60 s.

Printed beside it, as information (P3a/traces): the same multirun once more with the trace cache warm as well (a
re-sweep with other strategies or thresholds: no store queried).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

from bench.tools.perf.common import MAIN_STRATEGIES, REPO, Ratio, _failed, bench_cmd, run_measured, temp_cache, warm_embeddings


def p3_locomo_sweep(*, stores: Sequence[str], n_jobs: int, data: list[str]) -> list[Ratio]:
    real = REPO / "reports" / "cache" / "embeddings"
    warm_embeddings(data, real)
    launcher = []
    if n_jobs > 1 and _has_joblib_launcher():
        launcher = ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}"]
    args = [*data, f"backend={','.join(stores)}", f"strategy={MAIN_STRATEGIES}", *launcher]
    with temp_cache(real) as (tmp, cache):
        runs = {}
        for label, warm in (("cold", False), ("warm", True)):  # the first run saves its traces; the second reuses them
            sweep_dir = tmp / f"multirun_{label}"
            proc = run_measured(bench_cmd(*args, f"paths.cache={cache}", f"hydra.sweep.dir={sweep_dir}", multirun=True,
                                          trace_cache=warm))
            failed = sorted(str(p.parent.name) for p in sweep_dir.glob("*/failed.json"))
            ok = proc.returncode == 0 and (sweep_dir / "report.md").exists() and not failed
            runs[label] = (proc.wall_s if ok else float("nan"), {
                "wall_s": proc.wall_s, "failed_jobs": failed, "jobs": job_breakdown(sweep_dir),
                "report_s": _report_seconds(sweep_dir), "error": "" if proc.returncode == 0 else _failed(proc, "multirun")})
    how = f"with the joblib launcher, n_jobs={n_jobs}" if launcher else "with the basic (sequential) launcher"
    cmd = f"`python -m bench -m backend={','.join(stores)} strategy={MAIN_STRATEGIES}` {how}"
    common = {"launcher": "joblib" if launcher else "basic", "n_jobs": n_jobs if launcher else 1}
    return [
        Ratio("P3a", f"warm-cache LoCoMo multirun: {' + '.join(stores)} x main strategies, every store queried", runs["cold"][0],
              "<=", 60.0, "s", method=(f"{cmd}; warm embedding cache, empty trace cache (every store ingested and queried "
                                        "once per question), merged report included"),
              details={**common, **runs["cold"][1]}),
        Ratio("P3a/traces", "the same multirun again: trace cache warm too (a re-sweep: no store queried)", runs["warm"][0],
              "<=", 120.0, "s", method=f"{cmd} trace_cache=true right after P3a, on the traces P3a saved", details={**common, **runs["warm"][1]},
              info=True),
    ]


def _report_seconds(sweep_dir: Path) -> float | None:
    """Seconds from the last job's results to the merged report (the launching process's share at the end)."""
    ends = [p.stat().st_mtime for p in sweep_dir.glob("job*/meta.json")]
    report = sweep_dir / "report.md"
    return round(report.stat().st_mtime - max(ends), 1) if ends and report.exists() else None


def job_breakdown(sweep_dir: Path) -> list[dict]:
    """Per job of a multirun: store, and seconds spent ingesting, waiting for the index, searching, in the store calls."""
    out = []
    for meta_path in sorted(sweep_dir.glob("job*/meta.json")):
        meta = json.loads(meta_path.read_text())
        traces = meta.get("traces") or [meta]
        row = {"job": meta_path.parent.name, "backend": meta.get("backend")}
        for key in ("ingest_seconds", "ready_seconds", "search_loop_seconds", "store_search_seconds"):
            vals = [t.get(key) for t in traces if t.get(key) is not None]
            if vals:
                row[key] = round(sum(vals), 3)
        stamps = _log_stamps(meta_path.parent / "cli.log")
        if stamps:
            row["job_wall_s"] = round(stamps[1] - stamps[0], 3)  # first to last log line of the job
        out.append(row)
    return out


def _log_stamps(path: Path) -> tuple[float, float] | None:
    """(first, last) time of a Hydra job log's ``[YYYY-mm-dd HH:MM:SS,mmm]`` lines, in seconds."""
    import datetime as dt

    if not path.is_file():
        return None
    times = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("[") and len(line) > 24 and line[24] == "]":
            with contextlib.suppress(ValueError):
                times.append(dt.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return (min(times), max(times)) if times else None


def _has_joblib_launcher() -> bool:
    """Is Hydra's joblib launcher installed (looked up, not imported: Hydra stays in bench/cli)?"""
    try:
        return importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is not None
    except ModuleNotFoundError:  # no hydra_plugins namespace at all
        return False


def embedded_stores() -> list[str]:
    """The embedded stores (no server to start), approximate ones first: the slowest, as joblib dispatches in order."""
    from bench.backends.catalog import EMBEDDED, capabilities, store_names

    return sorted(store_names(EMBEDDED), key=lambda n: (capabilities(n).exact, n))


def run(args, ctx) -> list[Ratio]:
    if not ctx.has_locomo:
        ctx.notes.append(f"P3a not measured: no LoCoMo under {ctx.data_dir} (set BENCH_DATA_DIR)")
        return []
    p3 = [s for s in args.p3_stores.split(",") if s] if args.p3_stores else embedded_stores()
    return p3_locomo_sweep(stores=p3, n_jobs=args.n_jobs, data=[])
