"""A store's own score: its metric (``metric: cosine | l2 | ip`` in every store YAML), what number it returns for it,
and how that number becomes the similarity every strategy reads. The one place these conversions are written.

Vectors are L2-normalised, so with c = cos(q, v) = q . v every native score is a function of c:

=================  ============================  ==============  ==================  ===========================
native kind        the store returns             best            similarity s        stores (metric)
=================  ============================  ==============  ==================  ===========================
``cosine``         c                             higher          x                   exact, qdrant, pinecone (cosine)
``dot``            q . v (= c)                   higher          x                   exact, qdrant (ip)
``cosine_distance`` 1 - c, in [0, 2]             lower           1 - x               chroma, seekdb, sqlite-vec, lancedb, pgvector (cosine)
``l2``             ||q - v|| = sqrt(2 - 2c)      lower           1 - x^2 / 2         seekdb, sqlite-vec, pgvector, qdrant (l2)
``l2_squared``     ||q - v||^2 = 2 - 2c          lower           1 - x / 2           chroma, lancedb, exact (l2)
``one_minus_dot``  1 - q . v                     lower           1 - x               chroma, lancedb (ip)
``negative_dot``   -(q . v)                      lower           -x                  pgvector (ip, ``<#>``)
=================  ============================  ==============  ==================  ===========================

A store declares which metrics it offers and the native kind of each in ``Capabilities.scores`` (metric -> kind);
asking for another is one line naming the store and what it offers (``check_metric``). The trace keeps both numbers
per hit: ``hit_scores`` (the similarity) and ``native_scores`` (what the store returned), and its meta the metric and
the conversion (``describe``).

The sweep thresholds one score basis (``score:`` in the run config), mapped once before any strategy runs
(``bench.selection.basis``):

* ``similarity`` (default): the cosine similarity, as always;
* ``native``: the store's own number; for a distance (lower is better) a threshold t keeps hits with distance <= t;
* ``one_minus_distance``: 1 - the store's distance, what many applications threshold (``1 - distance`` on chroma's
  default ``l2`` space is 1 - (2 - 2c) = 2c - 1: a threshold 0.3 there is cosine 0.65). Only for distance kinds.

``cosine_at(kind, basis, t)`` is the cosine a threshold t on a basis stands for, so a report can say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

METRICS = ("cosine", "l2", "ip")
BASES = ("similarity", "native", "one_minus_distance")


@dataclass(frozen=True)
class Kind:
    name: str
    formula: str  # what the store returns, in terms of c = cos(q, v) of L2-normalised vectors
    lower_is_better: bool
    to_similarity: str  # s in terms of the native value x (text, for meta and reports)


KINDS = {k.name: k for k in (
    Kind("cosine", "c", False, "x"),
    Kind("dot", "q.v = c", False, "x"),
    Kind("cosine_distance", "1 - c", True, "1 - x"),
    Kind("l2", "sqrt(2 - 2c)", True, "1 - x^2/2"),
    Kind("l2_squared", "2 - 2c", True, "1 - x/2"),
    Kind("one_minus_dot", "1 - q.v", True, "1 - x"),
    Kind("negative_dot", "-(q.v)", True, "-x"),
)}


def kind(name: str) -> Kind:
    if name not in KINDS:
        raise ValueError(f"unknown native score kind {name!r} (known: {', '.join(KINDS)})")
    return KINDS[name]


def similarity(kind_name: str, x: float) -> float:
    """The cosine similarity of a native value ``x`` of kind ``kind_name`` (the table of the module docstring)."""
    x = float(x)
    if kind_name in ("cosine", "dot"):
        return x
    if kind_name in ("cosine_distance", "one_minus_dot"):
        return 1.0 - x
    if kind_name == "l2":
        return 1.0 - x * x / 2.0
    if kind_name == "l2_squared":
        return 1.0 - x / 2.0
    if kind_name == "negative_dot":
        return -x
    raise ValueError(f"unknown native score kind {kind_name!r} (known: {', '.join(KINDS)})")


def native_of(kind_name: str, c: np.ndarray) -> np.ndarray:
    """The native value of kind ``kind_name`` for cosines ``c`` (what a store returns for them; the exact store's numbers)."""
    c = np.asarray(c, dtype=np.float64)
    return {"cosine": lambda: c, "dot": lambda: c, "cosine_distance": lambda: 1.0 - c,
            "l2": lambda: np.sqrt(np.maximum(2.0 - 2.0 * c, 0.0)), "l2_squared": lambda: 2.0 - 2.0 * c,
            "one_minus_dot": lambda: 1.0 - c, "negative_dot": lambda: -c}[kind(kind_name).name]()


def check_metric(store: str, metric: str, scores) -> str:
    """``metric`` when the store offers it (``scores``: its ``Capabilities.scores``, metric -> native kind), else one line."""
    offered = dict(scores)
    if metric not in offered:
        if metric not in METRICS:
            raise ValueError(f"{store}: metric must be one of {', '.join(METRICS)} (got {metric!r})")
        raise ValueError(f"{store}: metric {metric!r} is not offered by this store (it offers {', '.join(offered)}); "
                         f"set backend.metric to one of those")
    return metric


def check_basis(basis: str, kind_name: str | None, store: str = "the store") -> str:
    """``basis`` when it applies to a trace whose native kind is ``kind_name`` (None: no native scores), else one line."""
    if basis not in BASES:
        raise ValueError(f"score must be one of {', '.join(BASES)} (got {basis!r})")
    if basis != "similarity" and kind_name is None:
        raise ValueError(f"score={basis}: {store} recorded no native scores in its trace; use score=similarity")
    if basis == "one_minus_distance" and not kind(kind_name).lower_is_better:
        raise ValueError(f"score=one_minus_distance: {store} returns a similarity ({kind_name}), not a distance; "
                         "use score=native or score=similarity")
    return basis


def basis_values(basis: str, kind_name: str, native: np.ndarray) -> np.ndarray:
    """The number a threshold is compared with under ``basis``: the native value, or 1 - it (``one_minus_distance``)."""
    native = np.asarray(native, dtype=np.float64)
    return 1.0 - native if basis == "one_minus_distance" else native


def basis_lower_is_better(basis: str, kind_name: str | None) -> bool:
    return basis == "native" and kind(kind_name).lower_is_better


def cosine_at(kind_name: str | None, basis: str, t: float) -> float:
    """The cosine similarity a threshold ``t`` on ``basis`` stands for (NaN where it is not a threshold on a value)."""
    if basis == "similarity":
        return float(t)
    if t is None or (isinstance(t, float) and math.isnan(t)):
        return float("nan")
    x = 1.0 - float(t) if basis == "one_minus_distance" else float(t)
    if kind_name == "l2" and x < 0:
        return float("nan")
    return similarity(kind_name, x)


def describe(store: str, metric: str, kind_name: str | None) -> dict:
    """What the trace meta records of a store's score: its metric, native kind, formula and conversion."""
    if kind_name is None:
        return {"metric": metric, "native": None}
    k = kind(kind_name)
    return {"metric": metric, "native": k.name, "native_is": k.formula + " (c = cosine of L2-normalised vectors)",
            "lower_is_better": k.lower_is_better, "similarity": f"s = {k.to_similarity}", "store": store}
