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
    assert "<script>" not in page and "&lt;script&gt;" in page  # raw HTML in Markdown is shown, never run
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


def test_page_carries_a_policy_that_fetches_and_runs_nothing(tmp_path):
    page = html_report.render("# t", tmp_path)
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page).group(1)
    assert csp == "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
    assert page.index("Content-Security-Policy") < page.index("<body>")


def test_write_html_beside_report_md(tmp_path):
    (tmp_path / "p.png").write_bytes(PNG)
    (tmp_path / "report.md").write_text("## Recommendation\n\n![p](p.png)\n")
    out = html_report.write_html(tmp_path)
    assert out == tmp_path / "report.html" and "data:image/png;base64" in out.read_text()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return demo_run(tmp_path_factory.getbasetemp())


def test_demo_report_html_is_self_contained(run):
    page = (run / "report.html").read_text()
    md = (run / "report.md").read_text()
    n_images = len(re.findall(r"!\[[^\]]*\]\(", md))
    assert n_images == 9  # 3 sweep plots + answer coverage vs tokens + Pareto, CI bands, LOCO, calibration, attribution
    assert page.count('src="data:image/png;base64,') == n_images
    assert not re.search(r'(src|href)="(?!data:|#)', page)  # nothing to fetch


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
    assert got["total"] == n_images == 9 and got["loaded"] == got["total"]
    assert got["external"] == []
    assert got["h2"][0] == "Recommendation" and "Stability across conversations of this corpus (leave one conversation out)" in got["h2"]
    best = pd.read_csv(run / "analysis" / "recommendation.csv").query("best").iloc[0]
    assert f"similarity ≥ {best['threshold']:.2f}" in got["box"]
    assert f"[{best['f1_lo']:.3f}, {best['f1_hi']:.3f}]" in got["box"] and "LOCO gap" in got["box"]


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install -y chromium)")
def test_chromium_runs_no_script_the_page_carries(tmp_path):
    page = html_report.render("# t\n\nbody", tmp_path).replace("</body>", CHECK + "</body>")  # CSP kept: the probe must not run
    probe = tmp_path / "probe.html"
    probe.write_text(page)
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert "<h1>t</h1>" in proc.stdout, proc.stderr[-2000:]
    assert 'id="imgcheck"' not in proc.stdout  # the inline script was blocked
