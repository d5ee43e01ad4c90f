"""A results folder for report tests, written the way fabmeter writes one.

Synthetic but schema-true (run.json as results.RunRecord writes it, raw
samples as 1-D float64 .npy in ns): lat and oneway runs, lat and bw size
sweeps, a stream rate x values grid on two transports (with the stream
point keys), two load sweeps (the load point keys, histogram samples: no
.npy), a failed run and a peers.json, so every section of the report has
something to draw. Deterministic: a fixed random seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from fabmeter import envinfo
from fabmeter.mesh import outliers as mesh_outliers, output as mesh_output, patterns as mesh_patterns

STAT_KEYS = ("min", "p50", "p90", "p99", "p999", "max", "mean", "stdev")

# Figures the report must draw from this fixture:
#   histograms, one per run with samples: lat-shm, lat-tcp-sweep, lat-shm-sweep,
#     oneway-shm, oneway-tcp, oneway-verbs-inline-0/188, stream-shm, stream-tcp  9
#   CDF overlays: lat 32 B (3 runs), oneway 32 B (4), stream 100 kHz x 1 (2) 3
#   one-way stages: oneway-shm (post), verbs inline 0 beside 188 (post,
#     completion); oneway-tcp has no stages (a run.json from before them)     2
#   latency vs size (lat; the oneway runs have one size each)               1
#   bandwidth and message rate vs size                                      1
#   stream latency vs rate (one figure, a panel per values)                 1
#   stream heatmaps, one per transport                                      2
#   load, per workload (w1, w2): latency vs offered rate, achieved vs
#     offered, slowdown vs size                                             6
#   load: completions per poll, one per run                                 2
#   bw: throughput over time per connection (the 1 KiB and 64 KiB points)    1
#   mesh: p50 and p99 matrices of the oneway mesh.json                       2
#   mesh bw all-to-one chaotic: the Gbit/s matrix, throughput over time      2
#   the summary figure at the top                                            1
EXPECTED_FIGURES = 33
LOAD_FIGURE_ALTS = ("load latency vs offered rate w1", "load latency vs offered rate w2",
                    "load achieved vs offered w1", "load achieved vs offered w2", "load slowdown w1",
                    "load slowdown w2", "load completions per poll shm busy w2",
                    "load completions per poll tcp busy w1")
MESH_FIGURE_ALTS = ("mesh oneway udp all-to-all scheduled p50", "mesh oneway udp all-to-all scheduled p99",
                    "mesh bw tcp all-to-one chaotic gbps")
THROUGHPUT_FIGURE_ALTS = ("bw throughput over time", "mesh bw tcp all-to-one chaotic throughput over time")


def _series(rng, msg_rate: float, bins: int = 60, bin_ns: float = 1e6, swing: float = 0.5) -> dict:
    """One direction's throughput_series: arrivals per bin swinging by +-swing around msg_rate (the uDAPL
    study's 1 KiB connections), the last bin cut short by the end of the run."""
    per_bin = msg_rate * bin_ns / 1e9 * (1 + swing * np.sin(np.arange(bins) / 4 + rng.uniform(0, 6)))
    msgs = [int(x) for x in per_bin]
    msgs[-1] //= 3
    return {"bin_ns": bin_ns, "msgs": msgs}


def _summary(a: np.ndarray) -> dict:
    out = {"min": float(a.min())}
    for k, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9)):
        out[k] = float(np.percentile(a, q))
    out.update(max=float(a.max()), mean=float(a.mean()), stdev=float(a.std()))
    return {k: out[k] for k in STAT_KEYS}


# Part of the engine's typed params (a real run.json has every option): the
# defaults of the keys the report reads.
PARAMS = {"transport": "shm", "poll": "busy", "size": 32, "all": False, "max_size": 4 << 20, "iters": "auto",
          "service": "rc", "op": "send", "inline": 0, "signal_every": 0, "provider": "", "ep": "msg",
          "bidir": False, "timer": "tsc"}


def _run_doc(experiment: str, options: dict, points: list, status: str = "ok", message: str = "") -> dict:
    return {"fabmeter_version": "0.1.0", "command": ["fabmeter", experiment], "started_at": "2026-01-01T00:00:00+00:00",
            "config": {"experiment": experiment, "mode": "local", "server": None, "cpus": [0, 1],
                       "engine_version": "0.1.0", "params": {"experiment": experiment, **PARAMS, **options}},
            "environment": envinfo.collect(), "points": points, "engine_events": [], "status": status,
            "message": message, "exit_code": 0 if status == "ok" else 3,
            "finished_at": "2026-01-01T00:00:01+00:00"}


