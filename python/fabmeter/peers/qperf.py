"""qperf tcp_lat, udp_lat and tcp_bw (blocking sockets).

What qperf reports (calc_results() in qperf.c): latency = the client's
elapsed time / the messages received by both sides, i.e. the mean of half
a round trip over the whole run; no percentiles. bw = bytes received / time.
Its socket tests stop only on the timer (-t): -n is honoured by the RDMA
tests alone (the socket loops would never end). Its own CPU flags count
from 1 (-rca 1 pins to CPU 0), so pinning uses taskset instead.
"""

from __future__ import annotations

import math
import re
from typing import Optional

from fabmeter.peers.base import Case, Params, Peer, PeerError, pinned, point, probe_version

NOTE_LAT = ("qperf, blocking sockets: latency = elapsed time / messages in both directions, "
            "the mean RTT/2 over the whole run; no percentiles")
NOTE_BW = "qperf, blocking sockets: bytes received / elapsed time over the whole run"
TESTS = {("lat", "tcp"): "tcp_lat", ("lat", "udp"): "udp_lat", ("bw", "tcp"): "tcp_bw"}

# qperf's own CPU figures (-v): each is the whole machine's busy time over its run (every CPU's /proc/stat,
# whoever used it), in % of one CPU; costs in ns of that per GB moved.
TOOL_CPU = {"loc_cpus_used": "loc_cpus_used_pct", "rem_cpus_used": "rem_cpus_used_pct",
            "send_cpus_used": "send_cpus_used_pct", "recv_cpus_used": "recv_cpus_used_pct",
            "send_cost": "send_cost_ns_per_gb", "recv_cost": "recv_cost_ns_per_gb"}
TOOL_CPU_NOTE = ("qperf's own (-v): the whole machine's CPUs busy during its run, in % of one CPU (all CPUs' "
                 "/proc/stat, any process), and CPU ns per GB")
_FIELD = re.compile(r"^\s*(\w+)\s*=\s*([\d.,]+)\s*(\S*)", re.M)
_SCALE = {"ns": 1.0, "us": 1e3, "ms": 1e6, "sec": 1e9}


class Qperf(Peer):
    def __init__(self):
        super().__init__(tool="qperf", package="qperf",
                         cases=(Case("lat", "tcp"), Case("lat", "udp"), Case("bw", "tcp")))

    def version(self) -> Optional[str]:
        return probe_version(("qperf", "--version"), r"qperf\s+(\S+)")

    def command(self, role: str, case: Case, params: Params, port: int) -> list[str]:
        if role == "server":   # one server per case; it forks a child for the test
            return pinned(["qperf", "--listen_port", str(port)], params.server_cpu)
        seconds = max(1, math.ceil(params.duration))
        # -uu -ub: plain units (ns, bits/sec) that parse exactly; -v adds msg_size, time, msg_rate.
        return pinned(["qperf", "127.0.0.1", "--listen_port", str(port), "--msg_size", str(case.size(params)),
                       "--time", str(seconds), "-uu", "-ub", "-v", TESTS[(case.experiment, case.transport)]],
                      params.client_cpu)

    def parse(self, text: str, case: Case) -> list[dict]:
        test = TESTS[(case.experiment, case.transport)]
        head = re.search(rf"^{test}:\s*$", text, re.M)
        fields = {m.group(1): (float(m.group(2).replace(",", "")), m.group(3))
                  for m in _FIELD.finditer(text[head.end():])} if head else {}
        if ("latency" if case.experiment == "lat" else "bw") not in fields:
            err = re.search(r"^.*(?:failed|error|Error).*$", text, re.M)
            if err:
                raise PeerError(err.group(0).strip())
            return []
        extra = {}
        if "msg_size" in fields:
            extra["size"] = int(fields["msg_size"][0])
        if "time" in fields:
            extra["duration_s"] = fields["time"][0] * _SCALE.get(fields["time"][1], 1.0) / 1e9
        if "msg_rate" in fields:
            extra["msg_rate"] = fields["msg_rate"][0]
        own = {TOOL_CPU[k]: v for k, (v, _unit) in fields.items() if k in TOOL_CPU}
        if own:
            extra["tool_cpu"] = {**own, "note": TOOL_CPU_NOTE}
        if case.experiment == "lat":
            value, unit = fields["latency"]
            return [point(self.tool, case, latency_kind="rtt/2", statistic_note=NOTE_LAT,
                          latency_ns={"mean": value * _SCALE[unit]}, **extra)]
        value, unit = fields["bw"]
        if unit != "bits/sec":
            raise PeerError(f"qperf bw in {unit!r}, expected bits/sec (-ub -uu)")
        return [point(self.tool, case, statistic_note=NOTE_BW, gbps=value / 1e9, **extra)]

    def measured_count(self, p: dict, case: Case, params: Params) -> Optional[float]:
        """Its messages over its run (msg_rate x time); lat's msg_rate counts both directions: round trips are half."""
        if not p.get("msg_rate") or not p.get("duration_s"):
            return None
        messages = p["msg_rate"] * p["duration_s"]
        return messages / 2 if case.experiment == "lat" else messages


PEER = Qperf()
