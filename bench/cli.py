"""Command line: the only module that knows Hydra. ``python -m bench [overrides]`` / ``-m`` multirun.

One job = one (dataset, embedder, backend) trace, swept over every selected strategy and threshold.
A job writes raw results into its own directory; a single run then writes its report there, and a
multirun's report is written by ``CollectRuns`` over every job. Either way the finished run is
copied to ``reports/latest``.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from bench.config import build, build_strategies, fingerprint, redacted_yaml, to_plain
from bench.results import error_line, publish_latest, write_atomic

log = logging.getLogger("bench")


def get_trace(cfg: DictConfig, corpus, embedder, roles: tuple[str, ...] | None):
    """The trace for (dataset, embedder, store, depth, roles): from the cache, else measured once."""
    from bench.runner import Trace, build_trace

    backend_cfg = {k: v for k, v in to_plain(cfg.backend).items() if k not in ("path", "collection")}
    corpus_id = fingerprint(corpus.source, len(corpus.turns()), [q.question_id for q in corpus.questions])
    key = fingerprint(corpus.name, corpus_id, embedder.model_id, backend_cfg, int(cfg.depth), roles)
    cached = Path(cfg.paths.cache) / "traces" / key
    if cfg.trace_cache and (cached / "trace.parquet").exists():
        trace = Trace.load(cached)
        log.info("reusing trace %s measured at %s (no store query)", key, trace.meta.get("measured_at"))
        trace.meta["reused_from"] = str(cached)
        return trace
    backend = build(cfg.backend, collection=f"rb_{key}")
    try:
        trace = build_trace(corpus, embedder, backend, depth=int(cfg.depth), roles=roles,
                            warmup=int(cfg.warmup), progress=bool(cfg.progress))
    finally:
        try:
            backend.drop()
        except Exception as exc:  # e.g. the server died: keep the real error, not the drop's
            log.warning("could not drop collection rb_%s: %s", key, error_line(exc))
        finally:
            backend.close()
    trace.meta.update(trace_key=key, dataset_source=corpus.source)
    trace.save(cached)
    return trace


def _number(name: str, value, *, integer: bool = False, lo: float | None = None, hi: float | None = None) -> float:
    try:
        x = float(value)
        if integer and (isinstance(value, bool) or x != int(x)):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"config {name}: expected {'an integer' if integer else 'a number'}, got {value!r}") from None
    if x != x or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise ValueError(f"config {name}: {value!r} is outside " + (f"[{lo:g}, {hi:g}]" if hi is not None else f">= {lo:g}"))
    return x


def check_settings(cfg: DictConfig) -> None:
    """Reject bad top-level settings with a one-line message naming the key."""
    _number("depth", cfg.depth, integer=True, lo=1)
    _number("warmup", cfg.warmup, integer=True, lo=0)
    for k in ("start", "stop", "step"):
        _number(f"thresholds.{k}", cfg.thresholds[k], lo=0, hi=1)


def run_job(cfg: DictConfig, out_dir: Path) -> pd.DataFrame:
    """Run one job into ``out_dir``; returns its summary table."""
    check_settings(cfg)
    from collections import Counter

    from bench import formats as F
    from bench import tokens
    from bench.data.card import dataset_card
    from bench.embedders.cache import CachedEmbedder
    from bench.sweep import format_tokens_table, summarise, sweep, threshold_grid

    corpus = build(cfg.dataset)
    inner = build(cfg.embedder)
    # an embedder that computes faster than the cache reads (synthetic) is not cached: at 1M texts the cache would cost GBs
    embedder = CachedEmbedder(inner, Path(cfg.paths.cache) / "embeddings") if getattr(inner, "cacheable", True) else inner
    strategies = build_strategies(cfg.strategy)
    dupes = sorted(n for n, c in Counter(s.name for s in strategies).items() if c > 1)
    if dupes:
        raise ValueError(f"strategy names must be unique within a run: {', '.join(dupes)} used twice (configs/strategy/*.yaml 'name')")
    grid = threshold_grid(cfg.thresholds.start, cfg.thresholds.stop, cfg.thresholds.step)
    formats = F.check_formats(cfg.get("formats") or ["A"])  # injection formats swept (rows repeat per format)
    table = F.token_table(corpus.turns(), lambda texts: tokens.count_tokens_many(texts, cfg.tokens.encoding), F.FORMATS)
    token_counts = dict(table.memory["A"])  # "role: message" lines

    out_dir.mkdir(parents=True, exist_ok=True)
    parts, metas, by_format = [], [], []
    for roles in dict.fromkeys(s.roles for s in strategies):
        trace = get_trace(cfg, corpus, embedder, roles)
        trace.save(out_dir / ("trace" if roles is None else f"trace_{'_'.join(roles)}"))
        specs = [s for s in strategies if s.roles == roles]
        parts.append(sweep(trace, corpus, specs, grid, token_counts, embedder=embedder.model_id, formats=formats, format_tokens=table))
        by_format += format_tokens_table(trace, corpus, specs, token_counts, table, embedder=embedder.model_id)
        metas.append(trace.meta)
    rows = pd.concat(parts, ignore_index=True)
    summary = summarise(rows)
    summary["for_results"] = bool(getattr(inner, "for_results", True))

    write_atomic(out_dir / "questions.parquet", lambda p: rows.to_parquet(p, index=False))
    write_atomic(out_dir / "summary.csv", lambda p: summary.to_csv(p, index=False))
    write_atomic(out_dir / "dataset_card.md", lambda p: p.write_text(dataset_card(corpus)))
    write_atomic(out_dir / "config_resolved.yaml", lambda p: p.write_text(redacted_yaml(cfg)))
    meta = {**metas[0], "traces": metas, "tokens_encoding": cfg.tokens.encoding, "thresholds": list(grid),
            "strategies": [s.name for s in strategies], "formats": list(formats), "format_tokens": by_format,
            "embed_cache": {"hits": getattr(embedder, "hits", None), "misses": getattr(embedder, "misses", None)}}
    write_atomic(out_dir / "meta.json", lambda p: p.write_text(json.dumps(meta, indent=2, default=str)))
    return summary


def finish_run(run_dir: Path, latest: Path | None) -> None:
    from bench.report import write_report

    write_report(run_dir)
    if latest is not None:
        publish_latest(run_dir, latest)
    log.info("report: %s%s", run_dir / "report.md", f" (copied to {latest})" if latest else "")


class CollectRuns(Callback):
    """After a multirun: merge every job's results into the sweep directory and write one report."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from bench.report import collect_jobs

        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            if collect_jobs(sweep_dir):
                finish_run(sweep_dir, Path(config.paths.reports) / "latest" if config.publish_latest else None)
        except Exception as exc:
            log.error("report failed: %s", error_line(exc))


