"""Operating-point recommendation: which threshold to ship, how sure we are, how stable it is.

Owns the objectives (max F1 by default; max recall s.t. mean injected tokens <= B; min tokens
s.t. recall >= R; optional store p99 latency <= L), the choice of a threshold per
(dataset, embedder, backend, strategy), 95 % intervals of every mean over conversations (``intervals``:
the CI about the mean of conversations like these, t-based by default, and the prediction interval for a
new corpus of conversations like these, ``bench.analysis.stats.mean_intervals``) and the cluster-bootstrap
stability of the chosen threshold, leave-one-conversation-out (LOCO: stability across the conversations of one
corpus, not transfer to another corpus), the threshold chosen on one dataset applied to another, per-category
results (optionally a threshold per category) and the Pareto frontier of recall vs tokens.

Input is the tidy per-question table of a run (``questions.parquet``); every function is pure.
Means are macro means over the scored questions (non-adversarial with gold, as
``bench.metrics.aggregate``; questions without gold are left out of the grids), so a point
estimate and ``n_questions`` here equal the summary's. Adversarial/abstention questions are credited
by ``abstained`` (nothing recalled) and by ``f1_abstain`` (their abstention counted as F1).
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from bench import metrics
from bench.analysis.choose import best, choose_and_score, setting_index
from bench.analysis.stats import INTERVAL_METHODS, ClusterInterval, cluster_bootstrap, cluster_sums, mean_intervals, ratio
from bench.results.rundir import QUESTIONS

log = logging.getLogger(__name__)

NAN = float("nan")
CONFIG_KEYS = ["dataset", "embedder", "backend", "strategy"]
METRICS = ("f1", "recall", "precision", "tokens", "abstained", "f1_abstain")
M = {m: i for i, m in enumerate(METRICS)}
CI_METRICS = ("f1", "recall", "precision", "tokens", "f1_abstain")
# name -> (metric, +1 maximise / -1 minimise): max_f1, max_f1_abstain, max_recall, min_tokens; the direction is the
# metric's own (``bench.metrics.METRICS``)
OBJECTIVES = {("max_" if metrics.direction(m) > 0 else "min_") + m: (m, metrics.direction(m))
              for m in ("f1", "f1_abstain", "recall", "tokens")}
CI_METHODS = INTERVAL_METHODS  # t (default: small-sample, Student t with G-1 df) or a cluster-bootstrap method
UPPER = np.array([metrics.METRICS[m].high for m in METRICS])  # every metric >= 0; all but tokens <= 1
TIE = 1e-12


@functools.cache
def _shipped() -> tuple[tuple[str, object], ...]:
    """configs/recommend/default.yaml: the only copy of the defaults. Its ``seed: ${seed}`` follows the
    run's top-level ``seed``; outside a run, config.yaml's."""
    from bench.resources import shipped_config

    top = shipped_config("config.yaml")
    out = []
    for k, v in shipped_config("recommend/default.yaml").items():
        ref = re.fullmatch(r"\$\{(\w+)\}", v) if isinstance(v, str) else None
        out.append((k, top.get(ref.group(1)) if ref else v))
    return tuple(out)


# Keys of older runs' recommend: blocks, still accepted (config_resolved.yaml of old runs must load) and ignored.
RETIRED = {**dict.fromkeys(("test_unit", "test_resamples"), "the paired test is a t test over conversations (bench.analysis.stats."
                           "paired_t_test): it flips nothing and draws no resamples"),
           "usable_recall": "the one recall target is recommend.min_recall"}


def _closest(word, choices) -> str:
    """``"; did you mean X?"`` for a misspelt choice (difflib), else ""."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


