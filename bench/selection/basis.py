"""The score the strategies see: the trace's similarity, the store's own score, or 1 - the store's distance.

``score:`` in the run config (``similarity`` by default) picks the basis; ``apply_basis`` maps the trace's
``native_scores`` into its ``hit_scores`` once, before any strategy runs, so every strategy and the calibration read the
chosen number unchanged (bench.backends.scores says what each store returns and how it relates to the cosine). A
distance (lower is better) is handed to the strategies negated, best first as always, and the sweep negates the
thresholds it compares with it (``flips_thresholds``): a threshold t on a distance keeps the hits with distance <= t,
and the rows keep the label t. "Query once, sweep offline": nothing here touches a store.
"""

from __future__ import annotations

import math

import numpy as np

from bench.backends import scores as S
from bench.replay.trace import Trace


def apply_basis(trace: Trace, basis: str) -> Trace:
    """``trace`` with ``hit_scores`` replaced by the score of ``basis`` (negated for a distance), and
    ``meta["score_basis"]`` saying what a threshold is compared with. ``similarity``: the table unchanged."""
    native = (trace.meta.get("score") or {}).get("native")
    S.check_basis(basis, native, f"store {trace.meta.get('backend')}")
    meta = {**trace.meta, "score_basis": basis_meta(basis, native)}
    if basis == "similarity":
        return Trace(trace.table, meta)
    lower = S.basis_lower_is_better(basis, native)
    table = trace.table.copy()
    out = []
    for qid, ids, values in zip(table["question_id"], table["hit_ids"], table["native_scores"]):
        x = np.asarray(values if isinstance(values, (list, tuple, np.ndarray)) else [], dtype=np.float64)
        if len(x) != len(ids) or not np.isfinite(x).all():
            raise ValueError(f"score={basis}: question {qid!r} of the {trace.meta.get('backend')} trace has no native score "
                             "for every hit (field native_scores); use score=similarity")
        v = S.basis_values(basis, native, x)
        out.append((-v if lower else v).tolist())
    table["hit_scores"] = out
    return Trace(table, meta)


def flips_thresholds(trace: Trace) -> bool:
    """The basis is a distance: the sweep hands ``-t`` to strategies that compare a similarity with the threshold."""
    return bool((trace.meta.get("score_basis") or {}).get("lower_is_better"))


def basis_meta(basis: str, native: str | None) -> dict:
    """What a threshold means under ``basis``: the number, its direction, and the cosine a threshold t stands for."""
    if basis == "similarity":
        return {"basis": basis, "threshold_on": "cosine similarity (hit_scores)", "lower_is_better": False}
    k = S.kind(native)
    what = k.formula if basis == "native" else f"1 - ({k.formula})"
    return {"basis": basis, "native": native, "threshold_on": f"{'the store score' if basis == 'native' else '1 - the store distance'}"
            f" = {what}", "lower_is_better": S.basis_lower_is_better(basis, native),
            "keeps": "hits with score <= t" if S.basis_lower_is_better(basis, native) else "hits with score >= t"}


def threshold_line(meta: dict, example: float = 0.3) -> str:
    """One sentence for a report: what a threshold is compared with and the cosine ``example`` stands for ('' for the
    similarity basis)."""
    b = meta.get("score_basis") or {}
    if b.get("basis", "similarity") == "similarity":
        return ""
    score = meta.get("score") or {}
    c = S.cosine_at(b.get("native"), b["basis"], example)
    at = f"cosine {c:.2f}" if not math.isnan(c) else "no cosine"
    return (f"Thresholds are on {b['threshold_on']} ({score.get('store', meta.get('backend'))}, metric {score.get('metric')}, "
            f"c = cosine of L2-normalised vectors), keeping {b['keeps']}: a threshold of {example:g} there is {at}.")
