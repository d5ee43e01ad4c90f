"""The report's figures: matplotlib PNGs, one function each."""

from __future__ import annotations

import io
import textwrap
from typing import Optional

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import (FuncFormatter, LogFormatter, LogFormatterSciNotation,  # noqa: E402
                               NullFormatter)

from fabmeter import analysis  # noqa: E402
from fabmeter.report.files import number  # noqa: E402
from fabmeter.report.model import Entry, LoadSweep, stat  # noqa: E402
from fabmeter.report.summary import BenchRow, LatencyRow, Summary  # noqa: E402

STREAM_MISSED_WARN_PCT = 10.0   # the thesis marks grid cells that missed more than 10 % in red
DPI = 100

# Text in a figure is plain text: labels, folders and hosts come from results files, and "$...$" read as
# mathtext (or TeX) would be parsed, and could fail, rather than shown.
plt.rcParams.update({"figure.constrained_layout.use": True, "font.size": 9, "axes.titlesize": 10,
                     "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 8, "figure.dpi": DPI,
                     "savefig.dpi": DPI, "text.parse_math": False, "text.usetex": False})


def fmt_ns(x: Optional[float]) -> str:
    if number(x) is None:
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
    _plain_log_ticks(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _plain_log_ticks(fig) -> None:
    """Log axes label their ticks in mathtext ("$10^{2}$") by default, which text.parse_math (off) would print as
    written: plain numbers instead, every figure passing here."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for fmt, setter in ((axis.get_major_formatter(), axis.set_major_formatter),
                                (axis.get_minor_formatter(), axis.set_minor_formatter)):
                if isinstance(fmt, LogFormatterSciNotation):
                    setter(LogFormatter(labelOnlyBase=fmt.labelOnlyBase, minor_thresholds=fmt.minor_thresholds))


class Colors:
    """One colour per label, the same in every figure."""

    def __init__(self, labels):
        labels = sorted(set(labels))
        cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
        self.of = {lab: cmap(i % cmap.N) for i, lab in enumerate(labels)}

    def __call__(self, label: str):
        return self.of.get(label, "k")


def _legend(fig, ax, entries: int, loc: str, width: float, **kw) -> None:
    """At `loc` inside the axes; beside the plot when it has more than 6 entries, so it hides no line and
    the axes keep their size."""
    if entries > 6:
        fig.set_size_inches(width, max(fig.get_size_inches()[1], 0.9 + 0.17 * entries))
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, **kw)
    else:
        ax.legend(loc=loc, fontsize=7, **kw)


def _threshold(point: dict) -> Optional[tuple[float, Optional[float], str]]:
    """(threshold ns, share above in %, what it is) for oneway and stream points."""
    if point.get("threshold_us") is not None:
        return point["threshold_us"] * 1e3, point.get("above_threshold_pct"), "threshold"
    if point.get("deadline_us") is not None:
        return point["deadline_us"] * 1e3, point.get("deadline_miss_pct"), "deadline"
    return None


# --- figures (one function each) --------------------------------------------

def _body_end(a: np.ndarray) -> float:
    """Where a compact distribution's body ends: p50 + 4 x (p99 - p50), at most the max."""
    p50, p99 = (float(x) for x in np.percentile(a, [50, 99]))
    return min(float(a.max()), p50 + 4 * (p99 - p50))


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
    hi = mx if heavy else _body_end(a)
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
    _legend(fig, ax, sum(1 for label, *_ in curves if not label.startswith("_")), "lower right", 9.0)
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


THROUGHPUT_CAPTION = ("Gbit/s of each bin of arrivals counted at the receiver (throughput_series; bins of --series-ms, "
                      "wider when the run outlasted 512 of them), from the end of the warm-up; the last bin, cut short "
                      "by the end of the run, is left out.")


def fig_throughput_over_time(title: str, lines: dict[str, tuple[np.ndarray, np.ndarray]], colors: Colors) -> bytes:
    """Gbit/s per arrival bin against time since the end of the warm-up, one line per connection (direction)."""
    fig, ax = plt.subplots(figsize=(10.5, 3.6))
    for label, (t_ms, gbps) in sorted(lines.items()):
        ax.step(t_ms, gbps, where="post", lw=1.1, color=colors(label), label=label)
    ax.set_xlabel("time since the end of the warm-up [ms]")
    ax.set_ylabel("Gbit/s in the bin")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    _legend(fig, ax, len(lines), "lower right", 12.0)
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


def fig_stages(title: str, stages: list[tuple[str, str]], columns: list[tuple[str, dict[str, np.ndarray]]],
               colors: list, absent: Optional[list[dict[str, str]]] = None,
               beside: Optional[dict[str, tuple[str, str, str]]] = None) -> bytes:
    """oneway's stages (the thesis' timestamps): a histogram per stage (rows, each
    `(key, what it is)`), one column per run (inline off and on side by side);
    a stage shares its axis across the columns, from the lowest sample over
    the body of each (the samples beyond counted in the legend). `absent`: per
    column, why a stage was not measured (key -> reason); `beside`: a stage key
    -> (key, name, stamps) of samples drawn over its row as an outline (the
    thesis' t_recv - t_send beside t_recv - t_subm)."""
    absent = absent or [{} for _ in columns]
    beside = beside or {}
    fig, axes = plt.subplots(len(stages), len(columns), figsize=(4.4 * len(columns) + 1.0, 2.5 * len(stages)),
                             squeeze=False, sharex="row")
    for row, (key, what) in enumerate(stages):
        other = beside.get(key)
        present = [c[k] for _, c in columns for k in (key, other[0] if other else None) if k in c]
        lo = min(float(a.min()) for a in present) if present else 0.0
        hi = max(_body_end(a) for a in present) if present else 1.0
        hi = hi if hi > lo else lo + 1.0
        unit, scale = unit_for(hi)
        bins = np.linspace(lo, hi, 101) / scale
        for col, ((name, samples), color, why) in enumerate(zip(columns, colors, absent)):
            ax = axes[row, col]
            a = samples.get(key)
            if a is None:
                note = why.get(key) or "(no send completions)"
                ax.text(0.5, 0.5, "not measured here\n" + textwrap.fill(note, 38), transform=ax.transAxes,
                        ha="center", va="center", color="0.4", fontsize=8)
                ax.set_yticks([])
            else:
                p50 = float(np.median(a))
                beyond = int(np.count_nonzero(a > hi))
                ax.hist(a[a <= hi] / scale, bins=bins, color=color, alpha=0.85, log=True, histtype="stepfilled",
                        label=what.split(": ")[-1] if other else None)
                ax.axvline(p50 / scale, color="k", lw=1.2, label=f"median {fmt_ns(p50)}")
                if beyond:
                    ax.plot([], [], " ", label=f"{beyond} beyond the axis (max {fmt_ns(float(a.max()))})")
                b = samples.get(other[0]) if other else None
                if b is not None:
                    ax.hist(b[b <= hi] / scale, bins=bins, color="k", log=True, histtype="step", lw=1.0,
                            label=other[2])
                    ax.axvline(float(np.median(b)) / scale, color="k", lw=1.2, ls="--",
                               label=f"median {fmt_ns(float(np.median(b)))}")
                elif other and why.get("send_ns"):
                    ax.plot([], [], " ", label=f"{other[2]}: absent")
                ax.legend(loc="upper right", fontsize=7 if other else None)
            ax.set_xlim(lo / scale, hi / scale)
            if row == 0:
                ax.set_title(name)
            ax.set_xlabel(f"{what} [{unit}]")
            if col == 0:
                ax.set_ylabel("messages (log)")
    fig.suptitle(title)
    return png(fig)


# --- load (open loop): one function per figure --------------------------------

LOAD_PERCENTILES = (("p50", "-", "o"), ("p99", "--", "s"), ("p999", ":", "^"))


def fig_load_latency(title: str, series: dict[str, list[dict]], colors: Colors) -> bytes:
    """Latency from the intended send time (p50, p99, p99.9) against offered rate: a colour per run, a line
    style per percentile; each run's knee marked."""
    fig, ax = plt.subplots(figsize=(6.8, 3.9))
    for label, points in sorted(series.items()):
        x = np.array([p["offered_rps"] for p in points], dtype=float)
        for key, style, marker in LOAD_PERCENTILES:
            y = np.array([(p.get("latency_ns") or {}).get(key, np.nan) for p in points], dtype=float)
            ax.plot(x, y / 1e3, color=colors(label), ls=style, marker=marker, ms=3.5, lw=1.3)
        knee = (points[-1].get("knee") or {}).get("offered_rps")
        if knee:
            ax.axvline(knee, color=colors(label), lw=0.8, alpha=0.6)
            ax.annotate("knee", xy=(knee, 0.97), xycoords=("data", "axes fraction"), rotation=90, va="top",
                        ha="right", fontsize=7, color=colors(label))
    # One entry per run (its colour) and one per percentile (its line style).
    handles = [Line2D([], [], color=colors(label), lw=2) for label in sorted(series)]
    handles += [Line2D([], [], color="k", ls=style, marker=marker, ms=3.5) for _, style, marker in LOAD_PERCENTILES]
    labels = sorted(series) + [key.replace("p999", "p99.9") for key, _, _ in LOAD_PERCENTILES]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("offered rate [requests/s, log]")
    ax.set_ylabel("RTT from the intended send [µs, log]")
    ax.set_title(f"{title}: latency against offered rate\nsolid p50, dashed p99, dotted p99.9; vertical line: the knee")
    _legend(fig, ax, len(labels), "upper left", 9.0, handles=handles, labels=labels)
    return png(fig)


def fig_setup_connect(rows: list[tuple[str, float, float]], floor: Optional[tuple[float, float]]) -> bytes:
    """setup's connect time per transport (label, p50, p99): a p50 marker and a bar to p99, the limits' bare
    loopback connect/accept last, in grey."""
    entries = sorted(rows, key=lambda r: r[1])
    if floor:
        entries.append(("floor: bare loopback connect/accept", *floor))
    unit, scale = unit_for(min(e[1] for e in entries))
    fig, ax = plt.subplots(figsize=(9.0, 1.3 + 0.38 * len(entries)))
    for i, (label, p50, p99) in enumerate(entries):
        color = "0.45" if floor and i == len(entries) - 1 else "C0"
        ax.plot([p50 / scale, p99 / scale], [i, i], color=color, lw=2.5, alpha=0.6)
        ax.plot([p50 / scale], [i], "o", color=color, ms=5)
    ax.set_yticks(range(len(entries)), [e[0] for e in entries])
    ax.set_xscale("log")
    ax.set_xlabel(f"connection establishment [{unit}, log]")
    ax.set_title("setup: connect time per transport, client: a new transport to its connect() returned\n"
                 "marker: p50; bar: p50 to p99; grey: limits' bare tcp connect/accept (no control channel)")
    return png(fig)


def fig_setup_mr(series: dict[str, list[tuple[float, float, float]]], colors: Colors) -> bytes:
    """setup's memory registration time against the registered size (rows: size, p50, p99), per run and page
    kind."""
    unit, scale = unit_for(min(r[1] for rows in series.values() for r in rows))
    fig, ax = plt.subplots(figsize=(6.8, 3.9))
    for label, rows in sorted(series.items()):
        size, p50, p99 = (np.array(c, dtype=float) for c in zip(*sorted(rows)))
        ax.errorbar(size, p50 / scale, yerr=[np.zeros_like(p50), (p99 - p50) / scale], color=colors(label),
                    ls="--" if label.endswith("huge pages") else "-", marker="o", ms=3.5, lw=1.2, capsize=2.5,
                    label=label)
    _size_ticks(ax)
    ax.set_yscale("log")
    ax.set_xlabel("registered bytes")
    ax.set_ylabel(f"registration [{unit}, log]")
    ax.set_title("setup: memory registration against size (client)\nmarkers: p50; bars: to p99; "
                 "dashed: huge pages")
    ax.legend(loc="upper left", ncol=1)
    return png(fig)


def fig_load_throughput(title: str, series: dict[str, list[dict]], colors: Colors) -> bytes:
    """Achieved against offered request rate; the diagonal is a path that keeps up."""
    fig, ax = plt.subplots(figsize=(6.2, 3.9))
    lo, top = np.inf, 0.0
    for label, points in sorted(series.items()):
        x = np.array([p["offered_rps"] for p in points], dtype=float)
        y = np.array([p.get("achieved_rps") or 0 for p in points], dtype=float)
        ax.plot(x, y, color=colors(label), marker="o", ms=3.5, lw=1.3, label=label)
        lo, top = min(lo, float(x.min())), max(top, float(x.max()), float(y.max()))
    ax.plot([lo / 1.5, top * 1.5], [lo / 1.5, top * 1.5], color="0.5", lw=0.8, ls=":", label="achieved = offered")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("offered rate [requests/s, log]")
    ax.set_ylabel("achieved [requests/s, log]")
    ax.set_title(f"{title}: achieved against offered throughput")
    _legend(fig, ax, len(series) + 1, "upper left", 8.5)
    return png(fig)


def _two_panels(fig, axes, x: tuple[str, int], left_label: str, right_label: str, title: str, entries: int) -> bytes:
    """Finishes a figure of two panels over one log x axis (label, base): the right one's y axis log too, the
    legend on the left one."""
    left, right = axes
    for ax in axes:
        ax.set_xscale("log", base=x[1])
        ax.set_xlabel(x[0])
    left.set_ylabel(left_label)
    right.set_yscale("log")
    right.set_ylabel(right_label)
    fig.suptitle(title)
    _legend(fig, left, entries, "upper left", 9.0)
    return png(fig)


def fig_load_clients(title: str, series: dict[str, list[dict]], colors: Colors) -> bytes:
    """Closed loop: achieved request rate (left) and p50/p99 latency (right) against the number of clients."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    for label, points in sorted(series.items()):
        x = np.array([p["clients"] for p in points], dtype=float)
        left.plot(x, [p.get("achieved_rps") or 0 for p in points], color=colors(label), marker="o", ms=3.5,
                  lw=1.3, label=label)
        for key, style in (("p50", "-"), ("p99", "--")):
            y = np.array([(p.get("latency_ns") or {}).get(key, np.nan) for p in points], dtype=float)
            right.plot(x, y / 1e3, color=colors(label), ls=style, marker="o", ms=3, lw=1.2)
    return _two_panels(fig, (left, right), ("closed-loop clients [log]", 2), "achieved [requests/s]",
                       "RTT [µs, log]; solid p50, dashed p99", f"{title}: closed loop, throughput and latency against clients",
                       len(series))


def fig_slowdown(title: str, series: dict[str, list[tuple[float, list[tuple]]]], colors: Colors) -> bytes:
    """Homa's plot: slowdown (latency / the unloaded p50 of that size) against message size, p50 solid and
    p99 dashed. `series`: run label -> [(offered rps, [(size_hi, p50, p99)])], a colour per run, darker
    as the offered rate rises."""
    fig, ax = plt.subplots(figsize=(6.8, 3.9))
    lines = 0
    for label, by_rate in sorted(series.items()):
        for i, (rate, rows) in enumerate(sorted(by_rate)):
            size, p50, p99 = (np.array(c, dtype=float) for c in zip(*rows))
            alpha = 0.35 + 0.65 * (i + 1) / len(by_rate)
            name = f"{label} @ {analysis.fmt_num(rate, 0)}/s"
            ax.plot(size, p99, color=colors(label), alpha=alpha, ls="--", marker="s", ms=3, lw=1.2,
                    label=f"{name} p99")
            ax.plot(size, p50, color=colors(label), alpha=alpha, ls="-", marker="o", ms=3, lw=1.2,
                    label=f"{name} p50")
            lines += 2
    ax.axhline(1.0, color="0.5", lw=0.8, ls=":")
    _size_ticks(ax)
    ax.set_yscale("log")
    ax.set_xlabel("message size (upper bound of the size bucket)")
    ax.set_ylabel("slowdown [latency / unloaded p50, log]")
    ax.set_title(f"{title}: slowdown against message size\n"
                 "solid p50, dashed p99; darker: higher offered rate; 1 = as fast as unloaded")
    _legend(fig, ax, lines, "upper left", 9.5)
    return png(fig)


def fig_tx_path(title: str, series: dict[str, list[dict]], colors: Colors,
                x_axis: tuple[str, str] = ("offered_rps", "offered rate [requests/s, log]")) -> bytes:
    """RAMCloud's transmit path: send completions per non-empty poll (left), and the time a reply waited for a
    free send buffer and one poll took (right), against offered rate (x_axis: another key of the points and its
    label); a colour per run (its pool sizes)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    for label, points in sorted(series.items()):
        x = np.array([p[x_axis[0]] for p in points], dtype=float)
        tx = [p["server"]["tx"] for p in points]
        left.plot(x, [t.get("mean_per_poll") or np.nan for t in tx], color=colors(label), marker="o", ms=3.5,
                  lw=1.3, label=label)
        right.plot(x, [(t.get("wait_ns_mean") or np.nan) / 1e3 for t in tx], color=colors(label), marker="o",
                   ms=3, lw=1.2, ls="-")
        right.plot(x, [(t.get("poll_ns_mean") or np.nan) / 1e3 for t in tx], color=colors(label), marker="s",
                   ms=3, lw=1.2, ls="--")
    return _two_panels(fig, (left, right), (x_axis[1], 10),
                       "send completions per non-empty poll", "µs, log: solid wait for a buffer, dashed one poll",
                       f"{title}: the server's transmit path",
                       len(series))


def fig_completions_per_poll(title: str, series: dict[str, dict[str, int]]) -> bytes:
    """The server's completions (messages) per non-empty poll as a histogram, a line per offered rate
    (the receive side: more per poll as load rises; RAMCloud's measure is the transmit path's). Buckets as
    the engine names them, the last "N+"."""
    buckets = sorted({b for per in series.values() for b in per}, key=lambda b: int(b.rstrip("+")))
    fig, ax = plt.subplots(figsize=(6.8, 3.6))
    cmap = plt.get_cmap("viridis")
    for i, (label, per) in enumerate(series.items()):
        polls = sum(per.values()) or 1
        share = np.array([100.0 * per.get(b, 0) / polls for b in buckets])
        share[share == 0] = np.nan   # a bucket no poll reached: a gap, not a drop to zero on a log axis
        ax.plot(range(len(buckets)), share, color=cmap(i / max(1, len(series) - 1) * 0.9), marker="o", ms=3,
                lw=1.2, label=label)
    step = max(1, len(buckets) // 16)
    ticks = sorted(set(range(0, len(buckets), step)) | {len(buckets) - 1})   # the last, "N+", always named
    ax.set_xticks(ticks, [buckets[i] for i in ticks])
    ax.set_yscale("log")
    ax.set_xlabel("completions returned by one poll")
    ax.set_ylabel("share of non-empty polls [%, log]")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=7, title="offered rate")
    return png(fig)


def fig_mesh_load_cdf(title: str, curves: list[tuple[str, list[tuple[float, float]]]]) -> bytes:
    """A load mesh's merged histograms as CDFs, one step line per server and a thick one for the whole run.
    `curves`: (label, [(highest value of a range in ns, fraction at or below it)])."""
    fig, ax = plt.subplots(figsize=(6.8, 3.8))
    for i, (label, points) in enumerate(curves):
        x, y = (np.array(c, dtype=float) for c in zip(*points))
        whole = label == "all"
        ax.step(x / 1e3, y, where="post", lw=2.2 if whole else 1.2, color="black" if whole else f"C{i % 10}",
                label=label)
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        ax.axhline(q, color="0.5", lw=0.6, ls=":")
        ax.text(1.0, q, name, transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize=7, color="0.4")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.0)
    ax.set_xlabel("RTT from the intended send [µs, log scale]")
    ax.set_ylabel("fraction of requests at or below")
    ax.set_title(title)
    _legend(fig, ax, len(curves), "lower right", 9.0)
    return png(fig)


