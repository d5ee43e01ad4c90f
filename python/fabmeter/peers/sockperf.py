"""sockperf over TCP and UDP (blocking sockets): ping-pong (lat) and
under-load (load).

What sockperf reports (client_statistics() in sockperf's client.cpp): every
sample is half a round trip (RTT/2, its "latency"; --full-rtt would give the
RTT). Messages sent in the first 400 ms (warm-up) and the last 50 ms of the
run are dropped; the rest, the "valid" window, are sorted and each
percentile is the nearest rank (sample at round(p * n) - 1). avg-latency is
the mean RTT / 2. sockperf 3.7 runs for whole seconds only (-t), after a
fixed 2 s pause behind its warm-up messages.

Under load (`sockperf under-load --mps N`), a sender thread busy-waits to
the start of each 1/N cycle (an absolute schedule: a late sender catches up
in a burst) and stamps each message just before its sendto; a receiver
thread blocks in recvfrom. So its latency is measured from the *actual*
send, as fabmeter load's service_latency_ns, not from the intended one as
fabmeter load's latency_ns. By default the server answers one message in
100 (--reply-every 100); the adapter asks a reply to every message
(--reply-every 1), so each message is a request as in fabmeter load, and
the round trip (--full-rtt), the figure fabmeter load reports.

Pinned to one CPU, the receiver would wake behind its own spinning sender
and wait for the scheduler to end the sender's time slice: milliseconds at
every rate, sockperf's doing, not the path's (docs/performance.md measures
it). fabmeter load's client is one thread that sends and receives; so that
neither tool waits for its own other half, the adapter moves sockperf's
receiver thread, which sockperf starts when its test starts (about 2 s in,
before the 400 ms its statistics leave out), to the server's CPU, where the
server too sleeps in recv. The point says where it ran (`receiver_cpu`).
"""

from __future__ import annotations

import math
import os
import re
import time
from typing import Optional

from fabmeter.peers.base import (ANSI_ESCAPE, UDP_MAX_PAYLOAD, Case, PeerRun, Peer, PeerError, Unsupported,
                                 percentile_key, pinned, point, probe_version, us_to_ns)

NOTE = ("sockperf ping-pong, blocking sockets: each sample is RTT/2; nearest-rank percentiles and the mean "
        "(avg-latency) over all messages of sockperf's valid window (its first 400 ms and last 50 ms excluded)")
LOAD_NOTE = ("sockperf under-load --mps RATE --reply-every 1 --full-rtt: a sender thread spinning to each 1/RATE "
             "cycle on the client CPU, a receiver thread blocking in recvfrom on the server's CPU (receiver_cpu; on "
             "the client's it would wait behind the spinning sender for the CPU); each sample is the RTT from "
             "the actual send (as fabmeter load's service latency, not its latency from the intended send); "
             "nearest-rank percentiles over sockperf's valid window (first 400 ms and last 50 ms excluded)")
LOAD_KIND = "rtt from the actual send time"
MIN_SIZE, MAX_SIZE = 14, UDP_MAX_PAYLOAD   # sockperf's -m limits (its header; one UDP datagram)
RECEIVER_WAIT_S = 10.0           # sockperf 3.7 starts its receiver thread after a fixed 2 s pause
RECEIVER_WAIT_S_INT = 10         # sockperf's own pauses, in a remote server's lifetime

_PCT = re.compile(r"---> percentile\s+([\d.]+)\s*=\s*([\d.]+)")
_EDGE = re.compile(r"---> <(MAX|MIN)> observation\s*=\s*([\d.]+)")
_AVG = re.compile(r"avg-(latency|rtt)=([\d.]+) \(std-dev=([\d.]+)")
_TOTAL = re.compile(r"Total (\d+) observations")
_LOSS = re.compile(r"# dropped messages = (\d+); # duplicated messages = (\d+); # out-of-order messages = (\d+)")
_VALID = re.compile(r"\[Valid Duration\] RunTime=([\d.]+) sec; SentMessages=(\d+); ReceivedMessages=(\d+)")
_PROTO = re.compile(r"PORT =\s*\d+ # (TCP|UDP)")
_ERROR = re.compile(r"^sockperf: (?:'-\w' Invalid .*|ERROR.*)$", re.M)


