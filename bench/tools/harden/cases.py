"""The bad-input table of the hardening suite, and how a case is run and judged.

``CASES``: malformed input (own format, LoCoMo, LongMemEval, HTTP embedder replies, CLI overrides).
``observe(case, dir)`` runs one and ``judge(case, obs)`` says whether it was handled: a one-line
error (ValueError / FileNotFoundError in the library, the user-facing line of the CLI) naming
file, record and field, or the documented report-and-skip (a ``Defect``), never a traceback and
never a half-written result. ``tests/tools/test_bad_input.py`` runs the same table. ``run_cli`` runs
``python -m bench`` as a user would (offline, loopback only).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.cli.common import work_dir
from bench.resources import demo_dir
from bench.tools.harden.doubles import EmbeddingServer

log = logging.getLogger(__name__)

REPO = work_dir()  # where ``python -m bench`` runs (the sweep's paths.root); the cases pass their own report paths
DEMO = demo_dir()
TRACEBACK = "Traceback (most recent call last)"
CLEAR_ERRORS = ("ValueError", "FileNotFoundError")  # what the library raises for bad input


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
    from bench.data.tokens import count_tokens_many

    text = corpus.turns()[1].text
    v = HashingEmbedder(dim=64).embed_documents([text])
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
    Case("unknown store name", "cli", ("backend=nosuchstore: no such option (options: chroma, ",), overrides=("backend=nosuchstore",)),
    Case("unknown strategy name", "cli", ("strategy=nosuch: no such option (options: adaptive, ",), overrides=("strategy=[limit,nosuch]",)),
    Case("threshold above 1", "cli", ("threshold", "outside [0, 1]"), overrides=("thresholds.stop=1.5",)),
    Case("threshold below 0", "cli", ("threshold", "-0.1", "outside [0, 1]"), overrides=("thresholds.start=-0.1",)),
    Case("threshold not a number", "cli", ("thresholds.start", "'abc'"), overrides=("thresholds.start=abc",)),
    Case("negative k", "cli", ("k must be an integer >= 0 (got -1)",), overrides=("strategy.limit.fn.k=-1",)),
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
            emb.embed_documents(["alpha", "beta", "gamma"])
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
