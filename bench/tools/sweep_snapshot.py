"""Write the sweep stage's outputs of a run directory's trace(s), to compare two versions of the code byte for byte.

For each ``trace*`` folder of RUN_DIR: the per-question rows (pickle and CSV), the summary (pickle and CSV) and the
format side table (JSON) that ``sweep`` + ``format_tokens_table`` + ``summarise`` give for the strategies named, with the
corpus of the overrides; the CPU seconds of each step are printed. Run it with the old code (``PYTHONPATH=<old tree>``)
and the new, then ``cmp`` the files. It runs on code without the ``shared`` argument too.

Run: ``python -m bench.tools.sweep_snapshot RUN_DIR OUT '[limit,threshold,hybrid,full_context]' dataset=locomo backend=exact``
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        print(__doc__.splitlines()[-1], file=sys.stderr)
        return 2
    run, out, strats, *overrides = args
    from bench.selection import formats as F
    from bench.data import tokens
    from bench.cli.config import build, build_strategies
    from bench.strategies.spec import threshold_grid
    from bench.selection.sweep import format_tokens_table, summarise, sweep
    from bench.tools.perf.common import compose
    from bench.replay.trace import Trace

    cfg = compose([*overrides, f"strategy={strats}"])
    corpus = build(cfg.dataset)
    specs = build_strategies(cfg.strategy)
    grid = threshold_grid(cfg.thresholds.start, cfg.thresholds.stop, cfg.thresholds.step)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for tdir in sorted(Path(run).glob("trace*")):
        trace = Trace.load(tdir)
        roles = tuple(trace.meta["roles"]) if trace.meta.get("roles") else None
        chosen = [s for s in specs if s.roles == roles]
        if not chosen:
            continue
        table = F.token_table(corpus.turns(), lambda t: tokens.count_tokens_many(t, cfg.tokens.encoding), F.FORMATS)
        counts = dict(table.memory["A"])
        kw = {"shared": {}} if "shared" in sweep.__code__.co_varnames else {}
        t0 = time.process_time()
        rows = sweep(trace, corpus, chosen, grid, counts, embedder="e", formats=tuple(cfg.get("formats") or ["A"]), format_tokens=table, **kw)
        t1 = time.process_time()
        side = format_tokens_table(trace, corpus, chosen, counts, table, embedder="e", **kw)
        t2 = time.process_time()
        summary = summarise(rows)
        t3 = time.process_time()
        print(f"{tdir.name}: sweep {t1 - t0:.2f} s, format table {t2 - t1:.2f} s, summarise {t3 - t2:.2f} s, {len(rows)} rows")
        rows.to_pickle(out / f"{tdir.name}-rows.pkl")
        summary.to_pickle(out / f"{tdir.name}-summary.pkl")
        rows.to_csv(out / f"{tdir.name}-rows.csv", index=False)
        summary.to_csv(out / f"{tdir.name}-summary.csv", index=False)
        (out / f"{tdir.name}-format.json").write_text(json.dumps(side, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
