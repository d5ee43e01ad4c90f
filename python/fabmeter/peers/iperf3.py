"""iperf3 TCP bandwidth (-J: JSON output).

What iperf3 reports: end.sum_received.bits_per_second = bytes the server
received / the receiver's elapsed time, over the whole test (no --omit);
end.sum_sent is the sender's view. The client writes -k blocks of -l bytes,
so the message count matches fabmeter's -n; with -P N (PeerRun.flows) N
streams share the -k blocks (fabmeter's --flows N sends -n on each), and
the sums are over the streams. Its own CPU figure, end.cpu_utilization_percent
(host_*: the client, remote_*: the server, % of one CPU over the test), is
kept in the point as iperf3 gives it.
"""

from __future__ import annotations

import json
import math
from typing import Optional

from fabmeter.peers.base import Case, PeerRun, Peer, PeerError, pinned, point, probe_version

NOTE = ("iperf3, blocking sockets: bytes received / receiver's elapsed time over the whole test "
        "(end.sum_received); {streams}")


class Iperf3(Peer):
    def __init__(self):
        super().__init__(tool="iperf3", package="iperf3", cases=(Case("bw", "tcp"),), server_exits_alone=True)

    def version(self) -> Optional[str]:
        return probe_version(("iperf3", "--version"), r"^iperf (\S+)")

    def command(self, role: str, case: Case, params: PeerRun, port: int) -> list[str]:
        if role == "server":  # -1: serve one test, then exit
            return pinned(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)], params.server_cpu)
        streams = ["-P", str(params.flows)] if params.flows > 1 else []
        return pinned(["iperf3", "-c", params.host, "-p", str(port), "-l", str(case.size(params)),
                       "-k", str(params.iters), *streams, "-J"], params.client_cpu)

    def request(self, case: Case, params: PeerRun) -> dict:
        return {"tool": "iperf3", "lifetime_s": math.ceil(params.duration + params.timeout_s)}

    def parse(self, text: str, case: Case) -> list[dict]:
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end < start:
            return []
        try:
            doc = json.loads(text[start:end + 1])
        except json.JSONDecodeError as e:
            raise PeerError(f"iperf3 printed invalid JSON: {e}") from e
        if doc.get("error"):
            raise PeerError(f"iperf3: {doc['error']}")
        test = doc.get("start", {}).get("test_start", {})
        received = doc.get("end", {}).get("sum_received")
        if not received or not received.get("seconds"):
            return []
        if test.get("protocol") not in (None, "TCP"):
            raise PeerError(f"iperf3 ran {test.get('protocol')}, expected TCP")
        size = test.get("blksize")
        streams = test.get("num_streams") or 1
        p = point(self.tool, case, statistic_note=NOTE.format(
                      streams="one TCP stream" if streams == 1 else f"the sum over {streams} TCP streams (-P)"),
                  gbps=received["bits_per_second"] / 1e9, duration_s=received["seconds"])
        p["flows"] = streams
        cpu = doc.get("end", {}).get("cpu_utilization_percent")
        if isinstance(cpu, dict):
            p["cpu_utilization_percent"] = {k: v for k, v in cpu.items() if isinstance(v, (int, float))}
        if size:
            p["size"] = size
            p["msg_rate"] = received["bytes"] / size / received["seconds"]
        if test.get("blocks"):
            p["iterations"] = test["blocks"]
        sent = doc.get("end", {}).get("sum_sent") or {}
        if sent.get("retransmits") is not None:
            p["retransmits"] = sent["retransmits"]
        return [p]


PEER = Iperf3()
