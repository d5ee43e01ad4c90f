"""The peer adapters `fabmeter peers` knows, by tool name."""

from __future__ import annotations

from fabmeter.peers import fi_pingpong, iperf3, mpibench, perftest, qperf, sockperf, ucx_perftest
from fabmeter.peers.base import Peer

PEERS: dict[str, Peer] = {p.tool: p for p in (sockperf.PEER, qperf.PEER, iperf3.PEER, ucx_perftest.PEER,
                                               fi_pingpong.PEER, perftest.PEER, mpibench.PEER)}
