"""What a strategy is: its function's contract, what it returns (``Selection``) and its spec (``StrategySpec``).

Every strategy has the signature
``fn(hits, *, question, eligible, threshold, **params) -> Sequence[Hit] | Selection``:
``hits`` are the store's candidates for one question, best first (similarity, higher is better);
``question`` is the Question; ``eligible`` are the Turns the question may see, in conversation
order (for baselines that ignore the store, and for text/time based policies); ``threshold`` is
the swept similarity threshold (None for strategies without one, which still accept it). No I/O,
no randomness, no mutation: the same inputs give the same subset.

A strategy that has more to report than the hits returns a ``Selection`` (hits + the route a router
took, the tier of each hit, the state a stateful policy hands to the next question). Extra
inputs are supplied by the sweep only when the strategy asks for them: ``tokens`` (memory key ->
injected tokens, ``needs_tokens``), ``state`` (``stateful``; see ``bench.strategies.tiers``) and
``calibrated`` (``calibrated``: per hit, in the hits' order, the out-of-fold calibrated probability that
the hit is relevant, ``bench.selection.relevance``; derived from the trace and the labels before the sweep).

What a strategy is and reads is declared next to its function with ``@strategy(family=..., ...)`` (its family,
one of ``FAMILIES``, whose rule its inputs must keep; ``Inputs``:
``thresholded``, ``uses_store``, ``stateful``, ``needs_tokens``, ``calibrated``, and ``threshold_on``: what
the swept threshold is compared with, ``similarity`` unless said otherwise); its YAML in
``configs/strategy/`` gives only its name, its role filter, its parameters and, for a strategy whose
threshold is not a similarity, its own threshold grid (``thresholds: {start, stop, step}``; default:
the run's ``thresholds``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from bench.types import ROLES, Hit

log = logging.getLogger(__name__)


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
class Inputs:
    """What a strategy function reads beyond ``hits``, ``question`` and ``eligible``."""

    thresholded: bool  # the sweep calls it once per swept threshold (else once, with threshold=None)
    uses_store: bool = True  # False: a baseline that ignores the trace (full context, recency, keyword, BM25)
    stateful: bool = False  # replayed in time order; fn takes ``state=`` and returns a Selection with the next state
    needs_tokens: bool = False  # fn takes ``tokens=`` (memory key -> injected tokens, format A)
    calibrated: bool = False  # fn takes ``calibrated=`` (per hit: out-of-fold P(relevant), bench.selection.relevance)
    threshold_on: str = "similarity"  # what the threshold is compared with (THRESHOLD_ON)


INPUT_FIELDS = ("thresholded", "uses_store", "stateful", "needs_tokens", "calibrated")
# what a swept threshold can mean; only a ``similarity`` threshold may be drawn on a similarity axis
THRESHOLD_ON = {"similarity": "similarity threshold", "probability": "calibrated P(relevant) >= p",
                "delta": "delta below the best score", "ratio": "alpha x the best score"}


@dataclass(frozen=True)
class Family:
    """A family of strategies: what its members do, and what every member's ``Inputs`` must say (None: either)."""

    what: str
    uses_store: bool | None = None
    thresholded: bool | None = None
    stateful: bool | None = None

    def breaks(self, inputs: Inputs) -> list[str]:
        """The fields of ``inputs`` that contradict this family (empty when it is a member)."""
        return [f"{f}={getattr(inputs, f)}" for f in ("uses_store", "thresholded", "stateful")
                if getattr(self, f) is not None and getattr(inputs, f) != getattr(self, f)]


# what a strategy declares it is (``@strategy(family=...)``): the contract test checks every configs/strategy/*.yaml against it
FAMILIES = {
    "top_k": Family("a count or token budget of the store's best hits, nothing swept (limit, token budget, routing, RRF)",
                    uses_store=True, thresholded=False, stateful=False),
    "cut": Family("the store's hits past a swept threshold (similarity, hybrid, calibrated, relative)",
                  uses_store=True, thresholded=True, stateful=False),
    "adaptive": Family("a cut each question chooses from the shape of its own scores, nothing swept (largest gap)",
                       uses_store=True, thresholded=False, stateful=False),
    "baseline": Family("ignores the store (full context, recency, keyword, BM25)", uses_store=False, thresholded=False),
    "tiered": Family("memory tiers replayed in time order, state handed from question to question (dual tier)", stateful=True),
}


