"""``recallbench export [RUN] [--out DIR]``: every trace of a finished run as a TREC run file plus qrels (bench.trec)."""

from __future__ import annotations

from pathlib import Path

from bench.cli.common import fail, parser, reports_dir, setup_logging
from bench.rundir import SUMMARY, RunDir


def main(argv: list[str] | None = None) -> int:
    ap = parser("export", "Write each trace of a finished run as a TREC run (qid Q0 docid rank score tag) plus qrels "
                          "(qid 0 docid 1) of the scored questions, for trec_eval, ir_measures or ranx: scored with them, the "
                          "turn-level numbers equal ranked.csv. Read a run back with `recallbench sweep run_file=...`.",
                examples=["recallbench export                                  # reports/latest -> reports/latest/trec/",
                          "recallbench export reports/latest --out /tmp/trec   # trace.run, trace.qrels (job<N>/ for a multirun)"])
    ap.add_argument("run_dir", nargs="?", default=str(reports_dir("latest")), help="a finished run (default reports/latest)")
    ap.add_argument("--out", default=None, help="output directory (default RUN/trec)")
    args = ap.parse_args(argv)
    setup_logging()
    run = RunDir(args.run_dir)
    if not run.finished():
        return fail(f"{run.file(SUMMARY)} not found (run `recallbench sweep` first)")
    from bench.trec import export_trace

    out = Path(args.out) if args.out else run.path / "trec"
    jobs = run.job_dirs()
    written = 0
    from bench.trace import Trace

    for job in jobs:
        corpus = job.corpus()  # the job's snapshot: which questions are scored (the qrels hold only those)
        for d in job.trace_dirs():
            trace = Trace.load(d)
            target = out if job.path == run.path else out / job.path.name
            for p in export_trace(trace, target, corpus, d.name):
                print(p)
                written += 1
    if not written:
        return fail(f"{run.path}: no trace to export")
    return 0
