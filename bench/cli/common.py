"""The tools' shared entry: their parser, one logging setup, the one-line ``error:`` exit, default paths.

Every command-line tool (``recallbench report|compare|stores|regress|harden|bench|data|load``) builds
its parser with ``parser``, calls ``setup_logging`` once, and returns ``fail(message)`` for a user
error. ``entry(main, argv)`` runs a tool's ``main`` (the ``recallbench`` dispatcher and every
``python -m`` entry use it) so that an unexpected fault also ends in one ``error:`` line and exit 1,
never a traceback (``RB_DEBUG=1`` shows it), and Ctrl-C in exit 130.

Default output paths are anchored at the current directory, like the sweep's ``paths.root``
(``reports/...`` beside where the command runs), never inside the installed package.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

PROG = "recallbench"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports `cmd | head`
DEBUG_ENV = "RB_DEBUG"  # set to 1 to see the traceback behind an error line


def work_dir() -> Path:
    """Where the command runs: the root of its default paths (the sweep's ``paths.root``)."""
    return Path.cwd()


def reports_dir(*parts: str) -> Path:
    """``reports/<parts>`` under the current directory (the sweep's ``paths.reports``)."""
    return work_dir().joinpath("reports", *parts)


def parser(command: str, description: str, *, examples: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argument parser of ``recallbench <command>``; ``examples`` are shown under ``--help``."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) if examples else None
    return argparse.ArgumentParser(prog=f"{PROG} {command}", description=description, epilog=epilog,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


# Libraries that log every request or start-up step at INFO (httpx: a line per HTTP call to a store server; pyseekdb:
# its embedded server's steps): at WARNING unless the command runs with -v.
THIRD_PARTY_LOGGERS = ("httpx", "httpcore", "urllib3", "pyseekdb", "pylibseekdb", "chromadb", "pinecone", "lancedb",
                       "openai", "filelock", "asyncio", "ray", "matplotlib", "numexpr")


def quiet_third_party(verbose: bool = False) -> None:
    """Third-party loggers at WARNING (``verbose``: left to the root level)."""
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.WARNING)


def setup_logging(level: int = logging.INFO, *, verbose: bool = False) -> None:
    """Log records to stderr with time, level and logger name (no-op when logging is already set up);
    third-party loggers at WARNING unless ``verbose`` (``-v``)."""
    logging.basicConfig(level=level, format=LOG_FORMAT, datefmt="%H:%M:%S", stream=sys.stderr)
    quiet_third_party(verbose)


def add_run_dir(ap: argparse.ArgumentParser, help: str = "a finished run (default reports/latest)") -> None:
    """The optional RUN_DIR argument of every command that reads a finished run (default reports/latest)."""
    ap.add_argument("run_dir", nargs="?", default=str(reports_dir("latest")), help=help)


def finished_run(path):
    """The finished run at ``path`` (a ``bench.results.rundir.RunDir``); ValueError with the line to show when it has no summary."""
    from bench.results.rundir import SUMMARY, RunDir

    run = RunDir(path)
    if not run.finished():
        raise ValueError(f"{run.file(SUMMARY)} not found (run `recallbench sweep` first)")
    return run


def fail(message: str, code: int = 2) -> int:
    """Print the one ``error:`` line on stderr; returns the exit code (2: bad input or usage)."""
    print(f"error: {message}", file=sys.stderr)
    return code


def broken_pipe() -> int:
    """The reader of our output went away (``| head``): no message, and no traceback when Python flushes at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (captured): nothing to silence
        pass
    return EXIT_BROKEN_PIPE


def entry(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a tool's ``main(argv)``: its exit code, or one ``error:`` line for a fault it did not handle. What the
    tool logs or prints is scrubbed of secrets (``bench.output.install_scrubbing``, the command line's secrets registered)."""
    from bench.output import install_scrubbing

    install_scrubbing(sys.argv[1:] if argv is None else argv)
    try:
        return main(argv)
    except BrokenPipeError:
        return broken_pipe()
    except KeyboardInterrupt:
        return fail("interrupted (Ctrl-C)", EXIT_INTERRUPTED)
    except Exception as exc:  # noqa: BLE001  (the user reads one line; RB_DEBUG=1 shows the traceback)
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        from bench.output import error_line

        return fail(error_line(exc), 1)
