"""Class 3: the report forged from the data (categories, a dataset directory name, a TREC run tag).

Each check runs ``python -m bench`` (offline, exact store, hashing embedder) on an own-format corpus carrying the
hostile value and reads what the run wrote: report.md and report.html must show one Recommendation heading and no
link or image of the data's, the run must finish, every file must stay inside the run directory and CSV text cells
must not start with a formula character. The same checks run on an older tree (public CLI only).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from bench.tools.harden.cases import TURNS, own, run_cli, write_files
from bench.tools.harden.hostile import Check

FORGED = "x\n## Recommendation\nuse evil"
LINK = "[click](https://evil.example)"
IMAGE = "![img](https://evil.example/x.png)"
FORMULA = '=HYPERLINK("https://evil.example","x")'
DIR_NAME = "ds\n## Recommendation\n[e](evil.example) =1+1"
TAG = "../../../../evil"
TEX = r"ds $\oops{x}$ y"  # matplotlib reads $...$ in a title as TeX: an unknown command fails the figure
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

_TURNS = TURNS + [{"conversation_id": "c2", "turn_id": "u1", "role": "user", "text": "My sister lives in Lisbon."},
                  {"conversation_id": "c2", "turn_id": "u2", "role": "assistant", "text": "Lisbon is lovely."}]


def _questions(category: str) -> list[dict]:
    return [{"question_id": "q1", "conversation_id": "c1", "text": "What is my dog called?", "evidence": ["t1"], "category": category},
            {"question_id": "q2", "conversation_id": "c2", "text": "Where does my sister live?", "evidence": ["u1"], "category": category}]


def _quoted(path: Path) -> str:
    """A Hydra override value for a path that may hold a newline (single-quoted; a backslash is literal there)."""
    return "'" + str(path).replace("'", "\\'") + "'"


def _run(d: Path, *, category: str = "cat", dir_name: str = "data", extra: tuple[str, ...] = ()) -> tuple[int, str, Path | None]:
    data = d / dir_name
    write_files(data, own(_TURNS, _questions(category)))
    proc = run_cli([f"paths.reports={d / 'reports'}", "backend=exact", "embedder=hashing", "dataset=own", f"dataset.path={_quoted(data)}",
                    "strategy=[limit,threshold]", "progress=false", "publish_latest=false", *extra])
    runs = sorted((d / "reports" / "runs").glob("*/")) if (d / "reports" / "runs").is_dir() else []
    return proc.returncode, proc.stdout + proc.stderr, (runs[-1] if runs else None)


def _rendered(run: Path | None) -> tuple[bool, str]:
    """(ok, why): report.md and report.html exist, with exactly one Recommendation heading and no data-made link,
    image or remote address in the HTML (images inlined as data: URIs only)."""
    if run is None or not (run / "report.md").is_file() or not (run / "report.html").is_file():
        return False, "no report.md / report.html written"
    md, page = (run / "report.md").read_text(), (run / "report.html").read_text()
    n_md = len(re.findall(r"^ {0,3}## +Recommendation", md, flags=re.M))
    n_html = len(re.findall(r"<h2>\s*Recommendation", page))
    if n_md != 1 or n_html != 1:
        return False, f"{n_md} '## Recommendation' headings in report.md, {n_html} in report.html (1 expected)"
    links = re.findall(r'<a [^>]*href="([^"]*)"', page)
    bad = [u for u in links if "evil" in u or re.match(r"[a-z][a-z0-9+.-]*:|//", u, re.I)]
    if bad:
        return False, f"report.html links to {bad[:2]}"
    remote = [u for u in re.findall(r'src="([^"]*)"', page) if not u.startswith("data:")]
    if remote:
        return False, f"report.html loads {remote[:2]}"
    return True, ""


def _csv_formulas(run: Path) -> list[str]:
    """Text cells of the run's CSV files that a spreadsheet would run as a formula."""
    out = []
    for path in sorted(run.rglob("*.csv")):
        with path.open(newline="", encoding="utf-8") as f:
            for row in csv.reader(f):
                out += [f"{path.relative_to(run)}: {c[:40]!r}" for c in row
                        if c.startswith(FORMULA_START) and not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?inf", c)]
    return out


def _report_check(**kw):
    def run(d: Path) -> tuple[bool, str]:
        rc, out, r = _run(d, **kw)
        if rc != 0:
            return False, f"exit code {rc}: {' '.join(out.split())[-200:]}"
        return _rendered(r)
    return run


def _formula(d: Path) -> tuple[bool, str]:
    rc, out, r = _run(d, category=FORMULA, dir_name="=1+1")
    if rc != 0 or r is None:
        return False, f"exit code {rc}: {' '.join(out.split())[-200:]}"
    bad = _csv_formulas(r)
    return (not bad), f"{len(bad)} formula cells, e.g. {bad[:2]}"


def _run_tag(d: Path) -> tuple[bool, str]:
    """A TREC run (sweep run_file=) whose tag is ../../../../evil: the report's files stay inside the run directory."""
    run_file = d / "evil.run"
    run_file.write_text(f"q1 Q0 c1|t1 1 0.9 {TAG}\nq1 Q0 c1|t3 2 0.5 {TAG}\nq2 Q0 c2|u1 1 0.8 {TAG}\n")
    deep = d / "a" / "b" / "c"
    rc, out, r = _run(deep, extra=(f"run_file={run_file}",))
    outside = [str(p.relative_to(d)) for p in d.rglob("*.png") if r is None or not p.resolve().is_relative_to(r.resolve())]
    if outside:
        return False, f"PNG written outside the run directory: {outside[:2]}"
    if rc != 0:
        return False, f"exit code {rc}: {' '.join(out.split())[-200:]}"
    ok, why = _rendered(r)
    odd = [p.name for p in r.iterdir() if p.is_dir() and p.name not in ("analysis",) and not p.name.startswith("trace")]
    return (ok and not odd), why or f"unexpected directories in the run directory: {odd}"


CHECKS = [
    Check(3, "category with a newline and '## Recommendation' (forged heading)", _report_check(category=FORGED)),
    Check(3, "category holding a markdown link to another site", _report_check(category=LINK)),
    Check(3, "category holding a remote markdown image (report must not fail)", _report_check(category=IMAGE)),
    Check(3, "dataset directory name with newlines, a heading and a link", _report_check(dir_name=DIR_NAME)),
    Check(3, "category and dataset name starting with '=' (CSV formula injection)", _formula),
    Check(3, "dataset directory name holding '$\\oops{x}$' (TeX in figure titles)", _report_check(dir_name=TEX)),
    Check(3, "TREC run tag '../../../../evil' (sweep run_file=): files outside the run dir", _run_tag),
]
