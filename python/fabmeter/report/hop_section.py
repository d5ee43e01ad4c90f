"""Through a forwarding hop (`--via-hop`, hop.py; run.json's "hop"): per transport and figure (lat's round trip,
oneway's and stream's one-way latency), the figure direct and through the hop per percentile, and the hop's added
latency (through minus direct: two passes through the hop for a round trip, one for a one-way figure; the thesis'
t_villas). A run of several hop rounds shows each figure's median over them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional

import matplotlib.pyplot as plt

from fabmeter import analysis, hop
from fabmeter.report.figures import Colors, _legend, png
from fabmeter.report.files import number, obj
from fabmeter.report.markup import Html, el, img
from fabmeter.report.model import Run

DIRECT, THROUGH, ADDED = "direct", "through", "added"   # a Line's figures, in hop.keys' order
# The percentiles drawn, in order, under their names.
ORDER = {"min": "min", **{k: f"p{q:g}" for k, q in analysis.PERCENTILES.items()}, "max": "max"}
TABLE_PERCENTILES = ("p50", "p99")
INTRO = ("Runs through a forwarding hop (fabmeter EXP --via-hop, fabmeter suite --via-hop): per transport, lat's "
         "round trip (RTT) or oneway's and stream's one-way latency, direct and through the hop at each percentile, "
         "and the hop's added latency, through minus direct (the thesis' t_villas, the super-node's time): two "
         "passes through the hop in a round trip, one in a one-way figure. Direct and through-the-hop runs "
         "alternate; a run of several rounds shows the median over them.")


@dataclass
class Line:
    """One run's (and size's) figures: each of DIRECT, THROUGH, ADDED as percentile key -> ns, of `fig`."""
    label: str
    via: str
    size: Optional[float]
    figures: dict[str, dict[str, float]]
    fig: hop.Figure
    transport: str = "?"                # the client's
    hop_transport: Optional[str] = None  # onward from the hop, as the client chose it (None: the hop's own)


def _median(points: list[dict], key: str) -> dict[str, float]:
    """Per percentile, the median over the rounds that have it."""
    per: dict[str, list[float]] = {}
    for p in points:
        for k, v in obj(p.get(key)).items():
            if number(v) is not None:
                per.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in per.items()}


def lines_of(run: Run) -> list[Line]:
    """A run's hop figures, a line per size."""
    doc = obj(run.doc.get("hop"))
    fig = hop.figure_of(doc)
    by_size: dict = {}
    for points in doc.get("rounds") or []:
        for p in points if isinstance(points, list) else []:
            if isinstance(p, dict):
                by_size.setdefault(number(p.get("size")), []).append(p)
    name = str(obj(obj(run.doc.get("config")).get("suite")).get("point") or run.rel)
    onward = doc.get("hop_transport")
    return [Line(name if len(by_size) == 1 else f"{name} {analysis.fmt_size(size)}", str(doc.get("via") or "?"),
                 size, {role: _median(points, key) for role, key in zip((DIRECT, THROUGH, ADDED), hop.keys(fig))},
                 fig, str(run.params.get("transport") or "?"), onward if isinstance(onward, str) else None)
            for size, points in by_size.items()]


def read_write_rows(lines: list[Line]) -> list[tuple[str, Optional[float], dict]]:
    """The thesis' t_r/w where the runs hold its three terms for a transport T and size: one-way latency through
    the hop onto T (--hop-transport T, its client on T: t_IB, and its direct figure t_HCA) and through the hop
    onto shm (t_shmem, from a client on T too). (T, size, t_r/w per percentile), each pair's first runs."""
    ib, shmem = {}, {}
    for line in lines:
        if line.fig is hop.ONE_WAY and line.hop_transport == "shm":
            shmem.setdefault((line.transport, line.size), line)
        elif line.fig is hop.ONE_WAY and line.hop_transport == line.transport:
            ib.setdefault((line.transport, line.size), line)
    return [(t, size, hop.read_write(ib[t, size].figures[THROUGH], shmem[t, size].figures[THROUGH],
                                     ib[t, size].figures[DIRECT]))
            for t, size in ib if (t, size) in shmem]


