"""Percentiles, summaries and tables.

Percentiles use numpy's default linear interpolation, the same definition
the engine uses for its summaries, so a summary can be recomputed exactly
from the raw .npy samples.
"""

from __future__ import annotations

import numbers
import re
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

from fabmeter.terminal import shown

if TYPE_CHECKING:       # numpy is imported where it computes: the CLI's start-up and a run need none (test_cli)
    import numpy as np

# The fixed summary keys of every latency block, in display order; a run's
# --percentiles adds keys of their own (percentile_key) between max and the
# fixed percentiles.
STAT_KEYS = ("min", "p10", "p50", "p90", "p99", "p999", "p9999", "max", "mean", "stdev")
PERCENTILES = {"p10": 10.0, "p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9, "p9999": 99.99}
STAT_LABELS = {"min": "min", "p10": "p10", "p50": "p50", "p90": "p90", "p99": "p99", "p999": "p99.9",
               "p9999": "p99.99", "max": "max", "mean": "mean", "stdev": "stdev"}
_KEY = re.compile(r"p(\d{2})(\d{0,4})")


def percentile_key(q: float) -> str:
    """The engine's key of percentile q (stats.hpp): p, the whole part in at
    least two digits, then the decimals: 10 -> p10, 99.99 -> p9999, 1.5 -> p015."""
    scaled = round(q * 1e4)
    return "p" + f"{scaled // 10000:02d}{scaled % 10000:04d}".rstrip("0").ljust(2, "0")


def key_percentile(key: str) -> Optional[float]:
    """percentile_key's inverse: 'p9999' -> 99.99; None for a key that is no percentile."""
    m = _KEY.fullmatch(key)
    return float(f"{m[1]}.{m[2] or 0}") if m else None


def percentile_label(key: str) -> str:
    """'p9999' -> 'p99.99', 'p015' -> 'p1.5'."""
    q = key_percentile(key)
    return STAT_LABELS.get(key) or (f"p{q:g}" if q is not None else key)


def shown_percentiles(default: Sequence[str], chosen: Sequence[float] = ()) -> list[str]:
    """The percentile keys a table shows: the run's --percentiles, else its own."""
    return [percentile_key(q) for q in sorted(set(chosen))] if chosen else list(default)

# oneway's stages, each from the submit stamp t_subm (docs/results.md): the
# point's key, the stage's name, the stamps it spans. Send (the device read
# the payload: the time thread's t_send) exists only where the device reads
# it after the post (verbs, ofi; not inline), completion only where the
# transport reports send completions.
ONEWAY_STAGES = (("post_ns", "post", "t_post - t_subm"),
                 ("send_ns", "send", "t_send - t_subm"),
                 ("latency_ns", "receive", "t_recv - t_subm"),
                 ("completion_ns", "completion", "t_comp - t_subm"))
# The one-way latency from t_send, drawn and listed beside t_recv - t_subm (the thesis' pair).
ONEWAY_FROM_SEND = ("latency_send_ns", "receive from t_send", "t_recv - t_send")


def summarize(samples: np.ndarray, extra: Sequence[float] = ()) -> dict:
    """The engine's summary of a sample array (population stdev), with the
    percentiles `extra` (--percentiles) beside the fixed ones."""
    import numpy as np
    a = np.asarray(samples, dtype=np.float64)
    qs = {**PERCENTILES, **{percentile_key(q): q for q in extra}}
    if a.size == 0:
        return {k: None for k in (*STAT_KEYS, *qs)}
    out = {"min": float(a.min())}
    for k, q in qs.items():
        out[k] = float(np.percentile(a, q))
    out.update(max=float(a.max()), mean=float(a.mean()), stdev=float(a.std()))
    return out


def median(values: Iterable[float]) -> Optional[float]:
    import numpy as np
    v = [x for x in values if x is not None]
    return float(np.median(v)) if v else None


# --- formatting -------------------------------------------------------------

def fmt_num(x, digits: int = 1) -> str:
    """Compact numbers: one decimal below 10 000, none above; '-' for missing."""
    if x is None:
        return "-"
    if isinstance(x, numbers.Integral):     # numpy's integers too
        return f"{x:,}"
    x = float(x)
    if x != x:  # NaN
        return "-"
    return f"{x:,.{digits}f}" if abs(x) < 10000 else f"{x:,.0f}"


def fmt_size(n) -> str:
    if n is None:
        return "-"
    n = int(n)
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= (1 << shift) and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _row_numbers(row: Sequence) -> list[str]:
    """A table row's cells as text, its measured values (floats) in one format: one decimal where any of them
    is below 10,000 (never "13,445" beside "7,384.5"), else none; counts (ints) whole."""
    floats = [float(c) for c in row if _is_float(c) and c == c]
    digits = 1 if any(abs(x) < 10000 for x in floats) else 0
    return [c if isinstance(c, str) else _fixed(float(c), digits) if _is_float(c) else fmt_num(c) for c in row]


def _is_float(c) -> bool:
    """A float, numpy's included (registered as numbers.Real), not a count."""
    return isinstance(c, numbers.Real) and not isinstance(c, numbers.Integral)


def _fixed(x: float, digits: int) -> str:
    return "-" if x != x else f"{x:,.{digits}f}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence], left: int = 1) -> str:
    """Plain-text table; the first `left` columns are left-aligned, the rest right."""
    cells = [[shown(h) for h in headers]] + [[shown(c) for c in _row_numbers(r)] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def cpu_sides(point: dict) -> tuple[dict, dict]:
    """The point's CPU cost (docs/results.md "cpu"): the client's side and the server's ({} where absent)."""
    cpu = point.get("cpu")
    cpu = cpu if isinstance(cpu, dict) else {}
    return cpu.get("client") or {}, cpu.get("server") or {}


# A busy end kept off its CPU longer than this share of its window: the figures hold its absence (a receiver that
# falls behind by a stall stays behind for the rest of its burst), not only the path. A busy end of this
# 2-CPU VM reads 0.2-1.3 % in a quiet run; every run of 1,562 whose p50 was 2x or more off (7) read 29-49 %.
OFF_CPU_SHARE = 0.05


def off_cpu(side: dict) -> Optional[tuple[float, float, float]]:
    """How long a side's measuring thread, which never slept in its window (a busy poller), was kept off its CPU
    there (docs/results.md "cpu"): (seconds, of which another task held its CPU (run_delay_s), of which the CPU
    itself was gone: neither running nor waiting, the hypervisor's steal or interrupts). None for a thread that
    slept (its waits may fall where it would have slept: cannot tell) or without the figures."""
    if not isinstance(side, dict):
        return None
    window, on_cpu, delay, sleeps = (side.get(k) for k in ("window_s", "on_cpu_s", "run_delay_s", "sleeps"))
    if sleeps != 0 or not all(isinstance(v, (int, float)) for v in (window, on_cpu, delay)) or window <= 0:
        return None
    return window - on_cpu, delay, max(0.0, window - on_cpu - delay)


def off_cpu_share(side: dict) -> Optional[float]:
    """off_cpu's seconds as a share of the side's window (None where off_cpu cannot tell)."""
    off = off_cpu(side)
    return off[0] / side["window_s"] if off else None


def kept_off(share: Optional[float]) -> bool:
    """Whether an end off its CPU this share of its window (off_cpu_share) was kept off: its figures hold it."""
    return share is not None and share > OFF_CPU_SHARE


def off_cpu_words(point: dict) -> Optional[str]:
    """Which ends of a point were off their CPU more than OFF_CPU_SHARE of their window, in words; None if none."""
    said = []
    for end, side in zip(("client", "server"), cpu_sides(point)):
        if kept_off(off_cpu_share(side)):
            off = off_cpu(side)
            said.append(f"the {end} was off its CPU {off[0] * 1e3:.2f} ms of its {side['window_s'] * 1e3:.2f} ms "
                        f"window (another task ran there {off[1] * 1e3:.2f} ms; the CPU itself was gone "
                        f"{off[2] * 1e3:.2f} ms: the hypervisor's or interrupts')")
    if not said:
        return None
    return "; ".join(said) + ": the messages in flight or queued behind it then hold that absence, not only the path"


def cpu_cell(point: dict, key: str = "per_message_ns", digits: int = 0) -> str:
    """One CPU figure of both sides, "client | server"."""
    client, server = cpu_sides(point)
    return f"{fmt_num(client.get(key), digits)} | {fmt_num(server.get(key), digits)}"


def cpu_per(points: list[dict]) -> str:
    """What a CPU-per figure counts in these points: round trip, message or request."""
    return next((c.get("per") for p in points for c in cpu_sides(p) if c.get("per")), "message")


def latency_kind_word(point: dict, experiment: Optional[str] = None) -> str:
    """What a point's latency_ns is, in a word: "RTT/2" (lat), "RTT" (load's, from the intended send) or
    "one-way"."""
    kind = point.get("latency_kind") or ("rtt/2" if (experiment or point.get("experiment")) == "lat" else "one-way")
    return "RTT/2" if kind == "rtt/2" else "RTT" if kind.startswith("rtt") else "one-way"


def _latency_label(point: dict) -> str:
    word = latency_kind_word(point)
    return "one-way (RTT/2) ns" if word == "RTT/2" else f"{word} ns"


def point_block(point: dict, percentiles: Sequence[float] = ()) -> str:
    """One measured point as a labelled table: rows are figures, columns
    statistics (the percentiles: `percentiles`, else the fixed ones)."""
    exp = point.get("experiment", "?")
    head = (f"{exp}  {point.get('transport', '?')}/{point.get('poll', '?')}  {fmt_size(point.get('size'))}"
            f"  iterations {fmt_num(point.get('iterations'))}"
            f" (+{fmt_num(point.get('warmup'))} warm-up, excluded)")
    if point.get("partial"):
        head += "  [PARTIAL: run did not finish]"
    parts = [head]
    rows = []
    cols = ["min", *shown_percentiles(list(PERCENTILES), percentiles), "max", "mean", "stdev"]
    if point.get("latency_ns"):
        rows.append([_latency_label(point)] + [point["latency_ns"].get(k) for k in cols])
    if point.get("rtt_ns"):
        rows.append(["RTT ns"] + [point["rtt_ns"].get(k) for k in cols])
    for key, name, stamps in (*ONEWAY_STAGES, ONEWAY_FROM_SEND):
        if key != "latency_ns" and point.get(key):
            rows.append([f"one-way stage {name} ns ({stamps})"] + [point[key].get(k) for k in cols])
    if rows:
        parts.append(format_table(["figure"] + [percentile_label(k) for k in cols], rows))
    extra = []
    if point.get("gbps") is not None:
        extra.append(["bandwidth Gbit/s", fmt_num(point["gbps"], 3)])
    if point.get("msg_rate") is not None:
        extra.append(["message rate msg/s", fmt_num(point["msg_rate"], 0)])
    if point.get("threshold_us") is not None:
        extra.append([f"one-way above {fmt_num(point['threshold_us'])} us, %",
                      fmt_num(point.get("above_threshold_pct"), 3)])
    if point.get("t_send_absent"):
        extra.append(["t_send (the device's read)", f"absent: {point['t_send_absent']}"])
    elif point.get("time_thread"):
        tt = point["time_thread"]
        extra.append(["t_send: time thread CPU, pass ns (a stamp's resolution), messages it missed",
                      f"{'unpinned' if tt.get('cpu') is None else tt.get('cpu')}, {fmt_num(tt.get('pass_ns'), 0)}, "
                      f"{fmt_num(point.get('t_send_missed'), 0)}"])
    if point.get("experiment") == "stream":
        extra += [["rate Hz (asked / achieved at the sink)",
                   f"{fmt_num(point.get('rate_hz'), 0)} / {fmt_num(point.get('achieved_rate_hz'), 0)}"],
                  ["values per sample", fmt_num(point.get("values"), 0)],
                  ["sent / received", f"{fmt_num(point.get('sent'), 0)} / {fmt_num(point.get('received'), 0)}"],
                  ["missed steps (source late), %", f"{fmt_num(point.get('missed_steps'), 0)}"
                                                    f" ({fmt_num(point.get('missed_pct'), 3)})"],
                  [f"over deadline {fmt_num(point.get('deadline_us'))} us, %",
                   fmt_num(point.get("deadline_miss_pct"), 3)],
                  ["duplicated / reordered", f"{point.get('duplicated')} / {point.get('reordered')}"]]
    if point.get("experiment") == "check":
        sizes = point.get("sizes_checked") or []
        extra += [["result", "PASSED" if point.get("passed") else "FAILED"],
                  ["messages sent / received", f"{point.get('messages')} / {point.get('received')}"],
                  ["sizes checked", f"{fmt_size(sizes[0])} .. {fmt_size(sizes[-1])}" if sizes else "-"],
                  ["order / content / size errors",
                   f"{point.get('order_errors')} / {point.get('content_errors')} / {point.get('size_errors')}"],
                  [f"wake-up after {fmt_num(point.get('wake_after_ms'), 0)} ms idle, ns",
                   fmt_num(point.get("wake_ns"), 0)]]
    if isinstance(point.get("flows"), list):
        extra.append([f"fairness over {len(point['flows'])} flows (Jain's index, 1 = equal)",
                      fmt_num(point.get("jain_index"), 3)])
        extra.append(["flows running at once, share of their span (1 = all the time)", fmt_num(point.get("overlap"), 3)])
    client, server = cpu_sides(point)
    if client or server:
        per = cpu_per([point]).replace("_", " ")
        window = client.get("window") or "?", server.get("window") or "?"
        extra += [[f"CPU per {per} ns (process user+system; client | server)", cpu_cell(point)],
                  [f"CPUs busy, process (client | server; windows {window[0]} | {window[1]})",
                   cpu_cell(point, "utilization", 3)]]
    if point.get("lost") is not None:
        extra.append(["lost messages", fmt_num(point["lost"])])
    if point.get("warmup_lost"):
        extra.append(["lost during warm-up (not in the figures)", fmt_num(point["warmup_lost"])])
    if extra:
        parts.append(format_table(["figure", "value"], extra))
    if isinstance(point.get("flows"), list):
        parts.append(flows_table(point))
    if isinstance(point.get("ops"), list):
        parts.append(ops_table(point))
    return "\n".join(parts)


def ops_table(point: dict) -> str:
    """bw --ops: one row per op (its flows summed) and the ops' sum."""
    rows = [[o.get("op"), fmt_num(o.get("flows"), 0), fmt_num(o.get("iterations"), 0), fmt_num(o.get("gbps"), 3),
             fmt_num(o.get("msg_rate"), 0), o.get("measured_at")] for o in point["ops"] if isinstance(o, dict)]
    rows.append(["sum", fmt_num(len(point.get("flows") or []), 0), fmt_num(point.get("iterations"), 0),
                 fmt_num(point.get("gbps"), 3), fmt_num(point.get("msg_rate"), 0), ""])
    return format_table(["op", "flows", "iterations", "Gbit/s", "msg/s", "measured at"], rows)


def flows_table(point: dict) -> str:
    """--flows: one row per flow (its CPU, counts and rate; lat: its one-way = RTT/2 percentiles)."""
    lat = point.get("experiment") == "lat"
    ops = any(isinstance(f, dict) and "op" in f for f in point["flows"])
    headers = ["flow"] + (["op"] if ops else []) + ["cpu", "iterations", "bytes"] + (
        ["round trips/s", "one-way p50 ns", "one-way p99 ns"] if lat else ["Gbit/s", "msg/s"])
    rows = []
    for f in point["flows"]:
        if not isinstance(f, dict):
            continue
        row = [f.get("flow")] + ([f.get("op")] if ops else []) + [
            "-" if f.get("cpu") is None else f.get("cpu"), fmt_num(f.get("iterations"), 0),
               fmt_num(f.get("bytes"), 0)]
        if lat:
            one_way = f.get("latency_ns") if isinstance(f.get("latency_ns"), dict) else {}
            row += [fmt_num(f.get("round_trips_per_s"), 0), fmt_num(one_way.get("p50")), fmt_num(one_way.get("p99"))]
        else:
            row += [fmt_num(f.get("gbps"), 3), fmt_num(f.get("msg_rate"), 0)]
        rows.append(row)
    return format_table(headers, rows)


def sweep_table(points: list[dict], percentiles: Sequence[float] = ()) -> str:
    """Several sizes of one run: one row per size, every column labelled."""
    exp = points[0].get("experiment")
    shown = shown_percentiles(("p50", "p99"), percentiles)
    headers = ["size", "iterations", "warm-up"]
    has_lat, has_rtt = any(p.get("latency_ns") for p in points), any(p.get("rtt_ns") for p in points)
    if has_lat:
        headers += [f"one-way {percentile_label(k)} ns" + (" (RTT/2)" if exp == "lat" else "") for k in shown]
    if has_rtt:
        headers += [f"RTT {percentile_label(k)} ns" for k in shown] + ["RTT max ns"]
    if any(p.get("gbps") is not None for p in points):
        headers += ["bandwidth Gbit/s", "msg/s"]
    headers += ["lost", f"CPU ns/{cpu_per(points).replace('_', ' ')} client | server"]
    rows = []
    for p in points:
        r = [fmt_size(p.get("size")) + (" (partial)" if p.get("partial") else ""),
             p.get("iterations"), p.get("warmup")]
        if has_lat:
            lat = p.get("latency_ns") or {}
            r += [lat.get(k) for k in shown]
        if has_rtt:
            rtt = p.get("rtt_ns") or {}
            r += [rtt.get(k) for k in shown] + [rtt.get("max")]
        if "msg/s" in headers:
            r += [fmt_num(p.get("gbps"), 3), fmt_num(p.get("msg_rate"), 0)]
        r += [p.get("lost"), cpu_cell(p)]
        rows.append(r)
    title = f"{exp}  {points[0].get('transport', '?')}/{points[0].get('poll', '?')}  size sweep"
    return title + "\n" + format_table(headers, rows)


def stream_table(points: list[dict], percentiles: Sequence[float] = ()) -> str:
    """A stream grid: one row per rate x values point."""
    shown = shown_percentiles(("p50", "p99"), percentiles)
    headers = ["rate Hz", "values", "achieved Hz", *(f"one-way {percentile_label(k)} ns" for k in shown),
               "one-way max ns", "missed %", "over deadline %", "lost", "CPU ns/msg client | server"]
    rows = [[fmt_num(p.get("rate_hz"), 0), p.get("values"), fmt_num(p.get("achieved_rate_hz"), 0),
             *((p.get("latency_ns") or {}).get(k) for k in shown),
             (p.get("latency_ns") or {}).get("max"), fmt_num(p.get("missed_pct"), 3),
             fmt_num(p.get("deadline_miss_pct"), 3), p.get("lost"), cpu_cell(p)] for p in points]
    title = f"stream  {points[0].get('transport', '?')}/{points[0].get('poll', '?')}  (one-way = receive - scheduled time)"
    return title + "\n" + format_table(headers, rows)


# The knee of a load sweep: the first offered rate whose p99 exceeds this
# many times the unloaded p99, or whose achieved rate falls below this
# share of the offered one.
KNEE_P99_FACTOR = 10.0
KNEE_ACHIEVED_SHARE = 0.95


def load_knee(points: list[dict]) -> dict:
    """Where a load sweep's open-loop points stop holding (by offered rate)."""
    open_loop = sorted((p for p in points if p.get("phase") == "open loop" and not p.get("partial")),
                       key=lambda p: p.get("offered_rps") or 0)
    held = None
    for p in open_loop:
        p99 = (p.get("latency_ns") or {}).get("p99")
        unloaded = (p.get("unloaded_ns") or {}).get("p99")
        offered, achieved = p.get("offered_rps") or 0, p.get("achieved_rps") or 0
        reason = None
        if p99 and unloaded and p99 > KNEE_P99_FACTOR * unloaded:
            reason = f"p99 {fmt_num(p99, 0)} ns > {KNEE_P99_FACTOR:g} x unloaded p99 {fmt_num(unloaded, 0)} ns"
        elif offered and achieved < KNEE_ACHIEVED_SHARE * offered:
            reason = f"achieved {fmt_num(achieved, 0)}/s < {KNEE_ACHIEVED_SHARE:.0%} of offered {fmt_num(offered, 0)}/s"
        if reason:
            return {"offered_rps": offered, "reason": reason, "last_held_rps": held}
        held = offered
    return {"offered_rps": None, "reason": "every point held", "last_held_rps": held}


def load_table(points: list[dict], percentiles: Sequence[float] = ()) -> str:
    """A load run: one row per offered rate; latency from the intended send time."""
    shown = shown_percentiles(("p50", "p99", "p999"), percentiles)
    headers = ["offered /s", "achieved /s", "Gbit/s", *(f"{percentile_label(k)} ns" for k in shown), "max ns",
               "unloaded p99 ns", "service p99 ns", "lag p99 ns", "shed", "lost", "outstanding max",
               "CPU ns/req client | server"]
    rows = []
    for p in points:
        lat, svc, lag = (p.get(k) or {} for k in ("latency_ns", "service_latency_ns", "lag_ns"))
        label = fmt_num(p.get("offered_rps"), 0)
        if p.get("phase") == "capacity":
            label = "capacity (closed)"
        elif p.get("clients"):
            label = f"{p['clients']} clients x {p.get('outstanding')} (closed)"
        elif p.get("of_capacity"):
            label += f" ({p['of_capacity']:.0%} of capacity)"
        if p.get("partial"):
            label += " (partial)"
        rows.append([label, fmt_num(p.get("achieved_rps"), 0), fmt_num(p.get("achieved_gbps"), 3),
                     *(lat.get(k) for k in shown), lat.get("max"),
                     (p.get("unloaded_ns") or {}).get("p99"), svc.get("p99"), lag.get("p99"),
                     p.get("shed"), p.get("lost"), p.get("outstanding_max"), cpu_cell(p)])
    first = next((p for p in points if p.get("phase") != "capacity"), points[0])
    title = (f"load  {first.get('transport', '?')}/{first.get('poll', '?')}  {first.get('arrivals', '')} arrivals, "
             f"mean request {fmt_num(first.get('mean_req_bytes'), 0)} B  "
             "(latency = reply - intended send time, round trip; percentiles of a 3-digit histogram)")
    out = title + "\n" + format_table(headers, rows)
    # Several server threads: how the requests spread over them, per point.
    spread = [(row[0], (p.get("server") or {}).get("requests_per_thread")) for row, p in zip(rows, points)]
    spread = [(label, per) for label, per in spread if isinstance(per, list) and len(per) > 1]
    if spread:
        how = "every thread reading every connection" if first.get("server_rx") == "shared" else "each its own connections"
        out += (f"\nrequests each server thread answered ({how}): "
                + "; ".join(f"{label}: {', '.join(fmt_num(n, 0) for n in per)}" for label, per in spread))
    knee = points[-1].get("knee")
    if knee and len(points) > 1:
        where = f"at {fmt_num(knee['offered_rps'], 0)}/s: {knee['reason']}" if knee.get("offered_rps") else knee["reason"]
        out += f"\nknee: {where}"
    return out


def _stat_row(label: str, summary: Optional[dict]) -> list:
    return [label] + [(summary or {}).get(k) for k in STAT_KEYS]


def setup_table(points: list[dict], limits: Optional[dict] = None) -> str:
    """A setup run: the connect point's figures (with the machine's bare connect/accept floor when the run
    recorded its limits), then one row per registration size."""
    first = points[0]
    parts = [f"setup  {first.get('transport', '?')}  warm-up repetitions excluded"]
    for p in (q for q in points if q.get("what") == "connect"):
        parts.append(f"connect: {fmt_num(p.get('iterations'))} repetitions (+{fmt_num(p.get('warmup'))} warm-up), "
                     "timed on the client from constructing the transport to its connect() returned"
                     + ("  [PARTIAL]" if p.get("partial") else ""))
        rows = [_stat_row("connect ns", p.get("connect_ns"))]
        rows += [_stat_row(f"  step: {name} ns", s) for name, s in (p.get("phases_ns") or {}).items()]
        rows += [_stat_row("teardown ns (destroying it)", p.get("teardown_ns")),
                 _stat_row("control-channel round trip ns", p.get("control_rtt_ns"))]
        if isinstance((limits or {}).get("connect_floor_ns"), dict):
            rows.append(_stat_row("floor: bare loopback connect/accept ns (limits)", limits["connect_floor_ns"]))
        parts.append(format_table(["figure"] + [STAT_LABELS[k] for k in STAT_KEYS], rows))
        parts.append(f"covers: {p.get('covers')}")
        if p.get("registration") == "not applicable":
            parts.append("memory registration: not applicable (the transport registers no memory)")
    mr = [p for p in points if p.get("what") == "mr"]
    if mr:
        parts.append(f"memory registration ({mr[0].get('registration')}), client, ns; base pages vs huge pages")
        rows = []
        for p in mr:
            reg, dereg = p.get("register_ns") or {}, p.get("deregister_ns") or {}
            hreg, hdereg = p.get("huge_register_ns") or {}, p.get("huge_deregister_ns") or {}
            rows.append([fmt_size(p.get("registered_bytes")) + (" (partial)" if p.get("partial") else ""),
                         p.get("iterations"), reg.get("p50"), reg.get("p99"), dereg.get("p50"),
                         p.get("huge_pages") or "none", hreg.get("p50"), hreg.get("p99"), hdereg.get("p50")])
        parts.append(format_table(["size", "reps", "register p50", "register p99", "dereg p50", "huge pages",
                                   "huge register p50", "huge register p99", "huge dereg p50"], rows))
        reasons = {p["huge_pages_reason"] for p in mr if p.get("huge_pages_reason")}
        parts += [f"no huge pages: {r}" for r in sorted(reasons)]
        refused = {p.get(k) for p in mr for k in ("refused", "huge_refused") if p.get(k)}
        parts += [f"refused: {r}" for r in sorted(refused)]
    return "\n".join(parts)


def clock_line(points: list[dict]) -> str:
    """Where the other end's clock was probed: the last point's fit, the one over the most probes."""
    probed = [p["clock"] for p in points if (p.get("clock") or {}).get("method") == "probe"]
    if not probed:
        return ""
    c = probed[-1]
    return (f"clock: remote - local offset {fmt_num(c.get('offset_ns'))} ns, "
            f"drift {fmt_num(c.get('drift_ppm'), 3)} ppm,"
            f" error bound +-{fmt_num(c.get('error_bound_ns'))} ns ({fmt_num(c.get('probes'), 0)} probes"
            f"{' over ' + c['path'] if c.get('path') else ''}; a path asymmetry is invisible to probes)")


def hiccups_words(h: dict) -> str:
    """limits' hiccup detector in a few words: the gaps over its threshold, the longest, those on every CPU at once."""
    words = (f"hiccups over {fmt_num(h.get('threshold_us'), 0)} us in {fmt_num(h.get('seconds'), 1)} s on CPUs "
             f"{','.join(str(c) for c in h.get('cpus') or [])}: {fmt_num(h.get('count'))}")
    if h.get("count"):
        words += f", longest {fmt_num(h.get('longest_us'))} us"
    return words + all_cpus_words(len(h.get("all_cpus_gaps") or []), bool(h.get("fifo")))


def all_cpus_words(every: int, fifo: bool) -> str:
    """Gaps on every CPU at once: the SMI signature where the readers ran at real-time priority; at normal
    priority the scheduler preempting every reader at once looks the same, so the words say it cannot tell."""
    if not every:
        return ""
    return f", {every:,} on every CPU at once " + ("(the SMI signature)" if fifo else
                                                   "(readers at normal priority: an SMI or preemption, cannot tell)")


def hiccups_table(h: dict) -> str:
    """limits' hiccup detector: its words, then a row per CPU (gaps, longest, their total)."""
    rows = [[str(c.get("cpu")), c.get("count"), c.get("longest_us"), c.get("total_us")] for c in h.get("per_cpu") or []]
    return hiccups_words(h) + "\n" + format_table(["CPU", "gaps", "longest us", "total us"], rows)


def granted(events: Iterable[dict]) -> dict:
    """What the transport was granted: the engine's "transport" line among a run's events ({} if none)."""
    return next((e.get("granted") or {} for e in events if isinstance(e, dict) and e.get("type") == "transport"
                 and isinstance(e.get("granted"), dict)), {})


def crowded_cpus(spinning: int, usable: Optional[int]) -> Optional[str]:
    """Busy-polling threads running at once on one machine with no CPU to spare: every other task there (and the
    kernel's own work) takes turns with them. The warning, or None where a CPU is left (or `usable` is unknown).
    One run's client and server are two such threads (the report); watch counts its pairs' ends at once."""
    if usable is None or spinning < usable:
        return None
    return (f"{spinning} busy-polling threads at once on a machine with {usable} usable CPUs: every other task "
            "on the machine (and the kernel's own work) runs on theirs, and the tails and max are the scheduler's, "
            "not the transport's")


def io_thread_note(granted_: dict) -> Optional[str]:
    """Where a messaging library's own I/O threads shared a CPU with a busy loop (granted.io_cpus, --io-cpu):
    the run's latency tail then includes the two taking turns on that CPU, which the library alone would not
    show. None where they had a CPU of their own, or the run records nothing of them."""
    io = granted_.get("io_cpus")
    if not isinstance(io, dict):
        return None
    shared = []
    for end in ("client", "server"):
        side = io.get(end)
        if isinstance(side, dict) and side.get("shares_busy_cpu") is True:
            cpus = [c for c in side.get("cpus") or [] if c in (side.get("busy_cpus") or [])]
            shared.append(f"{end} on CPU {','.join(str(c) for c in cpus)}")
    if not shared:
        return None
    asked = str(io.get("asked"))
    why = ("no CPU was spare for it (--io-cpu auto: give the run a CPU no busy loop uses)" if asked == "auto"
           else f"--io-cpu {asked} put it there")
    return (f"note: the tail includes the library's I/O thread sharing the busy loop's CPU ({'; '.join(shared)}), "
            f"not the library alone: {why}")


def run_report(points: list[dict], percentiles: Sequence[float] = (), limits: Optional[dict] = None,
               granted_: Optional[dict] = None) -> str:
    """The terminal tables of a run; `percentiles`: its --percentiles, shown
    instead of each table's own; `limits`: the machine limits it recorded, if any (its hiccups shown where
    there were some);
    `granted_`: what the transport was granted (its I/O thread note)."""
    if not points:
        return "no points measured"
    note = io_thread_note(granted_ or {})
    table = _run_tables(points, percentiles, limits)
    hiccups = (limits or {}).get("hiccups")
    if isinstance(hiccups, dict) and hiccups.get("count"):
        table += "\n" + hiccups_table(hiccups)
    return table + ("\n" + note if note else "")


def _run_tables(points: list[dict], percentiles: Sequence[float], limits: Optional[dict]) -> str:
    if points[0].get("experiment") == "load":
        return load_table(points, percentiles)
    if points[0].get("experiment") == "setup":
        return setup_table(points, limits)
    if len(points) == 1:
        table = point_block(points[0], percentiles)
    elif points[0].get("experiment") == "stream":
        table = stream_table(points, percentiles)
    else:
        table = sweep_table(points, percentiles)
        for p in points:
            if isinstance(p.get("flows"), list):
                table += f"\nflows at {fmt_size(p.get('size'))} (Jain's index {fmt_num(p.get('jain_index'), 3)}):\n" \
                    + flows_table(p)
            if isinstance(p.get("ops"), list):
                table += f"\nops at {fmt_size(p.get('size'))}:\n" + ops_table(p)
    clock = clock_line(points)
    return table + ("\n" + clock if clock else "")
