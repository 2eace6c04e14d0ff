"""Self-contained ``report.html`` from ``report.md``: one file that opens from disk with no network.

Owns the Markdown -> HTML rendering (markdown-it-py, CommonMark + tables, raw HTML disabled), the
inlining of every local image as a base64 ``data:`` URI and a small inline stylesheet. One inline script, ``SORT_JS``
(click a table's column heading to sort by it), allowed by its SHA-256 hash and nothing else; no external fonts,
styles, scripts or images, no clickable link to another site (``CSP``: a content security policy that fetches nothing
but the page's own data URIs). The sections after the ``# Appendix`` heading are collapsed (``<details>``). The report's content (recommendation first, Pareto frontier,
calibration, LOCO, ...) is decided by ``bench.report``; this module only renders it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import logging
import re
from pathlib import Path

from bench.results.rundir import REPORT_HTML, REPORT_MD, RunDir

log = logging.getLogger(__name__)

MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif"}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{border-bottom:2px solid #333}h2{border-bottom:1px solid #ccc;margin-top:2em}
table{border-collapse:collapse;margin:1em 0;font-size:.85em;display:block;overflow-x:auto}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}th{background:#f3f3f3}
td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}
img{max-width:100%;height:auto;display:block;margin:.5em 0}
blockquote{background:#fff6d6;border-left:4px solid #e0b000;margin:1em 0;padding:.5em 1em}
code{background:#f3f3f3;padding:0 .2em}
.recommendation{background:#eef7ee;border:1px solid #7bb47b;padding:.5em 1em;margin:1em 0}
details{border-top:1px solid #ccc;margin:.3em 0}summary{cursor:pointer}summary h2{display:inline;border:none;font-size:1.15em}
th{cursor:pointer}th[aria-sort=ascending]::after{content:" ▲"}th[aria-sort=descending]::after{content:" ▼"}
@media print{th[aria-sort]::after{content:""}}
"""

# Sort a table by the clicked column: numbers by the first number in the cell ("0.512 [0.40, 0.61]" -> 0.512), text
# otherwise; "n/a" and empty cells last. Changes nothing but the order of rows.
SORT_JS = r"""document.querySelectorAll("table").forEach(function(t){var b=t.tBodies[0];if(!b)return;
t.querySelectorAll("th").forEach(function(h,i){h.addEventListener("click",function(){
var up=h.getAttribute("aria-sort")!=="ascending";t.querySelectorAll("th").forEach(function(x){x.removeAttribute("aria-sort")});
h.setAttribute("aria-sort",up?"ascending":"descending");
var key=function(r){var c=r.cells[i];var s=c?c.textContent.trim():"";var m=s.match(/^[-+\u2212]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?/i);
return m?[0,parseFloat(m[0].replace(/,/g,"").replace("\u2212","-")),s]:[s===""||s==="n/a"||s==="\u2014"||s==="\u2013"?2:1,0,s]};
var rows=Array.prototype.slice.call(b.rows).map(function(r,j){return [key(r),j,r]});
rows.sort(function(x,y){var a=x[0],c=y[0];if(a[0]!==c[0])return a[0]-c[0];
var d=a[0]===0?a[1]-c[1]:a[2].localeCompare(c[2]);return (up?d:-d)||x[1]-y[1]});
rows.forEach(function(r){b.appendChild(r[2])})})})});"""
SORT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(SORT_JS.encode("utf-8")).digest()).decode("ascii")
APPENDIX_H1 = "<h1>Appendix</h1>"


def data_uri(path: Path) -> str | None:
    """The file as a base64 data URI, or None when it is missing or not an image type we know."""
    mime = MIME.get(path.suffix.lower())
    if mime is None or not path.is_file():
        return None
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


CSP = f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src '{SORT_HASH}'; base-uri 'none'; form-action 'none'"
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*:|//)", re.I)  # an absolute URL or a scheme-relative one: leaves the report


def render(markdown: str, base_dir: Path, *, title: str = "recallbench report") -> str:
    """HTML document for ``markdown``; image paths are resolved against ``base_dir`` and inlined.

    A section whose heading starts with "Recommendation" is wrapped in a highlighted box. Nothing is fetched or run:
    raw HTML is shown as text, a content security policy allows only inline styles and ``data:`` images, a link to
    another site is shown as its text and address (not clickable), a remote image as its address.
    Raises ValueError naming the image when a referenced local image is missing (the page would
    show a broken image otherwise).
    """
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(markdown)
    for tok in tokens:
        if tok.children:
            tok.children = _offline(tok.children, Path(base_dir))
    body = md.renderer.render(tokens, md.options, {})
    body = _collapse_appendix(_box_recommendation(body))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
        "<meta name=\"referrer\" content=\"no-referrer\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n<body>\n{body}<script>{SORT_JS}</script></body></html>\n"
    )


def _offline(children: list, base_dir: Path) -> list:
    """Inline tokens with local images inlined as data URIs, remote images and links to other sites as plain text."""
    from markdown_it.token import Token

    out, closing = [], []
    for child in children:
        if child.type == "image":
            src = str(child.attrGet("src") or "")
            if src.startswith("data:"):
                out.append(child)
            elif _SCHEME.match(src):
                log.warning("report.md: image %r is remote; shown as its address (the HTML report works offline)", src)
                out.append(Token("text", "", 0, content=f"[image not loaded: {src}]"))
            else:
                uri = data_uri(base_dir / src)
                if uri is None:
                    raise ValueError(f"report.md: image {src!r} not found under {base_dir} (or not a known image type)")
                child.attrSet("src", uri)
                out.append(child)
        elif child.type == "link_open":
            href = str(child.attrGet("href") or "")
            closing.append(href if _SCHEME.match(href) else None)
            if closing[-1] is None:
                out.append(child)
        elif child.type == "link_close":
            href = closing.pop() if closing else None
            out.append(child if href is None else Token("text", "", 0, content=f" <{href}>"))
        else:
            out.append(child)
    return out


def _box_recommendation(body: str) -> str:
    start = body.find("<h2>Recommendation")
    if start < 0:
        return body
    end = body.find("<h2>", start + 4)
    end = len(body) if end < 0 else end
    return body[:start] + '<div class="recommendation">\n' + body[start:end] + "</div>\n" + body[end:]


def _collapse_appendix(body: str) -> str:
    """Every ``<h2>`` section after the appendix heading inside a closed ``<details>``, its heading as the summary.
    The heading is the renderer's own (data never makes a heading: ``bench.output.md_text``)."""
    start = body.find(APPENDIX_H1)
    if start < 0:
        return body
    head, rest = body[:start + len(APPENDIX_H1)], body[start + len(APPENDIX_H1):]
    parts = rest.split("<h2>")
    out = [head, parts[0]]
    for part in parts[1:]:
        title, _, content = part.partition("</h2>")
        out.append(f"<details><summary><h2>{title}</h2></summary>{content}</details>\n")
    return "".join(out)


def write_html(run_dir: Path, markdown: str | None = None) -> Path:
    """Write ``report.html`` beside ``report.md`` (read from disk when ``markdown`` is None)."""
    run = RunDir(run_dir)
    if markdown is None:
        markdown = run.file(REPORT_MD).read_text()
    page = render(markdown, run.path, title=f"recallbench report: {run.path.name}")
    return run.write_text(REPORT_HTML, page)