def fig_mesh_matrix(title: str, hosts: list[str], grid: list[list[Optional[float]]], what: str,
                    latency: bool, failed: set[tuple[int, int]],
                    flagged: Optional[set[tuple[int, int]]] = None) -> bytes:
    """A mesh's N x N matrix, source rows by destination columns, each cell annotated; blank: no pair in the
    pattern; "failed" in red: a failed pair; a red border: an outlier link (`flagged`). Latency on a log colour
    scale in ns, Gbit/s on a linear one."""
    n = len(hosts)
    values = np.array([[np.nan if v is None else float(v) for v in row] for row in grid], dtype=float)
    fig, ax = plt.subplots(figsize=(2.6 + 0.95 * n, 1.6 + 0.62 * n))
    finite = values[np.isfinite(values) & (values > 0)]
    norm = (LogNorm(vmin=finite.min(), vmax=max(finite.max(), finite.min() * 1.01))
            if latency and finite.size else None)
    im = ax.imshow(values, cmap="viridis" if latency else "cividis", norm=norm, aspect="auto")
    lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    for i in range(n):
        for j in range(n):
            v = values[i, j]
            if (i, j) in failed:
                ax.text(j, i, "failed", ha="center", va="center", fontsize=7.5, color="#d62728", fontweight="bold")
            if not np.isfinite(v):
                continue
            frac = norm(v) if norm is not None else ((v - lo) / (hi - lo) if hi > lo else 0.5)
            ax.text(j, i, fmt_ns(v).replace(" ", "\u2009") if latency else f"{v:.3g}", ha="center", va="center",
                    fontsize=7.5, color="k" if frac > 0.6 else "w")
    for i, j in sorted(flagged or ()):
        if 0 <= i < n and 0 <= j < n:
            ax.add_patch(Rectangle((j - 0.46, i - 0.46), 0.92, 0.92, fill=False, edgecolor="#d62728", linewidth=2.4))
    labels = [f"{r} {h}" for r, h in enumerate(hosts)]
    ax.set_xticks(range(n), labels, rotation=30, ha="right")
    ax.set_yticks(range(n), labels)
    ax.set_xlabel("destination")
    ax.set_ylabel("source")
    ax.grid(False)
    ax.set_title(title)
    bar = fig.colorbar(im, ax=ax, label=what)
    if latency:
        bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_ns(v)))
        bar.ax.yaxis.set_minor_formatter(NullFormatter())
    return png(fig)


