"""qperf tcp_lat, udp_lat, tcp_bw and udp_bw (blocking sockets), and its RDMA tests
(rc_lat, uc_lat, ud_lat, rc_rdma_read_lat, rc_rdma_write_lat, rc_bw, ud_bw,
rc_rdma_read_bw, rc_rdma_write_bw: transport "verbs"; the RC tests connect
through rdma_cm, -cm1, so the devices follow the addresses). qperf connects
UC and UD itself, from the device's GID 0, and takes no GID index: on RoCE,
where GID 0 is a link-local address (Soft-RoCE between two local veths),
they fail with the server's "failed to modify QP to RTR" or "failed to
create address handle".

What qperf reports (calc_results() in qperf.c): latency = the client's
elapsed time / the messages received by both sides, i.e. the mean of half
a round trip over the whole run; no percentiles. In an RDMA read or write
latency test only the requester counts operations, so its figure is one
whole operation (request and response), the RTT. bw = bytes received / time;
udp_bw prints what was sent (send_bw) and what arrived (recv_bw): the
point's gbps is what arrived, send_gbps what was sent (the difference was
lost).
Its socket tests stop only on the timer (-t): -n is honoured by the RDMA
tests alone (the socket loops would never end). Its own CPU flags count
from 1 (-rca 1 pins to CPU 0), so pinning uses taskset instead.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Optional

from fabmeter.peers.base import (UDP_MAX_PAYLOAD, Case, PeerRun, Peer, PeerError, Unsupported, pinned, point,
                                 probe_version)

NOTE_LAT = ("qperf, blocking sockets: latency = elapsed time / messages in both directions, "
            "the mean RTT/2 over the whole run; no percentiles")
NOTE_BW = "qperf, blocking sockets: bytes received / elapsed time over the whole run"
NOTE_UDP_BW = ("qperf udp_bw, blocking sockets: bytes received / elapsed time over the whole run (recv_bw); "
               "send_gbps: bytes sent / elapsed time (send_bw)")
NOTE_RDMA_LAT = ("qperf {test}: latency = elapsed time / messages in both directions, the mean "
                 "RTT/2 over the whole run; no percentiles")
NOTE_RDMA_OP_LAT = ("qperf {test}, rdma_cm: latency = elapsed time / operations of the requester, the mean "
                    "time of a whole one-sided operation (RTT) over the whole run; no percentiles")
NOTE_RDMA_BW = "qperf {test}: bytes received / elapsed time over the whole run"
TESTS = {("lat", "tcp"): "tcp_lat", ("lat", "udp"): "udp_lat", ("bw", "tcp"): "tcp_bw", ("bw", "udp"): "udp_bw"}
RDMA_TESTS = (("lat", "rc_lat"), ("lat", "uc_lat"), ("lat", "ud_lat"), ("lat", "rc_rdma_read_lat"),
              ("lat", "rc_rdma_write_lat"), ("bw", "rc_bw"), ("bw", "ud_bw"), ("bw", "rc_rdma_read_bw"),
              ("bw", "rc_rdma_write_bw"))

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
                         cases=(*(Case(exp, transport) for exp, transport in TESTS),
                                *(Case(exp, "verbs", test) for exp, test in RDMA_TESTS)))

    @staticmethod
    def test(case: Case) -> str:
        return case.variant or TESTS[(case.experiment, case.transport)]

    def request(self, case: Case, params: PeerRun) -> dict:
        return {"tool": "qperf", "lifetime_s": math.ceil(params.duration + params.timeout_s)}

    def version(self) -> Optional[str]:
        return probe_version(("qperf", "--version"), r"qperf\s+(\S+)")

    def command(self, role: str, case: Case, params: PeerRun, port: int) -> list[str]:
        if role == "server":   # one server per case; it forks a child for the test
            return pinned(["qperf", "--listen_port", str(port)], params.server_cpu)
        seconds = max(1, math.ceil(params.duration))
        if case.transport == "udp" and case.size(params) > UDP_MAX_PAYLOAD:   # qperf would report 0 bits/sec
            raise Unsupported(f"qperf {self.test(case)}: one UDP datagram carries at most {UDP_MAX_PAYLOAD} B, "
                              f"not {case.size(params)}")
        # -uu -ub: plain units (ns, bits/sec) that parse exactly; -v adds msg_size, time, msg_rate.
        if case.transport == "verbs" and params.server is None and not any(Path("/sys/class/infiniband").glob("*")):
            raise Unsupported("no RDMA device on this host (/sys/class/infiniband)")
        rdma = ["-cm1"] if case.variant.startswith("rc_") else []   # qperf connects UC and UD without rdma_cm
        if case.transport == "verbs":   # its 5 s for each exchange and connection event is short for a slow host
            rdma += ["-to", "30"]
        return pinned(["qperf", params.host, "--listen_port", str(port), "--msg_size", str(case.size(params)),
                       "--time", str(seconds), "-uu", "-ub", "-v", *rdma, self.test(case)], params.client_cpu)

    def parse(self, text: str, case: Case) -> list[dict]:
        test = self.test(case)
        head = re.search(rf"^{test}:\s*$", text, re.M)
        fields = {m.group(1): (float(m.group(2).replace(",", "")), m.group(3))
                  for m in _FIELD.finditer(text[head.end():])} if head else {}
        if "recv_bw" in fields:   # udp_bw: what arrived is its bw
            fields["bw"] = fields["recv_bw"]
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
        rdma = case.transport == "verbs"
        if case.experiment == "lat":
            value, unit = fields["latency"]
            stats = {"mean": value * _SCALE[unit]}
            if "rdma" in test:   # one-sided: the requester's whole operation
                return [point(self.tool, case, latency_kind="rtt", statistic_note=NOTE_RDMA_OP_LAT.format(test=test),
                              rtt_ns=stats, **extra)]
            return [point(self.tool, case, latency_kind="rtt/2",
                          statistic_note=NOTE_RDMA_LAT.format(test=test) if rdma else NOTE_LAT,
                          latency_ns=stats, **extra)]
        if any(unit != "bits/sec" for k, (_, unit) in fields.items() if k in ("bw", "send_bw")):
            raise PeerError(f"qperf bw in {fields['bw'][1]!r}, expected bits/sec (-ub -uu)")
        if "send_bw" in fields:
            extra["send_gbps"] = fields["send_bw"][0] / 1e9
        note = NOTE_RDMA_BW.format(test=test) if rdma else NOTE_UDP_BW if "send_bw" in fields else NOTE_BW
        return [point(self.tool, case, statistic_note=note, gbps=fields["bw"][0] / 1e9, **extra)]

    def _raw_name(self, case: Case, params: PeerRun) -> str:
        return f"qperf-{self.test(case)}-{case.size(params)}B.txt" if case.variant else super()._raw_name(case, params)

    def measured_count(self, p: dict, case: Case, params: PeerRun) -> Optional[float]:
        """Its messages over its run (msg_rate x time); lat's msg_rate counts both directions: round trips are half."""
        if not p.get("msg_rate") or not p.get("duration_s"):
            return None
        messages = p["msg_rate"] * p["duration_s"]
        return messages / 2 if case.experiment == "lat" and "rdma" not in self.test(case) else messages


PEER = Qperf()
