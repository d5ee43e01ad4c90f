"""Random packet drops between two network namespaces, counted by the kernel.

The kernel here has no netem, but nftables' `numgen random` drops a chosen
share of packets and a named counter beside the rule says exactly how many it
dropped. Two namespaces joined by a veth pair (addresses only there), the
server in one, the client in the other, the same drop rule on the input hook
of both: the sum of the two counters, plus the few other places where the
kernel drops (a full socket receive buffer, the veth queue), is the number of
packets that never arrived. With messages that fit in one packet that is the
number of messages a loss-counting experiment must report lost.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import contextmanager

import pytest

from conftest import cli_cmd, json_lines, veth_namespaces

TABLE = "fmloss"


def _sh(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30, **kw)


class LossyPair:
    """Namespaces `server` and `client`; `drop()` installs the rule, `dropped()` reads the counters."""

    def __init__(self, ns_server: str, ns_client: str, server_addr: str, devs: dict):
        self.ns_server, self.ns_client, self.server_addr = ns_server, ns_client, server_addr
        self.devs = devs  # namespace -> veth name
        self._base: dict = {}

    def drop(self, proto: str, percent: float, spare_port: int | None = None, warmup: int = 0) -> None:
        """Drops `percent` % of the `proto` (udp or tcp) packets entering either
        namespace, except those to or from `spare_port` (the control channel).
        With `warmup`, udp payloads that start with a little-endian sequence
        number below it (fabmeter's warm-up messages) count apart."""
        assert 0 <= warmup < 256  # matched on the first byte of the sequence number
        chance = f"numgen random mod 1000000 < {round(percent * 10_000)}"
        spare = f"{proto} dport != {spare_port} {proto} sport != {spare_port} " if spare_port else ""
        # @th,64: the first payload byte after the 8-byte udp header.
        warm = f"meta l4proto udp @th,72,24 0 @th,64,8 < {warmup} jump warmup" if warmup else ""
        ruleset = f"""
table inet {TABLE}
delete table inet {TABLE}
table inet {TABLE} {{
  counter seen {{ }}
  counter dropped {{ }}
  counter dropped_warmup {{ }}
  chain warmup {{
    {chance} counter name "dropped_warmup" drop
    accept
  }}
  chain input {{
    type filter hook input priority 0; policy accept;
    meta l4proto {proto} {spare}counter name "seen"
    {warm}
    meta l4proto {proto} {spare}{chance} counter name "dropped" drop
  }}
}}
"""
        for ns in (self.ns_server, self.ns_client):
            _sh("ip", "netns", "exec", ns, "nft", "-f", "-", input=ruleset)
        self._base = self._other_drops()

    def _counter(self, ns: str, name: str) -> int:
        out = _sh("ip", "netns", "exec", ns, "nft", "-j", "list", "counter", "inet", TABLE, name).stdout
        (c,) = [o["counter"] for o in json.loads(out)["nftables"] if "counter" in o]
        return c["packets"]

    def _other_drops(self) -> dict:
        """Per namespace: UDP datagrams dropped at the socket (InErrors counts a
        full receive buffer), datagrams for a closed port, veth queue drops."""
        d = {}
        for ns, dev in self.devs.items():
            snmp = _sh("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").stdout.splitlines()
            names, values = [ln.split()[1:] for ln in snmp if ln.startswith("Udp:")][:2]
            udp = dict(zip(names, map(int, values)))
            (link,) = json.loads(_sh("ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev).stdout)
            st = link["stats64"]
            d[ns] = {"udp_in_errors": udp["InErrors"], "udp_no_ports": udp["NoPorts"],
                     "veth_dropped": st["rx"]["dropped"] + st["tx"]["dropped"]}
        return d

    def dropped(self) -> dict:
        """What the kernel dropped since `drop()`: `rule` (the random drops),
        `rule_warmup` (those of warm-up messages, apart from `rule`),
        `other` (receive buffers, veth), `no_port` (arrived after the socket
        closed: late, not dropped; reported, not part of the truth), `seen`."""
        now = self._other_drops()
        delta = {k: sum(now[ns][k] - self._base[ns][k] for ns in now) for k in now[self.ns_server]}
        both = (self.ns_server, self.ns_client)
        return {"rule": sum(self._counter(ns, "dropped") for ns in both),
                "rule_warmup": sum(self._counter(ns, "dropped_warmup") for ns in both),
                "seen": sum(self._counter(ns, "seen") for ns in both),
                "other": delta["udp_in_errors"] + delta["veth_dropped"],
                "no_port": delta["udp_no_ports"]}

    def tcp_retransmits(self) -> int:
        total = 0
        for ns in (self.ns_server, self.ns_client):
            snmp = _sh("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").stdout.splitlines()
            names, values = [ln.split()[1:] for ln in snmp if ln.startswith("Tcp:")][:2]
            total += int(dict(zip(names, values))["RetransSegs"])
        return total

    @contextmanager
    def server(self, fm):
        """`fabmeter serve --once` in the server namespace; yields its port."""
        proc = fm.popen("serve", "--bind", self.server_addr, "--port", "0", "--once", "--cpu", "1",
                        prefix=("ip", "netns", "exec", self.ns_server))
        self.server_proc = proc
        try:
            line = proc.stdout.readline()
            assert line, f"server printed nothing: {proc.stderr.read() if proc.poll() is not None else ''}"
            event = json.loads(line)
            assert event["event"] == "listening", event
            yield event["port"]
            assert proc.wait(timeout=30) == 0, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()

    def client(self, fm, port: int, *args, timeout: float = 90) -> dict:
        """One client run against the server; returns its one point."""
        cmd = ["ip", "netns", "exec", self.ns_client,
               *cli_cmd(*args, "--server", f"{self.server_addr}:{port}", "--cpus", "0", "--json")]
        r = subprocess.run(cmd, env=fm.env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            server = getattr(self, "server_proc", None)
            said = ""
            if server is not None:
                # A serve --once that never had a session waits on: stopped, it says what it made of the
                # connection (e.g. "said nothing within 2 s").
                try:
                    server.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    server.terminate()
                    server.wait(timeout=10)
                    said = "(still running: stopped) "
                said += server.stderr.read()
            raise AssertionError(f"client: {r.stderr.strip()}; server: {said.strip()}")
        (point,) = json_lines(r.stdout)
        return point


@pytest.fixture
def lossy_pair():
    """Two fresh namespaces joined by a veth pair, 10.198.N.1 (server) and .2;
    deleted afterwards, whatever happened (that removes the veth and the rules)."""
    if not shutil.which("nft"):
        pytest.skip("needs nft (nftables; scripts/install-deps.sh installs it)")
    net = f"10.198.{os.getpid() % 250}"
    # One tcp segment per packet, as on a wire (veth would pass 64 KiB GSO packets).
    with veth_namespaces("fml", net, "gso_max_segs", "1") as (ns_s, ns_c, dev_s, dev_c):
        yield LossyPair(ns_s, ns_c, f"{net}.1", {ns_s: dev_s, ns_c: dev_c})