def _write(folder: Path, doc: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps(doc, indent=2))


def _latency_point(folder: Path, rng, experiment: str, transport: str, poll: str, size: int,
                   median_ns: float, n: int = 4000, outliers: int = 5) -> dict:
    one_way = rng.lognormal(np.log(median_ns), 0.25, n)
    one_way[rng.integers(0, n, outliers)] *= 40   # a tail to draw
    p = {"type": "point", "experiment": experiment, "transport": transport, "poll": poll, "size": size,
         "warmup": 100, "partial": False, "iterations": n, "lost": 0}
    name = f"{experiment}-{transport}-{poll}-{size}B"
    if experiment == "lat":
        rtt = one_way * 2
        np.save(folder / f"{name}.rtt_ns.npy", rtt)
        p.update(latency_kind="rtt/2", latency_ns=_summary(rtt / 2), rtt_ns=_summary(rtt),
                 samples={"rtt_ns": f"{name}.rtt_ns.npy"})
    else:
        np.save(folder / f"{name}.latency_ns.npy", one_way)
        p.update(latency_kind="one-way", latency_ns=_summary(one_way), threshold_us=median_ns * 1.5 / 1e3,
                 above_threshold_pct=float(100.0 * np.mean(one_way > median_ns * 1.5)),
                 samples={"latency_ns": f"{name}.latency_ns.npy"})
    return p


def _add_stages(folder: Path, rng, p: dict, one_way: np.ndarray, completions: bool,
                t_send: Optional[bool] = None) -> None:
    """oneway's post stage (and completion, where the transport reports it), as the engine adds them;
    t_send True: the time thread's send stage and t_recv - t_send; False: absent, as for inline sends."""
    name = p["samples"]["latency_ns"].removesuffix(".latency_ns.npy")
    post = one_way * rng.uniform(0.05, 0.4, one_way.size)
    stages = {"post_ns": post}
    if completions:
        stages["completion_ns"] = one_way * rng.uniform(1.1, 1.6, one_way.size)
    if t_send:   # the thesis' 42 %: t_send - t_subm about 0.42 of t_recv - t_subm
        send = one_way * rng.uniform(0.35, 0.49, one_way.size)
        stages.update(send_ns=send, latency_send_ns=one_way - send)
        p.update(time_thread={"cpu": 2, "pass_ns": 31.0}, t_send_missed=0)
    elif t_send is False:
        p.update(send_ns=None, latency_send_ns=None,
                 t_send_absent="inline sends: the payload travels in the work request, the HCA reads no send "
                               "buffer after the post")
    for key, a in stages.items():
        np.save(folder / f"{name}.{key}.npy", a)
        p[key] = _summary(a)
        p["samples"][key] = f"{name}.{key}.npy"


def _stream_point(folder: Path, rng, transport: str, rate: int, values: int, base_ns: float) -> dict:
    n = min(2000, rate)
    lat = rng.lognormal(np.log(base_ns * (1 + values / 32) * (1 + 1000 / rate)), 0.3, n)
    missed = float(min(60.0, 0.2 * rate / 1000 * values / 8))
    name = f"stream-{transport}-busy-{24 + 8 * values}B-{rate}Hz"
    np.save(folder / f"{name}.latency_ns.npy", lat)
    deadline_us = 1e6 / rate
    return {"type": "point", "experiment": "stream", "transport": transport, "poll": "busy",
            "size": 24 + 8 * values, "warmup": 100, "partial": False, "rate_hz": rate, "values": values,
            "iterations": n, "achieved_rate_hz": rate * (1 - missed / 100), "sent": n, "received": n,
            "missed_steps": int(n * missed / 100), "missed_pct": missed, "lost": 0, "duplicated": 0,
            "reordered": 0, "deadline_us": deadline_us,
            "deadline_miss_pct": float(100.0 * np.mean(lat > deadline_us * 1e3)),
            "latency_kind": "one-way (receive - scheduled step time)", "latency_ns": _summary(lat),
            "timer": "tsc", "sink": {"kind": "memory"}, "samples": {"latency_ns": f"{name}.latency_ns.npy"}}


