"""Plugins: the one place that turns a plain config mapping into an object.

A plugin (dataset loader, embedder, store, strategy) is one module plus one YAML under
``configs/<group>/``; the YAML's ``_target_`` names the callable and its other keys are keyword
arguments (``_partial_: true`` gives a ``functools.partial`` instead of a call). Hydra composes
and resolves the configs at the edge (``bench.cli``); everything after that, and every reader of a
finished run's ``config_resolved.yaml``, builds objects here from plain resolved mappings.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping

from bench.resources import plugin_names

__all__ = ["instantiate", "locate", "plugin_names"]


def locate(target: str):
    """The object a dotted path names (``bench.backends.exact.ExactBackend``)."""
    if not isinstance(target, str) or not target:
        raise ValueError(f"_target_ must be a dotted path, got {target!r}")
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ModuleNotFoundError as e:
            if e.name is not None and not ".".join(parts[:n]).startswith(e.name):
                raise  # the module exists but one of ITS imports is missing: say that, not "no such target"
            continue
        try:
            for attr in parts[n:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    raise ValueError(f"_target_ {target!r}: no such module or attribute")


def instantiate(node: Mapping, **overrides):
    """Call (or, with ``_partial_: true``, partially apply) ``node['_target_']`` with the node's other keys."""
    params = {**node, **overrides}
    if "_target_" not in params:
        raise ValueError(f"config {dict(node)!r} has no _target_")
    fn = locate(params.pop("_target_"))
    partial = bool(params.pop("_partial_", False))
    params = {k: v for k, v in params.items() if not (k.startswith("_") and k.endswith("_"))}
    return functools.partial(fn, **params) if partial else fn(**params)
