"""Command line: the only module that knows Hydra. ``python -m bench [overrides]`` / ``-m`` multirun.

One job = one (dataset, embedder, backend) trace, swept over every selected strategy and threshold.
A job writes raw results into its own directory; a single run then writes its report there, and a
multirun's report is written by ``CollectRuns`` over every job. Either way the finished run becomes
``reports/latest``. The job itself is ``bench.pipeline.run`` on the plain values ``plain_job`` makes of the
config (its identity, trace cache and resume included); what decides a cache key is owned by ``bench.run``.

Everything the process prints or logs is scrubbed of secrets (``install_scrubbing``); a fault
(an unwritable cache or run directory, a full disk, Ctrl-C) ends with one line naming what failed
and what finished, and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from bench import pipeline, run
from bench.cli.config import as_bool, check_before_work, explain_override_error, redacted_yaml, strategy_nodes, to_plain
from bench.output import (
    check_env_name,
    error_line,
    install_scrubbing,
    redact,
    redact_override,
    register_secret_env,
    write_atomic,
)
from bench.resources import configs_dir
from bench.results.rundir import ANALYSIS, FAILED, FAULTS, REPORT_MD, SUMMARY, RunDir, collect_jobs

log = logging.getLogger("bench")

EXIT_INTERRUPTED = 130
_STATE = {"interrupted": False, "exit": 0}  # this process's run: set by jobs and the multirun callback, read by main()


# --- settings -----------------------------------------------------------------------------------

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


def _env_settings(node, where: str = ""):
    """(dotted name, value) of every ``*_env`` setting in a plain config tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            name = f"{where}{k}"
            if str(k).endswith("_env") and not isinstance(v, (dict, list)):
                yield name, v
            yield from _env_settings(v, name + ".")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _env_settings(v, f"{where}[{i}].")


def check_settings(cfg: DictConfig) -> None:
    """Reject bad top-level settings with a one-line message naming the key (never echoing a secret)."""
    for name, value in _env_settings(OmegaConf.to_container(cfg, resolve=False)):
        check_env_name(name, value)
        register_secret_env(value)
    if cfg.depth is not None:
        _number("depth", cfg.depth, integer=True, lo=1)
    _number("warmup", cfg.warmup, integer=True, lo=0)
    from bench.strategies.spec import score_bounds

    lo, hi = score_bounds(cfg.get("score"))  # [0, 1] on the similarity; wider on a store's own score (bench.selection.basis)
    for k in ("start", "stop", "step"):
        _number(f"thresholds.{k}", cfg.thresholds[k], lo=0 if k == "step" else lo, hi=hi - lo if k == "step" else hi)
    if cfg.get("ranked"):
        from bench.metrics.ranked import check_ks

        check_ks(list(cfg.ranked.get("ks") or []))
    if cfg.get("conventions"):
        from bench.metrics.ranked import check_ks

        check_ks(list(cfg.conventions.get("ks") or []), "conventions.ks")
    _unit_spec(cfg)
    _replay(cfg)
    _degradation_settings(cfg)
    check_before_work(cfg)  # switches, plugin keys, strategies, the report's settings (bench.cli.config)


def _degradation_settings(cfg: DictConfig) -> None:
    """faults, degrade and e2e (bench.replay.faults, bench.selection.degrade, bench.selection.e2e): one line naming the field."""
    from bench.replay.faults import from_config
    from bench.selection import degrade, e2e

    c = OmegaConf.to_container(cfg, resolve=True)
    from_config(c.get("faults"))
    degrade.check_settings(c.get("degrade"))
    e2e.check_settings(c.get("e2e"))


