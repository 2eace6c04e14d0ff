"""The one place that instantiates ``_target_`` configs, and config hashing/redaction helpers.

Library code elsewhere takes typed arguments; only the CLI passes config nodes here.
"""

from __future__ import annotations

import hashlib
import json

from omegaconf import DictConfig, OmegaConf

from bench.results import redact


def build(node: DictConfig, **overrides):
    """Instantiate a config node with a ``_target_`` (plus keyword overrides)."""
    from hydra.utils import instantiate

    return instantiate(node, **overrides)


def to_plain(node, *, resolve: bool = True) -> dict:
    return OmegaConf.to_container(node, resolve=resolve) if isinstance(node, DictConfig) else dict(node)


def fingerprint(*parts) -> str:
    """Stable short hash of JSON-able parts (used to key cached traces and resumable jobs)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def redacted_yaml(cfg: DictConfig) -> str:
    """The resolved config with secret-looking values replaced, as YAML."""
    return OmegaConf.to_yaml(OmegaConf.create(redact(OmegaConf.to_container(cfg, resolve=True))))
