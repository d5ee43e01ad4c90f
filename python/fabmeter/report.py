"""`fabmeter report RESULTS_DIR`: one self-contained HTML file of plots and tables.

Walks RESULTS_DIR for run.json (fabmeter runs, suites, the demo) and
peers.json (other tools' results) and writes one HTML file that opens
offline: the plots are matplotlib PNGs embedded as base64, the style sheet
is inline, nothing is fetched. Sections: environment, a comparison table of
every measured point, latency histograms (one per run), CDF overlays,
latency vs message size, bandwidth and message rate vs size, and for the
stream experiment latency vs rate with missed steps and a rate x values
heatmap.

Every axis says what it shows: one-way latency measured directly, or
RTT/2 from a ping-pong (never mixed in one plot), which percentile, units.
"""

from __future__ import annotations

import base64
import html
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from fabmeter import __version__, analysis, run  # noqa: E402
from fabmeter.results import now_iso  # noqa: E402

# Options that tell runs of one transport apart in labels ("verbs busy uc write").
MODE_KEYS = ("service", "op", "inline", "signal_every", "provider", "ep", "bidir", "timer")
SHORT_OPTIONS = {"t": "transport", "s": "size", "n": "iters", "a": "all"}
EXPERIMENT_ORDER = {"lat": 0, "oneway": 1, "bw": 2, "stream": 3}
STREAM_MISSED_WARN_PCT = 10.0   # the thesis marks grid cells that missed more than 10 % in red
DPI = 100

plt.rcParams.update({"figure.constrained_layout.use": True, "font.size": 9, "axes.titlesize": 10,
                     "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 8, "figure.dpi": DPI,
                     "savefig.dpi": DPI})


# --- results ----------------------------------------------------------------

@dataclass
class Run:
    """One run.json (or one peers.json) below RESULTS_DIR."""
    rel: str                  # folder relative to RESULTS_DIR, for display
    folder: Path
    doc: dict
    peer: bool = False

    @property
    def options(self) -> dict:
        """The options the run was given, as a dict (the demo records a CLI list)."""
        opts = (self.doc.get("config") or {}).get("options")
        if isinstance(opts, dict):
            return opts
        out: dict = {}
        items = list(opts or [])
        for i, a in enumerate(items):
            if not isinstance(a, str) or not a.startswith("-"):
                continue
            key = a.lstrip("-").replace("-", "_")
            key = SHORT_OPTIONS.get(key, key)
            nxt = items[i + 1] if i + 1 < len(items) else None
            out[key] = nxt if isinstance(nxt, str) and not nxt.startswith("-") else True
        return out

    @property
    def status(self) -> str:
        return str(self.doc.get("status", "ok" if self.peer else "?"))


@dataclass
class Entry:
    """One measured point of one run."""
    run: Run
    point: dict
    label: str = ""                        # transport and mode, e.g. "tcp event", "verbs busy rc inline 188"
    _samples: Optional[np.ndarray] = field(default=None, repr=False)

    @property
    def experiment(self) -> str:
        return str(self.point.get("experiment") or (self.run.doc.get("config") or {}).get("experiment") or "?")

    @property
    def rtt_half(self) -> bool:
        kind = self.point.get("latency_kind")
        return kind == "rtt/2" or (kind is None and self.experiment == "lat")

    @property
    def latency_name(self) -> str:
        return latency_name(self.point, self.experiment)

    def samples(self) -> Optional[np.ndarray]:
        """One-way latency samples in ns (RTT/2 for ping-pong runs), or None."""
        if self._samples is None:
            names = self.point.get("samples") or {}
            try:
                if "latency_ns" in names:
                    self._samples = np.load(self.run.folder / names["latency_ns"])
                elif "rtt_ns" in names:
                    self._samples = np.load(self.run.folder / names["rtt_ns"]) / 2.0
            except (OSError, ValueError):
                return None
        if self._samples is None or self._samples.size == 0:
            return None
        return self._samples

    def where(self) -> str:
        """The point's size, or rate and values for a stream."""
        p = self.point
        if p.get("rate_hz") is not None:
            return (f"{analysis.fmt_num(p['rate_hz'])} Hz x {p.get('values')} values "
                    f"({analysis.fmt_size(p.get('size'))})")
        return analysis.fmt_size(p.get("size"))


def latency_name(point: dict, experiment: str) -> str:
    kind = point.get("latency_kind") or ("rtt/2" if experiment == "lat" else "one-way")
    if kind == "rtt/2":
        return "one-way latency = RTT/2"
    return "one-way latency" + (f" {kind[len('one-way'):].strip()}" if kind.startswith("one-way ") else "")