# --- the summary at the top of the page ---------------------------------------

SUMMARY_WIDTH = 13.4   # inches: the page's width at DPI, so the figure is drawn at the size it is shown
MET_COLORS = {True: "#2e7d32", False: "#c62828", None: "0.45"}


def _ns_axis(axis) -> None:
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt_ns(v)))
    axis.set_minor_formatter(NullFormatter())


def _latency_panel(ax, kind: str, rows: list[LatencyRow], colors: Colors) -> None:
    """A row per transport/mode and size, fastest on top: p50 a dot, p99 a whisker, max a lighter one."""
    for i, r in enumerate(rows):
        c = colors(r.label)
        if r.max is not None:
            ax.plot([r.p99 or r.p50, r.max], [i, i], color=c, alpha=0.3, lw=2, solid_capstyle="butt")
        if r.p99 is not None:
            ax.plot([r.p50, r.p99], [i, i], color=c, lw=3.5, solid_capstyle="butt")
        ax.plot(r.p50, i, "o", color=c, ms=7, mec="k", mew=0.6)
        spread = ""
        if len(r.p50s) > 1:   # the runs' p50s, lowest to highest: a thin black bar under the dot
            ax.plot([r.p50s[0], r.p50s[-1]], [i + 0.22, i + 0.22], color="k", lw=1, marker="|", ms=5)
            spread = f" (runs {fmt_ns(r.p50s[0])}..{fmt_ns(r.p50s[-1])})"
        ax.annotate(fmt_ns(r.p50) + spread, (r.p50, i), xytext=(0, 6), textcoords="offset points", ha="center",
                    fontsize=7)
    ax.set_yticks(range(len(rows)), [r.name for r in rows])
    ax.set_ylim(len(rows) - 0.5, -0.7)
    ax.set_xscale("log")
    _ns_axis(ax.xaxis)
    ax.set_xlabel(f"{kind} (log scale)")
    ax.set_title(f"latency: {kind}")


