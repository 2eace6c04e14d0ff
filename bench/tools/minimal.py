"""The summary of a warm exact LoCoMo run, recomputed by a minimal independent script (``make bench`` P6/P7's baseline).

Plain numpy + tiktoken: none of bench.selection.sweep / metrics / strategies / formats / trace / backends. From
the corpus (``bench.data.locomo.load_locomo``) and the embedding cache's files (shards of sha256 keys
of ``prefix + text`` and float32 vectors, ``bench/embedders/cache.py``) it computes the 36 summary rows
of ``recallbench sweep dataset=locomo backend=exact`` with the default strategies (limit5, threshold,
hybrid5, full_context; thresholds 0.10..0.90 step 0.05), format A:
strategy, threshold, n_questions, precision, recall, f1, tokens_injected_mean, tokens_full_mean.

The rules it re-implements (README "Metric conventions"):
- a question sees its conversation's turns said at or before ``asked_at`` (no timestamp = 0.0);
  ranking: cosine (float32 product, as a brute-force store computes it) descending, ties by key;
- threshold: every seen turn with similarity >= t - 1e-6 (the README's one stated precision for inclusive
  thresholds, float32 rounding absorbed); hybrid5: that, capped at 5;
  limit5: the best 5; full_context: every seen turn, conversation order;
- scored questions: not adversarial, at least one gold key; means over them; precision NaN when
  nothing is selected (left out of its mean), F1 0 then;
- tokens (format A): the selection's ``role: text`` lines joined by "\\n" in selection order, priced as
  count(line + "\\n") for every line but the last plus count(last line), which equals the joined
  text's count when every line starts with a letter; otherwise the joined text is counted.

Run: ``python -m bench.tools.minimal --locomo datasets/locomo/locomo10.json --model-dir reports/cache/embeddings/<model dir>``
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

STRATEGIES = ("limit5", "threshold", "hybrid5", "full_context")
THRESHOLDS = tuple(i / 100 for i in range(10, 91, 5))  # the nearest doubles to 0.10 .. 0.90, like Decimal -> float
EPS = 1e-6  # inclusive thresholds: a similarity passes t when >= t - EPS (README "Metric conventions")
COLUMNS = ("strategy", "threshold", "n_questions", "precision", "recall", "f1", "tokens_injected_mean", "tokens_full_mean")


def load_vectors(model_dir: Path) -> dict[str, np.ndarray]:
    """sha256 key -> float32 vector, from every shard of one model's cache directory."""
    index: dict[str, np.ndarray] = {}
    for path in sorted(Path(model_dir).glob("shard-*.npz")):
        with np.load(path) as z:
            index.update(zip(z["keys"].tolist(), z["vectors"]))
    return index


def vectors_of(index: dict, texts, prefix: str = "") -> np.ndarray:
    keys = [hashlib.sha256((prefix + t).encode("utf-8")).hexdigest() for t in texts]
    missing = sum(k not in index for k in keys)
    if missing:
        raise SystemExit(f"minimal: {missing} of {len(keys)} texts are not in the embedding cache (run the sweep once)")
    return np.stack([index[k] for k in keys]).astype(np.float32, copy=False)


def rank(corpus, tv: np.ndarray, qv: np.ndarray) -> list[dict]:
    """Per question: the seen turns' rows ranked (best first), their float64 sims, the seen rows in order, gold."""
    out, start, row = [], {}, 0
    turns = corpus.turns()
    keys = np.array([t.key for t in turns], dtype=object)
    ts = np.array([float(t.timestamp or 0.0) for t in turns])
    for c in corpus.conversations:  # a conversation's turns are one row range
        start[c.conversation_id] = (row, row + len(c.turns))
        row += len(c.turns)
    keyrank = np.empty(len(turns), dtype=np.int64)
    for s, e in start.values():
        keyrank[s:e] = np.argsort(np.argsort(keys[s:e].astype(str), kind="stable"), kind="stable")
    for qi, q in enumerate(corpus.questions):
        s, e = start.get(q.conversation_id, (0, 0))
        rows = np.arange(s, e)
        if q.asked_at is not None:
            rows = rows[ts[rows] <= q.asked_at]
        sims = tv[rows] @ qv[qi]
        order = rows[np.lexsort((keyrank[rows], -sims))]
        gold = {f"{q.conversation_id}|{g}" for g in q.evidence}
        out.append({"ranked": order, "sims": np.sort(sims.astype(np.float64))[::-1], "seen": rows, "gold": gold,
                    "scored": not q.adversarial and bool(gold)})
    return out


