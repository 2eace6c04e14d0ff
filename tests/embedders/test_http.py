"""OpenAI-compatible HTTP embedder against a scripted loopback server (127.0.0.1 only)."""

import json
import logging
import socket
import threading

import numpy as np
import pytest

from bench.embedders.endpoint import _retry_after_seconds, public_url
from bench.embedders.http import EmbeddingHTTPError, HTTPEmbedder
from loopback import json_server

SECRET = "sk-test-SECRET123"
KEY_ENV = "RECALLBENCH_TEST_EMBED_KEY"


def vec_for(text: str, dim: int = 3) -> list[float]:
    """Deterministic server-side vector: [len, 1, 0] (unnormalised)."""
    return [float(len(text)), 1.0] + [0.0] * (dim - 2)


class Scripted:
    """Server state: a queue of scripted replies; when empty, a correct embedding reply."""

    def __init__(self) -> None:
        self.replies: list = []  # items: (status, headers, body_bytes) or callable(payload) -> that
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    def reply(self, payload):
        with self.lock:
            item = self.replies.pop(0) if self.replies else None
        if callable(item):
            return item(payload)
        if item is not None:
            return item
        data = [{"object": "embedding", "index": i, "embedding": vec_for(t)} for i, t in enumerate(payload["input"])]
        data.reverse()  # servers may return items out of order: the client sorts by index
        return 200, {}, json.dumps({"object": "list", "data": data, "model": payload["model"]}).encode()


@pytest.fixture
def server():
    with json_server(Scripted()) as state:
        yield state


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


def make(server, **kw) -> HTTPEmbedder:
    e = HTTPEmbedder(model="test/embed-3", base_url=server.base_url, api_key_env=KEY_ENV,
                     backoff_base_s=0.5, progress=False, **kw)
    e.sleeps = []
    e._sleep = e.sleeps.append  # record instead of sleeping
    return e


def test_happy_path_batching_order_and_normalisation(server, key):
    e = make(server, batch_size=2)
    texts = ["a", "bbb", "cc", "dddd", ""]
    v = e.embed(texts)
    assert len(server.requests) == 3  # 5 texts in batches of 2
    assert [r["json"]["input"] for r in server.requests] == [["a", "bbb"], ["cc", "dddd"], [""]]
    assert all(r["path"] == "/v1/embeddings" for r in server.requests)
    assert all(r["auth"] == f"Bearer {SECRET}" for r in server.requests)
    assert all(r["json"]["model"] == "test/embed-3" and "dimensions" not in r["json"] for r in server.requests)
    # server vector [len, 1, 0] normalised: "bbb" -> [3, 1, 0] / sqrt(10); "" -> [0, 1, 0]
    np.testing.assert_allclose(v[1], np.array([3, 1, 0]) / np.sqrt(10), rtol=1e-6)
    np.testing.assert_allclose(v[4], [0, 1, 0])
    assert v.dtype == np.float32 and v.shape == (5, 3)
    assert e.dim == 3  # learnt from the first response
    assert e.model_id == "http:test/embed-3"
    assert (e.requests, e.retries) == (3, 0)


def test_dimensions_sent_and_in_model_id(server, key):
    e = make(server, dimensions=3)
    assert e.dim == 3
    assert e.model_id == "http:test/embed-3@3d"
    e.embed(["x"])
    assert server.requests[0]["json"]["dimensions"] == 3


def test_429_then_success_is_retried_honouring_retry_after(server, key):
    server.replies = [(429, {"Retry-After": "7"}, b'{"error": {"message": "rate limited"}}')]
    e = make(server)
    v = e.embed(["hello"])
    assert v.shape == (1, 3)
    assert (e.requests, e.retries) == (2, 1)
    assert e.sleeps == [7.0]  # Retry-After wins over the 0.5 s backoff


def test_500_every_time_fails_after_max_retries(server, key):
    server.replies = [(500, {}, b'{"error": {"message": "upstream exploded"}}')] * 4
    e = make(server, max_retries=3)
    with pytest.raises(EmbeddingHTTPError) as ei:
        e.embed(["hello"])
    msg = str(ei.value)
    assert "after 4 attempts" in msg and "500" in msg and "upstream exploded" in msg
    assert len(server.requests) == 4
    assert e.sleeps == [0.5, 1.0, 2.0]  # exponential backoff


