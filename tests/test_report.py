"""`fabmeter report`: one self-contained HTML file, checked as text and in
headless Chromium (every image decodes, no console errors, a screenshot)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import report_fixture
from fabmeter.report import table
from conftest import REPO, Fabmeter, cli_env, one_line_error

ARTIFACTS = REPO / "tests" / "artifacts"      # git-ignored; the screenshot is kept here
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
IMG_RE = re.compile(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]*)"')


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_report_is_self_contained(fixture_report):
    _, path = fixture_report
    text = path.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "http://" not in text and "https://" not in text
    assert "<link" not in text and "url(" not in text and "@import" not in text
    assert text.count("<script") == 1 and "<script>" + str(table.SORT_SCRIPT) + "</script>" in text   # its own only
    images = IMG_RE.findall(text)
    assert len(images) == text.count("<img ") == report_fixture.EXPECTED_FIGURES
    for b64 in images:
        data = base64.b64decode(b64, validate=True)
        w, h = _png_size(data)
        assert w > 200 and h > 150 and len(data) > 5000


def test_report_content(fixture_report):
    root, path = fixture_report
    text = path.read_text()
    for folder in ("lat-shm-busy", "lat-tcp-busy-sweep", "oneway-tcp-event", "bw-shm-busy-sweep",
                   "stream/stream-tcp-busy", "lat-udp-busy-failed"):
        assert re.search(f"<td>(<a href=\"#run-\\d+\">)?{folder}(</a>)?</td>", text), folder
    # The failed run is listed with its message; the peer row is marked, with its note.
    assert "the server engine exited and the client did not notice in time" in text
    assert "peer: sockperf" in text and '<td class="note">sockperf ping-pong, blocking sockets' in text
    assert '<td>RTT</td><td data-v="51000.0">51,000</td>' in text                        # a round trip stays a round trip
    assert '<td>skipped</td><td class="note">not installed (apt-get install ucx-utils)' in text
    # Figures and columns say what the latency is.
    assert "RTT/2" in text and "one-way" in text
    for section in ("Environment", "Comparison table", "Latency histograms", "CDF overlays",
                    "Latency vs message size", "Bandwidth and message rate", "Stream: latency vs rate",
                    "Load: latency and throughput against offered rate"):
        assert section in text, section
    env = json.loads((root / "lat-shm-busy" / "run.json").read_text())["environment"]
    assert env["hostname"] in text
    if env["cpuidle"]["driver"]:   # how an idle CPU waits explains event-mode figures
        assert f"cpuidle {env['cpuidle']['driver']}" in text
    # The stage figure: verbs with and without --inline in one figure, shm's alone, none for the older tcp run.
    assert "One-way stages" in text
    assert re.findall(r'alt="(one-way stages[^"]*)"', text) == ["one-way stages shm busy 32 B",
                                                               "one-way stages verbs busy inline 0 32 B"]
    assert "32 B: oneway-verbs-busy-inline-0, oneway-verbs-busy-inline-188; a row per stage" in text
    # Stream rows: rate x values, missed-step share.
    assert "100,000 Hz x 64 values (536 B)" in text
    # Load rows: offered rate per point, the capacity point named; every load figure drawn.
    assert "300,000 req/s offered" in text and "capacity (closed loop)" in text
    assert re.search(r"<td>load/load-shm-busy-w2</td><td>load</td><td>shm busy</td><td data-v=\"100000\">100,000 "
                     r"req/s offered</td><td>RTT</td>", text)   # a round trip, never read as one-way
    for alt in report_fixture.LOAD_FIGURE_ALTS:
        assert f'alt="{alt}"' in text, alt
    # The mesh's round start: skew and lateness per round and overall.
    assert "round start: skew" in text and "round start skew p99 500 µs, max 500 µs" in text
    # The mesh: its matrices and per-host table, the failed pair counted, the slow link's p50 in its cell.
    assert "Mesh: every directed pair of N hosts" in text and ", 2 mesh runs" in text
    for alt in report_fixture.MESH_FIGURE_ALTS:
        assert f'alt="{alt}"' in text, alt
    assert "12 pairs (1 failed)" in text and "<td>3</td><td>10.0.0.4</td><td>3 (1)</td>" in text
    # Its outliers (the slow link, both ways; framed in the p50 heatmap) and drift listed under the heatmaps.
    assert "link 0 10.0.0.1 \u2192 2 10.0.0.3:" in text and "link 2 10.0.0.3 \u2192 0 10.0.0.1:" in text
    assert "<b>drift mtu</b>: 9000 on 0 10.0.0.1, 1 10.0.0.2, 2 10.0.0.3; 1500 on 3 10.0.0.4" in text
    assert "3.5 scaled MADs" in text
    # Throughput over time per connection: for the plain bw run's points and for the bw mesh's pairs.
    for alt in report_fixture.THROUGHPUT_FIGURE_ALTS:
        assert f'alt="{alt}"' in text, alt


def test_report_output_option_and_errors(tmp_path, fixture_report):
    root, _ = fixture_report
    fm = Fabmeter("report-test")
    out = tmp_path / "elsewhere" / "r.html"
    r = fm.run("report", root / "lat-shm-busy", "-o", out)   # one run: quick
    assert r.returncode == 0 and r.stdout.strip() == str(out) and len(IMG_RE.findall(out.read_text())) == 1
    r = fm.run("report", tmp_path / "nothing-here")
    assert r.returncode == 2 and "is not a folder" in one_line_error(r.stderr)
    (tmp_path / "empty").mkdir()
    r = fm.run("report", tmp_path / "empty")
    assert r.returncode == 2 and "no run.json, peers.json or mesh.json" in one_line_error(r.stderr)


def test_cdf_of_a_bench_sized_overlay(tmp_path):
    """A bench puts dozens of runs of one configuration in one CDF: one legend
    entry per label, beside the plot, and matplotlib has nothing to warn about."""
    import numpy as np
    rng = np.random.default_rng(7)
    for t in range(10):
        for k in range(3):
            folder = tmp_path / f"lat-t{t}-{k}"
            folder.mkdir()
            p = report_fixture._latency_point(folder, rng, "lat", f"t{t}", "busy", 32, 100.0 * (t + 1), n=500)
            report_fixture._write(folder, report_fixture._run_doc("lat", {"transport": f"t{t}", "poll": "busy"}, [p]))
    r = subprocess.run([sys.executable, "-W", "error", "-m", "fabmeter", "report", tmp_path],   # this checkout's code
                       capture_output=True, text=True, timeout=300, env=cli_env("report-test"))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    text = (tmp_path / "report.html").read_text()
    assert "lat, 32 B: 30 runs" in text


def test_labels_come_from_params(tmp_path):
    """run.json holds every option (config.params); a label names the mode
    options that set runs of one transport apart, and no others."""
    from fabmeter.report import model
    rng = __import__("numpy").random.default_rng(3)
    for name, params in (("ofi-tcp", {"transport": "ofi", "provider": "tcp", "ep": "msg"}),
                         ("ofi-shm", {"transport": "ofi", "provider": "shm", "ep": "rdm"}),
                         ("tcp-a", {"transport": "tcp", "poll": "event"}),
                         ("tcp-b", {"transport": "tcp", "poll": "event", "size": 64}),
                         ("shm-rq24", {"transport": "shm", "rq_depth": 24}),
                         ("shm-rq48", {"transport": "shm", "rq_depth": 48})):
        folder = tmp_path / name
        folder.mkdir()
        point = report_fixture._latency_point(folder, rng, "lat", params["transport"], params.get("poll", "busy"),
                                              params.get("size", 32), 100.0, n=100)
        report_fixture._write(folder, report_fixture._run_doc("lat", params, [point]))
    runs, problems = model.read_runs(tmp_path)
    assert not problems
    labels = {e.run.rel: e.label for e in model.entries_of(runs)}
    assert labels == {"ofi-tcp": "ofi busy tcp msg", "ofi-shm": "ofi busy shm rdm",
                      "tcp-a": "tcp event", "tcp-b": "tcp event",
                      "shm-rq24": "shm busy rq 24", "shm-rq48": "shm busy rq 48"}, labels


def test_report_of_real_suite_runs(fm, tmp_path):
    out = tmp_path / "quick"
    r = fm.run("suite", REPO / "suites" / "quick.toml", "--out", out)
    assert r.returncode == 0, r.stderr
    r = fm.run("report", out)
    assert r.returncode == 0, r.stderr
    text = (out / "report.html").read_text()
    index = json.loads((out / "index.json").read_text())
    for e in index["points"]:
        # Linked to its histogram where it has one.
        assert re.search(rf'<td>(<a href="#run-\d+">)?{re.escape(e["id"])}(</a>)?</td>', text), e["id"]
    assert "suite <b>quick</b>" in text
    assert len(IMG_RE.findall(text)) >= len(index["points"])   # at least a histogram per latency run


# --- in a browser -----------------------------------------------------------

# Injected into a copy of the report: records errors and, once everything
# has loaded, whether each image decoded, into the DOM that --dump-dom prints.
CHECKER = """<script>
window.__errors = [];
window.addEventListener("error", e => window.__errors.push(String(e.message || (e.target && e.target.src)
    || "resource error").slice(0, 200)), true);
