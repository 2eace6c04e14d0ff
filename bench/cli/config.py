"""Config helpers of the CLI: OmegaConf resolvers, plain (resolved) config nodes, redacted YAML, plugins by name.

Objects are built from resolved plain mappings by ``bench.plugins``; library code elsewhere takes
typed arguments and never sees a config node.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf

from bench import run
from bench.output import redact
from bench.plugins import instantiate
from bench.resources import configs_dir, demo_dir
from bench.strategies.spec import load_spec

# Resolvers the configs use instead of ``${hydra:...}``, so every config value resolves in a
# multirun's sweep directory, in the Compose API and in a notebook, not only inside a Hydra job.
OmegaConf.register_new_resolver("rb.cwd", os.getcwd, replace=True)  # the directory the command was started from
OmegaConf.register_new_resolver("rb.run_id", run.run_id, replace=True)  # keeps two runs started in one second apart
OmegaConf.register_new_resolver("rb.demo", lambda: str(demo_dir()), replace=True)  # the demo corpus we ship


def build(node, **overrides):
    """Build a config node with a ``_target_`` (plus keyword overrides): resolved here, built by ``bench.plugins``."""
    return instantiate(to_plain(node), **overrides)


def to_plain(node, *, resolve: bool = True) -> dict:
    """A config node as a plain dict (resolved; a missing mandatory ``???`` value is an error naming its key)."""
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=resolve, throw_on_missing=resolve)
    return dict(node)


def strategy_nodes(strategy_cfg) -> list[dict]:
    """The plain, resolved config of each strategy of a ``strategy:`` node (what ``load_spec`` builds, and
    what a job keeps in strategies.json so that readers rebuild its strategies without Hydra)."""
    return [to_plain(s) for s in strategy_cfg.values()]


def build_strategies(strategy_cfg) -> list:
    """StrategySpecs from a ``strategy:`` config node (``configs/strategy/*.yaml``), validated."""
    return [load_spec(n) for n in strategy_nodes(strategy_cfg)]


def redacted_yaml(cfg: DictConfig) -> str:
    """The resolved config with secret-looking values replaced, as YAML."""
    return OmegaConf.to_yaml(OmegaConf.create(redact(OmegaConf.to_container(cfg, resolve=True))))


CONFIGS = configs_dir()


def compose(overrides=()) -> DictConfig:
    """The config of ``python -m bench [overrides]`` from Hydra's Compose API, outside a Hydra run
    (for tools that run a job in-process; ``paths.root`` defaults to the current directory)."""
    from hydra import compose as _compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return _compose("config", overrides=list(overrides))


def run_dir_override(path) -> str:
    """The command-line override that makes a single run write into ``path``."""
    return f"hydra.run.dir={path}"


def sweep_dir_override(path) -> str:
    """The command-line override that makes a multirun write its ``job<N>/`` into ``path``."""
    return f"hydra.sweep.dir={path}"
