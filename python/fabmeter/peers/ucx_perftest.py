"""ucx_perftest tag_lat and tag_bw over UCX's posix shared memory and tcp.

What ucx_perftest reports (ucx_perf_calc_result() in UCX's libperf):
- tag_lat is a ping-pong; every latency figure is halved (RTT/2).
  The "50.0%ile" column is the median of only the last 2048 iterations
  (its timing queue: a window at the end of the run; with fewer iterations
  the queue's unused entries, zeros, take part); "average" is the mean
  over the last report interval (1 s) and "overall" the mean over the whole
  run; warm-up iterations (-w) are excluded from all of them.
- tag_bw: "overall" bandwidth in MB/s, where MB = 2^20 bytes, and msg/s.
Both ends busy-poll. UCX_TLS picks the transport: posix,self = shared
memory only, tcp (UCX_NET_DEVICES=lo) = TCP over loopback only.
"""

from __future__ import annotations

import re
from typing import Optional

from fabmeter.peers.base import (Case, PeerRun, Peer, PeerError, percentile_key, point, probe_version, us_to_ns,
                                 with_env)

UCX_ENV = {"shm": {"UCX_TLS": "posix,self"}, "tcp": {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}}
TESTS = {"lat": "tag_lat", "bw": "tag_bw"}
WINDOW = 2048   # TIMING_QUEUE_SIZE in UCX's libperf
NOTE_LAT = ("ucx_perftest tag_lat, busy polling: {key} is the {rank}th percentile of the last {window} iterations "
            "only (a window, RTT/2); mean is the whole run's mean RTT/2 ('overall')")
NOTE_BW = "ucx_perftest tag_bw, busy polling: 'overall' bandwidth (MB/s = 2^20 B/s) and message rate of the whole run"

_HEADER = re.compile(r"\|\s*Stage\s*\|\s*# iterations\s*\|\s*([\d.]+)%ile\s*\|")
_FINAL = re.compile(r"^Final:\s+(\d+)\s+" + r"\s+".join([r"([\d.]+)"] * 7) + r"\s*$", re.M)


class UcxPerftest(Peer):
    def __init__(self):
        super().__init__(tool="ucx_perftest", package="ucx-utils", server_exits_alone=True, poll="busy",
                         cases=(Case("lat", "shm"), Case("lat", "tcp"), Case("bw", "shm"), Case("bw", "tcp")))

    def version(self) -> Optional[str]:
        return probe_version(("ucx_info", "-v"), r"Version (\S+)")

    def command(self, role: str, case: Case, params: PeerRun, port: int) -> list[str]:
        cpu = params.server_cpu if role == "server" else params.client_cpu
        argv = ["ucx_perftest"]
        if role == "client":  # the server takes the test and its parameters from the client
            warmup = max(10, params.iters // 10)
            argv += ["127.0.0.1", "-t", TESTS[case.experiment], "-s", str(case.size(params)),
                     "-n", str(params.iters), "-w", str(warmup)]
        argv += ["-p", str(port)] + (["-c", str(cpu)] if cpu is not None else [])
        return with_env(argv, UCX_ENV[case.transport])

    def parse(self, text: str, case: Case) -> list[dict]:
        final = _FINAL.search(text)
        if not final:
            err = re.search(r"^.*(?:ERROR|Error|failed).*$", text, re.M)
            if err:
                raise PeerError(err.group(0).strip())
            return []
        iters, typical, _avg, overall, _bw_avg, bw_overall, _rate_avg, rate_overall = final.groups()
        if case.experiment == "bw":
            return [point(self.tool, case, iterations=int(iters), statistic_note=NOTE_BW,
                          gbps=float(bw_overall) * (1 << 20) * 8 / 1e9, msg_rate=float(rate_overall))]
        header = _HEADER.search(text)
        rank = header.group(1) if header else "50.0"
        key = percentile_key(rank)
        note = NOTE_LAT.format(key=key, rank=rank.rstrip("0").rstrip("."), window=WINDOW)
        if int(iters) < WINDOW:
            note += f"; with {iters} < {WINDOW} iterations the window's unused entries are zeros (biased low)"
        return [point(self.tool, case, iterations=int(iters), latency_kind="rtt/2", statistic_note=note,
                      latency_ns={key: us_to_ns(typical), "mean": us_to_ns(overall)}, percentile_window=WINDOW)]


PEER = UcxPerftest()