def load(root: Path) -> tuple[list[Run], list[str]]:
    """Every run.json and peers.json below root (sorted), and what could not be read."""
    runs, problems = [], []
    for path in sorted(list(root.rglob("run.json")) + list(root.rglob("peers.json"))):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            problems.append(f"{path.relative_to(root)}: {e}")
            continue
        peer = path.name == "peers.json"
        if peer and isinstance(doc, list):
            doc = {"points": doc}
        if not isinstance(doc, dict):
            problems.append(f"{path.relative_to(root)}: not a JSON object")
            continue
        rel = str(path.parent.relative_to(root)) or "."
        runs.append(Run(rel + ("/peers.json" if peer else ""), path.parent, doc, peer))
    return runs, problems


def mode_words(opts: dict) -> list[str]:
    """The options given to a run that set its mode apart: rc, write, inline 188, sig 1, bidir."""
    words = []
    for k in MODE_KEYS:
        v = opts.get(k)
        if v is None or v is False or v == "":
            continue
        if v is True:
            words.append(k)
        elif k == "inline":
            words.append(f"inline {v}")
        elif k == "signal_every":
            words.append(f"sig {v}")
        else:
            words.append(str(v))
    return words


def entries_of(runs: list[Run]) -> list[Entry]:
    out = []
    for r in runs:
        opts = r.options
        extras = mode_words(opts)
        for p in r.doc.get("points") or []:
            if not isinstance(p, dict):
                continue
            if r.peer:
                label = f"{p.get('tool', 'peer')} {p.get('transport', '')}".strip()
            else:
                label = " ".join([str(p.get("transport", opts.get("transport", "?"))),
                                  str(p.get("poll", opts.get("poll", "")))] + extras).strip()
            out.append(Entry(r, p, label))
    return out


def representative(entries: list[Entry]) -> Entry:
    """The point of a multi-point run that stands for it: 32 B if measured,
    for a stream the highest rate with the fewest values, else the first."""
    streams = [e for e in entries if e.point.get("rate_hz") is not None]
    if streams:
        return max(streams, key=lambda e: (e.point["rate_hz"], -(e.point.get("values") or 0)))
    for e in entries:
        if e.point.get("size") == 32:
            return e
    return entries[0]


# --- formatting ---------------------------------------------------------------

def fmt_ns(x: Optional[float]) -> str:
    if x is None or x != x:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} ns"


def unit_for(ns: float) -> tuple[str, float]:
    """An axis unit that keeps the numbers short: ns, µs or ms."""
    if ns < 2e3:
        return "ns", 1.0
    if ns < 2e6:
        return "µs", 1e3
    return "ms", 1e6


def _size_ticks(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: analysis.fmt_size(int(round(v))) if v >= 1 else ""))
    for t in ax.get_xticklabels():
        t.set_rotation(30)


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


class Colors:
    """One colour per label, the same in every figure."""

    def __init__(self, labels):
        labels = sorted(set(labels))
        cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
        self.of = {lab: cmap(i % cmap.N) for i, lab in enumerate(labels)}

    def __call__(self, label: str):
        return self.of.get(label, "k")


def _threshold(point: dict) -> Optional[tuple[float, Optional[float], str]]:
    """(threshold ns, share above in %, what it is) for oneway and stream points."""
    if point.get("threshold_us") is not None:
        return point["threshold_us"] * 1e3, point.get("above_threshold_pct"), "threshold"
    if point.get("deadline_us") is not None:
        return point["deadline_us"] * 1e3, point.get("deadline_miss_pct"), "deadline"
    return None


# --- figures (one function each) --------------------------------------------

