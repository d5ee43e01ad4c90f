"""The delay line (tests/delay_line.py, engine/tools/delay_line.cpp): a
100 us delay on one direction of a link shows in fabmeter's round trips over
that link and not over the others; the program's counters are the packets
the rule sent it; it stops cleanly on SIGTERM and leaves no rule behind.

Timing is asserted loosely (the machine is shared): the minimum RTT rises by
at least 0.8x the delay, the median by less than 10x."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import bridged_namespaces, veth_namespaces
from delay_line import delay_line
from lossy import LossyPair

DELAY_US = 100
LAT = ["lat", "-s", "32", "-n", "300", "--warmup", "50", "--poll", "event"]


def rtt_us(pair: LossyPair, fm, transport: str = "udp") -> dict:
    with pair.server(fm) as port:
        p = pair.client(fm, port, *LAT, "-t", transport)
    assert p["lost"] == 0, p
    return {k: p["rtt_ns"][k] / 1000 for k in ("min", "p50")}


def assert_delayed(base: dict, delayed: dict) -> None:
    assert delayed["min"] >= base["min"] + 0.8 * DELAY_US, (base, delayed)
    assert delayed["p50"] < base["p50"] + 10 * DELAY_US, (base, delayed)


def assert_not_delayed(base: dict, other: dict) -> None:
    assert other["min"] < base["min"] + 0.5 * DELAY_US, (base, other)


def queue_rules(ns: str) -> list[str]:
    saved = subprocess.run(["ip", "netns", "exec", ns, "iptables-save"], capture_output=True, text=True,
                           timeout=30, check=True).stdout
    return [ln for ln in saved.splitlines() if "NFQUEUE" in ln]


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_delay_shows_in_the_round_trip_and_the_counters_match(fm, transport):
    net = f"10.197.{os.getpid() % 250}"
    with veth_namespaces("fmd", net) as (ns_s, ns_c, dev_s, dev_c):
        pair = LossyPair(ns_s, ns_c, f"{net}.1", {ns_s: dev_s, ns_c: dev_c})
        base = rtt_us(pair, fm, transport)
        # The client's packets to the server (over tcp, the control channel's too).
        with delay_line(ns_c, DELAY_US, ["-p", transport, "-d", pair.server_addr]) as line:
            delayed = rtt_us(pair, fm, transport)
            rule_packets = line.rule_packets()
            assert queue_rules(ns_c)
        print("rtt us without", base, "with", delayed, "delay line", line.counters)
        assert_delayed(base, delayed)
        c = line.counters
        assert c["packets"] == rule_packets >= 300 + 50, (c, rule_packets)
        assert c["delayed"] + c["flushed"] == c["packets"] and c["dropped"] == c["kernel_dropped"] == 0, c
        assert c["max_held"] >= 1, c
        assert not queue_rules(ns_c)
        after = rtt_us(pair, fm, transport)  # the rule is gone: so is the delay
        assert_not_delayed(base, after)


def test_delay_on_one_link_of_a_bridge_shows_only_there(fm):
    """A, B and C on a bridge, the delay on A's packets to C only (the shape
    of mesh's matrix test): A-C's round trip carries it, A-B's does not."""
    net = f"10.196.{os.getpid() % 250}"
    with bridged_namespaces("fmdb", net, 3) as [(ns_a, _), (ns_b, addr_b), (ns_c, addr_c)]:
        a_b, a_c = LossyPair(ns_b, ns_a, addr_b, {}), LossyPair(ns_c, ns_a, addr_c, {})
        with delay_line(ns_a, DELAY_US, ["-d", addr_c]) as line:
            rtt_b, rtt_c = rtt_us(a_b, fm), rtt_us(a_c, fm)
            rule_packets = line.rule_packets()
        print("rtt us A-B", rtt_b, "A-C", rtt_c, "delay line", line.counters)
        assert_delayed(rtt_b, rtt_c)
        assert line.counters["packets"] == rule_packets, (line.counters, rule_packets)
        assert not queue_rules(ns_a)


def test_limit_drops_and_sigterm_flushes_what_is_held():
    """Five datagrams into a 2 s delay line that holds at most three: two are
    dropped, and SIGTERM accepts the three it holds at once (flushed)."""
    net = f"10.195.{os.getpid() % 250}"
    with veth_namespaces("fmdl", net) as (ns, _, _, _):
        with delay_line(ns, 2_000_000, ["-o", "lo", "-p", "udp", "--dport", "9"], limit=3) as line:
            send = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n" \
                   "for _ in range(5): s.sendto(b'x', ('127.0.0.1', 9))"
            subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", send], check=True, timeout=30)
            assert line.rule_packets() == 5
        c = line.counters
        assert (c["packets"], c["dropped"], c["flushed"], c["delayed"], c["max_held"]) == (5, 2, 3, 0, 3), c
        assert not queue_rules(ns)
