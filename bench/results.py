"""Writing results: atomic file writes, redacted configs, run directories, ``reports/latest``.

Raw data is written once; derived tables can be rebuilt from it. Every write goes to a temp file
in the same directory and is renamed into place, so a crash never leaves a half-written file.
``error_line`` turns an exception into the one line a user sees (config-instantiation wrappers
unwrapped, whitespace collapsed, secret values from the environment scrubbed).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

# Names of settings / environment variables that hold secrets. "token" only as a whole word part
# (HF_TOKEN, access_token), not "tokens" / "needs_tokens" / "max_tokens" (token counts, not secrets).
SECRET_KEY = re.compile(r"(api[_-]?key|secret|password|passwd|authorization|(?<![a-z])token(?![a-z]))", re.I)
REDACTED = "***REDACTED***"


def write_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp_path)`` then rename tmp onto ``path``. Cleans up on failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def redact(obj, key: str = ""):
    """Replace string values under secret-looking keys (``*_env`` names of variables are kept; numbers
    and booleans are never secrets) and any string holding a secret value from the environment."""
    if isinstance(obj, dict):
        return {k: redact(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v, key) for v in obj]
    if isinstance(obj, str) and obj:
        if SECRET_KEY.search(key) and not key.endswith("_env"):
            return REDACTED
        return scrub(obj)
    return obj


MIN_SECRET_LEN = 8  # shorter environment values are not scrubbed (they would match everywhere)
MAX_ERROR_CHARS = 600


def secret_values(environ=None) -> list[str]:
    """Values of environment variables whose NAME looks secret (API_KEY, TOKEN, PASSWORD, ...), longest first."""
    env = os.environ if environ is None else environ
    vals = {v.strip() for k, v in env.items()
            if SECRET_KEY.search(k) and not k.upper().endswith("_ENV") and len(v.strip()) >= MIN_SECRET_LEN}
    return sorted(vals, key=len, reverse=True)


def scrub(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with every secret value (default: ``secret_values()``) replaced by REDACTED."""
    for value in secret_values() if secrets is None else secrets:
        text = text.replace(value, REDACTED)
    return text


def error_line(exc: BaseException) -> str:
    """One line for the user: ``Type: message`` of the root cause behind config-instantiation wrappers.

    Hydra wraps errors raised while building a ``_target_`` in ``InstantiationException`` with a
    multi-line message; the original (``__cause__``) is what names the file, record and field.
    Secret values from the environment are scrubbed; the line is capped at MAX_ERROR_CHARS.
    """
    while type(exc).__name__ == "InstantiationException" and exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    text = scrub(text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def publish_latest(run_dir: Path, latest: Path) -> None:
    """Replace ``latest`` with a copy of ``run_dir`` (copy, then swap by renames)."""
    latest = Path(latest)
    tmp = latest.with_name(f".{latest.name}.tmp")
    old = latest.with_name(f".{latest.name}.old")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(run_dir, tmp, ignore=shutil.ignore_patterns("*.tmp"))
    shutil.rmtree(old, ignore_errors=True)
    if latest.exists():
        os.replace(latest, old)
    os.replace(tmp, latest)
    shutil.rmtree(old, ignore_errors=True)