@dataclass(frozen=True)
class RecommendConfig:
    """The ``recommend:`` config block. Its defaults live in configs/recommend/default.yaml only:
    ``RecommendConfig.defaults(**changes)`` / ``from_mapping(block)`` start from there."""

    objective: str  # min_tokens (default) | max_f1 | max_f1_abstain | max_recall
    token_budget: float | None  # mean injected tokens per question must be <= this
    min_recall: float | None  # the recall target: macro recall must be >= this (None: no target)
    max_p99_ms: float | None  # store p99 latency must be <= this
    per_category: bool  # also choose a threshold for each category
    confidence: float
    n_resamples: int
    ci_method: str
    new_conversations: int | None  # the prediction interval is for a new corpus of this many conversations (None: as many as these)
    neighbours: int  # thresholds each side of the chosen one shown with CIs
    seed: int
    alpha: float  # significance level of the paired tests (after Holm)
    min_conversations: int  # the verdict never says "use" on fewer conversations
    min_untied: int  # ... nor when fewer questions score differently between the best and the runner-up
    attribution_top_n: int  # a gold memory outside the exact top-N is an embedding miss
    min_stable_share: float  # the verdict says "use" only when resamples choose the threshold at least this often
    min_n: int  # groups with fewer scored questions show "n too small", never an interval

    def __post_init__(self) -> None:
        where = "recommend config"
        if self.objective not in OBJECTIVES:
            raise ValueError(f"{where}: objective must be one of {sorted(OBJECTIVES)} (got {self.objective!r}){_closest(self.objective, OBJECTIVES)}")
        if self.objective == "max_recall" and self.token_budget is None:
            raise ValueError(f"{where}: objective max_recall needs token_budget (mean injected tokens per question)")
        if self.objective == "min_tokens" and self.min_recall is None:
            raise ValueError(f"{where}: objective min_tokens needs min_recall (e.g. 0.8)")
        for name in ("token_budget", "max_p99_ms"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and v > 0):
                raise ValueError(f"{where}: {name} must be a positive number or null (got {v!r})")
        if self.min_recall is not None and not (0 <= self.min_recall <= 1):
            raise ValueError(f"{where}: min_recall must be in [0, 1] (got {self.min_recall!r})")
        if not 0 < self.confidence < 1:
            raise ValueError(f"{where}: confidence must be in (0, 1) (got {self.confidence!r})")
        if not 0 < self.alpha < 1:
            raise ValueError(f"{where}: alpha must be in (0, 1) (got {self.alpha!r})")
        if self.ci_method not in CI_METHODS:
            raise ValueError(f"{where}: ci_method must be one of {CI_METHODS} (got {self.ci_method!r}){_closest(self.ci_method, CI_METHODS)}")
        if not 0 <= self.min_stable_share <= 1:
            raise ValueError(f"{where}: min_stable_share must be in [0, 1] (got {self.min_stable_share!r})")
        for name in ("n_resamples", "attribution_top_n", "min_n"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{where}: {name} must be >= 1 (got {getattr(self, name)!r})")
        if int(self.min_conversations) < 2:
            raise ValueError(f"{where}: min_conversations must be >= 2: a test needs two conversations (got {self.min_conversations!r})")
        if int(self.min_untied) < 1:
            raise ValueError(f"{where}: min_untied must be >= 1 (got {self.min_untied!r})")
        if self.new_conversations is not None and int(self.new_conversations) < 1:
            raise ValueError(f"{where}: new_conversations must be >= 1 or null (got {self.new_conversations!r})")
        if int(self.neighbours) < 0:
            raise ValueError(f"{where}: neighbours must be >= 0 (got {self.neighbours!r})")

    @classmethod
    def defaults(cls, **changes) -> "RecommendConfig":
        """The shipped defaults (configs/recommend/default.yaml), with ``changes``."""
        return cls.from_mapping(changes, source="RecommendConfig.defaults")

    @classmethod
    def from_mapping(cls, data: Mapping | None, *, source: str = "config") -> "RecommendConfig":
        """A ``recommend:`` block (keys it leaves out: the shipped defaults)."""
        data = dict(data or {})
        retired = sorted(set(data) & set(RETIRED))
        if retired:
            log.info("%s: recommend key(s) %s ignored: %s", source, retired, RETIRED[retired[0]])
        data = {k: v for k, v in data.items() if k not in RETIRED}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: recommend has unknown key(s) {unknown}; known: {sorted(known)}")
        try:
            return cls(**{**dict(_shipped()), **data})
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None

    @classmethod
    def from_settings(cls, settings: Mapping, *, source: str = "config") -> "RecommendConfig":
        """From a run's resolved config (plain data): its ``recommend:`` block; the top-level ``seed``
        seeds the bootstrap unless the block sets one. The shipped defaults when ``settings`` is empty."""
        block = dict(settings.get("recommend") or {})
        if "seed" in settings:
            block.setdefault("seed", int(settings.get("seed") or 0))
        return cls.from_mapping(block, source=source)

    @property
    def recall_floor(self) -> float | None:
        """The recall every chosen point must reach: ``min_recall``, except under max_recall (its own metric: the target
        then only marks which settings reach it)."""
        return None if self.objective == "max_recall" else self.min_recall

    @property
    def usable_recall(self) -> float:
        """The recall "What would help most" calls usable: the recall target ``min_recall``; without one, the shipped one."""
        return float(self.min_recall if self.min_recall is not None else dict(_shipped())["min_recall"])

    @property
    def primary(self) -> str:
        return OBJECTIVES[self.objective][0]

    @property
    def sign(self) -> int:
        return OBJECTIVES[self.objective][1]

    def short(self) -> str:
        """The objective in a few words (the first screen's "recommended: ..." row)."""
        r = f" with recall ≥ {self.recall_floor:.2f}" if self.recall_floor is not None else ""
        text = {"min_tokens": f"fewest tokens{r}", "max_f1": f"best F1{r}", "max_f1_abstain": f"best F1, abstention credited{r}",
                "max_recall": f"most recall within {self.token_budget:g} tokens" if self.token_budget is not None else "most recall"}[self.objective]
        if self.objective != "max_recall" and self.token_budget is not None:
            text += f", ≤ {self.token_budget:g} tokens"
        if self.max_p99_ms is not None:
            text += f", p99 ≤ {self.max_p99_ms:g} ms"
        return text

    def describe(self) -> str:
        metric = {"f1": "F1", "f1_abstain": "F1 with abstention credit", "recall": "recall", "tokens": "injected tokens"}[self.primary]
        parts = [("maximise " if self.sign > 0 else "minimise ") + metric]
        if self.token_budget is not None:
            parts.append(f"mean injected tokens <= {self.token_budget:g}")
        if self.recall_floor is not None:
            parts.append(f"recall >= {self.min_recall:g}")
        if self.max_p99_ms is not None:
            parts.append(f"store p99 latency <= {self.max_p99_ms:g} ms")
        return parts[0] + (" subject to " + ", ".join(parts[1:]) if len(parts) > 1 else "")


# --------------------------------------------------------------------------- choosing

def objective(means: np.ndarray, cfg: RecommendConfig) -> dict:
    """``cfg``'s objective on ``means`` (..., len(METRICS), T) as the arguments of ``choose.best``: the primary metric,
    its direction, the token/recall constraints and the tie-break (fewer tokens for max objectives, more recall for
    min tokens)."""
    means = np.asarray(means, np.float64)
    primary = means[..., M[cfg.primary], :]
    tokens, recall = means[..., M["tokens"], :], means[..., M["recall"], :]
    feasible = np.ones(primary.shape, bool)
    with np.errstate(invalid="ignore"):
        if cfg.token_budget is not None:
            feasible &= tokens <= cfg.token_budget
        if cfg.recall_floor is not None:
            feasible &= recall >= cfg.recall_floor
    return {"primary": primary, "sign": cfg.sign, "feasible": feasible, "tie": tokens if cfg.sign > 0 else -recall}


def choose(means: np.ndarray, cfg: RecommendConfig) -> np.ndarray:
    """Index of the chosen threshold along the last axis of ``means`` (..., len(METRICS), T); -1 if none
    (``choose.best`` of ``objective``).

    Feasible: the objective's metric is defined and the token/recall constraints hold. Ties on the
    objective (within 1e-12) go to fewer tokens (for max objectives) or more recall (min tokens),
    then to the lowest threshold.
    """
    return best(**objective(means, cfg))


def choose_on_score_on(choose_on: np.ndarray, score_on: np.ndarray, cfg: RecommendConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``choose.choose_and_score`` with ``cfg``'s objective: chosen on ``choose_on``, scored on ``score_on`` (both
    (..., len(METRICS), T), thresholds lined up): (index, primary metric on A there, primary metric on B there)."""
    obj = objective(choose_on, cfg)
    return choose_and_score(obj.pop("primary"), np.asarray(score_on, np.float64)[..., M[cfg.primary], :], **obj)


def pareto_front(cost: np.ndarray, benefit: np.ndarray) -> np.ndarray:
    """Mask of points no other point dominates (cost <= and benefit >=, one strictly). NaN: never."""
    cost, benefit = np.asarray(cost, np.float64), np.asarray(benefit, np.float64)
    mask = np.zeros(len(cost), bool)
    ok = np.flatnonzero(~(np.isnan(cost) | np.isnan(benefit)))
    order = ok[np.lexsort((-benefit[ok], cost[ok]))]
    best = -np.inf
    for i in order:
        if benefit[i] > best:
            mask[i] = True
            best = benefit[i]
    return mask


# --------------------------------------------------------------------------- data

@dataclass(frozen=True)
class Grid:
    """One configuration's per-question values at every threshold: values (Q, len(METRICS), T).

    Its questions are the scored ones (non-adversarial with gold) and the adversarial ones; a
    non-adversarial question without gold is not in the grid (``n_excluded`` counts them), so
    ``(~adversarial).sum()`` equals the summary's ``n_questions``.
    """

    key: tuple[str, str, str, str]  # dataset, embedder, backend, strategy
    thresholds: np.ndarray  # (T,) ascending; [nan] for a strategy without a threshold
    question_ids: np.ndarray
    conversations: np.ndarray
    groups: np.ndarray  # category label per question ("adversarial"/"abstention" for those)
    adversarial: np.ndarray
    values: np.ndarray
    latency_p99_ms: float  # over every query of the trace, excluded questions included (a property of the store)
    n_excluded: int = 0  # non-adversarial questions without gold, left out of the grid (``metrics.excluded``)
    latency_p50_ms: float = NAN  # as latency_p99_ms

    @property
    def thresholded(self) -> bool:
        return not np.isnan(self.thresholds).all()

    def where(self) -> dict:
        return dict(zip(CONFIG_KEYS, self.key))


def category_label(category: str, adversarial: bool) -> str:
    if not adversarial:
        return category or "(none)"
    return "adversarial" if category in ("", "adversarial") else "abstention"


def one_format(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows of a single injection format: format A when a run swept several (selections and every
    metric but tokens are the same across formats; tokens are format A's, as in the summary)."""
    if "format" not in rows or rows["format"].nunique(dropna=False) <= 1:
        return rows
    keep = "A" if (rows["format"] == "A").any() else rows["format"].iloc[0]
    log.info("rows have formats %s: recommending on format %s", sorted(rows["format"].unique()), keep)
    return rows[rows["format"] == keep]


def build_grids(rows: pd.DataFrame, *, source: str = QUESTIONS) -> list[Grid]:
    """Split a run's per-question rows into one Grid per configuration (sweep order)."""
    need = set(CONFIG_KEYS) | {"threshold", "question_id", "conversation_id", "category", "adversarial", "f1", "recall",
                               "precision", "tokens_injected", "empty", "latency_ns"}
    missing = sorted(need - set(rows.columns))
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing}")
    grids = []
    for key, g in rows.groupby(CONFIG_KEYS, sort=False):
        g = g.assign(_t=g["threshold"].fillna(-1.0))
        dup = g.duplicated(["_t", "question_id"])
        if dup.any():
            r = g[dup].iloc[0]
            raise ValueError(f"{source}: config {key} has more than one row for question {r['question_id']!r} "
                             f"at threshold {r['threshold']} (field question_id)")
        ts = np.sort(g["_t"].unique())
        first = g[g["_t"] == ts[0]]
        qids = first["question_id"].to_numpy()
        counts = g.groupby("_t")["question_id"].nunique()
        if (counts != len(qids)).any() or len(g) != len(qids) * len(ts):
            bad = counts[counts != len(qids)]
            raise ValueError(f"{source}: config {key} does not have the same questions at every threshold "
                             f"({len(qids)} at {ts[0]}, {dict(bad)} elsewhere) (field threshold)")
        latency_p99 = metrics.percentile_ms(first["latency_ns"].to_numpy(np.float64), 99)  # every query of the trace
        latency_p50 = metrics.percentile_ms(first["latency_ns"].to_numpy(np.float64), 50)
        # questions without gold (not adversarial) are not scored: left out of the grid, counted in n_excluded
        left_out = metrics.excluded(first).to_numpy()
        first, qids = first[~left_out], qids[~left_out]
        adv = first["adversarial"].astype(bool).to_numpy()

        # (question, threshold) cells by position: the questions of the first threshold, in its order
        qi, ti = pd.Index(qids).get_indexer(g["question_id"]), np.searchsorted(ts, g["_t"].to_numpy())
        at = qi >= 0

        def cells(col: str) -> np.ndarray:
            out = np.full((len(qids), len(ts)), NAN)
            out[qi[at], ti[at]] = g[col].to_numpy(np.float64)[at]
            return out

        f1, rec, prec, tok, empty = (cells(col) for col in ("f1", "recall", "precision", "tokens_injected", "empty"))
        main = ~adv[:, None]
        vals = np.stack([
            np.where(main, f1, NAN), np.where(main, rec, NAN), np.where(main, prec, NAN), np.where(main, tok, NAN),
            np.where(main, NAN, empty), metrics.with_abstention(f1, empty, ~main),
        ], axis=1)
        grids.append(Grid(
            key=tuple(str(k) for k in key), thresholds=np.where(ts < 0, NAN, ts), question_ids=qids,
            conversations=first["conversation_id"].astype(str).to_numpy(),
            groups=np.array([category_label(str(c), a) for c, a in zip(first["category"].fillna(""), adv)], dtype=object),
            adversarial=adv, values=vals, latency_p99_ms=latency_p99, n_excluded=int(left_out.sum()), latency_p50_ms=latency_p50,
        ))
    return grids