def fig_histogram(e: Entry, color) -> bytes:
    """Latency histogram of one point: median and max marked, share above the threshold.

    A compact distribution gets a linear axis over its body (to p50 + 4 x
    (p99 - p50)), the far tail counted in the legend; a heavy-tailed one
    (p99 > 5 x p50) gets log-spaced bins from min to max.
    """
    a = e.samples()
    lo, mx = float(a.min()), float(a.max())
    p50, p99 = (float(x) for x in np.percentile(a, [50, 99]))
    heavy = p99 > 5 * p50 and lo > 0
    hi = mx if heavy else min(mx, p50 + 4 * (p99 - p50))
    hi = hi if hi > lo else lo + 1.0
    unit, scale = unit_for(hi)
    beyond = int(np.count_nonzero(a > hi))
    bins = np.geomspace(lo, hi, 120) if heavy else np.linspace(lo, hi, 121)
    fig, ax = plt.subplots(figsize=(6.2, 3.3))
    ax.hist(a[a <= hi] / scale, bins=bins / scale, color=color, alpha=0.85, log=True, histtype="stepfilled")
    ax.axvline(p50 / scale, color="k", lw=1.3, label=f"median {fmt_ns(p50)}")
    if beyond == 0:
        ax.axvline(mx / scale, color="#c0392b", lw=1.2, ls="--", label=f"max {fmt_ns(mx)}")
    else:
        ax.plot([], [], color="#c0392b", ls="--", label=f"max {fmt_ns(mx)} (off the axis, {beyond} samples beyond)")
        ax.annotate("max \u2192", xy=(0.99, 0.03), xycoords="axes fraction", ha="right", color="#c0392b")
    thr = _threshold(e.point)
    if thr is not None:
        t, pct, what = thr
        if pct is None:
            pct = 100.0 * np.count_nonzero(a > t) / a.size
        text = f"{pct:.3g} % above the {fmt_ns(t)} {what}"
        if lo <= t <= hi:
            ax.axvline(t / scale, color="#e67e22", lw=1.2, ls=":", label=text)
            ax.axvspan(t / scale, hi / scale, color="#e67e22", alpha=0.07)
        else:
            ax.plot([], [], color="#e67e22", ls=":", label=text + " (off the axis)")
    if heavy:
        ax.set_xscale("log")
    ax.set_xlim(lo / scale, hi / scale)
    ax.set_xlabel(f"{e.latency_name} [{unit}{', log scale' if heavy else ''}]")
    ax.set_ylabel("messages (log scale)")
    ax.set_title(f"{e.experiment}  {e.label}  {e.where()}  (n = {a.size:,})")
    ax.legend(loc="upper right")
    return png(fig)


def fig_cdf(title: str, curves: list[tuple[str, np.ndarray, object, str]], xlabel: str) -> bytes:
    """CDF overlays of one configuration across transports and modes."""
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    q = np.linspace(0.0, 1.0, 2001)
    for label, a, color, style in curves:
        ax.plot(np.quantile(a, q) / 1e3, q, color=color, ls=style, lw=1.4, label=label)
    ax.axhline(0.5, color="0.5", lw=0.6, ls=":")
    ax.axhline(0.99, color="0.5", lw=0.6, ls=":")
    ax.text(1.0, 0.99, "p99", transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize=7, color="0.4")
    ax.text(1.0, 0.5, "p50", transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize=7, color="0.4")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.0)
    ax.set_xlabel(f"{xlabel} [µs, log scale]")
    ax.set_ylabel("fraction of messages at or below")
    ax.set_title(title)
    entries = sum(1 for label, *_ in curves if not label.startswith("_"))
    if entries > 6:   # beside the plot, so it hides no curve and the axes keep their size
        fig.set_size_inches(9.0, max(3.6, 0.9 + 0.17 * entries))
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)
    else:
        ax.legend(loc="lower right")
    return png(fig)


def fig_latency_vs_size(title: str, series: dict[str, list[tuple]], ylabel: str, colors: Colors) -> bytes:
    """Median latency vs message size, bars from the 10th to the 90th percentile."""
    fig, ax = plt.subplots(figsize=(6.8, 3.8))
    for label, rows in sorted(series.items()):
        s, p10, p50, p90 = (np.array(c, dtype=float) for c in zip(*rows))
        ax.errorbar(s, p50 / 1e3, yerr=[(p50 - p10) / 1e3, (p90 - p50) / 1e3], color=colors(label),
                    marker="o", ms=3.5, lw=1.2, capsize=2.5, label=label)
    _size_ticks(ax)
    ax.set_yscale("log")
    ax.set_xlabel("message size")
    ax.set_ylabel(f"{ylabel}, median [µs, log]")
    ax.set_title(title + "\nmarkers: median (p50); bars: 10th to 90th percentile")
    ax.legend(loc="upper left", ncol=2)
    return png(fig)


