"""Two-host mode: `fabmeter serve` on one side, `fabmeter lat --server` on
the other; over loopback, and (as root) across two network namespaces
joined by a veth pair whose addresses this test creates and removes."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from conftest import json_lines, veth_namespaces


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_listening(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, f"server printed nothing; stderr: {proc.stderr.read() if proc.poll() is not None else ''}"
    event = json.loads(line)
    assert event["event"] == "listening", event
    return event


def test_serve_once_loopback(fm):
    port = free_port()
    server = fm.popen("serve", "--bind", "127.0.0.1", "--port", port, "--once", "--cpu", "1")
    try:
        event = read_listening(server)
        assert event["port"] == port
        r = fm.run("lat", "-t", "tcp", "--server", f"127.0.0.1:{port}", "-n", "2000", "--cpus", "0", "--json", timeout=60)
        assert r.returncode == 0, r.stderr
        (p,) = json_lines(r.stdout)
        assert p["transport"] == "tcp" and p["iterations"] == 2000
        assert server.wait(timeout=10) == 0, "--once server should exit after the session"
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()


@pytest.fixture
def netns_pair():
    """Two namespaces A and B, veth A<->B, 10.199.N.1/24 in A and .2 in B."""
    net = f"10.199.{os.getpid() % 250}"
    with veth_namespaces("fm", net) as (ns_a, ns_b, _, _):
        yield ns_a, ns_b, f"{net}.1"


@pytest.mark.parametrize("transport", ["tcp", "udp"])
def test_two_namespaces_over_veth(fm, netns_pair, transport):
    ns_a, ns_b, server_addr = netns_pair
    server = fm.popen("serve", "--bind", server_addr, "--port", "0", "--once", "--cpu", "1",
                      prefix=("ip", "netns", "exec", ns_a))
    try:
        port = read_listening(server)["port"]
        r = subprocess.run(["ip", "netns", "exec", ns_b, *fm_cmd("lat", "-t", transport, "--server",
                                                                  f"{server_addr}:{port}", "-n", "2000", "--cpus", "0",
                                                                  "--json")],
                           env=fm.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        (p,) = json_lines(r.stdout)
        assert p["transport"] == transport and p["iterations"] == 2000
        assert server.wait(timeout=10) == 0
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()


def fm_cmd(*args):
    from conftest import cli_cmd
    return cli_cmd(*args)