# --------------------------------------------------------------------------- analysis

def _latency_ok(grid: Grid, cfg: RecommendConfig) -> bool:
    return cfg.max_p99_ms is None or math.isnan(grid.latency_p99_ms) or grid.latency_p99_ms <= cfg.max_p99_ms


def intervals(sums: np.ndarray, counts: np.ndarray, cfg: RecommendConfig, *, metric_axis: int = -2) -> ClusterInterval:
    """The intervals of means over conversations (``stats.mean_intervals``; ``sums`` (C, ...) with METRICS along
    ``metric_axis``): the CI about the mean of conversations like these by ``cfg.ci_method`` and the t prediction
    interval for a new corpus of ``cfg.new_conversations`` (default: as many as these), clipped to each metric's range."""
    shape = [1] * (np.ndim(sums) - 1)
    shape[metric_axis] = len(METRICS)
    return mean_intervals(sums, counts, method=cfg.ci_method, confidence=cfg.confidence, new_clusters=cfg.new_conversations,
                          bounds=(0.0, UPPER.reshape(shape)), n_resamples=cfg.n_resamples, seed=cfg.seed)


# The values a threshold can take, by what it is compared with (strategies.json ``threshold_on``): a chosen threshold
# at the edge of the swept grid is worth widening only when the grid's edge is not already the end of this range
# (relative_delta 0.00 is top-1: no delta is lower).
THRESHOLD_RANGE = {"similarity": (-1.0, 1.0), "delta": (0.0, math.inf), "ratio": (-math.inf, 1.0), "probability": (0.0, 1.0)}


