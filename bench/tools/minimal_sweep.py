"""PS4's baseline: the default sweep's per-question rows recomputed from a trace by a minimal independent numpy script.

None of bench.selection.sweep / metrics / strategies / formats / visibility: plain numpy over plain arrays. From
the trace (per question: the hit ids best first, their scores, its gold ids) and the corpus as arrays
(per memory: key, conversation, timestamp, format-A token pieces; per question: conversation, asked_at,
adversarial) it computes, per strategy x threshold x question, n_selected, n_correct, n_gold, precision,
recall, F1, tokens injected and full-context tokens, for the default strategies (limit k, threshold,
hybrid k, full_context; thresholds 0.10..0.90 step 0.05), and the per-(strategy, threshold) means over
the scored questions. The rules it re-implements (README "Metric conventions"):

- threshold t: the hits with score >= t - 1e-6 (hits arrive best first, so it is a prefix); limit k: the first
  k hits; hybrid k: the threshold's prefix capped at k; full_context: every memory of the question's conversation
  said at or before ``asked_at`` (a missing timestamp is 0.0; no ``asked_at`` sees all), conversation order;
- gold: the trace's gold ids, none for an adversarial question; a selected memory is correct when it is gold;
- precision NaN when nothing is selected; recall and F1 NaN without gold; F1 0 with gold and nothing correct;
- format-A tokens of a selection m1..mn: fixed + per_gap x (n - 1) + joined(m1..m(n-1)) + last(mn), 0 when empty;
- summary: means over the scored questions (not adversarial, with gold), NaN skipped.

``make bench`` PS4 (``bench.tools.perf``) times ``rows`` + ``summary`` against the package's sweep stage on the same
trace and checks the rows are equal. ``python -m bench.tools.minimal_sweep --selftest`` runs it on a hand-worked example.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS = 1e-6
THRESHOLDS = tuple(i / 100 for i in range(10, 91, 5))


@dataclass(frozen=True)
class Inputs:
    """Plain arrays: memories in corpus order (each conversation contiguous), questions in trace order."""

    keys: list  # memory keys
    conversation: np.ndarray  # object, per memory
    ts: np.ndarray  # float64, per memory (missing = 0.0)
    joined: np.ndarray  # int64, tokens of its A line followed by "\n"
    last: np.ndarray  # int64, tokens of its A line as the last one
    fixed: int
    per_gap: int
    q_conversation: np.ndarray  # object, per question
    asked_at: np.ndarray  # float64, NaN = no asked_at
    adversarial: np.ndarray  # bool
    hit_ids: list  # per question: sequence of memory keys, best first
    hit_scores: list  # per question: sequence of floats
    gold_ids: list  # per question: sequence of memory keys


def _prf(n_sel, n_cor, n_gold):
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(n_sel > 0, n_cor / np.maximum(n_sel, 1), np.nan)
        r = np.where(n_gold > 0, n_cor / np.maximum(n_gold, 1), np.nan)
        f = np.where(n_gold > 0, np.where((n_sel > 0) & (p + r > 0), 2 * p * r / (p + r), 0.0), np.nan)
    return p, r, f


def rows(x: Inputs, *, limit_k: int = 5, hybrid_k: int = 5, thresholds=THRESHOLDS) -> dict[str, np.ndarray]:
    """Per strategy x threshold x question (strategy order: limit, threshold, hybrid, full_context; questions in trace order)."""
    n_mem, nq = len(x.keys), len(x.hit_ids)
    row_of = dict(zip(x.keys, range(n_mem)))
    n_hits = np.fromiter(map(len, x.hit_ids), np.int64, nq)
    width = int(n_hits.max(initial=0))
    flat = [k for ids in x.hit_ids for k in ids]
    r = np.fromiter(map(row_of.__getitem__, flat), np.int64, len(flat))
    qi = np.repeat(np.arange(nq), n_hits)
    pos = np.arange(len(flat)) - np.repeat(np.cumsum(n_hits) - n_hits, n_hits)
    score = np.full((nq, width), -np.inf)
    score[qi, pos] = np.concatenate([np.asarray(s, dtype=float) for s in x.hit_scores]) if nq else []
    # gold: distinct ids per question, none when adversarial; codes q * n_mem + row for the ones in the corpus
    gold = [() if a else tuple(dict.fromkeys(g)) for g, a in zip(x.gold_ids, x.adversarial)]
    n_gold = np.fromiter(map(len, gold), np.int64, nq)
    codes = np.array([q * n_mem + row_of[g] for q, gs in enumerate(gold) for g in gs if g in row_of], dtype=np.int64)
    is_gold = np.isin(qi * n_mem + r, codes)
    correct = np.zeros((nq, width + 1), np.int64)
    correct[qi, pos + 1] = is_gold
    correct = np.cumsum(correct, axis=1)
    before = np.zeros((nq, width + 1), np.int64)  # joined tokens of the first n hits
    before[qi, pos + 1] = x.joined[r]
    before = np.cumsum(before, axis=1)
    last = np.zeros((nq, width + 1), np.int64)  # last-line tokens of the n-th hit
    last[qi, pos + 1] = x.last[r]
    idx = np.arange(nq)

    def tokens(n):
        return np.where(n > 0, x.fixed + x.per_gap * (n - 1) + before[idx, np.maximum(n - 1, 0)] + last[idx, n], 0)

    # full context: the memories of the question's conversation said at or before asked_at
    conv_of = {}
    for i, c in enumerate(x.conversation):
        conv_of.setdefault(c, [i, i])[1] = i + 1
    gold_rows = [{row_of[g] for g in gs if g in row_of} for gs in gold]
    n_seen, full, seen_gold = np.zeros(nq, np.int64), np.zeros(nq, np.int64), np.zeros(nq, np.int64)
    views = {}
    for q in range(nq):
        s, e = conv_of.get(x.q_conversation[q], (0, 0))
        at = x.asked_at[q]
        key = (s, at)
        v = views.get(key)
        if v is None:
            seen = np.arange(s, e) if at != at else s + np.flatnonzero(x.ts[s:e] <= at)
            m = len(seen)
            cost = int(x.fixed + x.per_gap * (m - 1) + x.joined[seen[:-1]].sum() + x.last[seen[-1]]) if m else 0
            v = views[key] = (seen, m, cost)
        seen, n_seen[q], full[q] = v
        if gold_rows[q]:
            seen_gold[q] = int(np.isin(seen, list(gold_rows[q])).sum())
    parts = []

    def add(name, t, n, n_cor, tok):
        p, rc, f = _prf(n, n_cor, n_gold)
        parts.append({"strategy": np.full(nq, name, dtype=object), "threshold": np.full(nq, t, float), "q": idx, "n_selected": n,
                      "n_correct": n_cor, "n_gold": n_gold, "precision": p, "recall": rc, "f1": f, "tokens_injected": tok,
                      "tokens_full": full})

    n = np.minimum(n_hits, limit_k)
    add(f"limit{limit_k}", np.nan, n, correct[idx, n], tokens(n))
    above = [(score >= t - EPS).sum(axis=1) for t in thresholds]
    for t, n in zip(thresholds, above):
        add("threshold", t, n, correct[idx, n], tokens(n))
    for t, n in zip(thresholds, above):
        n = np.minimum(n, hybrid_k)
        add(f"hybrid{hybrid_k}", t, n, correct[idx, n], tokens(n))
    add("full_context", np.nan, n_seen, seen_gold, full)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def summary(out: dict[str, np.ndarray], adversarial: np.ndarray) -> list[dict]:
    """Per (strategy, threshold), in row order: n_questions and the means over the scored questions."""
    nq = len(adversarial)
    scored = np.tile(~adversarial, len(out["q"]) // max(nq, 1)) & (out["n_gold"] > 0)
    res = []
    for lo in range(0, len(out["q"]), nq):
        m = scored[lo : lo + nq]
        sl = {k: v[lo : lo + nq][m] for k, v in out.items()}
        with np.errstate(invalid="ignore"):
            res.append({"strategy": out["strategy"][lo], "threshold": out["threshold"][lo], "n_questions": int(m.sum()),
                        **{c: float(np.nanmean(sl[c])) if np.isfinite(sl[c]).any() else np.nan
                           for c in ("precision", "recall", "f1")},
                        "tokens_injected_mean": float(sl["tokens_injected"].mean()) if m.any() else np.nan,
                        "tokens_full_mean": float(sl["tokens_full"].mean()) if m.any() else np.nan})
    return res


def inputs_from(corpus, trace, table) -> Inputs:
    """``Inputs`` of a corpus, a ``bench.replay.trace.Trace`` and a ``bench.selection.formats.TokenTable`` (format A; not timed by PS4)."""
    turns = corpus.turns()
    if table.unsafe_a:
        raise ValueError(f"minimal_sweep: {len(table.unsafe_a)} A lines do not start with a letter; this script prices sums only")
    qs = {q.question_id: q for q in corpus.questions}
    tq = [qs[i] for i in trace.table["question_id"]]
    return Inputs(keys=[t.key for t in turns], conversation=np.array([t.conversation_id for t in turns], dtype=object),
                  ts=np.array([float(t.timestamp or 0.0) for t in turns]),
                  joined=np.array([table.joined["A"][t.key] for t in turns], np.int64),
                  last=np.array([table.last["A"][t.key] for t in turns], np.int64), fixed=int(table.fixed["A"]),
                  per_gap=int(table.per_gap["A"]), q_conversation=np.array([q.conversation_id for q in tq], dtype=object),
                  asked_at=np.array([np.nan if q.asked_at is None else float(q.asked_at) for q in tq]),
                  adversarial=np.array([bool(q.adversarial) for q in tq]), hit_ids=list(trace.table["hit_ids"]),
                  hit_scores=list(trace.table["hit_scores"]), gold_ids=list(trace.table["gold_ids"]))


def _selftest() -> None:
    # two memories of conversation c (ts 1, 2), one question asked at 1.5 (sees m1 only for full context)
    x = Inputs(keys=["m1", "m2"], conversation=np.array(["c", "c"], dtype=object), ts=np.array([1.0, 2.0]),
               joined=np.array([4, 6]), last=np.array([3, 5]), fixed=0, per_gap=0, q_conversation=np.array(["c"], dtype=object),
               asked_at=np.array([1.5]), adversarial=np.array([False]), hit_ids=[["m2", "m1"]], hit_scores=[[0.8, 0.3]],
               gold_ids=[["m1"]])
    out = rows(x, limit_k=1, hybrid_k=1, thresholds=(0.5,))
    # limit1: m2 (0 correct, 5 tokens); threshold 0.5: m2; hybrid1: m2; full: m1 (1 correct, 3 tokens)
    assert out["n_selected"].tolist() == [1, 1, 1, 1] and out["n_correct"].tolist() == [0, 0, 0, 1]
    assert out["tokens_injected"].tolist() == [5, 5, 5, 3] and out["tokens_full"].tolist() == [3, 3, 3, 3]
    assert out["recall"].tolist() == [0.0, 0.0, 0.0, 1.0]


if __name__ == "__main__":
    import sys

    if "--selftest" in sys.argv:
        _selftest()
        print("minimal_sweep: selftest passed")
