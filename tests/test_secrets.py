"""Secrets: keys come only from the environment, and a planted key appears 0 times in anything written.

The CLI runs a multirun with the HTTP embedder (loopback EmbeddingServer that REQUIRES the planted
key) and the Pinecone backend (loopback protocol test double, bench/tools/harden/doubles.py, that also
requires its planted key); a second job's endpoint answers 401 echoing the key back. Then one run
per other channel a key can come by: typed into ``backend.api_key_env`` and ``embedder.api_key_env``,
a ``+embedder.api_key=`` override, a URL's user:password, a newline inside the environment value.
Every file under the temp reports dir (logs, config_resolved.yaml, failed.json, meta.json, reports,
traces, parquet cells) and the console output are searched for the keys and their random parts.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench.output import REDACTED, SECRET_KEY, error_line
from bench.tools.harden.run import planted_secret_run, secret_hits

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets")
    return root, planted_secret_run(root)


def test_planted_keys_appear_nowhere(planted):
    _, figs = planted
    assert figs.hits == {}
    assert figs.tracebacks == 0


def test_every_other_channel_was_refused_with_a_reason(planted):
    root, figs = planted
    assert sorted(figs.channels) == ["+embedder.api_key override", "URL user:password", "newline inside the env value",
                                     "typed into backend.api_key_env", "typed into embedder.api_key_env"]
    assert all(rc != 0 for rc in figs.channels.values()), figs.channels
    console = (root / "console.log").read_text()
    assert "backend.api_key_env must name an environment variable" in console
    assert "embedder.api_key_env must name an environment variable" in console
    assert "base_url must not carry user:password" in console
    assert "RB_PLANTED_NL_API_KEY holds whitespace or a control character" in console


def test_the_keys_were_really_used_and_the_echoing_job_failed_with_a_recorded_reason(planted):
    root, figs = planted
    assert figs.key_used  # the embedding server saw the planted key (it refuses any other)
    assert figs.jobs_failed_as_planned
    failed = [json.loads(p.read_text()) for p in (root / "reports" / "runs").glob("*/job*/failed.json")]
    assert len(failed) == 1
    assert failed[0]["reason"].startswith("EmbeddingHTTPError: http embedder: 401 Unauthorized")
    assert failed[0]["reason"].endswith("Incorrect API key provided: ***REDACTED***")


def test_every_kind_of_output_was_scanned(planted):
    root, _ = planted
    reports = root / "reports"
    names = {p.name for p in reports.rglob("*") if p.is_file()}
    for must in ("cli.log", "config_resolved.yaml", "report.md",
                 "trace.parquet", "questions.parquet", "summary.csv", "failed.json", "meta.json"):
        assert must in names, must
    assert not any(".hydra" in p.parts for p in reports.rglob("*"))  # Hydra's raw copy of the overrides is off
    assert (root / "console.log").stat().st_size > 0
    cfg = (next(reports.rglob("job0/config_resolved.yaml"))).read_text()
    assert "api_key_env: RB_PLANTED_EMBED_API_KEY" in cfg  # the NAME of the variable, never its value
    assert "backend" in pd.read_parquet(next(reports.rglob("job0/questions.parquet"))).columns


def test_the_scan_finds_a_key_when_one_is_there(tmp_path):
    """Positive control: a key in a log line, in a parquet cell (compressed), in YAML and in a gzip file is found."""
    key = "sk-PLANTED-0123456789abcdef"
    (tmp_path / "a.log").write_text(f"x {key} y {key}\n")
    pd.DataFrame({"col": ["ok", f"leak {key}"]}).to_parquet(tmp_path / "t.parquet", compression="zstd")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yaml").write_text(yaml.safe_dump({"api_key": key}))
    (tmp_path / "corpus.json.gz").write_bytes(gzip.compress(f'{{"text": "{key}"}}'.encode()))
    hits = secret_hits(tmp_path, [key])
    assert sorted(hits) == [str(tmp_path / "a.log"), str(tmp_path / "corpus.json.gz"), str(tmp_path / "sub" / "c.yaml"),
                            str(tmp_path / "t.parquet")]
    assert hits[str(tmp_path / "corpus.json.gz")] == 1
    assert hits[str(tmp_path / "a.log")] == 2 and hits[str(tmp_path / "t.parquet")] >= 1  # raw bytes + decoded cell


def test_error_line_scrubs_secret_env_values_and_unwraps(monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "sk-PLANTED-abcdefgh12345678")
    monkeypatch.setenv("SHORT_TOKEN", "abc")  # too short to scrub safely
    try:
        raise ValueError("server said:\n  bad key sk-PLANTED-abcdefgh12345678 (abc)")
    except ValueError as e:
        assert error_line(e) == f"ValueError: server said: bad key {REDACTED} (abc)"

    class InstantiationException(Exception):  # what Hydra raises around a failing _target_
        pass

    try:
        try:
            raise FileNotFoundError("dataset path not found: /x")
        except FileNotFoundError as inner:
            raise InstantiationException("Error in call to target 'f':\nFileNotFoundError(...)\nfull_key: dataset") from inner
    except InstantiationException as e:
        assert error_line(e) == "FileNotFoundError: dataset path not found: /x"


def test_configs_name_environment_variables_and_never_hold_keys():
    """Every secret-looking config key names an environment variable (``*_env``) or is empty."""
    for path in sorted((REPO / "configs").rglob("*.yaml")):
        def walk(node, where):
            if isinstance(node, dict):
                for k, v in node.items():
                    if SECRET_KEY.search(str(k)):
                        assert str(k).endswith("_env") or v in (None, ""), f"{path}: {where}{k}"
                    if isinstance(v, str):
                        assert not v.startswith(("sk-", "pcsk_", "Bearer ")), f"{path}: {where}{k}"
                    walk(v, f"{where}{k}.")
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, f"{where}[{i}].")
        walk(yaml.safe_load(path.read_text()), "")


def test_redact_hides_secret_strings_but_keeps_token_counts_and_variable_names(monkeypatch):
    from bench.output import redact, secret_values

    monkeypatch.setenv("RB_TEST_API_KEY", "sk-PLANTED-zyxwvuts9876")
    cfg = {"embedder": {"api_key_env": "RB_TEST_API_KEY", "api_key": "typed-by-mistake", "base_url": "http://h/?k=sk-PLANTED-zyxwvuts9876"},
           "strategy": {"b": {"needs_tokens": True, "fn": {"max_tokens": 256}}}, "tokens": {"encoding": "cl100k_base"},
           "backend": {"password_env": "SEEKDB_PASSWORD", "password": ""}, "hf_token": "hf_abcdefgh"}
    assert redact(cfg) == {
        "embedder": {"api_key_env": "RB_TEST_API_KEY", "api_key": REDACTED, "base_url": f"http://h/?k={REDACTED}"},
        "strategy": {"b": {"needs_tokens": True, "fn": {"max_tokens": 256}}}, "tokens": {"encoding": "cl100k_base"},
        "backend": {"password_env": "SEEKDB_PASSWORD", "password": ""}, "hf_token": REDACTED}
    env = {"X_API_KEY": "abcdefghij", "PASSWORD_ENV": "SEEKDB_PASSWORD", "PATH": "/usr/local/bin:/usr/bin", "A_TOKEN": "short"}
    assert secret_values(env) == ["abcdefghij"]
