"""Statistics shared by the recommender, the report and ``bench.analysis.compare``: pure, seeded, no I/O.

Owns: per-cluster sums (a cluster = a conversation; every mean here is a macro mean over
questions, so a resample of clusters is a ratio of summed sums and summed counts), the small-sample
t intervals of such a mean (``cluster_t_interval``: the CI about the mean of conversations like these and the
prediction interval for a new corpus) and the one rule every table of means prints (``mean_intervals``: t by
default, clipped to the metric's range), the cluster bootstrap (``scipy.stats.bootstrap`` over cluster
indices), the paired test of two configurations on the same questions that the report, its verdict and
``recallbench compare`` use (:func:`paired_t_test`: a t test over conversations, whose CI and p agree),
Holm's step-down correction
and win/tie/loss counts. NaN means undefined, never 0.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.metrics import scored

NAN = float("nan")
TIE_TOL = 1e-12


def cluster_sums(values: np.ndarray, clusters: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-cluster sums and counts of the non-NaN entries of ``values`` (shape (Q, ...)).

    Returns ``(labels, sums, counts)``: labels sorted (C,), sums and counts (C, ...).
    """
    v = np.asarray(values, dtype=np.float64)
    labels, inv = np.unique(np.asarray(clusters).astype(str), return_inverse=True)
    if v.shape[0] != len(inv):
        raise ValueError(f"cluster_sums: {v.shape[0]} values but {len(inv)} cluster labels")
    ok = ~np.isnan(v)
    sums = np.zeros((len(labels),) + v.shape[1:])
    counts = np.zeros_like(sums)
    np.add.at(sums, inv, np.where(ok, v, 0.0))
    np.add.at(counts, inv, ok.astype(np.float64))
    return labels, sums, counts


def ratio(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """sums / counts elementwise, NaN where the count is 0."""
    s, n = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, s / np.where(n > 0, n, 1.0), NAN)


@dataclass(frozen=True)
class BootstrapResult:
    point: np.ndarray  # statistic on the data as observed
    low: np.ndarray  # NaN when undefined (fewer than 2 clusters)
    high: np.ndarray
    distribution: np.ndarray  # (..., n_resamples); empty when not resampled


