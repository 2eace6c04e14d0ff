"""P7: the run's sweep stage against the minimal script's.

Times: the run's sweep stage in-process (``bench.selection.sweep.sweep`` + the format side table + ``summarise`` over the trace
P6's warm-up run cached), CPU seconds.
Reference: the minimal script's sweep stage (``bench.tools.minimal.sweep``) over its own ranking of the same vectors;
best of interleaved repeats.
Target: <= 1.2.

Measured inside P6 (``bench.tools.perf.p6.p6_p7``): it needs P6's warm run and its cached trace.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.tools.perf.common import Ratio, best_ratio, compose


def p7_sweep_stage(run_dir: Path, corpus, emb, overrides: Sequence[str], *, repeats: int) -> Ratio:
    from bench.selection import formats as F
    from bench.data import tokens
    from bench.cli.config import build_strategies
    from bench.strategies.spec import threshold_grid
    from bench.selection.sweep import format_tokens_table, summarise, sweep
    from bench.tools import minimal as M
    from bench.replay.trace import Trace

    cfg = compose(overrides)
    specs = build_strategies(cfg.strategy)
    grid = threshold_grid(cfg.thresholds.start, cfg.thresholds.stop, cfg.thresholds.step)
    trace = Trace.load(run_dir / "trace")
    table = F.token_table(corpus.turns(), lambda texts: tokens.count_tokens_many(texts, cfg.tokens.encoding), F.FORMATS)
    counts = dict(table.memory["A"])
    turns = corpus.turns()
    tv = M.vectors_of(M.load_vectors(emb.dir), [t.text for t in turns], emb.document_prefix)
    qv = M.vectors_of(M.load_vectors(emb.dir), [q.text for q in corpus.questions], emb.query_prefix)
    ranked = M.rank(corpus, tv, qv)
    enc = tokens.get_encoding(cfg.tokens.encoding)
    lines = [f"{t.role}: {t.text}" for t in turns]
    alone, joined, safe = M.price_rows(enc, lines)
    keys = np.array([t.key for t in turns], dtype=object)

    def ours() -> dict:
        t = [time.process_time()]
        rows = sweep(trace, corpus, specs, grid, counts, embedder=emb.model_id, formats=("A",), format_tokens=table)
        t.append(time.process_time())
        format_tokens_table(trace, corpus, specs, counts, table, embedder=emb.model_id)
        t.append(time.process_time())
        summarise(rows)
        t.append(time.process_time())
        return {"sweep": t[1] - t[0], "format_table": t[2] - t[1], "summarise": t[3] - t[2], "total": t[3] - t[0]}

    def theirs() -> float:
        t0 = time.process_time()
        M.sweep(ranked, keys, alone, joined, safe, enc, lines)
        return time.process_time() - t0

    a, b = [], []
    for i in range(repeats):
        if i % 2 == 0:
            a.append(ours())
            b.append(theirs())
        else:
            b.append(theirs())
            a.append(ours())
    best = min(a, key=lambda x: x["total"])
    return Ratio("P7", "the run's sweep stage (sweep + format side table + summarise) / the minimal script's sweep stage",
                 best_ratio([x["total"] for x in a], b), "<=", 1.2,
                 method=("in-process CPU time (time.process_time) over the trace the warm run cached: bench.selection.sweep.sweep (format A, "
                         "the default strategies, 17 thresholds) + format_tokens_table (the B/C side table run_job computes) + "
                         "summarise, vs bench.tools.minimal.sweep over its own ranking of the same vectors; "
                         f"{repeats} interleaved repeats, best of each"),
                 details={"ours_best_s": best, "minimal_s": b, "ours_totals_s": [x["total"] for x in a]})
