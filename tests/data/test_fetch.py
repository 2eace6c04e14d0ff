"""Tests for bench/data/fetch.py: manifests, verification, atomic loopback downloads, offline messages.

Every network test talks only to an http.server on 127.0.0.1 started here.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import socket
import threading
from pathlib import Path

import pytest

from bench.cli.data import fetch_main
from bench.data import fetch as F

HELLO = b"hello recallbench\n"
HELLO_SHA = "38ef90def47741bbcd15f7465879f055e46cc2101caf11a2a4fe419223a0e7f8"  # printf 'hello recallbench\n' | sha256sum
HELLO_TREE = "41e4d13e9270b036b64cd16a34f44b9557ea4ef9a3a7dd49e79d95ad71751c1e"  # sha256sum hello.txt | sha256sum
SECOND = b"second\n"
SECOND_SHA = "480c2336b410f1ad5f8bf1b28944490255804b65350c527787e74ebdd511e3a4"
TWO_TREE = "347792f055258ed6db31c038b982b0bc5e37fced723bb72371da8439f12243fc"  # LC_ALL=C sha256sum b.txt hello.txt | sha256sum


def write_manifest(mdir: Path, files: list[dict], *, name: str = "tiny", target: str = "tiny",
                   tree: str | None = None) -> Path:
    mdir.mkdir(parents=True, exist_ok=True)
    data = {"name": name, "target": target, "licence": "Apache-2.0", "non_commercial": False,
            "tree_sha256": tree or F.tree_sha256((f["path"], f["sha256"]) for f in files), "files": files}
    p = mdir / f"{name}.json"
    p.write_text(json.dumps(data), encoding="utf-8")
    return p


def entry(path: str, size: int, sha: str, url: str = "http://127.0.0.1:9/none") -> dict:
    return {"path": path, "size": size, "sha256": sha, "urls": [url]}


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.rglob("*") if p.name.endswith(".part"))


@pytest.fixture
def server(tmp_path):
    """Loopback HTTP server over tmp_path/www; special paths /truncated and /missing."""
    www = tmp_path / "www"
    www.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path == "/truncated":  # promises 100 bytes, sends 5, closes
                self.send_response(200)
                self.send_header("Content-Length", "100")
                self.end_headers()
                self.wfile.write(b"hello")
                self.wfile.flush()
                self.close_connection = True
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(www)))
    srv.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield www, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens here now: connections are refused at once
    return port


# ---- hashing and manifests ----------------------------------------------------------------

def test_sha256_file_and_tree_match_sha256sum(tmp_path):
    (tmp_path / "hello.txt").write_bytes(HELLO)
    assert F.sha256_file(tmp_path / "hello.txt") == HELLO_SHA
    assert F.tree_sha256([("hello.txt", HELLO_SHA)]) == HELLO_TREE
    # sorted by path whatever the input order
    assert F.tree_sha256([("hello.txt", HELLO_SHA), ("b.txt", SECOND_SHA)]) == TWO_TREE


def test_load_manifest_reads_fields(tmp_path):
    p = write_manifest(tmp_path / "m", [entry("sub/hello.txt", len(HELLO), HELLO_SHA)])
    m = F.load_manifest(p)
    assert (m.name, m.target, m.licence, m.non_commercial) == ("tiny", "tiny", "Apache-2.0", False)
    assert m.files == (F.FileEntry("sub/hello.txt", 18, HELLO_SHA, ("http://127.0.0.1:9/none",)),)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["files"][0].update(sha256="abc"), "files[0].sha256"),
    (lambda d: d["files"][0].update(path="../escape.txt"), "files[0].path"),
    (lambda d: d["files"][0].update(size="18"), "files[0].size"),
    (lambda d: d["files"][0].update(urls=[]), "files[0].urls"),
    (lambda d: d.update(target="/abs"), "target"),
    (lambda d: d.pop("non_commercial"), "non_commercial"),
    (lambda d: d.update(tree_sha256="0" * 64), "tree_sha256"),
    (lambda d: d["files"].append(dict(d["files"][0])), "files[1].path"),
    (lambda d: d.update(name="other"), "name"),
])
def test_load_manifest_errors_name_file_and_field(tmp_path, mutate, field):
    p = write_manifest(tmp_path, [entry("hello.txt", 18, HELLO_SHA)])
    data = json.loads(p.read_text())
    mutate(data)
    p.write_text(json.dumps(data))
    with pytest.raises(ValueError) as e:
        F.load_manifest(p)
    assert str(p) in str(e.value) and repr(field) in str(e.value)


def test_load_manifest_malformed_json_names_line(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"name": "x",\n "target": }\n')
    with pytest.raises(ValueError, match=r"bad\.json:2: malformed JSON"):
        F.load_manifest(p)


# ---- verification of present files -----------------------------------------------------

def test_verify_ok_exit_0(tmp_path, capsys):
    mdir = tmp_path / "m"
    write_manifest(mdir, [entry("hello.txt", 18, HELLO_SHA)])
    (tmp_path / "data" / "tiny").mkdir(parents=True)
    (tmp_path / "data" / "tiny" / "hello.txt").write_bytes(HELLO)
    code = fetch_main(["--data-dir", str(tmp_path / "data"), "--manifests", str(mdir), "--offline"])
    out = capsys.readouterr().out
    assert code == 0
    assert "tiny: 1 file(s) in" in out and "1 ok" in out


def test_verify_hash_mismatch_exit_1(tmp_path, capsys):
    mdir = tmp_path / "m"
    write_manifest(mdir, [entry("hello.txt", 18, HELLO_SHA)])
    target = tmp_path / "data" / "tiny" / "hello.txt"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"HELLO recallbench\n")  # same size, different bytes
    code = fetch_main(["--data-dir", str(tmp_path / "data"), "--manifests", str(mdir), "--offline"])
    out = capsys.readouterr().out
    assert code == 1
    assert (f"MISMATCH (expected sha256 {HELLO_SHA}, got "
            "86d468da50eafe74aee374ff4f2b2966e6bc783d321b1599dc307effdd49f380)") in out
    assert target.read_bytes() == b"HELLO recallbench\n"  # verification never touches a present file


def test_verify_size_mismatch_reported_before_hashing(tmp_path):
    target = tmp_path / "hello.txt"
    target.write_bytes(b"hello\n")
    state, detail = F.check_file(F.FileEntry("hello.txt", 18, HELLO_SHA, ("x://y",)), target)
    assert (state, detail) == ("mismatch", "MISMATCH (expected size 18, got 6)")


# ---- downloads from a loopback server -------------------------------------------------

def test_download_lands_atomically_with_verified_hash(tmp_path, server, monkeypatch, capsys):
    www, base = server
    (www / "hello.txt").write_bytes(HELLO)
    mdir = tmp_path / "m"
    write_manifest(mdir, [entry("deep/hello.txt", 18, HELLO_SHA, f"{base}/hello.txt")])
    dest = tmp_path / "data" / "tiny" / "deep" / "hello.txt"
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        # at the moment of the rename the real name does not exist yet; the temp file is complete
        seen.append((Path(src).parent == Path(dst).parent, Path(dst).exists(), Path(src).read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(F.os, "replace", spy)
    code = fetch_main(["--data-dir", str(tmp_path / "data"), "--manifests", str(mdir)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert seen == [(True, False, HELLO)]
    assert dest.read_bytes() == HELLO
    assert dest.stat().st_mode & 0o777 == 0o644
    assert leftovers(tmp_path / "data") == []
    assert "1 downloaded" in out


def test_download_bad_hash_leaves_nothing(tmp_path, server, capsys):
    www, base = server
    (www / "hello.txt").write_bytes(b"HELLO recallbench\n")  # right size, wrong bytes
    mdir = tmp_path / "m"
    write_manifest(mdir, [entry("hello.txt", 18, HELLO_SHA, f"{base}/hello.txt")])
    code = fetch_main(["--data-dir", str(tmp_path / "data"), "--manifests", str(mdir)])
    out = capsys.readouterr().out
    assert code == 1
    assert "MISMATCH in download" in out and HELLO_SHA in out
    assert not (tmp_path / "data" / "tiny" / "hello.txt").exists()
    assert leftovers(tmp_path / "data") == []


def test_download_too_long_body_leaves_nothing(tmp_path, server):
    www, base = server
    (www / "big.txt").write_bytes(HELLO * 3)
    dest = tmp_path / "d" / "hello.txt"
    with pytest.raises(ValueError, match="more than the expected 18 bytes"):
        F.download(f"{base}/big.txt", dest, size=18, sha256=HELLO_SHA, timeout=5)
    assert not dest.exists() and leftovers(tmp_path / "d") == []


def test_truncated_transfer_leaves_nothing(tmp_path, server):
    _, base = server
    dest = tmp_path / "d" / "hello.txt"
    with pytest.raises(F.DownloadFailed) as e:
        F.download(f"{base}/truncated", dest, size=100, sha256=HELLO_SHA, timeout=5)
    assert not e.value.server_answered
    assert not dest.exists() and leftovers(tmp_path / "d") == []


def test_http_404_is_missing_and_other_files_still_tried(tmp_path, server, capsys):
    www, base = server
    (www / "b.txt").write_bytes(SECOND)
    mdir = tmp_path / "m"
    write_manifest(mdir, [entry("a.txt", 18, HELLO_SHA, f"{base}/nope.txt"),
                          entry("b.txt", 7, SECOND_SHA, f"{base}/b.txt")])
    code = fetch_main(["--data-dir", str(tmp_path / "data"), "--manifests", str(mdir)])
    out = capsys.readouterr().out
    assert code == 3
    assert "HTTP 404" in out
    assert (tmp_path / "data" / "tiny" / "b.txt").read_bytes() == SECOND
    assert "1 downloaded, 1 missing" in out


# ---- no network --------------------------------------------------------------------------

def test_no_network_one_line_message_exit_3(tmp_path, capsys):
    url = f"http://127.0.0.1:{dead_port()}/hello.txt"
    mdir = tmp_path / "m"
    write_manifest(mdir, [entry("hello.txt", 18, HELLO_SHA, url), entry("b.txt", 7, SECOND_SHA, url)])
    data = tmp_path / "data"
    code = fetch_main(["--data-dir", str(data), "--manifests", str(mdir), "--timeout", "5"])
    out = capsys.readouterr().out
    assert code == 3
    dest = data / "tiny" / "hello.txt"
    line = next(l for l in out.splitlines() if "MISSING" in l and "hello.txt" in l)
    assert f"Get it from {url} and put it at {dest}" in line and "18 bytes" in line and HELLO_SHA in line
    assert "refused" in line.lower()
    # after the first network failure the second file is not tried (one timeout, not one per file)
    assert any("b.txt" in l and "not tried after an earlier network failure" in l for l in out.splitlines())
    assert not dest.exists() and leftovers(data) == []


def test_offline_flag_never_downloads(tmp_path, server, capsys):
    www, base = server
    (www / "hello.txt").write_bytes(HELLO)
    mdir = tmp_path / "m"
    write_manifest(mdir, [entry("hello.txt", 18, HELLO_SHA, f"{base}/hello.txt")])
    code = fetch_main(["--data-dir", str(tmp_path / "data"), "--manifests", str(mdir), "--offline"])
    assert code == 3
    assert "offline (--offline)" in capsys.readouterr().out
    assert not (tmp_path / "data" / "tiny" / "hello.txt").exists()


def test_data_dir_defaults_to_env(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_DATA_DIR", str(tmp_path))
    assert F.default_data_dir() == tmp_path.resolve()
    monkeypatch.delenv("BENCH_DATA_DIR")
    monkeypatch.chdir(tmp_path)
    assert F.default_data_dir() == (tmp_path / "datasets").resolve()


def test_only_unknown_manifest_is_usage_error(tmp_path, capsys):
    mdir = tmp_path / "m"
    write_manifest(mdir, [entry("hello.txt", 18, HELLO_SHA)])
    assert fetch_main(["--manifests", str(mdir), "--only", "nope", "--offline"]) == 2
    assert "unknown manifest(s) nope" in capsys.readouterr().err


# ---- the real manifests ----------------------------------------------------------------

EXPECTED = {  # name -> (target, number of files, total bytes, non-commercial)
    "locomo": ("locomo", 1, 2_805_274, True),
    "locomo_2025_fixed": ("locomo_2025_fixed", 1, 2_804_832, True),
    "longmemeval_oracle": ("longmemeval_oracle", 500, 14_685_072, False),
    "longmemeval_s": ("longmemeval_s", 498, 264_508_322, False),
}


def test_repo_manifests_are_consistent():
    ms = {m.name: m for m in F.load_manifests()}
    assert set(ms) == set(EXPECTED)
    for name, (target, n, total, nc) in EXPECTED.items():
        m = ms[name]
        assert (m.target, len(m.files), sum(f.size for f in m.files), m.non_commercial) == (target, n, total, nc)
        assert all(u.startswith("https://") for f in m.files for u in f.urls)
    assert ms["locomo"].files[0].sha256 == "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
    assert ms["locomo_2025_fixed"].files[0].sha256 == "8f941d1c22ab3dee4cb72521fbccc82d24c30208590a15b0b4005a2f927ff769"
    assert ms["longmemeval_oracle"].tree_sha256 == "c8fdb1801ec2311c66d8a1a22852de8e958cd275cdedfc348850646f39e74537"
    assert ms["longmemeval_s"].tree_sha256 == "a69d5cd2aac6b4a38a4cc1b316d17961ea984f23326f12bc595fd8a801a3727c"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_repo_manifest_verifies_against_data_dir(name, bench_data_dir):
    m = next(m for m in F.load_manifests() if m.name == name)
    if not (bench_data_dir / m.target).is_dir():
        pytest.skip(f"{bench_data_dir / m.target} absent (set BENCH_DATA_DIR to a folder holding the corpora)")
    statuses = F.fetch(bench_data_dir, [m], offline=True)
    bad = [f"{s.dest}: {s.state} {s.detail}" for s in statuses if s.state != "ok"]
    assert not bad, bad[:5]
    assert len(statuses) == EXPECTED[name][1]
