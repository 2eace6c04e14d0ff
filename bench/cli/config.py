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
from bench.resources import configs_dir, demo_dir, plugin_names
from bench.strategies.spec import load_spec

# Resolvers the configs use instead of ``${hydra:...}``, so every config value resolves in a
# multirun's sweep directory, in the Compose API and in a notebook, not only inside a Hydra job.
OmegaConf.register_new_resolver("rb.cwd", os.getcwd, replace=True)  # the directory the command was started from
OmegaConf.register_new_resolver("rb.run_id", run.run_id, replace=True)  # keeps two runs started in one second apart
OmegaConf.register_new_resolver("rb.demo", lambda: str(demo_dir()), replace=True)  # the demo corpus we ship


def every_strategy() -> dict:
    """Every ``configs/strategy/*.yaml`` as one node (each under the key its ``# @package strategy.<key>`` line names), by file name."""
    out = {}
    for name in plugin_names("strategy"):
        path = configs_dir() / "strategy" / f"{name}.yaml"
        first = path.read_text(encoding="utf-8").partition("\n")[0]
        key = first.removeprefix("# @package strategy.").strip() if first.startswith("# @package strategy.") else name
        out[key] = OmegaConf.to_container(OmegaConf.load(path))
    return out


def _register_every_strategy() -> None:
    """The Hydra option ``strategy_sets/every``: every strategy YAML, read from ``configs/strategy/`` (never a list). An
    experiment lists the strategies whose order its outputs keep, then ``- /strategy_sets@strategy: every``: the listed ones
    keep their places and values, any other strategy YAML follows them by name (a new strategy needs no list edit)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group="strategy_sets", name="every", node=every_strategy())


_register_every_strategy()


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


# --- mistakes caught before any work: booleans, unknown keys, unknown group options ("did you mean") ---------

TRUE_WORDS, FALSE_WORDS = ("true", "yes", "1"), ("false", "no", "0")
# top-level switches of configs/config.yaml: a typo ("flase") must not read as true
FLAGS = ("trace_cache", "progress", "resume", "strict", "publish_latest", "defer_report")


def closest(word: str, choices) -> str | None:
    """The closest of ``choices`` to a misspelt ``word`` (difflib), None when none is close."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, choices) -> str:
    """``"; did you mean X?"`` for the closest of ``choices``, else ""."""
    close = closest(word, choices)
    return f"; did you mean {close}?" if close else ""


def as_bool(name: str, value) -> bool:
    """A switch's value: true/false, yes/no, 1/0 (any case); anything else is one line naming the setting."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if not isinstance(value, float) and word in TRUE_WORDS + FALSE_WORDS:
        return word in TRUE_WORDS
    raise ValueError(f"config {name}: expected true or false (or yes/no, 1/0), got {value!r}"
                     f"{did_you_mean(word, ('true', 'false'))}")


def check_flags(cfg: DictConfig) -> None:
    """Turn the top-level switches into real booleans in ``cfg`` (``strict=yes`` -> true), or raise for a typo."""
    for name in FLAGS:
        if name in cfg:
            cfg[name] = as_bool(name, cfg[name])


def check_params(name: str, node, choice: str | None = None) -> None:
    """Every key of a plain ``_target_`` node must be a parameter of its target (a ``+dataset.pth=...``
    otherwise fails later with a TypeError): one line naming the key, and the closest one."""
    import inspect

    from bench.plugins import locate

    if not isinstance(node, dict) or "_target_" not in node:
        return
    try:
        params = inspect.signature(locate(node["_target_"])).parameters
    except (ImportError, ValueError, TypeError):  # a missing extra is said by the store/embedder itself
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    known = [k for k in params if not k.startswith("_")]
    for key in node:
        if not (key.startswith("_") and key.endswith("_")) and key not in params:
            group = f"{name}={choice}" if choice else node["_target_"]
            close = did_you_mean(key, known).replace("did you mean ", f"did you mean {name}.")
            raise ValueError(f"config {name}.{key}: not a setting of {group}{close} "
                             f"(its settings: {', '.join(known)})")


def check_required(cfg: DictConfig) -> None:
    """A group option's mandatory value (``???``) left unset: one line saying what to add (``dataset=own`` needs a path)."""
    choices = _choices()
    for group in ("dataset", "embedder", "backend"):
        node = cfg.get(group)
        for key in (node.keys() if isinstance(node, DictConfig) else ()):
            if OmegaConf.is_missing(node, key):
                option = f"{group}={choices[group]}" if group in choices else group
                raise ValueError(f"config {group}.{key} is required by {option}: add {group}.{key}=..."
                                 + (" (your data directory: turns.jsonl + questions.jsonl)" if key == "path" else ""))


