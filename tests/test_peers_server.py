"""`fabmeter peers --server`: each tool's server side started by the other
host's `fabmeter serve`, from its allow-list only (docs/security.md, "Peer
tools a client may start").

Two network namespaces joined by a veth pair: serve in A, the clients in B.
The allow-list is attacked through `fabmeter-engine tool` itself, the
client the CLI uses, and the serve's process tree is read from /proc."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ENGINE, free_port, json_lines, serve_across_namespaces, stop_serves, wait_until

TOOLS = ("sockperf", "qperf", "iperf3")


def descendants(pid: int) -> dict[int, str]:
    """Every live process below `pid`: pid -> its command name."""
    parent, comm = {}, {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if rest[0] in "ZX":
            continue
        parent[int(d.name)], comm[int(d.name)] = int(rest[1]), name
    found, todo = {}, [pid]
    while todo:
        p = todo.pop()
        for child, pp in parent.items():
            if pp == p and child not in found:
                found[child] = comm[child]
                todo.append(child)
    return found


def strangers(serve: subprocess.Popen) -> dict[int, str]:
    """Processes under the serve that are not fabmeter's own (the CLI, its engine, their sessions)."""
    return {p: c for p, c in descendants(serve.pid).items() if c not in ("fabmeter-engine", "python3", "python")}


def tool_client(addr: str, request, token_file: str, prefix=()) -> subprocess.Popen:
    req = request if isinstance(request, str) else json.dumps(request)
    return subprocess.Popen([*prefix, str(ENGINE), "tool", "--server", addr, "--request", req, "--token-file",
                             token_file], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.fixture
def serve_here(fm, token_file):
    port = str(free_port())
    serve = fm.popen("serve", "--bind", "127.0.0.1", "--port", port, "--token-file", token_file)
    assert json.loads(serve.stdout.readline())["event"] == "listening"
    yield serve, f"127.0.0.1:{port}"
    stop_serves([serve])


REFUSED = {
    "unknown tool": ({"tool": "bash"}, "not a tool this server starts"),
    "a path as the tool": ({"tool": "/usr/bin/sockperf", "proto": "tcp"}, "not a tool this server starts"),
    "an extra argument": ({"tool": "qperf", "args": "--loc_id x"}, "takes no argument 'args'"),
    "an option of another tool": ({"tool": "iperf3", "size": 64}, "takes no argument 'size'"),
    "a path as the device": ({"tool": "ib_send_lat", "device": "../../../etc/passwd"}, "not an RDMA device name"),
    "a number out of range": ({"tool": "ib_send_lat", "size": 99999999999}, "out of range"),
    "a negative number": ({"tool": "ib_write_bw", "iters": -1}, "whole number"),
    "a number as text": ({"tool": "ib_read_lat", "iters": "5; reboot"}, "whole number"),
    "a lifetime over the bound": ({"tool": "iperf3", "lifetime_s": 86400}, "out of range"),
    "a connection the tool lacks": ({"tool": "ib_read_bw", "conn": "UD"}, "does not run over UD"),
    "inline on a one-sided test": ({"tool": "ib_read_lat", "inline": 64}, "takes no argument 'inline'"),
    "bidir on a latency test": ({"tool": "ib_send_lat", "bidir": True}, "takes no argument 'bidir'"),
    "a flag as a number": ({"tool": "ib_send_bw", "bidir": 1}, "true or false"),
    "inline over the bound": ({"tool": "ib_send_lat", "inline": 4096}, "out of range"),
    "rdma_cm over UC, which perftest -R refuses": ({"tool": "ib_send_lat", "conn": "UC", "cm": "rdma_cm"},
                                                    "rdma_cm cannot connect UC"),
    "a connection manager perftest lacks": ({"tool": "ib_send_bw", "cm": "ucx"}, "cm must be one of raw, rdma_cm"),
    "cm for a socket tool": ({"tool": "sockperf", "proto": "tcp", "cm": "rdma_cm"}, "takes no argument 'cm'"),
    "not an object": ('["sockperf", "server"]', "a JSON object"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_the_allow_list_refuses(serve_here, token_file, case):
    serve, addr = serve_here
    request, reason = REFUSED[case]
    client = tool_client(addr, request, token_file)
    out, err = client.communicate(timeout=30)
    assert client.returncode == 2, (out, err)
    assert reason in err and "ready" not in out, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
    assert not strangers(serve), "the serve started something"


def test_a_tool_is_held_and_ended(serve_here, token_file):
    """The positive control: sockperf shows up under the serve while held, and is gone (killed and reaped)
    when the client closes its input, when the client dies, and when its lifetime passes."""
    if not shutil.which("sockperf"):
        pytest.skip("sockperf not installed")
    serve, addr = serve_here
    client = tool_client(addr, {"tool": "sockperf", "proto": "udp"}, token_file)
    ready = json.loads(client.stdout.readline())
    assert ready["type"] == "ready" and ready["ready"] and 0 < ready["port"] < 65536
    assert ready["server_argv"][0].endswith("/sockperf") and ready["server_argv"][1:3] == ["server", "-i"]
    assert "sockperf" in strangers(serve).values()
    client.stdin.close()
    (end,) = json_lines(client.stdout.read())
    assert client.wait(timeout=10) == 0
    assert end["type"] == "end" and end["why"] == "stopped" and end["user_s"] >= 0 and end["window_s"] > 0
    assert not strangers(serve)

    client = tool_client(addr, {"tool": "sockperf", "proto": "tcp"}, token_file)
    assert json.loads(client.stdout.readline())["ready"]
    assert "sockperf" in strangers(serve).values()
    client.kill()   # no stop, no bye: the server notices the closed channel
    client.communicate()
    assert wait_until(lambda: not strangers(serve), 8), strangers(serve)

    client = tool_client(addr, {"tool": "sockperf", "proto": "tcp", "lifetime_s": 1}, token_file)
    assert json.loads(client.stdout.readline())["ready"]
    (end,) = json_lines(client.stdout.read())   # the server ends it without our stop
    assert end["why"] == "lifetime"
    assert client.wait(timeout=10) == 0
    assert not strangers(serve)


def test_a_server_without_a_token_starts_nothing(fm, token_file):
    port = str(free_port())
    serve = fm.popen("serve", "--bind", "127.0.0.1", "--port", port)
    try:
        assert json.loads(serve.stdout.readline())["event"] == "listening"
        client = subprocess.run([str(ENGINE), "tool", "--server", f"127.0.0.1:{port}", "--request",
                                 '{"tool":"iperf3"}'], capture_output=True, text=True, timeout=30,
                                env={k: v for k, v in os.environ.items() if k != "FABMETER_TOKEN"})
        assert client.returncode == 2 and "only for authenticated clients" in client.stderr, client.stderr
        assert not strangers(serve)
    finally:
        stop_serves([serve])


def test_peers_between_two_namespaces(fm, token_file, tmp_path):
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    net = f"10.198.{os.getpid() % 250}"
    with serve_across_namespaces(fm, "fp", net, token_file) as (serve, server, ns):
        r = fm.run("peers", "--server", server, "--token-file", token_file, "--tools", ",".join(TOOLS),
                   "--transports", "tcp,udp", "-n", "2000", "--duration", "1", "--json", "--out",
                   str(tmp_path / "out"), prefix=ns, timeout=180)
        assert r.returncode == 0, r.stderr
        recs = json_lines(r.stdout)
        points = [p for p in recs if p["type"] == "point"]
        got = {(p["tool"], p["experiment"], p["transport"]) for p in points}
        assert got == {("sockperf", "lat", "tcp"), ("sockperf", "lat", "udp"), ("sockperf", "load", "tcp"),
                       ("sockperf", "load", "udp"), ("qperf", "lat", "tcp"), ("qperf", "lat", "udp"),
                       ("qperf", "bw", "tcp"), ("iperf3", "bw", "tcp")}, [r for r in recs if r["type"] != "point"]
        for p in points:
            assert p["server"] == server
            assert Path(p["server_command"][0]).name == p["tool"]
            assert server.split(":")[0] in p["command"], p["command"]   # the client went to the other namespace
            assert p["cpu"]["server"]["window_s"] > 0 and p["cpu"]["server"]["cpu_s"] >= 0
        assert not strangers(serve), "a tool outlived its session"
        doc = json.loads((tmp_path / "out" / "peers.json").read_text())
        assert doc["params"]["server"] == server and len(doc["points"]) == len(points)