def strategy(*, family: str, thresholded: bool, uses_store: bool = True, stateful: bool = False, needs_tokens: bool = False,
             calibrated: bool = False, threshold_on: str = "similarity"):
    """Declare a strategy function's family (``FAMILIES``) and inputs next to it: ``@strategy(family="cut", thresholded=True)``
    sets ``fn.family`` and ``fn.inputs``; inputs its family rules out are an error naming the function."""
    if threshold_on not in THRESHOLD_ON:
        raise ValueError(f"strategy: threshold_on must be one of {sorted(THRESHOLD_ON)} (got {threshold_on!r})")
    if family not in FAMILIES:
        raise ValueError(f"strategy: family must be one of {', '.join(FAMILIES)} (got {family!r})")
    declared = Inputs(thresholded, uses_store, stateful, needs_tokens, calibrated, threshold_on)
    broken = FAMILIES[family].breaks(declared)

    def declare(fn: Callable) -> Callable:
        if broken:
            raise ValueError(f"strategy {getattr(fn, '__qualname__', fn)}: family {family!r} rules out {', '.join(broken)}")
        fn.inputs, fn.family = declared, family
        return fn

    return declare


def base_function(fn: Callable) -> Callable:
    """The function under its ``functools.partial`` layers (the configured parameters)."""
    while hasattr(fn, "func"):
        fn = fn.func
    return fn


def inputs_of(fn: Callable) -> Inputs | None:
    """The ``Inputs`` declared on a strategy function (through ``functools.partial``), None when undeclared."""
    found = getattr(base_function(fn), "inputs", None)
    return found if isinstance(found, Inputs) else None


@dataclass(frozen=True)
class StrategySpec:
    name: str
    fn: Callable[..., tuple[Hit, ...] | Selection]
    thresholded: bool
    uses_store: bool = True  # False: a baseline that ignores the trace (full context, recency, keyword, BM25)
    roles: tuple[str, ...] | None = None  # role filter pushed down to the store (its own trace)
    stateful: bool = False  # replayed in time order; fn takes ``state=`` and returns a Selection with the next state
    needs_tokens: bool = False  # fn takes ``tokens=`` (memory key -> injected tokens, format A)
    calibrated: bool = False  # fn takes ``calibrated=`` (per hit: out-of-fold P(relevant), bench.selection.relevance)
    thresholds: tuple[float, ...] | None = None  # its own threshold grid (YAML ``thresholds``); None: the run's

    @property
    def threshold_on(self) -> str:
        """What its threshold is compared with (``similarity``, ``probability``, ``delta``, ``ratio``)."""
        inputs = inputs_of(self.fn)
        return inputs.threshold_on if inputs is not None else "similarity"

    @property
    def family(self) -> str:
        """What its function declares it is (``FAMILIES``: ``top_k``, ``cut``, ``adaptive``, ``baseline``, ``tiered``)."""
        return base_function(self.fn).family

    @property
    def kind(self) -> str:
        """What the strategy is, whatever it is called: its function's name (``limit``, ``full_context``, ...)."""
        return base_function(self.fn).__name__

    @property
    def params(self) -> dict:
        """The keyword parameters bound to its function (``{"k": 5}``)."""
        return dict(getattr(self.fn, "keywords", {}) or {})


CONFIG_FIELDS = ("name", "fn", "roles", "thresholds")  # a strategy config: name, function with parameters, role filter, own grid


def threshold_grid(start: float | str, stop: float | str, step: float | str, *, bounds: tuple[int, int] = (0, 1)) -> tuple[float, ...]:
    """Inclusive grid of exact decimals, e.g. (0.10, 0.90, 0.05) -> 17 values, within ``bounds`` ([0, 1] for a similarity;
    ``score_bounds`` for a store's own score, bench.selection.basis)."""
    a, b, s = Decimal(str(start)), Decimal(str(stop)), Decimal(str(step))
    if s <= 0 or a > b:
        raise ValueError(f"threshold grid: need start <= stop and step > 0 (got {start}, {stop}, {step})")
    out, x = [], a
    while x <= b:
        if not Decimal(bounds[0]) <= x <= Decimal(bounds[1]):
            raise ValueError(f"threshold {x} outside [{bounds[0]}, {bounds[1]}]")
        out.append(float(x))
        x += s
    return tuple(out)


def score_bounds(score: str | None) -> tuple[int, int]:
    """The range a swept threshold may take: [0, 1] on the similarity; [-4, 4] on a store's own score or 1 - it
    (a squared L2 distance of unit vectors reaches 4, a negative inner product is below 0: bench.backends.scores)."""
    return (0, 1) if (score or "similarity") == "similarity" else (-4, 4)