def fig_bandwidth(series: dict[str, list[tuple]], colors: Colors) -> bytes:
    """Bandwidth and message rate vs message size."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.5, 3.8))
    for label, rows in sorted(series.items()):
        s, gbps, rate = (np.array(c, dtype=float) for c in zip(*rows))
        ax1.plot(s, gbps, marker="o", ms=3.5, color=colors(label), label=label)
        ax2.plot(s, rate, marker="o", ms=3.5, color=colors(label), label=label)
    for ax in (ax1, ax2):
        _size_ticks(ax)
        ax.set_yscale("log")
        ax.set_xlabel("message size")
    ax1.set_ylabel("bandwidth [Gbit/s, log]")
    ax1.set_title("bw: streaming bandwidth (payload bits / s)")
    ax2.set_ylabel("message rate [messages/s, log]")
    ax2.set_title("bw: message rate")
    ax1.legend(loc="upper left", ncol=1)
    return png(fig)


def fig_stream_vs_rate(by_values: dict[int, dict[str, list[tuple]]], colors: Colors) -> bytes:
    """Stream: median latency vs rate (left axis) and missed steps in % (right axis), one panel per values/sample."""
    keys = sorted(by_values)
    cols = 2 if len(keys) > 1 else 1
    rows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.0 * cols, 3.3 * rows), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, k in zip(axes.flat, keys):
        right = ax.twinx()
        right.grid(False)
        top = 0.0
        for label, pts in sorted(by_values[k].items()):
            r, p10, p50, p90, missed = (np.array(c, dtype=float) for c in zip(*pts))
            c = colors(label)
            ax.errorbar(r, p50 / 1e3, yerr=[(p50 - p10) / 1e3, (p90 - p50) / 1e3], color=c, marker="o", ms=3.5,
                        lw=1.3, capsize=2.5, label=f"{label}: median")
            right.plot(r, missed, color=c, ls="--", marker="x", ms=4, lw=1, label=f"{label}: missed %")
            top = max(top, float(np.nanmax(missed)))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sample rate [Hz, log]")
        ax.set_ylabel("one-way latency, median [µs, log]")
        right.set_ylabel("missed steps [%] (dashed)")
        right.set_ylim(0, max(5.0, top * 1.15))
        ax.set_title(f"stream, {k} value{'s' * (k != 1)} per sample ({24 + 8 * k} B); bars: p10 to p90")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = right.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=7)
    return png(fig)


def fig_stream_heatmap(label: str, cells: dict[tuple[int, int], tuple[float, float]]) -> bytes:
    """Stream: rate x values grid of the median one-way latency, each cell annotated with missed steps."""
    rates = sorted({r for r, _ in cells})
    values = sorted({v for _, v in cells})
    grid = np.full((len(rates), len(values)), np.nan)
    for (r, v), (p50, _) in cells.items():
        grid[rates.index(r), values.index(v)] = p50 / 1e3
    fig, ax = plt.subplots(figsize=(1.0 + 0.95 * len(values) + 1.6, 0.9 + 0.62 * len(rates)))
    finite = grid[np.isfinite(grid) & (grid > 0)]
    norm = LogNorm(vmin=finite.min(), vmax=max(finite.max(), finite.min() * 1.01)) if finite.size else None
    im = ax.imshow(grid, cmap="viridis", norm=norm, aspect="auto", origin="lower")
    for (r, v), (p50, missed) in cells.items():
        i, j = rates.index(r), values.index(v)
        bright = norm is not None and np.isfinite(grid[i, j]) and norm(grid[i, j]) > 0.6
        ax.text(j, i + 0.14, fmt_ns(p50).replace(" ", "\u2009"), ha="center", va="center", fontsize=7.5,
                color="k" if bright else "w")
        warn = missed is not None and missed > STREAM_MISSED_WARN_PCT
        ax.text(j, i - 0.2, "-" if missed is None else f"{missed:.1f}% missed", ha="center", va="center",
                fontsize=6.5, color="#ff4d4d" if warn else ("k" if bright else "w"),
                fontweight="bold" if warn else "normal")
    ax.set_xticks(range(len(values)), [str(v) for v in values])
    ax.set_yticks(range(len(rates)), [analysis.fmt_num(r) for r in rates])
    ax.set_xlabel("float64 values per sample")
    ax.set_ylabel("sample rate [Hz]")
    ax.grid(False)
    ax.set_title(f"stream {label}: median one-way latency\nand missed steps (red: > {STREAM_MISSED_WARN_PCT:.0f} %)")
    bar = fig.colorbar(im, ax=ax, label="median one-way latency [µs, log]")
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    bar.ax.yaxis.set_minor_formatter(NullFormatter())
    return png(fig)


# --- sections -----------------------------------------------------------------

def _img(data: bytes, alt: str, caption: str = "", wide: bool = False) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return (f'<figure class="{"wide" if wide else ""}"><img alt="{html.escape(alt)}" '
            f'src="data:image/png;base64,{b64}">{cap}</figure>')


def _p(point: dict, block: str, key: str) -> Optional[float]:
    v = (point.get(block) or {}).get(key)
    return float(v) if isinstance(v, (int, float)) else None


def _percentiles(e: Entry) -> Optional[tuple[float, float, float]]:
    """p10, p50, p90 of the one-way latency, from the raw samples (summary if none)."""
    a = e.samples()
    if a is not None:
        p10, p50, p90 = np.percentile(a, [10, 50, 90])
        return float(p10), float(p50), float(p90)
    p50, p90 = _p(e.point, "latency_ns", "p50"), _p(e.point, "latency_ns", "p90")
    return (p50, p50, p90) if p50 is not None and p90 is not None else None


def _idle_words(idle: Optional[dict]) -> str:
    if not idle or not idle.get("driver"):
        return "-"
    words = f"cpuidle {idle['driver']}, governor {idle.get('governor') or '-'}"
    if idle.get("guest_halt_poll_ns") is not None:
        words += f", polls {idle['guest_halt_poll_ns']:,} ns before halting (guest_halt_poll_ns)"
    return words


def section_environment(runs: list[Run]) -> str:
    """The distinct environments the runs were measured in."""
    envs: dict[str, tuple[dict, list[str]]] = {}
    for r in runs:
        env = r.doc.get("environment")
        if not isinstance(env, dict):
            continue
        key = json.dumps({k: env.get(k) for k in ("hostname", "cpu_model", "kernel", "isolated_cpus",
                                                  "governors", "cpuidle", "cpu_count")}, sort_keys=True)
        envs.setdefault(key, (env, []))[1].append(r.rel)
    if not envs:
        return "<p>No environment recorded.</p>"
    out = []
    for env, rels in envs.values():
        eng = env.get("engine") or {}
        kernel = env.get("kernel") or {}
        govs = sorted({str(v) for v in (env.get("governors") or {}).values()})
        libs = env.get("libraries") or {}
        rows = [
            ("host", env.get("hostname")),
            ("CPU", f"{env.get('cpu_model')} ({env.get('cpu_count')} CPUs, allowed {env.get('cpus_allowed')})"),
            ("kernel", f"{kernel.get('release', '')} {kernel.get('version', '')}"),
            ("frequency governors", "none (no cpufreq)" if govs == ["None"] else ", ".join(govs)),
            ("idle", _idle_words(env.get("cpuidle"))),
            ("isolated CPUs", env.get("isolated_cpus") or "none"),
            ("TSC flags", " ".join(env.get("tsc_flags") or []) or "-"),
            ("timestamps", f"{eng.get('clock_source', '-')}, TSC {eng.get('tsc_ghz', '-')} GHz, "
                           f"{eng.get('timestamp_cost_ns', '-')} ns per timestamp" if eng else "-"),
            ("libraries", ", ".join(f"{k} {v}" for k, v in libs.items()) +
             (f", engine compiler {eng.get('compiler')}" if eng.get("compiler") else "")),
            ("runs", f"{len(rels)}: " + ", ".join(rels[:8]) + (", ..." if len(rels) > 8 else "")),
        ]
        cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
        out.append(f'<table class="env">{cells}</table>')
    return "\n".join(out)


def section_table(entries: list[Entry], runs: list[Run]) -> str:
    """Every measured point (and every run that measured none), peers marked."""
    head = ["run", "experiment", "transport / mode", "size", "latency", "p50 [ns]", "p99 [ns]", "max [ns]",
            "Gbit/s", "msg/s", "missed steps [%]", "lost", "status"]
    rows = []

    def order(e: Entry):
        return (e.run.peer, EXPERIMENT_ORDER.get(e.experiment, 9), e.label, e.point.get("size") or 0,
                e.point.get("rate_hz") or 0, e.point.get("values") or 0)

    for e in sorted(entries, key=order):
        p = e.point
        # One-way figures; a peer that reports only the round trip keeps it, labelled RTT.
        block = "latency_ns" if p.get("latency_ns") else "rtt_ns"
        kind = {"rtt/2": "RTT/2", "rtt": "RTT"}.get(str(p.get("latency_kind")), "") if p.get(block) else ""
        if p.get(block) and not kind:
            kind = "RTT/2" if e.rtt_half else "one-way"
        status = e.run.status + (" (partial)" if p.get("partial") else "")
        note = ""
        if e.run.peer:   # peers.json records: points, and cases the tool skipped or failed
            status = "peer" if p.get("type", "point") == "point" else str(p.get("type"))
            note = str(p.get("statistic_note") or p.get("reason") or "")
        cells = [e.run.rel, f"peer: {p.get('tool', '?')}" if e.run.peer else e.experiment,
                 e.label, e.where(), kind,
                 analysis.fmt_num(_p(p, block, "p50")), analysis.fmt_num(_p(p, block, "p99")),
                 analysis.fmt_num(_p(p, block, "max")),
                 analysis.fmt_num(p.get("gbps"), 3), analysis.fmt_num(p.get("msg_rate"), 0),
                 analysis.fmt_num(p.get("missed_pct"), 2), analysis.fmt_num(p.get("lost")), status]
        cls = ' class="peer"' if e.run.peer else ""
        tds = "".join(f"<td>{html.escape(str(c))}</td>" for c in cells)
        if note:
            rows.append(f"<tr{cls}>{tds}</tr><tr{cls}><td></td><td colspan='{len(head) - 1}' class='note'>"
                        f"note: {html.escape(note)}</td></tr>")
        else:
            rows.append(f"<tr{cls}>{tds}</tr>")
    with_points = {id(e.run) for e in entries}
    for r in runs:
        if id(r) not in with_points:
            msg = r.doc.get("message") or "no points measured"
            exp = str((r.doc.get("config") or {}).get("experiment", "?"))
            tds = (f"<td>{html.escape(r.rel)}</td><td>{html.escape(exp)}</td>"
                   f"<td colspan='{len(head) - 3}'>{html.escape(str(msg))}</td><td>{html.escape(r.status)}</td>")
            rows.append(f'<tr class="failed">{tds}</tr>')
    ths = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (f'<div class="scroll"><table class="cmp"><thead><tr>{ths}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def section_histograms(groups: dict[int, list[Entry]], colors: Colors) -> list[str]:
    figs = []
    for run_entries in groups.values():
        e = representative(run_entries)
        if e.samples() is None:
            continue
        more = f"; the run has {len(run_entries)} points, this is its {e.where()} point" if len(run_entries) > 1 else ""
        figs.append(_img(fig_histogram(e, colors(e.label)), f"histogram {e.run.rel}",
                         f"{e.run.rel}: {e.latency_name}, {e.point.get('iterations', '?')} messages "
                         f"after {e.point.get('warmup', '?')} warm-up (excluded){more}"))
    return figs


def section_cdfs(groups: dict[int, list[Entry]], colors: Colors) -> list[str]:
    """One CDF per (experiment, latency kind, size or rate x values) shared by two or more runs."""
    by_config: dict[tuple, list[Entry]] = {}
    for run_entries in groups.values():
        e = representative(run_entries)
        if e.samples() is None:
            continue
        key = (EXPERIMENT_ORDER.get(e.experiment, 9), e.experiment, e.latency_name, e.point.get("size") or 0,
               e.point.get("rate_hz") or 0, e.point.get("values") or 0)
        by_config.setdefault(key, []).append(e)
    figs = []
    for key, es in sorted(by_config.items()):
        if len(es) < 2:
            continue
        seen: dict[str, int] = {}
        for e in es:
            seen[e.label] = seen.get(e.label, 0) + 1
        curves, nth = [], {}
        for e in sorted(es, key=lambda e: (e.label, e.run.rel)):
            nth[e.label] = nth.get(e.label, -1) + 1    # runs that share a label: same colour, own line style
            # One legend entry per label, however many runs share it (a bench has dozens).
            name = ("_" if nth[e.label] else e.label + (f" ({seen[e.label]} runs)" if seen[e.label] > 1 else ""))
            curves.append((name, e.samples(), colors(e.label), ("-", "--", ":", "-.")[nth[e.label] % 4]))
        e0 = es[0]
        figs.append(_img(fig_cdf(f"{e0.experiment} {e0.where()}\nCDF of the {e0.latency_name}", curves,
                                 e0.latency_name),
                         f"CDF {e0.experiment} {e0.where()}",
                         f"{e0.experiment}, {e0.where()}: {len(curves)} runs; dotted lines at p50 and p99"))
    return figs


def section_sizes(entries: list[Entry], colors: Colors) -> list[str]:
    """Latency vs size per experiment (lat: RTT/2, oneway: measured), series per transport/mode."""
    figs = []
    for exp in ("lat", "oneway"):
        points: dict[str, dict[int, Entry]] = {}
        for e in entries:
            if e.experiment != exp or e.run.peer or not e.point.get("latency_ns") or not e.point.get("size"):
                continue
            size = int(e.point["size"])
            have = points.setdefault(e.label, {}).get(size)
            # The same size twice (a baseline run and a sweep): keep the larger sample.
            if have is None or (e.point.get("iterations") or 0) > (have.point.get("iterations") or 0):
                points[e.label][size] = e
        series = {}
        for label, by_size in points.items():
            if len(by_size) < 2:
                continue
            rows = []
            for size, e in sorted(by_size.items()):
                pct = _percentiles(e)
                if pct is not None:
                    rows.append((size, *pct))
            if len(rows) >= 2:
                series[label] = rows
        if series:
            name = latency_name({}, exp)
            title = f"{exp}: {name} vs message size"
            figs.append(_img(fig_latency_vs_size(title, series, name, colors), title,
                             f"{exp}: {name}; one line per transport/mode", wide=True))
    return figs


def section_bandwidth(entries: list[Entry], colors: Colors) -> list[str]:
    series: dict[str, dict[int, tuple]] = {}
    for e in entries:
        p = e.point
        if e.experiment != "bw" or e.run.peer or p.get("gbps") is None or not p.get("size"):
            continue
        series.setdefault(e.label, {})[int(p["size"])] = (int(p["size"]), float(p["gbps"]),
                                                          float(p.get("msg_rate") or np.nan))
    series_rows = {k: [v[s] for s in sorted(v)] for k, v in series.items() if len(v) >= 2}
    if not series_rows:
        return []
    return [_img(fig_bandwidth(series_rows, colors), "bandwidth and message rate vs size",
                 "bw: one line per transport/mode (bidir: both directions at once)", wide=True)]


def section_stream(entries: list[Entry], colors: Colors) -> list[str]:
    streams = [e for e in entries if not e.run.peer and e.point.get("rate_hz") is not None
               and e.point.get("latency_ns")]
    if not streams:
        return []
    by_values: dict[int, dict[str, dict[int, tuple]]] = {}
    cells: dict[str, dict[tuple[int, int], tuple]] = {}
    for e in streams:
        p = e.point
        rate, values = int(p["rate_hz"]), int(p.get("values") or 0)
        pct = _percentiles(e)
        if pct is None:
            continue
        missed = p.get("missed_pct")
        by_values.setdefault(values, {}).setdefault(e.label, {})[rate] = (rate, *pct, np.nan if missed is None
                                                                          else float(missed))
        cells.setdefault(e.label, {})[(rate, values)] = (pct[1], None if missed is None else float(missed))
    figs = []
    lines = {v: {lab: [pts[r] for r in sorted(pts)] for lab, pts in series.items() if len(pts) >= 2}
             for v, series in by_values.items()}
    lines = {v: s for v, s in lines.items() if s}
    if lines:
        figs.append(_img(fig_stream_vs_rate(lines, colors), "stream latency vs rate",
                         "stream: median one-way latency (receive time minus the scheduled step time) vs sample "
                         "rate, with the share of steps the source missed (dashed, right axis)", wide=True))
    for label, grid in sorted(cells.items()):
        if len({r for r, _ in grid}) >= 2 and len({v for _, v in grid}) >= 2:
            figs.append(_img(fig_stream_heatmap(label, grid), f"stream heatmap {label}",
                             f"stream {label}: median one-way latency over rate x values per sample"))
    return figs


# --- the page ---------------------------------------------------------------

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; max-width: 1400px;
       padding: 1rem 2rem; color: #1d232a; background: #fff; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; border-bottom: 1px solid #d5dbe1;
     padding-bottom: .2rem; margin-top: 2rem; }
.meta { color: #5a6570; font-size: .9rem; } nav a { margin-right: 1rem; font-size: .9rem; }
table { border-collapse: collapse; font-size: .76rem; } th, td { padding: .15rem .35rem; text-align: right;
        border-bottom: 1px solid #eceff2; white-space: nowrap; }
th { background: #f4f6f8; position: sticky; top: 0; white-space: normal; vertical-align: bottom; }
td:nth-child(-n+5), th:nth-child(-n+5) { text-align: left; }
table.env th { text-align: left; position: static; } table.env td { text-align: left; white-space: normal; }
table.env { margin-bottom: 1rem; max-width: 100%; }
tr.peer td { background: #fbf7ea; } tr.failed td { color: #a3342b; } td.note { white-space: normal; text-align: left;
     font-style: italic; color: #6b5a21; }
.scroll { max-height: 32rem; overflow: auto; border: 1px solid #e3e7eb; }
.figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 1.2rem; }
figure { margin: 0; } figure.wide { grid-column: 1 / -1; max-width: 1100px; }
figure img { max-width: 100%; height: auto; border: 1px solid #eef0f2; }
figcaption { font-size: .8rem; color: #5a6570; margin-top: .2rem; }
"""


