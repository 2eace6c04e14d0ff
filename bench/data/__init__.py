"""Corpus loading: kind detection, dispatch by kind name, and small helpers shared by the loaders.

Owns ``load_corpus`` / ``detect_kind`` and the input helpers every loader uses (missing-path error,
JSON reading with file/line errors, defect values, text checks). A UTF-8 byte-order mark at the start
of a file is accepted and ignored; strings holding unpaired surrogates (JSON ``"\ud800"`` escapes,
which cannot be encoded as UTF-8) are errors naming file, record and field. The loaders themselves live in
``locomo.py``, ``longmemeval.py`` and ``own.py``; importing this package imports none of them.

The corpus kinds are read from ``configs/dataset/*.yaml`` (``kinds``), never listed here: every dataset YAML
that loads one ``path`` is a kind of that name (its ``_target_`` loader with the YAML's plain settings:
``locomo_2025`` is LoCoMo named ``locomo_2025``), and each loader module is a kind too (``longmemeval``: the
loader with its defaults, what ``detect_kind`` answers). A new dataset kind is one loader + one YAML.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.types import Corpus


@dataclass(frozen=True)
class Kind:
    """A corpus kind: the loader (dotted path) and the settings it is called with besides ``path``."""

    target: str
    settings: Mapping[str, Any]


def _plain(value: Any) -> bool:
    """A YAML value a kind can keep: no ``${...}`` interpolation, no ``???``."""
    if isinstance(value, str):
        return "${" not in value and value != "???"
    if isinstance(value, Mapping):
        return all(_plain(v) for v in value.values())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return True


@functools.cache
def kinds() -> dict[str, Kind]:
    """Kind name -> Kind, from every ``configs/dataset/*.yaml`` that has a ``path`` (by name), then one per loader module
    (``locomo``, ``longmemeval``, ``own``: the loader with its defaults) unless a YAML has that name already."""
    import yaml

    from bench.resources import configs_dir, plugin_names

    out: dict[str, Kind] = {}
    for name in plugin_names("dataset"):
        node = yaml.safe_load((configs_dir() / "dataset" / f"{name}.yaml").read_text())
        if isinstance(node, dict) and "path" in node and "_target_" in node:
            out[name] = Kind(node["_target_"], {k: v for k, v in node.items() if k not in ("_target_", "path") and _plain(v)})
    for kind in list(out.values()):
        out.setdefault(kind.target.rsplit(".", 2)[-2], Kind(kind.target, {}))
    return dict(sorted(out.items()))


def require_path(path: str | os.PathLike) -> Path:
    """Return ``path`` as a Path, or raise a one-line FileNotFoundError naming it and who sets it."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(
            f"dataset path not found: {p} (the data directory is set by env BENCH_DATA_DIR / config "
            f"paths.datasets; override one dataset with dataset.path=...)"
        )
    return p


def short(value: Any, limit: int = 120) -> str:
    """repr of a raw value for a Defect, truncated."""
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 3] + "..."


BOM = b"\xef\xbb\xbf"


def read_text(path: Path) -> str:
    """Read a UTF-8 file (a leading BOM is dropped); bad bytes raise ValueError naming file, line and byte offset."""
    data = path.read_bytes()
    skip = len(BOM) if data.startswith(BOM) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as e:
        start = e.start + skip
        line = data[:start].count(b"\n") + 1
        bad = data[start:start + 1]
        raise ValueError(f"{path}:{line}: not valid UTF-8 (byte offset {start}: {bad!r})") from None


def unicode_problem(text: str) -> str | None:
    """None when ``text`` is valid Unicode (encodable as UTF-8), else a short description of the first problem."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"holds an unpaired surrogate \\u{ord(text[e.start]):04x} at character {e.start} (not valid Unicode)"
    return None


def read_json(path: Path) -> Any:
    """Parse a whole JSON file; errors name the file, line and column."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: malformed JSON (column {e.colno}): {e.msg}") from None


def detect_kind(path: str | os.PathLike) -> str:
    """Guess the corpus kind of ``path``: "locomo", "longmemeval" or "own". ValueError when unsure."""
    p = require_path(path)
    if p.is_dir():
        if (p / "turns.jsonl").exists() or (p / "turns.csv").exists():
            return "own"
        files = sorted(p.glob("*.json"))
        first = read_json(files[0]) if files else None
        if isinstance(first, dict) and _looks_like_longmemeval(first):  # one instance per file
            return "longmemeval"
        raise ValueError(f"{p}: cannot detect the corpus kind (no turns.jsonl/turns.csv, no per-question "
                         f"LongMemEval JSON files); pass the kind explicitly")
    if p.suffix.lower() == ".json":
        data = read_json(p)
        if isinstance(data, list) and data and isinstance(data[0], dict) and "sample_id" in data[0]:
            return "locomo"
        if _looks_like_longmemeval(data):
            return "longmemeval"
    raise ValueError(f"{p}: cannot detect the corpus kind (expected a LoCoMo .json list with 'sample_id', "
                     f"LongMemEval JSON with 'haystack_sessions', or an own-format directory); "
                     f"pass the kind explicitly")


def _looks_like_longmemeval(data: Any) -> bool:
    first = data[0] if isinstance(data, list) and data else data
    return isinstance(first, dict) and "haystack_sessions" in first


def load_corpus(kind: str, path: str | os.PathLike, **kw: Any) -> Corpus:
    """Load a corpus by kind name (one of ``kinds()``: ``locomo``, ``locomo_2025``, ``longmemeval_oracle``, ``own``, ...,
    or "auto" to detect it); extra keywords go to the loader, over the kind's own settings."""
    require_path(path)
    found = kinds().get(detect_kind(path) if kind == "auto" else kind)
    if found is None:
        raise ValueError(f"unknown corpus kind {kind!r}; expected one of {', '.join(kinds())} or 'auto'")
    module, fn = found.target.rsplit(".", 1)
    return getattr(importlib.import_module(module), fn)(path=path, **{**found.settings, **kw})
