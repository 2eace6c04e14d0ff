"""Hostile checks, classes 1 (keys in new shapes), 2 (credentials on a redirect) and 8 (query strings in base URLs).

Each check plants a fresh random key, drives ``python -m bench`` (or a public client: ``HTTPEmbedder``,
``bench.evaluation.llm.ChatClient``) against a loopback ``ReplyServer`` defined here (self-contained, so this file runs
on an older tree too), then greps every file written and the console for the key in every shape
(``needles``: raw, any case, reversed, hex, base64 at any offset, its first 16 characters).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import string
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.tools.harden.cases import DEMO, cli_env, run_cli
from bench.tools.harden.hostile import Check

# ----------------------------------------------------------------------------- the double and the scan


class ReplyServer:
    """A loopback HTTP server whose answers a function decides: ``reply(request) -> (status, headers, body)``;
    ``request`` is ``{"method", "path" (query string included), "auth", "json"}``, kept in ``requests``."""

    def __init__(self, reply) -> None:
        self.reply = reply
        self.requests: list[dict] = []
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> "ReplyServer":
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    payload = json.loads(raw) if raw else None
                except ValueError:
                    payload = None
                req = {"method": self.command, "path": self.path, "auth": self.headers.get("Authorization"), "json": payload}
                srv.requests.append(req)
                status, headers, body = srv.reply(req)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET = _handle  # noqa: N815

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def vectors(req: dict, dim: int = 32) -> tuple[int, dict, bytes]:
    """An OpenAI-compatible ``/embeddings`` answer (deterministic vectors from the text)."""
    import hashlib

    import numpy as np

    texts = (req.get("json") or {}).get("input") or []
    rows = [np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")).standard_normal(dim).tolist()
            for t in texts]
    return 200, {}, json.dumps({"object": "list", "data": [{"index": i, "embedding": r} for i, r in enumerate(rows)]}).encode()


def error(status: int, message: str) -> tuple[int, dict, bytes]:
    return status, {}, json.dumps({"error": {"message": message, "code": status}}).encode()


def new_key(prefix: str = "sk-") -> str:
    return f"{prefix}{secrets.token_hex(20)}"


def b64_shapes(data: bytes) -> set[str]:
    """base64 (standard, URL-safe; padded or not) of ``data`` alone, and its stable middle at each byte offset."""
    out = set()
    for enc in (base64.b64encode, base64.urlsafe_b64encode):
        out |= {enc(data).decode(), enc(data).decode().rstrip("=")}
        for o in (1, 2):
            s = enc(b"\0" * o + data).decode()
            out.add(s[4 : 4 * ((o + len(data)) // 3)])
    return out


def needles(*keys: str) -> list[str]:
    """Every shape of every key to grep for: raw, upper/lower case, reversed, hex, base64, the first 16 characters."""
    out: set[str] = set()
    for k in keys:
        shapes = {k, k[::-1], k.encode().hex(), k[:16]} | b64_shapes(k.encode()) | b64_shapes(b"Bearer " + k.encode())
        shapes = {s for s in shapes if len(s) >= 12}
        for s in list(shapes):
            if not any(c in s for c in "+/=_-") or s in (k, k[::-1], k[:16]):
                shapes |= {s.upper(), s.lower()}
        out |= shapes
    return sorted(out)


def scan(root: Path, keys: list[str], console: str = "") -> dict[str, int]:
    """{file or '<console>': hits} of any shape of ``keys`` under ``root`` (gz and parquet cells too) and in ``console``."""
    from bench.tools.harden.run import secret_hits

    ns = needles(*keys)
    hits = secret_hits(root, ns)
    n = sum(console.count(x) for x in ns)
    if n:
        hits["<console>"] = n
    return hits


def verdict(hits: dict, extra_ok: bool = True, extra_why: str = "") -> tuple[bool, str]:
    if hits:
        where = ", ".join(f"{Path(p).name if p != '<console>' else p} ({n})" for p, n in list(hits.items())[:6])
        return False, f"the key leaked into {where}"
    return (True, "no shape of the key in any file or on the console") if extra_ok else (False, extra_why)


COMMON = ["dataset=own", f"dataset.path={DEMO}", "progress=false", "backend=exact", "strategy=[limit]"]


def quoted(urls: str) -> str:
    """A Hydra override value of one URL or a comma-separated sweep of them, each quoted ('=' and '&' in a query)."""
    return ",".join(f"'{u}'" for u in urls.split(","))


def http(base_url: str, *, key_env: str | None = None, model: str = "m") -> list[str]:
    return ["embedder=http", f"embedder.base_url={quoted(base_url)}", f"embedder.model={model}", "embedder.dim=32",
            "embedder.max_retries=0", f"embedder.api_key_env={key_env or 'null'}"]


def cli(d: Path, args: list[str], **env: str):
    e = cli_env()
    e.update(env)
    multi = ["-m"] if args[:1] == ["-m"] else []
    proc = run_cli([*multi, f"paths.reports={d / 'reports'}", *args[len(multi):]], env=e, timeout_s=120)
    return proc, proc.stdout + proc.stderr


@contextlib.contextmanager
def environ(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ----------------------------------------------------------------------------- class 1: keys in new shapes


def query_key_run(d: Path) -> tuple[bool, str]:
    key = new_key("qk-")

    def reply(req):  # accepts the key wherever the client put the query string
        return vectors(req) if f"api_key={key}" in req["path"] else error(401, "no key")

    with ReplyServer(reply) as srv:
        proc, out = cli(d, [*http(f"{srv.url}/v1?api_key={key}"), *COMMON])
    if proc.returncode != 0:
        return False, f"the run failed (exit {proc.returncode}): {out.strip().splitlines()[-1:]}"
    return verdict(scan(d, [key], out))


def env_field_key(shape: str):
    def run(d: Path) -> tuple[bool, str]:
        if shape == "hex":
            key = "d" + secrets.token_hex(20)
        else:  # upper case letters and digits, no '_': a key, not a variable name
            key = "K" + "".join(secrets.choice(string.ascii_uppercase[6:] + string.digits) for _ in range(31))
        with ReplyServer(vectors) as srv:
            proc, out = cli(d, ["-m", *http(f"{srv.url}/v1", key_env=key), *COMMON])
        refused = proc.returncode != 0 or list((d / "reports").rglob("failed.json"))
        return verdict(scan(d, [key], out), bool(refused), "the key typed into api_key_env was not refused")

    return run


TRANSFORMS = {"base64": lambda k: base64.b64encode(f"Bearer {k}".encode()).decode(), "hex": lambda k: k.encode().hex(),
              "upper": str.upper, "reversed": lambda k: k[::-1], "urlsafe-base64": lambda k: base64.urlsafe_b64encode(k.encode()).decode().rstrip("=")}


def transformed_echo(d: Path) -> tuple[bool, str]:
    key = new_key("ek-")

    def reply(req):
        mode = req["path"].strip("/").split("/")[0]
        got = (req["auth"] or "").removeprefix("Bearer ")
        return error(401, f"Incorrect API key provided: {TRANSFORMS[mode](got)}")

    with ReplyServer(reply) as srv:
        urls = ",".join(f"{srv.url}/{m}/v1" for m in TRANSFORMS)
        proc, out = cli(d, ["-m", *http(urls, key_env="RB_HOSTILE_ECHO_KEY"), *COMMON], RB_HOSTILE_ECHO_KEY=key)
    failed = [p for p in (d / "reports").rglob("failed.json") if p.parent.name.startswith("job")]
    return verdict(scan(d, [key], out), len(failed) == len(TRANSFORMS), f"{len(failed)} failed.json for {len(TRANSFORMS)} jobs")


def long_error(d: Path) -> tuple[bool, str]:
    key = new_key("lk-")

    def reply(req):  # the key starts at character 280 of the message: a cut at 300 keeps its first 20
        got = (req["auth"] or "").removeprefix("Bearer ")
        return error(401, "x" * 250 + " the key you sent: " + got + " is not valid here")

    with ReplyServer(reply) as srv:
        proc, out = cli(d, [*http(f"{srv.url}/v1", key_env="RB_HOSTILE_LONG_KEY"), *COMMON], RB_HOSTILE_LONG_KEY=key)
    return verdict(scan(d, [key], out), proc.returncode != 0, "the run did not fail")


def multirun_override(d: Path) -> tuple[bool, str]:
    key = new_key("mk-")
    with ReplyServer(vectors) as srv:
        proc, out = cli(d, ["-m", *http(f"{srv.url}/v1", model="a,b"), f"+embedder.api_key={key}", *COMMON])
    seen = list((d / "reports").rglob("multirun.yaml"))
    return verdict(scan(d, [key], out), bool(seen), "no multirun.yaml was written")


def multirun_stopped_early(d: Path) -> tuple[bool, str]:
    key = new_key("mk-")
    proc, out = cli(d, ["-m", "embedder=hashing", f"+embedder.api_key={key}", "dataset=own", f"dataset.path={DEMO}",
                        "strategy=limit,no_such_strategy"])
    seen = list((d / "reports").rglob("multirun.yaml"))
    return verdict(scan(d, [key], out), bool(seen) and proc.returncode != 0, f"exit {proc.returncode}, multirun.yaml: {bool(seen)}")


def regress_baseline(d: Path) -> tuple[bool, str]:
    key = new_key("rk-")

    def reply(req):
        return vectors(req) if f"api_key={key}" in req["path"] else error(401, "no key")

    with ReplyServer(reply) as srv:
        e = cli_env()
        args = ["-m", "bench.tools.regress", "--write-baseline", "--demo", "--baseline-root", str(d / "baseline"),
                "--out", str(d / "regress"), *http(f"{srv.url}/v1?api_key={key}"), "backend=exact", "strategy=[limit]",
                "regress.latency_repeats=1", "regress.latency_queries=20", "regress.latency_warmup=0",
                f"paths.reports={d / 'reports'}"]
        import subprocess

        from bench.tools.harden.cases import REPO

        proc = subprocess.run([sys.executable, *args], cwd=REPO, env=e, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    written = list((d / "baseline").rglob("README.md"))
    return verdict(scan(d, [key], out), proc.returncode == 0 and bool(written),
                   f"no baseline written (exit {proc.returncode}): {out.strip().splitlines()[-1:]}")


def llm_quotes_header(d: Path) -> tuple[bool, str]:
    from bench.evaluation import llm

    key = new_key("ak-")

    def reply(req):  # a reply that quotes the request's header back
        content = f"You sent Authorization: {req['auth']} ({base64.b64encode(req['auth'].encode()).decode()})"
        return 200, {}, json.dumps({"choices": [{"message": {"content": content}}],
                                    "usage": {"prompt_tokens": 3, "completion_tokens": 9}}).encode()

    with ReplyServer(reply) as srv, environ(RB_HOSTILE_LLM_KEY=key):
        cfg = llm.LLMConfig(name="hostile", base_url=f"{srv.url}/v1", model="m", api_key_env="RB_HOSTILE_LLM_KEY")
        client = llm.ChatClient(cfg, sleep=lambda s: None)
        cache = llm.Cache(d / "answers")
        reply_, _ = llm.cached_call(client, cache, "v1", [{"role": "user", "content": "Q?"}], 20, cfg)
        (d / "answers.csv").write_text(f"question_id,answer\nq1,{json.dumps(reply_.text)}\n")  # what bench.cli.answer stores
    return verdict(scan(d, [key]), bool(srv.requests and srv.requests[0]["auth"]), "the key was not sent")


# ----------------------------------------------------------------------------- class 2: redirects


def redirect(code: int, *, llm_client: bool = False, same_origin: bool = False):
    def run(d: Path) -> tuple[bool, str]:
        key = new_key("xk-")
        with ReplyServer(vectors if not llm_client else lambda r: (200, {}, json.dumps(
                {"choices": [{"message": {"content": "ok"}}]}).encode())) as other:
            def reply(req):
                if same_origin and req["path"].startswith("/v2/"):
                    return vectors(req)
                target = f"{srv_url[0]}/v2/embeddings" if same_origin else f"{other.url}/v1/{req['path'].rsplit('/', 1)[-1]}"
                return code, {"Location": target}, b"{}"

            srv_url = [""]
            with ReplyServer(reply) as srv, environ(RB_HOSTILE_REDIRECT_KEY=key):
                srv_url[0] = srv.url
                try:
                    if llm_client:
                        from bench.evaluation import llm

                        cfg = llm.LLMConfig(name="hostile", base_url=f"{srv.url}/v1", model="m", api_key_env="RB_HOSTILE_REDIRECT_KEY",
                                            max_retries=0)
                        llm.ChatClient(cfg, sleep=lambda s: None).chat([{"role": "user", "content": "Q?"}], 5)
                    else:
                        from bench.embedders.http import HTTPEmbedder

                        HTTPEmbedder(model="m", base_url=f"{srv.url}/v1", api_key_env="RB_HOSTILE_REDIRECT_KEY", dim=32,
                                     max_retries=0, progress=False).embed(["hello"])
                    message = ""
                except Exception as e:  # noqa: BLE001
                    message = f"{type(e).__name__}: {e}"
        if same_origin:
            ok = not message and len(srv.requests) == 2 and srv.requests[1]["json"] is not None
            return ok, "followed within the origin, body kept" if ok else f"not followed: {message[:200]}"
        leaked = [r for r in other.requests if key in (r["auth"] or "")]
        if leaked:
            return False, f"the other origin received the Authorization header ({leaked[0]['method']} {leaked[0]['path']})"
        if key in message:
            return False, "the error echoes the key"
        says = "another origin" in message
        return says, "refused, and the error says so" if says else f"refused but not said so: {message[:200] or 'no error'}"

    return run


# ----------------------------------------------------------------------------- class 8: query strings


def query_version_embedder(d: Path) -> tuple[bool, str]:
    sig = new_key("sg-")
    query = f"api-version=2024-02-01&sig={sig}"

    def reply(req):
        return vectors(req) if req["path"] == f"/v1/embeddings?{query}" else error(404, f"no route {req['path'][:40]}")

    with ReplyServer(reply) as srv:
        proc, out = cli(d, [*http(f"{srv.url}/v1?{query}"), *COMMON])
        paths = sorted({r["path"].split("?")[0] + ("?..." if "?" in r["path"] else "") for r in srv.requests})
    if proc.returncode != 0:
        return False, f"the run failed (exit {proc.returncode}); request paths: {paths}"
    cfg = next((d / "reports").rglob("config_resolved.yaml"), None)
    kept = cfg is not None and "api-version=2024-02-01" in cfg.read_text()
    return verdict(scan(d, [sig], out), kept, "config_resolved.yaml lost the api-version")


def query_version_llm(d: Path) -> tuple[bool, str]:
    from bench.evaluation import llm

    with ReplyServer(lambda r: (200, {}, json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode())) as srv:
        cfg = llm.LLMConfig(name="hostile", base_url=f"{srv.url}/openai/deployments/m?api-version=2024-02-01", model="m")
        try:
            llm.ChatClient(cfg, sleep=lambda s: None).chat([{"role": "user", "content": "Q?"}], 5)
        except Exception as e:  # noqa: BLE001
            return False, f"{type(e).__name__}: {str(e)[:200]}"
    path = srv.requests[0]["path"] if srv.requests else ""
    ok = path == "/openai/deployments/m/chat/completions?api-version=2024-02-01"
    return ok, f"request went to {path}"


CHECKS = [
    Check(1, "a key in base_url's query string (?api_key=) of a run that succeeds", query_key_run),
    Check(1, "a hex key typed into embedder.api_key_env (multirun)", env_field_key("hex")),
    Check(1, "an upper-case key typed into embedder.api_key_env (multirun)", env_field_key("upper")),
    Check(1, "servers echo the key transformed (base64 of the header, hex, upper-case, reversed, URL-safe base64)",
          transformed_echo),
    Check(1, "an error text longer than 300 characters with the key at the cut", long_error),
    Check(1, "a +embedder.api_key=KEY override in a multirun (multirun.yaml)", multirun_override),
    Check(1, "a +embedder.api_key=KEY override in a multirun that stops before its first job (multirun.yaml)",
          multirun_stopped_early),
    Check(1, "regress --write-baseline with a key in base_url's query string (baseline README.md, meta.json)",
          regress_baseline),
    Check(1, "an LLM reply quoting the request's Authorization header (answer cache, answers)", llm_quotes_header),
    Check(2, "embedding endpoint answers 302 to another origin", redirect(302)),
    Check(2, "embedding endpoint answers 307 to another origin", redirect(307)),
    Check(2, "LLM endpoint answers 303 to another origin", redirect(303, llm_client=True)),
    Check(2, "embedding endpoint answers 308 within its own origin (followed, body kept)", redirect(308, same_origin=True)),
    Check(8, "embedding base_url with ?api-version=...&sig=... (request path, sig redacted, api-version kept)",
          query_version_embedder),
    Check(8, "LLM base_url with ?api-version=... (request path)", query_version_llm),
]