def check_before_work(cfg: DictConfig) -> None:
    """Every setting, before any work (what would otherwise fail late, or worse, run): a mandatory value left unset,
    the switches, each plugin's keys, every strategy, the threshold grid, the formats, the report's settings."""
    from collections import Counter

    from bench.selection import formats as F
    from bench.analysis.recommend import RecommendConfig
    from bench.strategies.spec import score_bounds, threshold_grid

    check_required(cfg)
    check_flags(cfg)  # strict=flase is an error, not true
    choices = _choices()
    for group in ("dataset", "embedder", "backend"):
        if cfg.get(group) is not None:
            node = {k: v for k, v in to_plain(cfg[group], resolve=False).items() if not (group == "backend" and k == "layout")}  # build_store's
            check_params(group, node, choices.get(group))
    for key, node in (cfg.get("strategy") or {}).items():
        if isinstance(node, DictConfig) and node.get("fn") is not None:
            check_params(f"strategy.{key}.fn", to_plain(node.fn))
    names = Counter(s.name for s in build_strategies(cfg.strategy)) if cfg.get("strategy") is not None else Counter()
    dupes = sorted(n for n, c in names.items() if c > 1)
    if dupes:
        raise ValueError(f"strategy names must be unique within a run: {', '.join(dupes)} used twice (configs/strategy/*.yaml 'name')")
    threshold_grid(cfg.thresholds.start, cfg.thresholds.stop, cfg.thresholds.step, bounds=score_bounds(cfg.get("score")))
    F.check_formats(cfg.get("formats") or ["A"])
    RecommendConfig.from_settings(OmegaConf.to_container(cfg, resolve=True), source="the run's config")


def _choices() -> dict:
    """The group options of the running Hydra job (``dataset: own``); empty outside one."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return dict(HydraConfig.get().runtime.choices)
    except ValueError:  # outside a Hydra job (the Compose API)
        return {}


def _group_choices(argv) -> list[str]:
    """The plain group choices (``dataset=own``) among command-line overrides: what decides which keys exist."""
    out = []
    for arg in argv:
        key, eq, value = str(arg).lstrip("+~").partition("=")
        if eq and "." not in key and (CONFIGS / key).is_dir() and value and not any(c in value for c in ",()[]*"):
            out.append(f"{key}={value}")
    return out


def explain_override_error(exc: BaseException, argv=()) -> str | None:
    """One line for Hydra's refusal of an override, with the closest key or option (None: not such a refusal).

    Hydra's own text suggests ``+dataset.pth=...`` for a misspelt key, which then fails as a TypeError;
    this names the key the user meant (``dataset.path``), or the group option that has it."""
    try:
        return _explain(exc, list(argv))
    except Exception:  # noqa: BLE001  (explaining must never hide the error itself)
        return None


def _explain(exc: BaseException, argv: list) -> str | None:
    import re

    from bench.resources import plugin_names

    text = " ".join(str(e) for e in _chain(exc))
    missing = re.search(r"Could not (?:find|load) '([\w/]+)/([^'/]+)'", text)
    if missing:
        group, value = missing.groups()
        options = plugin_names(group) if (CONFIGS / group).is_dir() else []
        return (f"{group}={value}: no such option{did_you_mean(value, options)}"
                + (f" (options: {', '.join(options)})" if options else ""))
    bad = re.search(r"Could not override '([^']+)'", text) or re.search(r"Key '([^']+)' is not in struct", text)
    if not bad:
        return None
    full = bad.group(1)
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()  # the failed start may have left Hydra initialised
    parent, _, leaf = full.rpartition(".")
    try:
        cfg = compose(_group_choices(a for a in argv if not str(a).lstrip("+~").startswith(full)))
    except Exception:  # noqa: BLE001  (the choices themselves are wrong: the shipped defaults)
        cfg = compose()
    node = OmegaConf.select(cfg, parent) if parent else cfg
    keys = [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []
    choice = _choice(parent, argv)
    where = f"{parent}={choice}" if choice else (parent or "the config")
    close = did_you_mean(leaf, keys)
    line = f"{full}: no such setting in {where}" + (close.replace("did you mean ", f"did you mean {parent}.") if parent else close)
    if close:
        return line
    if keys:
        line += f" (its settings: {', '.join(k for k in keys if not k.startswith('_'))})"
    if parent and (CONFIGS / parent).is_dir():  # a setting of another option of the group (dataset.path without dataset=own)
        others = {k: [o for o in plugin_names(parent) if k in _option_keys(parent, o)]
                  for o in plugin_names(parent) for k in _option_keys(parent, o) if not k.startswith("_")}
        match = leaf if leaf in others else closest(leaf, others)
        if match:
            from bench.output import redact_override

            having = others[match]
            example = "own" if "own" in having else having[0]
            value = next((str(a).partition("=")[2] for a in argv if str(a).lstrip("+~").startswith(f"{full}=")), "...")
            line += (f"; {match} is a setting of {parent}={', '.join(having)}: "
                     f"did you mean {parent}={example} {redact_override(f'{parent}.{match}={value}')}?")  # a key's value is never echoed
    return line


def _choice(group: str, argv) -> str | None:
    """The option of config group ``group`` that this command uses (its override, else the shipped default)."""
    from bench.resources import shipped_config

    if not group or "." in group or not (CONFIGS / group).is_dir():
        return None
    for arg in reversed([str(a).lstrip("+~") for a in argv]):
        if arg.startswith(f"{group}="):
            return arg.partition("=")[2]
    for item in shipped_config("config.yaml").get("defaults") or []:
        if isinstance(item, dict) and group in item and isinstance(item[group], str):
            return item[group]
    return None


def _option_keys(group: str, option: str) -> list[str]:
    from bench.resources import shipped_config

    try:
        return list(shipped_config(f"{group}/{option}.yaml"))
    except Exception:  # noqa: BLE001
        return []


def _chain(exc: BaseException):
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen
