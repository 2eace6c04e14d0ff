"""PS4 (issue 29): the sweep stage against an independent numpy script, at full size.

Times: the sweep stage (``sweep`` + ``summarise``, as ``run_job`` calls them; ``/format table`` rows add the report's
``format_tokens_table``, sharing the sweep's preparation), in-process CPU, on the dataset's warm exact trace (``--ps-dataset``,
default locomo) and on a synthetic LongMemEval_S-sized trace (``--ps4-synthetic``, default 500 questions x 500 candidates,
``PS4/synthetic``). The per-corpus tables a job builds once for all its traces (token pieces, the answer index) are built
before either side is timed.
Reference: ``bench.tools.minimal_sweep`` (an independent numpy script: the same per-question rows and their means) on
the same trace, best of interleaved repeats; the rows must agree to 1e-9, else the ratio is not reported.
Target: <= 2.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import numpy as np

from bench.tools.perf.common import (
    _WORDS,
    PS_STRATEGIES,
    REPO,
    Ratio,
    _failed,
    bench_cmd,
    best_ratio,
    compose,
    ps_overrides,
    run_measured,
    temp_cache,
)


def synthetic_trace(n_questions: int = 500, n_candidates: int = 500, *, seed: int = 0):
    """(corpus, trace) sized like LongMemEval_S: one conversation per question (its haystack) of ``n_candidates`` turns, every
    turn a candidate, scores sorted best first, 1-3 gold turns, an answer from a gold turn's words; no asked_at."""
    import pandas as pd

    from bench.replay.trace import TRACE_COLUMNS, Trace
    from bench.types import Conversation, Corpus, Question, Turn

    rng = np.random.default_rng(seed)
    words = np.array(_WORDS)
    convs, questions, rows = [], [], []
    for qi in range(n_questions):
        cid = f"u{qi}"
        gold = sorted(rng.choice(n_candidates, size=int(rng.integers(1, 4)), replace=False).tolist())
        answer = f"item{qi} model{qi % 97}"  # a specific answer, said in the first gold turn (LongMemEval's answers are specific)
        turns = tuple(Turn(cid, f"t{j}", "user" if j % 2 == 0 else "assistant", "user" if j % 2 == 0 else "assistant",
                           " ".join(words[rng.integers(0, len(words), int(rng.integers(5, 40)))]) + (f" {answer}." if j == gold[0] else "."),
                           None, j, j // 10)
                      for j in range(n_candidates))
        adversarial = bool(rng.random() < 0.06)
        questions.append(Question(f"q{qi}", cid, f"what did I say about {answer}?", None, tuple(f"t{g}" for g in gold),
                                  "synthetic", adversarial, answer))
        convs.append(Conversation(cid, turns))
        order = rng.permutation(n_candidates)
        scores = np.sort(rng.uniform(-0.1, 0.95, n_candidates))[::-1]
        rows.append({"question_id": f"q{qi}", "conversation_id": cid, "latency_ns": 1000,
                     "hit_ids": np.array([turns[j].key for j in order], dtype=object), "hit_scores": scores,
                     "exact_scores": scores, "gold_ids": [turns[g].key for g in gold], "gold_exact_ranks": [0] * len(gold)})
    corpus = Corpus("synthetic_ps4", tuple(convs), tuple(questions), source="bench.tools.perf.ps4.synthetic_trace")
    trace = Trace(pd.DataFrame(rows, columns=TRACE_COLUMNS), {"dataset": corpus.name, "backend": "exact", "embedder": "synthetic",
                                                               "layout": "per_conversation", "roles": None})
    return corpus, trace


def sweep_pair(corpus, trace, *, repeats: int = 3, encoding: str = "cl100k_base", count_many=None) -> dict:
    """CPU seconds of our sweep stage and of ``bench.tools.minimal_sweep`` (``rows`` + ``summary``) on one trace, best of
    interleaved repeats, and the largest difference between their per-question rows (format A). Ours twice: ``sweep`` +
    ``summarise`` (``ours_s``) and with the report's format side table (``format_tokens_table``, sharing the sweep's
    preparation as ``run_job`` does; ``ours_format_s``). Per-corpus tables are built before either side is timed, as a job
    builds them once for all its traces: the token pieces (both sides; ``count_many``: a cached counter, else tiktoken) and
    the answer index (``answers_build_s``, once)."""
    from bench.selection import formats as F
    from bench.data import tokens
    from bench.cli.config import build_strategies
    from bench.metrics.answers import AnswerIndex
    from bench.strategies.spec import threshold_grid
    from bench.selection.sweep import format_tokens_table, summarise, sweep
    from bench.tools import minimal_sweep as M

    cfg = compose(["dataset=locomo", f"strategy={PS_STRATEGIES}"])  # the default strategies and grid; the corpus is given
    specs = build_strategies(cfg.strategy)
    grid = threshold_grid(cfg.thresholds.start, cfg.thresholds.stop, cfg.thresholds.step)
    table = F.token_table(corpus.turns(), count_many or (lambda texts: tokens.count_tokens_many(texts, encoding)), F.FORMATS)
    counts = dict(table.memory["A"])
    inp = M.inputs_from(corpus, trace, table)
    t0 = time.process_time()
    answers = AnswerIndex.build(corpus)
    answers_s = time.process_time() - t0

    def ours(side_table: bool):
        t0 = time.process_time()
        shared: dict = {}
        rows = sweep(trace, corpus, specs, grid, counts, embedder="e", formats=("A",), format_tokens=table, answers=answers, shared=shared)
        if side_table:
            format_tokens_table(trace, corpus, specs, counts, table, embedder="e", shared=shared)
        summarise(rows)
        return time.process_time() - t0, rows

    def theirs():
        t0 = time.process_time()
        out = M.rows(inp, thresholds=tuple(float(t) for t in grid))
        M.summary(out, inp.adversarial)
        return time.process_time() - t0, out

    a, b, c = [], [], []
    for i in range(repeats):
        calls = [(partial(ours, False), a), (theirs, b), (partial(ours, True), c)]
        for fn, acc in calls if i % 2 == 0 else calls[::-1]:
            acc.append(fn())
    diff = rows_diff(a[0][1], b[0][1], [q.question_id for q in corpus.questions], list(trace.table["question_id"]))
    return {"ours_s": [x[0] for x in a], "ours_format_s": [x[0] for x in c], "minimal_s": [x[0] for x in b],
            "answers_build_s": answers_s, "rows_max_abs_diff": diff, "questions": len(trace.table), "rows": len(a[0][1])}


def rows_diff(ours, minimal: dict, corpus_order: list[str], trace_order: list[str]) -> float:
    """Largest |difference| between our format-A per-question rows and the minimal script's over n_selected, n_correct, n_gold,
    precision, recall, f1, tokens_injected, tokens_full (inf when the rows or their NaNs do not line up)."""
    ours = ours[ours["format"] == "A"] if "format" in ours else ours
    if len(ours) != len(minimal["q"]) or [str(x) for x in ours["strategy"]] != [str(x) for x in minimal["strategy"]]:
        return float("inf")
    if list(ours["question_id"]) != [trace_order[i] for i in minimal["q"]]:
        return float("inf")
    worst = 0.0
    for c in ("n_selected", "n_correct", "n_gold", "precision", "recall", "f1", "tokens_injected", "tokens_full"):
        x, y = ours[c].to_numpy(dtype=float), np.asarray(minimal[c], dtype=float)
        if not np.array_equal(np.isnan(x), np.isnan(y)):
            return float("inf")
        ok = ~np.isnan(x)
        worst = max(worst, float(np.max(np.abs(x[ok] - y[ok]), initial=0.0)))
    return worst


def ps4_sweep(dataset: str, *, repeats: int = 3, synthetic: tuple[int, int] | None = (500, 500), cache: Path | None = None) -> list[Ratio]:
    """PS4: our sweep stage / the minimal numpy script on one trace of ``dataset`` (a warm exact run's: embeddings from the
    real cache, or everything from ``cache``, a cache root a full run of ``dataset`` filled) and on a synthetic
    LongMemEval_S-sized trace, without and with the format side table; the rows must agree to 1e-9 or the ratio is not
    reported."""
    from bench.cli.config import build
    from bench.data import tokens
    from bench.replay.trace import Trace
    from bench.run import corpus_digest

    out = []
    method = ("in-process CPU (time.process_time): bench.selection.sweep.sweep (format A, default strategies, 17 thresholds, "
              "answer coverage from the corpus's AnswerIndex) + summarise, as run_job calls them, vs bench.tools.minimal_sweep "
              "rows + summary on the same trace; the per-corpus tables (token pieces for both, the answer index for ours: "
              "answers_build_s) are built before timing, as a job builds them once for all its traces; best of "
              f"{repeats} interleaved repeats each; per-question rows must agree to 1e-9")
    with_table = "; with the report's format side table (format_tokens_table, sharing the sweep's preparation)"
    got = None
    with temp_cache(REPO / "reports" / "cache" / "embeddings") as (tmp, scratch):
        root = Path(cache) if cache else scratch
        proc = run_measured(bench_cmd(*ps_overrides(dataset), f"paths.cache={root}", f"hydra.run.dir={tmp / 'run'}", trace_cache=True))
        if proc.returncode != 0:
            out.append(Ratio("PS4", f"sweep + summarise / minimal numpy script ({dataset} trace)", float("nan"), "<=", 2.0,
                             method=method, details={"error": _failed(proc, "run")}))
        else:
            corpus = build(compose(ps_overrides(dataset)).dataset)
            count_many = tokens.cached_counter(tokens.counts_file(root, "cl100k_base", corpus_digest(corpus)), "cl100k_base")[0]
            got = sweep_pair(corpus, Trace.load(tmp / "run" / "trace"), repeats=repeats, count_many=count_many)
    if got is not None:
        what = f"{dataset} trace, {got['questions']:,} questions"
        out.append(_ps4_ratio("PS4", f"sweep + summarise / minimal numpy script ({what})", got, "ours_s", method))
        out.append(_ps4_ratio("PS4/format table", f"sweep + format table + summarise / minimal numpy script ({what})", got,
                              "ours_format_s", method + with_table))
    if synthetic:
        got = sweep_pair(*synthetic_trace(*synthetic), repeats=repeats)
        what = f"a synthetic LongMemEval_S-sized trace, {synthetic[0]:,} questions x {synthetic[1]:,} candidates"
        method += "; bench.tools.perf.ps4.synthetic_trace"
        out.append(_ps4_ratio("PS4/synthetic", f"sweep + summarise / minimal numpy script ({what})", got, "ours_s", method))
        out.append(_ps4_ratio("PS4/synthetic+format table", f"the same with the format table ({what})", got, "ours_format_s",
                              method + with_table))
    return out


def _ps4_ratio(key: str, what: str, got: dict, ours: str, method: str) -> Ratio:
    value = best_ratio(got[ours], got["minimal_s"]) if got["rows_max_abs_diff"] <= 1e-9 else float("nan")
    return Ratio(key, what, value, "<=", 2.0, method=method, details=got)


def run(args, ctx) -> list[Ratio]:
    syn = tuple(int(x) for x in args.ps4_synthetic.lower().split("x")) if args.ps4_synthetic else None
    return ps4_sweep(args.ps_dataset, repeats=args.ps4_repeats, synthetic=syn, cache=args.ps4_cache)
