"""The one place that instantiates ``_target_`` configs, and config hashing/redaction helpers.

Library code elsewhere takes typed arguments; only the CLI passes config nodes here.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bench import run
from bench.results import redact

# Resolvers the configs use instead of ``${hydra:...}``, so every config value resolves in a
# multirun's sweep directory, in the Compose API and in a notebook, not only inside a Hydra job.
OmegaConf.register_new_resolver("rb.cwd", os.getcwd, replace=True)  # the directory the command was started from
OmegaConf.register_new_resolver("rb.run_id", run.run_id, replace=True)  # keeps two runs started in one second apart
OmegaConf.register_new_resolver("rb.repo", lambda: str(run.PACKAGE_DIR.parent), replace=True)  # this checkout (the demo corpus)


def build(node: DictConfig, **overrides):
    """Instantiate a config node with a ``_target_`` (plus keyword overrides)."""
    from hydra.utils import instantiate

    return instantiate(node, **overrides)


def to_plain(node, *, resolve: bool = True) -> dict:
    return OmegaConf.to_container(node, resolve=resolve) if isinstance(node, DictConfig) else dict(node)


def plain_partial(fn):
    """An instantiated ``_partial_`` target as a plain ``functools.partial`` of the same target and arguments.

    Hydra's ``_partial_`` result re-validates its target policy on every call (~0.3 ms); a sweep
    calls each strategy ~10^5 times, so the already-instantiated target is called directly.
    """
    import functools

    return functools.partial(fn.func, *fn.args, **fn.keywords) if isinstance(fn, functools.partial) else fn


def build_strategies(strategy_cfg) -> list:
    """StrategySpecs from a ``strategy:`` config node (``configs/strategy/*.yaml``), validated, with plain partials."""
    from bench.sweep import spec_from_config

    return [spec_from_config(to_plain(s), plain_partial(build(s.fn))) for s in strategy_cfg.values()]


def redacted_yaml(cfg: DictConfig) -> str:
    """The resolved config with secret-looking values replaced, as YAML."""
    return OmegaConf.to_yaml(OmegaConf.create(redact(OmegaConf.to_container(cfg, resolve=True))))


CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def backend_names() -> list[str]:
    return sorted(p.stem for p in (CONFIGS / "backend").glob("*.yaml"))


def load_backend(name: str, *, stores_dir, **overrides):
    """Instantiate ``configs/backend/<name>.yaml`` outside Hydra (``${paths.stores}`` = stores_dir)."""
    path = CONFIGS / "backend" / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown store {name!r}: no {path} (known: {', '.join(backend_names())})")
    root = OmegaConf.create({"paths": {"stores": str(stores_dir)}, "backend": OmegaConf.load(path)})
    return build(root.backend, **overrides)
