"""``recallbench score RUN FILE [FILE ...]``: other systems' rankings scored beside a finished run's own (the "systems" table)."""

from __future__ import annotations

from pathlib import Path

from bench.cli.common import add_run_dir, fail, finished_run, parser, setup_logging


def main(argv: list[str] | None = None) -> int:
    ap = parser("score", "Score rankings of any system with recallbench's arithmetic (bench.metrics.ranked) beside a finished run's "
                         "own, on the same questions, with a paired test per metric (clusters = conversations). A ranking is "
                         "JSON {question_id: [session or turn id, ...]} best first (what LongMemEval-style scorers take), "
                         "LongMemEval's retrieval log (records with retrieval_results.ranked_items[].corpus_id), or a TREC run. "
                         "Writes RUN/systems.csv and systems_questions.csv, then rebuilds the report (its \"systems\" table).",
                examples=["recallbench score reports/latest mine.json                 # beside the latest run",
                          "recallbench score RUN a.json b.run --name a --name b       # two systems, named",
                          "recallbench export RUN --format json --out /tmp/x && recallbench score RUN /tmp/x/trace.json"])
    add_run_dir(ap)
    ap.add_argument("files", nargs="+", help="ranking files (JSON, JSON lines or TREC run)")
    ap.add_argument("--name", action="append", default=None, help="a name per file (default: the file's stem, a TREC run's tag)")
    ap.add_argument("--job", type=int, default=None, help="a multirun's job<N> whose corpus the files rank (default: the first)")
    ap.add_argument("--no-report", action="store_true", help="write the CSVs only, do not rebuild the report")
    args = ap.parse_args(argv)
    setup_logging()
    try:
        run = finished_run(args.run_dir)
    except ValueError as e:
        return fail(str(e))
    if args.name and len(args.name) != len(args.files):
        return fail(f"--name given {len(args.name)} times for {len(args.files)} files (one name per file, or none)")
    from bench.analysis import systems
    from bench.output import write_csv
    from bench.replay.rankings import read_ranking

    jobs = run.job_dirs()
    if args.job is not None:
        jobs = [j for j in jobs if j.path.name == f"job{args.job}"]
        if not jobs:
            return fail(f"{run.path}: no finished job{args.job}")
    corpus = jobs[0].corpus()
    ks = systems.run_ks(run)
    names = args.name or [None] * len(args.files)
    unit = systems.run_unit(jobs[0])  # on a session-unit corpus its memory ids are session ids
    rankings = [read_ranking(Path(f), corpus, name=n, unit=unit) for f, n in zip(args.files, names)]  # every file checked before anything is written
    seen = set()
    for r in rankings:
        if r.name in seen:
            return fail(f"two rankings are named {r.name!r} (give each file a --name)")
        seen.add(r.name)
    imported = [(r, systems.ranking_rows(r, corpus, ks=ks)) for r in rankings]
    table = systems.compare(systems.ours_rows(run, ks=ks), imported, ks=ks)
    import pandas as pd

    per_q = pd.concat([rows.assign(file=Path(r.path).name) for r, rows in imported], ignore_index=True)
    print(write_csv(run.file(systems.SYSTEMS_QUESTIONS_CSV), per_q))
    print(write_csv(run.file(systems.SYSTEMS_CSV), table))
    from bench.report.systems import text_table

    print("\n".join(text_table(table)))
    if not args.no_report:
        from bench.analysis.tables import write_tables
        from bench.report.markdown import write_report

        print(write_report(run.path, write_tables(run)))
    return 0
