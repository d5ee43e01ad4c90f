"""The report page: sections of tables and figures, one self-contained HTML file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from fabmeter import __version__, analysis
from fabmeter.errors import EXIT_USAGE, FabmeterError
from fabmeter.report.figures import (THROUGHPUT_CAPTION, Colors, fig_bandwidth, fig_bench_ratios, fig_cdf,
                                     fig_completions_per_poll, fig_cpu_cost, fig_histogram, fig_latency_vs_size,
                                     fig_load_clients, fig_load_latency, fig_load_throughput, fig_setup_connect,
                                     fig_setup_mr, fig_slowdown, fig_stages, fig_stream_heatmap, fig_stream_vs_rate,
                                     fig_summary, fig_throughput_over_time, fig_tx_path)
from fabmeter import compare
from fabmeter.report import cluster, context, findings, hop_section, mpi_section, udapl
from fabmeter.report.comparison import section as comparison_section
from fabmeter.report.mesh_section import section_mesh
from fabmeter.report.files import number, obj
from fabmeter.report.markup import Html, el, img, join, trusted
from fabmeter.report.model import (EXPERIMENT_ORDER, Entry, Run, entries_of, inline_pair_key, latency_name,
                                   load_client_sweeps, load_sweeps, percentiles, read_benches, read_meshes, read_runs,
                                   read_suites, representative, stat, throughput_over_time)
from fabmeter.report.summary import bench_rows, summarize
from fabmeter.report.table import SORT_SCRIPT, section_table
from fabmeter.results import now_iso


def _idle_words(idle: dict) -> str:
    if not idle.get("driver"):
        return "-"
    words = f"cpuidle {idle['driver']}, governor {idle.get('governor') or '-'}"
    if number(idle.get("guest_halt_poll_ns")) is not None:
        words += f", polls {idle['guest_halt_poll_ns']:,} ns before halting (guest_halt_poll_ns)"
    return words


def section_environment(runs: list[Run]) -> Html:
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
        return el("p", "No environment recorded.")
    out = []
    for env, rels in envs.values():
        eng, kernel, libs = obj(env.get("engine")), obj(env.get("kernel")), obj(env.get("libraries"))
        govs = sorted({str(v) for v in obj(env.get("governors")).values()})
        rows = [
            ("host", env.get("hostname")),
            ("CPU", f"{context.or_unknown(env.get('cpu_model'))} ({context.or_unknown(env.get('cpu_count'))} CPUs, "
                    f"allowed {context.or_unknown(env.get('cpus_allowed'))})"),
            ("kernel", f"{kernel.get('release') or ''} {kernel.get('version') or ''}".strip() or "unknown"),
            ("frequency governors", "none (no cpufreq)" if govs == ["None"] else ", ".join(govs)),
            ("idle", _idle_words(obj(env.get("cpuidle")))),
            ("isolated CPUs", env.get("isolated_cpus") or "none"),
            ("TSC flags", " ".join(str(f) for f in env.get("tsc_flags") or []) or "-"),
            ("timestamps", f"{context.or_unknown(eng.get('clock_source'))}, TSC {context.or_unknown(eng.get('tsc_ghz'))} "
                           f"GHz, {context.or_unknown(eng.get('timestamp_cost_ns'))} ns per timestamp" if eng else "-"),
            ("libraries", ", ".join(f"{k} {context.or_unknown(v)}" for k, v in libs.items()) +
             (f", engine compiler {eng.get('compiler')}" if eng.get("compiler") else "")),
        ]
        for end, key in (("client", "engine"), ("server", "server_engine")):
            fabric = obj(obj(env.get(key)).get("fabric"))
            if fabric:
                rows.append((f"{end} fabric", "; ".join(w for w in (context.fabric_summary(fabric),
                                                                     context.fabric_detail(fabric)) if w)))
        rows.append(("runs", f"{len(rels)}: " + ", ".join(rels[:8]) + (", ..." if len(rels) > 8 else "")))
        out.append(el("table", [el("tr", el("th", k), el("td", v)) for k, v in rows], class_="env"))
    return join(out, "\n")


def section_histograms(groups: dict[int, list[Entry]], colors: Colors, anchors: dict[int, str],
                       folded: bool) -> list[Html]:
    """A histogram per run, grouped by experiment, each group a <details> (closed when `folded`); fills
    `anchors` with each drawn run's figure id, for the table's links."""
    by_experiment: dict[str, list[Html]] = {}
    for n, run_entries in enumerate(groups.values()):
        e = representative(run_entries)
        if e.samples() is None:
            continue
        anchors[id(e.run)] = f"run-{n}"
        more = f"; the run has {len(run_entries)} points, this is its {e.where()} point" if len(run_entries) > 1 else ""
        by_experiment.setdefault(e.experiment, []).append(
            img(fig_histogram(e, colors(e.label)), f"histogram {e.run.rel}",
                 f"{e.run.rel}: {e.latency_name}, {context.or_unknown(e.point.get('iterations'))} messages "
                 f"after {context.or_unknown(e.point.get('warmup'))} warm-up (excluded){more}", anchor=f"run-{n}"))
    return [el("details", el("summary", f"{exp}: {len(figs)} run{'s' * (len(figs) > 1)}"),
               el("div", figs, class_="figs"), open=not folded)
            for exp, figs in sorted(by_experiment.items(), key=lambda kv: EXPERIMENT_ORDER.get(kv[0], 9))]


def section_summary(entries: list[Entry], colors: Colors, benches: list[dict]) -> list[Html]:
    """The page's first figures: each bench's ratios, then the summary of every experiment."""
    figs = [img(fig_bench_ratios(bench_rows(doc)), "bench ratios", BENCH_CAPTION, wide=True, anchor=SUMMARY_ID)
            for doc in benches if doc.get("rows")]
    s = summarize(entries)
    if s:
        caption = " ".join(text for part, text in SUMMARY_CAPTIONS.items() if getattr(s, part))
        figs.append(img(fig_summary(s, colors), "summary", caption, wide=True,
                         anchor=None if figs else SUMMARY_ID))
    return figs


SUMMARY_ID = "summary-figure"   # the page's first figure
SUMMARY_CAPTIONS = {   # a sentence per panel kind, in the figure's order
    "latency": "Latency (a panel per latency kind: RTT/2 is half a measured round trip, one-way is measured with "
               "synchronised clocks; never on one axis): a row per transport/mode and size, fastest first; dot: p50 "
               "(its value above it), dark bar: p50 to p99, light bar: p99 to max, log axis. Runs of one row "
               "(repeats, rounds) show the one with the median p50, and under it a thin black bar from the lowest "
               "to the highest of their p50s (the range above it).",
    "bandwidth": "Bandwidth: a bar per transport/mode at each size, Gbit/s of payload and messages per second "
                 "(medians over runs), linear axes from 0.",
    "stream": "Stream: median one-way latency from the scheduled step and the share of steps missed, against the "
              "sample rate.",
    "load": "Load: p99 of the round trip from the intended send time against offered rate, a line per run.",
}
BENCH_CAPTION = ("fabmeter's figure divided by its peer tool's or the machine floor's, a row each (medians over "
                 "rounds), log axis, 1x marked: a dot per ratio, green where its target is met, red where missed (by "
                 "the interval of the rounds' own ratios), grey where the rounds cannot tell or for a floor that has "
                 "no target; the black tick is the target. Rows marked 'higher is "
                 "better' want a ratio above their tick, the others below.")


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
        figs.append(img(fig_cdf(f"{e0.experiment} {e0.where()}\nCDF of the {e0.latency_name}", curves,
                                 e0.latency_name),
                         f"CDF {e0.experiment} {e0.where()}",
                         f"{e0.experiment}, {e0.where()}: {len(curves)} runs; dotted lines at p50 and p99"))
    return figs


def section_stages(groups: dict[int, list[Entry]], colors: Colors) -> list[str]:
    """oneway's stages, one figure per configuration (each run's representative
    point); runs that differ only by --inline side by side, inline off first."""
    by_config: dict[tuple, list[Entry]] = {}
    for run_entries in groups.values():
        e = representative(run_entries)
        if e.experiment == "oneway" and e.raw_samples("post_ns") is not None:
            by_config.setdefault(inline_pair_key(e), []).append(e)
    figs = []
    for es in (by_config[k] for k in sorted(by_config)):
        es.sort(key=lambda e: (e.inline, e.run.rel))
        keys = (*analysis.ONEWAY_STAGES, analysis.ONEWAY_FROM_SEND)
        columns = [(f"{e.run.rel}: inline {f'on (--inline {e.inline})' if e.inline else 'off'}",
                    {key: a for key, *_ in keys if (a := e.raw_samples(key)) is not None})
                   for e in es]
        # A run without t_send says why (inline, no CPU for the time thread, ...).
        absent = [{"send_ns": e.point["t_send_absent"]} if e.point.get("t_send_absent") else {} for e in es]
        stages = [(key, f"{name}: {stamps}") for key, name, stamps in analysis.ONEWAY_STAGES
                  if any(key in c for _, c in columns) or (key == "send_ns" and any(absent))]
        e0 = es[0]
        title = f"oneway {e0.label} {e0.where()}: one-way stages from the submit stamp t_subm"
        figs.append(img(fig_stages(title, stages, columns, [colors(e.label) for e in es], absent,
                                    beside={"latency_ns": analysis.ONEWAY_FROM_SEND}),
                         f"one-way stages {e0.label} {e0.where()}",
                         f"{e0.where()}: " + ", ".join(e.run.rel for e in es) + "; a row per stage, a column per run",
                         wide=len(es) > 1))
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
                pct = percentiles(e)
                if pct is not None:
                    rows.append((size, *pct))
            if len(rows) >= 2:
                series[label] = rows
        if series:
            name = latency_name({}, exp)
            title = f"{exp}: {name} vs message size"
            figs.append(img(fig_latency_vs_size(title, series, name, colors), title,
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
    figs = []
    if series_rows:
        figs.append(img(fig_bandwidth(series_rows, colors), "bandwidth and message rate vs size",
                         "bw: one line per transport/mode (bidir: both directions at once)", wide=True))
    lines = {}
    for e in entries:
        if e.experiment == "bw" and not e.run.peer:
            for direction, s in (e.point.get("throughput_series") or {}).items():
                line = throughput_over_time(s, e.point.get("size"))
                if line is not None:
                    lines[f"{e.run.rel} {e.label} {analysis.fmt_size(int(e.point['size']))} {direction}"] = line
    if lines:
        figs.append(img(fig_throughput_over_time("bw: throughput over time per connection", lines, Colors(lines)),
                         "bw throughput over time", THROUGHPUT_CAPTION, wide=True))
    return figs


# The most points the CPU figure draws (one bar pair each): the first in the report's order.
CPU_FIGURE_POINTS = 24


def section_cpu(entries: list[Entry], colors: Colors) -> list[str]:
    """CPU per message of each point with a latency, both ends, beside its median latency."""
    rows = []
    for e in entries:
        cpu = obj(e.point.get("cpu"))
        client, server = obj(cpu.get("client")), obj(cpu.get("server"))
        p50 = stat(e.point, "latency_ns", "p50")
        if p50 is None or (client.get("per_message_ns") is None and server.get("per_message_ns") is None):
            continue
        rows.append((f"{e.experiment} {e.label} {e.where()}".strip(), p50, number(client.get("per_message_ns")),
                     number(server.get("per_message_ns")), e.label, e.run.rel))
    if not rows:
        return []
    names = [r[0] for r in rows[:CPU_FIGURE_POINTS]]    # points alike but for their run: named by its folder too
    rows = [(f"{r[0]} ({r[5]})" if names.count(r[0]) > 1 else r[0], *r[1:5]) for r in rows[:CPU_FIGURE_POINTS]]
    return [img(fig_cpu_cost(rows, colors), "CPU per message beside latency", CPU_CAPTION, wide=True)]


CPU_CAPTION = ("cpu.client and cpu.server of each point (docs/results.md): the process's user + system CPU time over "
               "its measured window, per message (lat: per round trip; load: per request), from getrusage; a "
               "busy-polling side spends about a CPU whatever the rate, an event-mode one what its messages take. "
               "A peer tool's bars are fabmeter's accounting of its processes over their whole run, its own warm-up "
               "included.")



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
        pct = percentiles(e)
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
        figs.append(img(fig_stream_vs_rate(lines, colors), "stream latency vs rate",
                         "stream: median one-way latency (receive time minus the scheduled step time) vs sample "
                         "rate, with the share of steps the source missed (dashed, right axis)", wide=True))
    for label, grid in sorted(cells.items()):
        if len({r for r, _ in grid}) >= 2 and len({v for _, v in grid}) >= 2:
            figs.append(img(fig_stream_heatmap(label, grid), f"stream heatmap {label}",
                             f"stream {label}: median one-way latency over rate x values per sample"))
    return figs


FIXED_SIZES = "fixed sizes"   # a load run without --workload


def _load_title(workload: str) -> str:
    return "load, " + (workload if workload == FIXED_SIZES else f"workload {workload}")


def _closed_loop_figures(entries: list[Entry]) -> list[str]:
    sweeps = [s for s in load_client_sweeps(entries) if len(s.points) >= 2]
    if not sweeps:
        return []
    colors = Colors([s.label for s in sweeps])
    curves = {s.label: s.points for s in sweeps}
    return [img(fig_load_clients("load", curves, colors), "load closed loop against clients",
                 "closed loop (--clients): each client keeps --outstanding requests in flight and sends the next as "
                 "soon as one completes (after --think-us); achieved rate and the round trip from the moment a "
                 "slot came free, against the number of clients. Unlike open loop, a slow reply delays the next "
                 "request instead of queueing behind it (coordinated omission)", wide=True)]


def section_load(entries: list[Entry]) -> list[str]:
    """Closed-loop client sweeps against clients; open-loop load sweeps: per workload latency and achieved
    against offered rate and slowdown against size; each run's completions per poll."""
    figs = _closed_loop_figures(entries)
    sweeps = load_sweeps(entries)
    if not sweeps:
        return figs
    colors = Colors([s.label for s in sweeps])    # a sweep's label names its workload too: colours of their own
    # Per workload, as Homa plots them: one run per transport and mode in each.
    for workload in sorted({s.workload or FIXED_SIZES for s in sweeps}):
        curves = {s.label: s.points for s in sweeps if (s.workload or FIXED_SIZES) == workload and len(s.points) >= 2}
        if not curves:
            continue
        title = _load_title(workload)
        figs.append(img(fig_load_latency(title, curves, colors), f"load latency vs offered rate {workload}",
                         f"{title}: p50, p99 and p99.9 of the round trip from the intended send time (queueing "
                         "included: coordinated omission cannot hide it) against the offered request rate; the "
                         "knee: the first offered rate whose p99 exceeds 10x the unloaded p99 or whose achieved "
                         "rate falls below 95 % of offered", wide=True))
        figs.append(img(fig_load_throughput(title, curves, colors), f"load achieved vs offered {workload}",
                         f"{title}: achieved request rate (completed round trips per second) against offered"))
    by_workload: dict[str, dict[str, list]] = {}
    for s in sweeps:
        for p in s.points:
            rows = [(b["size_hi"], b["p50"], b["p99"]) for b in p.get("slowdown") or []
                    if b.get("count") and b.get("p50")]
            if len(rows) >= 2:
                by_workload.setdefault(s.workload or FIXED_SIZES, {}).setdefault(s.label, []).append(
                    (p["offered_rps"], rows))
    for workload, series in sorted(by_workload.items()):
        title = _load_title(workload)
        figs.append(img(fig_slowdown(title, series, colors), f"load slowdown {workload}",
                         f"{title}: slowdown per message-size bucket (latency from the intended send / the unloaded "
                         "p50 of that size, Homa's metric), p50 and p99", wide=True))
    tx_curves = {s.label: [p for p in s.points if isinstance((p.get("server") or {}).get("tx"), dict)]
                 for s in sweeps}
    tx_curves = {label: points for label, points in tx_curves.items() if points}
    if tx_curves:
        figs.append(img(fig_tx_path("load", tx_curves, colors), "load transmit path",
                         "the server's transmit path, as RAMCloud timed it (transports with send completions): a "
                         "reply that finds every send buffer taken polls for send completions until one frees; "
                         "left, completions one non-empty poll returned; right, how long such a reply waited and "
                         "how long one poll took", wide=True))
    for s in sorted(sweeps, key=lambda s: s.label):
        per = {f"{analysis.fmt_num(p['offered_rps'], 0)}/s, mean {p['server'].get('mean_per_poll', 0):.2g}":
               p["server"]["completions_per_poll"] for p in s.points if (p.get("server") or {}).get("completions_per_poll")}
        if per:
            figs.append(img(fig_completions_per_poll(f"load {s.label}: the server's completions per poll", per),
                             f"load completions per poll {s.label}",
                             f"load {s.label}: messages one poll of the server's transport returned, as a share of "
                             "the polls that returned any (the receive side; RAMCloud's measure, transmit buffers "
                             "per poll, is the transmit path figure's)"))
    return figs


