"""``recallbench answer RUN``: answer-level metrics of a finished run with an LLM reader and judge.

What is asked and how it is scored is ``bench.evaluation.qa``; the client, prices and cache ``bench.evaluation.llm``.
Prints the estimate (calls, tokens, dollars) first; ``--dry-run`` stops there (no key needed).
Each setting (format, LLM config, sample, seed, points: ``bench.evaluation.qa.setting_tag``) writes its own files, so a second
setting never overwrites the first: analysis/answers-<tag>.csv (per question and point),
analysis/answers_summary-<tag>.csv (per point) and answers-<tag>.md; answers.md (linked from report.md) is rebuilt
from every answers-*.md in the run directory, one section per setting.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from bench.cli.common import add_run_dir, fail, finished_run, parser, setup_logging
from bench.results.rundir import ANALYSIS, REPORT_MD, RunDir

ANSWERS = "answers"
ANSWERS_SUMMARY = "answers_summary"
ANSWERS_MD = "answers.md"


def answers_index(run: RunDir) -> str:
    """answers.md: every setting's section (answers-<tag>.md in the run directory), in name order."""
    parts = sorted(run.path.glob("answers-*.md"))
    lines = ["# Answer-level metrics (LLM reader and judge)", "",
             f"{len(parts)} setting(s) answered (format, LLM, sample, seed, points in each name); one section each.", ""]
    for p in parts:
        tag = p.stem[len("answers-"):]
        body = [line for line in p.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]  # its own title
        lines += [f"## Setting `{tag}`", "",
                  f"Files: [{p.name}]({p.name}), `{ANALYSIS}/{ANSWERS}-{tag}.csv`, `{ANALYSIS}/{ANSWERS_SUMMARY}-{tag}.csv`.",
                  *body, ""]
    return "\n".join(lines) + "\n"


def cache_dir(run: RunDir) -> Path:
    """The run's cache (config ``paths.cache``; else ``reports/cache`` beside ``reports/runs``) + ``/llm``."""
    base = (run.settings().get("paths") or {}).get("cache")
    if not base or not Path(base).is_dir():
        base = run.path.resolve().parent.parent / "cache"
    return Path(base) / "llm"


def main(argv: list[str] | None = None) -> int:
    from bench.evaluation import llm, qa

    ap = parser("answer", "Answer-level metrics of a finished run: an LLM answers each sampled question from the injected "
                "context of chosen operating points (default: the recommended point and full context) and an LLM judge "
                "grades it (J), beside token F1, injected tokens and dollars per 1,000 questions.",
                examples=["recallbench answer reports/latest --dry-run           # calls, tokens and dollars; nothing sent",
                          "OPENROUTER_API_KEY=... recallbench answer reports/latest --sample 200",
                          "recallbench answer RUN --points hybrid5@0.3,limit5,full_context --llm my_endpoint.yaml"])
    add_run_dir(ap)
    ap.add_argument("--llm", default="qwen3_max_openrouter",
                    help=f"an LLM config: a shipped name ({', '.join(llm.shipped_configs())}) or a YAML path")
    ap.add_argument("--points", help="strategy@threshold,... (full_context = full context); default: each dataset's "
                    "recommended point and full context")
    ap.add_argument("--sample", type=int, default=200, help="questions per dataset, a seeded sample (default 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--format", default="A", choices=["A", "B", "C"], help="injection format of the context (default A)")
    ap.add_argument("--cache-dir", type=Path, help="answer cache (default: the run's cache dir + /llm)")
    ap.add_argument("--dry-run", action="store_true", help="print the expected calls, tokens and dollars, send nothing")
    ap.add_argument("--max-usd", type=float, help="send nothing when the estimate exceeds this many dollars")
    args = ap.parse_args(argv)
    setup_logging(logging.WARNING)
    if args.sample < 1:
        return fail("--sample must be >= 1")
    try:
        run = finished_run(args.run_dir)
    except ValueError as e:
        return fail(str(e))
    cfg = llm.load_config(args.llm)
    asked = qa.parse_points(args.points) if args.points else None
    items = []
    for job, points in qa.plan_points(run, asked):
        items += qa.build_items(job, points, sample=args.sample, seed=args.seed, fmt=args.format)
    if not items:
        return fail(f"{run.path}: no question to answer at the points asked")
    cache = llm.Cache(args.cache_dir or cache_dir(run))
    est = qa.estimate(items, cfg, cache)
    points = list(dict.fromkeys(f"{it.dataset}: {it.point.label}" for it in items))
    print(f"{len(items)} (point, question) pairs: {len({(i.dataset, i.question.question_id) for i in items})} questions "
          f"x {len(points)} points ({'; '.join(points)})")
    print(f"estimate: {est.line(cfg)}")
    for label in points:  # each point alone (a reader call shared by two points is counted in both)
        sub = [it for it in items if f"{it.dataset}: {it.point.label}" == label]
        e = qa.estimate(sub, cfg, cache)
        print(f"  {label}: {len(sub)} questions, {e.calls} calls, {e.tokens_in:,} input tokens, ${e.usd:.4f} "
              f"(${1000 * e.usd / len(sub):.2f} per 1,000 questions for the calls to send)")
    if args.dry_run:
        return 0
    if args.max_usd is not None and est.usd > args.max_usd:
        return fail(f"the estimate ${est.usd:.4f} exceeds --max-usd {args.max_usd:g}: nothing sent")
    client = llm.ChatClient(cfg)
    rows = qa.answer_items(items, cfg, cache, client)
    summary = qa.summarise(rows)
    tag = qa.setting_tag(fmt=args.format, llm=cfg.name, sample=args.sample, seed=args.seed, points=asked)
    run.write_table(f"{ANSWERS}-{tag}", rows)
    run.write_table(f"{ANSWERS_SUMMARY}-{tag}", summary)
    md = qa.markdown(summary, cfg, sample=args.sample, seed=args.seed, fmt=args.format)
    run.write_text(f"answers-{tag}.md", md)
    run.write_text(ANSWERS_MD, answers_index(run))
    if run.has(REPORT_MD) and ANSWERS_MD not in run.file(REPORT_MD).read_text():
        run.write_text(REPORT_MD, run.file(REPORT_MD).read_text().rstrip("\n")
                       + f"\n\nAnswer-level metrics (LLM reader and judge): [{ANSWERS_MD}]({ANSWERS_MD})\n")
    spent = (rows.loc[~rows["reader_cached"].astype(bool), "reader_cost_usd"].sum()
             + rows.loc[rows["judge_cached"].eq(False), "judge_cost_usd"].sum())
    print(f"sent {client.requests} requests ({client.retries} retries), ${spent:.4f}")
    cols = ["dataset", "point", "n_questions", "accuracy_j", "accuracy_j_lo", "accuracy_j_hi", "token_f1",
            "injected_tokens", "usd_per_1k_questions", "eval_usd_per_1k_questions"]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summary[cols].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"wrote {run.path / ANALYSIS / f'{ANSWERS}-{tag}.csv'}, {run.path / ANALYSIS / f'{ANSWERS_SUMMARY}-{tag}.csv'}, "
          f"{run.file(f'answers-{tag}.md')} and {run.file(ANSWERS_MD)} (every setting)")
    return 0