def analyse(grid: Grid, cfg: RecommendConfig, mask: np.ndarray | None = None, *, on: str = "similarity") -> tuple[dict, pd.DataFrame]:
    """The chosen point of one configuration (dict) and its curve with CIs (one row per threshold).

    ``mask`` restricts to a subset of questions (a category); ``on``: what the threshold is compared with
    (``THRESHOLD_RANGE``).
    """
    vals, conv = (grid.values, grid.conversations) if mask is None else (grid.values[mask], grid.conversations[mask])
    _, sums, counts = cluster_sums(vals, conv)
    keep = counts.sum(axis=(1, 2)) > 0 if sums.size else np.zeros(0, bool)
    sums, counts = sums[keep], counts[keep]
    means = ratio(sums.sum(0), counts.sum(0))
    idx = int(choose(means, cfg)) if _latency_ok(grid, cfg) and sums.size else -1
    ci = intervals(sums, counts, cfg) if sums.size else None
    cols = {"threshold": grid.thresholds}
    for m in METRICS:
        cols[m] = means[M[m]]
        if m in CI_METRICS:  # lo/hi: CI about the mean of conversations like these; pred_lo/pred_hi: for a new corpus
            for col, part in (("lo", "low"), ("hi", "high"), ("pred_lo", "pred_low"), ("pred_hi", "pred_high")):
                cols[f"{m}_{col}"] = getattr(ci, part)[M[m]] if ci is not None else np.full(len(grid.thresholds), NAN)
    cols["n_questions"] = int((~grid.adversarial[mask] if mask is not None else ~grid.adversarial).sum())
    # conversations with a scored question: the F1/recall/tokens intervals are over these (a conversation of adversarial
    # questions only, e.g. a LongMemEval abstention question's own haystack, has no value there: cluster_t_interval leaves it out)
    adv = grid.adversarial if mask is None else grid.adversarial[mask]
    n_conv = int(len(np.unique(conv[~adv])))
    cols["chosen"] = np.arange(len(grid.thresholds)) == idx
    curve = pd.DataFrame(cols)
    point = {**grid.where(), "threshold": NAN, "feasible": idx >= 0, "objective": cfg.objective,
             "n_questions": int(curve["n_questions"].iloc[0]) if len(curve) else 0,
             "n_adversarial": int((grid.adversarial[mask] if mask is not None else grid.adversarial).sum()),
             "n_excluded": grid.n_excluded if mask is None else NAN,  # not tracked per category
             "n_conversations": n_conv, "latency_p50_ms": grid.latency_p50_ms, "latency_p99_ms": grid.latency_p99_ms,
             "threshold_share": NAN, "threshold_lo": NAN, "threshold_hi": NAN, "note": ""}
    if idx < 0:
        point["note"] = ("store p99 latency %.1f ms > %g ms" % (grid.latency_p99_ms, cfg.max_p99_ms)) if not _latency_ok(grid, cfg) \
            else "no threshold meets the constraints"
        for c in curve.columns:
            if c not in ("threshold", "chosen", "n_questions"):
                point[c] = NAN
        return point, curve
    row = curve.iloc[idx]
    point.update({c: row[c] for c in curve.columns if c not in ("chosen", "n_questions")})
    if grid.thresholded and len(sums) >= 2:
        stab = threshold_stability(sums, counts, grid.thresholds, cfg)
        point.update(stab)
    lo_end, hi_end = THRESHOLD_RANGE.get(on, THRESHOLD_RANGE["similarity"])
    if grid.thresholded and len(grid.thresholds) > 1 and idx in (0, len(grid.thresholds) - 1) \
            and not math.isclose(grid.thresholds[idx], lo_end if idx == 0 else hi_end, abs_tol=1e-9):  # advice that can be followed
        point["note"] = (f"{grid.thresholds[idx]:.2f} is the {'lowest' if idx == 0 else 'highest'} threshold swept: "
                         "the optimum may lie beyond it (widen `thresholds`)")
    return point, curve


