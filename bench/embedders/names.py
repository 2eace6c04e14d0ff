"""An embedder's short name for tables and figures: ``MiniLM`` for ``all-MiniLM-L6-v2-int8-onnx/max256-meanpool-l2``.

A name is shortened by what it contains (``KNOWN``), else cut before its first ``/``; ``shorten`` gives a run's
embedders short names that stay distinct. The report's legend (``bench.report.names``) maps them back to the full
identities. Pure: no state between calls; whoever renders passes the ``shorten`` mapping along.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

KNOWN = ((r"minilm", "MiniLM"), (r"multilingual-e5-small|e5[-_]small", "e5-small"), (r"e5[-_]base", "e5-base"),
         (r"e5[-_]large", "e5-large"), (r"bge-m3", "bge-m3"), (r"text-embedding-3-small", "openai-3-small"),
         (r"text-embedding-3-large", "openai-3-large"), (r"qwen3", "Qwen3"), (r"^hashing", "hashing"), (r"^synthetic", "synthetic"))
MAX_LEN = 18


def shorten(embedders: Iterable) -> dict[str, str]:
    """Short names for a run's embedders (full name -> short name), distinct: two that shorten alike (two hashing
    dimensions) keep the last part of the name where they differ (``hashing 128``, ``hashing 256``), else their full names."""
    full = [str(e) for e in dict.fromkeys(embedders)]
    base = {f: _short(f) for f in full}
    out = {}
    for f in full:
        same = [g for g in full if base[g] == base[f]]
        tails = {g.rsplit("/", 1)[-1] for g in same}
        out[f] = base[f] if len(same) == 1 else (f"{base[f]} {f.rsplit('/', 1)[-1]}" if len(tails) == len(same) else f)
    return out


def short_name(name, short: Mapping[str, str] | None = None) -> str:
    """``name``'s entry in ``short`` (a ``shorten`` mapping of the run's embedders); a name it does not hold: what it
    contains (``KNOWN``), else its part before the first ``/``, at most ``MAX_LEN`` characters (cut with ``…``)."""
    return (short or {}).get(str(name)) or _short(name)


def _short(name) -> str:
    text = str(name)
    for pattern, short in KNOWN:
        if re.search(pattern, text, flags=re.I):
            return short
    head = text.split("/", 1)[0] or text
    return head if len(head) <= MAX_LEN else head[: MAX_LEN - 1] + "…"