def _bandwidth_panels(axes, bars: dict[str, dict[int, tuple[float, float]]], colors: Colors) -> None:
    """Grouped bars per message size, a bar per transport/mode: Gbit/s left, messages/s right."""
    sizes = sorted({s for by_size in bars.values() for s in by_size})
    width = 0.8 / len(bars)
    for k, (ax, what) in enumerate(zip(axes, ("bandwidth [Gbit/s]", "message rate [msg/s]"))):
        for j, (label, by_size) in enumerate(bars.items()):
            x = [sizes.index(s) - 0.4 + width * (j + 0.5) for s in by_size]
            ax.bar(x, [v[k] for v in by_size.values()], width, color=colors(label), label=label)
        ax.set_xticks(range(len(sizes)), [analysis.fmt_size(s) for s in sizes], rotation=45, ha="right",
                      fontsize=7)
        ax.set_ylim(bottom=0)    # linear from 0: a bar's height is its value (on a log axis a small one looks 0)
        ax.set_ylabel(what)
        ax.set_title(f"bw: {what.split(' [')[0]} per message size")
    axes[0].legend(fontsize=7)


def _load_panel(ax, sweeps: list[LoadSweep], colors: Colors) -> None:
    for s in sweeps:
        x = [p["offered_rps"] for p in s.points]
        y = [stat(p, "latency_ns", "p99") or np.nan for p in s.points]
        ax.plot(x, y, marker="o", ms=3.5, color=colors(s.label), label=s.label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _ns_axis(ax.yaxis)
    ax.set_xlabel("offered rate [requests/s, log]")
    ax.set_ylabel("p99 RTT from the intended send")
    ax.set_title("load: p99 against offered rate")
    ax.legend(fontsize=7)


def _stream_panels(axes, lines: dict[str, list[tuple]], colors: Colors) -> None:
    for name, pts in lines.items():
        rate, p50, missed = zip(*pts)
        c = colors(name)
        axes[0].plot(rate, p50, marker="o", ms=3.5, color=c, label=name)
        axes[1].plot(rate, [np.nan if m is None else m for m in missed], marker="x", ms=4, color=c, label=name)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("sample rate [Hz, log]")
    axes[0].set_yscale("log")
    _ns_axis(axes[0].yaxis)
    axes[0].set_ylabel("one-way latency from the step, p50")
    axes[0].set_title("stream: latency against rate")
    axes[1].set_ylabel("missed steps [%]")
    axes[1].set_title("stream: missed steps against rate")
    axes[1].set_ylim(bottom=0)
    axes[1].legend(fontsize=7)


def fig_summary(s: Summary, colors: Colors) -> bytes:
    """Every experiment's summary panels in one figure: latency first (a panel per latency kind, side by side),
    then bandwidth, load and stream, two panels a row."""
    panels = [(max(2.6, 0.9 + 0.3 * len(rows)), lambda ax, k=kind, r=rows: _latency_panel(ax, k, r, colors))
              for kind, rows in s.latency.items()]
    pairs = []
    if s.bandwidth:
        pairs.append(lambda a, b: _bandwidth_panels((a, b), s.bandwidth, colors))
    if s.stream:
        pairs.append(lambda a, b: _stream_panels((a, b), s.stream, Colors(s.stream)))
    singles = [lambda ax: _load_panel(ax, s.load, Colors([w.label for w in s.load]))] if s.load else []
    rows = [panels[i:i + 2] for i in range(0, len(panels), 2)]
    heights = [max(h for h, _ in row) for row in rows] + [2.8] * (len(pairs) + len(singles))
    fig = plt.figure(figsize=(SUMMARY_WIDTH, sum(heights) + 0.2))
    grid = fig.add_gridspec(len(heights), 2, height_ratios=heights)
    for i, row in enumerate(rows):
        for j, (_, draw) in enumerate(row):
            draw(fig.add_subplot(grid[i, j] if len(row) == 2 else grid[i, :]))
    for i, draw in enumerate(pairs, start=len(rows)):
        draw(fig.add_subplot(grid[i, 0]), fig.add_subplot(grid[i, 1]))
    for i, draw in enumerate(singles, start=len(rows) + len(pairs)):
        draw(fig.add_subplot(grid[i, :]))
    return png(fig)


def fig_bench_ratios(rows: list[BenchRow]) -> bytes:
    """fabmeter's figure over its peer's or floor's, a row each on a log axis with 1.0 marked: a dot per ratio
    (green: target met, red: missed, grey: cannot tell, or a floor without target), a black tick at the target."""
    fig, ax = plt.subplots(figsize=(SUMMARY_WIDTH, 1.2 + 0.3 * len(rows)))
    values = [1.0] + [v for r in rows for v in (r.ratio, r.target) if v]
    for i, r in enumerate(rows):
        if r.ratio is None:
            ax.annotate(f"not measured: {r.skipped or '-'}"[:90], (1.0, i), xytext=(6, 0), textcoords="offset points",
                        va="center", fontsize=7, color="0.4")
            continue
        c = MET_COLORS[r.met]
        ax.plot([1.0, r.ratio], [i, i], color=c, lw=3, alpha=0.35, solid_capstyle="butt")
        ax.plot(r.ratio, i, "o", color=c, ms=7)
        ax.annotate(f"{r.ratio:.2f}x", (r.ratio, i), xytext=(0, 6), textcoords="offset points", ha="center",
                    fontsize=7)
        if r.target:
            ax.plot(r.target, i, marker="|", ms=14, mew=2, color="k")
    ax.axvline(1.0, color="k", lw=1)
    ax.set_xscale("log")
    ax.set_xlim(min(values) / 1.6, max(values) * 1.6)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.set_yticks(range(len(rows)), [r.name + (" (higher is better)" if r.higher else "") for r in rows])
    ax.set_ylim(len(rows) - 0.5, -0.7)
    ax.set_xlabel("fabmeter / the other side (log scale); 1x: equal")
    ax.set_title("bench: fabmeter against each peer tool and machine floor")
    return png(fig)


def fig_cpu_cost(rows: list[tuple[str, float, Optional[float], Optional[float], str]], colors: Colors) -> bytes:
    """Per point (label, median latency ns, client and server CPU ns per message, the run's label): latency on
    the left, each side's CPU per message on the right, so a mode's cost sits beside what it bought."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.5, 1.4 + 0.32 * len(rows)), sharey=True)
    y = np.arange(len(rows))
    lat = np.array([r[1] for r in rows], dtype=float)
    client = np.array([np.nan if r[2] is None else r[2] for r in rows], dtype=float)
    server = np.array([np.nan if r[3] is None else r[3] for r in rows], dtype=float)
    shades = [colors(r[4]) for r in rows]
    ax1.barh(y, lat / 1e3, color=shades)
    ax2.barh(y - 0.2, client / 1e3, height=0.4, color=shades, label="client")
    ax2.barh(y + 0.2, server / 1e3, height=0.4, color=shades, alpha=0.45, hatch="//", label="server")
    ax1.set_yticks(y, [r[0] for r in rows])
    ax1.set_ylim(len(rows) - 0.5, -0.5)
    ax1.set_xlabel("one-way latency, median [µs]")
    ax1.set_title("latency (lat: RTT/2; oneway, stream: one-way)")
    ax2.set_xlabel("process CPU time (user + system) per message [µs]; lat: per round trip, load: per request")
    ax2.set_title("CPU per message: solid client, hatched server")
    ax2.legend(loc="lower right", fontsize=7)
    return png(fig)