def section_setup(entries: list[Entry]) -> list[str]:
    """fabmeter setup: connect time per transport beside the bare connect/accept floor, registration time
    against size."""
    setup = [e for e in entries if not e.run.peer and e.experiment == "setup"]
    connects, series = [], {}
    for e in setup:
        if e.point.get("what") == "connect":
            p50, p99 = stat(e.point, "connect_ns", "p50"), stat(e.point, "connect_ns", "p99")
            if p50 is not None and p99 is not None:
                connects.append((e.label, p50, p99))
        elif e.point.get("what") == "mr" and number(e.point.get("registered_bytes")):
            for prefix, kind in (("", "base pages"), ("huge_", "huge pages")):
                p50, p99 = stat(e.point, prefix + "register_ns", "p50"), stat(e.point, prefix + "register_ns", "p99")
                if p50 is not None and p99 is not None:
                    series.setdefault(f"{e.label} {kind}", []).append((float(e.point["registered_bytes"]), p50, p99))
    figs = []
    if connects:
        floors = [obj(obj(e.run.doc.get("limits")).get("connect_floor_ns")) for e in setup]
        floor = next(((float(f["p50"]), float(f["p99"])) for f in floors
                      if number(f.get("p50")) is not None and number(f.get("p99")) is not None), None)
        figs.append(img(fig_setup_connect(connects, floor), "setup connect time per transport",
                         "setup: connection establishment per transport, timed on the client from constructing a new "
                         "transport to its connect() returned (control-channel round trips included: each point's "
                         "covers says how many); grey: the machine's bare loopback tcp connect/accept (limits)",
                         wide=True))
    if series:
        figs.append(img(fig_setup_mr(series, Colors(sorted(series))), "setup registration against size",
                         "setup: memory registration (ibv_reg_mr, fi_mr_reg) of a touched region against its size, on "
                         "base pages and on huge pages; a size without huge pages has no huge-page marker"))
    return figs


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
.scroll { overflow-x: auto; border: 1px solid #e3e7eb; }
.figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 1.2rem; }
figure { margin: 0; } figure.wide { grid-column: 1 / -1; max-width: 1100px; }
figure img { max-width: 100%; height: auto; border: 1px solid #eef0f2; }
figcaption { font-size: .8rem; color: #5a6570; margin-top: .2rem; }
.figs.summary figure { max-width: none; }
p.machine { margin: .1rem 0 .3rem; font-size: .95rem; }
p.warn { margin: .3rem 0; padding: .3rem .6rem; font-size: .85rem; background: #fff4e5;
         border-left: 4px solid #e67e22; }
td.ok { color: #1a7f37; } td.bad { color: #c62828; font-weight: 600; } td.dim { color: #777; }
details { grid-column: 1 / -1; } details > summary { cursor: pointer; font-weight: 600; margin: .4rem 0; }
table.sortable th { cursor: pointer; } th[aria-sort="ascending"]::after { content: " \\25b2"; }
th[aria-sort="descending"]::after { content: " \\25bc"; }
.notes ul { margin: .2rem 0; }
"""


# What drawing a section can raise on values of a results file that is not what fabmeter writes.
DATA_ERRORS = (ArithmeticError, AttributeError, IndexError, KeyError, TypeError, ValueError)


def build_html(root: Path, runs: list[Run], problems: list[str], meshes: list[tuple[str, dict]],
               suites: list[dict], benches: list[dict], comparison: Optional[dict] = None) -> str:
    entries = entries_of(runs)
    colors = Colors([e.label for e in entries])
    groups: dict[int, list[Entry]] = {}
    for e in entries:
        if not e.run.peer:
            groups.setdefault(id(e.run), []).append(e)
    problems = list(problems)

    def drawn(section, *args) -> list[Html]:
        """A section's figures; one that a results file's values cannot draw is left out with a note, never a
        traceback."""
        try:
            return section(*args)
        except DATA_ERRORS as e:
            problems.append(f"{section.__name__.removeprefix('section_')}: not drawn ({type(e).__name__}: {e})")
            return []

    # The page opens on the summary; a single run has none, and its histogram stands first, unfolded.
    single = len(groups) == 1 and not benches
    anchors: dict[int, str] = {}
    histograms = drawn(section_histograms, groups, colors, anchors, not single)
    summary = histograms if single else drawn(section_summary, entries, colors, benches)
    top = [("summary", "The run" if single else "Summary", summary, ""),
        ("comparison", "Against a base", comparison_section(comparison) if comparison else [],
         "fabmeter compare: the ratio this/base of each matched point's headline figure, its interval and what the "
         "data can tell (docs/cli.md#fabmeter-compare)."),
        ("cluster", "Cluster load: slowdown against message size", drawn(cluster.section, meshes), ""),
        ("mesh", "Mesh: every directed pair of N hosts", drawn(section_mesh, meshes),
         "fabmeter mesh: a matrix per run, source hosts in rows, destinations in columns; each pair's own "
         "figures (latency percentiles of its kind, Gbit/s), never re-sampled."),
        udapl.entry(drawn, meshes),
        mpi_section.entry(drawn, meshes),
        hop_section.entry(drawn, runs),
    ]
    sections = [
        ("histograms", "Latency histograms (one per run)", [] if single else histograms,
         "Each run's latency distribution. Solid: median; dashed: max; dotted: the run's threshold (oneway) or "
         "deadline (stream), with the share above it. A compact distribution is drawn on a linear axis up to "
         "p50 + 4 x (p99 - p50), the samples beyond counted in the legend; a heavy-tailed one (p99 > 5 x p50) "
         "on a log axis from min to max."),
        ("cdf", "CDF overlays per transport and mode", drawn(section_cdfs, groups, colors),
         "Runs of the same experiment and size side by side (multi-point runs: their representative point)."),
        ("stages", "One-way stages (t_subm, t_post, t_send, t_recv, t_comp)", drawn(section_stages, groups, colors),
         "oneway's timestamps, each stage from t_subm, just before the post: post (t_post, the post call "
         "returned), send (t_send, the device read the payload: the last stamp the time thread wrote into it "
         "before the read; absent for inline sends, with the reason), receive (t_recv, the receiver saw the "
         "message; t_recv - t_send drawn beside t_recv - t_subm, as the thesis does) and, where the transport "
         "reports send completions, completion (t_comp, the sender saw it). Runs that differ only by the inline "
         "option side by side. Each row's axis runs from its lowest sample to p50 + 4 x (p99 - p50) of the widest "
         "run, the samples beyond counted in the legend; solid: median (dashed: t_recv - t_send's)."),
        ("sizes", "Latency vs message size", drawn(section_sizes, entries, colors), ""),
        ("bandwidth", "Bandwidth and message rate vs message size", drawn(section_bandwidth, entries, colors), ""),
        ("cpu", "CPU cost: CPU per message beside latency, busy vs event", drawn(section_cpu, entries, colors), ""),
        ("stream", "Stream: latency vs rate, missed steps, rate x values", drawn(section_stream, entries, colors), ""),
        ("load", "Load: latency and throughput against offered rate, slowdown, completions per poll",
         drawn(section_load, entries),
         "Open-loop request/response (fabmeter load): requests sent on a schedule fixed in advance, latency measured "
         "from each request's intended send time. The closed-loop capacity point of an --of-capacity sweep is "
         "left out."),
        ("setup", "Setup: connection establishment and memory registration", drawn(section_setup, entries),
         "fabmeter setup: what a connection and a registration cost before the first message, percentiles over "
         "repetitions after warm-up ones."),
    ]
    n_points = sum(1 for e in entries if not e.run.peer)
    n_peer = sum(1 for e in entries if e.run.peer)
    statuses: dict[str, int] = {}
    for r in runs:
        if not r.peer:
            statuses[r.status] = statuses.get(r.status, 0) + 1
    problems += [n for r in runs for n in r.notes]   # samples refused while drawing
    page_title = f"fabmeter report: {root.name or root}"
    counts = (f"{sum(1 for r in runs if not r.peer)} runs "
              f"({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))}), {n_points} measured points" + (f", {n_peer} peer results" if n_peer else "")
              + (f", {len(meshes)} mesh runs" if meshes else ""))
    body = [el("h1", page_title), el("p", context.machine_line(runs), class_="machine")]
    body += [el("p", line, class_="machine") for line in [context.paths_line(entries)] if line]
    body += [el("p", "\u26a0 " + w, class_="warn") for w in context.warnings(runs) + findings.lines(runs)]
    body.append(el("p", f"{root} \u00b7 generated {now_iso()} by fabmeter {__version__} \u00b7 {counts}",
                   class_="meta"))
    body += [el("p", "suite ", el("b", s["suite"]), f": {s['description']} ({s['status']})", class_="meta")
             for s in suites]
    shown = [(sid, name) for sid, name, figs, _ in top if figs] + [("table", "Comparison table"),
                                                                   ("environment", "Environment")]
    shown += [(sid, name) for sid, name, figs, _ in sections if figs]
    body.append(el("nav", [el("a", name.split(":")[0], href=f"#{sid}") for sid, name in shown]))
    if problems:
        body.append(el("div", "Not read:", el("ul", [el("li", p) for p in problems]), class_="meta notes"))
    body += [_section(*s) for s in top if s[2]]
    body.append(join([el("h2", "Comparison table", id="table"), TABLE_INTRO, section_table(entries, runs, anchors)]))
    body.append(join([el("h2", "Environment", id="environment"), section_environment(runs)]))
    body += [_section(*s) for s in sections if s[2]]
    page = el("html", el("head", el("meta", charset="utf-8"), el("title", page_title), el("style", trusted(CSS))),
              el("body", "\n", join(body, "\n"), el("script", SORT_SCRIPT), "\n"), lang="en")
    return f"<!DOCTYPE html>\n{page}\n"


def _section(sid: str, title: str, figs: list[Html], intro: str) -> Html:
    return join([el("h2", title, id=sid), el("p", intro, class_="meta") if intro else None,
                 el("div", figs, class_=f"figs {sid}")])


TABLE_INTRO = el("p", "The latency column says what p50, p99 and max are: ", el("b", "RTT/2"),
                 " (half a measured round trip, lat), ", el("b", "one-way"), " (receive time minus the scheduled send "
                 "time, oneway and stream) or ", el("b", "RTT"), " (a whole round trip: load, from the intended send "
                 "time, and a peer tool that reports only the round trip). Peer rows (shaded) come from other tools "
                 "and are only as comparable as their note says.", class_="meta")


def write(root: Path, output: Optional[Path] = None, compare_with: Optional[Path] = None) -> Path:
    """Writes the report of everything under root (with `compare_with`: a comparison against that folder
    first); returns its path."""
    root = root.resolve()
    if not root.is_dir():
        raise FabmeterError(f"{root} is not a folder", EXIT_USAGE)
    runs, problems = read_runs(root)
    meshes, mesh_problems = read_meshes(root)
    suites, suite_problems = read_suites(root)
    benches, bench_problems = read_benches(root)
    if not runs and not meshes:
        raise FabmeterError(f"no run.json, peers.json or mesh.json under {root}"
                            + (f" that could be read ({'; '.join(problems + mesh_problems)})"
                               if problems or mesh_problems else ""), EXIT_USAGE)
    output = (output or root / "report.html").resolve()
    if output.is_dir():
        raise FabmeterError(f"-o {output}: is a folder (name the HTML file)", EXIT_USAGE)
    comparison = compare.compare(compare_with, root, None) if compare_with else None
    text = build_html(root, runs, problems + mesh_problems + suite_problems + bench_problems, meshes, suites, benches,
                      comparison)
    tmp = output.with_name(output.name + ".tmp")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        tmp.replace(output)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise FabmeterError(f"-o {output}: {e.strerror or e}", EXIT_USAGE) from None
    return output
