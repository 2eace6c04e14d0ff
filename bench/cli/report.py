"""``recallbench report [RUN_DIR]``: rebuild the analysis tables, then report.md, report.html and the plots of a finished run."""

from __future__ import annotations

from bench.analysis.tables import write_tables
from bench.cli.common import add_run_dir, fail, finished_run, parser, setup_logging
from bench.report.markdown import write_report


def main(argv: list[str] | None = None) -> int:
    ap = parser("report", "Rebuild report.md, report.html and the plots of a finished run.",
                examples=["recallbench report                              # reports/latest",
                          "recallbench report reports/runs/<time>_<id>     # any finished run"])
    add_run_dir(ap, "default reports/latest")
    args = ap.parse_args(argv)
    setup_logging()
    try:
        run = finished_run(args.run_dir)
    except ValueError as e:
        return fail(str(e))
    print(write_report(run.path, write_tables(run)))
    return 0
