"""Writing results: atomic file writes (honouring the umask), redaction and scrubbing of secrets.

Raw data is written once; derived tables can be rebuilt from it. Every write goes to a temp file
in the same directory and is renamed into place, so a crash never leaves a half-written file.
``error_line`` turns an exception into the one line a user sees (config-instantiation wrappers
unwrapped, whitespace collapsed, secret values from the environment scrubbed).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
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


def redact(obj, key: str = ""):
    """Replace string values under secret-looking keys (``*_env`` names of variables are kept; numbers
    and booleans are never secrets) and scrub every other string (secret values, URL user:password)."""
    if isinstance(obj, dict):
        return {k: redact(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v, key) for v in obj]
    if isinstance(obj, str) and obj:
        if SECRET_KEY.search(key) and not key.endswith("_env"):
            return REDACTED
        return scrub(obj)
    return obj


MIN_SECRET_LEN = 8  # shorter values are not scrubbed (they would match everywhere)
MAX_ERROR_CHARS = 600
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
KEY_PREFIXES = ("pcsk_", "sk_", "sk-", "or-", "rk_", "pk_", "ghp_", "gho_", "github_pat_", "glpat-", "hf_", "xox", "AKIA", "AIza")
USERINFO = re.compile(r"(?<=://)[^/@\s]+@")  # scheme://user:password@host

# Secrets this process was handed outside secret-named environment variables: values typed on the
# command line, and the names of variables that ``*_env`` settings point at (their values are secrets
# whatever the variable is called). Filled by the CLI before anything runs.
_HANDED: set[str] = set()
_ENV_NAMES: set[str] = set()


def is_env_name(value) -> bool:
    """An environment variable's name (``^[A-Za-z_][A-Za-z0-9_]*$``) that does not look like a key: no
    known key prefix (``pcsk_``, ``sk-``, ...), and not 20+ characters mixing lower case, upper case and digits."""
    if not isinstance(value, str) or not ENV_NAME_RE.match(value) or value.startswith(KEY_PREFIXES):
        return False
    mixed = re.search(r"[a-z]", value) and re.search(r"[A-Z]", value) and re.search(r"[0-9]", value)
    return not (len(value) >= 20 and mixed)


def check_env_name(setting: str, value) -> None:
    """``*_env`` settings hold the NAME of an environment variable; anything else (a key typed in the
    wrong place) is rejected without echoing it."""
    if value is None:
        return
    if not is_env_name(value):
        if isinstance(value, str):
            register_secret(value)
        raise ValueError(f"{setting} must name an environment variable (letters, digits and '_', not starting with a digit); "
                         f"the value given is not a variable name and is not shown (put the key in the environment instead)")


def register_secret(value: str) -> None:
    """Scrub ``value`` from everything this process writes (each comma-separated part too: a multirun list)."""
    if isinstance(value, str):
        _HANDED.update(v for v in (value, *value.split(",")) if len(v.strip()) >= MIN_SECRET_LEN)


def register_secret_env(name: str) -> None:
    """The value of environment variable ``name`` is a secret (a ``*_env`` setting names it)."""
    if is_env_name(name):
        _ENV_NAMES.add(name)


def secret_override(arg: str) -> None:
    """Register the secrets in one command-line override ``key=value``: the value of a secret-looking
    key, a value typed into a ``*_env`` setting that is not a variable name, a URL's user:password."""
    key, sep, value = arg.partition("=")
    if not sep:
        return
    value = value.strip("'\"")
    leaf = key.lstrip("+~").rsplit(".", 1)[-1]
    if leaf.endswith("_env"):
        (register_secret_env if is_env_name(value) else register_secret)(value)
    elif SECRET_KEY.search(leaf):
        register_secret(value)
    for m in re.finditer(r"://([^/@\s]+)@", value):
        register_secret(m.group(1))
        register_secret(m.group(1).split(":", 1)[-1])


def forms(value: str) -> set[str]:
    """The ways a secret can show up in text: raw, repr/JSON escapes, URL-encoded, whitespace-collapsed, each line."""
    import json
    import urllib.parse

    out = {value, value.strip(), repr(value)[1:-1], json.dumps(value)[1:-1], value.encode("unicode_escape").decode("ascii"),
           urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value), " ".join(value.split())}
    out.update(line for line in value.splitlines())
    return {f for f in out if len(f.strip()) >= MIN_SECRET_LEN}


def secret_values(environ=None) -> list[str]:
    """Every form of every known secret, longest first: values of environment variables whose NAME looks
    secret (API_KEY, TOKEN, PASSWORD, ...) or that a ``*_env`` setting names, and values handed on the
    command line."""
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items() if SECRET_KEY.search(k) and not k.upper().endswith("_ENV")}
    if environ is None:
        vals |= {env[n] for n in _ENV_NAMES if n in env} | _HANDED
    out: set[str] = set()
    for v in vals:
        out |= forms(v)
    return sorted(out, key=len, reverse=True)


def scrub(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with every secret value (default: ``secret_values()``) and URL user:password replaced by REDACTED."""
    for value in secret_values() if secrets is None else secrets:
        text = text.replace(value, REDACTED)
    return USERINFO.sub(REDACTED + "@", text) if "://" in text else text


def redact_override(arg: str) -> str:
    """A command-line override as it may be written down: secret-looking keys' values redacted, the rest scrubbed."""
    key, sep, value = arg.partition("=")
    leaf = key.lstrip("+~").rsplit(".", 1)[-1]
    if sep and (SECRET_KEY.search(leaf) or leaf.endswith("_env")) and not (leaf.endswith("_env") and is_env_name(value)):
        return f"{key}={REDACTED}"
    return scrub(arg)


def error_line(exc: BaseException) -> str:
    """One line for the user: ``Type: message`` of the root cause behind config-instantiation wrappers.

    Hydra wraps errors raised while building a ``_target_`` in ``InstantiationException`` with a
    multi-line message; the original (``__cause__``) is what names the file, record and field.
    Secrets are scrubbed (before and after whitespace is collapsed); the line is capped at MAX_ERROR_CHARS.
    """
    while type(exc).__name__ == "InstantiationException" and exc.__cause__ is not None:
        exc = exc.__cause__
    text = scrub(" ".join(scrub(f"{type(exc).__name__}: {exc}").split()))
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


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
