"""The uDAPL study's data rates (its tables of scheduled and chaotic transfers): the data rate at a receiver against
the message size, one line per schedule and setting, assembled across a folder's bw meshes (a suite's mesh
points, one mesh.json each)."""

from __future__ import annotations

import base64
from typing import Optional

import matplotlib.pyplot as plt

from fabmeter import analysis
from fabmeter.report.figures import Colors, _legend, _size_ticks, png
from fabmeter.report.files import number, obj
from fabmeter.report.markup import Html, el

# What tells a mesh's line apart, besides its schedule and transport (the study's tables vary these).
SETTINGS = (("op", "op"), ("pattern", None), ("rq_depth", "rq"), ("tx_depth", "tx"), ("size_spread", "spread %"))


def receiver_gbps(doc: dict) -> Optional[float]:
    """The mean over receivers of the data rate at each: slotted bulk, its senders' arrivals summed (the plan's
    figure); chaotic, its pairs' Gbit/s summed (all at once); scheduled rounds, their mean (one sender at a
    time). None: no pair with a rate."""
    summary = doc["mesh"]
    slotted = obj(summary.get("slotted"))
    if slotted.get("bulk"):
        rates = [number(r.get("gbps")) for r in slotted.get("receivers") or [] if isinstance(r, dict)]
    else:
        by_dst: dict = {}
        for p in doc.get("pairs") or []:
            if p.get("status") == "ok" and number(p.get("gbps")) is not None:
                by_dst.setdefault(p.get("dst"), []).append(p["gbps"])
        at_once = summary.get("schedule") == "chaotic"
        rates = [sum(v) if at_once else sum(v) / len(v) for v in by_dst.values()]
    rates = [r for r in rates if r is not None]
    return sum(rates) / len(rates) if rates else None


def label(doc: dict) -> str:
    summary, params = doc["mesh"], obj(doc.get("params"))
    words = [str(summary.get("schedule")), str(summary.get("transport") or "")]
    for key, name in SETTINGS:
        value = summary.get(key) if key == "pattern" else params.get(key)
        if value not in (None, "", False, 0):
            words.append(f"{name} {value}" if name else str(value))
    return " ".join(w for w in words if w)


def rates(meshes: list[tuple[str, dict]]) -> dict[str, dict[int, float]]:
    """label -> message size -> data rate at a receiver (Gbit/s), over every bw mesh with a size."""
    out: dict[str, dict[int, float]] = {}
    for _, doc in meshes:
        size = number(obj(doc.get("params")).get("size"))
        if doc["mesh"].get("experiment") != "bw" or size is None or doc["mesh"].get("tool"):
            continue
        gbps = receiver_gbps(doc)
        if gbps is not None:
            out.setdefault(label(doc), {})[int(size)] = gbps
    return out


def fig_rates(lines: dict[str, dict[int, float]]) -> bytes:
    colors = Colors(lines)
    fig, ax = plt.subplots(figsize=(10.5, 4.0))
    for name, by_size in sorted(lines.items()):
        sizes = sorted(by_size)
        ax.plot(sizes, [by_size[s] * 1e3 for s in sizes], marker="o", ms=3.5, color=colors(name), label=name,
                ls="-" if name.startswith("slotted") else "--")
    _size_ticks(ax)
    ax.set_yscale("log")
    ax.set_xlabel("message (buffer) size")
    ax.set_ylabel("data rate at a receiver [Mbit/s, log]")
    ax.set_title("bw meshes: data rate against buffer size, scheduled and chaotic")
    _legend(fig, ax, len(lines), "lower right", 12.0)
    return png(fig)


def section(meshes: list[tuple[str, dict]]) -> list[Html]:
    """The table (sizes in rows, one column a line, Mbit/s) and its figure; nothing without two bw meshes."""
    lines = rates(meshes)
    if sum(len(v) for v in lines.values()) < 2:
        return []
    names = sorted(lines)
    sizes = sorted({s for v in lines.values() for s in v})
    cell = lambda name, s: "-" if s not in lines[name] else f"{lines[name][s] * 1e3:,.1f}"   # noqa: E731
    table = el("table", el("tr", el("th", "size"), [el("th", n) for n in names]),
               [el("tr", el("td", analysis.fmt_size(s)), [el("td", cell(n, s)) for n in names]) for s in sizes])
    src = "data:image/png;base64," + base64.b64encode(fig_rates(lines)).decode("ascii")
    return [table, el("figure", el("img", alt="data rate against buffer size", src=src))]


def entry(drawn, meshes: list[tuple[str, dict]]) -> tuple:
    """The report's section (html.py's list of top sections)."""
    return ("udapl", "Data rate against buffer size: scheduled and chaotic transfers", drawn(section, meshes),
            "The uDAPL study's tables of data rates (Mbit/s) from a folder's bw meshes: the mean over receivers of "
            "the data rate at each (slotted: its senders' arrivals summed; chaotic: its pairs' Gbit/s summed; "
            "scheduled rounds: their mean, one sender at a time), one column a schedule and setting.")
