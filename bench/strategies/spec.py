"""What a strategy is: its function's contract, what it returns (``Selection``) and its spec (``StrategySpec``).

Every strategy has the signature
``fn(hits, *, question, eligible, threshold, **params) -> Sequence[Hit] | Selection``:
``hits`` are the store's candidates for one question, best first (similarity, higher is better);
``question`` is the Question; ``eligible`` are the Turns the question may see, in conversation
order (for baselines that ignore the store, and for text/time based policies); ``threshold`` is
the swept similarity threshold (None for strategies without one, which still accept it). No I/O,
no randomness, no mutation: the same inputs give the same subset.

A strategy that has more to report than the hits returns a ``Selection`` (hits + the route a router
took, the tier of each hit, the state a stateful policy hands to the next question). Two extra
inputs are supplied by the sweep only when the strategy's spec asks for them: ``tokens`` (memory
key -> injected tokens, ``needs_tokens``) and ``state`` (``stateful``; see ``bench.strategies.tiers``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.types import ROLES, Hit


@dataclass(frozen=True)
class Selection:
    """What a strategy selected, plus what the sweep reports beside it."""

    hits: Sequence[Hit]  # a tuple, or a store's columnar Hits (a prefix of them)
    route: str = ""  # the route a router took ("" for strategies without routes)
    tiers: tuple[str, ...] = ()  # per hit, e.g. "L1"/"L2"; () for strategies without tiers
    state: Any = None  # stateful policies: the state after this question, fed to the next one

    def __iter__(self):  # iterates like the plain tuple of hits other strategies return
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)


@dataclass(frozen=True)
class StrategySpec:
    name: str
    fn: Callable[..., tuple[Hit, ...] | Selection]
    thresholded: bool
    uses_store: bool = True  # False: a baseline that ignores the trace (full context, recency, keyword, BM25)
    roles: tuple[str, ...] | None = None  # role filter pushed down to the store (its own trace)
    stateful: bool = False  # replayed in time order; fn takes ``state=`` and returns a Selection with the next state
    needs_tokens: bool = False  # fn takes ``tokens=`` (memory key -> injected tokens, format A)

    @property
    def kind(self) -> str:
        """What the strategy is, whatever it is called: its function's name (``limit``, ``full_context``, ...)."""
        return getattr(self.fn, "func", self.fn).__name__

    @property
    def params(self) -> dict:
        """The keyword parameters bound to its function (``{"k": 5}``)."""
        return dict(getattr(self.fn, "keywords", {}) or {})


SPEC_FIELDS = ("name", "fn", "thresholded", "uses_store", "roles", "stateful", "needs_tokens")


def spec_from_config(node: Mapping, fn: Callable) -> StrategySpec:
    """A StrategySpec from one plain strategy config mapping (``configs/strategy/*.yaml``) and its built ``fn``."""
    name = node.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"strategy config {dict(node)!r}: field 'name' must be a non-empty string")
    unknown = sorted(set(node) - set(SPEC_FIELDS))
    if unknown:
        raise ValueError(f"strategy {name}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(SPEC_FIELDS)})")
    if "thresholded" not in node:
        raise ValueError(f"strategy {name}: field 'thresholded' is required")
    for field in ("thresholded", "uses_store", "stateful", "needs_tokens"):
        if field in node and not isinstance(node[field], bool):
            raise ValueError(f"strategy {name}: field {field!r} must be true or false, got {node[field]!r}")
    roles = node.get("roles")
    if roles is not None and (not roles or not set(roles) <= set(ROLES)):
        raise ValueError(f"strategy {name}: field 'roles' must be a non-empty list of {ROLES} or null, got {roles!r}")
    return StrategySpec(name=name, fn=fn, thresholded=node["thresholded"], uses_store=node.get("uses_store", True),
                        roles=tuple(roles) if roles else None, stateful=node.get("stateful", False),
                        needs_tokens=node.get("needs_tokens", False))


def load_spec(node: Mapping) -> StrategySpec:
    """A StrategySpec from one plain, resolved strategy config (its ``fn`` built by ``bench.plugins``)."""
    from bench.plugins import instantiate

    fn = node.get("fn") if isinstance(node, Mapping) else None
    if not isinstance(fn, Mapping) or "_target_" not in fn:
        raise ValueError(f"strategy {node.get('name') if isinstance(node, Mapping) else node!r}: field 'fn' must be a mapping with a _target_")
    return spec_from_config(node, instantiate(fn))