def test_401_fails_at_once_without_leaking_the_key(server, key, caplog):
    # a hostile server echoes the key back in its error message
    server.replies = [(401, {}, json.dumps({"error": {"message": f"bad key Bearer {SECRET}", "code": 401}}).encode())]
    e = make(server)
    with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingHTTPError) as ei:
        e.embed(["hello"])
    msg = str(ei.value)
    assert "401" in msg and "Unauthorized" in msg and "bad key" in msg
    assert "POST http://127.0.0.1:" in msg and "/v1/embeddings" in msg
    assert SECRET not in msg and "SECRET123" not in msg
    assert "SECRET123" not in caplog.text
    assert "SECRET123" not in repr(e) and "SECRET123" not in str(e) and "SECRET123" not in str(vars(e))
    assert len(server.requests) == 1  # no retry on 4xx
    assert e.sleeps == []


def test_nan_vector_names_the_item(server, key):
    def nan_second(payload):
        body = '{"data": [{"index": 0, "embedding": [1, 0, 0]}, {"index": 1, "embedding": [NaN, 1, 0]}]}'
        return 200, {}, body.encode()

    server.replies = [lambda p: (200, {}, b'{"data": [{"index": 0, "embedding": [1, 0, 0]}, {"index": 1, "embedding": [0, 1, 0]}]}'),
                      nan_second]
    e = make(server, batch_size=2)
    with pytest.raises(ValueError, match=r"item 3: vector contains NaN or inf"):  # 2nd batch, 2nd item
        e.embed(["a", "b", "c", "d"])


def test_wrong_dimension_is_an_error(server, key):
    server.replies = [lambda p: (200, {}, b'{"data": [{"index": 0, "embedding": [1, 0, 0]}, {"index": 1, "embedding": [0, 1]}]}')]
    with pytest.raises(ValueError, match=r"item 1: wrong dimension 2, expected 3"):
        make(server).embed(["a", "b"])
    # configured dim is enforced from the first item on
    server.replies = [lambda p: (200, {}, b'{"data": [{"index": 0, "embedding": [1, 0, 0]}]}')]
    with pytest.raises(ValueError, match=r"item 0: wrong dimension 3, expected 4"):
        make(server, dim=4).embed(["a"])


def test_count_mismatch_is_an_error(server, key):
    server.replies = [lambda p: (200, {}, b'{"data": [{"index": 0, "embedding": [1, 0, 0]}]}')]
    with pytest.raises(ValueError, match=r"sent 2 texts \(items 0..1\), got 1 embeddings"):
        make(server).embed(["a", "b"])


def test_connection_refused_is_retried_then_fails(key):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    e = HTTPEmbedder(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key_env=KEY_ENV,
                     max_retries=2, backoff_base_s=0.25, progress=False)
    e._sleep = (sleeps := []).append
    with pytest.raises(EmbeddingHTTPError, match="failed after 3 attempts; last: connection error"):
        e.embed(["a"])
    assert sleeps == [0.25, 0.5]


