"""P(relevant) per candidate: a store's similarity calibrated on labelled data, out of fold.

What the ``calibrated`` strategies threshold (``bench.strategies.relative.calibrated_threshold``: the
user sets "P(relevant) >= p" instead of a cosine). It needs labelled data (the corpus's gold
memories) and is fitted per trace, i.e. per (embedder, store, role filter):

- **pairs**: every candidate of every scored question (non-adversarial, with gold), labelled 1 when
  it is one of the question's gold memories, else 0; its x is the store's similarity (``hit_scores``).
- **fit**: isotonic regression of the label on the similarity (pool adjacent violators, ``isotonic``),
  a non-decreasing step function: a candidate gets the fitted value of the largest fitted similarity
  <= its own (below the smallest: the first step).
- **out of fold**: leave one conversation out. A question's candidates are scored by the map fitted
  on the other conversations only, so no question is scored by a map that saw its own labels. A
  corpus with fewer than two conversations holding scored questions is split into ``FALLBACK_FOLDS``
  folds by question position instead (question i in fold i mod 5).
- A fold whose training side has no pair gets NaN (undefined), never a made-up probability.

The map is monotone, so within a question the probabilities never rise along the hits (best first)
and a threshold on them keeps a prefix of the hits, like a cosine threshold with a per-fold cut.
Pure functions, no I/O but ``save``/``load`` of the cached column (``reports/cache/relevance/<key>``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from bench.output import write_atomic
from bench.types import Corpus, memory_key

NAN = float("nan")
FALLBACK_FOLDS = 5
METHOD = "isotonic-pav/leave-one-conversation-out"


def isotonic(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least-squares non-decreasing fit of ``y`` on ``x`` (pool adjacent violators).

    Returns (xs, values): the distinct x ascending and the fitted value at each. Ties in x are
    pooled first (one mean per distinct x).
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    w = np.ones_like(x) if w is None else np.asarray(w, np.float64)
    if not x.size:
        return np.empty(0), np.empty(0)
    xs, inv = np.unique(x, return_inverse=True)
    ws = np.bincount(inv, weights=w, minlength=len(xs))
    ys = np.bincount(inv, weights=w * y, minlength=len(xs))
    # Adjacent x with the same mean end in the same block (a block's suffixes average <= its mean and the next
    # block's prefixes >= its mean, so a split between equal values cannot be strict): start from those runs.
    # With rare positives this shrinks a million candidates to a few thousand runs.
    mean = ys / ws
    starts = np.flatnonzero(np.r_[True, mean[1:] != mean[:-1]])
    run_sizes = np.diff(np.r_[starts, len(xs)]).tolist()
    # blocks on a stack: (weighted sum, weight, number of distinct x); merge while the last two decrease
    sums, weights, sizes = [], [], []
    for s, wt, n in zip(np.add.reduceat(ys, starts).tolist(), np.add.reduceat(ws, starts).tolist(), run_sizes):
        while sums and sums[-1] * wt >= s * weights[-1]:  # previous mean >= this mean: pool
            s += sums.pop()
            wt += weights.pop()
            n += sizes.pop()
        sums.append(s)
        weights.append(wt)
        sizes.append(n)
    values = np.repeat(np.asarray(sums) / np.asarray(weights), sizes)
    return xs, values


def predict(xs: np.ndarray, values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The step function (xs, values) at ``x``: the value of the largest xs <= x (below xs[0]: values[0]); NaN without a fit."""
    x = np.asarray(x, np.float64)
    if not len(xs):
        return np.full(x.shape, NAN)
    return values[np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 1)]


def folds(table: pd.DataFrame, corpus: Corpus) -> np.ndarray:
    """The fold label of each trace row: its conversation, or ``part<i mod 5>`` for a corpus with fewer
    than two conversations holding scored questions."""
    scored = scored_questions(corpus)
    convs = table["conversation_id"].astype(str).to_numpy()
    qids = table["question_id"].to_numpy()
    if len({c for c, q in zip(convs, qids) if q in scored}) >= 2:
        return convs
    return np.array([f"part{i % FALLBACK_FOLDS}" for i in range(len(table))], dtype=object)


def scored_questions(corpus: Corpus) -> dict[str, frozenset]:
    """question_id -> gold memory keys, for the scored questions (non-adversarial, with gold)."""
    out = {}
    for q in corpus.questions:
        gold = frozenset(memory_key(q.conversation_id, e) for e in q.evidence)
        if gold and not q.adversarial:
            out[q.question_id] = gold
    return out


def out_of_fold(table: pd.DataFrame, corpus: Corpus, *, score: str = "hit_scores") -> dict[str, np.ndarray]:
    """question_id -> the out-of-fold P(relevant) of each of its hits, in the trace's hit order (see the module)."""
    scored = scored_questions(corpus)
    fold = folds(table, corpus)
    lengths = table["hit_ids"].map(len).to_numpy()
    x = np.concatenate([np.asarray(s, np.float64) for s in table[score]]) if len(table) else np.empty(0)
    y = np.concatenate([np.fromiter((h in scored.get(q, ()) for h in ids), dtype=np.float64, count=len(ids))
                        for q, ids in zip(table["question_id"], table["hit_ids"])]) if len(table) else np.empty(0)
    row_scored = np.array([q in scored for q in table["question_id"]], dtype=bool)
    pair_fold = np.repeat(fold, lengths)
    pair_scored = np.repeat(row_scored, lengths)
    p = np.full(x.shape, NAN)
    for f in dict.fromkeys(fold):
        held = pair_fold == f
        train = pair_scored & ~held
        xs, values = isotonic(x[train], y[train])
        p[held] = predict(xs, values, x[held])
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return {q: p[bounds[i]:bounds[i + 1]] for i, q in enumerate(table["question_id"])}


def trace_digest(table: pd.DataFrame, *, score: str = "hit_scores") -> str:
    """sha256 of what the fit reads from a trace: question ids, conversations, hit ids and scores, in order."""
    import hashlib

    h = hashlib.sha256()
    for q, c, ids, sc in zip(table["question_id"], table["conversation_id"], table["hit_ids"], table[score]):
        h.update(json.dumps([str(q), str(c), list(map(str, ids))]).encode("utf-8"))
        h.update(np.asarray(sc, np.float64).tobytes())
    return h.hexdigest()


# --- the cached column (derived data: rebuildable from the trace and the corpus) ---------------------------

def save(directory: Path, probs: Mapping[str, np.ndarray], meta: Mapping) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame({"question_id": list(probs), "p": [np.asarray(v, np.float64) for v in probs.values()]})
    write_atomic(directory / "relevance.parquet", lambda p: df.to_parquet(p, index=False))
    write_atomic(directory / "relevance_meta.json", lambda p: p.write_text(json.dumps(dict(meta), indent=2, default=str)))


def load_checked(directory: Path, table: pd.DataFrame) -> dict[str, np.ndarray] | None:
    """The cached column when it has one value per hit of every trace row, in order; else None."""
    try:
        df = pd.read_parquet(Path(directory) / "relevance.parquet")
    except (OSError, ValueError):
        return None
    if list(df["question_id"]) != list(table["question_id"]):
        return None
    out = {q: np.asarray(p, np.float64) for q, p in zip(df["question_id"], df["p"])}
    if any(len(out[q]) != len(ids) for q, ids in zip(table["question_id"], table["hit_ids"])):
        return None
    return out