def threshold_stability(sums: np.ndarray, counts: np.ndarray, thresholds: np.ndarray, cfg: RecommendConfig) -> dict:
    """How often a cluster-bootstrap resample chooses the same threshold, and the range it chooses."""
    def reduce(means: np.ndarray) -> np.ndarray:
        i = choose(means, cfg)
        return np.where(i >= 0, thresholds[np.maximum(i, 0)], NAN)

    res = cluster_bootstrap(sums, counts, reduce=reduce, confidence=cfg.confidence, n_resamples=cfg.n_resamples,
                            seed=cfg.seed, method="percentile")
    dist = res.distribution
    a = (1 - cfg.confidence) / 2
    ok = dist[~np.isnan(dist)]
    return {
        "threshold_share": float(np.mean(np.isclose(dist, res.point))) if dist.size else NAN,
        "threshold_lo": float(np.quantile(ok, a, method="lower")) if ok.size else NAN,
        "threshold_hi": float(np.quantile(ok, 1 - a, method="higher")) if ok.size else NAN,
    }


def loco(grid: Grid, cfg: RecommendConfig) -> tuple[dict, pd.DataFrame]:
    """Leave-one-conversation-out: tune on all conversations but one, evaluate on the one left out. It
    measures stability across the conversations of this corpus (every fold trains on the same corpus),
    not transfer to another corpus (``bench.analysis.transfer``, protocol ``corpora``).

    Per fold: the threshold chosen on the others, the objective metric there (``train``) and on the
    held-out conversation (``held_out``), ``gap`` = how much worse held-out is (sign-adjusted, so
    positive = worse), the held-out conversation's own best threshold and the ``regret`` of not
    using it, and whether a token/recall constraint is violated on the held-out conversation.
    Summary: mean gap over folds, pooled held-out metric (question-weighted), in-sample metric,
    optimism (in-sample minus pooled held-out) and the spread of the chosen thresholds.
    """
    labels, sums, counts = cluster_sums(grid.values, grid.conversations)
    keep = counts[:, M[cfg.primary]].sum(-1) > 0
    labels, sums, counts = labels[keep], sums[keep], counts[keep]
    p, s = M[cfg.primary], cfg.sign
    base = {**grid.where(), "objective": cfg.objective, "n_folds": int(len(labels))}
    if len(labels) < 2 or not _latency_ok(grid, cfg):
        return {**base, "mean_gap": NAN, "gap_min": NAN, "gap_max": NAN, "mean_regret": NAN, "pooled_held_out": NAN, "in_sample": NAN, "optimism": NAN,
                "threshold_min": NAN, "threshold_max": NAN, "threshold_std": NAN, "n_distinct_thresholds": 0,
                "share_same_as_full": NAN, "violated_share": NAN}, pd.DataFrame()
    tot_s, tot_c = sums.sum(0), counts.sum(0)
    train = ratio(tot_s[None] - sums, tot_c[None] - counts)
    held = ratio(sums, counts)
    idx, tr, ho = choose_on_score_on(train, held, cfg)  # each fold: chosen on the others, scored on the one left out
    own, best_held, _ = choose_on_score_on(held, held, cfg)  # the held-out conversation's own best, in hindsight
    full = int(choose(ratio(tot_s, tot_c), cfg))
    f = np.arange(len(labels))
    thr = np.where(idx >= 0, grid.thresholds[np.maximum(idx, 0)], NAN)
    violated = np.zeros(len(labels), bool)
    with np.errstate(invalid="ignore"):
        if cfg.token_budget is not None:
            violated |= held[f, M["tokens"], np.maximum(idx, 0)] > cfg.token_budget
        if cfg.recall_floor is not None:
            violated |= held[f, M["recall"], np.maximum(idx, 0)] < cfg.recall_floor
    folds = pd.DataFrame({
        "conversation_id": labels, "n_questions": counts[:, p, 0].astype(int),
        "threshold": thr, "train": tr, "held_out": ho, "gap": s * (tr - ho),
        "held_out_best_threshold": np.where(own >= 0, grid.thresholds[np.maximum(own, 0)], NAN),
        "held_out_best": best_held, "regret": s * (best_held - ho), "violated": violated & (idx >= 0),
    })
    for k, v in reversed(list(grid.where().items())):
        folds.insert(0, k, v)
    ok = idx >= 0
    num = np.where(ok, sums[f, p, np.maximum(idx, 0)], 0.0).sum()
    den = np.where(ok, counts[f, p, np.maximum(idx, 0)], 0.0).sum()
    pooled = num / den if den else NAN
    in_sample = float(ratio(tot_s, tot_c)[p, full]) if full >= 0 else NAN
    t_ok = thr[~np.isnan(thr)]
    summary = {
        **base,
        "mean_gap": float(np.nanmean(folds["gap"])) if folds["gap"].notna().any() else NAN,
        "gap_min": float(np.nanmin(folds["gap"])) if folds["gap"].notna().any() else NAN,
        "gap_max": float(np.nanmax(folds["gap"])) if folds["gap"].notna().any() else NAN,
        "mean_regret": float(np.nanmean(folds["regret"])) if folds["regret"].notna().any() else NAN,
        "pooled_held_out": float(pooled),
        "in_sample": in_sample,
        "optimism": s * (in_sample - pooled) if not (math.isnan(in_sample) or math.isnan(pooled)) else NAN,
        "threshold_min": float(t_ok.min()) if t_ok.size else NAN,
        "threshold_max": float(t_ok.max()) if t_ok.size else NAN,
        "threshold_std": float(t_ok.std()) if t_ok.size else NAN,
        "n_distinct_thresholds": int(len(np.unique(t_ok))),
        "share_same_as_full": float(np.mean(idx == full)) if full >= 0 else NAN,
        "violated_share": float(folds["violated"].mean()) if (cfg.token_budget or cfg.recall_floor is not None) else NAN,
    }
    return summary, folds


