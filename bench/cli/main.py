"""``recallbench``: one command for every tool, and the in-process config door behind ``bench.api.run``.

``recallbench sweep [overrides]`` is the Hydra app (``python -m bench [overrides]``, ``-m`` for a
multirun); every other command hands its arguments to its tool's ``main`` through
``bench.cli.common.entry`` (one ``error:`` line for a fault, never a traceback).
``recallbench <command> --help`` shows that command's options and examples.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# name: (module whose ``main(argv)`` runs it, one line for ``recallbench --help``). ``sweep`` is the Hydra app.
COMMANDS = {
    "sweep": ("bench.cli.sweep", "run the benchmark: corpus -> embedder -> store -> strategies x thresholds -> report"),
    "report": ("bench.cli.report", "rebuild report.md, report.html and the plots of a finished run"),
    "compare": ("bench.cli.compare", "paired significance table between two finished runs"),
    "export": ("bench.cli.export", "a finished run's traces as TREC run files plus qrels (read back: sweep run_file=...)"),
    "score": ("bench.cli.score", "other systems' rankings (LongMemEval JSON, retrieval logs, TREC runs) scored beside a finished run's, paired"),
    "answer": ("bench.cli.answer", "answer-level metrics: an LLM reader and judge on a finished run's injected context"),
    "stores": ("bench.tools.stores", "every local store, and Pinecone via its loopback double, side by side (LoCoMo and synthetic scale) -> reports/compare/"),
    "tradeoff": ("bench.tools.tradeoff", "index settings as sweep axes: recall@k vs exact against p50/p99 and QPS per store and setting -> reports/tradeoff/"),
    "regress": ("bench.tools.regress", "CI regression gate against reports/baseline/ (--write-baseline rewrites it)"),
    "harden": ("bench.tools.harden.run", "bad input, planted secrets, store faults and a short load, with figures"),
    "bench": ("bench.tools.perf", "performance ratios P1-P5 and PL with their targets and PASS/FAIL"),
    "data": ("bench.cli.data", "corpora: check (dataset card), convert (to the own format), fetch (verify, download)"),
    "load": ("bench.tools.load", "concurrent search load on every local store and the real seekdb/chroma servers"),
    "ray": ("bench.tools.ray_run", "a multirun on a Ray cluster (a local head on loopback is started and stopped when none runs)"),
}

EXAMPLES = (
    ("recallbench sweep", "shipped defaults: LoCoMo from the data path; the demo corpus when none is set"),
    ("recallbench sweep embedder=hashing backend=exact", "a quick plumbing check"),
    ("recallbench sweep dataset=own dataset.path=$HOME/my-data", "your own turns.jsonl + questions.jsonl"),
    ("recallbench sweep -m strategy='glob(*)'", "multirun: every strategy, one merged report"),
    ("recallbench sweep --help", "config groups, options and settings"),
    ("recallbench report reports/latest", "rebuild a finished run's report"),
    ("recallbench compare RUN_A RUN_B", "is B better than A, question by question?"),
    ("recallbench answer reports/latest --dry-run", "LLM answer accuracy: calls, tokens and dollars first"),
    ("recallbench data check $HOME/my-data", "dataset card and label defects"),
    ("recallbench stores --sizes 2000 --dims 384 --queries 50 --no-locomo", "every local store, a quick look"),
)


def usage() -> str:
    from bench import __version__

    width = max(len(c) for c in COMMANDS)
    ex = max(len(c) for c, _ in EXAMPLES)
    return "\n".join([
        "usage: recallbench <command> [options]",
        "",
        f"recallbench {__version__}: measure memory-recall strategies and vector stores for AI agents on labelled",
        "conversations. Runs write under reports/ in the current directory.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {line}" for name, (_, line) in COMMANDS.items()),
        "",
        "examples:",
        *(f"  {cmd:<{ex}}  # {why}" for cmd, why in EXAMPLES),
        "",
        "`recallbench <command> --help` shows a command's options and examples; `python -m bench ...` is `recallbench sweep ...`.",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    """The ``recallbench`` console script."""
    from bench.cli.common import broken_pipe

    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        return broken_pipe()


def _dispatch(argv: list[str]) -> int:
    from bench.cli.common import entry, fail

    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        from bench import __version__

        print(f"recallbench {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        return fail(f"unknown command {command!r} (commands: {', '.join(COMMANDS)}; recallbench --help)")
    if command == "sweep":  # the Hydra app reads its overrides from sys.argv
        from bench.cli.sweep import main as sweep

        sys.argv = [sys.argv[0], *rest]
        return sweep()
    return entry(importlib.import_module(COMMANDS[command][0]).main, rest)


# --- one job in this process (bench.api.run) ----------------------------------------------------------

@dataclass(frozen=True)
class InProcessJob:
    """One job of ``recallbench sweep <overrides>`` as plain values: its run directory, what ``bench.pipeline.run``
    takes, and where ``reports/latest`` goes when it finished (None: ``publish_latest=false``)."""

    run_dir: Path
    inputs: object  # bench.pipeline.Inputs
    settings: object  # bench.pipeline.Settings
    latest: Path | None


def job_in_process(overrides: Sequence[str] = ()) -> InProcessJob:
    """The config of ``recallbench sweep <overrides>`` composed with Hydra's Compose API (no multirun, no change of
    working directory or logging), checked and turned into plain values (``bench.cli.sweep.plain_job``); the run
    directory is the sweep's own fresh ``<paths.reports>/runs/<time>_<id>/``. A misspelt override raises ``ValueError``;
    a bad setting is recorded in the run directory's failed.json and raises ``RuntimeError`` with its one line.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from bench import run
    from bench.cli import sweep
    from bench.resources import configs_dir

    overrides = [str(o) for o in overrides]
    if "-m" in overrides or "--multirun" in overrides:
        raise ValueError("bench.api.run runs one job; for a multirun use `recallbench sweep -m ...`")
    sweep.install_scrubbing(overrides)
    run.new_run_id()
    previous = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()  # a notebook may have initialised Hydra: put back below
    try:
        with initialize_config_dir(config_dir=str(configs_dir()), version_base="1.3", job_name="cli"):
            try:
                cfg = compose("config", overrides=overrides, return_hydra_config=True)
            except Exception as exc:  # a misspelt key or option: the line names the closest one
                from bench.cli.config import explain_override_error

                GlobalHydra.instance().clear()
                line = explain_override_error(exc, overrides)
                if line is None:
                    raise
                raise ValueError(line) from None
    finally:
        GlobalHydra.instance().clear()
        if previous is not None:
            GlobalHydra.instance().initialize(previous)
    run_dir = Path(cfg.hydra.run.dir)  # the sweep's own naming: <paths.reports>/runs/<time>_<run id>
    with open_dict(cfg):
        del cfg["hydra"]
    try:
        sweep.check_settings(cfg)
        inputs, settings = sweep.plain_job(cfg)
    except KeyboardInterrupt:
        sweep.record_failure(cfg, run_dir, "interrupted (Ctrl-C) before the job finished")
        raise
    except Exception as exc:
        from bench.output import error_line

        sweep.record_failure(cfg, run_dir, error_line(exc))
        raise RuntimeError(failure_line(run_dir)) from None
    return InProcessJob(run_dir, inputs, settings, Path(cfg.paths.reports) / "latest" if cfg.publish_latest else None)


def failure_line(run_dir: Path) -> str:
    """The one line a failed in-process job raises with: its recorded reason and where the record is."""
    failed = Path(run_dir) / "failed.json"
    reason = json.loads(failed.read_text()).get("reason", "") if failed.is_file() else "no failed.json written"
    return f"the job failed: {reason} ({failed})"


def finish_in_process(job: InProcessJob) -> Path:
    """The finished job's report, ``reports/latest`` updated, its verdict on the console (``bench.cli.sweep.finish_run``)."""
    from bench.cli import sweep

    sweep.finish_run(job.run_dir, job.latest)
    return job.run_dir


if __name__ == "__main__":
    raise SystemExit(main())
