"""``make harden`` (``python -m bench.tools.harden.run``): bad input, planted secrets, store faults and load, with figures.

Owns the hardening suite and the test doubles it needs:

* ``CASES``: the table of malformed input (own format, LoCoMo, LongMemEval, HTTP embedder replies,
  CLI overrides), ``observe(case, dir)`` runs one and ``judge(case, obs)`` says whether it was handled:
  a one-line error (ValueError / FileNotFoundError in the library, the user-facing line of the CLI)
  naming file, record and field, or the documented report-and-skip (a ``Defect``), never a
  traceback and never a half-written result. ``tests/test_bad_input.py`` runs the same table.
* ``FaultBackend``: a store that fails on purpose (raise, time out, kill a real server, crash the
  process), built by the CLI through ``backend._target_=bench.tools.harden.run.FaultBackend``.
* ``EmbeddingServer``: an OpenAI-compatible ``/embeddings`` server on 127.0.0.1 with bad-reply modes.
* ``secret_hits``: every occurrence of planted secrets in every file under a directory (parquet
  cells included).
* ``main``: runs the table, the planted-secret scan, the fault scenarios (a multirun with failing
  stores and real servers killed mid-run, its resume, a crash mid-run and a kill during a write) and
  a short load run (``bench.tools.load``), and prints the figures. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from bench.resources import demo_dir
from bench.tools.common import entry, parser, setup_logging, work_dir

log = logging.getLogger("bench.tools.harden.run")

REPO = work_dir()  # where the command runs (the sweep's paths.root): reports/ and caches go there, never into the package
DEMO = demo_dir()
TRACEBACK = "Traceback (most recent call last)"
CLEAR_ERRORS = ("ValueError", "FileNotFoundError")  # what the library raises for bad input


# ----------------------------------------------------------------------------- fault-injection store

def _plain(node) -> dict:
    """A Hydra DictConfig or a mapping -> a plain dict (nested values converted too)."""
    if node is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(node, DictConfig):
            return OmegaConf.to_container(node, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return dict(node)


class FaultBackend:
    """A real store (``inner``, a backend class path) that fails on purpose at search number ``after``.

    fault: ``none`` (pass through), ``raise`` (RuntimeError), ``timeout`` (blocks ``delay_s`` then
    raises TimeoutError, like a client-side timeout), ``kill`` (SIGKILL the process group
    ``kill_pid`` -- a real server started by bench.backends.servers -- then call the real search, which
    fails as it would in production), ``crash`` (SIGKILL this process: power cut / OOM kill).
    """

    def __init__(self, collection: str = "recallbench", fault: str = "none", after: int = 8, delay_s: float = 1.0,
                 kill_pid: int | None = None, inner: str = "bench.backends.exact.ExactBackend",
                 inner_kwargs=None) -> None:
        if fault not in ("none", "raise", "timeout", "kill", "crash"):
            raise ValueError(f"FaultBackend: unknown fault {fault!r}")
        if fault == "kill" and not kill_pid:
            raise ValueError("FaultBackend: fault 'kill' needs kill_pid")
        module, _, cls = inner.rpartition(".")
        self._inner = getattr(importlib.import_module(module), cls)(collection=collection, **_plain(inner_kwargs))
        self.fault, self.after, self.delay_s, self.kill_pid = fault, int(after), float(delay_s), kill_pid
        self.name = self._inner.name if fault == "none" else f"{self._inner.name}+{fault}"
        self.capabilities = self._inner.capabilities
        self.path = getattr(self._inner, "path", None)
        self.searches = 0

    def open(self, *, dim: int, metric: str = "cosine") -> None:
        self._inner.open(dim=dim, metric=metric)

    def add(self, batch) -> None:
        self._inner.add(batch)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        self._inner.wait_ready(timeout_s)

    def search(self, vector, *, k: int, where):
        self.searches += 1
        if self.searches == self.after:
            if self.fault == "raise":
                raise RuntimeError(f"injected fault: the store raised on search {self.searches}")
            if self.fault == "timeout":
                log.warning("injected fault: search %d blocks for %.1f s", self.searches, self.delay_s)
                time.sleep(self.delay_s)
                raise TimeoutError(f"injected fault: the store did not answer search {self.searches} "
                                   f"within {self.delay_s:.1f} s")
            if self.fault == "crash":
                log.warning("injected fault: killing this process (pid %d) mid-run", os.getpid())
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "kill":
                log.warning("injected fault: killing the server process group %d mid-run", self.kill_pid)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(self.kill_pid), signal.SIGKILL)
                time.sleep(0.5)  # the kernel closes its sockets once it is gone
        return self._inner.search(vector, k=k, where=where)

    def close(self) -> None:
        self._inner.close()

    def drop(self) -> None:
        self._inner.drop()


# ----------------------------------------------------------------------------- loopback embeddings server

EMBED_MODES = ("ok", "nan", "inf", "wrong_dim", "wrong_count", "not_json", "zero", "not_numbers", "reject")


def _vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).tolist()


class EmbeddingServer:
    """OpenAI-compatible ``POST /<mode>/v1/embeddings`` on 127.0.0.1 (a test double, not a model).

    ``ok`` answers deterministic vectors (a hash of the text seeds them); the other modes answer what
    a broken endpoint might: NaN/inf values, a wrong dimension or count, an HTML page, a zero vector,
    strings instead of numbers, or 401 with the received key echoed back (as some services do).
    A request whose ``model`` is a mode name gets that mode whatever the path.
    When ``key`` is set, requests must carry ``Authorization: Bearer <key>`` (else 401, key echoed).
    """

    def __init__(self, *, dim: int = 32, key: str | None = None) -> None:
        self.dim, self.key = dim, key
        self.requests = 0
        self.authorised = 0  # requests that carried the expected key
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "EmbeddingServer not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def base_url(self, mode: str = "ok") -> str:
        return f"{self.url}/{mode}/v1"

    def start(self) -> "EmbeddingServer":
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                srv.requests += 1
                mode = self.path.strip("/").split("/")[0]
                payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if payload.get("model") in EMBED_MODES:  # the model name may pick the mode too
                    mode = payload["model"]
                got = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                if mode == "reject" or (srv.key and got != srv.key):
                    msg = {"error": {"message": f"Incorrect API key provided: {got}", "code": 401}}
                    return self._send(401, json.dumps(msg).encode())
                if srv.key:
                    srv.authorised += 1
                texts = payload.get("input") or []
                dim = srv.dim + (1 if mode == "wrong_dim" else 0)
                rows = [_vector(t, dim) for t in texts]
                if mode == "nan" and rows:
                    rows[-1][0] = float("nan")
                if mode == "inf" and rows:
                    rows[-1][1] = float("inf")
                if mode == "zero" and rows:
                    rows[-1] = [0.0] * dim
                if mode == "wrong_count":
                    rows = rows[:-1]
                if mode == "not_json":
                    return self._send(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
                data = [{"object": "embedding", "index": i, "embedding": r if mode != "not_numbers" else [str(x) for x in r]}
                        for i, r in enumerate(rows)]
                return self._send(200, json.dumps({"object": "list", "data": data, "model": payload.get("model")}).encode())

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="embedding-server", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "EmbeddingServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ----------------------------------------------------------------------------- the bad-input table

TURNS = [
    {"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "I adopted a dog named Rex."},
    {"conversation_id": "c1", "turn_id": "t2", "role": "assistant", "text": "Rex is a great name."},
    {"conversation_id": "c1", "turn_id": "t3", "role": "user", "text": "I work night shifts as a nurse."},
]
QUESTIONS = [{"question_id": "q1", "conversation_id": "c1", "text": "What is my dog called?", "evidence": ["t1"]}]
DROP = object()  # a field value meaning "remove this field"
MIXED = "Zoë 我养了一只狗 اسمه ركس 🐕‍🦺 e\u0301 \u200bfin"  # CJK, Arabic (RTL), emoji ZWJ sequence, combining mark, zero-width space


def _jl(rows) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode("utf-8")


def _edit(rows: list[dict], i: int, **changes) -> list:
    out = [dict(r) for r in rows]
    for k, v in changes.items():
        if v is DROP:
            out[i].pop(k, None)
        else:
            out[i][k] = v
    return out


def own(turns=None, questions=None, **extra: bytes) -> tuple[tuple[str, bytes], ...]:
    """Files of an own-format dataset: ``turns`` / ``questions`` as rows (dicts or raw lines) or bytes."""
    t = turns if isinstance(turns, bytes) else _jl(TURNS if turns is None else turns)
    q = questions if isinstance(questions, bytes) else _jl(QUESTIONS if questions is None else questions)
    files = {"turns.jsonl": t, "questions.jsonl": q, **{k.replace("__", "."): v for k, v in extra.items()}}
    return tuple((k, v) for k, v in files.items() if v is not None)


CSV_HEAD = "conversation_id,turn_id,role,text,session\n"
LOCOMO = [{
    "sample_id": "conv-x",
    "conversation": {"speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
                     "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog."},
                                   {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice, what is its name?"}]},
    "qa": [{"question": "What did Ann adopt?", "answer": "a dog", "evidence": ["D1:1"], "category": 4}],
}]
LME = {
    "question_id": "q1", "question_type": "single-session-user", "question": "What pet did I adopt?", "answer": "a dog",
    "question_date": "2023/05/20 (Sat) 03:02", "haystack_session_ids": ["answer_1"],
    "haystack_dates": ["2023/05/20 (Sat) 02:00"], "answer_session_ids": ["answer_1"],
    "haystack_sessions": [[{"role": "user", "content": "I adopted a dog.", "has_answer": True},
                           {"role": "assistant", "content": "Congratulations!"}]],
}


def locomo(edit: Callable[[list], object] | None = None, raw: bytes | None = None) -> tuple[tuple[str, bytes], ...]:
    data = json.loads(json.dumps(LOCOMO))
    if edit:
        edit(data)
    return (("locomo10.json", raw if raw is not None else json.dumps(data).encode()),)


def lme(edit: Callable[[dict], object] | None = None) -> tuple[tuple[str, bytes], ...]:
    data = json.loads(json.dumps(LME))
    if edit:
        edit(data)
    return (("lme/q1.json", json.dumps(data).encode()),)


@dataclass(frozen=True)
class Case:
    """One kind of bad input. ``expect``: substrings of the one-line error ("{d}" = the case directory,
    "{http}" = the embedding server), or of the reported Defect's file/record/field.

    outcome: ``error`` (a clear one-line error), ``defect:<kind>`` (reported and skipped under the
    loader's documented policy), ``ok`` (valid input that must simply work; ``check`` confirms it).
    ``gap``: why it is not handled yet (the change needed outside this module), or "".
    """

    kind: str
    layer: str  # "own" | "locomo" | "longmemeval" | "http" | "cli"
    expect: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()
    outcome: str = "error"
    overrides: tuple[str, ...] = ()  # cli
    mode: str = ""  # http: the EmbeddingServer mode
    check: Callable[[object], bool] | None = None  # outcome "ok": the loaded corpus passes this
    gap: str = ""


def _mixed_ok(corpus) -> bool:
    from bench.embedders.hashing import HashingEmbedder
    from bench.tokens import count_tokens_many

    text = corpus.turns()[1].text
    v = HashingEmbedder(dim=64).embed([text])
    return text == MIXED and bool(np.isfinite(v).all()) and count_tokens_many([text], "cl100k_base")[0] > 0


CASES: tuple[Case, ...] = (
    # --- own format: turns.jsonl
    Case("JSONL: malformed line", "own", ("{d}/turns.jsonl:2: malformed JSON",),
         own([TURNS[0], '{"conversation_id": "c1", "turn_id": "t2",', TURNS[2]])),
    Case("JSONL: line is not an object", "own", ("{d}/turns.jsonl:2: expected a JSON object, got list",),
         own([TURNS[0], '["c1", "t2"]', TURNS[2]])),
    Case("missing field: text", "own", ("{d}/turns.jsonl:2 (turn_id 't2'): field 'text' is required",),
         own(_edit(TURNS, 1, text=DROP))),
    Case("missing field: conversation_id", "own", ("{d}/turns.jsonl:2 (turn_id 't2'): field 'conversation_id' is required",),
         own(_edit(TURNS, 1, conversation_id=DROP))),
    Case("wrong type: turn_id is a number", "own", ("{d}/turns.jsonl:2: field 'turn_id' must be a string, got 7",),
         own(_edit(TURNS, 1, turn_id=7))),
    Case("wrong type: text is a list", "own", ("{d}/turns.jsonl:2 (turn_id 't2'): field 'text' must be a string, got ['hi']",),
         own(_edit(TURNS, 1, text=["hi"]))),
    Case("unknown role", "own", ("{d}/turns.jsonl:2 (turn_id 't2'): field 'role' must be \"user\" or \"assistant\", got 'bot'",),
         own(_edit(TURNS, 1, role="bot"))),
    Case("empty text", "own", ("{d}/turns.jsonl:2 (turn_id 't2'): field 'text' must be a non-empty string",),
         own(_edit(TURNS, 1, text="   "))),
    Case("huge text (100,001 characters)", "own", ("{d}/turns.jsonl:2 (turn_id 't2'): field 'text' has 100,001 characters",),
         own(_edit(TURNS, 1, text="x" * 100_001))),
    Case("duplicate turn_id", "own", ("{d}/turns.jsonl:2 (turn_id 't1'): field 'turn_id' duplicate in conversation 'c1'",),
         own(_edit(TURNS, 1, turn_id="t1"))),
    Case("timestamp is not a date", "own", ("{d}/turns.jsonl:2 (turn_id 't2'): field 'timestamp' must be an ISO-8601",),
         own(_edit(TURNS, 1, timestamp="last Tuesday"))),
    Case("timestamp is NaN", "own", ("{d}/turns.jsonl:2 (turn_id 't2'): field 'timestamp' must be a finite number",),
         own([TURNS[0], json.dumps({**TURNS[1], "timestamp": float("nan")}), TURNS[2]])),
    Case("timestamp is a boolean", "own", ("{d}/turns.jsonl:2 (turn_id 't2'): field 'timestamp' must be an ISO-8601 string, a number",),
         own(_edit(TURNS, 1, timestamp=True))),
    Case("negative session", "own", ("{d}/turns.jsonl:2 (turn_id 't2'): field 'session' must be >= 0, got -1",),
         own(_edit(TURNS, 1, session=-1))),
    Case("non-UTF-8 bytes", "own", ("{d}/turns.jsonl:2: not valid UTF-8 (byte offset",),
         own(_jl(TURNS[:1]) + b'{"conversation_id": "c1", "turn_id": "t2", "role": "user", "text": "caf\xe9"}\n')),
    Case("unpaired surrogate escape in text", "own",
         ("{d}/turns.jsonl:2 (turn_id 't2'): field 'text' holds an unpaired surrogate \\ud800",),
         own(_edit(TURNS, 1, text="broken \ud800 text"))),
    Case("'|' inside conversation_id (memory ids would collide)", "own",
         ("{d}/turns.jsonl:1 (turn_id 't1'): field 'conversation_id' must not contain '|'",),
         own(_edit(TURNS, 0, conversation_id="a|b"))),
    Case("empty turns file", "own", ("{d}/turns.jsonl: holds no turns",), own(b"\n\n", None)),
    Case("unknown extra field", "own", ("{d}/turns.jsonl", "line 1", "mood"), own(_edit(TURNS, 0, mood="happy")),
         outcome="defect:unknown_field"),
    Case("UTF-8 byte-order mark", "own", (), own(b"\xef\xbb\xbf" + _jl(TURNS)), outcome="ok",
         check=lambda c: c.turns()[0].conversation_id == "c1"),
    Case("blank and whitespace-only lines", "own", (), own(b"\n   \n" + _jl(TURNS) + b"\n\t\n"), outcome="ok",
         check=lambda c: len(c.turns()) == 3),
    Case("mixed scripts (CJK, Arabic, emoji ZWJ, combining marks, zero-width space)", "own", (),
         own(_edit(TURNS, 1, text=MIXED)), outcome="ok", check=_mixed_ok),
    # --- own format: questions.jsonl and the directory
    Case("duplicate question_id", "own", ("{d}/questions.jsonl:2 (question_id 'q1'): field 'question_id' duplicate",),
         own(None, QUESTIONS + QUESTIONS)),
    Case("question names an unknown conversation", "own",
         ("{d}/questions.jsonl:1 (question_id 'q1'): field 'conversation_id' names unknown conversation 'c9'",),
         own(None, _edit(QUESTIONS, 0, conversation_id="c9"))),
    Case("evidence pointing nowhere", "own", ("{d}/questions.jsonl", "line 1 (q1)", "evidence[1]"),
         own(None, _edit(QUESTIONS, 0, evidence=["t1", "t99"])), outcome="defect:evidence_not_found"),
    Case("evidence is not a list", "own", ("{d}/questions.jsonl:1 (question_id 'q1'): field 'evidence' must be a list",),
         own(None, _edit(QUESTIONS, 0, evidence="t1"))),
    Case("evidence item is not a string", "own", ("{d}/questions.jsonl:1 (question_id 'q1'): field 'evidence[0]' must be a string",),
         own(None, _edit(QUESTIONS, 0, evidence=[1]))),
    Case("adversarial is not a boolean", "own", ("{d}/questions.jsonl:1 (question_id 'q1'): field 'adversarial' must be a boolean",),
         own(None, _edit(QUESTIONS, 0, adversarial="yes"))),
    Case("empty questions file", "own", ("{d}/questions.jsonl: holds no questions",), own(None, b"")),
    Case("missing questions file", "own", ("dataset path not found: {d}/questions.jsonl",), (("turns.jsonl", _jl(TURNS)),)),
    Case("both turns.jsonl and turns.csv", "own", ("{d}: holds both turns.jsonl and turns.csv",),
         own(None, None, turns__csv=CSV_HEAD.encode())),
    Case("CSV: row with too many cells", "own", ("{d}/turns.csv:3: has 6 cells, header has 5",),
         (("turns.csv", (CSV_HEAD + "c1,t1,user,hi,0\nc1,t2,user,hi,0,extra\n").encode()), ("questions.jsonl", _jl(QUESTIONS)))),
    Case("CSV: header lacks a required column", "own", ("{d}/turns.csv:1: header lacks required column(s) role",),
         (("turns.csv", b"conversation_id,turn_id,text\nc1,t1,hi\n"), ("questions.jsonl", _jl(QUESTIONS)))),
    Case("CSV: session is not an integer", "own", ("{d}/turns.csv:2 (turn_id 't1'): field 'session' must be an integer, got 'one'",),
         (("turns.csv", (CSV_HEAD + "c1,t1,user,hi,one\n").encode()), ("questions.jsonl", _jl(QUESTIONS)))),
    Case("data path does not exist", "own", ("dataset path not found: {d}/nowhere",), outcome="error"),
    # --- LoCoMo
    Case("LoCoMo: top level is not a list", "locomo", ("{d}/locomo10.json: expected a JSON list of conversations, got dict",),
         locomo(raw=json.dumps(LOCOMO[0]).encode())),
    Case("LoCoMo: truncated file", "locomo", ("{d}/locomo10.json:1: malformed JSON",), locomo(raw=json.dumps(LOCOMO).encode()[:-40])),
    Case("LoCoMo: missing sample_id", "locomo", ("{d}/locomo10.json: record [0]: missing field 'sample_id'",),
         locomo(lambda d: d[0].pop("sample_id"))),
    Case("LoCoMo: speaker is neither speaker_a nor speaker_b", "locomo",
         ("{d}/locomo10.json: record conv-x/session_1[1]: field 'speaker': 'Eve' is neither",),
         locomo(lambda d: d[0]["conversation"]["session_1"][1].update(speaker="Eve"))),
    Case("LoCoMo: malformed evidence id D:1:1", "locomo", ("{d}/locomo10.json", "conv-x/qa[0]", "evidence[0]"),
         locomo(lambda d: d[0]["qa"][0].update(evidence=["D:1:1"])), outcome="defect:evidence_malformed"),
    Case("LoCoMo: unpaired surrogate in a turn", "locomo",
         ("{d}/locomo10.json: record conv-x/session_1[0]: field 'text' holds an unpaired surrogate",),
         locomo(lambda d: d[0]["conversation"]["session_1"][0].update(text="dog \udc80"))),
    # --- LongMemEval
    Case("LongMemEval: haystack fields differ in length", "longmemeval",
         ("{d}/lme/q1.json: record q1: fields 'haystack_sessions', 'haystack_dates', 'haystack_session_ids' differ in length",),
         lme(lambda d: d["haystack_dates"].append("2023/05/21 (Sun) 02:00"))),
    Case("LongMemEval: role 'system'", "longmemeval",
         ("{d}/lme/q1.json: record q1: field 'haystack_sessions[0][1].role' must be \"user\" or \"assistant\", got 'system'",),
         lme(lambda d: d["haystack_sessions"][0][1].update(role="system"))),
    Case("LongMemEval: unparseable session date", "longmemeval", ("{d}/lme/q1.json", "q1", "haystack_dates[0]"),
         lme(lambda d: d.update(haystack_dates=["someday"])), outcome="defect:date_unparseable"),
    # --- HTTP embedder replies (the "file" is the endpoint, the record the item, the field 'embedding')
    Case("HTTP embedder: NaN in a vector", "http", ("http embedder m (POST {http}/nan/v1/embeddings): item 2: vector contains NaN",), mode="nan"),
    Case("HTTP embedder: inf in a vector", "http", ("(POST {http}/inf/v1/embeddings): item 2: vector contains NaN or inf",), mode="inf"),
    Case("HTTP embedder: wrong dimension", "http", ("(POST {http}/wrong_dim/v1/embeddings): item 0: wrong dimension 33, expected 32",),
         mode="wrong_dim"),
    Case("HTTP embedder: fewer vectors than texts", "http", ("(POST {http}/wrong_count/v1/embeddings): sent 3 texts (items 0..2), got 2",),
         mode="wrong_count"),
    Case("HTTP embedder: HTML instead of JSON", "http", ("(POST {http}/not_json/v1/embeddings): response is not JSON",), mode="not_json"),
    Case("HTTP embedder: zero vector", "http", ("(POST {http}/zero/v1/embeddings): item 2: 'embedding' is a zero vector",), mode="zero"),
    Case("HTTP embedder: strings instead of numbers", "http",
         ("(POST {http}/not_numbers/v1/embeddings): item 0: 'embedding' is not a list of numbers",), mode="not_numbers"),
    # --- the CLI (python -m bench ...): what the user sees
    Case("unknown store name", "cli", ("Could not find 'backend/nosuchstore'",), overrides=("backend=nosuchstore",)),
    Case("unknown strategy name", "cli", ("Could not load 'strategy/nosuch'",), overrides=("strategy=[limit,nosuch]",)),
    Case("threshold above 1", "cli", ("threshold", "outside [0, 1]"), overrides=("thresholds.stop=1.5",)),
    Case("threshold below 0", "cli", ("threshold", "-0.1", "outside [0, 1]"), overrides=("thresholds.start=-0.1",)),
    Case("threshold not a number", "cli", ("thresholds.start", "'abc'"), overrides=("thresholds.start=abc",)),
    Case("negative k", "cli", ("limit: k must be >= 0 (got -1)",), overrides=("strategy.limit.fn.k=-1",)),
    Case("negative search depth", "cli", ("depth", "-5"), overrides=("depth=-5",)),
    Case("search depth not a number", "cli", ("depth", "'abc'"), overrides=("depth=abc",)),
    Case("data path does not exist (CLI)", "cli", ("dataset path not found: {d}/nowhere",), overrides=("dataset.path={d}/nowhere",),
         ),
    Case("malformed JSONL (CLI)", "cli", ("{d}/turns.jsonl:2: malformed JSON",),
         own([TURNS[0], '{"conversation_id": "c1"', TURNS[2]])),
    Case("NaN vectors from an HTTP embedder (CLI)", "cli", ("http embedder m (POST {http}/nan/v1/embeddings): item 2: vector contains NaN",),
         overrides=("embedder=http", "embedder.base_url={http}/nan/v1", "embedder.model=m", "embedder.api_key_env=null",
                    "embedder.dim=32", "embedder.max_retries=0")),
    Case("every question adversarial (CLI: valid, nothing for the main metrics)", "cli", (),
         own(None, _edit(QUESTIONS, 0, evidence=[], adversarial=True)), outcome="ok"),
)


@dataclass
class Observation:
    """What happened when a case ran."""

    result: str  # "error" | "defects" | "ok" | "unexpected" | "cli"
    error_type: str = ""
    message: str = ""
    defects: list = field(default_factory=list)
    corpus: object = None
    returncode: int | None = None
    output: str = ""  # CLI stdout + stderr
    tracebacks: int = 0
    leftovers: list = field(default_factory=list)  # half-written files (*.tmp, results of a failed run)


def _fill(text: str, d: Path, http: str) -> str:
    return text.replace("{d}", str(d)).replace("{http}", http)


def write_files(d: Path, files) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for rel, data in files:
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def cli_env() -> dict[str, str]:
    """Environment for CLI runs: offline (proxies point at a closed loopback port), loopback exempt."""
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_DATA_DIR", "HYDRA_FULL_ERROR")}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="127.0.0.1,localhost",
               no_proxy="127.0.0.1,localhost", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


def run_cli(args, *, env: dict | None = None, timeout_s: float = 900) -> subprocess.CompletedProcess:
    """``python -m bench <args>`` from the repository root; stdout and stderr captured as text."""
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, env=env or cli_env(), capture_output=True,
                          text=True, timeout=timeout_s)


def count_tracebacks(text: str, root: Path | None = None) -> int:
    """Tracebacks in ``text`` and in every ``*.log`` file under ``root``."""
    n = text.count(TRACEBACK)
    if root is not None and root.exists():
        n += sum(p.read_text(errors="replace").count(TRACEBACK) for p in root.rglob("*.log"))
    return n


def half_written(root: Path) -> list[str]:
    """Temp files left under ``root``, and run directories holding results beside a failed.json."""
    out = [str(p) for p in root.rglob("*.tmp")] if root.exists() else []
    for failed in root.rglob("failed.json") if root.exists() else []:
        job = failed.parent
        if (job / "summary.csv").exists() and not (job / "jobs.json").exists() and not list(job.glob("job*")):
            out.append(str(job / "summary.csv"))
    return out


def observe(case: Case, d: Path, *, http: str = "") -> Observation:
    """Run one case in directory ``d`` (created); ``http`` is the EmbeddingServer URL for http/cli cases."""
    d = Path(d)
    if case.layer == "cli":
        write_files(d / "data", case.files or own())
        reports = d / "reports"
        args = [f"paths.reports={reports}", "backend=exact", "embedder=hashing", "dataset=own", f"dataset.path={d / 'data'}",
                "strategy=[limit,threshold]", "progress=false", "publish_latest=false",
                *(_fill(o, d / "data", http) for o in case.overrides)]
        proc = run_cli(args)
        out = proc.stdout + proc.stderr
        return Observation("cli", returncode=proc.returncode, output=out, tracebacks=count_tracebacks(out, reports),
                           leftovers=half_written(reports))
    write_files(d, case.files)
    try:
        if case.layer == "own":
            from bench.data.own import load_own

            corpus = load_own(path=d / "nowhere" if case.kind == "data path does not exist" else d)
        elif case.layer == "locomo":
            from bench.data.locomo import load_locomo

            corpus = load_locomo(path=d / "locomo10.json")
        elif case.layer == "longmemeval":
            from bench.data.longmemeval import load_longmemeval

            corpus = load_longmemeval(path=d / "lme")
        elif case.layer == "http":
            from bench.embedders.http import HTTPEmbedder

            emb = HTTPEmbedder(model="m", base_url=f"{http}/{case.mode}/v1", api_key_env=None, dim=32, max_retries=0,
                               progress=False)
            emb.embed(["alpha", "beta", "gamma"])
            return Observation("ok")
        else:
            raise ValueError(f"unknown case layer {case.layer!r}")
    except Exception as e:  # observed, judged below
        kind = "error" if type(e).__name__ in CLEAR_ERRORS else "unexpected"
        return Observation(kind, error_type=type(e).__name__, message=str(e))
    return Observation("defects" if corpus.defects else "ok", defects=list(corpus.defects), corpus=corpus)


def cli_error_lines(output: str) -> list[str]:
    """The lines a user reads as the error: logged ERRORs and the CLI's one ``error:`` line (bad overrides)."""
    lines = [ln for ln in output.splitlines() if "[ERROR]" in ln]
    lines += [ln for ln in output.splitlines() if ln.startswith(("error: ", "In '", "Could not", "Error executing"))]
    return lines


def judge(case: Case, obs: Observation, d: Path, *, http: str = "") -> tuple[bool, str]:
    """(handled, why not). See ``Case`` for what each outcome requires."""
    expect = [_fill(x, d / "data" if case.layer == "cli" else d, http) for x in case.expect]
    if case.layer == "cli":
        if obs.tracebacks:
            return False, f"{obs.tracebacks} traceback(s) in the output"
        if obs.leftovers:
            return False, f"half-written results left: {obs.leftovers[:3]}"
        if case.outcome == "ok":
            return (obs.returncode == 0, f"exit code {obs.returncode}")
        if obs.returncode == 0:
            return False, "bad input accepted (exit code 0)"
        lines = cli_error_lines(obs.output)
        if any(all(x in ln for x in expect) for ln in lines):
            return True, ""
        return False, f"no single error line names {expect}; error lines: {lines[:3]}"
    if case.outcome == "ok":
        if obs.result not in ("ok", "defects"):
            return False, f"valid input refused: {obs.error_type}: {obs.message}"
        return (bool(case.check(obs.corpus)) if case.check else True), "check failed on the loaded corpus"
    if case.outcome.startswith("defect:"):
        want = case.outcome.split(":", 1)[1]
        if obs.result != "defects":
            return False, f"expected a reported defect {want!r}, got {obs.result} {obs.error_type}: {obs.message}"
        for x in obs.defects:
            if x.kind == want and all(any(e in part for part in (x.file, x.record, x.field)) for e in expect):
                return True, ""
        return False, f"no defect {want!r} naming {expect}: {obs.defects}"
    if obs.result != "error":
        return False, f"expected a clear error, got {obs.result} {obs.error_type}: {obs.message[:200]}"
    if "\n" in obs.message:
        return False, f"error spans {obs.message.count(chr(10)) + 1} lines"
    missing = [x for x in expect if x not in obs.message]
    return (not missing), f"error {obs.message!r} lacks {missing}"


@dataclass(frozen=True)
class CaseResult:
    case: Case
    handled: bool
    why: str
    tracebacks: int


def run_cases(root: Path, cases=CASES, *, workers: int = 3) -> list[CaseResult]:
    """Every case in its own directory under ``root``; CLI cases run ``workers`` at a time."""
    root = Path(root)
    with EmbeddingServer(dim=32) as srv:
        def one(i_case):
            i, case = i_case
            d = root / f"case{i:02d}"
            obs = observe(case, d, http=srv.url)
            ok, why = judge(case, obs, d, http=srv.url)
            return CaseResult(case, ok, why, obs.tracebacks)

        items = list(enumerate(cases))
        fast = [one(x) for x in items if x[1].layer != "cli"]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            slow = list(pool.map(one, [x for x in items if x[1].layer == "cli"]))
    return fast + slow


# ----------------------------------------------------------------------------- planted secrets

def secret_hits(root: Path, needles: list[str]) -> dict[str, int]:
    """{file: occurrences} of any needle in any file under ``root`` (bytes, plus decoded parquet cells)."""
    hits: dict[str, int] = {}
    raw = [n.encode() for n in needles]
    for p in sorted(Path(root).rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        n = sum(data.count(x) for x in raw)
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(p)
            text = json.dumps(table.to_pylist(), default=str) + str(table.schema) + str(table.schema.metadata)
            n += sum(text.count(x) for x in needles)
        if n:
            hits[str(p)] = n
    return hits


def pinecone_double():
    """The loopback Pinecone protocol test double (``bench.tools.harden.pinecone_double``)."""
    from bench.tools.harden.pinecone_double import PineconeTestServer

    return PineconeTestServer


@dataclass(frozen=True)
class SecretFigures:
    files_scanned: int
    hits: dict
    key_used: bool  # the planted keys were really sent (the servers checked them)
    tracebacks: int
    jobs_failed_as_planned: bool
    channels: dict = field(default_factory=dict)  # channel -> exit code of its run (each must fail, saying why)


def planted_secret_run(root: Path) -> SecretFigures:
    """Plant keys through every channel a key can come by and grep every file written plus the console.

    One multirun uses the HTTP embedder and Pinecone (both loopback doubles that require the keys from
    the environment), one of its jobs an endpoint that echoes the key in a 401. Then one run per other
    channel: a key typed into ``backend.api_key_env`` / ``embedder.api_key_env``, a ``+embedder.api_key=``
    override, a key as a URL's user:password, and a key with a newline inside its environment value."""
    root = Path(root)
    embed_key = f"sk-PLANTED-{secrets.token_hex(12)}"
    pc_key = f"pcsk-PLANTED-{secrets.token_hex(12)}"
    typed = {"backend": f"pcsk_PLANTED{secrets.token_hex(10)}", "embedder": f"or-PLANTED-{secrets.token_hex(10)}",
             "override": f"sk-PLANTED-{secrets.token_hex(12)}", "url": f"sk-PLANTED-{secrets.token_hex(12)}"}
    nl_key = f"sk-PLANTED-{secrets.token_hex(8)}\n{secrets.token_hex(8)}"
    env = cli_env()
    env.update(RB_PLANTED_EMBED_API_KEY=embed_key, RB_PLANTED_PINECONE_API_KEY=pc_key, RB_PLANTED_NL_API_KEY=nl_key)
    needles = [embed_key, pc_key, embed_key.split("-")[-1], pc_key.split("-")[-1], *typed.values(),
               *(v.split("-")[-1] for v in typed.values()), *nl_key.split("\n"), nl_key.split("-")[-1].split("\n")[0]]
    Pine = pinecone_double()
    console = []
    channels = {}
    reports = root / "reports"
    common = ["dataset=own", f"dataset.path={DEMO}", "progress=false", "publish_latest=true"]
    with contextlib.ExitStack() as stack:
        srv = stack.enter_context(EmbeddingServer(dim=32, key=embed_key))
        backend = ["backend=exact"]
        if Pine is not None:
            pine = Pine(pc_key, visibility_delay_s=0.05)
            pine.start()
            stack.callback(pine.stop)
            backend = ["backend=pinecone", f"backend.host={pine.host}", "backend.api_key_env=RB_PLANTED_PINECONE_API_KEY"]
        http = ["embedder=http", f"embedder.base_url={srv.base_url('ok')}", "embedder.model=planted",
                "embedder.api_key_env=RB_PLANTED_EMBED_API_KEY", "embedder.dim=32", "embedder.max_retries=0"]
        args = ["-m", f"paths.reports={reports}", *backend, *http, "embedder.model=planted,reject", *common,
                "strategy=[limit,threshold]"]
        proc = run_cli(args, env=env)
        console.append(proc.stdout + proc.stderr)
        keyed_url = srv.url.replace("://", "://rb:" + typed["url"] + "@") + "/ok/v1"
        runs = {
            "typed into backend.api_key_env": [*(backend[:2] if Pine is not None else ["backend=pinecone"]),
                                               f"backend.api_key_env={typed['backend']}", *http],
            "typed into embedder.api_key_env": ["backend=exact", *http, f"embedder.api_key_env={typed['embedder']}"],
            "+embedder.api_key override": ["backend=exact", *http, f"+embedder.api_key={typed['override']}"],
            "URL user:password": ["backend=exact", *http, f"embedder.base_url={keyed_url}"],
            # another model name: nothing cached for it, so the request (and the key) is really needed
            "newline inside the env value": ["backend=exact", *http, "embedder.model=planted-nl", "embedder.api_key_env=RB_PLANTED_NL_API_KEY"],
        }
        for name, extra in runs.items():
            p = run_cli([f"paths.reports={reports}", *extra, *common, "strategy=[limit]"], env=env)
            channels[name] = p.returncode
            console.append(p.stdout + p.stderr)
    text = "\n".join(console)
    (root / "console.log").write_text(text)
    hits = secret_hits(root, needles)
    failed = [p for p in reports.rglob("failed.json") if p.parent.name.startswith("job")]
    ok_jobs = [p for p in reports.rglob("summary.csv") if p.parent.name.startswith("job")]
    return SecretFigures(files_scanned=sum(1 for p in root.rglob("*") if p.is_file()), hits=hits,
                         key_used=srv.authorised > 0, tracebacks=count_tracebacks(text, reports),
                         jobs_failed_as_planned=proc.returncode == 0 and len(ok_jobs) >= 1 and len(failed) >= 1,
                         channels=channels)


# ----------------------------------------------------------------------------- fault scenarios

def fault_configs(conf_dir: Path, specs: dict[str, dict]) -> Path:
    """Write ``<conf_dir>/backend/<name>.yaml`` FaultBackend configs (for ``hydra.searchpath``)."""
    import yaml

    (conf_dir / "backend").mkdir(parents=True, exist_ok=True)
    for name, spec in specs.items():
        (conf_dir / "backend" / f"{name}.yaml").write_text(yaml.safe_dump({"_target_": "bench.tools.harden.run.FaultBackend", **spec}))
    return conf_dir


def fingerprints(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths if Path(p).is_file()}


def finished_artefacts(reports: Path) -> list[Path]:
    """Result files of finished jobs: job directories and the resume cache (not latest/, which moves on)."""
    out = []
    for job in sorted(reports.glob("runs/*/job*")) + sorted(reports.glob("cache/jobs/*")):
        if (job / "summary.csv").exists():
            out += [job / n for n in ("summary.csv", "questions.parquet", "meta.json") if (job / n).exists()]
    return out


def kill_during_write(target: Path, *, size_mb: int = 64) -> tuple[bool, str]:
    """Kill a child process while ``write_atomic`` rewrites ``target``: the old bytes must survive."""
    before = target.read_bytes()
    started = target.with_name(".kill-during-write.started")
    code = (
        "import sys, time\nfrom pathlib import Path\nfrom bench.output import write_atomic\n"
        "def w(p):\n    with open(p, 'wb') as f:\n        for i in range(%d):\n            f.write(b'x' * 1048576); f.flush()\n"
        "            if i == 1: Path(%r).touch()\n            time.sleep(0.02)\n"
        "write_atomic(Path(%r), w)\n" % (size_mb, str(started), str(target))
    )
    child = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    deadline = time.monotonic() + 60
    while not started.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    child.kill()
    child.wait()
    started.unlink(missing_ok=True)
    if child.returncode != -signal.SIGKILL:
        return False, f"the writer was not killed mid-write (exit code {child.returncode})"
    if target.read_bytes() != before:
        return False, f"{target} changed after a kill during its rewrite"
    for tmp in target.parent.glob(f".{target.name}.*.tmp"):
        tmp.unlink()  # the killed writer's temp file (ignored by every reader)
    return True, ""


@dataclass
class FaultFigures:
    injected: int = 0
    survived: int = 0
    lost: int = 0
    tracebacks: int = 0
    notes: list = field(default_factory=list)

    def scenario(self, name: str, ok: bool, why: str = "") -> None:
        self.injected += 1
        self.survived += int(ok)
        self.notes.append(f"{'survived' if ok else 'NOT SURVIVED'}: {name}{'' if ok else ' -- ' + why}")


def fault_run(root: Path, servers: dict) -> FaultFigures:
    """The fault scenarios. ``servers``: {"chroma_server"/"seekdb_server": ServerInfo} to kill mid-run."""
    root = Path(root)
    reports = root / "reports"
    figs = FaultFigures()
    specs = {"fault_raise": {"fault": "raise"}, "fault_timeout": {"fault": "timeout", "delay_s": 1.0},
             "fault_crash": {"fault": "crash"}}
    for name, info in servers.items():
        cls = "bench.backends.chroma.ChromaBackend" if name.startswith("chroma") else "bench.backends.seekdb.SeekdbBackend"
        specs[f"kill_{name}"] = {"fault": "kill", "kill_pid": info.pid, "inner": cls, "inner_kwargs": info.overrides()}
    conf = fault_configs(root / "conf", specs)
    failing = ["fault_raise", "fault_timeout", *[f"kill_{n}" for n in servers]]
    base = [f"hydra.searchpath=[file://{conf}]", f"paths.reports={reports}", "embedder=hashing", "dataset=own",
            f"dataset.path={DEMO}", "strategy=[limit,threshold]", "progress=false", "publish_latest=true"]
    multirun = ["-m", f"backend=exact,{','.join(failing)}", *base]

    first = run_cli(multirun)
    out1 = first.stdout + first.stderr
    figs.tracebacks += count_tracebacks(out1)
    sweep = max(reports.glob("runs/*"), key=lambda p: p.stat().st_mtime, default=None)
    report = (sweep / "report.md").read_text() if sweep and (sweep / "report.md").exists() else ""
    finished = finished_artefacts(reports)
    before = fingerprints(finished)
    failed = {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("job*/failed.json")} if sweep else {}
    exact_done = bool(sweep and (sweep / "job0" / "summary.csv").exists())
    listed = f"**{len(failing)} job(s) failed**" in report
    for i, name in enumerate(failing, start=1):
        f = failed.get(f"job{i}", {})
        reason = f.get("reason", "")
        ok = bool(reason) and "\n" not in reason and exact_done and listed and first.returncode == 0
        figs.scenario(f"store {name!r} (job{i}: {reason[:90] or 'no failed.json'})", ok,
                      f"exit {first.returncode}, exact finished: {exact_done}, report lists failures: {listed}")
    for name, info in servers.items():
        alive = Path(f"/proc/{info.pid}").exists() and "zombie" not in Path(f"/proc/{info.pid}/status").read_text().lower()
        if alive:
            figs.notes.append(f"WARNING: {name} (pid {info.pid}) still alive after the kill")

    second = run_cli(multirun)  # resume: the finished job is copied, the failing ones run (and fail) again
    out2 = second.stdout + second.stderr
    figs.tracebacks += count_tracebacks(out2)
    sweep2 = max(reports.glob("runs/*"), key=lambda p: p.stat().st_mtime)
    resumed = out2.count("finished before") == 1 and (sweep2 / "job0" / "summary.csv").exists()
    refailed = sorted(p.parent.name for p in sweep2.glob("job*/failed.json")) == [f"job{i}" for i in range(1, len(failing) + 1)]
    figs.scenario("re-run of the same multirun (finished job skipped by config hash, failures recorded again)",
                  resumed and refailed and second.returncode == 0,
                  f"finished job resumed: {resumed}, failures re-recorded: {refailed}, exit {second.returncode}")

    crash = run_cli(["-m", "backend=exact,fault_crash", *base])  # job0 resumed, job1 kills the whole process
    crash_ok = crash.returncode == -signal.SIGKILL and "finished before" in crash.stdout + crash.stderr
    figs.scenario("process killed mid-run (SIGKILL inside a multirun)", crash_ok, f"exit code {crash.returncode}")

    latest = reports / "latest" / "summary.csv"
    if latest.exists():
        ok, why = kill_during_write(latest)
    else:
        ok, why = False, f"{latest} missing"
    figs.scenario("process killed while rewriting reports/latest/summary.csv", ok, why)

    after = fingerprints(finished)
    figs.lost = sum(1 for p, h in before.items() if after.get(p) != h) + (0 if latest.exists() else 1)
    figs.notes.append(f"finished result files checked: {len(before)}")
    return figs


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = parser("harden", "Run the hardening suite (bad input, planted secrets, store faults, a short load) and print its figures.",
                examples=["recallbench harden                  # everything, real seekdb/chroma servers included",
                          "recallbench harden --no-servers     # without the real servers"])
    ap.add_argument("--threads", type=int, default=8, help="load: threads per store")
    ap.add_argument("--queries", type=int, default=100, help="load: searches per thread (make load uses 1000)")
    ap.add_argument("--rows", type=int, default=2000, help="load: memories per store")
    ap.add_argument("--no-servers", action="store_true", help="skip the real seekdb/chroma servers (kill scenarios, server load)")
    ap.add_argument("--workdir", default=None, help="keep everything here (default: a temp dir, deleted)")
    args = ap.parse_args(argv)
    setup_logging(logging.WARNING)
    log.setLevel(logging.INFO)
    from bench.backends.servers import run_chroma_server, run_seekdb_server
    from bench.tools import load as loadtest

    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        work = Path(args.workdir) if args.workdir else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rb-harden-")))
        work.mkdir(parents=True, exist_ok=True)
        log.info("bad input: %d kinds", len(CASES))
        cases = run_cases(work / "bad")
        log.info("planted secrets")
        sec = planted_secret_run(work / "secrets")
        servers = {}
        if not args.no_servers:
            servers["chroma_server"] = stack.enter_context(run_chroma_server(work / "chroma-server"))
            servers["seekdb_server"] = stack.enter_context(run_seekdb_server(work / "seekdb-server"))
        log.info("load: %d threads x %d queries per store", args.threads, args.queries)
        stores = loadtest.LOCAL_STORES + tuple(servers)
        load = loadtest.run_load(stores, threads=args.threads, queries=args.queries, rows=args.rows, workdir=work / "load",
                                 server_overrides={k: v.overrides() for k, v in servers.items()})
        log.info("faults")
        faults = fault_run(work / "faults", servers)  # kills the servers: runs last

    handled = [r for r in cases if r.handled]
    tracebacks = sum(r.tracebacks for r in cases) + sec.tracebacks + faults.tracebacks
    secret_total = sum(sec.hits.values())
    load_errors = sum(r.errors for r in load)
    lines = ["", "# recallbench hardening", ""]
    lines.append(f"bad input: {len(cases)} kinds tried, {len(handled)} handled "
                 f"(clear one-line error naming file/record/field, or documented report-and-skip)")
    for r in cases:
        if not r.handled:
            lines.append(f"  NOT HANDLED [{r.case.layer}] {r.case.kind}: {r.why[:200]}" + (f" (needs: {r.case.gap})" if r.case.gap else ""))
    lines.append(f"tracebacks seen: {tracebacks}")
    lines.append(f"planted-secret hits in logs/configs/reports/traces/parquet: {secret_total} "
                 f"({sec.files_scanned} files scanned; keys really sent: {sec.key_used}; failing job recorded: {sec.jobs_failed_as_planned})")
    for path, n in sec.hits.items():
        lines.append(f"  {n} hit(s) in {path}")
    lines.append(f"faults injected: {faults.injected}, survived: {faults.survived}, finished results lost: {faults.lost}")
    lines += [f"  {n}" for n in faults.notes]
    lines.append(f"load errors: {load_errors} ({args.threads} threads x {args.queries} queries per store)")
    lines.append(loadtest.format_table(load))
    lines.append(f"({time.monotonic() - t0:.0f} s)")
    print("\n".join(lines))
    bad = tracebacks or secret_total or faults.lost or load_errors or faults.survived < faults.injected or not sec.key_used
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(entry(main))