JOB_KEY_IGNORES = ("hydra", "paths", "progress", "publish_latest", "resume", "recommend")


def job_key(cfg: DictConfig) -> str:
    """Hash of what decides a job's results (not where it writes or how it shows progress)."""
    plain = {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k not in JOB_KEY_IGNORES}
    return fingerprint(plain)


def run_or_resume(cfg: DictConfig, out_dir: Path) -> bool:
    """Run a job, or copy its results when an identical job finished before. False when it failed.

    A failure is recorded in ``out_dir/failed.json`` (type and message, no traceback) so that a
    multirun's other jobs finish and the report lists it; finished jobs are kept under
    ``reports/cache/jobs/<key>`` so a re-run skips them.
    """
    import shutil

    key = job_key(cfg)
    done = Path(cfg.paths.cache) / "jobs" / key
    if cfg.get("resume", True) and (done / "summary.csv").exists():
        shutil.copytree(done, out_dir, dirs_exist_ok=True)
        log.info("job %s finished before: results copied from %s (resume=false to re-run)", key, done)
        return True
    try:
        run_job(cfg, out_dir)
    except Exception as exc:  # recorded, reported, never a traceback for the user
        reason = error_line(exc)
        log.error("job failed: %s", reason)
        log.debug("job failure details", exc_info=True)
        out_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(out_dir / "failed.json", lambda p: p.write_text(json.dumps(
            {"job_key": key, "reason": reason, "backend": cfg.backend.get("_target_"), "overrides": list(HydraConfig.get().overrides.task)}, indent=2)))
        return False
    tmp = done.with_name(f".{key}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(out_dir, tmp, ignore=shutil.ignore_patterns("*.log", ".hydra"))
    shutil.rmtree(done, ignore_errors=True)
    tmp.rename(done)
    return True


def main() -> None:
    import hydra

    @hydra.main(version_base="1.3", config_path=str(Path(__file__).resolve().parent.parent / "configs"), config_name="config")
    def _app(cfg: DictConfig) -> None:
        hc = HydraConfig.get()
        out_dir = Path(hc.runtime.output_dir)
        ok = run_or_resume(cfg, out_dir)
        if hc.mode != RunMode.MULTIRUN:
            if not ok:
                sys.exit(1)
            try:
                finish_run(out_dir, Path(cfg.paths.reports) / "latest" if cfg.publish_latest else None)
            except Exception as exc:
                log.error("report failed: %s", error_line(exc))
                sys.exit(1)

    _app()


if __name__ == "__main__":
    sys.exit(main())
