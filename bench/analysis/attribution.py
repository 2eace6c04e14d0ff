"""Miss attribution: why each gold memory a strategy did not recall was missed.

Every missed gold memory of a (non-adversarial) question gets exactly one cause, checked in this
order:

- ``filter``: the strategy's filter hid it (role filter pushed to the store, or said after the question);
- ``policy``: a strategy that ignores the store (keyword, BM25, recency, ...) did not pick it
  (``attribute_job`` does not replay those strategies: that is all it could say about them);
- ``embedding``: the embedding ranks it below the exact top-N among what the question may see
  (its exact cosine rank, recorded by the trace in ``gold_exact_ranks``; N = ``top_n``);
- ``unreturned``: the store did not return it and its exact rank is unknown (a trace written before
  ``gold_exact_ranks`` existed), so embedding and store cannot be told apart;
- ``store``: in the exact top-N but the store did not return it (ANN miss, short result);
- ``threshold``: returned, but its similarity is below the strategy's threshold (for a threshold that is
  not a similarity, ``threshold_on`` delta/ratio/probability: returned but not kept by that cut);
- ``cap``: returned and above the threshold, but below the strategy's top-k cut (``k``);
- ``decay/tier``: returned, above the threshold and within the cap, yet dropped by the strategy's
  own policy (decay floor, tiers, routing, the adaptive largest-gap cut).

Selections are re-derived by replaying the run's own strategies through ``bench.selection.sweep.sweep``
(pure) with a recorder around each strategy function, at one threshold per strategy (the
recommended one), so nothing here re-implements a strategy; who may see a memory is
``bench.replay.visibility``'s rule and exact ranks come from the trace. ``classify``/``attribute`` are pure;
``attribute_job`` attributes the misses of one finished job as ``bench.results.rundir.load_job`` read it (its corpus
snapshot, traces and strategies.json: never the dataset files, never a config to instantiate).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from bench.results.rundir import STRATEGIES, JobInputs
from bench.selection.formats import token_table
from bench.strategies.spec import load_specs
from bench.strategies.vector import passes
from bench.replay.trace import Trace
from bench.types import Corpus, memory_key
from bench.replay.visibility import Visibility, parse_filter

log = logging.getLogger(__name__)

CAUSES = ("filter", "policy", "embedding", "unreturned", "store", "threshold", "cap", "decay/tier")
NAN = float("nan")


# --------------------------------------------------------------------------- pure parts

def classify(*, visible_: bool, uses_store: bool, exact_rank: int | None, top_n: int, store_rank: int | None,
             store_score: float, threshold: float | None, cap_k: int | None, rank_passing: int | None) -> str:
    """The cause of one missed gold memory (see the module docstring for the order).

    ``store_rank``: 0-based position in the store's hits (None = not returned); ``rank_passing``:
    0-based position among the hits that pass the threshold (all hits when there is none).
    """
    if not visible_:
        return "filter"
    if not uses_store:
        return "policy"
    if exact_rank is not None and exact_rank > top_n:
        return "embedding"
    if store_rank is None:
        return "unreturned" if exact_rank is None else "store"
    if threshold is not None and not passes(store_score, threshold):
        return "threshold"
    if cap_k is not None and rank_passing is not None and rank_passing >= cap_k:
        return "cap"
    return "decay/tier"


def gold_ranks(table: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Each question's {gold key: exact rank} from the trace's ``gold_ids``/``gold_exact_ranks`` (the trace's exact
    pass ranked every gold memory among what the question may see; gold it may not see has rank 0 and is left out).
    A trace written before those columns existed gives no ranks (its misses are ``unreturned`` or later causes)."""
    if "gold_ids" not in table or "gold_exact_ranks" not in table:
        log.warning("attribution: trace without gold_exact_ranks (written by an older version): exact ranks unknown")
        return {}
    return {qid: {g: int(r) for g, r in zip(ids, ranks) if r > 0}
            for qid, ids, ranks in zip(table["question_id"], table["gold_ids"], table["gold_exact_ranks"])}