def categories(grid: Grid, cfg: RecommendConfig, point: dict) -> pd.DataFrame:
    """Per-category metrics at the configuration's chosen threshold (with CIs); with
    ``cfg.per_category`` also each category's own best threshold and its gain over the shared one."""
    out = []
    t = point.get("threshold", NAN)
    if not grid.thresholded:
        j = 0 if point.get("feasible") else -1
    else:
        hit = np.flatnonzero(np.isclose(grid.thresholds, t)) if not math.isnan(t) else []
        j = int(hit[0]) if len(hit) else -1
    p = cfg.primary
    labels = list(dict.fromkeys(grid.groups))
    # one bootstrap for every category: values split into a category axis (NaN outside the category)
    col = grid.values[:, :, max(j, 0)]
    stacked = np.stack([np.where((grid.groups == label)[:, None], col, NAN) for label in labels], axis=1)  # (Q, K, M)
    _, sums, counts = cluster_sums(stacked, grid.conversations)
    means = ratio(sums.sum(0), counts.sum(0))
    ci = intervals(sums, counts, cfg, metric_axis=-1) if j >= 0 and len(sums) else None
    for k, label in enumerate(labels):
        mask = grid.groups == label
        adv = bool(grid.adversarial[mask].all())
        row = {**grid.where(), "category": label, "adversarial": adv, "n": int(mask.sum()), "threshold": t}
        for m in ("f1", "recall", "precision", "tokens", "abstained", "f1_abstain"):
            row[m] = means[k, M[m]] if j >= 0 else NAN
        for m in ("f1", "recall"):
            row[f"{m}_lo"] = ci.low[k, M[m]] if ci is not None and not adv else NAN
            row[f"{m}_hi"] = ci.high[k, M[m]] if ci is not None and not adv else NAN
        if cfg.per_category and grid.thresholded:
            own = analyse(grid, cfg, mask)[0] if not adv else {"threshold": NAN, p: NAN}
            row["own_threshold"] = own["threshold"]
            row[f"own_{p}"] = own.get(p, NAN)
            row["own_gain"] = cfg.sign * (own.get(p, NAN) - row[p])
        out.append(row)
    return pd.DataFrame(out)


