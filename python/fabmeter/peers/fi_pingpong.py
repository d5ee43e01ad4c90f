"""fi_pingpong (libfabric's util/pingpong.c) beside `fabmeter lat -t ofi`,
for the same provider and endpoint type.

Cases are named "ofi:PROVIDER:EP" (e.g. "ofi:tcp:msg"); `fabmeter peers
--transports tcp` selects the ofi cases of that provider. The client's table:

    bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
    32      10k     =10k     625k        0.78s      0.82      39.14       0.03

What `usec/xfer` is (show_perf() in pingpong.c): the wall time of all
iterations (gettimeofday, microsecond resolution) divided by 2 x iterations,
i.e. the mean of half the round trip. There is no warm-up: the first round
trip, which on rdm endpoints also sets up the connection, is included. Both
ends busy-poll their CQs (FI_WAIT_NONE) and inject messages smaller than the
provider's inject_size (as `fabmeter lat -t ofi --inline N` does). tcp and
udp run with `-d lo`, on loopback as `fabmeter -t ofi` does (it takes the
control channel's address); fi_pingpong's default is the first interface.
"""

from __future__ import annotations

import re
from typing import Optional

from fabmeter.peers.base import Case, PeerRun, Peer, PeerError, pinned, point, probe_version

NOTE = ("fi_pingpong: wall time of all iterations / (2 x iterations), the mean of RTT/2; "
        "gettimeofday clock, no warm-up (the first round trip, which sets up rdm connections, is included)")
COMBOS = (("tcp", "msg"), ("tcp", "rdm"), ("udp", "dgram"), ("udp", "rdm"), ("shm", "rdm"))
LOOPBACK_DOMAIN = {"tcp": "lo", "udp": "lo"}

_HEADER = ["bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"]
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def case_for(provider: str, ep: str) -> Case:
    return Case("lat", f"ofi:{provider}:{ep}")


def provider_ep(case: Case) -> tuple[str, str]:
    kind, provider, ep = case.transport.split(":")
    if kind != "ofi":
        raise ValueError(f"not an ofi case: {case.transport!r}")
    return provider, ep


def _size(text: str) -> int:
    """pingpong.c's size_str(): '32', '1k', '1.5k', '8m' (powers of two)."""
    m = re.fullmatch(r"(\d+(?:\.\d)?)([kmg]?)", text)
    if not m:
        raise ValueError(f"not a fi_pingpong size: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def parse_table(text: str) -> list[dict]:
    """The rows of fi_pingpong's result table, one dict per size.

    `sent` is the count as printed, which pingpong.c truncates (1500 ->
    "1k"); the caller knows the exact -I it asked for.
    """
    rows: list[dict] = []
    header_seen = False
    for line in text.splitlines():
        fields = line.split()
        if fields == _HEADER:
            header_seen = True
            continue
        if not header_seen or len(fields) != len(_HEADER) or not fields[4].endswith("s"):
            continue
        size, sent, ack, total, elapsed, mbps, usec, mxfers = fields
        rows.append({
            "size": _size(size),
            "sent": sent,
            "acked_all": ack.startswith("="),
            "total_bytes": total,
            "time_s": float(elapsed[:-1]),
            "mb_per_s": float(mbps),
            "usec_per_xfer": float(usec),
            "mxfers_per_s": float(mxfers),
        })
    return rows


class FiPingpong(Peer):
    def __init__(self):
        super().__init__(tool="fi_pingpong", package="libfabric-bin", cases=tuple(case_for(*c) for c in COMBOS),
                         server_exits_alone=True, poll="busy")

    def version(self) -> Optional[str]:
        """libfabric's version, as `fi_info --version` reports it."""
        return probe_version(("fi_info", "--version"), r"^libfabric:\s*(\S+)")

    def selected(self, params: PeerRun) -> list[Case]:
        return [c for c in self.cases if provider_ep(c)[0] in params.transports]

    def command(self, role: str, case: Case, params: PeerRun, port: int) -> list[str]:
        provider, ep = provider_ep(case)
        argv = ["fi_pingpong", "-p", provider, "-e", ep, "-I", str(params.iters), "-S", str(case.size(params))]
        if provider in LOOPBACK_DOMAIN:
            argv += ["-d", LOOPBACK_DOMAIN[provider]]
        if role == "server":
            return pinned([*argv, "-B", str(port)], params.server_cpu)
        return pinned([*argv, "-P", str(port), "127.0.0.1"], params.client_cpu)

    def parse(self, text: str, case: Case) -> list[dict]:
        provider, ep = provider_ep(case)
        rows = parse_table(text)
        if len(rows) > 1:
            raise PeerError(f"expected one result row from fi_pingpong, got {len(rows)}")
        return [point(self.tool, case, transport="ofi", provider=provider, ep=ep, size=row["size"],
                      latency_kind="rtt/2", latency_ns={"mean": round(row["usec_per_xfer"] * 1000.0, 3)},
                      statistic="mean", statistic_note=NOTE, raw=row) for row in rows]

    def measured_count(self, p: dict, case: Case, params: PeerRun) -> Optional[float]:
        return params.iters

    def measure(self, case: Case, params: PeerRun) -> list[dict]:
        points = super().measure(case, params)
        for p in points:
            p["iterations"] = params.iters  # exact; the table rounds it
        return points


PEER = FiPingpong()