def attribute(
    trace: Trace,
    corpus: Corpus,
    spec,
    threshold: float | None,
    selections: Mapping[str, Sequence[str]],
    ranks: Mapping[str, Mapping[str, int]],
    *,
    top_n: int = 10,
    embedder: str | None = None,
) -> pd.DataFrame:
    """One row per missed gold memory of ``spec`` at ``threshold`` with its cause.

    ``selections`` maps question_id -> selected memory ids (from :func:`replay`); ``ranks`` maps
    question_id -> {gold key: exact rank} (from :func:`gold_ranks`). Adversarial questions are skipped (they have no gold to miss).
    """
    questions = {q.question_id: q for q in corpus.questions}
    vis_of = Visibility(corpus, parse_filter(trace.meta.get("metadata_filter")))  # the trace's metadata filter, if any
    roles = tuple(spec.roles) if getattr(spec, "roles", None) else None
    cap_k = spec.params.get("k") if hasattr(spec, "params") else None
    t = threshold if spec.thresholded else None
    # a threshold that is not a similarity (delta, alpha, P(relevant)): a returned gold memory it did not keep fell below the cut
    cut = math.inf if t is not None and getattr(spec, "threshold_on", "similarity") != "similarity" else t
    out = []
    for rec in trace.table.itertuples(index=False):
        q = questions.get(rec.question_id)
        if q is None or q.adversarial or rec.question_id not in selections:
            continue
        chosen = set(selections[rec.question_id])
        gold = [memory_key(q.conversation_id, e) for e in dict.fromkeys(q.evidence)]
        missed = [g for g in gold if g not in chosen]
        if not missed:
            continue
        vis = set(vis_of.visible_keys(q, roles).tolist())
        ids = list(rec.hit_ids)
        scores = np.asarray(rec.hit_scores, np.float64)
        qranks = ranks.get(q.question_id, {})
        for g in missed:
            r = ids.index(g) if g in ids else None  # first occurrence, as a store's hits have no duplicates
            score = float(scores[r]) if r is not None else NAN
            kept = r is not None and (cut is None or passes(score, cut))
            # 0-based position among the hits that pass the threshold (None when g itself does not pass)
            rank_passing = (r if cut is None else int(np.count_nonzero(passes(scores[:r], cut)))) if kept else None
            cause = classify(visible_=g in vis, uses_store=spec.uses_store, exact_rank=qranks.get(g), top_n=top_n,
                             store_rank=r, store_score=score, threshold=cut, cap_k=cap_k, rank_passing=rank_passing)
            out.append({
                "dataset": trace.meta.get("dataset"), "embedder": embedder or trace.meta.get("embedder"),
                "backend": trace.meta.get("backend"), "strategy": spec.name, "threshold": NAN if t is None else t,
                "question_id": q.question_id, "conversation_id": q.conversation_id, "category": q.category,
                "memory": g, "exact_rank": qranks.get(g), "store_rank": None if r is None else r + 1,
                "store_score": score, "cause": cause,
            })
    cols = ["dataset", "embedder", "backend", "strategy", "threshold", "question_id", "conversation_id", "category",
            "memory", "exact_rank", "store_rank", "store_score", "cause"]
    return pd.DataFrame(out, columns=cols)


def counts(misses: pd.DataFrame, by: Sequence[str] = ("dataset", "embedder", "backend", "strategy", "threshold", "category")) -> pd.DataFrame:
    """Missed gold memories per group and cause (one column per cause, plus ``missed``)."""
    by = list(by)
    if misses.empty:
        return pd.DataFrame(columns=by + ["missed"] + [f"{c} miss" for c in CAUSES])
    tab = pd.crosstab([misses[c].fillna(-1.0) if c == "threshold" else misses[c] for c in by], misses["cause"])
    tab = tab.reindex(columns=list(CAUSES), fill_value=0).rename(columns=lambda c: f"{c} miss")
    tab.insert(0, "missed", tab.sum(axis=1))
    tab = tab.reset_index()
    if "threshold" in tab:
        tab["threshold"] = tab["threshold"].where(tab["threshold"] >= 0, NAN)
    return tab


