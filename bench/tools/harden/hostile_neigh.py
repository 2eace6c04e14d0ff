"""Classes 4-6: neighbours (another PID namespace, two runs finishing one job), servers and stores that lie, and
adversarial questions that carry gold.

Each check drives public functions that also exist on the old tree (``bench.run.private_store_dir``,
``remove_stale_store_dirs``, ``save_job``; ``bench.replay.trace.build_trace``; ``bench.evaluation.llm.Cache.key`` and ``ChatClient``;
the loaders) or ``python -m bench`` itself, so the same table runs on an older tree. ``LyingStore`` is the store
double: the exact store with one lie (it is built by the CLI from ``backend._target_``).
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.tools.harden.cases import REPO, own, run_cli, write_files
from bench.tools.harden.hostile import Check
from bench.types import Hits, Where

DEAD_PID = 4194304  # above every pid_max: no /proc entry here ever has it (a PID of another namespace)


# ----------------------------------------------------------------------------- a store that lies

LIES = ("none", "no_filter", "drop_roles", "drop_before", "unknown_id", "score")


class LyingStore:
    """The exact store, answering with one lie: ``no_filter`` (ignores the whole filter: hits from other
    conversations), ``drop_roles`` / ``drop_before`` (ignores that part of it), ``unknown_id`` (its last hit's id is no
    memory of the corpus), ``score`` (its best hit's similarity is 1.7)."""

    def __init__(self, collection: str = "recallbench", lie: str = "no_filter") -> None:
        from bench.backends.exact import ExactBackend

        if lie not in LIES:
            raise ValueError(f"LyingStore: unknown lie {lie!r} (one of {', '.join(LIES)})")
        self._inner = ExactBackend(collection=collection)
        self.lie = lie
        self.name = f"exact+{lie}"
        self.capabilities = self._inner.capabilities

    def open(self, *, dim: int, metric: str = "cosine") -> None:
        self._inner.open(dim=dim, metric=metric)

    def add(self, batch) -> None:
        self._inner.add(batch)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        self._inner.wait_ready(timeout_s)

    def search(self, vector, *, k: int, where: Where) -> Hits:
        if self.lie == "no_filter":
            where = Where()
        elif self.lie == "drop_roles":
            where = Where(where.conversation_id, None, where.before)
        elif self.lie == "drop_before":
            where = Where(where.conversation_id, where.roles, None)
        hits = self._inner.search(vector, k=k, where=where)
        if self.lie == "unknown_id" and len(hits):
            return Hits(hits.ids[:-1] + ("nobody|t404",), hits.scores)
        if self.lie == "score" and len(hits):
            return Hits(hits.ids, (1.7,) + hits.scores[1:])
        return hits

    def reference_query(self, vector, *, k: int, where):
        return self._inner.reference_query(vector, k=k, where=where)

    def list_collections(self) -> list[str]:
        return []

    def close(self) -> None:
        self._inner.close()

    def drop(self) -> None:
        self._inner.drop()


# a corpus where every lie shows: two conversations, both roles, turns said after some questions were asked
TURNS = [
    {"conversation_id": "c1", "turn_id": "t1", "role": "user", "text": "I adopted a dog named Rex.", "timestamp": 1000},
    {"conversation_id": "c1", "turn_id": "t2", "role": "assistant", "text": "Rex is a great dog name.", "timestamp": 1001},
    {"conversation_id": "c1", "turn_id": "t3", "role": "user", "text": "Rex now sleeps on my bed.", "timestamp": 3000},
    {"conversation_id": "c2", "turn_id": "u1", "role": "user", "text": "My dog Rex chews shoes.", "timestamp": 1000},
    {"conversation_id": "c2", "turn_id": "u2", "role": "assistant", "text": "Dogs like Rex do that.", "timestamp": 1001},
]
QUESTIONS = [
    {"question_id": "q1", "conversation_id": "c1", "text": "What is my dog called?", "evidence": ["t1"], "asked_at": 2000},
    {"question_id": "q2", "conversation_id": "c2", "text": "What does my dog Rex chew?", "evidence": ["u1"], "asked_at": 2000},
]


def _corpus(d: Path):
    from bench.data.own import load_own

    write_files(d / "data", own(TURNS, QUESTIONS))
    return load_own(path=d / "data")


def _lie_check(lie: str, roles: tuple[str, ...] | None):
    def run(d: Path) -> tuple[bool, str]:
        from bench.embedders.hashing import HashingEmbedder
        from bench.replay.trace import build_trace

        corpus = _corpus(d)
        try:
            trace = build_trace(corpus, HashingEmbedder(), LyingStore(lie=lie), depth=5, roles=roles, warmup=0, progress=False)
        except Exception as e:  # noqa: BLE001
            line = f"{type(e).__name__}: {e}"
            named = f"exact+{lie}" in line and "contract" in line and "\n" not in line
            return named, line[:300] if named else f"failed, but not with one line naming the store: {line[:240]}"
        hits = sum(len(h) for h in trace.table["hit_ids"])
        return False, f"trace built silently from the lying store ({hits} hits kept, nothing said)"
    return run


def _cli_lie(d: Path) -> tuple[bool, str]:
    """The CLI with a store that ignores the filter: the job fails with one line naming the store (failed.json)."""
    import yaml

    write_files(d / "data", own(TURNS, QUESTIONS))
    (d / "conf" / "backend").mkdir(parents=True)
    (d / "conf" / "backend" / "liar.yaml").write_text(yaml.safe_dump(
        {"_target_": "bench.tools.harden.hostile_neigh.LyingStore", "lie": "no_filter"}))
    proc = run_cli([f"hydra.searchpath=[file://{d / 'conf'}]", f"paths.reports={d / 'reports'}", "backend=liar",
                    "embedder=hashing", "dataset=own", f"dataset.path={d / 'data'}", "strategy=[limit]", "progress=false",
                    "publish_latest=false"], timeout_s=120)
    out = proc.stdout + proc.stderr
    failed = [json.loads(p.read_text()) for p in (d / "reports").rglob("failed.json")]
    summaries = list((d / "reports").rglob("summary.csv"))
    reason = failed[0].get("reason", "") if failed else ""
    if summaries:
        return False, f"exit {proc.returncode}: the job finished and wrote {len(summaries)} summary.csv from a store that ignored the filter"
    ok = proc.returncode != 0 and "exact+no_filter" in reason and "contract" in reason and "Traceback" not in out
    return ok, f"exit {proc.returncode}; failed.json: {reason[:240] or 'none'}"


# ----------------------------------------------------------------------------- neighbours

OWNER = """
import os, sys
from pathlib import Path
from bench import run
d = run.private_store_dir(Path(sys.argv[1]))
d.mkdir(parents=True, exist_ok=True)
(d / "index.bin").write_bytes(b"live")
print(d, flush=True)
sys.stdin.readline()
"""
# the owner in another PID namespace: a PID this namespace does not have (unshare --pid), else a faked one
IN_NAMESPACE = "import os, sys\nhost = set(open(sys.argv[2]).read().split())\n" \
    "while True:\n    pid = os.fork()\n    if pid == 0:\n        if str(os.getpid()) in host:\n            os._exit(3)\n        break\n" \
    "    _, st = os.waitpid(pid, 0)\n    if os.waitstatus_to_exitcode(st) != 3:\n        sys.exit(0)\n"
FAKE_PID = f"import os\nos.getpid = lambda: {DEAD_PID}\n"


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--map-root-user", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _other_namespace(d: Path) -> tuple[bool, str]:
    root = d / "stores"
    hosts = d / "hostpids"
    hosts.write_text(" ".join(p for p in os.listdir("/proc") if p.isdigit()))
    real = _unshare_works()
    code = (IN_NAMESPACE if real else FAKE_PID) + OWNER
    cmd = [sys.executable, "-c", code, str(root / "seekdb"), str(hosts)]
    if real:
        cmd = ["unshare", "--pid", "--fork", "--map-root-user", *cmd]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    owner = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    how = "unshare --pid" if real else f"PID faked as {DEAD_PID}"
    try:
        live = Path(owner.stdout.readline().strip())
        pid = live.name[len("proc-"):].split("x")[0]
        if not live.name or Path(f"/proc/{pid}").exists():
            return False, f"could not set up an owner with a PID unseen here ({how}, got {live})"
        from bench import run

        run.remove_stale_store_dirs(root)
        kept = (live / "index.bin").is_file()
    finally:
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()
    if not kept:
        return False, f"the live store directory of a run with PID {pid} ({how}) was deleted as stale"
    for _ in range(50):  # SIGKILL is delivered at once, but the kernel closes the owner's files as it exits
        run.remove_stale_store_dirs(root)
        if not live.exists():
            break
        time.sleep(0.1)
    if live.exists():
        return False, f"kept while alive ({how}), but not removed once its owner ended"
    return True, f"kept while its owner (PID {pid} here unseen, {how}) ran; removed once it ended"


def _save_many(args) -> dict:
    root, n, who = args
    from bench import run

    out = Path(root) / f"job{who}"
    (out / "trace").mkdir(parents=True, exist_ok=True)
    (out / "summary.csv").write_text(f"a,b\n{who},2\n")
    (out / "trace" / "trace.parquet").write_bytes(b"x" * 20000)
    errors: dict[str, int] = {}
    for _ in range(n):
        try:
            run.save_job(out, Path(root) / "jobs", run.Key("job", {"x": 1}))
        except Exception as e:  # noqa: BLE001  (what the check counts)
            kind = f"{type(e).__name__}: {str(e).split(':')[0]}"
            errors[kind] = errors.get(kind, 0) + 1
    return errors


def _job_race(d: Path) -> tuple[bool, str]:
    """Two processes save the same job entry 150 times each, at once; then one deterministic interleaving (B's entry
    lands between A's two renames)."""
    from bench import run

    n = 150
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        res = pool.map(_save_many, [(str(d), n, 0), (str(d), n, 1)])
    errors: dict[str, int] = {}
    for r in res:
        for k, v in r.items():
            errors[k] = errors.get(k, 0) + v
    key = run.Key("job", {"x": 1})
    done = d / "jobs" / key.digest
    state = run.check_job(done, key) or "complete"
    # the interleaving, made certain: B's complete entry appears at `done` just before A renames its own there
    theirs = Path(tempfile.mkdtemp(dir=d))
    shutil.copytree(done, theirs / "entry")
    real = {name: getattr(os, name) for name in ("rename", "replace")}
    raced: list[str] = []

    def hook(name):
        def move(src, dst, *a, **kw):
            if Path(dst) == done and Path(src).name.startswith(f".{key.digest}.") and not raced:
                raced.append(name)
                if done.exists():
                    real["replace"](done, theirs / "aside")
                shutil.copytree(theirs / "entry", done)
            return real[name](src, dst, *a, **kw)
        return move

    try:
        os.rename, os.replace = hook("rename"), hook("replace")
        run.save_job(d / "job0", d / "jobs", key)
        interleaved = "no error"
    except Exception as e:  # noqa: BLE001
        interleaved = f"{type(e).__name__}: {str(e)[:80]}"
    finally:
        os.rename, os.replace = real["rename"], real["replace"]
    after = run.check_job(done, key) or "complete"
    total = sum(errors.values())
    ok = total == 0 and state == "complete" and interleaved == "no error" and after == "complete"
    return ok, (f"{total} errors in {2 * n} concurrent saves ({errors or 'none'}), entry {state}; "
                f"forced interleaving: {interleaved}, entry {after}")


# ----------------------------------------------------------------------------- servers that lie (LLM)

def _query_key(d: Path) -> tuple[bool, str]:
    from bench.evaluation.llm import Cache, LLMConfig

    msgs = [{"role": "user", "content": "hi"}]
    a = LLMConfig(name="a", base_url="https://llm.example/v1?deployment=model-a", model="m")
    b = LLMConfig(name="b", base_url="https://llm.example/v1?deployment=model-b", model="m")
    same = Cache.key(a, "v1", msgs, 10) == Cache.key(b, "v1", msgs, 10)
    return (not same), ("one cache key for ?deployment=model-a and ?deployment=model-b: the second gets the first's answers"
                        if same else "different cache keys per query string")


def _negative_usage(d: Path) -> tuple[bool, str]:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    from bench.evaluation.llm import ChatClient, LLMConfig

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps({"choices": [{"message": {"content": "Rex"}}],
                               "usage": {"prompt_tokens": -5000, "completion_tokens": 3}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    records: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    grab = Grab(logging.WARNING)
    logging.getLogger("bench").addHandler(grab)
    try:
        cfg = LLMConfig(name="liar", base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", model="m", price_in=1.0,
                        price_out=2.0, requests_per_s=1000.0, max_retries=0)
        reply = ChatClient(cfg).chat([{"role": "user", "content": "What is my dog called?"}], 5)
    finally:
        logging.getLogger("bench").removeHandler(grab)
        srv.shutdown()
        srv.server_close()
    said = [r for r in records if "usage" in r and "127.0.0.1" in r]
    ok = reply.cost_usd >= 0 and reply.tokens_in >= 0 and reply.usage_source != "api" and len(said) == 1
    return ok, (f"usage prompt_tokens -5000 -> tokens_in {reply.tokens_in}, cost ${reply.cost_usd:.6f}, usage_source "
                f"{reply.usage_source!r}; warning naming the endpoint: {said[0][:120] if said else 'none'}")


# ----------------------------------------------------------------------------- labels

def _adversarial_cli(d: Path) -> tuple[bool, str]:
    import pandas as pd

    questions = QUESTIONS[:1] + [{"question_id": "q2", "conversation_id": "c1", "text": "What is my cat called?",
                                  "evidence": ["t1"], "adversarial": True}]
    write_files(d / "data", own(TURNS, questions))
    proc = run_cli([f"paths.reports={d / 'reports'}", "backend=exact", "embedder=hashing", "dataset=own",
                    f"dataset.path={d / 'data'}", "strategy=[limit]", "progress=false", "publish_latest=false",
                    "defer_report=true"], timeout_s=120)
    metas = list((d / "reports").rglob("meta.json"))
    rows = list((d / "reports").rglob("questions.parquet"))
    if proc.returncode != 0 or not metas or not rows:
        return False, f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-200:]}"
    defects = json.loads(metas[0].read_text()).get("defects") or {}
    q2 = pd.read_parquet(rows[0]).query("question_id == 'q2'").iloc[0]
    unscored = int(q2["n_gold"]) == 0 and math.isnan(float(q2["recall"]))
    ok = defects.get("adversarial_with_gold") == 1 and unscored
    return ok, f"defects {defects or 'none'}; the adversarial question's row: n_gold {q2['n_gold']}, recall {q2['recall']}"


def _adversarial_locomo(d: Path) -> tuple[bool, str]:
    from bench.data.locomo import load_locomo

    data = [{"sample_id": "conv-x",
             "conversation": {"speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
                              "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog."},
                                            {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice, what is its name?"}]},
             "qa": [{"question": "What did Bob adopt?", "adversarial_answer": "a dog", "evidence": ["D1:1"], "category": 5}]}]
    (d / "locomo10.json").write_text(json.dumps(data))
    corpus = load_locomo(path=d / "locomo10.json")
    found = [x for x in corpus.defects if x.kind == "adversarial_with_gold"]
    return bool(found), (f"defect {found[0].record} {found[0].field}: {found[0].action}" if found else
                         f"no defect for a category-5 question with evidence D1:1 (defects: {[x.kind for x in corpus.defects]})")


CHECKS = [
    Check(4, "a live run in another PID namespace owns a store directory; this namespace cleans up stale ones", _other_namespace),
    Check(4, "two processes finish the same job at once: 2 x 150 job-cache saves of one entry", _job_race),
    Check(5, "a store ignores the whole filter (hits from another conversation): python -m bench", _cli_lie),
    Check(5, "a store ignores the filter: hits from another conversation", _lie_check("no_filter", None)),
    Check(5, "a store ignores the role filter (assistant turns for roles=[user])", _lie_check("drop_roles", ("user",))),
    Check(5, "a store ignores the time filter (turns said after asked_at)", _lie_check("drop_before", None)),
    Check(5, "a store returns an id outside the corpus", _lie_check("unknown_id", None)),
    Check(5, "a store returns a similarity of 1.7", _lie_check("score", None)),
    Check(5, "two LLM deployments behind one URL, told apart by the query string", _query_key),
    Check(5, "an LLM server reports a negative token count", _negative_usage),
    Check(6, "an adversarial question with gold evidence (own format, python -m bench)", _adversarial_cli),
    Check(6, "a LoCoMo category-5 (adversarial) question with evidence", _adversarial_locomo),
]
