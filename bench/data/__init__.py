"""Corpus loading: kind detection, dispatch by kind name, and small helpers shared by the loaders.

Owns ``load_corpus`` / ``detect_kind`` and the input helpers every loader uses (missing-path error,
JSON reading with file/line errors, defect values, text checks). A UTF-8 byte-order mark at the start
of a file is accepted and ignored; strings holding unpaired surrogates (JSON ``"\ud800"`` escapes,
which cannot be encoded as UTF-8) are errors naming file, record and field. The loaders themselves live in
``locomo.py``, ``longmemeval.py`` and ``own.py``; importing this package imports none of them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bench.types import Corpus

KINDS = ("locomo", "longmemeval", "own")
_ALIASES = {"locomo_2025": "locomo", "longmemeval_oracle": "longmemeval", "longmemeval_s": "longmemeval"}


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
    """Load a corpus by kind name ("locomo", "locomo_2025", "longmemeval", "longmemeval_oracle", "longmemeval_s",
    "own", or "auto" to detect it); extra keywords go to the loader."""
    require_path(path)
    base = detect_kind(path) if kind == "auto" else _ALIASES.get(kind, kind)
    if kind in _ALIASES:
        kw.setdefault("name", kind)
    if base == "locomo":
        from bench.data.locomo import load_locomo

        return load_locomo(path=path, **kw)
    if base == "longmemeval":
        from bench.data.longmemeval import load_longmemeval

        return load_longmemeval(path=path, **kw)
    if base == "own":
        from bench.data.own import load_own

        return load_own(path=path, **kw)
    raise ValueError(f"unknown corpus kind {kind!r}; expected one of {', '.join(KINDS + tuple(_ALIASES))} or 'auto'")
