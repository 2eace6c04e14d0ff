"""Where the files recallbench ships live: its configs, the demo corpus and the dataset manifests.

In a checkout (or an editable install) they are the repository's top-level ``configs/`` and
``datasets/``; an installed wheel carries the same folders inside the package as ``bench/_configs``
and ``bench/_datasets`` (``pyproject.toml`` maps them there). Nothing else in the package builds
these paths.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _shipped(inside: str, checkout: str) -> Path:
    packaged = PACKAGE_DIR / inside
    return packaged if packaged.is_dir() else PACKAGE_DIR.parent / checkout


def configs_dir() -> Path:
    """The Hydra config tree (``config.yaml`` and one folder per plugin group)."""
    return _shipped("_configs", "configs")


def datasets_dir() -> Path:
    """Our own dataset files: the demo corpus and the manifests of the real corpora (not the data path)."""
    return _shipped("_datasets", "datasets")


def demo_dir() -> Path:
    return datasets_dir() / "demo"


def manifests_dir() -> Path:
    return datasets_dir() / "manifests"


def plugin_names(group: str) -> list[str]:
    """The options of a config group (``backend``, ``embedder``, ``strategy``, ``dataset``): its YAML files' names."""
    return sorted(p.stem for p in (configs_dir() / group).glob("*.yaml"))


def shipped_config(relpath: str) -> dict:
    """A shipped YAML config (``configs/<relpath>``) as plain data, read with PyYAML (no Hydra, nothing resolved).

    Library callers get the shipped defaults of a settings block from here (``RecommendConfig.defaults()``,
    ``GateConfig.defaults()``): the YAML is their only copy."""
    import yaml

    path = configs_dir() / relpath
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping, got {type(data).__name__}")
    return data
