"""Class 5: another system's ranking file that lies or is malformed (``recallbench score RUN FILE``).

A finished run on a two-conversation own-format corpus (hashing embedder, exact store) is made once per process
and copied into each check's directory. Each check hands ``recallbench score`` a hostile ranking and reads what
happened: a bad file must stop with exactly one ``error:`` line naming the file, the question and the field, no
traceback, and leave the run's systems.csv as it was (absent, or the previous good one); a forged name must not
become a link in the report. On a tree without ``score`` every check reports the command missing.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.tools.harden.cases import REPO, TURNS, cli_env, own, run_cli, write_files
from bench.tools.harden.hostile import Check

_TURNS = TURNS + [{"conversation_id": "c2", "turn_id": "u1", "role": "user", "text": "My sister lives in Lisbon."},
                  {"conversation_id": "c2", "turn_id": "u2", "role": "assistant", "text": "Lisbon is lovely."}]
_QUESTIONS = [{"question_id": "q1", "conversation_id": "c1", "text": "What is my dog called?", "evidence": ["t1"]},
              {"question_id": "q2", "conversation_id": "c2", "text": "Where does my sister live?", "evidence": ["u1"]}]
GOOD = {"q1": ["c1|t3", "c1|t1"], "q2": ["c2|u1"]}


@functools.cache
def _base() -> Path:
    """A finished run made once per process (in its own temporary directory)."""
    d = Path(tempfile.mkdtemp(prefix="hostile_import_"))
    write_files(d / "data", own(_TURNS, _QUESTIONS))
    proc = run_cli([f"paths.reports={d / 'reports'}", "backend=exact", "embedder=hashing", "dataset=own", f"dataset.path={d / 'data'}",
                    "strategy=[limit]", "progress=false", "publish_latest=false"])
    runs = sorted((d / "reports" / "runs").glob("*/")) if (d / "reports" / "runs").is_dir() else []
    if proc.returncode != 0 or not runs:
        raise RuntimeError(f"the base run failed ({proc.returncode}): {' '.join((proc.stdout + proc.stderr).split())[-300:]}")
    return runs[-1]


def _run_copy(d: Path) -> Path:
    run = d / "run"
    shutil.copytree(_base(), run)
    return run


def _score(run: Path, *files: Path, extra: tuple[str, ...] = ()):
    """``recallbench score RUN FILES`` (the console script's dispatcher, from the repository root, offline)."""
    return subprocess.run([sys.executable, "-m", "bench.cli.main", "score", str(run), *map(str, files), *extra], cwd=REPO,
                          env=cli_env(), capture_output=True, text=True, timeout=120)


def _one_line(proc, path: Path, *needles: str) -> tuple[bool, str]:
    """(ok, why): non-zero exit, no traceback, exactly one 'error:' line naming ``path`` and every needle."""
    out = proc.stdout + proc.stderr
    errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
    if proc.returncode == 0:
        return False, "accepted (exit code 0)"
    if "Traceback" in out:
        return False, "a traceback was printed"
    if len(errors) != 1:
        return False, f"{len(errors)} error lines: {' '.join(out.split())[-200:]}"
    missing = [n for n in (str(path), *needles) if n not in errors[0]]
    if missing:
        return False, f"the line does not name {missing}: {errors[0][:200]}"
    return True, errors[0][:160]


def _bad(content, *needles: str):
    def run(d: Path) -> tuple[bool, str]:
        r = _run_copy(d)
        path = d / "ranking.json"
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        ok, why = _one_line(_score(r, path, extra=("--no-report",)), path, *needles)
        if ok and (r / "systems.csv").exists():
            return False, "systems.csv written from a bad file"
        return ok, why
    return run


def _good_then_bad(d: Path) -> tuple[bool, str]:
    """A good ranking scored, then a bad one: the run's systems.csv stays the good one's, byte for byte."""
    r = _run_copy(d)
    good, bad = d / "good.json", d / "bad.json"
    good.write_text(json.dumps(GOOD))
    bad.write_text(json.dumps({"q1": ["c1|t1", "c2|u1"]}))
    first = _score(r, good, extra=("--no-report",))
    if first.returncode != 0 or not (r / "systems.csv").is_file():
        return False, f"the good ranking was not scored ({first.returncode}): {' '.join((first.stdout + first.stderr).split())[-200:]}"
    before = (r / "systems.csv").read_bytes()
    ok, why = _one_line(_score(r, good, bad, extra=("--no-report",)), bad, "q1", "[1]")
    if (r / "systems.csv").read_bytes() != before:
        return False, "systems.csv changed by a command that failed"
    return ok, why


def _forged_tag(d: Path) -> tuple[bool, str]:
    """A TREC run whose tag is a markdown link: the report's systems table shows it as text, never a link."""
    r = _run_copy(d)
    tag = "[click](https://evil.example)"
    path = d / "x.run"
    path.write_text(f"q1 Q0 c1|t1 1 0.9 {tag}\nq2 Q0 c2|u1 1 0.8 {tag}\n")
    proc = _score(r, path)
    if proc.returncode != 0:
        return False, f"exit code {proc.returncode}: {' '.join((proc.stdout + proc.stderr).split())[-200:]}"
    md, page = (r / "report.md").read_text(), (r / "report.html").read_text()
    if "Systems" not in md:
        return False, "no systems section in report.md"
    links = [u for u in re.findall(r'<a [^>]*href="([^"]*)"', page) if "evil" in u]
    if links or "](https://evil.example)" in md.replace("\\]", "").replace("\\[", ""):
        return False, f"the tag became a link: {links[:1]}"
    return True, ""


CHECKS = [
    Check(5, "imported ranking credits q1 with another conversation's memory (c2|u1)",
          _bad({"q1": ["c1|t3", "c2|u1"], "q2": ["c2|u1"]}, "q1", "[1]", "c2|u1")),
    Check(5, "imported ranking repeats an id (padding)", _bad({"q1": ["c1|t1", "c1|t1"]}, "q1", "[1]", "repeated")),
    Check(5, "imported ranking names a session the corpus does not have (c1|session7)", _bad({"q1": ["c1|session7"]}, "q1", "[0]")),
    Check(5, "imported ranking of a question the corpus does not have", _bad({"q9": ["c1|t1"]}, "q9")),
    Check(5, "imported ranking whose value is a string, not a list", _bad({"q1": "c1|t1"}, "q1", "not a list")),
    Check(5, "imported ranking with a numeric id", _bad({"q1": ["c1|t1", 7]}, "q1", "[1]", "not a string")),
    Check(5, "LongMemEval retrieval log with a numeric corpus_id",
          _bad([{"question_id": "q1", "retrieval_results": {"ranked_items": [{"corpus_id": 3}]}}], "q1", "ranked_items", "[0]")),
    Check(5, "truncated JSON ranking (line and column)", _bad('{"q1": ["c1|t1",\n', "invalid JSON", "line 2", "column")),
    Check(5, "empty ranking file", _bad("", "empty")),
    Check(5, "a bad ranking after a good one: systems.csv left as it was", _good_then_bad),
    Check(5, "TREC run tag '[click](https://evil.example)' in the systems table", _forged_tag),
]
