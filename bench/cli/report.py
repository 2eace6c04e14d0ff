"""``recallbench report [RUN_DIR]``: rebuild report.md, report.html and the plots of a finished run."""

from __future__ import annotations

from bench.cli.common import fail, parser, reports_dir, setup_logging
from bench.report.markdown import write_report
from bench.rundir import SUMMARY, RunDir


def main(argv: list[str] | None = None) -> int:
    ap = parser("report", "Rebuild report.md, report.html and the plots of a finished run.",
                examples=["recallbench report                              # reports/latest",
                          "recallbench report reports/runs/<time>_<id>     # any finished run"])
    ap.add_argument("run_dir", nargs="?", default=str(reports_dir("latest")), help="default reports/latest")
    args = ap.parse_args(argv)
    setup_logging()
    run = RunDir(args.run_dir)
    if not run.finished():
        return fail(f"{run.file(SUMMARY)} not found (run `recallbench sweep` first)")
    print(write_report(run.path))
    return 0
