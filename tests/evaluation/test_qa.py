"""`recallbench answer` end to end against a deterministic loopback chat server (127.0.0.1 only).

The fixture is a hand-made run: 2 conversations, 4 questions (one adversarial), strategies ``recency1``
(the last turn the question may see) and ``full_context``, so every context is known by hand:

    c1: user: My dog is called Rex. / assistant: Nice name. / user: I live in Oslo.
    c2: user: I play the cello. / assistant: Lovely instrument.

The server's reader answers with the context lines that share a word of >= 3 letters (not a question
word) with the question, joined by a space, else "No information available"; its judge answers
CORRECT when the normalised generated answer contains the normalised gold answer. Every reply reports
usage 100 prompt / 10 completion tokens; prices 1 / 2 $ per million -> $0.00012 per call.

By hand (J; token F1 = SQuAD F1 of the echoed line(s) against the gold):

    q1 dog (gold Rex):       full "user: My dog is called Rex." CORRECT, F1 2/7 | recency1 "user: I live in Oslo." has no shared word -> abstains, WRONG, 0
    q2 live (gold Oslo):     full and recency1 "user: I live in Oslo." CORRECT, F1 2*(1/5)/(6/5) = 1/3
    q3 instrument (the cello): full "user: I play the cello. assistant: Lovely instrument." CORRECT, F1 2*(1/7)/(8/7) = 1/4
                             recency1 "assistant: Lovely instrument." WRONG, 0
    q4 adversarial (cat):    both abstain -> CORRECT, F1 1 (no judge call)
    J: full 4/4 = 1.0, recency1 2/4 = 0.5; F1: full (2/7 + 1/3 + 1/4 + 1)/4, recency1 (1/3 + 1)/4
    calls: 8 reader + 6 judge = 14 estimated; 13 sent (q2's answer is the same at both points, so its judge
    call is answered from the cache the second time); $ per 1,000 questions: reader 1000 x 0.00012 = 0.12,
    reader + judge 1000 x (4 + 3) x 0.00012 / 4 = 0.21, at both points
"""

from __future__ import annotations

import json
import logging
import os
import re
import string
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from bench.evaluation import llm, qa
from bench.cli.main import main as cli
from bench.results.rundir import RunDir
from loopback import json_server

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-test-LLMSECRET-4242"
KEY_ENV = "RECALLBENCH_TEST_LLM_KEY"
STOP = {"what", "where", "which", "who", "when", "how", "the", "and", "you", "did", "does"}

TURNS = [
    ("c1", "t1", "user", "My dog is called Rex."), ("c1", "t2", "assistant", "Nice name."), ("c1", "t3", "user", "I live in Oslo."),
    ("c2", "t1", "user", "I play the cello."), ("c2", "t2", "assistant", "Lovely instrument."),
]
QUESTIONS = [
    {"question_id": "q1", "conversation_id": "c1", "text": "What is my dog called?", "evidence": ["t1"], "answer": "Rex"},
    {"question_id": "q2", "conversation_id": "c1", "text": "Where do I live?", "evidence": ["t3"], "answer": "Oslo"},
    {"question_id": "q3", "conversation_id": "c2", "text": "What instrument do I play?", "evidence": ["t1"], "answer": "the cello"},
    {"question_id": "q4", "conversation_id": "c2", "text": "What is my cat called?", "evidence": [], "adversarial": True},
]
CONTEXT = {"c1": "user: My dog is called Rex.\nassistant: Nice name.\nuser: I live in Oslo.",
           "c2": "user: I play the cello.\nassistant: Lovely instrument."}
LAST = {"c1": "user: I live in Oslo.", "c2": "assistant: Lovely instrument."}


def _norm(text: str) -> str:  # the server's own normaliser (not the code under test)
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 3 and w not in STOP}


