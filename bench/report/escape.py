"""Text and file names that come from data, made safe where the report renders them.

A category, a dataset directory name, a TREC run tag, a question or a store / embedder / strategy name from a
config is data: it may hold a newline and ``## Recommendation``, a link, an image, a table pipe or ``../``.
``md_text`` turns it into Markdown text that renders as exactly those characters on one line (no heading, link,
image, HTML, table cell or code span of its own); ``md_code`` is the same inside a code span; ``slug`` and
``confined`` make a file name from it that stays inside the run directory. CSV cells: ``bench.output.write_csv``.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

# Markdown punctuation that can start or end inline structure (links, images, emphasis, code, autolinks, HTML,
# entities, table cells). Brackets only where they can make a link or an image: "]" before "(", "[" or ":" (inline,
# reference and definition), "!" before "[" and "[" at the start (a definition): "qa[1]" stays readable; ">" at the
# start (a quote). '_' only where it can open or close emphasis (not between two word characters).
_INLINE = re.compile(r"([\\`*<|&~#$]|^>|!(?=\[)|\](?=[(\[:])|^\[)")
_UNDERSCORE = re.compile(r"(?<!\w)_|_(?!\w)")
_LIST_START = re.compile(r"^(\d{0,9})([-+*.)])(?=\s|$)")  # a list item or a thematic break at a line start
_SETEXT = re.compile(r"^([=-])(?=[=\s-]*$)")  # a setext heading underline
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")  # reorders what is shown around it


def one_line(value) -> str:
    """``value`` as text on one line: control characters (newlines included) and runs of whitespace become one
    space; bidirectional overrides are dropped; leading and trailing space removed."""
    text = _BIDI.sub("", str(value))
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text)
    return " ".join(text.split())


def md_text(value) -> str:
    """``value`` as Markdown that shows exactly its characters, on one line, inside a table cell or a sentence."""
    text = _UNDERSCORE.sub(r"\\_", _INLINE.sub(r"\\\1", one_line(value)))
    return _SETEXT.sub(r"\\\1", _LIST_START.sub(r"\1\\\2", text))


def md_code(value) -> str:
    """``value`` as a Markdown code span; plain escaped text when it holds a backtick or a '|' (a code span cannot
    carry those inside a table)."""
    text = one_line(value)
    if not text or "`" in text or "|" in text:
        return md_text(text)
    return f"`{text}`"


def slug(value, max_len: int = 60) -> str:
    """A file-name part from ``value``: ASCII letters, digits, '.', '_' and '-' (every other run of characters and
    every '..' one '_'), not starting with '.', '_' or '-', at most ``max_len`` characters; never empty."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", unicodedata.normalize("NFKD", str(value)).encode("ascii", "ignore").decode("ascii"))
    text = re.sub(r"_{2,}", "_", re.sub(r"\.{2,}", "_", text)).lstrip("._-")[:max_len].rstrip(".")
    return text or "x"


def confined(root: Path, name: str) -> Path:
    """``root / name``, refused (ValueError naming both) when it resolves outside ``root``."""
    root = Path(root)
    path = root / name
    if not path.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"{path}: a derived file name leaves the run directory {root}")
    return path