def cluster_bootstrap(
    sums: np.ndarray,
    counts: np.ndarray,
    *,
    reduce: Callable[[np.ndarray], np.ndarray] | None = None,
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int = 0,
    method: str = "percentile",
    batch: int | None = None,
) -> BootstrapResult:
    """Bootstrap CI of a statistic of cluster means, resampling whole clusters with replacement.

    ``sums``/``counts`` (C, ...) come from :func:`cluster_sums`. The statistic is
    ``reduce(ratio(resampled sums, resampled counts))`` (identity by default); ``reduce`` maps the
    trailing shape ``(...)`` to its output and must accept leading batch axes.
    Uses ``scipy.stats.bootstrap`` on the array of cluster indices, so BCa's jackknife also
    leaves out whole clusters.
    """
    from scipy import stats

    sums, counts = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
    reduce = reduce or (lambda m: m)
    n_clusters = sums.shape[0]
    if batch is None:  # keep one resample batch at ~16M floats
        batch = max(1, int(16_000_000 // max(1, sums.size)))

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.intp)
        lead = idx.ndim - 1  # batch axes of idx (0 for the point estimate, 1 for resamples)
        out = np.asarray(reduce(ratio(sums[idx].sum(axis=lead), counts[idx].sum(axis=lead))))
        return np.moveaxis(out, 0, -1) if lead else out

    point = statistic(np.arange(n_clusters))
    if n_clusters < 2:
        nan = np.full(np.shape(point), NAN)
        return BootstrapResult(point, nan, nan.copy(), np.empty(np.shape(point) + (0,)))
    with warnings.catch_warnings():  # a constant statistic (e.g. recall 1.0 of full context) is not an error
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.bootstrap(
            (np.arange(n_clusters),), statistic, vectorized=True, n_resamples=n_resamples, batch=batch,
            confidence_level=confidence, method=method, rng=np.random.default_rng(seed),
        )
    dist = np.asarray(res.bootstrap_distribution)
    low, high = np.asarray(res.confidence_interval.low, np.float64), np.asarray(res.confidence_interval.high, np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices
        lo_d, hi_d = np.nanmin(dist, axis=-1), np.nanmax(dist, axis=-1)
    constant = (lo_d == hi_d) & np.isnan(low)
    low, high = np.where(constant, lo_d, low), np.where(constant, hi_d, high)
    return BootstrapResult(point, low, high, dist)


@dataclass(frozen=True)
class ClusterInterval:
    """A small-sample interval of a macro mean over clusters (see :func:`cluster_t_interval`).

    ``low``/``high`` are about the mean of conversations like these (a confidence interval for the
    population mean); ``pred_low``/``pred_high`` predict the mean of ``new_clusters`` new conversations
    like these (a prediction interval: what a user should expect on their next corpus). Every field has the
    trailing shape of the input; NaN where fewer than 2 clusters have a value.
    """

    point: np.ndarray
    se: np.ndarray  # cluster-robust standard error of the mean
    low: np.ndarray
    high: np.ndarray
    pred_low: np.ndarray
    pred_high: np.ndarray
    p_value: np.ndarray  # two-sided t test of mean == 0 (for paired differences)
    n_clusters: np.ndarray  # clusters with a value (df = n_clusters - 1)


def cluster_t_interval(sums: np.ndarray, counts: np.ndarray, *, confidence: float = 0.95,
                       new_clusters: int | None = None) -> ClusterInterval:
    """t-based intervals of the question-weighted mean ``sum(sums) / sum(counts)`` with clusters as the unit.

    ``sums``/``counts`` (C, ...) come from :func:`cluster_sums`. Clusters with count 0 at an entry are left
    out there. With G clusters, N questions, mean m and residuals e_c = s_c - m n_c (a ratio estimator):
    se^2 = G/(G-1) * sum(e_c^2) / N^2 (the CR1 cluster-robust variance), and the interval is
    m +- t_{G-1} se (Student's t with G-1 degrees of freedom: the small-sample correction; 2 clusters give
    t = 12.7, never the min-max of two means). The prediction interval for the mean of k new clusters of the
    same average size (k = ``new_clusters``, default G) is m +- t_{G-1} se sqrt(1 + G/k).
    """
    from scipy import stats as sstats

    s, n = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
    has = n > 0
    g = has.sum(axis=0).astype(np.float64)
    tot_s, tot_n = np.where(has, s, 0.0).sum(axis=0), n.sum(axis=0)
    m = ratio(tot_s, tot_n)
    e = np.where(has, s - m * n, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.where(g >= 2, np.sqrt(g / np.maximum(g - 1, 1) * (e ** 2).sum(axis=0)) / np.where(tot_n > 0, tot_n, 1.0), NAN)
        q = sstats.t.ppf(0.5 + confidence / 2, np.maximum(g - 1, 1))
        half = np.where(g >= 2, q * se, NAN)
        k = g if new_clusters is None else float(new_clusters)
        pred_half = half * np.sqrt(1.0 + g / k)
        tstat = np.where(se > 0, np.abs(m) / np.where(se > 0, se, 1.0), np.where(m == 0, 0.0, np.inf))
        p = np.where(g >= 2, 2 * sstats.t.sf(tstat, np.maximum(g - 1, 1)), NAN)
    return ClusterInterval(m, se, m - half, m + half, m - pred_half, m + pred_half, p, g)


INTERVAL_METHODS = ("t", "percentile", "basic", "BCa")  # t: cluster_t_interval; the others: cluster_bootstrap's method


def mean_intervals(sums: np.ndarray, counts: np.ndarray, *, method: str = "t", confidence: float = 0.95,
                   new_clusters: int | None = None, bounds: tuple = (-np.inf, np.inf), n_resamples: int = 1000,
                   seed: int = 0) -> ClusterInterval:
    """The intervals every table of means over conversations prints (``sums``/``counts`` (C, ...) as for
    :func:`cluster_t_interval`).

    ``low``/``high``: the confidence interval about the mean of conversations like these, by ``method``: ``t``
    (:func:`cluster_t_interval`, the default) or a cluster-bootstrap method (``percentile``, ``basic``, ``BCa``;
    with 2-3 clusters a percentile interval is the min-max of their means: too narrow). ``pred_low``/``pred_high``:
    always the t prediction interval for the mean of ``new_clusters`` new conversations (default: as many as
    these). Both are clipped to ``bounds`` (the metric's range, e.g. (0, 1) for F1; arrays broadcast against
    the trailing shape): a mean cannot leave it, so the clipped interval covers whatever the unclipped one did.
    """
    if method not in INTERVAL_METHODS:
        raise ValueError(f"mean_intervals: method must be one of {INTERVAL_METHODS} (got {method!r})")
    t = cluster_t_interval(sums, counts, confidence=confidence, new_clusters=new_clusters)
    low, high = t.low, t.high
    if method != "t":
        boot = cluster_bootstrap(sums, counts, confidence=confidence, n_resamples=n_resamples, seed=seed, method=method)
        low, high = boot.low, boot.high
    lo, hi = bounds
    clip = lambda x: np.clip(x, lo, hi)  # noqa: E731  (NaN stays NaN)
    return ClusterInterval(t.point, t.se, clip(low), clip(high), clip(t.pred_low), clip(t.pred_high), t.p_value, t.n_clusters)


@dataclass(frozen=True)
class PairedTest:
    n: int  # paired units with both values defined (questions, or conversations when clustered)
    n_questions: int
    mean_a: float
    mean_b: float
    diff: float  # mean_a - mean_b over the paired questions
    ci_low: float  # CI of diff (NaN with < 2 conversations): the t interval (paired_t_test) or a cluster bootstrap (paired_test)
    ci_high: float
    p_value: float  # two-sided t test over conversations (paired_t_test)
    wins: int  # questions where a > b
    ties: int
    losses: int
    n_conversations: int = 0  # conversations with a paired question
    se: float = NAN  # cluster-robust standard error of diff (paired_t_test only)


def win_tie_loss(a: np.ndarray, b: np.ndarray, tol: float = TIE_TOL) -> tuple[int, int, int]:
    """Per-question counts of a > b, |a - b| <= tol, a < b (pairs with a NaN are skipped)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ok = ~(np.isnan(a) | np.isnan(b))
    d = a[ok] - b[ok]
    return int((d > tol).sum()), int((np.abs(d) <= tol).sum()), int((d < -tol).sum())


def _paired(a, b, clusters, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Aligned 1-d ``a``, ``b`` and their cluster labels (each question its own cluster when None), pairs with a NaN dropped."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"{where}: a and b must be aligned 1-d arrays (got {a.shape} and {b.shape})")
    cl = np.arange(len(a)).astype(str) if clusters is None else np.asarray(clusters).astype(str)
    ok = ~(np.isnan(a) | np.isnan(b))
    return a[ok], b[ok], cl[ok]


def paired_t_test(a: np.ndarray, b: np.ndarray, *, clusters: Sequence, confidence: float = 0.95) -> PairedTest:
    """The paired test of the report, its verdict and power estimate, and ``recallbench compare``.

    ``a`` and ``b`` are two configurations' values on the same questions (aligned; pairs with a NaN are
    dropped). The per-question differences d = a - b are summed per conversation (``clusters``) and their
    mean sum(d) / N is tested against 0 with :func:`cluster_t_interval`: the cluster-robust (CR1) standard
    error and Student's t with (conversations - 1) degrees of freedom, so questions of one conversation are
    not counted as independent evidence. The CI is the same t interval, so it excludes 0 exactly when
    p < 1 - ``confidence``. With fewer than 2 conversations the CI, se and p are NaN (no test).
    """
    a, b, cl = _paired(a, b, clusters, "paired_t_test")
    w, t, l = win_tie_loss(a, b)
    if len(a) == 0:
        return PairedTest(0, 0, NAN, NAN, NAN, NAN, NAN, NAN, 0, 0, 0)
    _, s, c = cluster_sums(a - b, cl)
    r = cluster_t_interval(s, c, confidence=confidence)
    g = int(r.n_clusters)
    return PairedTest(g, len(a), float(a.mean()), float(b.mean()), float(r.point), float(r.low), float(r.high),
                      float(r.p_value), w, t, l, g, float(r.se))


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values (same order; NaN stays NaN and is not counted)."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, NAN)
    idx = np.flatnonzero(~np.isnan(p))
    m = len(idx)
    if not m:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = adj
    return out


MAIN_METRICS = ("f1", "recall", "precision", "hit", "tokens_injected", "n_selected")


def question_values(rows: pd.DataFrame, where: dict, metric: str) -> pd.DataFrame:
    """Per-question values of one configuration: columns question_id, conversation_id, value.

    ``where`` maps column -> value (a NaN threshold matches NaN). ``metric`` is a per-question
    column over the scored questions (``bench.metrics.scored``: non-adversarial with gold, the
    summary's ``n_questions``), ``abstained`` (adversarial questions: 1 when nothing was
    recalled) or ``f1_abstain`` (F1 of the scored questions, with abstention as the score of
    adversarial questions). Non-adversarial questions without gold are never returned.
    """
    mask = pd.Series(True, index=rows.index)
    for col, val in where.items():
        if col not in rows:
            raise ValueError(f"question_values: rows have no column {col!r}")
        mask &= rows[col].isna() if isinstance(val, float) and np.isnan(val) else rows[col] == val
    sel = rows[mask]
    if metric == "abstained":
        sel = sel[sel["adversarial"]]
        vals = sel["empty"]
    elif metric == "f1_abstain":  # F1, and abstention (nothing recalled) credited on adversarial questions
        sel = sel[scored(sel) | sel["adversarial"].astype(bool)]
        vals = sel["f1"].where(~sel["adversarial"], sel["empty"])
    else:
        if metric not in rows:
            raise ValueError(f"question_values: rows have no metric column {metric!r}")
        sel = sel[scored(sel)]
        vals = sel[metric]
    if sel["question_id"].duplicated().any():
        raise ValueError(f"question_values: {where} matches more than one row per question (add keys)")
    return pd.DataFrame({"question_id": sel["question_id"].to_numpy(), "conversation_id": sel["conversation_id"].to_numpy(),
                         "value": vals.astype(float).to_numpy()})


def holm_level(p_values: Sequence[float], alpha: float) -> np.ndarray:
    """The level each raw p must clear in Holm's step-down (alpha / the number of p-values at least as large;
    NaN stays NaN): a comparison is significant when its p and every smaller one clear their levels."""
    p = np.asarray(p_values, dtype=np.float64)
    ok = p[~np.isnan(p)]
    with np.errstate(invalid="ignore"):
        k = (ok[None, :] >= p[:, None]).sum(axis=1)
    return np.where(np.isnan(p), NAN, alpha / np.maximum(k, 1))


COMPARE_COLUMNS = ["a", "b", "metric", "n", "n_conversations", "mean_a", "mean_b", "diff", "se", "ci_low", "ci_high", "p",
                   "wins", "ties", "losses"]


def compare_pairs(
    rows: pd.DataFrame,
    pairs: Sequence[tuple[dict, dict]],
    *,
    metric: str = "f1",
    alpha: float = 0.05,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Paired t tests over conversations (:func:`paired_t_test`) for each (config A, config B) on their common
    questions, Holm-corrected across ``pairs``.

    Configs are column->value dicts over ``rows``. Returns one row per pair: ``n`` questions and
    ``n_conversations``, the means, the difference A - B with its standard error and t interval (not
    Holm-adjusted), p, ``p_holm``, ``holm_level`` (the level p must clear under Holm), ``significant``
    (p_holm < alpha; False without a test) and wins/ties/losses.
    """
    out = []
    for a_where, b_where in pairs:
        qa, qb = question_values(rows, a_where, metric), question_values(rows, b_where, metric)
        m = qa.merge(qb, on="question_id", suffixes=("_a", "_b"))
        r = paired_t_test(m["value_a"].to_numpy(), m["value_b"].to_numpy(), clusters=m["conversation_id_a"].to_numpy(),
                          confidence=confidence)
        out.append({"a": a_where, "b": b_where, "metric": metric, "n": r.n_questions, "n_conversations": r.n_conversations,
                    "mean_a": r.mean_a, "mean_b": r.mean_b, "diff": r.diff, "se": r.se, "ci_low": r.ci_low, "ci_high": r.ci_high,
                    "p": r.p_value, "wins": r.wins, "ties": r.ties, "losses": r.losses})
    df = pd.DataFrame(out, columns=COMPARE_COLUMNS)
    df["p_holm"] = holm(df["p"].to_numpy()) if len(df) else []
    df["holm_level"] = holm_level(df["p"].to_numpy(), alpha) if len(df) else []
    df["significant"] = df["p_holm"] < alpha
    return df