class Chat:
    """Server state: scripted replies first (status, headers, body), then the deterministic reader / judge."""

    def __init__(self) -> None:
        self.replies: list = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    def answer(self, payload: dict) -> str:
        system, user = payload["messages"][0]["content"], payload["messages"][1]["content"]
        if system.startswith("You grade answers"):
            gold = re.search(r"^Gold answer: (.*)$", user, re.M).group(1)
            said = re.search(r"^Generated answer: (.*)$", user, re.M).group(1)
            return json.dumps({"label": "CORRECT" if _norm(gold) in _norm(said) else "WRONG"})
        memories, question = re.fullmatch(r"Memories:\n(.*)\n\nQuestion: (.*)\nAnswer:", user, re.S).groups()
        lines = [ln for ln in memories.split("\n") if _words(ln) & _words(question)]
        return " ".join(lines) if lines else qa.ABSTAIN

    def reply(self, payload: dict):
        with self.lock:
            item = self.replies.pop(0) if self.replies else None
        if item is not None:
            return item
        body = {"choices": [{"message": {"role": "assistant", "content": self.answer(payload)}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10}}
        return 200, {}, json.dumps(body).encode()


@pytest.fixture
def server():
    with json_server(Chat()) as state:
        yield state


def _config(path: Path, base_url: str, **over) -> Path:
    data = {"base_url": base_url, "model": "loop/model", "api_key_env": KEY_ENV, "price_in": 1.0, "price_out": 2.0,
            "max_tokens": 20, "judge_max_tokens": 5, "requests_per_s": 1000.0, "max_retries": 3, "backoff_base_s": 0.01,
            **over}
    path.write_text("\n".join(f"{k}: {json.dumps(v)}" for k, v in data.items()) + "\n")
    return path


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """The hand-made corpus swept with embedder=hashing backend=exact, strategies recency1 and full_context."""
    base = tmp_path_factory.mktemp("answers")
    data = base / "data"
    data.mkdir()
    (data / "turns.jsonl").write_text("".join(json.dumps({"conversation_id": c, "turn_id": t, "role": r, "text": x}) + "\n"
                                              for c, t, r, x in TURNS))
    (data / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATA_DIR"}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "bench", f"paths.reports={base / 'reports'}", "dataset=own", f"dataset.path={data}",
           "embedder=hashing", "backend=exact", "progress=false", "strategy=[recency,full_context]",
           "strategy.recency.fn.k=1", "strategy.recency.name=recency1"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return base / "reports" / "latest"


POINTS = "recency1,full_context"


def test_token_f1_and_labels():
    assert qa.normalize_answer("The Cello!") == "cello"
    assert qa.token_f1("user: My dog is called Rex.", "Rex") == pytest.approx(2 / 7)
    assert qa.token_f1("", "") == 1.0 and qa.token_f1("x", "") == 0.0
    assert qa.parse_label('```json\n{"label": "correct"}\n```') == "CORRECT"
    assert qa.parse_label("WRONG.") == "WRONG" and qa.parse_label("CORRECT or WRONG") == ""
    assert qa.abstains("no information available.") and not qa.abstains("Rex")


def test_versus_full_is_the_paired_t_test_over_conversations():
    """Answer accuracy against full context uses the report's one rule (stats.paired_t_test), not a bootstrap CI
    beside a sign-flip p. By hand, point p minus full context (correct 0/1):
        c1: q1 0-1, q2 1-1 -> sum -1 over 2;  c2: q3 0-1 -> -1 over 1;  c3: q4 1-1, q5 1-0 -> +1 over 2
        mean m = -1/5 = -0.2; residuals s - m n: -0.6, -0.8, 1.4; se^2 = 3/2 * 2.96 / 25 = 0.1776
        t = 0.2 / sqrt(0.1776) = 0.474579, 2 df: p = 1 - t / sqrt(t^2 + 2) = 0.68186 (a sign-flip over the three
        non-zero question differences gives 1.0); CI = -0.2 -+ 4.302653 * sqrt(0.1776)."""
    import math

    data = [("c1", "q1", 0, 1), ("c1", "q2", 1, 1), ("c2", "q3", 0, 1), ("c3", "q4", 1, 1), ("c3", "q5", 1, 0)]
    base = {"dataset": "d", "embedder": "e", "backend": "b"}
    rows = pd.DataFrame([{**base, "point": "p", "strategy": "limit5", "conversation_id": c, "question_id": q, "correct": a}
                         for c, q, a, _ in data]
                        + [{**base, "point": qa.FULL, "strategy": qa.FULL, "conversation_id": c, "question_id": q, "correct": f}
                           for c, q, _, f in data])
    got = qa._versus_full(rows, {**base, "point": "p", "strategy": "limit5"})
    se = math.sqrt(0.1776)
    t = 0.2 / se
    assert got["j_minus_full"] == pytest.approx(-0.2)
    assert got["p_vs_full"] == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-9)
    assert got["j_minus_full_lo"] == pytest.approx(-0.2 - 4.302653 * se, rel=1e-6)
    assert got["j_minus_full_hi"] == pytest.approx(-0.2 + 4.302653 * se, rel=1e-6)
    assert all(math.isnan(v) for v in qa._versus_full(rows, {**base, "point": qa.FULL, "strategy": qa.FULL}).values())


@pytest.mark.slow
def test_dry_run_numbers_by_hand(tiny_run, tmp_path, server, capsys, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)  # a dry run needs no key
    cfg = _config(tmp_path / "loop.yaml", server.base_url)
    assert cli(["answer", str(tiny_run), "--llm", str(cfg), "--points", POINTS, "--cache-dir", str(tmp_path / "c"),
                "--dry-run"]) == 0
    out = capsys.readouterr().out
    count = llm.count_tokens
    t_in = 0
    for q in QUESTIONS:
        c = q["conversation_id"]
        t_in += count(qa.READER_SYSTEM) + count(f"Memories:\n{CONTEXT[c]}\n\nQuestion: {q['text']}\nAnswer:")
        t_in += count(qa.READER_SYSTEM) + count(f"Memories:\n{LAST[c]}\n\nQuestion: {q['text']}\nAnswer:")
        if not q.get("adversarial"):  # judge: empty answer + the reader's max_tokens (20), at both points
            t_in += 2 * (count(qa.JUDGE_SYSTEM) + count(f"Question: {q['text']}\nGold answer: {q['answer']}\nGenerated answer: ") + 20)
    t_out = 8 * 20 + 6 * 5
    assert "14 calls to send (8 reader + 6 judge; 0 more answered from the cache)" in out
    assert f"{t_in:,} input tokens" in out and f"at most {t_out:,} output tokens" in out
    assert f"output tokens: ${t_in * 1e-6 + t_out * 2e-6:.4f} with outputs at that bound" in out
    assert server.requests == []  # nothing sent


@pytest.mark.slow
def test_answer_end_to_end_cache_and_secret(tiny_run, tmp_path, server, capsys, caplog, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = _config(tmp_path / "loop.yaml", server.base_url)
    cache = tmp_path / "cache"
    argv = ["answer", str(tiny_run), "--llm", str(cfg), "--points", POINTS, "--cache-dir", str(cache)]
    with caplog.at_level(logging.DEBUG):
        assert cli(argv) == 0
    out = capsys.readouterr()
    assert len(server.requests) == 13  # q2's judge call is the same at both points (same answer): sent once, then cached
    assert {r["auth"] for r in server.requests} == {f"Bearer {SECRET}"}
    assert {r["path"] for r in server.requests} == {"/v1/chat/completions"}
    sent = [r["json"] for r in server.requests]
    assert all(p["model"] == "loop/model" and p["temperature"] == 0 for p in sent)
    users = [p["messages"][1]["content"] for p in sent if p["messages"][0]["content"] == qa.READER_SYSTEM]
    assert f"Memories:\n{CONTEXT['c1']}\n\nQuestion: What is my dog called?\nAnswer:" in users
    assert f"Memories:\n{LAST['c2']}\n\nQuestion: What is my cat called?\nAnswer:" in users

    TAG_A = qa.setting_tag(fmt="A", llm="loop", sample=200, seed=0, points=qa.parse_points(POINTS))  # noqa: N806 (loop.yaml)
    assert TAG_A.startswith("formatA-loop-n200-seed0-points")
    rows = pd.read_csv(tiny_run / "analysis" / f"answers-{TAG_A}.csv")
    got = {(r.point, r.question_id): (r.label, r.f1) for r in rows.itertuples()}
    assert got[("full_context", "q1")] == ("CORRECT", pytest.approx(2 / 7))
    assert got[("recency1", "q1")] == ("WRONG", 0.0)
    assert got[("recency1", "q2")] == ("CORRECT", pytest.approx(1 / 3))
    assert got[("full_context", "q3")] == ("CORRECT", pytest.approx(1 / 4))
    assert got[("recency1", "q3")] == ("WRONG", 0.0)
    assert got[("full_context", "q4")] == ("CORRECT", 1.0) and got[("recency1", "q4")] == ("CORRECT", 1.0)
    assert (rows["reader_tokens_in"] == 100).all() and rows["reader_cost_usd"].tolist() == pytest.approx([1.2e-4] * 8)
    summary = pd.read_csv(tiny_run / "analysis" / f"answers_summary-{TAG_A}.csv").set_index("point")
    assert summary.loc["full_context", "accuracy_j"] == 1.0
    assert summary.loc["recency1", "accuracy_j"] == 0.5
    assert summary.loc["full_context", "token_f1"] == pytest.approx((2 / 7 + 1 / 3 + 1 / 4 + 1) / 4)
    assert summary.loc["recency1", "token_f1"] == pytest.approx((1 / 3 + 1) / 4)
    assert summary.loc["recency1", "accuracy_j_answerable"] == pytest.approx(1 / 3)
    # intervals over the 2 conversations (t, 1 df): recency1's J is 1/2 in both (c1 q1 0 q2 1, c2 q3 0 q4 1): [.5, .5];
    # its token F1: c1 1/3 over 2, c2 1 over 2, mean 1/3, residuals -+1/3, se = sqrt(2 * 2/9) / 4 = 1/6:
    # 1/3 -+ 12.71/6 clipped to [0, 1] (a percentile bootstrap printed the two conversations' min-max [1/6, 1/2])
    assert (summary.loc["recency1", "accuracy_j_lo"], summary.loc["recency1", "accuracy_j_hi"]) == (0.5, 0.5)
    assert (summary.loc["recency1", "token_f1_lo"], summary.loc["recency1", "token_f1_hi"]) == (0.0, 1.0)
    # recency1 - full on the same questions: (0, 1, 0, 1) - (1, 1, 1, 1) -> -0.5; the paired t test over conversations
    # (stats.paired_t_test): both conversations sum to -1 over 2 questions, residuals 0 -> se 0, CI [-.5, -.5], p 0
    assert summary.loc["recency1", "j_minus_full"] == -0.5 and summary.loc["recency1", "p_vs_full"] == 0.0
    assert (summary.loc["recency1", "j_minus_full_lo"], summary.loc["recency1", "j_minus_full_hi"]) == (-0.5, -0.5)
    assert pd.isna(summary.loc["full_context", "j_minus_full"])
    assert summary["usd_per_1k_questions"].tolist() == pytest.approx([0.12, 0.12])  # reader: 1000 x 0.00012
    assert summary["eval_usd_per_1k_questions"].tolist() == pytest.approx([0.21, 0.21])
    inj = {p: summary.loc[p, "injected_tokens"] for p in summary.index}
    c = llm.count_tokens
    assert inj["full_context"] == pytest.approx((2 * c(CONTEXT["c1"]) + 2 * c(CONTEXT["c2"])) / 4)
    assert inj["recency1"] == pytest.approx((2 * c(LAST["c1"]) + 2 * c(LAST["c2"])) / 4)
    md = (tiny_run / "answers.md").read_text()
    assert "| data | full_context | 4 | 1.000 " in md and "| data | recency1 | 4 | 0.500 " in md
    assert "[answers.md](answers.md)" in (tiny_run / "report.md").read_text()

    # the key is in no file written and no log line
    texts = [out.out, out.err, caplog.text]
    for root in (tiny_run.resolve(), cache):
        texts += [p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file()]
    assert not any(SECRET in t for t in texts)

    # a second run answers everything from the cache: 0 requests, same table
    before = len(server.requests)
    assert cli(argv[:-2] + ["--cache-dir", str(cache), "--dry-run"]) == 0
    assert "0 calls to send (0 reader + 0 judge; 14 more answered from the cache)" in capsys.readouterr().out
    assert cli(argv) == 0
    assert len(server.requests) == before
    assert pd.read_csv(tiny_run / "analysis" / f"answers-{TAG_A}.csv")[["label", "f1"]].equals(rows[["label", "f1"]])

    # another format is another setting: its own files, format A's kept (the old code wrote answers.csv for both)
    tag_b = qa.setting_tag(fmt="B", llm="loop", sample=200, seed=0, points=qa.parse_points(POINTS))
    assert tag_b != TAG_A
    assert cli(argv + ["--format", "B"]) == 0
    for tag in (TAG_A, tag_b):
        assert (tiny_run / "analysis" / f"answers-{tag}.csv").is_file()
        assert (tiny_run / "analysis" / f"answers_summary-{tag}.csv").is_file()
        assert (tiny_run / f"answers-{tag}.md").is_file()
    assert pd.read_csv(tiny_run / "analysis" / f"answers-{TAG_A}.csv")[["label", "f1"]].equals(rows[["label", "f1"]])
    index = (tiny_run / "answers.md").read_text()
    assert f"## Setting `{TAG_A}`" in index and f"## Setting `{tag_b}`" in index
    assert "context rendered in format A" in index and "context rendered in format B" in index
    assert not (tiny_run / "analysis" / "answers.csv").exists()

    # a rebuilt report keeps the link
    assert cli(["report", str(tiny_run)]) == 0
    assert "[answers.md](answers.md)" in (tiny_run / "report.md").read_text()


def test_retry_after_429(server, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = llm.load_config(str(_config(tmp_path / "loop.yaml", server.base_url)))
    server.replies.append((429, {"Retry-After": "2"}, json.dumps({"error": {"message": f"slow down {SECRET}"}}).encode()))
    server.replies.append((503, {}, b"busy"))
    slept: list[float] = []
    client = llm.ChatClient(cfg, sleep=slept.append)
    reply = client.chat(qa.judge_messages("Q?", "Rex", "Rex it is"), 5)
    assert reply.text == '{"label": "CORRECT"}' and (reply.tokens_in, reply.tokens_out, reply.usage_source) == (100, 10, "api")
    assert len(server.requests) == 3 and client.retries == 2
    assert 2.0 in slept and 0.02 in slept  # Retry-After honoured; then backoff 0.01 * 2**1
    assert "429" in caplog.text and "slow down ***REDACTED***" in caplog.text and SECRET not in caplog.text


@pytest.mark.slow
def test_missing_key_and_bad_config(server, tmp_path, monkeypatch, tiny_run):
    monkeypatch.delenv(KEY_ENV, raising=False)
    cfg = _config(tmp_path / "loop.yaml", server.base_url)
    assert cli(["answer", str(tiny_run), "--llm", str(cfg), "--points", POINTS, "--cache-dir", str(tmp_path / "c")]) == 1
    monkeypatch.setenv(KEY_ENV, SECRET)  # over the budget: stops after the estimate
    assert cli(["answer", str(tiny_run), "--llm", str(cfg), "--points", POINTS, "--cache-dir", str(tmp_path / "c"),
                "--max-usd", "0.001"]) == 2
    assert server.requests == []
    bad = _config(tmp_path / "bad.yaml", server.base_url, price_inn=1)
    with pytest.raises(ValueError, match="unknown field 'price_inn'"):
        llm.load_config(str(bad))
    with pytest.raises(ValueError, match="must be a number"):
        qa.parse_points("x@abc")
    with pytest.raises(ValueError, match="has no threshold"):
        qa.build_items(RunDir(tiny_run), [qa.Point("recency1", 0.3)], sample=4, seed=0)
    with pytest.raises(ValueError, match="not in this run"):
        qa.build_items(RunDir(tiny_run), [qa.Point("nope")], sample=4, seed=0)


def test_shipped_configs_load():
    q = llm.load_config("qwen3_max_openrouter")
    assert (q.base_url, q.model, q.api_key_env) == ("https://openrouter.ai/api/v1", "qwen/qwen3-max", "OPENROUTER_API_KEY")
    assert q.price_in > 0 and q.price_out > 0 and q.temperature == 0
    assert llm.load_config("openai_compatible").model


def test_rate_limit_spaces_requests(server, tmp_path, monkeypatch):
    """requests_per_s 2: the second request waits 0.5 s after the first (a frozen clock makes the wait exact)."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = llm.load_config(str(_config(tmp_path / "loop.yaml", server.base_url, requests_per_s=2.0)))
    slept: list[float] = []
    client = llm.ChatClient(cfg, sleep=slept.append, clock=lambda: 10.0)
    for _ in range(3):
        client.chat(qa.judge_messages("Q?", "Rex", "Rex"), 5)
    assert slept == [0.5, 0.5] and len(server.requests) == 3


def test_cache_key_tells_deployments_behind_one_url_apart_by_query_string():
    msgs = [{"role": "user", "content": "hi"}]
    cfg = lambda url: llm.LLMConfig(name="x", base_url=url, model="m")  # noqa: E731
    a, b = cfg("https://llm.example/v1?deployment=a"), cfg("https://llm.example/v1?deployment=b")
    plain = cfg("https://llm.example/v1")
    assert len({llm.Cache.key(c, "v1", msgs, 10) for c in (a, b, plain)}) == 3
    # a URL without a query keeps the key it always had: (model, public base_url, template, messages, max_tokens, temperature)
    import hashlib

    ident = {"model": "m", "base_url": "https://llm.example/v1", "template": "v1", "messages": msgs, "max_tokens": 10,
             "temperature": 0.0}
    assert llm.Cache.key(plain, "v1", msgs, 10) == hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("usage, why", [
    ({"prompt_tokens": -5000, "completion_tokens": 10}, "-5000 is negative"),
    ({"prompt_tokens": 100, "completion_tokens": -1}, "-1 is negative"),
    ({"prompt_tokens": 12.5, "completion_tokens": 10}, "12.5 is not a whole number"),
    ({"prompt_tokens": "100", "completion_tokens": 10}, "'100' is not a whole number"),
])
def test_a_usage_that_lies_is_counted_with_tiktoken_flagged_and_said_once(server, tmp_path, monkeypatch, caplog, usage, why):
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = llm.load_config(str(_config(tmp_path / "loop.yaml", server.base_url)))
    body = json.dumps({"choices": [{"message": {"content": "Rex"}}], "usage": usage}).encode()
    server.replies += [(200, {}, body), (200, {}, body)]
    client = llm.ChatClient(cfg)
    msgs = qa.judge_messages("Q?", "Rex", "Rex it is")
    first, second = client.chat(msgs, 5), client.chat(msgs, 5)
    same = lambda r: (r.text, r.tokens_in, r.tokens_out, r.usage_source, r.cost_usd)  # noqa: E731
    assert same(first) == same(second) and client.usage_invalid == 2
    assert (first.tokens_in, first.tokens_out) == (llm.message_tokens(msgs), llm.count_tokens("Rex"))
    assert first.usage_source == llm.USAGE_INVALID == "tiktoken (api usage invalid)"
    assert first.cost_usd == pytest.approx(cfg.cost(first.tokens_in, first.tokens_out)) and first.cost_usd > 0
    said = [r.getMessage() for r in caplog.records if "usage" in r.getMessage()]
    assert len(said) == 1 and f"llm loop (POST {server.base_url}/chat/completions): usage " in said[0] and why in said[0]


def test_a_cached_reply_with_a_negative_cost_is_asked_again(server, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = llm.load_config(str(_config(tmp_path / "loop.yaml", server.base_url)))
    cache, msgs = llm.Cache(tmp_path / "c"), qa.judge_messages("Q?", "Rex", "Rex")
    key = llm.Cache.key(cfg, qa.TEMPLATE_VERSION, msgs, 5)
    cache.put(key, {"text": "old", "tokens_in": -5000, "tokens_out": 3, "usage_source": "api", "latency_s": 0.1, "cost_usd": -0.005})
    reply, cached = llm.cached_call(llm.ChatClient(cfg), cache, qa.TEMPLATE_VERSION, msgs, 5, cfg)
    assert not cached and (reply.tokens_in, reply.tokens_out, reply.usage_source) == (100, 10, "api")
    assert llm.cached_call(None, cache, qa.TEMPLATE_VERSION, msgs, 5, cfg) == (reply, True)  # the new answer replaced it
