"""Writing results: atomic file writes (honouring the umask), redaction and scrubbing of secrets, and text that
comes from data made safe where it is written (CSV cells, Markdown text and code spans, file names).

Raw data is written once; derived tables can be rebuilt from it. Every write goes to a temp file
in the same directory and is renamed into place, so a crash never leaves a half-written file.
``error_line`` turns an exception into the one line a user sees (config-instantiation wrappers
unwrapped, whitespace collapsed, secret values from the environment scrubbed).
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import tempfile
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import Path

# Names of settings / environment variables that hold secrets. "token" only as a whole word part
# (HF_TOKEN, access_token), not "tokens" / "needs_tokens" / "max_tokens" (token counts, not secrets).
SECRET_KEY = re.compile(r"(api[_-]?key|secret|password|passwd|authorization|(?<![a-z])token(?![a-z]))", re.I)
REDACTED = "***REDACTED***"


def file_mode(base: int = 0o666) -> int:
    """``base`` with the process umask applied: the mode ``open()`` would give a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def named_os_error(e: OSError, what: str) -> OSError:
    """The same OS error, its message naming what failed (np.savez and friends do not say which file)."""
    return OSError(e.errno, f"{e.strerror}: {what}") if e.errno is not None else OSError(f"{e}: {what}")


def write_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp_path)`` then rename tmp onto ``path`` (mode honours the umask). Cleans up on failure."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise named_os_error(e, f"cannot write in {path.parent}") from None
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, file_mode())  # mkstemp makes 0600
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise named_os_error(e, f"writing {path}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path



def write_npz(path: Path, arrays: Mapping) -> Path:
    """``arrays`` (name -> numpy array) as an .npz that ``np.load(path, allow_pickle=False)`` reads, written atomically."""
    import numpy as np

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: given a path, np.savez would add ".npz" to the temporary name
            np.savez(f, **arrays)

    return write_atomic(path, save)

# --- secrets: one rule for everything that leaves the process ----------------------------------------
#
# Text leaves this process through files (results, meta.json, manifests, configs, multirun.yaml, caches,
# LLM answers), logs, the console and exception text. All of it goes through ``scrub`` (strings) or
# ``redact`` (a JSON-like tree; ``redact_override`` for a command-line override): the only rule, here.
# It replaces
#   1. every form (``forms``) of every known secret: values of secret-named environment variables, of
#      variables a ``*_env`` setting names, and values handed on the command line or found in a URL;
#      raw, escaped, URL-encoded, base64 (standard and URL-safe, padded or not, at any byte offset),
#      hex and reversed, matched regardless of case;
#   2. the value of every query-string parameter whose name looks like a credential (``is_credential_name``);
#   3. a URL's user:password.
# Cache keys and identities do not store secrets either: ``hash_secrets`` applies the same rule with a
# digest in place of REDACTED, so that a different key is still another key.

MIN_SECRET_LEN = 8  # shorter values are not scrubbed (they would match everywhere)
MAX_ERROR_CHARS = 600
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
KEY_PREFIXES = ("pcsk_", "sk_", "sk-", "or-", "rk_", "pk_", "ghp_", "gho_", "github_pat_", "glpat-", "hf_", "xox", "AKIA", "AIza")
USERINFO = re.compile(r"(?<=://)([^/@\s]+)@")  # scheme://user:password@host

# Query-string parameters that carry credentials: a name SECRET_KEY matches, or one of whose parts (split at
# '-', '_' and '.', any case) is one of these words: api_key, apikey, key, subscription-key, token,
# access_token, X-Amz-Security-Token, sig, signature, secret, client_secret, password, code (Azure
# Functions), auth, credential, session, jwt, sas ... (``api-version``, ``deployment`` are kept).
CREDENTIAL_WORDS = frozenset({"key", "apikey", "token", "accesstoken", "authtoken", "secret", "password", "passwd", "pwd",
                              "pass", "sig", "signature", "auth", "authorization", "code", "credential", "credentials",
                              "session", "sessionid", "jwt", "bearer", "sas"})
QUERY_PARAM = re.compile(r"(?P<sep>[?&;]|%3F|%26)(?P<name>[A-Za-z0-9_.\-]+)(?P<eq>=|%3D)"
                         r"(?P<value>(?:(?!%26|%23)[^&#\s\"'<>,;\\\])}])*)", re.I)

# Secrets this process was handed outside secret-named environment variables: values typed on the
# command line, and the names of variables that ``*_env`` settings point at (their values are secrets
# whatever the variable is called). Filled by the CLI before anything runs.
_HANDED: set[str] = set()
_ENV_NAMES: set[str] = set()


def is_credential_name(name: str) -> bool:
    """A query-string parameter (or setting) name whose value is a credential (``CREDENTIAL_WORDS``)."""
    low = str(name).lower()
    return bool(SECRET_KEY.search(low)) or any(part in CREDENTIAL_WORDS for part in re.split(r"[-_.]", low))


def key_shaped(value: str) -> bool:
    """A value that looks like a key, not a name: a known key prefix; 16+ hex characters with a digit; a run of
    16+ letters and digits (between '_') holding both; 20+ characters mixing lower case, upper case and digits."""
    if value.startswith(KEY_PREFIXES):
        return True
    if len(value) >= 16 and re.fullmatch(r"[0-9A-Fa-f]+", value) and re.search(r"[0-9]", value):
        return True
    if any(len(p) >= 16 and re.search(r"[0-9]", p) and re.search(r"[A-Za-z]", p) for p in value.split("_")):
        return True
    return len(value) >= 20 and all(re.search(c, value) for c in (r"[a-z]", r"[A-Z]", r"[0-9]"))


def is_env_name(value) -> bool:
    """An environment variable's name (``^[A-Za-z_][A-Za-z0-9_]*$``) that does not look like a key (``key_shaped``)."""
    return isinstance(value, str) and bool(ENV_NAME_RE.match(value)) and not key_shaped(value)


def check_env_name(setting: str, value) -> None:
    """``*_env`` settings hold the NAME of an environment variable; anything else (a key typed in the
    wrong place) is rejected without echoing it."""
    if value is None:
        return
    if not is_env_name(value):
        if isinstance(value, str):
            register_secret(value)
        raise ValueError(f"{setting} must name an environment variable (letters, digits and '_', not starting with a digit, "
                         f"not shaped like a key); the value given is not shown (put the key in the environment instead)")


def register_secret(value: str) -> None:
    """Scrub ``value`` from everything this process writes (each comma-separated part too: a multirun list)."""
    if isinstance(value, str):
        _HANDED.update(v for v in (value, *value.split(",")) if len(v.strip()) >= MIN_SECRET_LEN)


def register_secret_env(name: str) -> None:
    """The value of environment variable ``name`` is a secret (a ``*_env`` setting names it)."""
    if is_env_name(name):
        _ENV_NAMES.add(name)


def register_url_secrets(text: str) -> None:
    """Register the credentials found in URLs inside ``text``: user:password and credential query parameters."""
    if not isinstance(text, str):
        return
    for m in re.finditer(r"://([^/@\s]+)@", text):
        register_secret(m.group(1))
        register_secret(m.group(1).split(":", 1)[-1])
    for m in QUERY_PARAM.finditer(text):
        if is_credential_name(m.group("name")):
            value = m.group("value")
            register_secret(value)
            register_secret(_unquote(value))


def _unquote(value: str) -> str:
    import urllib.parse

    return urllib.parse.unquote_plus(value)


def _override_leaf(key: str) -> str:
    return key.lstrip("+~").rsplit(".", 1)[-1]


def secret_override(arg: str) -> None:
    """Register the secrets in one command-line override ``key=value``: the value of a secret-looking
    key, a value typed into a ``*_env`` setting that is not a variable name, a URL's credentials."""
    key, sep, value = arg.partition("=")
    if not sep:
        register_url_secrets(arg)
        return
    value = value.strip("'\"")
    leaf = _override_leaf(key)
    if leaf.endswith("_env"):
        for v in value.split(","):
            (register_secret_env if is_env_name(v) else register_secret)(v)
    elif SECRET_KEY.search(leaf):
        register_secret(value)
    register_url_secrets(value)


def _base64_forms(data: bytes) -> set[str]:
    """base64 (standard and URL-safe) of ``data`` alone (padded and not) and the characters that encode it
    whatever precedes it (at each of the three byte offsets, first and last partial groups dropped)."""
    import base64

    out = set()
    for enc in (base64.b64encode, base64.urlsafe_b64encode):
        whole = enc(data).decode("ascii")
        out |= {whole, whole.rstrip("=")}
        for o in range(3):
            s = enc(b"\0" * o + data).decode("ascii")
            out.add(s[4 if o else 0 : 4 * ((o + len(data)) // 3)])
    return out


def forms(value: str) -> set[str]:
    """The ways a secret can show up in text: raw, repr/JSON escapes, URL-encoded, whitespace-collapsed, each
    line, each of these reversed, hex of its bytes, base64 (``_base64_forms``). Matching ignores case (upper-case
    and lower-case echoes, upper-case hex)."""
    import json
    import urllib.parse

    out = {value, value.strip(), repr(value)[1:-1], json.dumps(value)[1:-1], value.encode("unicode_escape").decode("ascii"),
           urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value), " ".join(value.split())}
    out.update(line for line in value.splitlines())
    out |= {f[::-1] for f in out}
    for v in {value, value.strip()}:
        data = v.encode("utf-8")
        out.add(data.hex())
        out |= _base64_forms(data)
    return {f for f in out if len(f.strip()) >= MIN_SECRET_LEN}


def _known_secrets(environ=None) -> frozenset[str]:
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items() if SECRET_KEY.search(k) and not k.upper().endswith("_ENV")}
    if environ is None:
        vals |= {env[n] for n in _ENV_NAMES if n in env} | _HANDED
    return frozenset(v for v in vals if isinstance(v, str) and len(v.strip()) >= MIN_SECRET_LEN)


def secret_values(environ=None) -> list[str]:
    """Every form of every known secret, longest first: values of environment variables whose NAME looks
    secret (API_KEY, TOKEN, PASSWORD, ...) or that a ``*_env`` setting names, and values handed on the
    command line or found in a URL's credentials."""
    out: set[str] = set()
    for v in _known_secrets(environ):
        out |= forms(v)
    return sorted(out, key=len, reverse=True)


@functools.lru_cache(maxsize=32)
def _pattern(values: frozenset[str]) -> re.Pattern | None:
    found: set[str] = set()
    for v in values:
        found |= forms(v)
    if not found:
        return None
    return re.compile("|".join(re.escape(f) for f in sorted(found, key=len, reverse=True)), re.I)


def secret_digest(value: str) -> str:
    """What stands for a secret in a cache key or identity: a short sha256 (another key, another digest)."""
    return "sha256:" + hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]


def _redacted(_: str) -> str:
    return REDACTED


def scrub(text: str, secrets=None, *, replace: Callable[[str], str] | None = None) -> str:
    """``text`` with every form of every secret (default: the known ones; else the values in ``secrets``), every
    credential query parameter's value and every URL user:password replaced by ``replace(secret)`` (REDACTED)."""
    if not isinstance(text, str) or not text:
        return text
    rep = replace or _redacted
    pat = _pattern(_known_secrets() if secrets is None else frozenset(s for s in secrets if len(str(s).strip()) >= MIN_SECRET_LEN))
    if pat is not None:
        text = pat.sub(lambda m: rep(m.group(0)), text)

    text = _credential_params(text, rep)
    if "://" in text:
        text = USERINFO.sub(lambda m: m.group(0) if m.group(1) == REDACTED or m.group(1).startswith("sha256:") else rep(m.group(1)) + "@", text)
    return text


def _credential_params(text: str, rep: Callable[[str], str]) -> str:
    def param(m: re.Match) -> str:
        value = m.group("value")
        if not value or not is_credential_name(m.group("name")) or value in (REDACTED, rep(value)) or value.startswith("sha256:"):
            return m.group(0)
        return f"{m.group('sep')}{m.group('name')}{m.group('eq')}{rep(value)}"

    return QUERY_PARAM.sub(param, text)


def redact_query(query: str) -> str:
    """A URL's query string with the values of credential parameters redacted, the rest kept
    (``api-version=2&api_key=K`` -> ``api-version=2&api_key=***REDACTED***``): an endpoint's identity, which a key
    does not decide (a saved config, redacted, gives the same)."""
    return _credential_params("?" + query, _redacted)[1:] if query else query


OVERRIDE_LISTS = ("overrides", "task")  # lists of command-line overrides (meta.json, Hydra's hydra.overrides.task)


def redact(obj, key: str = "", *, replace: Callable[[str], str] | None = None):
    """Replace string values under secret-looking keys (``*_env`` names of variables are kept, a key typed into
    one is not; numbers and booleans are never secrets), redact lists of overrides (``redact_override``) and
    scrub every other string."""
    rep = replace or _redacted
    if isinstance(obj, dict):
        return {k: redact(v, str(k), replace=replace) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if key in OVERRIDE_LISTS:
            return [redact_override(v, replace=replace) if isinstance(v, str) else redact(v, key, replace=replace) for v in obj]
        return [redact(v, key, replace=replace) for v in obj]
    if isinstance(obj, str) and obj:
        if key.endswith("_env"):
            return obj if is_env_name(obj) else rep(obj)
        if SECRET_KEY.search(key):
            return rep(obj)
        return scrub(obj, replace=replace)
    return obj


def hash_secrets(obj):
    """``redact`` with each secret replaced by its ``secret_digest``: for cache keys and identities."""
    return redact(obj, replace=secret_digest)


def redact_override(arg: str, *, replace: Callable[[str], str] | None = None) -> str:
    """A command-line override as it may be written down: secret-looking keys' values redacted, the rest scrubbed."""
    key, sep, value = arg.partition("=")
    leaf = _override_leaf(key)
    value = value.strip("'\"")
    if sep and leaf.endswith("_env"):
        if not all(is_env_name(v) for v in value.split(",")):
            return f"{key}={(replace or _redacted)(value)}"
    elif sep and SECRET_KEY.search(leaf):
        return f"{key}={(replace or _redacted)(value)}"
    return scrub(arg, replace=replace)


def error_line(exc: BaseException) -> str:
    """One line for the user: ``Type: message`` of the root cause behind config-instantiation wrappers.

    Hydra wraps errors raised while building a ``_target_`` in ``InstantiationException`` with a
    multi-line message; the original (``__cause__``) is what names the file, record and field.
    Secrets are scrubbed (before and after whitespace is collapsed), THEN the line is capped at MAX_ERROR_CHARS.
    """
    while type(exc).__name__ == "InstantiationException" and exc.__cause__ is not None:
        exc = exc.__cause__
    return cap(scrub(" ".join(scrub(f"{type(exc).__name__}: {exc}").split())), MAX_ERROR_CHARS)


def cap(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (with '...'); cut only text that was scrubbed already."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- the console and the logs ---------------------------------------------------------------------

class ScrubbedStream(io.TextIOBase):
    """A text stream that scrubs secrets from everything written through it (stdout, stderr)."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(scrub(s))
        return len(s)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    def __getattr__(self, name):
        return getattr(self._inner, name)


def install_scrubbing(argv) -> None:
    """Register the secrets on the command line, then scrub every log record and console write."""
    import logging
    import sys

    for arg in argv or ():
        secret_override(str(arg))
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        try:
            record.msg, record.args = scrub(record.getMessage()), None
        except Exception:  # noqa: BLE001  (a bad format string: keep the record as it is)
            pass
        return record

    if not getattr(previous, "_rb_scrubs", False):
        factory._rb_scrubs = True
        logging.setLogRecordFactory(factory)
    if not isinstance(sys.stdout, ScrubbedStream):
        sys.stdout = ScrubbedStream(sys.stdout)
    if not isinstance(sys.stderr, ScrubbedStream):
        sys.stderr = ScrubbedStream(sys.stderr)
    logging.raiseExceptions = False  # a full disk must not print logging's own tracebacks


# --- CSV tables: cells a spreadsheet would run as a formula ---------------------------------------------------------
# A text cell starting with '=', '+', '-', '@', a tab or a carriage return is a formula to Excel, LibreOffice and
# Google Sheets (CSV injection). ``write_csv`` prefixes such a cell with "'" (OWASP's rule: spreadsheets then show it
# as text); a text cell that already starts with "'" gets one more, so ``read_csv`` gets every value back by removing
# one leading "'". Only text cells: numbers (negative ones too) are written as numbers, and a text cell that is a
# plain number ("-0.5") is left alone. Parquet files are data, not spreadsheets: written raw.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
CSV_QUOTE = "'"
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value):
    """One cell as ``write_csv`` writes it (see FORMULA_START)."""
    if isinstance(value, str) and value.startswith((*FORMULA_START, CSV_QUOTE)) and not _PLAIN_NUMBER.fullmatch(value):
        return CSV_QUOTE + value
    return value


def _text_column(col) -> bool:
    import pandas as pd

    return pd.api.types.is_object_dtype(col) or pd.api.types.is_string_dtype(col) or isinstance(col.dtype, pd.CategoricalDtype)


def csv_safe(df):
    """A copy of ``df`` whose text cells (object, string and categorical columns) are neutralised with ``csv_cell``."""
    out = df.copy()
    for c in out.columns:
        if _text_column(out[c]):
            out[c] = out[c].map(csv_cell, na_action="ignore")
    return out


def _unquote(value):
    return value[1:] if isinstance(value, str) and value.startswith(CSV_QUOTE) else value


def csv_restore(df):
    """``df`` read from a ``write_csv`` file with its text cells as they were (one leading "'" removed)."""
    for c in df.columns:
        if _text_column(df[c]):
            df[c] = df[c].map(_unquote, na_action="ignore")
    return df


def write_csv(path: Path, df, **kwargs) -> Path:
    """``df`` as CSV at ``path`` (atomically, no index), formula-leading text cells neutralised (``csv_cell``)."""
    return write_atomic(path, lambda p: csv_safe(df).to_csv(p, index=False, **kwargs))


def read_csv(path: Path, **kwargs):
    """A ``write_csv`` table back as it was written (``pandas.read_csv`` options in ``kwargs``)."""
    import pandas as pd

    return csv_restore(pd.read_csv(path, **kwargs))


# --------------------------------------------------------------------------- Markdown text and file names from data
# A category, a dataset directory name, a TREC run tag, a question or a store / embedder / strategy name from a
# config is data: it may hold a newline and ``## Recommendation``, a link, an image, a table pipe or ``../``.
# ``md_text`` turns it into Markdown text that renders as exactly those characters on one line (no heading, link,
# image, HTML, table cell or code span of its own); ``md_code`` is the same inside a code span; ``slug`` and
# ``confined`` make a file name from it that stays inside the run directory. CSV cells: ``write_csv`` above.

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
