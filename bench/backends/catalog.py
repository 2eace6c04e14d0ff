"""The stores recallbench knows (one YAML each under ``configs/backend/``) and what each one is.

A store is ``embedded`` (in this process or a child it spawns: exact, sqlite_vec, seekdb, chroma,
lancedb, qdrant), a ``local server`` that ``bench.backends.servers`` can start on 127.0.0.1 (seekdb_server,
chroma_server, pgvector), or ``cloud`` (pinecone: network and a key, never started; tools skip it and say why).
The kind is read from the store itself, its ``Capabilities`` as its YAML builds it, never from a
list in a tool, so a new YAML is picked up by the contract test, ``make compare``, ``make load``
and ``make bench`` with no other edit.

``runnable_stores()`` is the list a tool runs by default (embedded + local servers); with
``bench.backends.servers.started_servers(stores, workdir)`` it is all a tool needs to run every
store here (``make harden`` too). ``load_backend`` builds a store from its YAML without Hydra: ``${paths.stores}`` is the only
interpolation a backend YAML may use (anything else is an error naming the file and key).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

from bench.backends.base import CLOUD, EMBEDDED, LOCAL_SERVER, Capabilities
from bench.backends.layout import build_store
from bench.resources import configs_dir, plugin_names

__all__ = ["CLOUD", "EMBEDDED", "LOCAL_SERVER", "backend_config", "capabilities", "load_backend", "runnable_stores",
           "skip_reason", "split_runnable", "store_names"]

STORES_VAR = "${paths.stores}"
CLOUD_SKIP = ("a cloud store (network and an API key); not timed here: its loopback protocol double "
              "(bench/tools/harden/doubles.py) says nothing about the store's latency")


def backend_config(name: str) -> dict:
    """The raw mapping of ``configs/backend/<name>.yaml``."""
    path = configs_dir() / "backend" / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown store {name!r}: no {path} (known: {', '.join(plugin_names('backend'))})")
    node = yaml.safe_load(path.read_text())
    if not isinstance(node, dict) or "_target_" not in node:
        raise ValueError(f"{path}: a backend config is a mapping with a _target_")
    return node


def _resolve(value, stores_dir: str, where: str):
    if isinstance(value, str):
        out = value.replace(STORES_VAR, stores_dir)
        if "${" in out:
            raise ValueError(f"{where}: {value!r}: a backend YAML may only interpolate {STORES_VAR}")
        return out
    if isinstance(value, dict):
        return {k: _resolve(v, stores_dir, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, stores_dir, where) for v in value]
    return value


def load_backend(name: str, *, stores_dir, **overrides):
    """``configs/backend/<name>.yaml`` built with ``${paths.stores}`` = ``stores_dir`` and keyword overrides."""
    node = _resolve(backend_config(name), str(stores_dir), f"configs/backend/{name}.yaml")
    return build_store(node, **overrides)


def capabilities(name: str) -> Capabilities:
    """What the store of ``configs/backend/<name>.yaml`` declares (its constructor touches no disk and no network)."""
    return load_backend(name, stores_dir=Path(tempfile.gettempdir()) / "recallbench-unused").capabilities


def store_names(*kinds: str) -> list[str]:
    """Every configured store whose kind is one of ``kinds`` (every store when none is given), by name."""
    return [n for n in plugin_names("backend") if not kinds or capabilities(n).kind in kinds]


def runnable_stores() -> list[str]:
    """The stores the tools run here: embedded ones and the local servers they can start (not cloud ones)."""
    return store_names(EMBEDDED, LOCAL_SERVER)


def skip_reason(name: str) -> str | None:
    """Why the tools do not run ``name`` here (None when they do)."""
    return f"{name}: {CLOUD_SKIP}" if capabilities(name).kind == CLOUD else None


def split_runnable(names=None) -> tuple[list[str], list[str]]:
    """(the stores of ``names`` that run here, one line per other store saying why it is skipped).
    ``names`` None: every configured store."""
    names = store_names() if names is None else list(names)
    reasons = {n: skip_reason(n) for n in names}
    return [n for n in names if reasons[n] is None], [r for r in reasons.values() if r]
