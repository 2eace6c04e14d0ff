"""OpenAI-compatible HTTP embedder (OpenRouter, OpenAI, vLLM, ...), stdlib urllib only.

Owns the response validation for ``POST {base_url}/embeddings`` (the request/retry loop: ``bench.embedders.endpoint``) with
``{"model", "input", ["dimensions"]}``. The API key is read from the environment variable NAMED
by ``api_key_env`` at request time; it is never stored on the object, logged, or put in an error
message (error text from the server is scrubbed of it too). Retries with exponential backoff on
408, 429, 5xx and connection errors, honouring ``Retry-After``; any other 4xx fails at once with one
clear line. Vectors are checked (count, finite, dimension) and L2-normalised.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
import urllib.parse
from collections.abc import Sequence

import numpy as np

from bench.embedders.base import EmbedderCapabilities, TwoSided, sides_identity
from bench.embedders.endpoint import error_message, join_url, post_json, public_url
from bench.output import check_env_name, redact_query, register_secret, register_url_secrets
from bench.output import scrub as scrub_secrets

log = logging.getLogger(__name__)


class EmbeddingHTTPError(RuntimeError):
    """The embedding endpoint refused the request or kept failing."""


class HTTPEmbedder(TwoSided):
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint."""

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key_env: str | None = "OPENROUTER_API_KEY",
        dimensions: int | None = None,
        dim: int | None = None,
        batch_size: int = 64,
        max_retries: int = 5,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        timeout_s: float = 120.0,
        progress: bool = True,
        query_prefix: str = "",
        document_prefix: str = "",
        price_per_mtok: float | None = None,
    ) -> None:
        """dimensions: sent to the API (models with adjustable output size); dim: expected size when
        not sending ``dimensions`` (else learnt from the first response). api_key_env: None for
        endpoints without auth (a local server). query_prefix / document_prefix: put before every
        question / memory (e.g. Qwen3-Embedding's query instruction). price_per_mtok: US$ per million
        input tokens, for the cost estimate printed before a run (None: unknown)."""
        if not model:
            raise ValueError("http embedder: 'model' is required")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"http embedder: base_url must start with http:// or https:// (got {public_url(base_url)!r})")
        if "@" in urllib.parse.urlsplit(base_url).netloc:
            raise ValueError("http embedder: base_url must not carry user:password (it is not shown); put the key in the "
                             "environment variable named by api_key_env")
        if batch_size < 1 or max_retries < 0:
            raise ValueError(f"http embedder: need batch_size >= 1 and max_retries >= 0 (got {batch_size}, {max_retries})")
        if dimensions is not None and dim is not None and dim != dimensions:
            raise ValueError(f"http embedder: dim {dim} contradicts dimensions {dimensions}")
        check_env_name("http embedder: api_key_env", api_key_env)
        for name, value in (("query_prefix", query_prefix), ("document_prefix", document_prefix)):
            if not isinstance(value, str):
                raise ValueError(f"http embedder: {name} must be a string (got {type(value).__name__})")
        if price_per_mtok is not None and (isinstance(price_per_mtok, bool) or not isinstance(price_per_mtok, (int, float))
                                           or not price_per_mtok >= 0):
            raise ValueError(f"http embedder: price_per_mtok must be a number >= 0 or null (got {price_per_mtok!r})")
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.price_per_mtok = None if price_per_mtok is None else float(price_per_mtok)
        self.capabilities = EmbedderCapabilities(offline=False, metered=True, price_per_mtok=self.price_per_mtok, own_progress=True)
        self.model = model
        register_url_secrets(base_url)  # a key in the query string (?api_key=...) is scrubbed from everything written
        self.base_url = base_url.rstrip("/")
        self.url = join_url(self.base_url, "embeddings")
        self.api_key_env = api_key_env
        self.dimensions = dimensions
        self._dim = dimensions or dim
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.timeout_s = timeout_s
        self.progress = progress
        self.model_id = f"http:{model}" + (f"@{dimensions}d" if dimensions else "")
        if query_prefix or document_prefix:  # another instruction is another embedder in every table
            self.model_id += "+prefix:" + hashlib.sha256(f"{query_prefix}\0{document_prefix}".encode()).hexdigest()[:8]
        self.requests = 0  # HTTP requests sent, retries included
        self.retries = 0
        self._sleep = time.sleep  # tests replace it
        self._configured_dim = self._dim

    @property
    def identity(self) -> dict:
        """The endpoint without user:password, the model and its requested/expected size (not the key)."""
        from bench.run import code_digest

        # may select a deployment (hashed, never written) or hold a key (redacted first: like the Authorization header, a key
        # does not decide the vectors, and the redacted saved config rebuilds the same identity)
        query = redact_query(urllib.parse.urlsplit(self.url).query)
        return {"embedder": "http", "model_id": self.model_id, "model": self.model, "endpoint": public_url(self.url),
                "query_sha256": hashlib.sha256(query.encode()).hexdigest() if query else None,
                "dimensions": self.dimensions, "dim": self._configured_dim, **sides_identity(self),
                "code": code_digest("embedders/http")}

    def __repr__(self) -> str:
        return f"HTTPEmbedder(model={self.model!r}, url={public_url(self.url)!r}, api_key_env={self.api_key_env!r})"

    __str__ = __repr__

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise RuntimeError(
                f"http embedder {self.model}: dimension unknown before the first embed(); set 'dim' or 'dimensions'"
            )
        return self._dim

    def _key(self) -> str | None:
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise EmbeddingHTTPError(f"http embedder: environment variable {self.api_key_env} is not set (it must hold the API key)")
        if any(c.isspace() or not c.isprintable() for c in key):
            raise EmbeddingHTTPError(f"http embedder: environment variable {self.api_key_env} holds whitespace or a control "
                                     "character (e.g. a newline pasted with the key); the key is not shown")
        register_secret(key)
        return key

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"http embedder: texts[{i}] is {type(t).__name__}, expected str")
        if not texts:
            return np.empty((0, self._dim or 0), dtype=np.float32)
        key = self._key()
        from bench.progress import progress

        parts = []
        with progress(len(texts), f"embed {self.model}", unit="text", enabled=self.progress) as bar:
            for lo in range(0, len(texts), self.batch_size):
                batch = list(texts[lo : lo + self.batch_size])
                parts.append(self._embed_batch(batch, lo, key))
                bar.update(len(batch))
        out = np.concatenate(parts)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        zero = np.flatnonzero(norms[:, 0] == 0)
        if zero.size:
            raise ValueError(f"http embedder {self.model} (POST {public_url(self.url)}): item {int(zero[0])}: "
                             f"'embedding' is a zero vector")
        return (out / norms).astype(np.float32)

    def _embed_batch(self, batch: list[str], offset: int, key: str | None) -> np.ndarray:
        payload = {"model": self.model, "input": batch}
        if self.dimensions:
            payload["dimensions"] = self.dimensions
        data = self._post(json.dumps(payload).encode("utf-8"), key)
        return self._parse(data, len(batch), offset, key)

    def _scrub(self, text: str, key: str | None) -> str:
        """The one rule of ``bench.output.scrub`` (every form of the key and of every other known secret)."""
        return scrub_secrets(text, None) if not key else scrub_secrets(scrub_secrets(text, [key]))

    def _post(self, body: bytes, key: str | None) -> bytes:
        return post_json(self.url, body, key=key, timeout_s=self.timeout_s, max_retries=self.max_retries,
                         backoff_base_s=self.backoff_base_s, backoff_max_s=self.backoff_max_s, label="http embedder",
                         scrub=lambda text: self._scrub(text, key), error=EmbeddingHTTPError, counts=self,
                         sleep=lambda d: self._sleep(d))[0]

    def _parse(self, raw: bytes, n: int, offset: int, key: str | None) -> np.ndarray:
        who = f"http embedder {self.model} (POST {public_url(self.url)})"  # the "file" of a bad reply
        try:
            data = json.loads(raw)
        except ValueError:
            raise ValueError(f"{who}: response is not JSON: {error_message(raw, lambda t: self._scrub(t, key))}") from None
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            detail = error_message(raw, lambda t: self._scrub(t, key))
            raise ValueError(f"{who}: response has no 'data' list: {detail}")
        items = data["data"]
        if len(items) != n:
            raise ValueError(f"{who}: sent {n} texts (items {offset}..{offset + n - 1}), got {len(items)} embeddings")
        if all(isinstance(it, dict) and isinstance(it.get("index"), int) for it in items):
            items = sorted(items, key=lambda it: it["index"])
        out = np.empty((n, 0), dtype=np.float64)
        for j, it in enumerate(items):
            i = offset + j
            vec = it.get("embedding") if isinstance(it, dict) else None
            if not isinstance(vec, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vec):
                raise ValueError(f"{who}: item {i}: 'embedding' is not a list of numbers")
            if self._dim is None:
                self._dim = len(vec)
            if len(vec) != self._dim:
                raise ValueError(f"{who}: item {i}: wrong dimension {len(vec)}, expected {self._dim}")
            if not all(math.isfinite(x) for x in vec):
                raise ValueError(f"{who}: item {i}: vector contains NaN or inf")
            if j == 0:
                out = np.empty((n, self._dim), dtype=np.float64)
            out[j] = vec
        return out
