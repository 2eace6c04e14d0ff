"""Choose the best setting on some data (A), score it on other data (B): the one owner of both steps.

Every "choose on A, score on B" of the analysis goes through here: leave-one-conversation-out
(``recommend.loco``, ``transfer.loco``), a threshold carried from one dataset to another (``recommend.transfer``),
a setting carried from one embedder's or corpus's run to another's (``transfer.across``), a label release's
choice scored on the other release's labels (``releases.moves``) and split-half coverage (``holdout.split_half``).

Settings lie along the last axis. ``best`` picks one: the highest ``sign * primary`` among the feasible settings
whose primary value is defined; ties (within ``TIE``) go to the lowest ``tie`` value, then to the first setting;
-1 when none is feasible. ``choose_and_score`` chooses on A and reads B at the chosen setting (NaN where none was
chosen); the caller lines B's settings up with A's (``setting_index``). Pure, vectorised over leading axes.
"""

from __future__ import annotations

import numpy as np

NAN = float("nan")
TIE = 1e-12


def best(primary: np.ndarray, *, sign: int = 1, feasible: np.ndarray | None = None, tie: np.ndarray | None = None) -> np.ndarray:
    """Index of the chosen setting along the last axis of ``primary``; -1 when no setting is feasible.

    ``sign`` is the metric's direction (+1 maximise, -1 minimise: ``bench.metrics.direction``); ``feasible`` (same
    shape, default all) adds constraints to "primary is defined"; ties on ``sign * primary`` within ``TIE`` go to the
    lowest ``tie`` (NaN counts as +inf; default: none, so the first tied setting)."""
    primary = np.asarray(primary, np.float64)
    ok = ~np.isnan(primary)
    if feasible is not None:
        ok &= feasible
    key = np.where(ok, sign * primary, -np.inf)
    top = key.max(axis=-1, keepdims=True)
    cand = ok & (key >= top - TIE)
    tie = np.zeros(primary.shape) if tie is None else np.where(np.isnan(tie), np.inf, tie)
    idx = np.where(cand, tie, np.inf).argmin(axis=-1)
    return np.where(cand.any(axis=-1), idx, -1)


def take(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values`` at setting ``idx`` along the last axis (``idx`` has the leading shape); NaN where ``idx`` is -1."""
    values, idx = np.asarray(values, np.float64), np.asarray(idx)
    got = np.take_along_axis(values, np.maximum(idx, 0)[..., None], axis=-1)[..., 0]
    return np.where(idx >= 0, got, NAN)


def choose_and_score(choose_on: np.ndarray, score_on: np.ndarray, *, sign: int = 1, feasible: np.ndarray | None = None,
                     tie: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Choose on A, score on B: (chosen index, A's value there, B's value there), NaN values where none was chosen.

    ``choose_on`` (A) and ``score_on`` (B) hold the primary metric with settings along the last axis, lined up (setting
    j of A is setting j of B; NaN where B lacks it); ``sign``, ``feasible`` and ``tie`` as in ``best`` (about A)."""
    idx = best(choose_on, sign=sign, feasible=feasible, tie=tie)
    return idx, take(choose_on, idx), take(score_on, idx)


def setting_index(thresholds: np.ndarray, threshold: float) -> int:
    """Position of ``threshold`` in a grid of ``thresholds`` (``np.isclose``; the first match), -1 when absent or NaN."""
    if threshold is None or np.isnan(threshold):
        return -1
    hit = np.flatnonzero(np.isclose(thresholds, threshold))
    return int(hit[0]) if len(hit) else -1