def _load_points(transport: str, rates: list[int], capacity: float, base_ns: float) -> list[dict]:
    """A --of-capacity sweep as the engine reports it: the closed-loop capacity point, then one open-loop point per
    rate, queueing growing as the rate nears capacity; the knee on the last point."""
    buckets = [(1, 64), (65, 512), (513, 4096), (4097, 65536)]
    points = []
    for rate in [None] + rates:
        rho = min(0.97, (rate or capacity) / capacity)
        lat = {k: base_ns * f / (1 - rho) for k, f in (("min", 0.5), ("p50", 1.0), ("p90", 1.8), ("p99", 4.0),
                                                        ("p999", 9.0), ("max", 30.0), ("mean", 1.4), ("stdev", 2.0))}
        slowdown = [{"size_lo": lo, "size_hi": hi, "count": 1000 // (i + 1), "p50": (1 + i * 0.3) / (1 - rho),
                     "p99": 4 * (1 + i * 0.3) / (1 - rho), "latency_p50_ns": 0.0, "latency_p99_ns": 0.0,
                     "unloaded_p50_ns": base_ns * (1 + i), "unloaded_count": 50} for i, (lo, hi) in enumerate(buckets)]
        per_poll = {str(k) + "+" * (k == 8): int(1e5 * rho ** (k - 1) * (1 - rho) + 1) for k in range(1, 9)}
        achieved = capacity if rate is None else min(rate, capacity * 0.97)
        points.append({"type": "point", "experiment": "load", "transport": transport, "poll": "busy", "size": 32,
                       "warmup": 1000, "partial": False, "iterations": 10000, "latency_kind": "rtt from the intended "
                       "send time", "phase": "capacity" if rate is None else "open loop",
                       "arrivals": "closed loop" if rate is None else "poisson", "offered_rps": rate or capacity,
                       "of_capacity": None, "achieved_rps": achieved, "achieved_gbps": achieved * 2000 * 8 / 1e9,
                       "latency_ns": lat, "service_latency_ns": lat, "lag_ns": {k: 50.0 for k in STAT_KEYS},
                       "unloaded_ns": {k: base_ns for k in STAT_KEYS}, "shed": 0, "lost": 0, "outstanding_max": 9,
                       "slowdown": slowdown,
                       "server": {"requests": 10000, "malformed": 0, "empty_polls": 123456,
                                  "completions_per_poll": per_poll, "mean_per_poll": 1.0 / (1 - rho)},
                       "samples_kind": "hist"})
    points[-1]["knee"] = {"offered_rps": rates[-1], "reason": "p99 > 10 x unloaded p99", "last_held_rps": rates[-2]}
    return points


def _mesh(folder: Path, rng) -> None:
    """A 4-host oneway mesh.json as `fabmeter mesh --out` writes it (mesh/output.py's record), one pair failed."""
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    pairs = []
    for src, dst in mesh_patterns.pairs("all-to-all", 4):
        if (src, dst) == (3, 1):
            pairs.append(mesh_output.failed_pair(src, dst, "rank 3 (10.0.0.4) lost: silent for 6 s"))
            continue
        a = rng.lognormal(np.log(40000.0 + 60000.0 * ((src, dst) in ((0, 2), (2, 0)))), 0.1, 1000)  # a slow link
        pairs.append({"type": "pair", "src": src, "dst": dst, "status": "ok", "message": "", "latency_ns": _summary(a),
                      "latency_kind": "one-way", "gbps": None, "lost": 0,
                      "clock": {"method": "probe", "offset_ns": 120.0, "drift_ppm": 0.4, "error_bound_ns": 900.0,
                                "probes": 640}})
    summary = {"type": "mesh", "experiment": "oneway", "transport": "udp", "pattern": "all-to-all",
               "schedule": "scheduled", "hosts": hosts, "pairs": len(pairs), "failed": 1,
               "rounds": [{"round": i, "pairs": [], "start_skew_ns": 500000 + i, "lead_ns": 10**9,
                           "start_late_ns": {"n": 4, "p50": 20000 + i, "p99": 498000, "max": 498000},
                           "control": {"plan_ns": 300000, "round_ns": 2 * 10**9, "frames": 17, "bytes": 9000}}
                          for i in range(3)],
               "round_start_skew_ns": 500002, "start_clock_error_ns": 80000,
               "start_skew_ns": {"n": 3, "p50": 500001, "p99": 500002, "max": 500002},
               "start_late_ns": {"n": 12, "p50": 20001, "p99": 498000, "max": 498000}}
    # The slow link both ways is flagged; host 3's interface runs another MTU.
    envs = [{**envinfo.valid_identity({}), "collected_by": "rank", "kernel_release": "6.1.0-18-amd64",
             "mtu": 1500 if r == 3 else 9000} for r in range(4)]
    summary.update(outliers=mesh_outliers.find("oneway", pairs, hosts),
                   drift=mesh_outliers.drift(hosts, envs, envinfo.IDENTITY_FIELDS), environments=envs)
    folder.mkdir(parents=True, exist_ok=True)
    doc = mesh_output.record(summary, pairs, "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:09+00:00",
                             ["fabmeter", "mesh"], {"transport": "udp"}, envinfo.collect())
    (folder / mesh_output.MESH_FILE).write_text(json.dumps(doc, indent=2))


