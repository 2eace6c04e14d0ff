"""bench/output.py: atomic writes honour the umask; secrets are scrubbed in every form they take."""

from __future__ import annotations

import os
import stat

import pytest

from bench import output as results
from bench.output import (
    REDACTED,
    check_env_name,
    error_line,
    is_env_name,
    redact,
    redact_override,
    scrub,
    write_atomic,
)


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_write_atomic_honours_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = write_atomic(tmp_path / "summary.csv", lambda p: p.write_text("x\n"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert [p.name for p in tmp_path.iterdir()] == ["summary.csv"]


def test_write_atomic_names_the_file_it_could_not_write(tmp_path):
    def fail(p):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match=r"No space left on device: writing .*summary\.csv"):
        write_atomic(tmp_path / "summary.csv", fail)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


@pytest.mark.parametrize("name,ok", [("OPENROUTER_API_KEY", True), ("my_key", True), ("_X1", True),
                                     ("pcsk_5xK9Zq_Ab3dEfGh1JkLmNoPq", False), ("sk-abc", False), ("or-v1-abcdef", False),
                                     ("1ABC", False), ("A B", False), ("aB3dEfGh1JkLmNoPqRsT", False), ("", False)])
def test_env_names(name, ok):
    assert is_env_name(name) is ok


def test_a_key_typed_into_an_env_setting_is_rejected_without_echo():
    key = "pcsk_PLANTED0123456789abcdef"
    with pytest.raises(ValueError) as e:
        check_env_name("backend.api_key_env", key)
    assert "backend.api_key_env must name an environment variable" in str(e.value) and key not in str(e.value)
    assert scrub(f"Could not override 'backend.api_key_env=+{key}'") == f"Could not override 'backend.api_key_env=+{REDACTED}'"


@pytest.fixture
def handed(monkeypatch):
    """The process-wide registry of handed secrets, emptied for one test."""
    monkeypatch.setattr(results, "_HANDED", set())
    monkeypatch.setattr(results, "_ENV_NAMES", set())


def test_every_form_of_a_secret_is_scrubbed(monkeypatch, handed):
    key = "sk-PLANTED-abcd\nef0123456789"
    monkeypatch.setenv("RB_X_API_KEY", key)
    for text in (f"raw {key} end", f"repr {key!r}", f"bytes {key.encode()!r}", f"url ?k={key.replace(chr(10), '%0A')}",
                 f"collapsed {' '.join(key.split())}"):
        out = scrub(text)
        assert "abcd" not in out and "ef0123456789" not in out, (text, out)
    try:
        raise ValueError(f"Invalid header value b'Bearer {key}'")
    except ValueError as e:
        assert "ef0123456789" not in error_line(e) and REDACTED in error_line(e)


def test_secrets_from_the_command_line_and_named_variables(monkeypatch, handed):
    monkeypatch.setenv("MY_SERVICE_CREDENTIAL", "value-of-a-plain-name-123")  # the name does not look secret
    for arg in ("+embedder.api_key=sk-override-0123456789", "embedder.api_key_env=or-typed-0123456789",
                "backend.password_env=MY_SERVICE_CREDENTIAL", "embedder.base_url=http://rb:pw-in-url-0123@127.0.0.1:9/v1"):
        results.secret_override(arg)
    text = "sk-override-0123456789 or-typed-0123456789 value-of-a-plain-name-123 pw-in-url-0123"
    assert scrub(text) == " ".join([REDACTED] * 4)
    assert scrub("see http://u:p@h:1/x") == f"see http://{REDACTED}@h:1/x"


def test_overrides_are_written_redacted(handed):
    assert redact_override("+embedder.api_key=sk-abcdefghijk") == f"+embedder.api_key={REDACTED}"
    assert redact_override("backend.api_key_env=pcsk_abcdefghijk") == f"backend.api_key_env={REDACTED}"
    assert redact_override("backend.api_key_env=PINECONE_API_KEY") == "backend.api_key_env=PINECONE_API_KEY"
    assert redact_override("strategy=limit") == "strategy=limit"
    assert redact({"base_url": "https://me:secret@host/v1"}) == {"base_url": f"https://{REDACTED}@host/v1"}
