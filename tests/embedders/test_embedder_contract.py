"""The embedder contract, checked for EVERY configs/embedder/*.yaml (found by glob: a new embedder is picked up).

Each YAML is built as the sweep builds it (``bench.plugins.instantiate``) with the network shut: a connection to
anything but 127.0.0.1 fails the test. An embedder that declares ``offline`` is built as it is; one that does not
(an API) is pointed at a loopback server speaking the OpenAI ``/embeddings`` JSON (tests/loopback.py) with no key;
its vectors say nothing about the real model, only that the client keeps the contract. ``auto`` is a choice, not
an embedder: the embedder it chooses for English texts is checked. A model whose package is not installed skips
with the install line its error gives.

Checks: the declared ``EmbedderCapabilities`` record (and the methods it promises); shape (n, dim) float32;
unit-norm rows; the same vectors for the same texts (again, and in another order); an identity that is plain JSON,
the same from two builds of the YAML and names both prefixes; the two sides (a symmetric model gives one vector per
text on both sides, an asymmetric one embeds a question as ``query_prefix + text``).
"""

from __future__ import annotations

import json
import socket
import zlib

import numpy as np
import pytest
import yaml

from bench.embedders.base import EmbedderCapabilities, TwoSided
from bench.plugins import instantiate
from bench.resources import configs_dir, plugin_names
from loopback import json_server

CONFIGS = plugin_names("embedder")  # configs/embedder/*.yaml
TEXTS = ["I adopted a dog named Rex.", "What is my job?", "我擅长什么？", "", "Rex is a beagle and loves the park."]
NORM_TOL = 1e-4
SAME_TOL = 1e-5  # the same text in another batch/order: equal up to float32 summation order
LOOPBACK_DIM = 16  # an API YAML that fixes no dimension gets vectors of this size from the loopback server


def node(name: str) -> dict:
    return yaml.safe_load((configs_dir() / "embedder" / f"{name}.yaml").read_text())


class Vectors:
    """Loopback state: an OpenAI-style embedding reply, a fixed pseudo-random unnormalised vector per input text."""

    def __init__(self, dim: int) -> None:
        self.dim, self.requests, self.base_url = dim, [], None

    def reply(self, payload):
        dim = payload.get("dimensions") or self.dim
        data = [{"object": "embedding", "index": i,
                 "embedding": (np.random.default_rng(zlib.crc32(t.encode())).normal(size=dim) * 3).tolist()}
                for i, t in enumerate(payload["input"])]
        return 200, {}, json.dumps({"object": "list", "data": data, "model": payload["model"]}).encode()


@pytest.fixture(scope="module")
def no_network():
    """Any connection to a host other than 127.0.0.1 raises (an offline embedder must never need one)."""
    real = socket.socket.connect

    def connect(sock, address):
        host = address[0] if isinstance(address, tuple) else address
        if sock.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"test_embedder_contract: network connection to {address!r} attempted")
        return real(sock, address)

    mp = pytest.MonkeyPatch()
    mp.setattr(socket.socket, "connect", connect)
    yield
    mp.undo()


def build(name: str, overrides: dict | None = None):
    """The YAML's embedder (``auto``: the one it chooses for English texts); a missing model package skips."""
    try:
        made = instantiate(node(name), **(overrides or {}))
        if name == "auto" or type(made).__name__ == "AutoEmbedder":
            made, _, _ = made.choose(["I like tea and long walks.", "What is my name?"])
        if made.capabilities.loads_lazily:
            made.check()
    except (ImportError, RuntimeError) as e:  # the model's package (an extra) is not installed here
        pytest.skip(f"{name}: {str(e).splitlines()[0]}")
    return made


def api_overrides(name: str, base_url: str) -> dict:
    n = node(name)
    out = {"base_url": base_url, "api_key_env": None, "max_retries": 0, "progress": False}
    if n.get("model") == "???":
        out["model"] = "loopback-model"
    return out


@pytest.fixture(scope="module", params=CONFIGS)
def made(request, no_network):
    """(name, embedder, a second build of the same YAML); an API (not ``offline``) against the loopback server."""
    name = request.param
    if "???" not in node(name).values():
        e = build(name)
        if e.capabilities.offline:
            yield name, e, build(name)
            return
    with json_server(Vectors(node(name).get("dim") or LOOPBACK_DIM)) as server:
        over = api_overrides(name, server.base_url)
        yield name, build(name, over), build(name, over)


