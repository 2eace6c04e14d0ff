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

import base64
import gzip
import json
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench.output import REDACTED, SECRET_KEY, error_line, forms
from bench.tools.harden.run import planted_secret_run, secret_hits

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets")
    return root, planted_secret_run(root)


@pytest.mark.slow
def test_planted_keys_appear_nowhere(planted):
    _, figs = planted
    assert figs.hits == {}
    assert figs.tracebacks == 0


@pytest.mark.slow
def test_every_new_shape_was_planted_and_ran_as_planned(planted):
    """Issue 28: the runs meant to succeed did (the key was really used), the others failed saying why."""
    _, figs = planted
    assert figs.shapes == {
        "query-string key (?api_key=), run succeeds": 0,
        "echoes: base64/hex/upper/reversed/urlsafe (multirun, query key too)": 1,
        "hex and upper-case keys typed into embedder.api_key_env (multirun)": 1,
        "+embedder.api_key override (multirun)": 1,
        "+embedder.api_key override (multirun stopped before its first job)": 1,
        "401 with the key past character 280": 1,
        "regress --write-baseline (query key, +override)": 0,
        "LLM reply quoting the Authorization header": 0,
    }


@pytest.mark.slow
def test_the_new_shapes_wrote_the_files_users_keep(planted):
    root, _ = planted
    readme = next((root / "baseline").rglob("README.md")).read_text()
    assert f"api_key={REDACTED}" in readme and f"+rb_planted.api_key={REDACTED}" in readme  # the command, keys redacted
    assert len(list((root / "reports" / "runs").glob("*/multirun.yaml"))) >= 5
    assert REDACTED in (root / "answers.csv").read_text()
    assert list((root / "reports" / "cache" / "jobs").glob("*/manifest.json"))


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_keys_were_really_used_and_the_echoing_job_failed_with_a_recorded_reason(planted):
    root, figs = planted
    assert figs.key_used  # the embedding server saw the planted key (it refuses any other)
    assert figs.jobs_failed_as_planned
    failed = [json.loads(p.read_text()) for p in (root / "reports" / "runs").glob("*/job*/failed.json")]
    failed = [f for f in failed if "embedder.model=reject" in f["overrides"]]  # the first multirun's echoing job
    assert len(failed) == 1
    assert failed[0]["reason"].startswith("EmbeddingHTTPError: http embedder: 401 Unauthorized")
    assert failed[0]["reason"].endswith("Incorrect API key provided: ***REDACTED***")


@pytest.mark.slow
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
    assert set(secret_values(env)) == forms("abcdefghij") and "abcdefghij" in secret_values(env)


# --- issue 28: one rule for every shape ------------------------------------------------------------

KEY = "sk-PLANTED-0123456789abcdefXYZ"


def _only(text: str) -> str:
    from bench.output import scrub

    return scrub(text, [KEY])


@pytest.mark.parametrize("shape", [
    KEY, KEY.upper(), KEY.lower(), KEY[::-1], KEY.encode().hex(), KEY.encode().hex().upper(),
    base64.b64encode(KEY.encode()).decode(), base64.b64encode(KEY.encode()).decode().rstrip("="),
    base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("="), json.dumps(KEY)[1:-1], urllib.parse.quote(KEY, safe=""),
])
def test_scrub_removes_every_shape_of_a_known_key(shape):
    assert _only(f"server said: [{shape}] bad") == f"server said: [{REDACTED}] bad"