def replay(trace: Trace, corpus: Corpus, specs: Sequence, thresholds: Sequence[float], token_counts: Mapping[str, int],
           **sweep_kwargs) -> dict[tuple[str, float | None], dict[str, tuple[str, ...]]]:
    """Selected memory ids per (strategy, threshold) and question, from the run's own ``sweep`` (its ``record``), so the
    selections are the ones that produced the run's metrics; each strategy at ``thresholds``, not its own grid."""
    from bench.selection.sweep import sweep

    seen: dict[tuple[str, float | None], dict[str, tuple[str, ...]]] = {}
    sweep(trace, corpus, [dataclasses.replace(s, thresholds=None) for s in specs], tuple(thresholds), token_counts,
          record=seen, answer_coverage=False, **sweep_kwargs)
    return seen


# --------------------------------------------------------------------------- run directories

def attribute_job(job: JobInputs, chosen: Mapping[tuple[str, str, str, str], float], *, top_n: int = 10,
                  memo: dict | None = None) -> pd.DataFrame:
    """Misses of every strategy of one job at its chosen threshold (``chosen`` maps
    (dataset, embedder, backend, strategy) -> threshold, NaN for strategies without one); exact ranks
    come from each trace; the strategies are rebuilt from the job's strategies.json records. ``memo`` shares token
    counts between jobs on the same corpus."""
    from bench.data import tokens

    memo = {} if memo is None else memo
    turns = job.corpus.turns()
    key = ("tokens", id(job.corpus), job.token_encoding)
    if key not in memo and job.token_counts is not None:  # the counts the job priced with: its table, else its counts file
        table = tokens.read_table(tokens.table_file(job.token_counts), len(turns), ["A"])
        if table is not None:
            memo[key] = dict(zip([t.key for t in turns], table["A.memory"]))
        elif job.token_counts.is_file():
            count_many, _ = tokens.cached_counter(job.token_counts, job.token_encoding)
            memo[key] = dict(token_table(turns, count_many, ["A"]).memory["A"])
    if key not in memo:
        counts_ = tokens.count_tokens_many([tokens.format_memory(t.role, t.text) for t in turns], job.token_encoding)
        memo[key] = {t.key: n for t, n in zip(turns, counts_)}
    token_counts = memo[key]
    built = load_specs(job.strategies, job.job_dir / STRATEGIES)
    parts = []
    for trace in job.traces:
        roles = tuple(trace.meta["roles"]) if trace.meta.get("roles") else None
        # strategies that ignore the store are not replayed: every miss of theirs is "filter" or "policy"
        specs = [s for s in built if (tuple(s.roles) if s.roles else None) == roles and s.uses_store]
        want = {}
        for s in specs:
            t = chosen.get((trace.meta["dataset"], job.embedder, trace.meta["backend"], s.name))
            if t is None or (s.thresholded and math.isnan(t)):
                continue  # no recommendation (infeasible): nothing to attribute
            want[s.name] = round(float(t), 10) if s.thresholded else None
        specs = [s for s in specs if s.name in want]
        if not specs:
            continue
        grid = sorted({t for t in want.values() if t is not None}) or [0.5]
        seen = replay(trace, job.corpus, specs, grid, token_counts, embedder=job.embedder)
        ranks = gold_ranks(trace.table)
        for s in specs:
            sel = seen.get((s.name, want[s.name]))
            if sel is None:
                log.warning("attribution: strategy %s made no recorded selection; not attributed", s.name)
                continue
            parts.append(attribute(trace, job.corpus, s, want[s.name], sel, ranks, top_n=top_n, embedder=job.embedder))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
