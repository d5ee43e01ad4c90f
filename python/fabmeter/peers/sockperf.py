"""sockperf ping-pong over TCP and UDP (blocking sockets).

What sockperf reports (client_statistics() in sockperf's client.cpp): every
sample is half a round trip (RTT/2, its "latency"; --full-rtt would give the
RTT). Messages sent in the first 400 ms (warm-up) and the last 50 ms of the
run are dropped; the rest, the "valid" window, are sorted and each
percentile is the nearest rank (sample at round(p * n) - 1). avg-latency is
the mean RTT / 2. sockperf 3.7 runs for whole seconds only (-t).
"""

from __future__ import annotations

import math
import re
from typing import Optional

from fabmeter.peers.base import (ANSI_ESCAPE, Case, Params, Peer, PeerError, Unsupported, percentile_key, pinned,
                                 point, probe_version, us_to_ns)

NOTE = ("sockperf ping-pong, blocking sockets: each sample is RTT/2; nearest-rank percentiles and the mean "
        "(avg-latency) over all messages of sockperf's valid window (its first 400 ms and last 50 ms excluded)")
MIN_SIZE, MAX_SIZE = 14, 65507   # sockperf's -m limits (its header; one UDP datagram)

_PCT = re.compile(r"---> percentile\s+([\d.]+)\s*=\s*([\d.]+)")
_EDGE = re.compile(r"---> <(MAX|MIN)> observation\s*=\s*([\d.]+)")
_AVG = re.compile(r"avg-(latency|rtt)=([\d.]+) \(std-dev=([\d.]+)")
_TOTAL = re.compile(r"Total (\d+) observations")
_LOSS = re.compile(r"# dropped messages = (\d+); # duplicated messages = (\d+); # out-of-order messages = (\d+)")
_VALID = re.compile(r"\[Valid Duration\] RunTime=([\d.]+) sec")
_PROTO = re.compile(r"PORT =\s*\d+ # (TCP|UDP)")
_ERROR = re.compile(r"^sockperf: (?:'-\w' Invalid .*|ERROR.*)$", re.M)


class Sockperf(Peer):
    def __init__(self):
        super().__init__(tool="sockperf", package="sockperf",
                         cases=(Case("lat", "tcp"), Case("lat", "udp")))

    def version(self) -> Optional[str]:
        return probe_version(("sockperf", "--version"), r"version (\S+)")

    def listens(self, case: Case) -> str:
        return case.transport

    def command(self, role: str, case: Case, params: Params, port: int) -> list[str]:
        proto = ["--tcp"] if case.transport == "tcp" else []
        if role == "server":
            return pinned(["sockperf", "server", "-i", "127.0.0.1", "-p", str(port), *proto], params.server_cpu)
        size = case.size(params)
        if not MIN_SIZE <= size <= MAX_SIZE:
            raise Unsupported(f"sockperf takes {MIN_SIZE}..{MAX_SIZE} B messages, not {size}")
        seconds = max(1, math.ceil(params.duration))
        return pinned(["sockperf", "ping-pong", "-i", "127.0.0.1", "-p", str(port), *proto,
                       "-m", str(size), "-t", str(seconds)], params.client_cpu)

    def parse(self, text: str, case: Case) -> list[dict]:
        text = ANSI_ESCAPE.sub("", text)
        err = _ERROR.search(text)
        if err:  # sockperf 3.7 exits 0 after refusing an option
            raise PeerError(err.group(0))
        avg, total = _AVG.search(text), _TOTAL.search(text)
        if not avg or not total:
            return []
        proto = _PROTO.search(text)
        if proto and proto.group(1).lower() != case.transport:
            raise PeerError(f"sockperf ran {proto.group(1)}, expected {case.transport}")
        stats = {m.group(1).lower(): us_to_ns(m.group(2)) for m in _EDGE.finditer(text)}
        stats.update({percentile_key(m.group(1)): us_to_ns(m.group(2)) for m in _PCT.finditer(text)})
        stats.update(mean=us_to_ns(avg.group(2)), stdev=us_to_ns(avg.group(3)))
        rtt = avg.group(1) == "rtt"   # --full-rtt: the same figures, not halved
        p = point(self.tool, case, iterations=int(total.group(1)),
                  latency_kind="rtt" if rtt else "rtt/2",
                  statistic_note=NOTE.replace("RTT/2", "the RTT") if rtt else NOTE,
                  **{"rtt_ns" if rtt else "latency_ns": stats})
        loss = _LOSS.search(text)
        if loss:
            p["lost"] = int(loss.group(1))
        valid = _VALID.search(text)
        if valid:
            p["duration_s"] = float(valid.group(1))
        return [p]


PEER = Sockperf()