def plain_job(cfg: DictConfig) -> tuple[pipeline.Inputs, pipeline.Settings]:
    """The config at the door: what the job measures and how it runs, as the plain values ``bench.pipeline.run`` takes.
    The plugins stay plain configs (the pipeline builds them with ``bench.plugins``, its failures recorded)."""
    c = OmegaConf.to_container(cfg, resolve=True)
    inputs = pipeline.Inputs(corpus=to_plain(cfg.dataset), embedder=to_plain(cfg.embedder), store=to_plain(cfg.backend),
                             strategies=tuple(strategy_nodes(cfg.strategy)))
    settings = pipeline.Settings(
        cache=Path(cfg.paths.cache), config=c, depth=cfg.depth, warmup=int(cfg.warmup),
        thresholds=(cfg.thresholds.start, cfg.thresholds.stop, cfg.thresholds.step), formats=tuple(cfg.get("formats") or ["A"]),
        encoding=cfg.tokens.encoding, ranked=c.get("ranked") or {}, conventions_ks=(c.get("conventions") or {}).get("ks"),
        memory=_unit_spec(cfg), metadata_filter=c.get("filter") or None, run_file=cfg.get("run_file"), seed=int(cfg.get("seed", 0)),
        ci_method=str((cfg.get("recommend") or {}).get("ci_method", "t")), progress=bool(cfg.progress),
        trace_cache=bool(cfg.trace_cache), resume=bool(cfg.get("resume", True)), strict=as_bool("strict", cfg.get("strict", False)),
        score=str(cfg.get("score") or "similarity"),  # the score thresholds compare with (bench.selection.basis)
        overrides=tuple(_overrides()), record=redacted_yaml(cfg), replay=_replay(cfg), live=c.get("live") or {},
        faults=c.get("faults"), degrade=c.get("degrade") or {}, e2e=c.get("e2e") or {})
    return inputs, settings


def _replay(cfg: DictConfig) -> str:
    """``replay``: batch (the default) or live (bench.replay.live); ``live.batch`` checked for a live run."""
    value = str(cfg.get("replay") or "batch")
    if value not in ("batch", "live"):
        raise ValueError(f"config replay: expected batch or live, got {value!r}")
    if value == "live":
        live = OmegaConf.to_container(cfg.live, resolve=True) if cfg.get("live") is not None else None
        pipeline.live_batch(live)
        pipeline.live_pace(live)
    return value


def _unit_spec(cfg: DictConfig):
    from bench.data.units import check_spec

    return check_spec(to_plain(cfg.memory) if cfg.get("memory") is not None else None)


def run_or_resume(cfg: DictConfig, out_dir: Path) -> bool:
    """Check the settings and run the job (``bench.pipeline.run``: an identical finished job is copied instead).
    False when it failed: the failure is recorded in ``out_dir/failed.json`` (type and message, no traceback) so that
    a multirun's other jobs finish and the report lists it. The current command's config is always written
    (``config_resolved.yaml``): report-time settings come from the command, never from the cached job."""
    try:
        check_settings(cfg)
        result = pipeline.run(*plain_job(cfg), out_dir)
    except KeyboardInterrupt:
        _STATE["interrupted"] = True
        record_failure(cfg, out_dir, "interrupted (Ctrl-C) before the job finished")
        return False
    except Exception as exc:  # recorded, reported, never a traceback for the user
        reason = error_line(exc)
        log.error("job failed: %s", reason)
        log.debug("job failure details", exc_info=True)
        record_failure(cfg, out_dir, reason)
        return False
    if result.faults:  # a cache that could not be written: the job finished, the run exits non-zero
        _STATE["exit"] = _STATE["exit"] or 1
    return True


def _overrides() -> list[str]:
    """This job's command-line overrides, secrets redacted (empty outside a Hydra job)."""
    try:
        return [redact_override(o) for o in HydraConfig.get().overrides.task]
    except ValueError:  # HydraConfig not set (an in-process call)
        return []


def record_failure(cfg: DictConfig, out_dir: Path, reason: str) -> None:
    """failed.json of a job that failed before the pipeline recorded it (a bad setting, Ctrl-C before it started)."""
    if not pipeline.failed(out_dir):
        pipeline.record_failure(out_dir, reason, store=(cfg.get("backend") or {}).get("_target_"), overrides=_overrides())