@pytest.mark.parametrize("prefix", ["", "B", "Be", "Bearer ", "Authorization: Bearer "])
def test_scrub_finds_base64_of_the_key_inside_a_longer_string(prefix):
    """base64 of 'prefix + key' at each byte offset: the characters that encode the key are found."""
    encoded = base64.b64encode((prefix + KEY).encode()).decode()
    out = _only(encoded)
    assert REDACTED in out and len(out.replace(REDACTED, "")) <= 4 * (len(prefix) // 3 + 2)  # only the edges remain


def test_credential_query_parameters_and_userinfo_are_redacted_others_kept():
    from bench.output import scrub

    url = ("https://h.example/openai/deployments/m?api-version=2024-02-01&api_key=AAA&subscription-key=BBB&sig=CCC"
           "&X-Amz-Security-Token=DDD&code=EEE&deployment=m1&access_token=FFF")
    assert scrub(url, []) == (f"https://h.example/openai/deployments/m?api-version=2024-02-01&api_key={REDACTED}"
                              f"&subscription-key={REDACTED}&sig={REDACTED}&X-Amz-Security-Token={REDACTED}&code={REDACTED}"
                              f"&deployment=m1&access_token={REDACTED}")
    assert scrub("http://u:pw@h/x and a multirun 'http://a/v1?key=K1','http://b/v1?token=K2'", []) == \
        f"http://{REDACTED}@h/x and a multirun 'http://a/v1?key={REDACTED}','http://b/v1?token={REDACTED}'"
    assert scrub("monkey=1 max_tokens=5 ?tokens=3", []) == "monkey=1 max_tokens=5 ?tokens=3"


def test_a_key_in_a_query_string_typed_on_the_command_line_is_registered_with_its_shapes():
    from bench import output

    key = "qk-" + "f00d" * 8
    output.secret_override(f"embedder.base_url='https://h/v1?api-version=1&api_key={key}'")
    try:
        assert output.scrub(f"echo {base64.b64encode(key.encode()).decode()} and {key[::-1].upper()}") == f"echo {REDACTED} and {REDACTED}"
    finally:
        output._HANDED.discard(key)


@pytest.mark.parametrize("value, ok", [("OPENROUTER_API_KEY", True), ("HF_TOKEN", True), ("AZURE_OPENAI_API_KEY_2", True),
                                       ("deadbeef0123456789abcdef", False), ("DEADBEEF0123456789ABCDEF", False),
                                       ("K7QX2M9VRT4LPZ8N3WJ6", False), ("MY_K7QX2M9VRT4LPZ8N3WJ6", False),
                                       ("sk-abc", False), ("abcDEF123ghiJKL456mnoP", False)])
def test_env_names_versus_key_shaped_values(value, ok):
    from bench.output import is_env_name

    assert is_env_name(value) is ok


def test_a_key_typed_into_an_env_setting_is_refused_without_echo_in_every_case():
    from bench.output import check_env_name, redact, redact_override

    for key in ("deadbeef0123456789abcdef01", "K7QX2M9VRT4LPZ8N3WJ6ABCD"):
        with pytest.raises(ValueError) as e:
            check_env_name("embedder.api_key_env", key)
        assert key not in str(e.value) and key.lower() not in error_line(e.value).lower()
        assert redact_override(f"embedder.api_key_env={key}") == f"embedder.api_key_env={REDACTED}"
        assert redact({"api_key_env": key}) == {"api_key_env": REDACTED}
    assert redact_override("embedder.api_key_env=A_KEY,B_KEY") == "embedder.api_key_env=A_KEY,B_KEY"


def test_error_text_is_scrubbed_before_it_is_cut():
    from bench.embedders.endpoint import error_message

    body = json.dumps({"error": {"message": "x" * 280 + " " + KEY}}).encode()
    msg = error_message(body, lambda t: _only(t))
    assert KEY[:8] not in msg and len(msg) <= 300
    assert KEY[:8] in " ".join(("x" * 280 + " " + KEY).split())[:300]  # the old cut-then-scrub kept the key's start


def test_override_lists_and_hydra_configs_are_redacted():
    from bench.output import redact

    key = "ov-" + "c0ffee" * 5
    cfg = {"hydra": {"overrides": {"task": [f"+embedder.api_key={key}", "embedder.base_url='http://h/v1?api_key=QQQ'", "x=1"]}},
           "embedder": {"api_key": key}}
    assert redact(cfg) == {"hydra": {"overrides": {"task": [f"+embedder.api_key={REDACTED}",
                                                            f"embedder.base_url='http://h/v1?api_key={REDACTED}'", "x=1"]}},
                           "embedder": {"api_key": REDACTED}}


def test_cache_keys_hash_secrets_instead_of_storing_them():
    from bench import run
    from bench.output import redact_query

    a = run.Key("job", {"settings": {"embedder": {"base_url": "http://h/v1?api-version=2&api_key=SECRET-AAAA"}}})
    b = run.Key("job", {"settings": {"embedder": {"base_url": "http://h/v1?api-version=2&api_key=SECRET-BBBB"}}})
    text = json.dumps(a.describe())
    assert "SECRET-AAAA" not in text and "api-version=2&api_key=sha256:" in text
    assert a.digest != b.digest  # another key, another digest
    assert redact_query("api-version=2&api_key=K&sig=S") == f"api-version=2&api_key={REDACTED}&sig={REDACTED}"


def test_llm_reply_quoting_the_header_is_scrubbed_before_it_is_stored(tmp_path, monkeypatch):
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from loopback import json_server

    from bench.evaluation import llm

    key = "ak-" + "beef" * 8

    class State:
        requests: list = []

        def reply(self, payload):
            auth = self.requests[-1]["auth"]
            text = f"You sent {auth}; b64 {base64.b64encode(auth.encode()).decode()}"
            return 200, {}, json.dumps({"choices": [{"message": {"content": text}}]}).encode()

    monkeypatch.setenv("RB_TEST_LLM_KEY", key)
    with json_server(State()) as srv:
        cfg = llm.LLMConfig(name="t", base_url=srv.base_url, model="m", api_key_env="RB_TEST_LLM_KEY")
        reply, cached = llm.cached_call(llm.ChatClient(cfg, sleep=lambda s: None), llm.Cache(tmp_path), "v1",
                                        [{"role": "user", "content": "Q?"}], 5, cfg)
    stored = "".join(p.read_text() for p in tmp_path.rglob("*.json"))
    assert reply.text.startswith(f"You sent Bearer {REDACTED}") and not cached
    assert key not in stored and base64.b64encode(key.encode()).decode()[:20] not in stored and REDACTED in stored


@pytest.mark.slow
def test_every_tool_scrubs_its_logs_ray_included(tmp_path):
    """``recallbench ray`` logs the multirun command with its overrides: every tool's entry scrubs them."""
    key = "rk-" + "1234abcd" * 4
    code = ("import logging, sys\nfrom bench.cli.common import entry, setup_logging\n"
            "def main(argv):\n    setup_logging()\n    logging.getLogger('bench.tools.ray_run').info('multirun: %s', ' '.join(argv))\n"
            "    print(' '.join(argv))\n    return 0\n"
            "sys.exit(entry(main, sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, f"+embedder.api_key={key}", "embedder.base_url=http://h/v1?token=T0K3N-VALUE"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "multirun: " in out
    assert key not in out and "T0K3N-VALUE" not in out and out.count(REDACTED) == 4
