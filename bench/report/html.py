"""Self-contained ``report.html`` from ``report.md``: one file that opens from disk with no network.

Owns the Markdown -> HTML rendering (markdown-it-py, CommonMark + tables, raw HTML disabled), the
inlining of every local image as a base64 ``data:`` URI and a small inline stylesheet. No scripts,
no external fonts, styles or images. The report's content (recommendation first, Pareto frontier,
calibration, LOCO, ...) is decided by ``bench.report``; this module only renders it.
"""

from __future__ import annotations

import base64
import html
import logging
from pathlib import Path

from bench.rundir import REPORT_HTML, REPORT_MD, RunDir

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
"""


def data_uri(path: Path) -> str | None:
    """The file as a base64 data URI, or None when it is missing or not an image type we know."""
    mime = MIME.get(path.suffix.lower())
    if mime is None or not path.is_file():
        return None
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def render(markdown: str, base_dir: Path, *, title: str = "recallbench report") -> str:
    """HTML document for ``markdown``; image paths are resolved against ``base_dir`` and inlined.

    A section whose heading starts with "Recommendation" is wrapped in a highlighted box.
    Raises ValueError naming the image when a referenced local image is missing (the page would
    show a broken image otherwise).
    """
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(markdown)
    for tok in tokens:
        for child in tok.children or ():
            if child.type != "image":
                continue
            src = str(child.attrGet("src") or "")
            if src.startswith(("data:", "http://", "https://")):
                if not src.startswith("data:"):
                    raise ValueError(f"report.md: image {src!r} is remote; the HTML report must work offline")
                continue
            uri = data_uri(Path(base_dir) / src)
            if uri is None:
                raise ValueError(f"report.md: image {src!r} not found under {base_dir} (or not a known image type)")
            child.attrSet("src", uri)
    body = md.renderer.render(tokens, md.options, {})
    body = _box_recommendation(body)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n<body>\n{body}</body></html>\n"
    )


def _box_recommendation(body: str) -> str:
    start = body.find("<h2>Recommendation")
    if start < 0:
        return body
    end = body.find("<h2>", start + 4)
    end = len(body) if end < 0 else end
    return body[:start] + '<div class="recommendation">\n' + body[start:end] + "</div>\n" + body[end:]


def write_html(run_dir: Path, markdown: str | None = None) -> Path:
    """Write ``report.html`` beside ``report.md`` (read from disk when ``markdown`` is None)."""
    run = RunDir(run_dir)
    if markdown is None:
        markdown = run.file(REPORT_MD).read_text()
    page = render(markdown, run.path, title=f"recallbench report: {run.path.name}")
    return run.write_text(REPORT_HTML, page)