def test_declares_its_capabilities(made):
    name, e, _ = made
    caps = e.capabilities
    assert isinstance(caps, EmbedderCapabilities), f"{name}: capabilities is {type(caps).__name__}"
    assert isinstance(e.model_id, str) and e.model_id, name
    if caps.counts_unknown:
        counts = e.unknown_chars(TEXTS)
        assert len(counts) == len(TEXTS) and all(type(c) is int and c >= 0 for c in counts), f"{name}: {counts}"
        assert counts[0] == 0, f"{name}: unknown characters in plain English: {counts}"
    if caps.loads_lazily:
        assert callable(e.check)
    if caps.own_progress:
        assert isinstance(e.progress, bool), f"{name}: declares a progress switch, has {getattr(e, 'progress', None)!r}"
    if caps.metered:
        assert not caps.offline, f"{name}: a metered API cannot be offline"
        assert caps.price_per_mtok is None or caps.price_per_mtok >= 0
    else:
        assert caps.price_per_mtok is None, f"{name}: a price without a metered API"


def test_shape_dtype_and_unit_norm(made):
    name, e, _ = made
    for side in (e.embed_documents, e.embed_queries):
        v = side(TEXTS)
        assert isinstance(v, np.ndarray) and v.dtype == np.float32 and v.shape == (len(TEXTS), e.dim), f"{name}: {v.shape} {v.dtype}"
        assert np.isfinite(v).all(), name
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=NORM_TOL, err_msg=name)
    assert e.embed_documents([]).shape[0] == 0


def test_same_texts_same_vectors(made):
    """Deterministic: the same texts again, in reverse order, one at a time, and from a second build of the YAML."""
    name, e, again = made
    v = e.embed_documents(TEXTS)
    assert np.array_equal(v, e.embed_documents(TEXTS)), f"{name}: two calls differ"
    np.testing.assert_allclose(e.embed_documents(TEXTS[::-1])[::-1], v, atol=SAME_TOL, err_msg=f"{name}: order changes vectors")
    np.testing.assert_allclose(e.embed_documents(TEXTS[:1])[0], v[0], atol=SAME_TOL, err_msg=f"{name}: batch changes vectors")
    np.testing.assert_allclose(again.embed_documents(TEXTS), v, atol=SAME_TOL, err_msg=f"{name}: another build, other vectors")


def test_identity_is_stable_plain_and_names_the_sides(made):
    name, e, again = made
    ident = e.identity
    assert isinstance(ident, dict) and json.loads(json.dumps(ident, sort_keys=True)) == ident, f"{name}: not plain JSON"
    assert json.dumps(again.identity, sort_keys=True) == json.dumps(ident, sort_keys=True), f"{name}: identity differs between builds"
    assert ident.get("query_prefix") == e.query_prefix and ident.get("document_prefix") == e.document_prefix, name
    assert again.model_id == e.model_id


def test_query_and_document_sides(made):
    name, e, _ = made
    docs, queries = e.embed_documents(TEXTS), e.embed_queries(TEXTS)
    if e.query_prefix == e.document_prefix:  # symmetric: one vector per text, whichever side asks
        np.testing.assert_allclose(queries, docs, atol=SAME_TOL, err_msg=name)
        return
    assert not np.allclose(queries, docs, atol=1e-3), f"{name}: prefixes {e.query_prefix!r}/{e.document_prefix!r} change nothing"
    if isinstance(e, TwoSided) and e.document_prefix == "":  # a question is its prefix + text on the memories' side
        np.testing.assert_allclose(queries, e.embed_documents([e.query_prefix + t for t in TEXTS]), atol=SAME_TOL, err_msg=name)


def test_plumbing_embedders_say_so():
    """Hand-checked: the two model-free embedders are plumbing, never results; the shipped models are results."""
    assert instantiate(node("hashing")).capabilities == EmbedderCapabilities(for_results=False)
    assert instantiate(node("synthetic")).capabilities == EmbedderCapabilities(for_results=False, cacheable=False)
    http = instantiate(node("openai_3_small"))
    assert (http.capabilities.offline, http.capabilities.metered, http.capabilities.price_per_mtok) == (False, True, 0.02)


def test_the_network_guard_refuses_an_outside_address(no_network):
    with pytest.raises(OSError, match="network connection to"):
        socket.create_connection(("192.0.2.1", 9), timeout=0.5)  # TEST-NET-1: never routed