def test_missing_key_env_is_clear(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    e = HTTPEmbedder(model="m", base_url="http://127.0.0.1:9/v1", api_key_env=KEY_ENV, progress=False)
    with pytest.raises(EmbeddingHTTPError, match=f"environment variable {KEY_ENV} is not set"):
        e.embed(["a"])
    with pytest.raises(RuntimeError, match="dimension unknown"):
        _ = e.dim


def test_config_validation():
    for typed in ("sk-live-abc", "pcsk_5xK9Zq_Ab3dEfGh1JkLmNoPq", "Bearer sk-x"):
        with pytest.raises(ValueError, match="api_key_env must name an environment variable") as e:
            HTTPEmbedder(model="m", base_url="https://x/v1", api_key_env=typed)
        assert typed not in str(e.value)
    with pytest.raises(ValueError, match="must not carry user:password") as e:
        HTTPEmbedder(model="m", base_url="https://me:sk-in-url-123@x/v1")
    assert "sk-in-url-123" not in str(e.value)
    with pytest.raises(ValueError, match="base_url"):
        HTTPEmbedder(model="m", base_url="x/v1")


def test_helpers():
    assert public_url("https://user:pw@api.example.com:8443/v1/embeddings?key=abc#f") == "https://api.example.com:8443/v1/embeddings"
    assert _retry_after_seconds("3") == 3.0
    assert _retry_after_seconds(None) is None
    assert _retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    assert _retry_after_seconds("soon") is None


def test_identity_names_the_endpoint_not_the_key():
    """The embedding cache key: another base_url with the same model name is another embedder."""
    a = HTTPEmbedder(model="m", base_url="http://127.0.0.1:1/v1", api_key_env=None, dim=3).identity
    b = HTTPEmbedder(model="m", base_url="http://127.0.0.1:2/v1", api_key_env=None, dim=3).identity
    q = HTTPEmbedder(model="m", base_url="http://127.0.0.1:1/v1?deployment=x", api_key_env=None, dim=3).identity
    assert a["endpoint"] == "http://127.0.0.1:1/v1/embeddings" and b["endpoint"] == "http://127.0.0.1:2/v1/embeddings"
    assert len({str(sorted(x.items())) for x in (a, b, q)}) == 3 and "deployment" not in str(q)
    assert a["model"] == "m" and a["dim"] == 3 and a["dimensions"] is None


def embedder_yaml(name: str) -> dict:
    import yaml

    from bench.resources import configs_dir

    cfg = yaml.safe_load((configs_dir() / "embedder" / f"{name}.yaml").read_text())
    cfg.pop("_target_")
    return cfg


QWEN_INSTRUCTION = "Instruct: Given a question, retrieve relevant memories from a conversation\nQuery: "


def test_qwen3_queries_carry_the_instruction_and_documents_do_not(server, key, tmp_path):
    from bench.embedders.cache import CachedEmbedder

    cfg = embedder_yaml("qwen3_openrouter")
    assert (cfg["query_prefix"], cfg["document_prefix"], cfg["dim"]) == (QWEN_INSTRUCTION, "", 4096)
    e = HTTPEmbedder(**{**cfg, "base_url": server.base_url, "api_key_env": KEY_ENV, "dim": 3, "progress": False})
    c = CachedEmbedder(e, tmp_path)
    q = c.embed_queries(["what do I like?"])
    d = c.embed_documents(["what do I like?"])
    assert [r["json"]["input"] for r in server.requests] == [[QWEN_INSTRUCTION + "what do I like?"], ["what do I like?"]]
    # the server's vector is [len, 1, 0]: the instruction makes the query's text longer, so the vectors differ
    assert not np.allclose(q, d)
    assert e.identity["query_prefix"] == QWEN_INSTRUCTION and e.identity["document_prefix"] == ""
    bare = HTTPEmbedder(**{**cfg, "base_url": server.base_url, "api_key_env": KEY_ENV, "dim": 3, "query_prefix": ""})
    assert e.model_id.startswith("http:qwen/qwen3-embedding-8b+prefix:") and bare.model_id == "http:qwen/qwen3-embedding-8b"
    c.embed_queries(["what do I like?"])
    assert len(server.requests) == 2  # cached per side


def test_the_other_api_configs():
    small = embedder_yaml("openai_3_small")
    assert (small["model"], small["dim"], small["api_key_env"], small["price_per_mtok"]) == ("text-embedding-3-small", 1536, "OPENAI_API_KEY", 0.02)
    generic = embedder_yaml("openai_compatible")
    assert generic["api_key_env"] == "EMBEDDINGS_API_KEY" and generic["price_per_mtok"] is None
    with pytest.raises(ValueError, match="price_per_mtok must be a number >= 0"):
        HTTPEmbedder(model="m", base_url="http://127.0.0.1:1/v1", api_key_env=None, price_per_mtok=-1)
    with pytest.raises(ValueError, match="query_prefix must be a string"):
        HTTPEmbedder(model="m", base_url="http://127.0.0.1:1/v1", api_key_env=None, query_prefix=None)


def test_cost_estimate_counts_uncached_model_inputs(server, key, tmp_path):
    from bench.embedders.cache import CachedEmbedder
    from bench.embedders.cost import corpus_estimate, estimate, estimate_line

    # arithmetic: 1,500,000 tokens at $0.02/M = $0.03
    assert estimate_line(estimate(3, 1_500_000, 0.02)) == "embedding 3 texts, ~1,500,000 tokens, ~$0.0300 at $0.02/M"
    assert estimate_line(estimate(3, 10, None)).endswith("(no price set: embedder.price_per_mtok, US$ per million tokens)")
    e = HTTPEmbedder(model="qwen", base_url=server.base_url, api_key_env=KEY_ENV, dim=3, progress=False,
                     query_prefix=QWEN_INSTRUCTION, price_per_mtok=0.01)
    c = CachedEmbedder(e, tmp_path)
    c.embed_documents(["good morning"])  # cached: not counted again
    # cl100k: "hello world" 2 tokens (documents, twice -> once); the query "hello world" with the instruction 18 tokens
    # (16 for the instruction, " hello", " world"); "good morning" is cached. 2 texts, 20 tokens, 20 / 1e6 * 0.01 $
    est = corpus_estimate(c, e.price_per_mtok, ["hello world", "good morning", "hello world"], ["hello world"])
    assert est == {"texts": 2, "tokens": 20, "price_per_mtok": 0.01, "usd": pytest.approx(2e-7)}
    assert corpus_estimate(e, 0.01, ["good morning"], [])["tokens"] == 2  # not a cache: every input


# --- issue 28: query strings in base URLs, redirects --------------------------------------------------

def test_join_url_keeps_the_query_string_at_the_end():
    from bench.embedders.endpoint import join_url

    assert join_url("https://h/v1?api-version=2024-02-01", "embeddings") == "https://h/v1/embeddings?api-version=2024-02-01"
    assert join_url("https://h/openai/deployments/m/?api-version=2&x=1", "chat/completions") == \
        "https://h/openai/deployments/m/chat/completions?api-version=2&x=1"
    assert join_url("http://127.0.0.1:9/v1", "embeddings") == "http://127.0.0.1:9/v1/embeddings"


def test_a_query_string_base_url_reaches_the_right_path(server, key):
    server.base_url += "?api-version=2024-02-01"
    out = make(server).embed(["ab"])
    assert out.shape == (1, 3) and [r["path"] for r in server.requests] == ["/v1/embeddings?api-version=2024-02-01"]


def test_identity_keeps_a_deployment_query_but_not_a_key_in_it():
    """A key in the query does not decide the vectors (like the Authorization header): the identity of a saved,
    redacted config is the same one; another deployment is another identity."""
    from bench.output import REDACTED

    ident = lambda url: HTTPEmbedder(model="m", base_url=url, api_key_env=None, dim=3).identity  # noqa: E731
    a = ident("http://h/v1?api-version=2&api_key=K1")
    assert a == ident("http://h/v1?api-version=2&api_key=K2") == ident(f"http://h/v1?api-version=2&api_key={REDACTED}")
    assert a != ident("http://h/v1?api-version=3&api_key=K1") and "K1" not in str(a)


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_is_refused_and_the_key_stays_home(code, key):
    from bench.tools.harden.hostile_keys import ReplyServer

    with ReplyServer(lambda r: (200, {}, b"{}")) as other, \
            ReplyServer(lambda r: (code, {"Location": f"{other.url}/v1/embeddings"}, b"{}")) as first:
        e = HTTPEmbedder(model="m", base_url=f"{first.url}/v1", api_key_env=KEY_ENV, dim=3, max_retries=0, progress=False)
        with pytest.raises(EmbeddingHTTPError) as ei:
            e.embed(["hello"])
    assert other.requests == []  # nothing reached the other origin: not the header, not the body
    msg = str(ei.value)
    assert f"{code} redirect to another origin http://127.0.0.1:" in msg and "refused" in msg and SECRET not in msg


def test_a_307_within_the_same_origin_is_followed_with_its_body_and_key(key):
    from bench.tools.harden.hostile_keys import ReplyServer, vectors

    def reply(r):
        return vectors(r, dim=3) if r["path"] == "/v2/embeddings?x=1" else (307, {"Location": "/v2/embeddings?x=1"}, b"{}")

    with ReplyServer(reply) as srv:
        out = HTTPEmbedder(model="m", base_url=f"{srv.url}/v1", api_key_env=KEY_ENV, dim=3, progress=False).embed(["a", "b"])
    assert out.shape == (2, 3)
    assert [(r["method"], r["path"], r["auth"]) for r in srv.requests] == [
        ("POST", "/v1/embeddings", f"Bearer {SECRET}"), ("POST", "/v2/embeddings?x=1", f"Bearer {SECRET}")]
    assert srv.requests[1]["json"]["input"] == ["a", "b"]
