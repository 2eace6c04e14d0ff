"""Thresholds that transfer: does a setting chosen on some data keep its F1 on other data?

Families of cuts (by strategy kind, unfiltered strategies only): ``cosine`` (a raw similarity
threshold, ``threshold``), ``calibrated`` (P(relevant) >= p, ``calibrated_threshold``), ``relative δ``
(``relative_delta``), ``relative α`` (``relative_ratio``) and ``adaptive`` (``largest_gap``; no parameter
of its own: its settings are the adaptive strategies of the run). A family's *setting* is one
(strategy, threshold) of it.

Each family chooses its setting on training data (the one with the highest macro F1 over the training
questions; ties: the first in (strategy, threshold) order) and is scored on held-out data (``bench.analysis.choose``). Three
protocols, which measure different things:

- ``loco``, **stability across conversations of this corpus** (leave one conversation out, per dataset,
  embedder and store): for each conversation, train on the others, score it. ``f1_held_out`` pools the
  held-out questions (question-weighted); the reference ``f1_hindsight`` is, per held-out conversation,
  the best fixed cosine threshold chosen on that conversation itself, pooled the same way;
  ``regret = f1_hindsight - f1_held_out`` (its range over folds: ``regret_min``/``regret_max``).
  ``f1_best_fixed``: one cosine threshold for all conversations, chosen in hindsight on all of them, and
  ``regret_vs_fixed`` against it. Every fold trains on conversations of the same corpus (same
  speakers, question writers, base rate of relevant memories): when every fold picks the same setting
  its held-out F1 is that setting's in-sample F1, so a regret near 0 says the choice is stable across
  these conversations, not that it carries over to another corpus.
- ``embedders`` (per dataset and store, when a run holds two or more embedders): choose on embedder
  A's run (all its questions), apply the same setting to embedder B's run (the questions both
  answered); the reference is B's best fixed cosine threshold in hindsight.
- ``corpora``, **transfer to another corpus** (per embedder and store, when a run holds two or more
  datasets that share no conversation): choose on corpus A's run (all its questions), apply the same
  setting to corpus B's run (all its questions); the reference is B's best fixed cosine threshold in
  hindsight. Two datasets that share conversations (``locomo`` and ``locomo_2025``: the same
  conversations with corrected labels) measure label robustness, not another corpus, and are skipped.

In ``embedders`` and ``corpora`` the calibrated family's p is applied to B's own calibrated scores (an
isotonic map fitted on B's labels), so it still needs labelled data for B; and the same p is a
different similarity cut on a corpus with another base rate of relevant memories (``gold_share``: gold
memories over the memories a question can recall, from the run's full-context strategy). Their
``regret_lo``/``regret_hi`` is a ``confidence`` t interval (``bench.analysis.stats.cluster_t_interval``)
of the mean per-question regret (B's best fixed cosine F1 minus the family's F1, question by question)
with B's conversations as clusters; the reference is chosen on B in hindsight and taken as fixed.

F1 is the rows' per-question F1 over the scored questions (``bench.metrics.scored``), as everywhere.
Pure functions of the per-question rows; nothing here reads a file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench import metrics
from bench.analysis.choose import choose_and_score
from bench.analysis.stats import cluster_sums, cluster_t_interval

NAN = float("nan")
FAMILIES = {"threshold": "cosine", "calibrated_threshold": "calibrated", "relative_delta": "relative δ",
            "relative_ratio": "relative α", "largest_gap": "adaptive"}
REFERENCE = "cosine"
ORDER = list(FAMILIES.values())
PROTOCOLS = {"loco": "stability across conversations of this corpus", "embedders": "transfer to another embedder",
             "corpora": "transfer to another corpus"}
COLUMNS = ["protocol", "dataset", "backend", "source", "embedder", "family", "strategy", "param_min", "param_max", "n_folds",
           "n_conversations", "n_questions", "f1_held_out", "f1_hindsight", "regret", "regret_lo", "regret_hi", "regret_min",
           "regret_max", "f1_best_fixed", "regret_vs_fixed", "f1_in_sample", "gold_per_question", "gold_share",
           "source_gold_share"]


def families(strategies: Sequence[Mapping]) -> dict[str, str]:
    """Strategy name -> family, for the run's strategies (strategies.json records) without a role filter."""
    return {s["name"]: FAMILIES[s["kind"]] for s in strategies if s.get("kind") in FAMILIES and not s.get("roles")}


@dataclass(frozen=True)
class Settings:
    """Per-question F1 of one (dataset, embedder, store) at every setting of the families."""

    question_ids: np.ndarray  # (Q,)
    conversations: np.ndarray  # (Q,)
    strategies: tuple[str, ...]  # (S,) per setting
    thresholds: np.ndarray  # (S,) NaN for a strategy without one
    family: tuple[str, ...]  # (S,)
    f1: np.ndarray  # (Q, S)

    def subset(self, questions: np.ndarray) -> Settings:
        pos = {q: i for i, q in enumerate(self.question_ids)}
        idx = np.array([pos[q] for q in questions], dtype=np.int64)
        return Settings(self.question_ids[idx], self.conversations[idx], self.strategies, self.thresholds, self.family, self.f1[idx])