def _mesh_bw(folder: Path, rng) -> None:
    """A 4-host bw mesh, all-to-one and chaotic: three senders share rank 0, each with its throughput_series."""
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    pairs = []
    for src, dst in mesh_patterns.pairs("all-to-one", 4):
        series = _series(rng, 1e5 * src)
        gbps = sum(series["msgs"][:-1]) * 1024 * 8 / (len(series["msgs"][:-1]) * series["bin_ns"])
        pairs.append({"type": "pair", "src": src, "dst": dst, "status": "ok", "message": "", "latency_ns": None,
                      "latency_kind": None, "gbps": gbps, "lost": 0, "size": 1024,
                      "throughput_series": {"c2s": series}, "clock": None})
    summary = {"type": "mesh", "experiment": "bw", "transport": "tcp", "pattern": "all-to-one",
               "schedule": "chaotic", "hosts": hosts, "pairs": len(pairs), "failed": 0,
               "rounds": [{"round": 0, "pairs": [[p["src"], p["dst"]] for p in pairs], "start_skew_ns": 400000}],
               "round_start_skew_ns": 400000, "start_clock_error_ns": 80000}
    folder.mkdir(parents=True, exist_ok=True)
    doc = mesh_output.record(summary, pairs, "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:03+00:00",
                             ["fabmeter", "mesh"], {"transport": "tcp", "size": 1024}, envinfo.collect())
    (folder / mesh_output.MESH_FILE).write_text(json.dumps(doc, indent=2))


def build(root: Path) -> Path:
    rng = np.random.default_rng(20260101)
    sizes = [1 << i for i in range(13)]          # 1 B .. 4 KiB
    # oneway tcp event: 3 % of the messages 40 x slower, a heavy tail (log-axis histogram).
    for experiment, transport, poll, median, outliers in (("lat", "shm", "busy", 150.0, 5),
                                                          ("oneway", "shm", "busy", 300.0, 5),
                                                          ("oneway", "tcp", "event", 9000.0, 120)):
        folder = root / f"{experiment}-{transport}-{poll}"
        folder.mkdir(parents=True, exist_ok=True)
        p = _latency_point(folder, rng, experiment, transport, poll, 32, median, outliers=outliers)
        if (experiment, transport) == ("oneway", "shm"):
            _add_stages(folder, rng, p, np.load(folder / p["samples"]["latency_ns"]), completions=False)
        _write(folder, _run_doc(experiment, {"transport": transport, "poll": poll, "size": 32}, [p]))
    # The thesis' figure: verbs RC, the same run with and without --inline.
    for inline, median in ((0, 1264.0), (188, 906.0)):
        folder = root / f"oneway-verbs-busy-inline-{inline}"
        folder.mkdir(parents=True, exist_ok=True)
        p = _latency_point(folder, rng, "oneway", "verbs", "busy", 32, median)
        _add_stages(folder, rng, p, np.load(folder / p["samples"]["latency_ns"]), completions=True,
                    t_send=not inline)
        _write(folder, _run_doc("oneway", {"transport": "verbs", "poll": "busy", "size": 32, "inline": inline}, [p]))
    for transport, base in (("tcp", 3000.0), ("shm", 140.0)):
        folder = root / f"lat-{transport}-busy-sweep"
        folder.mkdir(parents=True, exist_ok=True)
        pts = [_latency_point(folder, rng, "lat", transport, "busy", s, base + s * 0.4, n=2000) for s in sizes]
        _write(folder, _run_doc("lat", {"transport": transport, "poll": "busy", "all": True, "max_size": 4096}, pts))

    folder = root / "bw-shm-busy-sweep"
    bw = []
    for s in [1 << i for i in range(17)]:        # 1 B .. 64 KiB
        rate = 5e7 / (1 + s / 512)
        bw.append({"type": "point", "experiment": "bw", "transport": "shm", "poll": "busy", "size": s,
                   "warmup": 1000, "partial": False, "iterations": 100000, "lost": 0,
                   "gbps": rate * s * 8 / 1e9, "msg_rate": rate})
        if s in (1024, 65536):
            bw[-1]["throughput_series"] = {"c2s": _series(rng, rate)}
    _write(folder, _run_doc("bw", {"transport": "shm", "poll": "busy", "all": True, "max_size": 65536}, bw))

    for transport, base in (("shm", 250.0), ("tcp", 6000.0)):
        folder = root / "stream" / f"stream-{transport}-busy"
        folder.mkdir(parents=True, exist_ok=True)
        pts = [_stream_point(folder, rng, transport, r, v, base) for r in (100, 1000, 10000, 100000)
               for v in (1, 8, 64)]
        _write(folder, _run_doc("stream", {"transport": transport, "poll": "busy", "rate": [100, 1000, 10000, 100000],
                                           "values": [1, 8, 64]}, pts))

    for transport, workload, rates, capacity, base in (("shm", "w2", [100000, 300000, 600000], 800000.0, 900.0),
                                                       ("tcp", "w1", [10000, 30000, 60000], 80000.0, 20000.0)):
        _write(root / "load" / f"load-{transport}-busy-{workload}",
               _run_doc("load", {"transport": transport, "poll": "busy", "workload": workload, "of_capacity": [],
                                 "rate": rates}, _load_points(transport, rates, capacity, base)))

    _write(root / "lat-udp-busy-failed", _run_doc("lat", {"transport": "udp", "poll": "busy"}, [], "failed",
                                                  "the server engine exited and the client did not notice in time"))
    _mesh(root / "mesh-udp-all-to-all", rng)
    _mesh_bw(root / "mesh-tcp-bw-all-to-one", rng)
    peers = root / "peers"
    peers.mkdir(parents=True, exist_ok=True)
    (peers / "peers.json").write_text(json.dumps({"points": [
        {"peer": True, "tool": "sockperf", "experiment": "lat", "transport": "tcp", "size": 32,
         "latency_kind": "rtt/2", "latency_ns": {"p50": 29000.0, "p99": 41000.0, "max": 120000.0},
         "statistic_note": "sockperf ping-pong, blocking sockets; percentiles as sockperf reports them"},
        {"type": "point", "peer": True, "tool": "qperf", "experiment": "lat", "transport": "udp", "size": 32,
         "latency_kind": "rtt", "rtt_ns": {"p50": 51000.0}, "statistic_note": "qperf: mean round trip only"},
        {"type": "skipped", "peer": True, "tool": "ucx_perftest", "experiment": "lat", "transport": "shm",
         "reason": "not installed (apt-get install ucx-utils)"},
    ]}, indent=2))
    return root