def transfer(grids: list[Grid], points: pd.DataFrame, cfg: RecommendConfig) -> pd.DataFrame:
    """Across datasets: the threshold chosen on one dataset, applied to another (same
    embedder/backend/strategy); ``gap`` = how much worse than the target's own choice (sign-adjusted).
    ``relation``: "another corpus", or "same conversations, other labels" when the two share a conversation id
    (a label release: label robustness, not transfer)."""
    by = {g.key: g for g in grids}
    datasets = list(dict.fromkeys(g.key[0] for g in grids))
    out = []
    p, s = cfg.primary, cfg.sign
    for src in datasets:
        for dst in datasets:
            if src == dst:
                continue
            for g in grids:
                if g.key[0] != src or not g.thresholded:
                    continue
                other = by.get((dst,) + g.key[1:])
                if other is None:
                    continue
                ps = points[(points[CONFIG_KEYS] == pd.Series(dict(zip(CONFIG_KEYS, g.key)))).all(axis=1)].iloc[0]
                pt = points[(points[CONFIG_KEYS] == pd.Series(dict(zip(CONFIG_KEYS, other.key)))).all(axis=1)].iloc[0]
                j = setting_index(other.thresholds, ps["threshold"])  # the source's choice, lined up with the target's grid
                at = NAN
                tok = NAN
                if j >= 0:  # scored on the target
                    _, sums, counts = cluster_sums(other.values[:, :, j], other.conversations)
                    m = ratio(sums.sum(0), counts.sum(0))
                    at, tok = m[M[p]], m[M["tokens"]]
                same = bool(set(g.conversations) & set(other.conversations))
                out.append({"source": src, "target": dst, "relation": "same conversations, other labels" if same else "another corpus",
                            "embedder": g.key[1], "backend": g.key[2], "strategy": g.key[3],
                            "source_threshold": ps["threshold"], f"source_{p}": ps.get(p, NAN),
                            f"target_{p}_at_source_threshold": at, "target_tokens_at_source_threshold": tok,
                            "target_threshold": pt["threshold"], f"target_{p}_own": pt.get(p, NAN),
                            "gap": s * (pt.get(p, NAN) - at)})
    return pd.DataFrame(out)


@dataclass(frozen=True)
class Recommendation:
    cfg: RecommendConfig
    points: pd.DataFrame  # one row per configuration: chosen threshold, metrics, CIs, stability, best flag
    curves: pd.DataFrame  # every configuration x threshold with CIs
    loco: pd.DataFrame  # one row per thresholded configuration
    loco_folds: pd.DataFrame
    categories: pd.DataFrame
    transfer: pd.DataFrame
    shortlist: pd.DataFrame = None  # the first screen's "what to ship" rows (``shortlist``); None: not computed

    def best(self) -> pd.DataFrame:
        return self.points[self.points["best"]]


def best_flags(points: pd.DataFrame, cfg: RecommendConfig, never_best: frozenset = frozenset()) -> pd.Series:
    """True at each dataset's best operating point (``choose`` over the feasible points; configurations of the
    embedders in ``never_best`` never are)."""
    best = pd.Series(False, index=points.index)
    for _, d in points.groupby("dataset", sort=False):
        d = d[~d["embedder"].isin(list(never_best))]
        if d.empty:
            continue
        means = np.full((1, len(METRICS), len(d)), NAN)
        for m in METRICS:
            means[0, M[m]] = d[m].to_numpy(np.float64)
        means[0, :, ~d["feasible"].to_numpy(bool)] = NAN
        i = int(choose(means, cfg)[0])
        if i >= 0:
            best[d.index[i]] = True
    return best


def recommend(rows: pd.DataFrame, cfg: RecommendConfig | None = None, *, source: str = QUESTIONS,
              never_best: frozenset = frozenset(), strategies: list[Mapping] = ()) -> Recommendation:
    """Choose an operating point for every configuration in ``rows`` and the best one per dataset.

    Configurations of the embedders in ``never_best`` (plumbing embedders beside real ones) get their
    operating points like every other but are never the dataset's best. ``strategies`` (the run's strategies.json
    records) name each setting for what it does (``setting``) and say which threshold edges can be widened."""
    from bench.analysis.verdict import setting_name

    cfg = cfg or RecommendConfig.defaults()
    records = {r.get("name"): r for r in strategies}
    grids = build_grids(one_format(rows), source=source)
    points, curves, locos, folds, cats = [], [], [], [], []
    for g in grids:
        record = records.get(g.key[3])
        point, curve = analyse(g, cfg, on=(record or {}).get("threshold_on") or "similarity")
        point["setting"] = setting_name(record, point["threshold"]) if point["feasible"] else setting_name(record)
        curve["setting"] = [setting_name(record, t) for t in curve["threshold"]]
        points.append(point)
        for k, v in reversed(list(g.where().items())):
            curve.insert(0, k, v)
        curves.append(curve)
        if g.thresholded:
            summary, f = loco(g, cfg)
            locos.append(summary)
            folds.append(f)
        cats.append(categories(g, cfg, point))
    pts = pd.DataFrame(points)
    pts["best"] = best_flags(pts, cfg, never_best)
    nonempty = [f for f in folds if len(f)]
    all_curves = pd.concat(curves, ignore_index=True)
    return Recommendation(
        cfg=cfg, points=pts, curves=all_curves,
        loco=pd.DataFrame(locos), loco_folds=pd.concat(nonempty, ignore_index=True) if nonempty else pd.DataFrame(),
        categories=pd.concat(cats, ignore_index=True) if cats else pd.DataFrame(),
        transfer=transfer(grids, pts, cfg), shortlist=shortlist(pts, all_curves, cfg, never_best),
    )


# --------------------------------------------------------------------------- the first screen

