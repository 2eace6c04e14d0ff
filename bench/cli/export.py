"""``recallbench export [RUN] [--out DIR] [--format trec|json|json-sessions]``: every trace of a finished run as a TREC
run file plus qrels (bench.replay.trec), or as the JSON LongMemEval-style scorers take (bench.replay.rankings: ``{question_id: [id, ...]}``
best first; turn ids, or the sessions of the ranked turns deduplicated in rank order). Read back by ``recallbench score``."""

from __future__ import annotations

import json
from pathlib import Path

from bench.cli.common import add_run_dir, fail, finished_run, parser, setup_logging

FORMATS = ("trec", "json", "json-sessions")


def json_ranking(trace, corpus, *, sessions: bool = False) -> dict[str, list[str]]:
    """{question_id: [memory key, ...]} of a trace in its order; ``sessions``: each question's ranked turns' sessions
    (``<conversation_id>|session<n>``, bench.metrics.ranked.session_map), deduplicated in rank order."""
    from bench.metrics.ranked import session_map, session_ranking

    smap = session_map(corpus) if sessions else None
    out = {}
    for qid, ids in zip(trace.table["question_id"], trace.table["hit_ids"]):
        ids = [str(x) for x in ids]
        out[str(qid)] = session_ranking(ranked=ids, session_of=lambda x: smap.get(x, x)) if sessions else ids
    return out


def main(argv: list[str] | None = None) -> int:
    ap = parser("export", "Write each trace of a finished run as a TREC run (qid Q0 docid rank score tag) plus qrels "
                          "(qid 0 docid 1) of the scored questions, for trec_eval, ir_measures or ranx: scored with them, the "
                          "turn-level numbers equal ranked.csv. Read a run back with `recallbench sweep run_file=...`. "
                          "--format json writes {question_id: [turn id, ...]} best first (json-sessions: session ids), the JSON "
                          "LongMemEval-style scorers take; `recallbench score RUN FILE` reads it back to the same numbers.",
                examples=["recallbench export                                  # reports/latest -> reports/latest/trec/",
                          "recallbench export reports/latest --out /tmp/trec   # trace.run, trace.qrels (job<N>/ for a multirun)",
                          "recallbench export reports/latest --format json     # reports/latest/json/trace.json"])
    add_run_dir(ap)
    ap.add_argument("--out", default=None, help="output directory (default RUN/trec, RUN/json for the JSON formats)")
    ap.add_argument("--format", choices=FORMATS, default="trec", help="trec (default), json (turn ids) or json-sessions (session ids)")
    args = ap.parse_args(argv)
    setup_logging()
    try:
        run = finished_run(args.run_dir)
    except ValueError as e:
        return fail(str(e))
    from bench.output import write_atomic
    from bench.replay.trec import export_trace

    out = Path(args.out) if args.out else run.path / ("trec" if args.format == "trec" else "json")
    jobs = run.job_dirs()
    written = 0
    from bench.replay.trace import Trace

    for job in jobs:
        corpus = job.corpus()  # the job's snapshot: which questions are scored (the qrels hold only those)
        for d in job.trace_dirs():
            trace = Trace.load(d)
            target = out if job.path == run.path else out / job.path.name
            if args.format == "trec":
                paths = export_trace(trace, target, corpus, d.name)
            else:
                data = json_ranking(trace, corpus, sessions=args.format == "json-sessions")
                name = d.name + ("_sessions" if args.format == "json-sessions" else "") + ".json"
                paths = [write_atomic(target / name, lambda p: p.write_text(json.dumps(data, indent=0) + "\n"))]
            for p in paths:
                print(p)
                written += 1
    if not written:
        return fail(f"{run.path}: no trace to export")
    return 0
