"""``make bench`` (``python -m bench.tools.perf``): the performance ratios, each with its target and PASS/FAIL.

This machine is shared and noisy, so every figure is a ratio of two things measured in the same
run (interleaved where they are short), never an absolute time held against a constant in a test.

One module per figure, its docstring saying what it times, against what reference, and its target; each has
``run(args, ctx) -> list[Ratio]``, and ``FIGURES`` below lists them by the ``--only`` ids that select them, in the
order they run. What they share (the ``Ratio`` record, the subprocess runner and its memory sampler, the
side-by-side runners, the raw ONNX loop) is in ``common``.

P1   ``p1``       17-threshold job / 1-threshold job (target <= 1.1)
P2   ``p2``       harness overhead per query / exact store search time (<= 5 %)
P3a  ``p3a``      warm-cache LoCoMo multirun over every embedded store (<= 60 s)
P3b  ``p3b``      cold-cache embedding throughput / raw ONNX session (>= 0.9)
P4   ``p4``       each store's adapter search / its hand-written reference query (<= 1.2)
P5   ``p5``       peak RSS of the whole pipeline at 100,000 memories (< 4 GB)
PL   ``pl``       per-conversation layout query / unfiltered query (<= 1.3)
P6   ``p6``       warm exact LoCoMo run / minimal numpy+tiktoken script, CPU (<= 2)
P7   ``p7``       the run's sweep stage / the minimal script's (<= 1.2; measured inside P6)
PE   ``pe``       peak RSS (<= 1.5 GB) and throughput / raw ONNX (>= 0.9) embedding long turns
PC   ``pc``       split-half coverage of the printed 95 % intervals on LoCoMo (>= 90 %)
PS1-PS3 ``ps1_ps3`` a cold full-size run / raw ONNX embedding (<= 1.15), the warm rerun (<= 90 s), its peak RSS
     (<= 3 GB); ``--only``, not in the default parts
PS4  ``ps4``      sweep + summarise (``/format table``: and the side table) / ``bench.tools.minimal_sweep`` on a full-size trace (<= 2)

PS1-PS4 (issue 29) take the dataset by name (``--ps-dataset``, default locomo; ``longmemeval_s`` at full size).

Results are printed and written to ``<out>/perfbench.json`` and ``<out>/perfbench.md``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

from bench.cli.common import parser, reports_dir, setup_logging, work_dir
from bench.output import write_atomic
from bench.tools.perf import p1, p2, p3a, p3b, p4, p5, p6, pc, pe, pl, ps1_ps3, ps4
from bench.tools.perf.common import SEARCH_DEPTH, Context, Ratio
from bench.tools.perf.pl import LAYOUT_STORES


@dataclass(frozen=True)
class Figure:
    """A registry entry: the ``--only`` ids that select it and the module whose ``run(args, ctx)`` measures it."""

    ids: frozenset[str]
    module: ModuleType
    by_key: bool = False  # one run measures several ids: keep the results whose key's id was asked for


# In the order they run (P5, the 100,000-memory run, last).
FIGURES = (
    Figure(frozenset({"P1"}), p1),
    Figure(frozenset({"P2"}), p2),
    Figure(frozenset({"P3", "P3A"}), p3a),
    Figure(frozenset({"P3", "P3B"}), p3b),
    Figure(frozenset({"P4"}), p4),
    Figure(frozenset({"PL"}), pl),
    Figure(frozenset({"P6", "P7"}), p6, by_key=True),  # P7 is measured on P6's warm run
    Figure(frozenset({"PE"}), pe),
    Figure(frozenset({"PC"}), pc),
    Figure(frozenset({"PS1", "PS2", "PS3"}), ps1_ps3, by_key=True),  # one cold run
    Figure(frozenset({"PS4"}), ps4),
    Figure(frozenset({"P5"}), p5),
)

PARTS = ("P1", "P2", "P3", "P4", "P5", "PL", "P6", "P7", "PE", "PC", "PS1", "PS2", "PS3", "PS4")
SUBPARTS = {"P3A": "P3", "P3B": "P3"}  # --only P3a / P3b runs one half of P3
DEFAULT_PARTS = ("P1", "P2", "P3", "P4", "P5", "PL", "P6", "P7", "PE", "PC", "PS4")  # PS1-PS3 run a full cold corpus: --only


def write_results(results: Sequence[Ratio], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(r), "passed": r.passed} for r in results]
    write_atomic(out / "perfbench.json", lambda p: p.write_text(json.dumps(rows, indent=2, default=str)))
    lines = ["# make bench", "", "Ratios measured within one run (the machine is shared: absolute times drift).", "", "```",
             *(r.line() for r in results), "```", ""]
    for r in results:
        lines += [f"- **{r.key}**: {r.method}", f"  details: `{json.dumps(r.details, default=str)}`"]
    write_atomic(out / "perfbench.md", lambda p: p.write_text("\n".join(lines) + "\n"))


def main(argv: list[str] | None = None) -> int:
    ap = parser("bench", __doc__.splitlines()[0].split(": ", 1)[-1],
                examples=["recallbench bench                 # every part (P1-P7, PL, PE, PC)",
                          "recallbench bench --only PC       # split-half coverage of the printed intervals (LoCoMo)",
                          "recallbench bench --only P6,P7  # warm LoCoMo run vs the minimal script",
                          "recallbench bench --only P3a      # one part",
                          "recallbench bench --only P4 --p4-stores exact,sqlite_vec"])
    ap.add_argument("--only", default=",".join(DEFAULT_PARTS),
                    help="comma-separated subset of P1,P2,P3 (or P3a, P3b),P4,P5,PL,P6,P7,PE,PC,PS1,PS2,PS3,PS4 (PS1-PS3: a cold run of "
                         "--ps-dataset, hours at LongMemEval_S size; not in the default)")
    ap.add_argument("--ps-dataset", default="locomo", help="dataset of PS1-PS4 (configs/dataset/<name>.yaml), e.g. longmemeval_s")
    ap.add_argument("--ps4-repeats", type=int, default=3, help="interleaved sweep-stage pairs of PS4 (best of each)")
    ap.add_argument("--ps4-synthetic", default="500x500", help="questions x candidates of PS4's synthetic trace ('' to skip)")
    ap.add_argument("--ps4-cache", default=None,
                    help="cache root of PS4's warm run (read and written like paths.cache): one a full run of --ps-dataset filled makes "
                         "PS4 measurable at LongMemEval_S size in minutes (default: a temporary one sharing reports/cache/embeddings)")
    ap.add_argument("--p1-backend", default=None, help="store of the P1 runs (default: the config's default store)")
    ap.add_argument("--p1-strategies", default="all", help="'all' (every configs/strategy/*.yaml) or a Hydra list")
    ap.add_argument("--p1-repeats", type=int, default=1, help="interleaved warm 17-vs-1 pairs in P1 (best of each)")
    ap.add_argument("--p3-stores", default=None, help="stores of the P3a multirun (default: every embedded store)")
    ap.add_argument("--n-jobs", type=int, default=2, help="joblib launcher jobs for P3a (needs hydra-joblib-launcher)")
    ap.add_argument("--p4-stores", default=None,
                    help="stores of P4 (default: all; local servers are started here, cloud stores skipped with the reason)")
    ap.add_argument("--pl-stores", default=",".join(LAYOUT_STORES), help="stores of PL (per-conversation layout / unfiltered)")
    ap.add_argument("--pl-k", type=int, default=SEARCH_DEPTH, help="k of the PL queries")
    ap.add_argument("--p5-backends", default="exact", help="stores of the 100k end-to-end run(s), e.g. exact,seekdb")
    ap.add_argument("--p5-memories", type=int, default=100_000)
    ap.add_argument("--embed-texts", type=int, default=600, help="texts of the P3b throughput comparison (x5 each way)")
    ap.add_argument("--p6-repeats", type=int, default=3, help="interleaved run / minimal script pairs of P6 (best of each)")
    ap.add_argument("--p7-repeats", type=int, default=5, help="interleaved sweep-stage pairs of P7 (best of each)")
    ap.add_argument("--pe-texts", type=int, default=23_614, help="synthetic long turns of PE (LongMemEval-sized: 23,614)")
    ap.add_argument("--out", default=str(reports_dir("runs", "perfbench")), help="default reports/runs/perfbench")
    args = ap.parse_args(argv)
    setup_logging()
    only = {p.strip().upper() for p in args.only.split(",") if p.strip()}
    unknown = only - set(PARTS) - set(SUBPARTS)
    if unknown:
        ap.error(f"--only: unknown part(s) {sorted(unknown)} (known: {', '.join(PARTS)})")
    data_dir = Path(os.environ.get("BENCH_DATA_DIR", work_dir() / "datasets")).resolve()  # the rule of paths.datasets
    has_locomo = (data_dir / "locomo" / "locomo10.json").is_file()
    results: list[Ratio] = []
    notes: list[str] = [f"load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores"]
    ctx = Context(data_dir, has_locomo, notes)
    for figure in FIGURES:
        if only & figure.ids:
            got = figure.module.run(args, ctx)
            results += [r for r in got if r.key.split("/")[0] in only] if figure.by_key else got
    print("\nmake bench: ratios measured within this run (targets from issues 7, 17 and 23)\n")
    for r in results:
        print(r.line())
        print(f"{'':<16}method: {r.method}")
        print(f"{'':<16}details: {json.dumps(r.details, default=str)}")
    notes.append(f"load average at end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for n in notes:
        print(f"note: {n}")
    write_results(results, Path(args.out))
    print(f"\nwritten: {Path(args.out) / 'perfbench.md'}")
    return 0 if all(r.passed for r in results) else 1