def price_rows(enc, lines: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per turn: tokens of its line alone, followed by "\\n", and whether it starts with a letter."""
    alone = np.array([len(enc.encode_ordinary(x)) for x in lines], dtype=np.int64)
    joined = np.array([len(enc.encode_ordinary(x + "\n")) for x in lines], dtype=np.int64)
    return alone, joined, np.array([x[:1].isalpha() for x in lines])


def prefix_costs(rows: np.ndarray, alone, joined, safe, enc, lines) -> np.ndarray:
    """Tokens of the first n rows joined, for n = 0 .. len(rows)."""
    cost = np.zeros(len(rows) + 1, dtype=np.int64)
    if len(rows):
        cost[1:] = np.concatenate([[0], np.cumsum(joined[rows])[:-1]]) + alone[rows]
        bad = np.flatnonzero(~safe[rows][1:])
        for n in range(bad[0] + 2 if len(bad) else len(rows) + 1, len(rows) + 1):  # a line not starting with a letter
            cost[n] = len(enc.encode_ordinary("\n".join(lines[r] for r in rows[:n])))
    return cost


def sweep(ranked: list[dict], keys: np.ndarray, alone, joined, safe, enc, lines, thresholds=THRESHOLDS) -> list[dict]:
    """The summary rows from the ranked questions (the script's sweep stage)."""
    qs = [r for r in ranked if r["scored"]]
    n_gold = np.array([len(r["gold"]) for r in qs], dtype=np.float64)
    full = [prefix_costs(r["seen"], alone, joined, safe, enc, lines)[-1] for r in qs]  # every seen turn, conversation order
    ts = np.asarray(thresholds, dtype=np.float64)
    sel = {s: [] for s in STRATEGIES}  # per strategy: (n selected, n correct, tokens) per question, one column per threshold
    for r, full_r in zip(qs, full):
        hits = np.fromiter((k in r["gold"] for k in keys[r["ranked"]]), dtype=bool, count=len(r["ranked"]))
        correct = np.concatenate([[0], np.cumsum(hits)])
        cost = prefix_costs(r["ranked"], alone, joined, safe, enc, lines)
        above = np.searchsorted(-r["sims"], -(ts - EPS), side="right")  # how many sims >= t - EPS
        for name, n in (("limit5", np.array([min(5, len(hits))])), ("threshold", above), ("hybrid5", np.minimum(above, 5))):
            sel[name].append((n, correct[n], cost[n]))
        seen_gold = sum(k in r["gold"] for k in keys[r["seen"]])
        sel["full_context"].append((np.array([len(r["seen"])]), np.array([seen_gold]), np.array([full_r])))
    out = []
    for name in STRATEGIES:
        grid = list(ts) if name in ("threshold", "hybrid5") else [float("nan")]
        n_sel, n_cor, tok = (np.array([x[i] for x in sel[name]], dtype=np.float64).reshape(len(qs), len(grid)) for i in range(3))
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(n_sel > 0, n_cor / n_sel, np.nan)
            rec = n_cor / n_gold[:, None]
            f1 = np.where((n_sel > 0) & (p + rec > 0), 2 * p * rec / (p + rec), 0.0)
        for j, t in enumerate(grid):
            out.append({"strategy": name, "threshold": t, "n_questions": len(qs), "precision": _nanmean(p[:, j]),
                        "recall": float(rec[:, j].mean()), "f1": float(f1[:, j].mean()),
                        "tokens_injected_mean": float(tok[:, j].mean()), "tokens_full_mean": float(np.mean(full))})
    return out


def _nanmean(x: np.ndarray) -> float:
    ok = ~np.isnan(x)
    return float(x[ok].mean()) if ok.any() else float("nan")


def summary(corpus, model_dir: Path, *, encoding: str = "cl100k_base", query_prefix: str = "", document_prefix: str = "",
            thresholds=THRESHOLDS, timings: dict | None = None) -> list[dict]:
    """Every stage: vectors from the cache, ranking, line tokens, sweep; ``timings`` gets each stage's seconds."""
    from bench.data.tokens import get_encoding  # only to make tiktoken's rank files available offline

    t0 = time.perf_counter()
    turns = corpus.turns()
    index = load_vectors(model_dir)
    tv = vectors_of(index, [t.text for t in turns], document_prefix)
    qv = vectors_of(index, [q.text for q in corpus.questions], query_prefix)
    t1 = time.perf_counter()
    ranked = rank(corpus, tv, qv)
    t2 = time.perf_counter()
    enc = get_encoding(encoding)
    lines = [f"{t.role}: {t.text}" for t in turns]
    alone, joined, safe = price_rows(enc, lines)
    t3 = time.perf_counter()
    rows = sweep(ranked, np.array([t.key for t in turns], dtype=object), alone, joined, safe, enc, lines, thresholds)
    if timings is not None:
        timings.update(vectors_s=t1 - t0, rank_s=t2 - t1, tokens_s=t3 - t2, sweep_s=time.perf_counter() - t3)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tools.minimal", description=__doc__.splitlines()[0])
    ap.add_argument("--locomo", required=True, help="locomo10.json")
    ap.add_argument("--model-dir", required=True, help="one model's directory of the embedding cache (shard-*.npz)")
    ap.add_argument("--encoding", default="cl100k_base")
    ap.add_argument("--query-prefix", default="")
    ap.add_argument("--document-prefix", default="")
    ap.add_argument("--out", default="-", help="CSV of the summary rows ('-': stdout)")
    args = ap.parse_args(argv)
    from bench.data.locomo import load_locomo

    timings: dict = {}
    rows = summary(load_locomo(path=args.locomo), Path(args.model_dir), encoding=args.encoding, query_prefix=args.query_prefix,
                   document_prefix=args.document_prefix, timings=timings)
    f = sys.stdout if args.out == "-" else open(args.out, "w", newline="")
    w = csv.DictWriter(f, fieldnames=COLUMNS)
    w.writeheader()
    w.writerows(rows)
    if f is not sys.stdout:
        f.close()
    print(" ".join(f"{k}={v:.3f}" for k, v in timings.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
