"""`fabmeter mesh --tool NAME`: a pair run by an established tool instead of fabmeter's engines.

The source rank runs the tool's client here; the tool's server side is started by the destination
rank's own engine serve (the one every rank runs for its incoming pairs), through the same allow-list
and token as `fabmeter peers --server` (peers/base.py RemoteServer, docs/security.md). The pair object
carries the tool's point figures in the shape of fabmeter's pairs (output.pair_figures), with `tool`.
A tool starts when it is started: its pairs have no start instant, no start lateness and no clock fit.
"""

from __future__ import annotations

from typing import Optional

from fabmeter.errors import EXIT_USAGE, FabmeterError
from fabmeter.mesh import output
from fabmeter.peers.base import Case, PeerError, PeerRun, Unsupported
from fabmeter.peers.registry import PEERS

# What a tool's pairs take of the mesh's engine options (the knobs `fabmeter peers` has).
KEYS = ("transport", "size", "iters", "duration", "rate")


def case_of(tool: str, experiment: str, options: dict) -> Case:
    """The tool's case for --experiment over -t, and every other option one it takes; else exit 2."""
    peer = PEERS[tool]
    if not peer.available():
        raise FabmeterError(f"mesh --tool {tool}: not installed here (apt-get install {peer.package})", EXIT_USAGE)
    extra = [k for k in options if k not in KEYS]
    if extra:
        raise FabmeterError(f"mesh --tool {tool}: --{extra[0].replace('_', '-')} is fabmeter's own; a tool's pairs "
                            f"take {', '.join('--' + k for k in KEYS[1:])} and -t", EXIT_USAGE)
    transport = options.get("transport")
    found = [c for c in peer.cases if (c.experiment, c.transport) == (experiment, transport)]
    if len(found) != 1:
        have = ", ".join(" ".join(filter(None, (c.experiment, c.transport, c.variant))) for c in peer.cases)
        what = "several tests for" if found else "no case"
        raise FabmeterError(f"mesh --tool {tool}: {what} --experiment {experiment} over {transport} (its cases: "
                            f"{have}{'; a mesh runs a tool with one' if found else ''})", EXIT_USAGE)
    if peer.request(found[0], PeerRun()) is None:
        raise FabmeterError(f"mesh --tool {tool}: its server side cannot be started by a serve (not on the serve's "
                            "allow-list)", EXIT_USAGE)
    rate = options.get("rate")
    if isinstance(rate, list) and len(rate) != 1:
        raise FabmeterError(f"mesh --tool {tool}: one --rate", EXIT_USAGE)
    return found[0]


def params(options: dict, case: Case, server: str, engine: str) -> PeerRun:
    size, rate, iters = options.get("size"), options.get("rate"), options.get("iters")
    duration = options.get("duration")
    return PeerRun(size=size if size and case.experiment != "bw" else PeerRun.size,
                   bw_size=size if size and case.experiment == "bw" else PeerRun.bw_size,
                   iters=iters if isinstance(iters, int) else PeerRun.iters,
                   duration=duration if duration else PeerRun.duration,
                   rate=rate[0] if isinstance(rate, list) else rate or PeerRun.rate,
                   transports=(case.transport,), server=server, engine=engine)


def run(tool: str, experiment: str, options: dict, src: int, dst: int, server: str, engine: str) -> dict:
    """One pair: `tool`'s client here against its server side on `server` (the destination rank's serve)."""
    peer = PEERS[tool]
    case = case_of(tool, experiment, options)
    message, point = "", None
    try:
        points = peer.run_case(case, params(options, case, server, engine))
        point = points[-1] if points else None
        if point is None:
            message = "no point measured"
    except (Unsupported, PeerError) as e:
        message = str(e)
    return pair(tool, src, dst, point, message)


def pair(tool: str, src: int, dst: int, point: Optional[dict], message: str = "") -> dict:
    """The pair (src, dst) with the tool's point (None: failed, with `message`)."""
    if point is None:
        return {**output.failed_pair(src, dst, message), "tool": tool}
    return {"type": "pair", "src": src, "dst": dst, "status": "ok", "message": "", "started_ns": None,
            "start_late_ns": None, "start_ready_ns": None, "start_margin_ns": None, "late_step": None,
            "late_reason": None, "clock_error_ns": 0,
            "samples_dir": None, "steps": None, **figures(point), "tool": tool}


def figures(point: dict) -> dict:
    """The tool's point as a pair's figures: its latency block (RTT/2, or the round trip where it reports only
    that), Gbit/s, losses, size and each end's CPU, as fabmeter's pairs carry them."""
    block, kind = (point.get("latency_ns"), point.get("latency_kind")) if point.get("latency_ns") else \
        (point.get("rtt_ns"), "rtt")
    return {**output.pair_figures({k: v for k, v in point.items() if k != "clock"}),
            "latency_ns": block, "latency_kind": kind if block else None}
