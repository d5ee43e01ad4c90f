"""`fabmeter peers`: the established tools beside fabmeter, on this host.

Each selected tool measures what it can among the chosen transports
(loopback, or to --server HOST): sockperf lat and load (under-load at --rate) tcp/udp, qperf
lat tcp/udp and bw tcp, iperf3 bw tcp, ucx_perftest lat and bw over shm and tcp, fi_pingpong lat over each
transport's libfabric provider (tcp msg, udp dgram, shm rdm); over verbs (RDMA devices: --transports
verbs), perftest's ib_{send,write,read,atomic}_{lat,bw} and qperf's RDMA tests.
With --server HOST[:PORT], each tool's server side runs on that host, started
by its `fabmeter serve` (docs/security.md: what such a server will start),
and fabmeter's own runs use that serve too. fabmeter
itself (tool "fabmeter") runs lat for every transport x poll (busy, event),
bw over tcp and load over tcp and udp (busy, fixed arrivals at --rate), with
the same sizes, iterations, rate and CPUs. One table, every row saying
which statistic it is; notes where a tool's statistic differs.

--out DIR writes DIR/peers.json (the peer points, and a record for every
tool or case skipped or failed), DIR/peers-raw/ (each tool's output as
printed) and DIR/fabmeter/<experiment>-<transport>-<poll>/run.json for
fabmeter's own runs, so `fabmeter report DIR` shows them side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Iterator, Optional

from fabmeter import __version__, analysis, command_options, envinfo, repeat, run
from fabmeter.command_options import CommandOption, Found
from fabmeter.cpus import parse_cpus
from fabmeter.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, FabmeterError
from fabmeter.options import parse_count, parse_size
from fabmeter.peers.base import PeerRun, Rdma
from fabmeter.peers.registry import PEERS
from fabmeter.recorded import equivalent_command, run_recorded
from fabmeter.results import now_iso, out_folder, write_json
from fabmeter.terminal import shown, shown_lines

TOOLS = ("fabmeter", *PEERS)
EXPERIMENTS = {"lat": 0, "load": 1, "bw": 2}   # the table's order
TRANSPORTS = ("tcp", "udp", "shm", "verbs")
DEFAULT_TRANSPORTS = PeerRun.transports
FABMETER_RUNS = ([("lat", t, poll) for t in TRANSPORTS for poll in ("busy", "event")] + [("bw", "tcp", "busy")]
                 + [("load", t, "busy") for t in ("tcp", "udp")])
FABMETER_NOTE = {
    "lat": "fabmeter lat: percentiles (linear interpolation) and mean over every sample of RTT/2, warm-up excluded",
    "bw": "fabmeter bw: messages received after warm-up / the receiver's time from the first to the last of them",
    "load": "fabmeter load, fixed arrivals at --rate: the RTT from the intended send time (from the actual send: "
            "service_latency_ns, sockperf under-load's definition); nearest-rank percentiles of a 3-digit "
            "histogram over every request after warm-up",
}


def byte_size(text: str) -> int:
    """A byte count that may be 0 (--inline), K/M/G suffixes as fabmeter's sizes."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def size(text: str) -> int:
    """A message size in bytes, K/M/G suffixes as fabmeter's -s; at least 1."""
    n = byte_size(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a message size of at least 1 byte, got '{text}'")
    return n


def count(text: str) -> int:
    """An iteration count or rate, decimal suffixes as fabmeter's -n (10k = 10,000)."""
    try:
        return parse_count(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


OPTIONS = (
    CommandOption("tools", "comma-separated, from: %(default)s (default: all)", metavar="LIST",
                  default=",".join(TOOLS)),
    CommandOption("transports", f"comma-separated, from: {','.join(TRANSPORTS)} (default: %(default)s; verbs needs "
                                "RDMA devices)", metavar="LIST", default=",".join(DEFAULT_TRANSPORTS)),
    CommandOption("size", "latency message size, K/M/G suffixes as fabmeter's -s (default: %(default)s)", metavar="N",
                  type=size, default=PeerRun.size, short="s"),
    CommandOption("bw-size", "bandwidth message size (default: %(default)s)", metavar="N", type=size,
                  default=PeerRun.bw_size),
    CommandOption("iters", "iterations, for fabmeter, iperf3, ucx_perftest and perftest's latency tools (default: "
                           "%(default)s)", metavar="N", type=count, default=PeerRun.iters, short="n"),
    CommandOption("duration", "seconds, for the tools that only stop on a timer: sockperf, qperf, perftest's "
                              "bandwidth tools; whole seconds, rounded up; fabmeter load runs this long (default: "
                              "%(default)s)", metavar="S", type=float, default=PeerRun.duration),
    CommandOption("rate", "load: requests per second, as fabmeter load's --rate (sockperf under-load --mps) "
                          "(default: %(default)s)", metavar="HZ", type=count, default=PeerRun.rate),
    CommandOption("cpus", "client on CPU A, server on CPU B (default: the first two CPUs; with --server, B is the "
                          "serve's own --cpu and A alone counts)", metavar="A,B"),
    CommandOption("server", "run each tool's server side on HOST, started by the `fabmeter serve` there (which needs "
                            "a token); the clients here connect to HOST", metavar="HOST[:PORT]"),
    CommandOption("token-file", "with --server: the serve's shared secret (default: $FABMETER_TOKEN)", metavar="F"),
    CommandOption("device", "verbs: the client's RDMA device (perftest -d)", metavar="DEV"),
    CommandOption("server-device", "verbs: the server's RDMA device (perftest -d there)", metavar="DEV"),
    CommandOption("gid-index", "verbs: the GID index (which of the port's global identifiers, its addresses) on "
                               "both sides (perftest -x)", metavar="N", type=int),
    CommandOption("service", "verbs: perftest's and fabmeter's service type, rc, uc or ud (perftest -c; qperf's "
                             "RDMA tests name their own and run only with every verbs knob at its default) "
                             "(default: %(default)s)", metavar="TYPE", choices=("rc", "uc", "ud"), default="rc"),
    CommandOption("inline", "verbs: send inline up to N bytes, perftest -I and fabmeter's --inline (send and write "
                            "tests) (default: %(default)s)", metavar="N", type=byte_size, default=0),
    CommandOption("mtu", "verbs: path MTU, 256 .. 4096, perftest -m and fabmeter's --mtu (default: the port's active "
                         "MTU)", metavar="BYTES", type=int, choices=(256, 512, 1024, 2048, 4096)),
    CommandOption("cm", "verbs: how perftest and fabmeter connect their queue pairs: raw, QP numbers over a socket "
                        "(perftest's own way), or rdma_cm (perftest -R; RC and UD, without --mtu but for UD, and "
                        "without --gid-index: the route decides) (default: %(default)s)", metavar="HOW",
                  choices=("raw", "rdma_cm"), default="raw"),
    CommandOption("bidir", "bw: both ends send at once, perftest -b (it reports the sum of both directions) and "
                           "fabmeter's --bidir; tools that measure one direction are skipped", flag=True),
    CommandOption("tests", "verbs: only these of the tools' tests, comma-separated (perftest's binaries such as "
                           "ib_send_lat, qperf's tests such as rc_lat; default: all)", metavar="LIST"),
    CommandOption("json", "print one JSON object per point or skipped/failed case", flag=True),
    CommandOption("out", "write DIR/peers.json, DIR/peers-raw/ and fabmeter's run.json folders", metavar="DIR"),
    CommandOption("repeat", repeat.HELP, metavar="N", type=repeat.count, default=1),
)


def add_parser(sub, info: Optional[dict]) -> None:
    p = sub.add_parser("peers", help="the established tools (sockperf, qperf, iperf3, ucx_perftest, fi_pingpong, "
                                     "perftest) beside fabmeter",
                       description="Run sockperf, qperf, iperf3, ucx_perftest, fi_pingpong and perftest over loopback "
                                   "(or to --server HOST) with the same sizes, "
                                   "iterations and CPUs as fabmeter's own runs, and print them side by side, "
                                   "each figure labelled with the statistic its tool reports.",
                       allow_abbrev=False)
    command_options.add_arguments(p, OPTIONS)


def _list(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    items = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise FabmeterError(f"--{what}: unknown '{bad[0] if bad else text}' (choose from {','.join(allowed)})",
                                EXIT_USAGE)
    return items


def _tests(text: Optional[str]) -> Optional[tuple[str, ...]]:
    if text is None:
        return None
    known = tuple(c.variant for peer in PEERS.values() for c in peer.cases if c.variant)
    return _list(text, known, "tests")


def params_from(ns, cpus: Optional[tuple[int, ...]], out: Optional[Path], engine: Optional[str] = None) -> PeerRun:
    if ns.token_file is not None and ns.server is None:
        raise FabmeterError("--token-file goes with --server", EXIT_USAGE)
    if ns.gid_index is not None and not 0 <= ns.gid_index <= 255:
        raise FabmeterError("--gid-index must be 0 .. 255", EXIT_USAGE)
    transports = _list(ns.transports, TRANSPORTS, "transports")
    if ns.server is not None and "shm" in transports:
        if ns.transports != ",".join(DEFAULT_TRANSPORTS):
            raise FabmeterError("--server: shm shares memory, so both ends run on one host (leave it out)", EXIT_USAGE)
        transports = tuple(t for t in transports if t != "shm")
    if ns.server is not None and cpus:
        cpus = (cpus[0], None)   # the server's CPU is its serve's --cpu
    if ns.iters < 1:
        raise FabmeterError("--iters must be at least 1", EXIT_USAGE)
    if not ns.duration > 0:
        raise FabmeterError("--duration must be positive", EXIT_USAGE)
    if not 1 <= ns.rate <= 10_000_000:   # fabmeter load's bounds
        raise FabmeterError("--rate must be between 1 and 10000000 per second", EXIT_USAGE)
    rdma = Rdma(client_device=ns.device, server_device=ns.server_device or ns.device, gid_index=ns.gid_index,
                service=ns.service, inline=ns.inline, mtu=ns.mtu or 0, cm=ns.cm)
    conflict = rdma.cm_conflict()
    if conflict:
        raise FabmeterError(f"--cm rdma_cm: {conflict}", EXIT_USAGE)
    return PeerRun(size=ns.size, bw_size=ns.bw_size, iters=ns.iters, duration=ns.duration, rate=ns.rate,
                  cpus=tuple(cpus) if cpus else None, transports=transports,
                  raw_dir=out / "peers-raw" if out else None, server=ns.server, token_file=ns.token_file,
                  engine=engine, rdma=rdma, tests=_tests(ns.tests), bidir=ns.bidir)


def run_fabmeter(params: PeerRun, engine: Optional[str], problem: str, out: Optional[Path]) -> Iterator[dict]:
    """fabmeter's own runs for the same cases, as points with tool "fabmeter"."""
    if engine is None:
        yield {"type": "skipped", "peer": False, "tool": "fabmeter", "reason": problem}
        return
    for experiment, transport, poll in FABMETER_RUNS:
        if transport not in params.transports:
            continue
        if params.server is not None and transport == "shm":
            continue
        if transport == "verbs" and params.rdma is not None and params.rdma.cm == "rdma_cm" and params.server is None:
            yield {"type": "skipped", "peer": False, "tool": "fabmeter", "experiment": experiment, "transport": transport,
                   "poll": poll, "reason": "--cm rdma_cm on one host: fabmeter's control connection is on loopback, "
                                          "where rdma_cm finds no RDMA device (run it with --server)"}
            continue
        message = params.bw_size if experiment == "bw" else params.size
        if experiment == "load":   # sockperf under-load's schedule: a send every 1/rate
            options = {"transport": transport, "poll": poll, "rate": [params.rate], "arrivals": "fixed",
                       "req_size": message, "duration": params.duration}
        else:
            options = {"transport": transport, "poll": poll, "size": message, "iters": params.iters}
        if experiment == "bw" and params.bidir:
            options["bidir"] = True
        if transport == "verbs" and params.rdma is not None:   # perftest's knobs and its QP exchange, alike
            rdma = params.rdma
            options.update(service=rdma.service, cm=rdma.cm, **({"inline": rdma.inline} if rdma.inline else {}),
                           **({"mtu": rdma.mtu} if rdma.mtu else {}))
        folder = out / "fabmeter" / f"{experiment}-{transport}-{poll}" if out else None
        spec = run.RunSpec(experiment, options, cpus=params.cpus, out=folder, engine=engine, server=params.server,
                           token_file=params.token_file)
        command = equivalent_command(spec)
        ran = run_recorded(spec, limits=folder is not None)
        res = ran.result
        if res.exit_code == EXIT_INTERRUPTED:
            raise FabmeterError("interrupted", EXIT_INTERRUPTED)
        if res.exit_code != EXIT_OK or not res.points:
            yield {"type": "failed", "peer": False, "tool": "fabmeter", "experiment": experiment,
                   "transport": transport, "poll": poll, "reason": res.message or "no point measured"}
            continue
        for p in res.points:
            yield {**p, "peer": False, "tool": "fabmeter", "tool_version": __version__, "command": command,
                   "statistic_note": FABMETER_NOTE[experiment], "path": ran.doc["path"]}


def _figure(p: dict) -> str:
    """What the latency columns are, as the tool defines them."""
    if p.get("rtt_ns") and not p.get("latency_ns"):
        return "RTT"
    kind = p.get("latency_kind")
    return {"rtt/2": "one-way = RTT/2", "rtt": "RTT"}.get(kind, kind or "-")


def table(points: list[dict], params: PeerRun) -> str:
    notes: dict[str, int] = {}
    rows = []
    order = {t: i for i, t in enumerate(TOOLS)}
    for p in sorted(points, key=lambda p: (EXPERIMENTS.get(p.get("experiment"), 9), TRANSPORTS.index(p["transport"])
                                           if p.get("transport") in TRANSPORTS else 9, order.get(p.get("tool"), 99))):
        lat = p.get("latency_ns") or p.get("rtt_ns") or {}
        note = p.get("statistic_note")
        mark = f"[{notes.setdefault(note, len(notes) + 1)}]" if note else ""
        tool = p.get("tool", "?") + (f" {p['variant']}" if p.get("variant") else "")
        rows.append([tool, p.get("experiment", "?"), p.get("transport", "?"), p.get("poll") or "-",
                     analysis.fmt_size(p.get("size")), _figure(p) if lat else "-",
                     lat.get("p50"), lat.get("p99"), lat.get("mean"),
                     analysis.fmt_num(p.get("gbps"), 3),
                     analysis.fmt_num(p.get("msg_rate") or p.get("achieved_rps"), 0), analysis.cpu_cell(p), mark])
    if params.server is not None:
        cpus = (f"client CPU {params.cpus[0]}" if params.cpus else "client unpinned") + ", server as its serve pins it"
    else:
        cpus = f"client CPU {params.cpus[0]}, server CPU {params.cpus[1]}" if params.cpus else "unpinned"
    where = f"server side on {params.server}" if params.server else "loopback"
    head = (f"fabmeter peers: {where}, {cpus}; latency in ns as each tool defines it (see notes), "
            f"bandwidth in Gbit/s (10^9 bit/s); load: msg/s is the achieved request rate; CPU: ns of process CPU "
            f"per round trip (lat), message (bw) or request (load), fabmeter's runs over their measured window, "
            f"the tools' processes over their whole run")
    text = [shown_lines(head), analysis.format_table(["tool", "experiment", "transport", "poll", "size", "latency figure",
                                         "p50 ns", "p99 ns", "mean ns", "Gbit/s", "msg/s", "CPU ns client | server",
                                         "note"], rows, left=6)]
    if notes:
        text.append("notes:")
        text += [f"[{i}] {shown(n)}" for n, i in notes.items()]
    return "\n".join(text)


def main(ns, found: Found) -> int:
    """The table, or --repeat N of them."""
    return repeat.run(ns, lambda one: _table(one, parse_cpus(one.cpus), found.engine, found.problem))


def _table(ns, cpus: Optional[tuple[int, ...]], engine: Optional[str], problem: str) -> int:
    tools = _list(ns.tools, TOOLS, "tools")
    out = out_folder(ns.out) if ns.out else None
    params = params_from(ns, cpus, out, engine)
    started = now_iso()
    progress = sys.stderr.isatty()
    records: list[dict] = []

    def emit(rec: dict) -> None:
        records.append(rec)
        if ns.json:
            print(json.dumps(rec), flush=True)
        if rec.get("type") != "point":
            where = " ".join(str(rec[k]) for k in ("experiment", "transport", "poll") if rec.get(k))
            sys.stderr.write(shown_lines(f"{rec['type']} {rec['tool']}{' ' + where if where else ''}: {rec['reason']}")
                             + "\n")

    for tool in tools:
        if progress:
            sys.stderr.write(f"peers: {tool}\n")
        if tool == "fabmeter":
            for rec in run_fabmeter(params, engine, problem, out):
                emit(rec)
        else:
            PEERS[tool].run(params, on_record=emit)

    points = [r for r in records if r.get("type") == "point"]
    if not ns.json:
        print(table(points, params) if points else "fabmeter peers: nothing measured", flush=True)
    if out is not None:
        write_json(out / "peers.json", {
            "fabmeter_version": __version__, "command": ["fabmeter", *sys.argv[1:]],
            "started_at": started, "finished_at": now_iso(),
            "params": {"size": params.size, "bw_size": params.bw_size, "iters": params.iters, "rate": params.rate,
                       "duration": params.duration, "cpus": list(params.cpus) if params.cpus else None,
                       "transports": list(params.transports), "tools": list(tools), "server": params.server},
            "environment": envinfo.collect(),
            "points": [p for p in points if p.get("peer")],
            "skipped": [r for r in records if r.get("type") != "point"],
        })
    failed = any(r.get("type") == "failed" for r in records)
    return EXIT_RUNTIME if failed and not points else EXIT_OK