def _own_grid(name: str, node: Mapping, thresholded: bool) -> tuple[float, ...] | None:
    grid = node.get("thresholds")
    if grid is None:
        return None
    if not thresholded:
        raise ValueError(f"strategy {name}: field 'thresholds' is set but its function sweeps no threshold")
    if not isinstance(grid, Mapping) or set(grid) != {"start", "stop", "step"}:
        raise ValueError(f"strategy {name}: field 'thresholds' must be a mapping with start, stop and step (got {grid!r})")
    try:
        return threshold_grid(grid["start"], grid["stop"], grid["step"])
    except (ArithmeticError, ValueError) as e:
        raise ValueError(f"strategy {name}: field 'thresholds': {e}") from None


_INTS = ("int", "int | None")  # annotations (strings: ``from __future__ import annotations``) of count parameters


def check_params(name: str, fn: Callable) -> None:
    """The parameters bound to a strategy function (its YAML's ``fn`` keys) exist and counts are integers >= 0:
    ``strategy.limit.fn.k=abc`` or ``k=-1`` is one line before any work, not a failure in the middle of the sweep."""
    import difflib
    import inspect

    base = base_function(fn)
    try:
        params = inspect.signature(base).parameters
    except (TypeError, ValueError):
        return
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for key, value in (getattr(fn, "keywords", {}) or {}).items():
        p = params.get(key)
        if p is None:
            if open_ended:
                continue
            close = difflib.get_close_matches(key, list(params), n=1, cutoff=0.6)
            raise ValueError(f"strategy {name}: {base.__name__} has no parameter {key!r}"
                             + (f"; did you mean {close[0]}?" if close else ""))
        ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", str(p.annotation))
        if ann in _INTS and not (value is None and "None" in ann) and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"strategy {name}: {key} must be an integer >= 0 (got {value!r})")


def spec_from_config(node: Mapping, fn: Callable) -> StrategySpec:
    """A StrategySpec from one plain strategy config mapping (``configs/strategy/*.yaml``) and its built ``fn``;
    what it reads (``Inputs``) comes from the function's ``@strategy`` declaration. A config may still name
    an input field (older run configs did), but only with the function's own value."""
    name = node.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"strategy config {dict(node)!r}: field 'name' must be a non-empty string")
    unknown = sorted(set(node) - set(CONFIG_FIELDS) - set(INPUT_FIELDS))
    if unknown:
        raise ValueError(f"strategy {name}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(CONFIG_FIELDS)})")
    base = base_function(fn)
    where = f"{getattr(base, '__module__', '?')}.{getattr(base, '__qualname__', repr(base))}"
    inputs = inputs_of(fn)
    if inputs is None:
        raise ValueError(f"strategy {name}: function {where} declares no inputs "
                         "(decorate it with @bench.strategies.spec.strategy(thresholded=...))")
    for field in INPUT_FIELDS:
        if field in node and (not isinstance(node[field], bool) or node[field] != getattr(inputs, field)):
            raise ValueError(f"strategy {name}: field {field!r} is {node[field]!r} but its function {where} declares "
                             f"{getattr(inputs, field)!r}; remove the field (the function's declaration decides)")
    check_params(name, fn)
    roles = node.get("roles")
    if roles is not None and (not roles or not set(roles) <= set(ROLES)):
        raise ValueError(f"strategy {name}: field 'roles' must be a non-empty list of {ROLES} or null, got {roles!r}")
    return StrategySpec(name=name, fn=fn, thresholded=inputs.thresholded, uses_store=inputs.uses_store,
                        roles=tuple(roles) if roles else None, stateful=inputs.stateful, needs_tokens=inputs.needs_tokens,
                        calibrated=inputs.calibrated, thresholds=_own_grid(name, node, inputs.thresholded))


def load_spec(node: Mapping) -> StrategySpec:
    """A StrategySpec from one plain, resolved strategy config (its ``fn`` built by ``bench.plugins``)."""
    from bench.plugins import instantiate

    fn = node.get("fn") if isinstance(node, Mapping) else None
    if not isinstance(fn, Mapping) or "_target_" not in fn:
        raise ValueError(f"strategy {node.get('name') if isinstance(node, Mapping) else node!r}: field 'fn' must be a mapping with a _target_")
    return spec_from_config(node, instantiate(fn))


def load_specs(records: Sequence[Mapping], where: object = "strategies.json") -> list[StrategySpec]:
    """StrategySpecs rebuilt from a run's strategies.json records (``bench.results.rundir.strategy_record``: their plain
    configs, no Hydra), for replaying its selections. One that no longer builds (its code changed since the run) is
    skipped with a warning naming ``where``."""
    out = []
    for s in records:
        try:
            out.append(load_spec(s["config"]))
        except Exception as e:  # noqa: BLE001  (one strategy we cannot rebuild must not hide the others)
            log.warning("%s: cannot rebuild strategy %s (%s: %s); skipped", where, s.get("name"), type(e).__name__, e)
    return out
