"""A chat client for any OpenAI-compatible API, its settings, its prices and an on-disk answer cache.

Settings are a plain YAML (``configs/llm/<name>.yaml`` or a path): ``base_url``, ``model``,
``api_key_env`` (the NAME of the environment variable holding the key: the key is read from the
environment at the first request, sent only in the ``Authorization`` header and never logged or
written), ``price_in`` / ``price_out`` (dollars per million input / output tokens), ``max_tokens``
(the reader's output bound), ``judge_max_tokens``, ``temperature``, ``requests_per_s`` (one request
at a time, at most this many per second), ``max_retries`` with exponential backoff on 429, 5xx and
connection errors (a ``Retry-After`` header is honoured, capped at 60 s).

Counting rule: a call's tokens are the API's ``usage`` (``prompt_tokens`` / ``completion_tokens``) when
the reply has it, else the tiktoken cl100k_base count of the message contents and of the reply
(``usage_source`` says which; a usage that is there but is not two whole counts >= 0, e.g. a negative
count, is a server's lie: counted with tiktoken, ``usage_source`` ``USAGE_INVALID``, one warning line naming
the endpoint). Estimates (the dry run) count the message contents with cl100k_base
(no per-message overhead) and take ``max_tokens`` as each call's output. Cost = in x price_in / 1e6
+ out x price_out / 1e6.

The cache holds one JSON file per call, keyed by the sha256 of (model, public base_url, the sha256 of its
query string when it has one, prompt template version, messages, max_tokens, temperature): the messages carry the context and question,
so the key is also a function of the context's hash. It never holds the key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from bench.embedders.endpoint import error_message, join_url, post_json, public_url
from bench.output import check_env_name, write_atomic

log = logging.getLogger(__name__)

RETRY_STATUS = (408, 409, 429)  # and every 5xx
MAX_RETRY_AFTER_S = 60.0
ESTIMATE_ENCODING = "cl100k_base"


class LLMError(RuntimeError):
    pass


@dataclass(frozen=True)
class LLMConfig:
    name: str
    base_url: str
    model: str
    api_key_env: str | None = None
    price_in: float = 0.0  # $ per million input tokens
    price_out: float = 0.0  # $ per million output tokens
    max_tokens: int = 64  # the reader's output bound
    judge_max_tokens: int = 16
    temperature: float = 0.0
    requests_per_s: float = 1.0
    max_retries: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        where = f"llm config {self.name}"
        if not str(self.base_url).startswith(("http://", "https://")):
            raise ValueError(f"{where}: field base_url must start with http:// or https:// (got {public_url(str(self.base_url))!r})")
        if "@" in str(self.base_url).split("//", 1)[-1].split("/", 1)[0]:
            raise ValueError(f"{where}: field base_url must not carry user:password; name the key's variable in api_key_env")
        check_env_name(f"{where}: field api_key_env", self.api_key_env)
        for f in ("price_in", "price_out", "temperature", "requests_per_s", "backoff_base_s", "backoff_max_s", "timeout_s"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or math.isinf(v):
                raise ValueError(f"{where}: field {f} must be a finite number >= 0 (got {v!r})")
        for f in ("max_tokens", "judge_max_tokens", "max_retries"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if f == "max_retries" else 1):
                raise ValueError(f"{where}: field {f} must be an integer >= {0 if f == 'max_retries' else 1} (got {v!r})")
        if not self.requests_per_s > 0:
            raise ValueError(f"{where}: field requests_per_s must be > 0")

    @property
    def endpoint(self) -> str:
        return join_url(self.base_url, "chat/completions")  # a query string (?api-version=) stays at the end

    def cost(self, tokens_in: float, tokens_out: float) -> float:
        return tokens_in * self.price_in / 1e6 + tokens_out * self.price_out / 1e6


def config_path(name: str) -> Path:
    """``name`` as a path when it is one, else the shipped ``configs/llm/<name>.yaml``."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") or p.is_file():
        return p
    from bench.resources import configs_dir

    return configs_dir() / "llm" / f"{name}.yaml"


def shipped_configs() -> list[str]:
    from bench.resources import configs_dir

    return sorted(p.stem for p in (configs_dir() / "llm").glob("*.yaml"))


