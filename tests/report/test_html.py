"""bench.report.html: a self-contained report.html (images inlined, no network) that headless
Chromium renders with every image loaded. Chromium tests skip when the browser is not installed
(Debian: ``apt-get install -y chromium``)."""

import base64
import json
import re
import shutil
import subprocess

import pandas as pd
import pytest
from demo_run import demo_run

from bench.report import html as html_report

# 1x1 transparent PNG
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--virtual-time-budget=10000"]
CHECK = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const out = document.createElement('pre'); out.id = 'imgcheck';
  out.textContent = JSON.stringify({total: imgs.length, loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    external: [...document.querySelectorAll('[src],[href]')].map(e => e.getAttribute('src') || e.getAttribute('href'))
      .filter(u => !u.startsWith('data:') && !u.startsWith('#')),
    h2: [...document.querySelectorAll('h2')].map(h => h.textContent),
    box: (document.querySelector('.recommendation') || {textContent: ''}).textContent});
  document.body.appendChild(out);
});
</script>"""


def test_render_inlines_images_and_escapes_html(tmp_path):
    (tmp_path / "figs").mkdir()
    (tmp_path / "figs" / "a.png").write_bytes(PNG)
    md = "# t\n\n## Recommendation\n\nuse **x** <script>alert(1)</script>\n\n## Next\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n![fig](figs/a.png)\n"
    page = html_report.render(md, tmp_path)
    assert page.startswith("<!DOCTYPE html>")
    assert 'src="data:image/png;base64,' + base64.b64encode(PNG).decode() + '"' in page
    assert "figs/a.png" not in page.replace('alt="fig"', "")
    assert "<table>" in page and "<td>1</td>" in page
    # raw HTML in Markdown is shown, never run: the page's one script is its own sorter
    assert page.count("<script>") == 1 and "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
    box = page.split('<div class="recommendation">')[1].split("</div>")[0]
    assert "<h2>Recommendation</h2>" in box and "Next" not in box
    assert "http://" not in page and "https://" not in page


def test_render_refuses_missing_images_and_shows_remote_ones_as_their_address(tmp_path):
    with pytest.raises(ValueError, match="image 'nope.png' not found"):
        html_report.render("![x](nope.png)", tmp_path)
    page = html_report.render("![x](https://example.com/x.png)", tmp_path)  # the report still renders, fetching nothing
    assert "<img" not in page and "[image not loaded: https://example.com/x.png]" in page


def test_links_to_other_sites_are_text_local_links_stay(tmp_path):
    md = "[click](https://evil.example/a) [ans](answers.md) <http://evil.example/b> [rel](//evil.example/c) [top](#t)"
    page = html_report.render(md, tmp_path)
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert hrefs == ["answers.md", "#t"]
    assert "click &lt;https://evil.example/a&gt;" in page and "rel &lt;//evil.example/c&gt;" in page


def test_page_carries_a_policy_that_fetches_nothing_and_runs_only_its_sort_script(tmp_path):
    import hashlib

    page = html_report.render("# t", tmp_path)
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page).group(1)
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert scripts == [html_report.SORT_JS]  # one script, the sorter
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode("utf-8")).digest()).decode()
    assert csp == (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
                   "base-uri 'none'; form-action 'none'")
    assert "unsafe" not in csp.split("script-src")[1].split(";")[0]
    assert page.index("Content-Security-Policy") < page.index("<body>")


def test_appendix_sections_are_collapsed_main_sections_are_not(tmp_path):
    md = "# r\n\n## Recommendation\n\nuse x\n\n## Pareto\n\ntext\n\n# Appendix\n\nintro\n\n## Full sweep\n\n| a |\n|---|\n| 1 |\n\n## Runs\n\n- one\n"
    page = html_report.render(md, tmp_path)
    assert "<h2>Pareto</h2>" in page and "<details><summary><h2>Pareto" not in page
    assert page.count("<details>") == 2 and "<details><summary><h2>Full sweep</h2></summary>" in page
    assert "<details><summary><h2>Runs</h2></summary>" in page and page.index("<h1>Appendix</h1>") < page.index("<details>")
    assert page.count('<div class="recommendation">') == 1


def test_write_html_beside_report_md(tmp_path):
    (tmp_path / "p.png").write_bytes(PNG)
    (tmp_path / "report.md").write_text("## Recommendation\n\n![p](p.png)\n")
    out = html_report.write_html(tmp_path)
    assert out == tmp_path / "report.html" and "data:image/png;base64" in out.read_text()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return demo_run(tmp_path_factory.getbasetemp())


@pytest.mark.slow
def test_demo_report_html_is_self_contained(run):
    page = (run / "report.html").read_text()
    md = (run / "report.md").read_text()
    n_images = len(re.findall(r"!\[[^\]]*\]\(", md))
    assert n_images == 8  # 2 sweep plots (quality, tokens) + answer coverage vs tokens + Pareto, CI bands, LOCO, calibration, attribution
    assert page.count('src="data:image/png;base64,') == n_images
    assert not re.search(r'(src|href)="(?!data:|#)', page)  # nothing to fetch


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install -y chromium)")
def test_chromium_renders_every_image(run, tmp_path):
    page = (run / "report.html").read_text()
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace("</body>", CHECK + "</body>")  # the probe is a script
    probe = tmp_path / "probe.html"
    probe.write_text(page)
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=180)
    m = re.search(r'<pre id="imgcheck">(.*?)</pre>', proc.stdout, flags=re.S)
    assert m, f"no probe output from Chromium (rc {proc.returncode}): {proc.stderr[-2000:]}"
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    n_images = len(re.findall(r"!\[[^\]]*\]\(", (run / "report.md").read_text()))
    assert got["total"] == n_images == 8 and got["loaded"] == got["total"]
    assert got["external"] == []
    assert got["h2"][0] == "Recommendation" and "Stability across conversations of this corpus (leave one conversation out)" in got["h2"]
    best = pd.read_csv(run / "analysis" / "recommendation.csv").query("best").iloc[0]
    assert f"similarity ≥ {best['threshold']:.2f}" in got["box"]
    assert f"[{best['f1_lo']:.3f}, {best['f1_hi']:.3f}]" in got["box"] and "LOCO gap" in got["box"]


@pytest.mark.slow  # starts headless Chromium
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install -y chromium)")
def test_chromium_runs_no_script_but_the_pages_own_sorter(tmp_path):
    page = html_report.render("# t\n\nbody", tmp_path).replace("</body>", CHECK + "</body>")  # CSP kept: the probe must not run
    probe = tmp_path / "probe.html"
    probe.write_text(page)
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert "<h1>t</h1>" in proc.stdout, proc.stderr[-2000:]
    assert 'id="imgcheck"' not in proc.stdout  # the inline script was blocked


SORT_PROBE = """<script>
window.addEventListener('load', () => {
  const t = document.querySelector('table'), th = t.querySelectorAll('th')[1];
  const col = () => [...t.tBodies[0].rows].map(r => r.cells[1].textContent.trim());
  th.click(); const up = col(); th.click(); const down = col();
  const out = document.createElement('pre'); out.id = 'sortcheck'; out.textContent = JSON.stringify({up, down});
  document.body.appendChild(out);
});
</script>"""


@pytest.mark.slow  # starts headless Chromium
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install -y chromium)")
def test_chromium_sorts_a_table_by_the_clicked_column(tmp_path):
    # numbers by their first number (a CI after it ignored), n/a last; a second click reverses
    md = "| name | F1 [CI] |\n|---|---|\n| a | 0.5 [0.4, 0.6] |\n| b | n/a |\n| c | 10 |\n| d | 0.05 |\n| e | −1 |\n"
    page = html_report.render(md, tmp_path)
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace("</body>", SORT_PROBE + "</body>")
    probe = tmp_path / "probe.html"
    probe.write_text(page)
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=180)
    m = re.search(r'<pre id="sortcheck">(.*?)</pre>', proc.stdout, flags=re.S)
    assert m, f"no probe output from Chromium (rc {proc.returncode}): {proc.stderr[-2000:]}"
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert got["up"] == ["−1", "0.05", "0.5 [0.4, 0.6]", "10", "n/a"]
    assert got["down"] == ["10", "0.5 [0.4, 0.6]", "0.05", "−1", "n/a"]
