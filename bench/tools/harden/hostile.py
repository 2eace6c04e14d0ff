"""Hostile inputs: what a corpus author, the server at the other end or a neighbour process can send.

Each ``hostile_<topic>.py`` beside this file declares ``CHECKS``, a list of ``Check``; this module finds
them by their file names (nothing to register). A check runs in a fresh directory and says whether the
hostile input was handled (no key leaked, nothing forged, nothing corrupted, a clear line naming the
culprit). Checks drive the code as a user does (``python -m bench`` with loopback servers) or through
public functions, so the same table runs on an older tree to show before and after:
``PYTHONPATH=<old tree> <python> -m bench.tools.harden.hostile``. ``make harden`` prints it per class.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CLASSES = {
    1: "keys in new shapes",
    2: "credentials on a redirect",
    3: "report forged from the data",
    4: "neighbours (other processes, other PID namespaces)",
    5: "servers and stores that lie",
    6: "labels (adversarial questions with gold)",
    7: "a regression gate that cannot tell",
    8: "query strings in base URLs",
}


@dataclass(frozen=True)
class Check:
    klass: int  # a key of CLASSES
    name: str  # one line: the hostile input
    run: Callable[[Path], tuple[bool, str]]  # (handled, why) given a fresh empty directory


@dataclass(frozen=True)
class Result:
    check: Check
    handled: bool
    why: str
    seconds: float


def checks() -> list[Check]:
    """Every check of every ``hostile_*.py`` module beside this one, by class then name."""
    out: list[Check] = []
    for path in sorted(Path(__file__).parent.glob("hostile_*.py")):
        out += importlib.import_module(f"{__package__}.{path.stem}").CHECKS
    return sorted(out, key=lambda c: (c.klass, c.name))


def run_check(check: Check, root: Path) -> Result:
    d = root / f"{check.klass}-{len(list(root.glob(f'{check.klass}-*')))}"
    d.mkdir(parents=True)
    t0 = time.monotonic()
    try:
        ok, why = check.run(d)
    except Exception as e:  # a check that crashes on this tree counts as not handled
        ok, why = False, f"check raised {type(e).__name__}: {' '.join(str(e).split())[:300]}"
        log.debug("%s", traceback.format_exc())
    return Result(check, bool(ok), why, time.monotonic() - t0)


def run_checks(root: Path, selected: list[Check] | None = None) -> list[Result]:
    root.mkdir(parents=True, exist_ok=True)
    return [run_check(c, root) for c in (checks() if selected is None else selected)]


def table(results: list[Result]) -> str:
    """Per class: handled / tried, then one line per check not handled."""
    lines = ["| class | hostile input | handled |", "|---|---|---|"]
    for k, name in CLASSES.items():
        rs = [r for r in results if r.check.klass == k]
        if rs:
            lines.append(f"| {k} | {name} | {sum(r.handled for r in rs)} / {len(rs)} |")
    for r in results:
        if not r.handled:
            lines.append(f"  NOT HANDLED [{r.check.klass}] {r.check.name}: {r.why[:300]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tools.harden.hostile", description=__doc__.splitlines()[0])
    ap.add_argument("--only", type=int, nargs="*", help="classes to run (default: all)")
    ap.add_argument("--workdir", default=None, help="keep the checks' files here (default: a temp dir, deleted)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per check")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    selected = [c for c in checks() if not args.only or c.klass in args.only]
    with tempfile.TemporaryDirectory(prefix="rb-hostile-") as tmp:
        results = run_checks(Path(args.workdir or tmp), selected)
    if args.verbose:
        for r in results:
            print(f"{'ok ' if r.handled else 'BAD'} [{r.check.klass}] {r.check.name} ({r.seconds:.1f} s): {r.why[:200]}")
    print(table(results))
    return 0 if all(r.handled for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
