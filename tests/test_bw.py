"""bw specifics beyond the matrix: the end-of-run protocol, --size-spread."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from conftest import json_lines, veth_namespaces


@pytest.mark.parametrize("bidir", [False, True])
@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_send_phase_longer_than_timeout_is_not_a_failure(fm, transport, bidir):
    # The drain deadline (--timeout-ms) starts when both ends are done
    # sending; a send phase many times longer must still end cleanly.
    args = ["bw", "-t", transport, "-s", "64K", "-n", "20000", "--timeout-ms", "500", "--json"]
    r = fm.run(*args, *(["--bidir"] if bidir else []), timeout=120)
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["lost"] == 0 and not p["partial"] and p["gbps"] > 0
    if bidir:
        assert p["gbps"] == pytest.approx(p["gbps_c2s"] + p["gbps_s2c"])


@pytest.mark.parametrize("experiment, args", [
    ("bw", ["-n", "10", "--warmup", "2"]),
    ("bw", ["-n", "10", "--warmup", "2", "--bidir"]),
    ("oneway", ["--bursts", "1", "--burst-size", "6", "--warmup", "0", "--pause-us", "0"]),
])
def test_tail_of_a_partial_tcp_send_is_flushed_before_the_end(fm, experiment, args):
    # 4 MiB messages do not fit a socket buffer: tcp keeps the tail of the
    # last send itself, and the sender must push it out before it announces
    # its count (otherwise the receiver waits for a message that never comes).
    r = fm.run(experiment, "-t", "tcp", "-s", "4M", *args, "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["lost"] == 0 and not p["partial"]


def _nft_counters(ns: str) -> dict:
    out = subprocess.run(["ip", "netns", "exec", ns, "nft", "-j", "list", "counters", "table", "inet", "fmspread"],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    return {c["counter"]["name"]: c["counter"] for c in json.loads(out)["nftables"] if "counter" in c}


@pytest.mark.parametrize("spread", [0, 50])
def test_size_spread_puts_the_sizes_on_the_wire(fm, spread):
    """bw -s 1K --size-spread 50 over udp between two namespaces: the kernel's
    counters (nftables, on the server's input) see every datagram; their mean
    payload is the point's mean_size, and a quarter of them fall in the lowest
    quarter of 512 .. 1536 B (none do without the spread)."""
    if not shutil.which("nft"):
        pytest.skip("nft missing (nftables)")
    net = f"10.194.{os.getpid() % 250}"
    with veth_namespaces("fmsp", net) as (ns_a, ns_b, _, _):
        subprocess.run(["ip", "netns", "exec", ns_b, "nft", "-f", "-"], check=True, text=True, timeout=30, input="""
table inet fmspread {
  counter datagrams { }
  counter low { }
  chain input {
    type filter hook input priority 0; policy accept;
    meta l4proto udp counter name "datagrams"
    udp length < 776 counter name "low"
  }
}""")
        server = fm.popen("serve", "--bind", f"{net}.2", "--port", "0", "--once", prefix=("ip", "netns", "exec", ns_b))
        try:
            port = json.loads(server.stdout.readline())["port"]
            r = fm.run("bw", "-t", "udp", "-s", "1K", "--size-spread", spread, "-n", "4000", "--warmup", "100",
                       "--server", f"{net}.2:{port}", "--json", prefix=("ip", "netns", "exec", ns_a))
            counters = _nft_counters(ns_b)
        finally:
            server.communicate(timeout=30)
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    packets, ip_bytes = counters["datagrams"]["packets"], counters["datagrams"]["bytes"]
    assert packets == p["iterations"] + 100 and p["lost"] == 0, (counters, p)
    payload = (ip_bytes - 28 * packets) / packets        # IPv4 + UDP headers
    assert p["size_spread"] == spread
    assert p["gbps"] == pytest.approx(p["msg_rate"] * p["mean_size"] * 8 / 1e9)
    if spread:
        # The point's mean is over its measured messages, the counter's over all of them.
        assert payload == pytest.approx(p["mean_size"], rel=0.01) and p["mean_size"] != 1024
        assert 0.18 < counters["low"]["packets"] / packets < 0.32, counters
    else:
        assert payload == 1024 and p["mean_size"] == 1024 and counters["low"]["packets"] == 0


@pytest.mark.parametrize("args, why", [
    (["-a", "--max-size", "4K"], "not a sweep"),
    (["-s", "1K", "--size-spread", "91"], "0 .. 90"),
    (["-t", "udp", "-s", "60000"], "above the transport's maximum"),
])
def test_size_spread_refusals(fm, args, why):
    r = fm.run("bw", "-t", "tcp", "--size-spread", "50", *args)
    assert r.returncode == 2 and why in r.stderr, r.stderr