const origError = console.error;
console.error = (...a) => { window.__errors.push(a.join(" ").slice(0, 200)); origError(...a); };
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0 && i.naturalHeight > 0)).map(i => i.alt);
  const pre = document.createElement("pre");
  pre.id = "fm-check";
  pre.textContent = JSON.stringify({images: imgs.length, alts: imgs.map(i => i.alt), bad: bad, errors: window.__errors,
                                    width: document.documentElement.scrollWidth});
  document.body.appendChild(pre);
});
</script>"""


def _chromium(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Headless Chromium, offline, in a process group of its own that is always cleaned up."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-extensions", f"--user-data-dir={tmp_path / 'chromium-profile'}",
           "--enable-logging=stderr", "--v=0", *args]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = "", "timed out"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # renderer, GPU and zygote children too
        except ProcessLookupError:
            pass
        proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _console_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/install-deps.sh installs it)")
def test_report_in_headless_chromium(tmp_path, fixture_report):
    _, path = fixture_report
    # A copy in another folder with the checker: the report must not depend on where it lies.
    page = tmp_path / "copy" / "report.html"
    page.parent.mkdir()
    page.write_text(path.read_text().replace("</head>", CHECKER + "</head>", 1))
    r = _chromium(tmp_path, "--virtual-time-budget=15000", "--dump-dom", page.as_uri())
    m = re.search(r'<pre id="fm-check">(.*?)</pre>', r.stdout, re.S)
    assert m, f"the checker did not run: {r.stderr[-2000:]}"
    check = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert check["images"] == report_fixture.EXPECTED_FIGURES
    assert check["bad"] == [], f"images that did not decode: {check['bad']}"
    assert "one-way stages verbs busy inline 0 32 B" in check["alts"], "the stage figure (inline off beside on) is missing"
    assert set(report_fixture.LOAD_FIGURE_ALTS) <= set(check["alts"])   # the load figures, decoded
    assert set(report_fixture.MESH_FIGURE_ALTS) <= set(check["alts"])   # the mesh matrices, decoded
    assert set(report_fixture.THROUGHPUT_FIGURE_ALTS) <= set(check["alts"])   # throughput over time, decoded
    assert check["errors"] == [] and _console_lines(r.stderr) == [], (check["errors"], _console_lines(r.stderr))

    # The report itself (no checker): a screenshot, and nothing on the console.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    r = _chromium(tmp_path, "--hide-scrollbars", f"--screenshot={shot}", "--window-size=1280,4000", path.as_uri())
    assert shot.is_file(), r.stderr[-2000:]
    assert _console_lines(r.stderr) == []
    w, h = _png_size(shot.read_bytes())
    assert (w, h) == (1280, 4000) and shot.stat().st_size > 50_000   # a blank page compresses to a few KB


def test_stage_figure_draws_t_recv_minus_t_send_beside_t_recv_minus_t_subm(monkeypatch):
    """The thesis' pair in one axes: t_recv - t_send over t_recv - t_subm, each with its median;
    a run without t_send (inline) says why in its send row instead of drawing a number."""
    import numpy as np
    from fabmeter import analysis
    from fabmeter.report import figures
    drawn = {}
    monkeypatch.setattr(figures, "png", lambda fig: drawn.setdefault("fig", fig) and b"")
    rng = np.random.default_rng(7)
    whole = rng.normal(1253, 40, 2000)
    send = whole * 0.42
    reason = "inline sends: the payload travels in the work request"
    stages = [(k, f"{n}: {s}") for k, n, s in analysis.ONEWAY_STAGES if k != "completion_ns"]
    columns = [("inline off", {"post_ns": whole * 0.1, "send_ns": send, "latency_ns": whole,
                               "latency_send_ns": whole - send}),
               ("inline on", {"post_ns": whole * 0.1, "latency_ns": whole * 0.72})]
    figures.fig_stages("t", stages, columns, ["C0", "C1"], [{}, {"send_ns": reason}],
                       beside={"latency_ns": analysis.ONEWAY_FROM_SEND})
    axes = drawn["fig"].axes
    row = {k: i for i, (k, _) in enumerate(stages)}

    def legend(ax):
        return [t.get_text() for t in ax.get_legend().get_texts()]
    off_recv, on_recv = axes[2 * row["latency_ns"]], axes[2 * row["latency_ns"] + 1]
    assert "t_recv - t_send" in legend(off_recv) and "t_recv - t_subm" in legend(off_recv)
    assert sum(t.startswith("median") for t in legend(off_recv)) == 2, legend(off_recv)
    assert "t_recv - t_send: absent" in legend(on_recv)
    on_send = axes[2 * row["send_ns"] + 1]
    assert any("inline sends" in t.get_text() for t in on_send.texts), [t.get_text() for t in on_send.texts]
    assert not on_send.patches, "an absent t_send drew a histogram"