def finish_run(run_dir: Path, latest: Path | None, *, defer: bool = False) -> None:
    """The run's report (``defer``: the short one, ``bench.report.markdown.write_deferred_report``), ``latest`` updated,
    the verdict and the corpus's label defects on the console."""
    from bench.analysis.tables import write_tables
    from bench.report.markdown import write_deferred_report, write_report

    report = write_deferred_report(run_dir) if defer else write_report(run_dir, write_tables(run_dir))
    if latest is not None:
        run.publish_latest(run_dir, latest)
    if defer:
        log.info("report deferred (defer_report=true): recallbench report %s writes the full one", run_dir)
    for line in verdict_lines(RunDir(run_dir)):
        log.info("%s", line)
    for m in {m.get("dataset"): m for m in RunDir(run_dir).jobs()}.values():  # one line per dataset: its label defects by kind
        if m.get("defects"):
            log.warning("%s: %s (listed in the report's dataset card)", m.get("dataset"), m.get("defects_summary"))
        else:
            log.info("%s: no label defects", m.get("dataset"))
    from bench.embedders.coverage import warning_line

    for (dataset, _), m in {(m.get("dataset"), m.get("embedder")): m for m in RunDir(run_dir).jobs()}.items():
        line = warning_line(m.get("coverage") or {}, dataset)  # one line per (dataset, embedder) a model cannot read
        if line:
            log.warning(line)
    log.info("report: %s%s", report, f" (latest -> {run_dir})" if latest else "")


def plain(text) -> str:
    """Markdown of the first screen as console text: no code-span backticks, no escaping backslashes."""
    return re.sub(r"\\(.)", r"\1", str(text).replace("`", ""))


def plain_table(header, rows) -> list[str]:
    """Rows of cells as aligned plain text (two spaces between columns)."""
    cells = [list(header), *(list(r) for r in rows)]
    width = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in cells]


def verdict_lines(run: RunDir) -> list[str]:
    """The first screen per dataset (``bench.analysis.verdict.first_screen``): the verdict, the "what to ship" table,
    what its intervals are about, and why (or how sure)."""
    if not (run.path / ANALYSIS / "verdict.csv").is_file():
        return []
    from bench.analysis.tables import load_settings
    from bench.analysis.verdict import first_screen

    verdicts, points, cfg = run.table("verdict"), run.table("recommendation"), load_settings(run)
    shortlist = run.table("shortlist") if (run.path / ANALYSIS / "shortlist.csv").is_file() else None
    out = []
    for _, v in verdicts.iterrows():
        screen = first_screen(v.to_dict(), shortlist, points, cfg)
        out.append(f"{v['dataset']}: {plain(screen.headline)}")
        if screen.rows:
            out += ["  " + line for line in plain_table(screen.header, [[plain(c) for c in r] for r in screen.rows])]
            out.append(f"  {plain(screen.about)}")
        best = points[(points["dataset"] == v["dataset"]) & points["best"]]
        if v["kind"] == "too_little_data":
            out.append(f"  why: {plain(v['reasons'])}")
        elif v["kind"] == "use" and len(best):
            b = best.iloc[0]
            stable = (f"the threshold is chosen in {b['threshold_share']:.0%} of bootstrap resamples; "
                      if pd.notna(b["threshold_share"]) else "")
            out.append(f"  how sure: {stable}the runner-up is significantly worse (paired t test over {b['n_conversations']} "
                       "conversations, Holm-corrected) or there is none")
    return out


def _finish(run_dir: Path, cfg) -> None:
    """The report of what finished, ``reports/latest`` updated; faults become one line and the exit code."""
    try:
        publish = as_bool("publish_latest", cfg.publish_latest) and not _STATE["interrupted"]  # a run cut short is not the latest
        finish_run(run_dir, Path(cfg.paths.reports) / "latest" if publish else None, defer=as_bool("defer_report", cfg.get("defer_report", False)))
    except KeyboardInterrupt:
        _STATE["interrupted"] = True
        log.error("interrupted (Ctrl-C) while writing the report; the results are in %s (make report RUN=%s rebuilds it)", run_dir, run_dir)
    except Exception as exc:
        log.error("report failed: %s; the results are in %s", error_line(exc), run_dir)
        _STATE["exit"] = _STATE["exit"] or 1


