"""PS1-PS3 (issue 29): one cold run of a full-size corpus. They take the dataset by name (``--ps-dataset``, default locomo;
``longmemeval_s`` at full size; configs/dataset/<name>.yaml), so the same figures run on LoCoMo and on LongMemEval_S.

PS1 times a cold run (empty caches; MiniLM, exact store, default strategies, report included; a child process, wall);
    reference: the raw ONNX session embedding the run's distinct texts alone at the same thread count (all cores,
    ``raw_distinct_child``). Target <= 1.15.
PS2 times the same run again with every cache warm (report included), wall; reference: none, a budget. Target <= 90 s.
PS3 measures the cold run's peak RSS (VmHWM and the process tree); reference: none, a budget. Target <= 3 GB.

PS1-PS3 are one cold run: ``--only``, not in the default parts (hours at LongMemEval_S size on 2 cores).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.tools.perf.common import (
    REPO,
    RawOnnx,
    Ratio,
    _failed,
    bench_cmd,
    compose,
    ps_overrides,
    run_measured,
    temp_cache,
    vm_hwm_bytes,
)


def distinct_texts(dataset: str) -> list[str]:
    """Every distinct model input of a run on ``dataset`` with MiniLM (a symmetric model: turns and questions share keys)."""
    from bench.cli.config import build

    corpus = build(compose(ps_overrides(dataset)).dataset)
    return list(dict.fromkeys([t.text for t in corpus.turns()] + [q.text for q in corpus.questions]))


def raw_distinct_child(dataset: str) -> dict:
    """Run in a child process: embed the distinct texts of ``dataset`` with the raw ONNX session (``RawOnnx``, all cores,
    the embedder's batches); seconds of the embedding alone (loading the corpus and the model excluded)."""
    texts = distinct_texts(dataset)
    raw = RawOnnx()
    raw.embed(["warm up the session"])
    t0 = time.perf_counter()
    for lo in range(0, len(texts), 16_384):  # bounded working memory, as the embedder's parts
        raw.embed(texts[lo : lo + 16_384])
    elapsed = time.perf_counter() - t0
    return {"texts": len(texts), "seconds": elapsed, "texts_per_s": len(texts) / elapsed, "vm_hwm_bytes": vm_hwm_bytes(os.getpid())}


def ps1_ps3(dataset: str, *, timeout_s: float = 6 * 3600.0) -> list[Ratio]:
    """PS1: a cold run (empty embedding and trace caches, report included) / the raw ONNX session embedding the distinct
    texts alone, both at all cores; PS2: the same run again with every cache warm (<= 90 s); PS3: the cold run's peak RSS."""
    with temp_cache(None) as (tmp, cache):
        cmd = [*ps_overrides(dataset), f"paths.cache={cache}"]
        cold = run_measured(bench_cmd(*cmd, f"hydra.run.dir={tmp / 'cold'}", trace_cache=True), timeout_s=timeout_s)
        warm = run_measured(bench_cmd(*cmd, f"hydra.run.dir={tmp / 'warm'}", trace_cache=True), timeout_s=timeout_s) \
            if cold.returncode == 0 else cold
        code = f"import json; from bench.tools.perf.ps1_ps3 import raw_distinct_child; print(json.dumps(raw_distinct_child({dataset!r})))"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        raw = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr.strip()[-300:]}
        raw["cpu_s_with_loading"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        log_lines = _cache_lines(tmp / "cold")
    err = "" if cold.returncode == 0 else _failed(cold, "cold run")
    peak = max(cold.hwm_bytes, cold.tree_peak_bytes) / 1e9
    cmd_text = f"python -m bench {' '.join(bench_cmd(*ps_overrides(dataset), trace_cache=True)[3:])} paths.cache=<empty>"
    return [
        Ratio("PS1", f"cold {dataset} run (MiniLM, exact, report included) / raw ONNX session embedding its distinct texts alone",
              cold.wall_s / raw["seconds"] if not err and "seconds" in raw else float("nan"), "<=", 1.15,
              method=(f"`{cmd_text}` in a child process (wall) vs `bench.tools.perf.ps1_ps3.raw_distinct_child('{dataset}')` in another "
                      "(RawOnnx over every distinct turn and question text, all cores, loading excluded)"),
              details={"cold_wall_s": cold.wall_s, "cold_cpu_s": cold.cpu_s, "raw": raw, "error": err, "cache_log": log_lines}),
        Ratio("PS1/cpu", "the same, CPU seconds (the raw child's include loading the corpus and the model)",
              cold.cpu_s / raw["cpu_s_with_loading"] if not err and raw.get("cpu_s_with_loading") else float("nan"), "<=", 1.15,
              info=True, method="user+system CPU of each child (os.wait4 / RUSAGE_CHILDREN): less sensitive to a shared machine's load",
              details={"cold_cpu_s": cold.cpu_s, "raw_cpu_s": raw.get("cpu_s_with_loading")}),
        Ratio("PS2", f"warm full {dataset} rerun (every cache hot, exact store, default strategies, report included)",
              warm.wall_s if warm.returncode == 0 else float("nan"), "<=", 90.0, "s",
              method="the PS1 command again on the cache the cold run filled (embeddings and trace hot; resume=false), wall",
              details={"wall_s": warm.wall_s, "cpu_s": warm.cpu_s, "error": "" if warm.returncode == 0 else _failed(warm, "warm run")}),
        Ratio("PS3", f"peak RSS of the cold {dataset} run", peak if not err else float("nan"), "<=", 3.0, "GB",
              method="max of the cold run's VmHWM and its process tree's summed RSS, sampled from /proc every 0.2 s",
              details={"vm_hwm_gb": cold.hwm_bytes / 1e9, "tree_peak_gb": cold.tree_peak_bytes / 1e9}),
    ]


def _cache_lines(run_dir: Path) -> list[str]:
    """The embedding cache's progress and summary lines of a run's log (rate and ETA as the run printed them)."""
    path = run_dir / "cli.log"
    if not path.is_file():
        return []
    return [ln.strip()[-200:] for ln in path.read_text(errors="replace").splitlines()
            if "embedding cache" in ln or "bench.progress" in ln and "embed" in ln][-12:]


def run(args, ctx) -> list[Ratio]:
    """PS1, PS2 and PS3 (the caller keeps the ones asked for)."""
    return ps1_ps3(args.ps_dataset)