# Rows of a `fabmeter bench` bench.json (bench.py's record): a met target, a missed one, a floor without target,
# a higher-is-better row and one skipped.
BENCH_ROWS = [("shm busy / two-line hand-over", 1.4, "-", None), ("tcp event / sockperf tcp", 0.93, "<= 1.10x", True),
              ("udp event / sockperf udp", 1.32, "<= 1.10x", False), ("tcp bw 64 KiB / iperf3", 0.97, ">= 0.90x", True),
              ("measuring cost", 0.6, "<= 1.00x", True), ("zmq busy / raw zmq loop", None, "<= 1.10x", None)]


def bench(root: Path) -> Path:
    """A bench folder: bench.json, its runs under runs/ (lat over shm, tcp and udp, a bw run) and peers.json."""
    rng = np.random.default_rng(7)
    for n, (transport, median) in enumerate((("shm", 200.0), ("tcp", 9000.0), ("udp", 8000.0))):
        folder = root / "runs" / f"{n:03d}-lat-{transport}-busy"
        folder.mkdir(parents=True)
        _write(folder, _run_doc("lat", {"transport": transport, "poll": "busy"},
                                [_latency_point(folder, rng, "lat", transport, "busy", 32, median, n=1000)]))
    _write(root / "runs" / "004-bw-tcp", _run_doc("bw", {"transport": "tcp", "size": 65536}, [
        {"type": "point", "experiment": "bw", "transport": "tcp", "poll": "busy", "size": 65536, "warmup": 100,
         "partial": False, "iterations": 20000, "lost": 0, "gbps": 21.0, "msg_rate": 40000.0}]))
    rows = [{"row": name, "figure": "p50 ns", "versus": "peer", "fabmeter": [ratio or 0], "other": [1.0],
             "fabmeter_median": ratio, "other_median": 1.0, "ratio": ratio, "target": target, "met": met,
             "skipped": None if ratio else "zmq is not built into this engine"} for name, ratio, target, met in BENCH_ROWS]
    (root / "bench.json").write_text(json.dumps({"status": "ok", "rounds": 1, "rows": rows,
                                                 "environment": envinfo.collect()}))
    (root / "peers.json").write_text(json.dumps({"points": [
        {"peer": True, "tool": "sockperf", "experiment": "lat", "transport": "tcp", "size": 32,
         "latency_kind": "rtt/2", "latency_ns": {"p50": 9500.0, "p99": 20000.0}}]}))
    return root