SHORTLIST_ROLES = {  # role -> what the row is, in words (``shortlist``; the recommended row: ``RecommendConfig.short``)
    "cheapest_at_target": "fewest tokens with recall ≥ {r}",
    "best_f1": "best F1",
    "closest": "highest recall (none reaches {r})",
}
SHORTLIST_COLUMNS = [
    "dataset", "role", "what", *CONFIG_KEYS[1:], "setting", "threshold", "recall", "recall_lo", "recall_hi", "recall_pred_lo",
    "recall_pred_hi", "tokens", "tokens_lo", "tokens_hi", "tokens_pred_lo", "tokens_pred_hi", "f1", "f1_pred_lo", "f1_pred_hi",
    "latency_p50_ms", "latency_p99_ms", "n_questions", "n_conversations", "target_recall", "reaches_target"]


def _pick(c: pd.DataFrame, by: list[str], ascending: list[bool]) -> pd.Series | None:
    c = c.dropna(subset=[by[0]])
    return None if c.empty else c.sort_values(by, ascending=ascending, kind="stable").iloc[0]


def shortlist(points: pd.DataFrame, curves: pd.DataFrame, cfg: RecommendConfig, never_best: frozenset = frozenset()) -> pd.DataFrame:
    """The first screen's "what to ship" rows, per dataset, among every configuration x threshold (``curves``) of the
    embedders not in ``never_best`` (unless every embedder is):

    - ``recommended``: the dataset's best point under the objective (``points``' ``best`` row), when there is one;
    - ``cheapest_at_target``: the fewest mean injected tokens with recall >= ``cfg.min_recall`` (ties: more recall),
      left out when it is the recommended point;
    - ``best_f1``: the highest F1 with no constraint (ties: fewer tokens), left out when it is a row above;
    - ``closest``: when no setting reaches ``cfg.min_recall``, the highest recall (ties: fewer tokens).

    Each row has its metrics with the CI (``_lo``/``_hi``, the mean of conversations like these) and the prediction
    interval (``_pred_lo``/``_pred_hi``, a new corpus of as many conversations), its configuration's store latency
    (p50, p99 of every query) and ``reaches_target`` (recall >= the target; NaN without a target)."""
    if curves is None or curves.empty or points is None or points.empty:
        return pd.DataFrame(columns=SHORTLIST_COLUMNS)
    target = cfg.min_recall
    lat = points.set_index(CONFIG_KEYS)
    out = []
    for ds, c in curves.groupby("dataset", sort=False):
        pts = points[points["dataset"] == ds]
        if pts["embedder"].isin(list(never_best)).all():
            keep = c
        else:
            keep = c[~c["embedder"].isin(list(never_best))]
        rows: list[tuple[str, pd.Series]] = []
        best = pts[pts["best"]]
        if len(best):
            b = best.iloc[0]
            hit = keep[(keep[CONFIG_KEYS] == b[CONFIG_KEYS]).all(axis=1) & keep["chosen"]]
            if len(hit):
                rows.append(("recommended", hit.iloc[0]))
        if target is not None:
            with np.errstate(invalid="ignore"):
                reach = keep[keep["recall"] >= target - TIE]
            cheap = _pick(reach, ["tokens", "recall"], [True, False])
            if cheap is not None:
                rows.append(("cheapest_at_target", cheap))
            else:
                close = _pick(keep, ["recall", "tokens"], [False, True])
                if close is not None:
                    rows.append(("closest", close))
        f1 = _pick(keep, ["f1", "tokens"], [False, True])
        if f1 is not None:
            rows.append(("best_f1", f1))
        seen: dict = {}
        for role, r in rows:
            what = ("recommended: " + cfg.short()) if role == "recommended" else \
                SHORTLIST_ROLES[role].format(r=f"{target:.2f}" if target is not None else "")
            ident = (*(r[k] for k in CONFIG_KEYS), -1.0 if pd.isna(r["threshold"]) else round(float(r["threshold"]), 9))
            if ident in seen:  # one row, every role it plays
                if what not in out[seen[ident]]["what"]:
                    out[seen[ident]]["what"] += f"; also {what}"
                continue
            seen[ident] = len(out)
            key = tuple(r[k] for k in CONFIG_KEYS)
            p = lat.loc[key] if key in lat.index else None
            row = {"dataset": ds, "role": role, "what": what,
                   **{k: r[k] for k in CONFIG_KEYS}, "setting": r.get("setting", ""), "threshold": r["threshold"]}
            for col in SHORTLIST_COLUMNS:
                if col not in row and col in r.index:
                    row[col] = r[col]
            row["latency_p50_ms"] = p["latency_p50_ms"] if p is not None and "latency_p50_ms" in p.index else NAN
            row["latency_p99_ms"] = p["latency_p99_ms"] if p is not None else NAN
            row["n_conversations"] = p["n_conversations"] if p is not None else NAN
            row["target_recall"] = NAN if target is None else float(target)
            row["reaches_target"] = NAN if target is None else bool(r["recall"] >= target - TIE)
            out.append(row)
    return pd.DataFrame(out, columns=SHORTLIST_COLUMNS)


def neighbours(rec: Recommendation, key: Mapping[str, str]) -> pd.DataFrame:
    """The chosen threshold and ``cfg.neighbours`` thresholds each side, with CIs."""
    c = rec.curves
    c = c[(c[CONFIG_KEYS] == pd.Series({k: key[k] for k in CONFIG_KEYS})).all(axis=1)].reset_index(drop=True)
    hit = np.flatnonzero(c["chosen"].to_numpy())
    if not len(hit):
        return c.iloc[0:0]
    i, n = int(hit[0]), int(rec.cfg.neighbours)
    return c.iloc[max(0, i - n): i + n + 1]
