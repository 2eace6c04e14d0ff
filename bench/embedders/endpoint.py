"""POST JSON to an OpenAI-compatible endpoint: the one request/retry rule of every HTTP client here (the HTTP
embedder, ``bench.embedders.http``, and the LLM client, ``bench.evaluation.llm``).

``post_json`` retries 408, 429, 5xx and connection errors with exponential backoff, honouring ``Retry-After``; any
other 4xx fails at once with one clear line. Redirects are followed only within the same origin (the key is never
sent elsewhere). ``public_url`` is a URL without query or credentials (what messages and identities show),
``join_url`` appends a path before the query string, ``error_message`` reads an OpenAI-style error body, scrubbed.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from bench.output import cap
from bench.output import scrub as scrub_secrets

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 600.0
RETRY_STATUS = frozenset({408, 429})  # plus every 5xx


def public_url(url: str) -> str:
    """scheme://host[:port]/path: no query, no fragment, no user:password."""
    p = urllib.parse.urlsplit(url)
    host = p.hostname or ""
    if p.port:
        host = f"{host}:{p.port}"
    return urllib.parse.urlunsplit((p.scheme, host, p.path, "", ""))


def join_url(base_url: str, path: str) -> str:
    """``base_url`` with ``path`` appended to its path, its query string (``?api-version=...``) kept at the end:
    ``https://h/v1?api-version=2`` + ``embeddings`` -> ``https://h/v1/embeddings?api-version=2``."""
    p = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit((p.scheme, p.netloc, p.path.rstrip("/") + "/" + path.lstrip("/"), p.query, ""))


def _origin(url: str) -> tuple[str, str, int | None]:
    p = urllib.parse.urlsplit(url)
    return p.scheme.lower(), (p.hostname or "").lower(), p.port or {"http": 80, "https": 443}.get(p.scheme.lower())


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to the same origin (scheme, host, port), keeping a 307/308's method and body; a
    redirect to another origin is refused as an HTTP error saying so, so the key is never sent there."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        newurl = urllib.parse.urljoin(req.full_url, newurl)
        if _origin(newurl) != _origin(req.full_url):
            scheme, host, port = _origin(newurl)
            raise urllib.error.HTTPError(req.full_url, code, f"redirect to another origin {scheme}://{host}:{port} refused "
                                         f"(credentials are not sent across origins; set base_url to the final endpoint)",
                                         headers, fp)
        if code in (307, 308):
            return urllib.request.Request(newurl, data=req.data, headers=dict(req.header_items()), method=req.get_method())
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOriginRedirects)


def _retry_after_seconds(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def post_json(url: str, body: bytes, *, key: str | None, timeout_s: float, max_retries: int, backoff_base_s: float,
              backoff_max_s: float, label: str, scrub: Callable[[str], str], error: type[Exception], counts,
              sleep: Callable[[float], None], before: Callable[[], None] | None = None, retry_status=RETRY_STATUS,
              max_wait_s: float = MAX_RETRY_AFTER_S) -> tuple[bytes, float]:
    """POST ``body`` (JSON) to ``url`` with the retry rule of every HTTP client here (``bench.embedders.http``, ``bench.evaluation.llm``):
    ``retry_status`` (408, 429), every 5xx and connection errors are retried up to ``max_retries`` times after
    ``Retry-After`` (capped at ``max_wait_s``) or an exponential backoff; any other 4xx raises ``error`` at once. Messages start with
    ``label``, name the URL without query or credentials and pass through ``scrub`` (the key never shows).
    ``counts`` gets ``requests``/``retries`` incremented and ``post_seconds`` (the summed wall time of the round trips that
    succeeded, from 0 when it has none; bench.selection.e2e reads it as the network share); ``before`` runs before each attempt (pacing).
    Returns (the response body, seconds of the attempt that succeeded)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    where = f"POST {public_url(url)}"
    attempt = 0
    while True:
        if before is not None:
            before()
        counts.requests += 1
        wait: float | None = None
        t0 = time.perf_counter()
        try:
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            with _OPENER.open(req, timeout=timeout_s) as resp:
                raw, seconds = resp.read(), time.perf_counter() - t0
                counts.post_seconds = getattr(counts, "post_seconds", 0.0) + seconds
                return raw, seconds
        except urllib.error.HTTPError as e:
            msg = error_message(e.read() or b"", scrub)
            if e.code not in retry_status and e.code < 500:
                raise error(scrub(f"{label}: {e.code} {e.reason} from {where}: {msg}")) from None
            problem = scrub(f"{e.code} {e.reason}: {msg}")
            wait = _retry_after_seconds(e.headers.get("Retry-After") if e.headers else None)
        except (OSError, http.client.HTTPException) as e:  # URLError, refused/reset, timeout, truncated
            reason = getattr(e, "reason", e)
            problem = scrub(f"connection error: {type(reason).__name__}: {reason}")
        if attempt >= max_retries:
            raise error(f"{label}: {where} failed after {attempt + 1} attempts; last: {problem}") from None
        delay = min(max_wait_s, wait) if wait is not None else min(backoff_max_s, backoff_base_s * 2**attempt)
        attempt += 1
        counts.retries += 1
        log.warning("%s: %s: %s; retry %d/%d in %.1f s", label, where, problem, attempt, max_retries, delay)
        sleep(delay)


def error_message(body: bytes, scrub: Callable[[str], str] = scrub_secrets) -> str:
    """The server's error message from an OpenAI-style JSON error body, else the raw text: scrubbed, then cut short
    (cut first, a key's first characters would survive the scrub)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return cap(" ".join(scrub(text).split()), 300)
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return cap(" ".join(scrub(str(err)).split()), 300)
