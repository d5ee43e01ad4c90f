"""The report answers at a glance: in headless Chromium at 1400 x 900 the
largest thing on the first screen is the summary figure (a demo-like report
of short real runs, a bench's, the fixture's), the comparison table sorts
by a clicked column, detail is folded, and a single run still stands first."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import report_fixture
from conftest import Fabmeter
from test_report import ARTIFACTS, CHROMIUM, _chromium, _console_lines

VIEWPORT = (1400, 900)

# Injected into a copy of the page: once loaded, the element with the largest visible area on the first screen
# (VIEWPORT: headless Chromium's window is that size, its innerHeight a little less), the summary figure's box,
# then the table's rows by "p99" before and after a click on its header and a second.
GLANCE = """<script>
window.addEventListener("load", () => {
  const [vw, vh] = [%d, %d];
  const seen = el => { const r = el.getBoundingClientRect();
    return Math.max(0, Math.min(r.right, vw) - Math.max(r.left, 0)) * Math.max(0, Math.min(r.bottom, vh) - Math.max(r.top, 0)); };
  const items = Array.from(document.querySelectorAll("img, table, p, nav, ul, h1, h2, details, div.notes"));
  const largest = items.reduce((a, b) => seen(b) > seen(a) ? b : a);
  const fig = document.querySelector("#summary-figure img");
  const box = fig.getBoundingClientRect();
  const table = document.querySelector("table.sortable");
  const heads = Array.from(table.tHead.rows[0].cells);
  const col = heads.findIndex(c => c.textContent.startsWith("p99"));
  const rows = () => Array.from(table.tBodies[0].rows).map(r => [r.cells[0].textContent,
      r.cells[col] && r.cells[col].dataset.v !== undefined ? Number(r.cells[col].dataset.v) : null]);
  const before = rows();
  heads[col].click(); const asc = rows();
  heads[col].click(); const desc = rows();
  const pre = document.createElement("pre");
  pre.id = "fm-glance";
  pre.textContent = JSON.stringify({width: window.innerWidth, largest_is_summary: largest === fig, largest: largest.tagName,
    box: {top: box.top, left: box.left, width: box.width, height: box.height, seen: seen(fig)},
    before, asc, desc, scripts: document.scripts.length});
  document.body.appendChild(pre);
});
</script>""" % VIEWPORT


def _glance(tmp_path: Path, report: Path, shot: str) -> dict:
    """The page in Chromium at VIEWPORT (a screenshot kept in tests/artifacts/), and what GLANCE found."""
    page = tmp_path / "glance" / "report.html"
    page.parent.mkdir(exist_ok=True)
    page.write_text(report.read_text().replace("</body>", GLANCE + "</body>", 1))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = ARTIFACTS / shot
    png.unlink(missing_ok=True)
    r = _chromium(tmp_path, "--hide-scrollbars", f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
                  "--virtual-time-budget=10000", f"--screenshot={png}", "--dump-dom", page.as_uri())
    m = re.search(r'<pre id="fm-glance">(.*?)</pre>', r.stdout, re.S)
    assert m, f"the checker did not run: {r.stderr[-2000:]}"
    assert png.is_file() and _console_lines(r.stderr) == [], _console_lines(r.stderr)
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def _assert_opens_on_summary(g: dict) -> None:
    assert g["width"] == VIEWPORT[0]
    box = g["box"]
    assert g["largest_is_summary"], g
    assert box["top"] < VIEWPORT[1] / 2 and box["width"] > 0.85 * VIEWPORT[0], box   # high up, the page's width
    assert box["seen"] > 0.25 * VIEWPORT[0] * VIEWPORT[1], box


def _assert_sorts(g: dict) -> None:
    for rows, sign in ((g["asc"], 1), (g["desc"], -1)):
        values = [v for _, v in rows if v is not None]
        assert values == sorted(values, key=lambda v: sign * v), rows
        assert all(v is None for _, v in rows[len(values):]), rows      # rows without the figure stay last
    assert g["asc"] != g["desc"]


def _assert_self_contained(text: str) -> None:
    assert "http://" not in text and "https://" not in text and "<link" not in text and "url(" not in text
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*//""", text)


pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/install-deps.sh)")


def test_demo_like_report_opens_on_its_summary(fm, tmp_path):
    """Short real runs over shm, tcp and udp (the demo's lat rows, -n 2000)."""
    root = tmp_path / "results"
    for transport in ("shm", "tcp", "udp"):
        r = fm.run("lat", "-t", transport, "-n", "2000", "--out", root / f"lat-{transport}")
        assert r.returncode == 0, r.stderr
    r = fm.run("report", root)
    assert r.returncode == 0, r.stderr
    text = (root / "report.html").read_text()
    _assert_self_contained(text)
    g = _glance(tmp_path, root / "report.html", "report-demo-1400x900.png")
    _assert_opens_on_summary(g)
    _assert_sorts(g)
    # The machine in one line under the title, and on a 2-CPU machine the warning about busy pairs.
    assert re.search(r'<p class="machine">[^<]+ · \d+ CPUs[^<]* · CPUs used [^<]+ · kernel [^<]+ · clock ', text)
    # Each row links to its run's histogram, folded under its experiment.
    for transport in ("shm", "tcp", "udp"):
        anchor = re.search(f'<td><a href="#(run-\\d+)">lat-{transport}</a></td>', text).group(1)
        assert f'<figure class="" id="{anchor}"><img alt="histogram lat-{transport}"' in text
    assert '<details><summary>lat: 3 runs</summary>' in text   # closed: no open attribute


def test_bench_report_opens_on_its_ratios(tmp_path):
    root = report_fixture.bench(tmp_path / "bench")
    r = Fabmeter("report-glance").run("report", root)
    assert r.returncode == 0, r.stderr
    text = (root / "report.html").read_text()
    _assert_self_contained(text)
    assert re.search(r'<figure class="wide" id="summary-figure"><img alt="bench ratios"', text)
    g = _glance(tmp_path, root / "report.html", "report-bench-1400x900.png")
    _assert_opens_on_summary(g)
    _assert_sorts(g)


def test_fixture_report_sorts_and_opens_on_summary(tmp_path, fixture_report):
    """Every experiment, a mesh and peers: the summary first, the mesh's heatmaps before the table."""
    _, path = fixture_report
    text = path.read_text()
    assert text.index('id="summary-figure"') < text.index('id="mesh"') < text.index('id="table"')
    g = _glance(tmp_path, path, "report-fixture-1400x900.png")
    _assert_opens_on_summary(g)
    _assert_sorts(g)
    assert g["asc"] != g["before"]   # by p50 first; by p99 the rows move
    # Default order: by p50, points without one last.
    cells = [re.findall(r"<td[^>]*>", row) for row in text.split("<tbody>")[1].split("</tbody>")[0].split("<tr")[1:]]
    p50 = [re.search(r'data-v="([^"]*)"', tds[5]) if len(tds) > 5 else None for tds in cells]
    measured = [float(m.group(1)) for m in p50 if m]
    assert measured == sorted(measured) and len(measured) > 20 and not any(p50[len(measured):])


def test_single_run_report_shows_the_run_first(tmp_path):
    root = tmp_path / "one"
    root.mkdir()
    rng = report_fixture.np.random.default_rng(5)
    point = report_fixture._latency_point(root, rng, "lat", "shm", "busy", 32, 200.0, n=500)
    report_fixture._write(root, report_fixture._run_doc("lat", {"transport": "shm", "poll": "busy"}, [point]))
    r = Fabmeter("report-glance").run("report", root)
    assert r.returncode == 0, r.stderr
    text = (root / "report.html").read_text()
    assert "summary-figure" not in text
    first = text.index("<h2")
    assert text[first:].startswith('<h2 id="summary">The run</h2>')
    assert text.index('<details open><summary>lat: 1 run</summary>') < text.index('id="table"')
    assert text.count("<img ") == 1