class Sockperf(Peer):
    def __init__(self):
        super().__init__(tool="sockperf", package="sockperf",
                         cases=(Case("lat", "tcp"), Case("lat", "udp"), Case("load", "tcp"), Case("load", "udp")))

    def version(self) -> Optional[str]:
        return probe_version(("sockperf", "--version"), r"version (\S+)")

    def listens(self, case: Case, params: PeerRun) -> str:
        return case.transport

    def command(self, role: str, case: Case, params: PeerRun, port: int) -> list[str]:
        proto = ["--tcp"] if case.transport == "tcp" else []
        if role == "server":
            return pinned(["sockperf", "server", "-i", "127.0.0.1", "-p", str(port), *proto], params.server_cpu)
        size = case.size(params)
        if not MIN_SIZE <= size <= MAX_SIZE:
            raise Unsupported(f"sockperf takes {MIN_SIZE}..{MAX_SIZE} B messages, not {size}")
        seconds = max(1, math.ceil(params.duration))
        common = ["-i", params.host, "-p", str(port), *proto, "-m", str(size), "-t", str(seconds)]
        if case.experiment == "load":
            return pinned(["sockperf", "under-load", *common, "--mps", str(params.rate), "--reply-every", "1",
                           "--full-rtt"], params.client_cpu)
        return pinned(["sockperf", "ping-pong", *common], params.client_cpu)

    def request(self, case: Case, params: PeerRun) -> dict:
        return {"tool": "sockperf", "proto": case.transport,
                "lifetime_s": math.ceil(params.duration + params.timeout_s) + RECEIVER_WAIT_S_INT}

    def started(self, case: Case, params: PeerRun, client) -> dict:
        """load with two CPUs: the receiver thread onto the server's CPU as soon as sockperf starts it."""
        if case.experiment != "load" or params.server_cpu is None or params.server_cpu == params.client_cpu:
            return {}
        deadline = time.monotonic() + RECEIVER_WAIT_S
        while client.running() and time.monotonic() < deadline:
            try:
                threads = [int(t) for t in os.listdir(f"/proc/{client.proc.pid}/task") if int(t) != client.proc.pid]
            except OSError:
                break
            if threads:
                for tid in threads:
                    os.sched_setaffinity(tid, {params.server_cpu})
                return {"receiver_cpu": params.server_cpu}
            time.sleep(0.001)
        raise PeerError(f"sockperf under-load started no receiver thread within {RECEIVER_WAIT_S:g} s")

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
        valid, loss = _VALID.search(text), _LOSS.search(text)
        if case.experiment == "load":
            if not rtt:
                raise PeerError("sockperf under-load printed RTT/2, expected the round trip (--full-rtt)")
            if not valid:
                return []
            # fabmeter load's keys: latency_ns is the round trip there too.
            p = point(self.tool, case, iterations=int(total.group(1)), latency_kind=LOAD_KIND,
                      statistic_note=LOAD_NOTE, latency_ns=stats, arrivals="fixed",
                      sent=int(valid.group(2)), completed=int(valid.group(3)),
                      achieved_rps=round(int(valid.group(3)) / float(valid.group(1)), 3))
        else:
            p = point(self.tool, case, iterations=int(total.group(1)),
                      latency_kind="rtt" if rtt else "rtt/2",
                      statistic_note=NOTE.replace("RTT/2", "the RTT") if rtt else NOTE,
                      **{"rtt_ns" if rtt else "latency_ns": stats})
        if loss:
            p["lost"] = int(loss.group(1))
        if valid:
            p["duration_s"] = float(valid.group(1))
        return [p]

    def measure(self, case: Case, params: PeerRun) -> list[dict]:
        points = super().measure(case, params)
        if case.experiment == "load":
            for p in points:
                p["offered_rps"] = params.rate
        return points

    def _raw_name(self, case: Case, params: PeerRun) -> str:
        name = super()._raw_name(case, params)
        return name.replace(".txt", f"-{params.rate}rps.txt") if case.experiment == "load" else name


PEER = Sockperf()