MULTIRUN_YAML = "multirun.yaml"  # Hydra's copy of the sweep's config and raw overrides, written before the first job


def redact_multirun_yaml(sweep_dir: Path) -> None:
    """Rewrite Hydra's ``multirun.yaml`` with secrets redacted (``bench.output.redact``; its override lists by
    ``redact_override``). Hydra writes it raw before the first job: every job start and the multirun's end redo this."""
    path = Path(sweep_dir) / MULTIRUN_YAML
    try:
        if not path.is_file():
            return
        text = path.read_text()
        clean = OmegaConf.to_yaml(OmegaConf.create(redact(OmegaConf.to_container(OmegaConf.load(path), resolve=False))))
        if clean != text:
            write_atomic(path, lambda p: p.write_text(clean))
    except Exception as exc:  # noqa: BLE001  (unreadable or unwritable: it must not stay as it is)
        log.error("could not redact %s (%s); deleting it", path, error_line(exc))
        path.unlink(missing_ok=True)


class CollectRuns(Callback):
    """After a multirun: merge every job's results into the sweep directory and write one report."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        _STATE["sweep_dir"] = str(config.hydra.sweep.dir)  # main() redacts its multirun.yaml whatever happens next

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        redact_multirun_yaml(sweep_dir)
        try:
            finished = collect_jobs(sweep_dir)
        except Exception as exc:
            log.error("could not merge the jobs of %s: %s", sweep_dir, error_line(exc))
            _STATE["exit"] = _STATE["exit"] or 1
            return
        jobs = RunDir(sweep_dir).all_job_dirs()
        if any(j.has(FAULTS) for j in jobs):
            _STATE["exit"] = _STATE["exit"] or 1
        if any("interrupted" in f.get("reason", "") for j in jobs if j.has(FAILED) for f in j.failed()):
            _STATE["interrupted"] = True
        if finished:
            _finish(sweep_dir, config)
        else:
            _STATE["exit"] = _STATE["exit"] or 1
        if _STATE["interrupted"]:
            n = sum(1 for j in jobs if j.has(SUMMARY))
            log.error("interrupted (Ctrl-C): %d job(s) finished%s; reports/latest is unchanged", n,
                      f"; their report: {sweep_dir / REPORT_MD}" if finished else "")


# --- the process --------------------------------------------------------------------------------

def like_for_like_layout(args: list[str]) -> dict[str, str] | None:
    """A multirun that sweeps stores (``swept_stores``) whose configs default to different layouts
    (``configs/backend/*.yaml``: the embedded stores one collection per conversation, servers and Pinecone one shared
    collection) and gives no ``backend.layout``: {store: its default layout}, so ``main`` can run them all in ``shared``
    (their latency then compares like for like). None otherwise (not a multirun, one store, one layout, a layout given,
    or overrides Hydra will reject itself)."""
    from bench.backends.catalog import backend_config
    from bench.backends.layout import SHARED

    stores = swept_stores(args)
    if not stores or any(a.split("=", 1)[0].lstrip("+~") == "backend.layout" for a in args if "=" in a):
        return None
    try:
        layouts = {n: str(backend_config(n).get("layout", SHARED)) for n in stores}
    except Exception:  # noqa: BLE001  (an unknown store: Hydra says what is wrong with it)
        return None
    return layouts if len(set(layouts.values())) > 1 else None


FRESH = ("trace_cache", "resume")  # off in a comparison of stores unless given: every store's latency timed in this run


def swept_stores(args: list[str]) -> list[str]:
    """The stores a multirun sweeps with ``backend=a,b`` (``choice``/``glob`` too); [] when not a multirun, one store
    is named, or the overrides are ones Hydra will reject itself."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from bench.resources import plugin_names

    if not {"-m", "--multirun"} & set(args):
        return []
    try:
        for o in OverridesParser.create().parse_overrides([a for a in args if "=" in a and not a.startswith("-")]):
            if o.key_or_group == "backend" and o.is_sweep_override():
                v = o.value()
                names = v.filter(plugin_names("backend")) if hasattr(v, "filter") else list(o.sweep_string_iterator())
                return list(dict.fromkeys(names)) if len(set(names)) > 1 else []
    except Exception:  # noqa: BLE001  (a bad override: Hydra says what is wrong with it)
        return []
    return []


def like_for_like(args: list[str]) -> tuple[list[str], list[str]]:
    """(overrides to add, one note line each) so the stores a multirun compares run like for like: one layout
    (``like_for_like_layout``) and latency timed in this run (``trace_cache=false resume=false`` unless either is given:
    a cached trace or job carries the latency of the run that measured it). The depth is the run's ``depth`` for every
    store; the report names any store whose largest k cut it (``bench.report.latency``)."""
    stores = swept_stores(args)
    if not stores:
        return [], []
    extra, notes = [], []
    mixed = like_for_like_layout(args)
    if mixed:
        extra.append("backend.layout=shared")
        notes.append("the stores swept default to different layouts (" + ", ".join(f"{n} {lay}" for n, lay in mixed.items())
                     + "): all run with backend.layout=shared so they compare like for like (give backend.layout=... to choose)")
    given = {a.split("=", 1)[0].lstrip("+~") for a in args if "=" in a}
    if not given & set(FRESH):
        extra += [f"{k}=false" for k in FRESH]
        notes.append(f"comparing stores ({', '.join(stores)}): every store's latency is timed in this run "
                     "(trace_cache=false resume=false; give trace_cache=true resume=true to reuse cached results)")
    return extra, notes


def main() -> int:
    import os

    import hydra

    verbose = any(a in ("-v", "--verbose") for a in sys.argv[1:])  # ours, not Hydra's: the libraries' INFO lines too
    sys.argv = [a for a in sys.argv if a not in ("-v", "--verbose")]
    install_scrubbing(sys.argv[1:])
    run.new_run_id()
    extra, notes = like_for_like(sys.argv[1:])  # one layout, fresh latency: the stores swept compare like for like
    sys.argv += extra
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    debug = os.environ.get("HYDRA_FULL_ERROR") == "1"  # the user asked for tracebacks
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises its own start-up errors to us instead of printing a traceback
    _STATE.update(interrupted=False, exit=0, sweep_dir=None)

    @hydra.main(version_base="1.3", config_path=str(configs_dir()), config_name="config")
    def _app(cfg: DictConfig) -> None:
        from bench.cli.common import quiet_third_party

        quiet_third_party(verbose)  # after Hydra's logging setup, which resets every logger's level
        hc = HydraConfig.get()
        out_dir = Path(hc.runtime.output_dir)
        if _STATE["interrupted"]:  # a multirun after Ctrl-C: the remaining jobs are not started
            record_failure(cfg, out_dir, "not started: the run was interrupted (Ctrl-C)")
            return
        if hc.mode == RunMode.MULTIRUN:
            redact_multirun_yaml(Path(hc.sweep.dir))
        ok = run_or_resume(cfg, out_dir)
        if hc.mode == RunMode.MULTIRUN:
            return
        if _STATE["interrupted"]:
            log.error("interrupted (Ctrl-C): the job did not finish; nothing was published (earlier results are untouched)")
            return
        if not ok:
            _STATE["exit"] = 1
            return
        _finish(out_dir, cfg)

    try:
        try:
            _app()
        finally:
            if _STATE.get("sweep_dir"):  # a multirun that stopped before its first job (a bad override) too
                redact_multirun_yaml(Path(_STATE.pop("sweep_dir")))
    except KeyboardInterrupt:
        log.error("interrupted (Ctrl-C)")
        _STATE["interrupted"] = True
    except SystemExit as exc:
        if exc.code not in (0, None):
            return int(exc.code) if isinstance(exc.code, int) else 1
    except Exception as exc:  # a bad override, or Hydra's own start-up (run directory, logging) on a bad disk
        if debug:
            raise
        print(f"error: {explain_override_error(exc, sys.argv[1:]) or error_line(exc)}", file=sys.stderr)
        return 1
    if _STATE["interrupted"]:
        return EXIT_INTERRUPTED
    return _STATE["exit"]


if __name__ == "__main__":
    sys.exit(main())