def load_config(name: str) -> LLMConfig:
    import yaml

    path = config_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such LLM config (shipped: {', '.join(shipped_configs())})")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping")
    known = {f.name for f in fields(LLMConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{path}: unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
    for f in ("base_url", "model"):
        if not data.get(f):
            raise ValueError(f"{path}: field {f} is required")
    data.setdefault("name", path.stem)
    return LLMConfig(**data)


def count_tokens(text: str) -> int:
    from bench.data import tokens

    return tokens.count_tokens(text, ESTIMATE_ENCODING)


def message_tokens(messages: Sequence[Mapping[str, str]]) -> int:
    """cl100k_base tokens of the message contents (no per-message overhead)."""
    return sum(count_tokens(m["content"]) for m in messages)


# --------------------------------------------------------------------------- cache

class Cache:
    """One JSON file per call under ``root`` (``<key[:2]>/<key>.json``), written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @staticmethod
    def key(cfg: LLMConfig, version: str, messages: Sequence[Mapping[str, str]], max_tokens: int) -> str:
        ident = {"model": cfg.model, "base_url": public_url(cfg.base_url), "template": version,
                 "messages": list(messages), "max_tokens": max_tokens, "temperature": cfg.temperature}
        query = urllib.parse.urlsplit(str(cfg.base_url)).query
        if query:  # two deployments behind one URL (?deployment=, ?api-version=) answer differently; hashed: may hold a key
            ident["query_sha256"] = hashlib.sha256(query.encode()).hexdigest()
        return hashlib.sha256(json.dumps(ident, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        p = self._path(key)
        try:
            return json.loads(p.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            log.warning("%s: unreadable cache entry; it will be asked again", p)
            return None

    def put(self, key: str, record: Mapping) -> None:
        write_atomic(self._path(key), lambda p: p.write_text(json.dumps(dict(record), ensure_ascii=False)))


# --------------------------------------------------------------------------- client

@dataclass(frozen=True)
class Reply:
    text: str
    tokens_in: int
    tokens_out: int
    usage_source: str  # "api" or "tiktoken"
    latency_s: float
    cost_usd: float


class ChatClient:
    """POST ``{base_url}/chat/completions``, one request at a time, rate-limited and retried."""

    def __init__(self, cfg: LLMConfig, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self._sleep, self._clock = sleep, clock
        self._last: float | None = None
        self._key: str | None = None
        from bench.output import register_url_secrets

        register_url_secrets(cfg.base_url)  # a key in its query string: scrubbed from replies, errors and logs
        self.requests = 0
        self.retries = 0
        self.usage_invalid = 0  # replies whose usage was not two counts >= 0 (counted with tiktoken)

    def _api_key(self) -> str | None:
        env = self.cfg.api_key_env
        if env is None:
            return None
        if self._key is None:
            key = os.environ.get(env, "").strip()
            if not key:
                raise LLMError(f"llm {self.cfg.name}: environment variable {env} is not set (it must hold the API key)")
            if any(c.isspace() or not c.isprintable() for c in key):
                raise LLMError(f"llm {self.cfg.name}: environment variable {env} holds whitespace or control characters")
            from bench.output import register_secret

            register_secret(key)
            self._key = key
        return self._key

    def _scrub(self, text: str) -> str:
        from bench.output import scrub

        return scrub(text)  # the one rule: every form of every known secret (the key was registered when read)

    def _pace(self) -> None:
        gap = 1.0 / self.cfg.requests_per_s
        if self._last is not None:
            wait = self._last + gap - self._clock()
            if wait > 0:
                self._sleep(wait)
        self._last = self._clock()

    def chat(self, messages: Sequence[Mapping[str, str]], max_tokens: int) -> Reply:
        cfg = self.cfg
        key = self._api_key()
        body = json.dumps({"model": cfg.model, "messages": list(messages), "max_tokens": max_tokens,
                           "temperature": cfg.temperature}).encode("utf-8")
        raw, latency = post_json(cfg.endpoint, body, key=key, timeout_s=cfg.timeout_s, max_retries=cfg.max_retries,
                                 backoff_base_s=cfg.backoff_base_s, backoff_max_s=cfg.backoff_max_s, label=f"llm {cfg.name}",
                                 scrub=self._scrub, error=LLMError, counts=self, sleep=lambda d: self._sleep(d), before=self._pace,
                                 retry_status=RETRY_STATUS, max_wait_s=MAX_RETRY_AFTER_S)
        return self._parse(raw, messages, latency)

    def _parse(self, raw: bytes, messages: Sequence[Mapping[str, str]], latency: float) -> Reply:
        who = f"llm {self.cfg.name} (POST {public_url(self.cfg.endpoint)})"
        try:
            data = json.loads(raw)
            text = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ValueError(f"{who}: reply has no choices[0].message.content: {error_message(raw, self._scrub)}") from None
        text = self._scrub("" if text is None else str(text))  # a reply quoting the request's header: never stored
        usage = data.get("usage") if isinstance(data, dict) else None
        try:
            t_in, t_out, source = _count(usage["prompt_tokens"]), _count(usage["completion_tokens"]), "api"
        except (TypeError, KeyError, ValueError) as e:
            if isinstance(usage, Mapping) and ("prompt_tokens" in usage or "completion_tokens" in usage):  # there, but a lie
                if not self.usage_invalid:  # one line per client; every such row says so in usage_source
                    log.warning("%s: usage %s is not two token counts >= 0 (%s); such replies are counted with tiktoken "
                                "(usage_source %r)", who, self._scrub(json.dumps(usage, default=str)[:200]), e, USAGE_INVALID)
                self.usage_invalid += 1
                source = USAGE_INVALID
            else:
                source = "tiktoken"
            t_in, t_out = message_tokens(messages), count_tokens(text)
        return Reply(text, t_in, t_out, source, latency, self.cfg.cost(t_in, t_out))


USAGE_INVALID = "tiktoken (api usage invalid)"  # usage_source of a reply whose usage was negative, fractional or not a number


def _count(value) -> int:
    """A token count from a reply's usage: an integer >= 0 (a float with no fraction is accepted), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value != int(value):
        raise ValueError(f"{value!r} is not a whole number")
    if value < 0:
        raise ValueError(f"{value!r} is negative")
    return int(value)


def cached_call(client: ChatClient | None, cache: Cache, version: str, messages: Sequence[Mapping[str, str]],
                max_tokens: int, cfg: LLMConfig) -> tuple[Reply, bool]:
    """The reply from the cache when there, else from ``client`` (then cached). Returns (reply, was_cached)."""
    key = Cache.key(cfg, version, messages, max_tokens)
    hit = cache.get(key)
    if hit is not None and all(isinstance(hit.get(n), (int, float)) and hit[n] >= 0 for n in ("tokens_in", "tokens_out", "cost_usd")):
        return Reply(**{f.name: hit[f.name] for f in fields(Reply)}), True
    if hit is not None:  # written from a server's negative usage by an older version
        log.warning("%s: cached reply with negative tokens or cost; asking again", cache._path(key))
    if client is None:
        raise LLMError("llm: a call is not cached and no client was given")
    reply = client.chat(messages, max_tokens)
    cache.put(key, {f.name: getattr(reply, f.name) for f in fields(Reply)} | {"model": cfg.model, "template": version})
    return reply, False