def settings(rows: pd.DataFrame, fam: Mapping[str, str]) -> dict[tuple[str, str, str], Settings]:
    """(dataset, embedder, backend) -> Settings, from per-question rows (one injection format) and ``fam``."""
    rows = rows[rows["strategy"].isin(list(fam))]
    rows = rows[metrics.scored(rows).to_numpy()] if len(rows) else rows
    out = {}
    for key, g in rows.groupby(["dataset", "embedder", "backend"], sort=False):
        g = g.assign(_t=g["threshold"].fillna(-1.0))
        table = g.pivot_table(index="question_id", columns=["strategy", "_t"], values="f1", aggfunc="first")
        table = table.sort_index(axis=1).dropna(axis=0, how="any")  # a question missing at any setting is left out
        convs = g.drop_duplicates("question_id").set_index("question_id")["conversation_id"].astype(str)
        names = tuple(str(s) for s, _ in table.columns)
        ts = np.array([NAN if t < 0 else float(t) for _, t in table.columns])
        out[tuple(str(k) for k in key)] = Settings(table.index.to_numpy(), convs.reindex(table.index).to_numpy(), names, ts,
                                                   tuple(fam[n] for n in names), table.to_numpy(np.float64))
    return out


def _describe(s: Settings, chosen: Sequence[int]) -> dict:
    ok = [j for j in chosen if j >= 0]
    t = s.thresholds[ok] if ok else np.empty(0)
    return {"strategy": ",".join(dict.fromkeys(s.strategies[j] for j in ok)),
            "param_min": float(np.nanmin(t)) if np.isfinite(t).any() else NAN,
            "param_max": float(np.nanmax(t)) if np.isfinite(t).any() else NAN}


def loco(s: Settings) -> tuple[list[dict], pd.DataFrame]:
    """Leave one conversation out for every family of ``s`` (see the module): (one record per family, folds)."""
    labels, conv = np.unique(s.conversations, return_inverse=True)
    n = np.bincount(conv, minlength=len(labels)).astype(np.float64)  # (C,)
    sums = np.zeros((len(labels), s.f1.shape[1]))
    np.add.at(sums, conv, s.f1)
    total, N = sums.sum(0), n.sum()
    fam = np.array(s.family, dtype=object)
    ref = np.flatnonzero(fam == REFERENCE)
    out, folds = [], []
    if len(labels) < 2 or not len(ref):
        return out, pd.DataFrame()
    held = sums / n[:, None]
    train = (total[None] - sums) / (N - n)[:, None]
    hind = held[:, ref].max(1)  # each held-out conversation's best fixed cosine threshold, in hindsight
    fixed = float(total[ref].max() / N)
    for family in [f for f in ORDER if f in set(s.family)]:
        idx = np.flatnonzero(fam == family)
        local, _, got = choose_and_score(train[:, idx], held[:, idx], sign=metrics.direction("f1"))  # each fold
        chosen = [int(idx[j]) if j >= 0 else -1 for j in local]
        regret = hind - got
        pooled = float(np.nansum(got * n) / n[~np.isnan(got)].sum()) if (~np.isnan(got)).any() else NAN
        hindsight = float((hind * n).sum() / N)
        out.append({"protocol": "loco", "source": "other conversations", "family": family, **_describe(s, chosen),
                    "n_folds": len(labels), "n_conversations": len(labels), "n_questions": int(N), "f1_held_out": pooled, "f1_hindsight": hindsight,
                    "regret": hindsight - pooled, "regret_min": float(np.nanmin(regret)), "regret_max": float(np.nanmax(regret)),
                    "f1_best_fixed": fixed, "regret_vs_fixed": fixed - pooled, "f1_in_sample": float((total[idx] / N).max())})
        folds.append(pd.DataFrame({"family": family, "conversation_id": labels, "n_questions": n.astype(int),
                                   "strategy": [s.strategies[j] if j >= 0 else "" for j in chosen],
                                   "param": [s.thresholds[j] if j >= 0 else NAN for j in chosen],
                                   "f1_held_out": got, "f1_hindsight": hind, "regret": regret}))
    return out, pd.concat(folds, ignore_index=True)


def _key(s: Settings, j: int) -> tuple[str, float | None]:
    return s.strategies[j], None if np.isnan(s.thresholds[j]) else float(s.thresholds[j])