def by_transport(runs: list[Run]) -> dict[tuple[str, str], list[Line]]:
    """(transport, the figure's what) -> its lines: a round trip and a one-way figure share no axes."""
    out: dict[tuple[str, str], list[Line]] = {}
    for run in runs:
        if not run.peer and obj(run.doc.get("hop")).get("rounds"):
            for line in lines_of(run):
                out.setdefault((str(run.params.get("transport") or "?"), line.fig.what), []).append(line)
    return out


def _us(ns) -> str:
    return analysis.fmt_num(ns / 1000, 2) if number(ns) is not None else "-"


def fig_hop(transport: str, lines: list[Line]) -> bytes:
    """Left: both figures per percentile (solid direct, dashed through the hop); right: the added latency."""
    fig_of = lines[0].fig
    colors = Colors([line.label for line in lines])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.8))
    names = list(ORDER)
    for line in lines:
        color = colors(line.label)
        for key, style, ax in ((DIRECT, "-o", left), (THROUGH, "--s", left), (ADDED, "-o", right)):
            xs = [i for i, k in enumerate(names) if number(line.figures[key].get(k)) is not None]
            ax.plot(xs, [line.figures[key][names[i]] / 1000 for i in xs], style, ms=3.5, color=color,
                    label=line.label if ax is right else None)
    for ax in (left, right):
        ax.set_xticks(range(len(names)), [ORDER[k] for k in names])
        ax.set_xlabel("percentile")
    left.set_yscale("log")
    left.set_ylabel(f"{fig_of.what} [µs, log]")
    left.set_title("solid: direct, dashed: through the hop")
    right.axhline(0, color="0.5", lw=0.8)
    right.set_ylabel("added by the hop [µs]")
    right.set_title(f"through - direct ({fig_of.passes})")
    fig.suptitle(f"{transport}: {fig_of.what} direct and through the forwarding hop")
    _legend(fig, right, len(lines), "upper left", 12.0)
    return png(fig)


def section(runs: list[Run]) -> list[Html]:
    """A table of every run through a hop (p50 and p99, µs) and a figure per transport; nothing without one."""
    groups = by_transport(runs)
    if not groups:
        return []
    head = [el("th", w) for w in ("transport", "figure", "run", "hop", "size")]
    head += [el("th", f"{name} {p} [µs]") for p in TABLE_PERCENTILES
             for name in ("direct", "through the hop", "added by the hop")]
    rows = [el("tr", el("td", t), el("td", what), el("td", line.label), el("td", line.via),
               el("td", analysis.fmt_size(line.size)),
               [el("td", _us(line.figures[key].get(p))) for p in TABLE_PERCENTILES for key in (DIRECT, THROUGH, ADDED)])
            for (t, what), lines in sorted(groups.items()) for line in lines]
    rw = read_write_rows([line for group in groups.values() for line in group])
    rw_table = [el("p", "t_r/w = t_IB - t_shmem - t_HCA (the thesis' read and write functions): one-way latency "
                        "through the hop onto the transport, minus through the hop onto shm, minus the transport's "
                        "direct one-way latency."),
                el("table", el("tr", [el("th", w) for w in ("transport", "size", "t_r/w p50 [µs]", "t_r/w p99 [µs]")]),
                   [el("tr", el("td", t), el("td", analysis.fmt_size(size)),
                       [el("td", _us(figure.get(p))) for p in TABLE_PERCENTILES]) for t, size, figure in rw])] if rw else []
    figures = [img(fig_hop(t, lines), alt=f"{t}: {what} direct and through the hop per percentile",
                   caption=f"{t}: {what} direct and through the hop, and what the hop adds ({lines[0].fig.passes})",
                   wide=True)
               for (t, what), lines in sorted(groups.items())]
    return [el("table", el("tr", head), rows), *rw_table, *figures]


def entry(drawn, runs: list[Run]) -> tuple:
    """The report's section (html.py's list of top sections)."""
    return ("hop", "Through a forwarding hop: direct vs through the hop", drawn(section, runs), INTRO)