def build_html(root: Path, runs: list[Run], problems: list[str]) -> str:
    entries = entries_of(runs)
    colors = Colors([e.label for e in entries])
    groups: dict[int, list[Entry]] = {}
    for e in entries:
        if not e.run.peer:
            groups.setdefault(id(e.run), []).append(e)

    sections = [
        ("histograms", "Latency histograms (one per run)", section_histograms(groups, colors),
         "Each run's latency distribution. Solid: median; dashed: max; dotted: the run's threshold (oneway) or "
         "deadline (stream), with the share above it. A compact distribution is drawn on a linear axis up to "
         "p50 + 4 x (p99 - p50), the samples beyond counted in the legend; a heavy-tailed one (p99 > 5 x p50) "
         "on a log axis from min to max."),
        ("cdf", "CDF overlays per transport and mode", section_cdfs(groups, colors),
         "Runs of the same experiment and size side by side (multi-point runs: their representative point)."),
        ("sizes", "Latency vs message size", section_sizes(entries, colors), ""),
        ("bandwidth", "Bandwidth and message rate vs message size", section_bandwidth(entries, colors), ""),
        ("stream", "Stream: latency vs rate, missed steps, rate x values", section_stream(entries, colors), ""),
    ]
    n_points = sum(1 for e in entries if not e.run.peer)
    n_peer = sum(1 for e in entries if e.run.peer)
    statuses: dict[str, int] = {}
    for r in runs:
        if not r.peer:
            statuses[r.status] = statuses.get(r.status, 0) + 1
    suites = []
    for idx in sorted(root.rglob("index.json")):
        try:
            d = json.loads(idx.read_text())
            suites.append(f"suite <b>{html.escape(str(d.get('suite')))}</b>: "
                          f"{html.escape(str(d.get('description', '')))}"
                          f" ({html.escape(str(d.get('status')))})")
        except (OSError, ValueError, AttributeError):
            continue
    nav = "".join(f'<a href="#{sid}">{html.escape(title.split(":")[0])}</a>'
                  for sid, title, figs, _ in sections if figs)
    body = [f"<h1>fabmeter report: {html.escape(root.name or str(root))}</h1>",
            f'<p class="meta">{html.escape(str(root))} &middot; generated {html.escape(now_iso())} by fabmeter '
            f"{html.escape(__version__)} &middot; {sum(1 for r in runs if not r.peer)} runs "
            f"({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))}), {n_points} measured points"
            + (f", {n_peer} peer results" if n_peer else "") + "</p>"]
    body += [f'<p class="meta">{s}</p>' for s in suites]
    body.append(f'<nav><a href="#environment">Environment</a><a href="#table">Comparison table</a>{nav}</nav>')
    if problems:
        body.append("<p class='meta'>Not read: " + html.escape("; ".join(problems)) + "</p>")
    body.append('<h2 id="environment">Environment</h2>' + section_environment(runs))
    body.append('<h2 id="table">Comparison table</h2><p class="meta">The latency column says what p50, p99 and '
                "max are: <b>RTT/2</b> (half a measured round trip, lat) or <b>one-way</b> (receive time minus the "
                "scheduled send time, oneway and stream); a peer tool that reports only the round trip shows "
                "<b>RTT</b>. Peer rows (shaded) come from other tools and are only as comparable as their note "
                "says.</p>" + section_table(entries, runs))
    for sid, title, figs, intro in sections:
        if figs:
            body.append(f'<h2 id="{sid}">{html.escape(title)}</h2>' + (f'<p class="meta">{html.escape(intro)}</p>'
                                                                       if intro else "")
                        + '<div class="figs">' + "".join(figs) + "</div>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>fabmeter report: {html.escape(root.name or str(root))}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write(root: Path, output: Optional[Path] = None) -> Path:
    """Writes the report of everything under root; returns its path."""
    root = root.resolve()
    if not root.is_dir():
        raise run.FabmeterError(f"{root} is not a folder", run.EXIT_USAGE)
    runs, problems = load(root)
    if not runs:
        raise run.FabmeterError(f"no run.json or peers.json under {root}", run.EXIT_USAGE)
    output = (output or root / "report.html").resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    text = build_html(root, runs, problems)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(output)
    return output


def main(root: Path, output: Optional[Path]) -> int:
    path = write(root, output)
    print(path)
    sys.stdout.flush()
    return run.EXIT_OK