def across(a: Settings, b: Settings, *, protocol: str = "embedders", confidence: float = 0.95) -> list[dict]:
    """Every family's setting chosen on ``a`` applied to ``b``; the reference is ``b``'s best fixed cosine
    threshold in hindsight. ``protocol="embedders"``: two embedders' runs of one dataset, on the questions
    both hold; ``"corpora"``: two corpora, each with all its questions (see the module)."""
    if protocol == "embedders":
        common = np.intersect1d(a.question_ids, b.question_ids)
        if not len(common):
            return []
        a, b = a.subset(common), b.subset(common)
    if not len(a.question_ids) or not len(b.question_ids):
        return []
    where_b = {_key(b, j): j for j in range(len(b.strategies))}
    mean_a, mean_b = a.f1.mean(0), b.f1.mean(0)
    ref = [j for j, f in enumerate(b.family) if f == REFERENCE]
    if not ref:
        return []
    best = ref[int(np.argmax(mean_b[ref]))]
    fixed = float(mean_b[best])
    _, sums, counts = cluster_sums(b.f1[:, best][:, None] - b.f1, b.conversations)  # per-question regret of every setting
    ci = cluster_t_interval(sums, counts, confidence=confidence)
    out = []
    for family in [f for f in ORDER if f in set(a.family)]:
        idx = np.array([j for j, f in enumerate(a.family) if f == family and _key(a, j) in where_b])
        if not len(idx):
            continue
        on_b = np.array([where_b[_key(a, j)] for j in idx])  # b's setting of each of a's
        local, _, got = choose_and_score(mean_a[idx], mean_b[on_b], sign=metrics.direction("f1"))  # chosen on a, scored on b
        j = int(idx[local]) if local >= 0 else -1
        jb = where_b[_key(a, j)]
        got = float(got)
        own = [k for k, f in enumerate(b.family) if f == family]
        out.append({"protocol": protocol, "family": family, **_describe(a, [j]), "n_folds": NAN,
                    "n_conversations": int(ci.n_clusters[jb]), "n_questions": len(b.question_ids),
                    "f1_held_out": got, "f1_hindsight": fixed, "regret": fixed - got, "regret_lo": float(ci.low[jb]),
                    "regret_hi": float(ci.high[jb]), "regret_min": NAN, "regret_max": NAN,
                    "f1_best_fixed": fixed, "regret_vs_fixed": fixed - got, "f1_in_sample": float(mean_b[own].max())})
    return out


def base_rates(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, embedder, backend): scored questions, gold memories per question, memories a question
    can recall (what the run's ``full_context`` strategy selects: every earlier turn) and ``gold_share`` =
    gold over those memories, pooled over the questions: the base rate a P(relevant) map is fitted on
    (empty without a full-context strategy in the rows' ``kind``)."""
    cols = ["dataset", "embedder", "backend", "n_questions", "gold_per_question", "memories_per_question", "gold_share"]
    rows = rows[rows["kind"] == "full_context"] if "kind" in rows else rows.iloc[0:0]
    rows = rows[metrics.scored(rows).to_numpy()] if len(rows) else rows
    out = []
    for key, g in rows.groupby(["dataset", "embedder", "backend"], sort=False):
        g = g.drop_duplicates("question_id")
        gold, mem = float(g["n_gold"].sum()), float(g["n_selected"].sum())
        out.append(dict(zip(cols, (*(str(k) for k in key), len(g), gold / len(g), mem / len(g), gold / mem if mem else NAN))))
    return pd.DataFrame(out, columns=cols)


def transfer(rows: pd.DataFrame, fam: Mapping[str, str], confidence: float = 0.95) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the regret table: one row per protocol x configuration x family, COLUMNS; the LOCO folds)."""
    tables = settings(rows, fam)
    rates = base_rates(rows).set_index(["dataset", "embedder", "backend"])
    share = lambda *key: float(rates.loc[key, "gold_share"]) if key in rates.index else NAN  # noqa: E731
    per_q = lambda *key: float(rates.loc[key, "gold_per_question"]) if key in rates.index else NAN  # noqa: E731
    convs = {k: set(s.conversations) for k, s in tables.items()}
    out, folds = [], []
    for (ds, emb, be), s in tables.items():
        recs, f = loco(s)
        out += [{**r, "dataset": ds, "backend": be, "embedder": emb} for r in recs]
        if len(f):
            folds.append(f.assign(dataset=ds, embedder=emb, backend=be))
    for (ds, ea, be), a in tables.items():
        for (ds2, eb, be2), b in tables.items():
            if (ds2, be2) == (ds, be) and eb != ea:
                out += [{**r, "dataset": ds, "backend": be, "source": ea, "embedder": eb}
                        for r in across(a, b, confidence=confidence)]
            elif (eb, be2) == (ea, be) and ds2 != ds and not convs[(ds, ea, be)] & convs[(ds2, eb, be2)]:
                out += [{**r, "dataset": ds2, "backend": be, "source": ds, "embedder": eb, "source_gold_share": share(ds, ea, be)}
                        for r in across(a, b, protocol="corpora", confidence=confidence)]
    out = [{**r, "gold_share": share(r["dataset"], r["embedder"], r["backend"]),
            "gold_per_question": per_q(r["dataset"], r["embedder"], r["backend"])} for r in out]
    folds = pd.concat(folds, ignore_index=True) if folds else pd.DataFrame()
    if len(folds):
        folds = folds[["dataset", "embedder", "backend", *[c for c in folds.columns if c not in ("dataset", "embedder", "backend")]]]
    return pd.DataFrame(out, columns=COLUMNS), folds
