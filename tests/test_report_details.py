"""The report's details a newcomer reads first: bandwidth bars that start at 0, CPU chart rows that differ, the
comparison table in the page's own scroll, peer tools in the summary figure, and one number format per terminal
row."""

from __future__ import annotations

import re
import shutil

import numpy as np

from fabmeter import analysis
from fabmeter.report import figures, html, summary
from fabmeter.report.model import entries_of, read_runs


def _drawn(monkeypatch, draw, *args):
    """The matplotlib figure `draw` makes (not its PNG)."""
    made = []
    monkeypatch.setattr(figures, "png", lambda fig: made.append(fig) or b"")
    draw(*args)
    return made[0]


def test_bandwidth_bars_stand_on_a_linear_axis_from_zero(monkeypatch):
    bars = {"shm busy": {32: (0.05, 2e5), 65536: (40.0, 7.6e4)}, "tcp busy": {32: (0.01, 4e4), 65536: (9.0, 1.7e4)}}
    fig = _drawn(monkeypatch, figures.fig_summary, summary.Summary(bandwidth=bars), figures.Colors(list(bars)))
    axes = [ax for ax in fig.axes if ax.get_title().startswith("bw:")]
    assert len(axes) == 2
    for ax in axes:
        assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0, ax.get_title()


def test_cpu_chart_rows_of_alike_points_are_told_apart_by_their_run(fm, tmp_path, monkeypatch):
    r = fm.run("lat", "-t", "shm", "-n", "300", "--warmup", "50", "--out", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    for name in ("b", "c"):
        shutil.copytree(tmp_path / "a", tmp_path / name)
    rows = []
    monkeypatch.setattr(html, "fig_cpu_cost", lambda r, colors: rows.extend(r) or b"")
    runs, _ = read_runs(tmp_path)
    entries = entries_of(runs)
    assert html.section_cpu(entries, figures.Colors([e.label for e in entries]))
    names = [row[0] for row in rows]
    assert len(names) == 3 and len(set(names)) == 3, names
    assert [n[-3:] for n in names] == ["(a)", "(b)", "(c)"], names


def test_comparison_table_scrolls_with_the_page_and_peers_are_in_the_summary(fixture_report):
    root, path = fixture_report
    page = path.read_text()
    scroll = re.search(r"\.scroll \{([^}]*)\}", page).group(1)
    assert "max-height" not in scroll and "overflow-y" not in scroll, scroll
    runs, _ = read_runs(root)
    rows = [row.name for kind in summary.summarize(entries_of(runs)).latency.values() for row in kind]
    assert any(name.startswith("sockperf tcp") for name in rows), rows


def test_a_terminal_row_has_one_number_format():
    table = analysis.format_table(["figure", "min", "p50", "max", "iterations"],
                                  [["a", 2190.0, 2002.4, 9000.0, 2000], ["b", 2002.4, 9893.5, 17993952.0, 10000],
                                   ["c", np.float64(7.25), 3.0, None, 5], ["d", 13445.0, 14769.0, 26890.0, 1]])
    a, b, c, d = table.splitlines()[2:]
    assert a.split()[1:] == ["2,190.0", "2,002.4", "9,000.0", "2,000"], a
    assert b.split()[1:] == ["2,002.4", "9,893.5", "17,993,952.0", "10,000"], b
    assert c.split()[1:] == ["7.2", "3.0", "-", "5"], c
    assert d.split()[1:] == ["13,445", "14,769", "26,890", "1"], d


def test_lat_prints_each_row_in_one_format(fm):
    r = fm.run("lat", "-t", "shm", "-n", "300", "--warmup", "50")
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith(("one-way", "RTT ns"))]
    assert rows, r.stdout
    for row in rows:
        numbers = re.findall(r"\d[\d,]*(?:\.\d+)?", row.split(" ns", 1)[1])
        assert len({"." in n for n in numbers}) == 1, row
