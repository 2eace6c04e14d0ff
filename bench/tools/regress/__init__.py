"""``python -m bench.tools.regress``: the CI regression gate (``make regress``) and its baselines (``make baseline``).

Owns running the CI-sized experiment (``configs/experiment/regress.yaml``, a multirun over its stores,
traces and jobs measured afresh, embeddings cached) into ``reports/regress/run``, the latency pass,
the comparison with the committed baseline ``reports/baseline/<dataset>/`` and the markdown diff
``reports/regress/summary.md`` (appended to ``$GITHUB_STEP_SUMMARY`` when that is set). The last
line printed is the one-line verdict; the exit code is 0 (pass) or 1 (a regression, a comparison
the gate cannot make, or the experiment did not run). A gate that cannot tell fails: each "cannot
tell" below is exit 1 unless the user accepts it by name with ``--allow NAME[,NAME]`` (then it is
reported as allowed and skipped).

The rules (settings: the ``regress:`` block of the experiment config):

- Comparable runs. No baseline for the run's dataset (``--allow baseline``), a baseline made with another
  embedder (``--allow embedder``: the comparison is skipped), another store set (``--allow stores``),
  another strategy set or threshold grid (``--allow grid``), or rows missing for a baseline point or for
  some of its questions (``--allow missing``) fail. Always fatal: a store's job failed, other question
  ids or gold labels (re-run ``make baseline``).
- Operating points, per store and strategy of the BASELINE: a strategy without a threshold (e.g. the
  limit and full-context strategies) once, a thresholded one (threshold, hybrid) at the threshold with
  the best F1 in the BASELINE (so both runs are compared at the same point).
- Quality: per point and metric (recall, F1, precision: macro means over non-adversarial questions), the
  paired sign-flip test of current vs baseline over the n questions whose value CHANGED (an unchanged
  question adds 0 whatever its sign): exact over all 2**n sign patterns when n <= 16 (``EXACT_MAX``),
  else ``test_resamples`` random patterns. Its smallest reachable two-sided p is 2 / 2**n (every changed
  question moved the same way). Holm's correction runs over the checks that can reach alpha (p_min <=
  alpha; identical data, e.g. two exact stores, counted once); m = their number. A check with
  current - baseline < -tolerance FAILS when its Holm p < alpha, and also when the test cannot tell:
  p_min > alpha / m (Holm's strictest level), i.e. so few questions changed that no outcome is sure to be
  significant (5 of 22 demo questions: p_min 2/32 = 0.0625 > 0.05) — a large drop on few questions fails,
  unless ``--allow untestable``. A drop the test could detect but does not find significant passes.
- Tokens: per point, fail when mean injected tokens / baseline's > ``budget_ratio_max``.
- Latency, judged against the exact store measured in the same run, so machine load cancels: in one
  process, ``latency_repeats`` passes over the same queries; per query each store is timed and exact
  right after it (store, exact, store, exact, ...). A store's latency is the median over queries of its
  per-query MINIMUM over the passes (a busy machine adds time, never removes it); exact's the same, its
  minimum over every exact timing of the query in those passes (after any store: an exact call right after
  a store that waits on another process, e.g. embedded seekdb, runs on caches a busy machine has cooled,
  which moved store/exact by x1.24 between runs); ratio = store / exact. Noise: the leave-one-pass-out (jackknife) standard error of
  log(ratio), run and baseline combined: noise limit = exp(``latency_noise_z`` * se). Fail when ratio /
  the baseline's ratio > max(``latency_ratio_max``, noise limit), ``latency_ratio_max_other_machine`` in place of
  ``latency_ratio_max`` when meta.json's ``machine`` differs or the baseline has none; "skipped (too noisy)" only when the
  noise limit itself is >= 2, so a 2x regression never hides under noise. meta.json and summary.md
  record the machine's load average. ``--fault-slow STORE=FACTOR`` (hidden, for demonstrations) makes
  STORE's searches FACTOR x slower in the latency pass.

``--write-baseline`` runs the same experiment and REPLACES ``reports/baseline/<dataset>/`` (for the
default dataset and for the demo corpus); nothing else ever writes a baseline. ``--run DIR`` gates a
finished run directory (or a copy of one) without running anything.

Modules, by what they do: ``settings`` (constants, ``GateConfig``), ``runs`` (reading a run or a baseline),
``checks`` (one module per check family: ``coverage``, ``quality``, ``tokens``, ``latency``), ``gate`` (all checks ->
the verdict), ``render`` (summary.md, checks.csv), ``experiment`` (running the experiment, meta.json, writing a
baseline) and ``latency_pass`` (the paired timings behind latency.csv). This module: ``regress`` and the CLI.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pandas as pd

from bench.cli.common import parser, reports_dir, setup_logging
from bench.results.rundir import QUESTIONS, RunDir
from bench.tools.regress.experiment import finish_run, run_experiment, write_baseline
from bench.tools.regress.gate import GateResult, gate
from bench.tools.regress.latency_pass import latency_pass, parse_fault_slow
from bench.tools.regress.render import report
from bench.tools.regress.runs import load_run, show
from bench.tools.regress.settings import ALLOW, CHECK_COLUMNS, GateConfig, RegressError, gate_config

log = logging.getLogger(__name__)


def regress(run_dir: Path, baseline_root: Path, out: Path, allow: frozenset = frozenset()) -> GateResult:
    """Gate a finished regress run against ``baseline_root/<its dataset>/``; writes the report to ``out``.
    No baseline for its dataset fails unless ``allow`` has ``baseline`` (then skipped)."""
    current = load_run(run_dir)
    cfg = gate_config(run_dir)
    base_dir = Path(baseline_root) / current.dataset
    if not RunDir(base_dir).has(QUESTIONS):
        have = sorted(p.name for p in Path(baseline_root).glob("*") if RunDir(p).has(QUESTIONS))
        why = (f"no baseline for dataset {current.dataset!r} in {show(baseline_root)} "
               f"(baselines: {', '.join(have) or 'none'}); `make baseline` writes one")
        result = (GateResult(pd.DataFrame(columns=CHECK_COLUMNS), f"regress SKIPPED: {why} (allowed by --allow baseline)", False, True)
                  if "baseline" in allow else
                  GateResult(pd.DataFrame(columns=CHECK_COLUMNS), f"regress FAIL: cannot compare: {why}; --allow baseline skips", True))
        report(result, cfg, None, current, out)
        return result
    baseline = load_run(base_dir)
    failed = current.meta.get("failed_jobs") or []
    result = gate(baseline, current, cfg, failed_jobs=failed, allow=allow)
    report(result, cfg, baseline, current, out)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = parser("regress", "Run the CI-sized experiment and gate it against reports/baseline/<dataset>/ (make regress), "
                           "or rewrite the baselines (make baseline).",
                examples=["recallbench regress                          # the gate: exit 1 names what regressed",
                          "recallbench regress --demo backend=exact       # on the demo corpus, one store",
                          "recallbench regress --run reports/regress/run  # gate a finished regress run again",
                          "recallbench regress --allow grid               # accept another threshold grid (else exit 1)",
                          "recallbench regress --write-baseline           # rewrite reports/baseline/ (review and commit)"])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for the experiment, e.g. backend=exact,sqlite_vec")
    ap.add_argument("--write-baseline", action="store_true",
                    help="run the experiment and REPLACE the baseline of its dataset (and of the demo corpus)")
    ap.add_argument("--demo", action="store_true", help="use the demo corpus even when the data path has LoCoMo")
    ap.add_argument("--run", type=Path, help="gate this finished regress run directory instead of running the experiment")
    ap.add_argument("--out", type=Path, default=reports_dir("regress"), help="report directory (default reports/regress)")
    ap.add_argument("--baseline-root", type=Path, default=reports_dir("baseline"), help="default reports/baseline")
    ap.add_argument("--allow", action="append", default=[], metavar="NAME[,NAME]",
                    help=f"accept comparisons the gate cannot make instead of failing: {', '.join(ALLOW)}")
    ap.add_argument("--latency-pass", type=Path, help=argparse.SUPPRESS)  # internal: the child process of finish_run
    ap.add_argument("--fault-slow", action="append", default=[], help=argparse.SUPPRESS)  # demo: STORE=FACTOR slower searches
    args = ap.parse_args(argv)
    allow = frozenset(a.strip() for x in args.allow for a in x.split(",") if a.strip())
    if allow - set(ALLOW):
        ap.error(f"--allow: unknown name(s) {sorted(allow - set(ALLOW))} (known: {', '.join(ALLOW)})")
    try:
        slow = parse_fault_slow(args.fault_slow)
    except ValueError as e:
        ap.error(str(e))
    if slow and args.write_baseline:
        ap.error("--fault-slow only demonstrates the gate: a baseline is never written with it")
    setup_logging()
    out = args.out.resolve()
    if args.latency_pass is not None:
        from bench.output import error_line

        try:
            latency_pass(args.latency_pass.resolve(), out, slow)
        except Exception as e:  # one line for the parent's log, never a traceback
            log.error("latency pass: %s", error_line(e))
            log.debug("details", exc_info=True)
            return 1
        return 0
    try:
        if args.run is not None:
            if args.write_baseline or args.overrides or args.demo or slow:
                ap.error("--run gates a finished run: it takes no overrides, --demo, --fault-slow or --write-baseline")
            result = regress(args.run.resolve(), args.baseline_root.resolve(), out, allow)
        else:
            demo = ["dataset.force_demo=true"]
            run_dir = out / "run"
            written: list[str] = []
            for extra in ([demo] if args.demo else [[], demo]):
                overrides = [*args.overrides, *extra]
                run_experiment(run_dir, overrides, out / "experiment.log")
                finish_run(run_dir, overrides, out / "stores", args.fault_slow)
                if not args.write_baseline:
                    break
                dest = write_baseline(run_dir, args.baseline_root.resolve())
                written.append(str(dest))
                log.info("baseline written: %s", dest)
                if dest.name == "demo":
                    break  # the default dataset was the demo corpus already
            if args.write_baseline:
                print(f"regress BASELINE written: {', '.join(written)} (review and commit)")
                return 0
            result = regress(out / "run", args.baseline_root.resolve(), out, allow)
    except (RegressError, ValueError) as e:
        msg = str(e) if str(e).startswith("regress ") else f"regress FAIL: {e}"
        if not args.write_baseline:  # the step summary says why there is no diff
            try:
                report(GateResult(pd.DataFrame(columns=CHECK_COLUMNS), msg, True), GateConfig.defaults(), None, None, out)
            except OSError as w:
                log.warning("could not write %s: %s", out / "summary.md", w)
        print(msg)
        return 1
    log.info("report: %s", out / "summary.md")
    print(result.verdict)
    return 1 if result.failed else 0

