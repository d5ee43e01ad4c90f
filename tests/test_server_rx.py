"""load --server-rx shared: several server threads reading one connection's
socket, as Homa's receiver threads share one port.

Every thread must have answered requests (the work really was spread), the
per-thread counts must add up to the server's, and nothing may be garbled:
on udp each thread reads datagrams into a buffer of its own, on tcp whole
messages under a lock, so a shared buffer or a message split between two
threads would show as stale replies, malformed requests or a failed run.
Transports that serve a connection from one thread refuse it (exit 2, in
--dry-run too).
"""

from __future__ import annotations

import json

import pytest

from conftest import json_lines, one_line_error, refusal


@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_shared_socket_spreads_requests_over_threads(fm, transport, threads):
    # A service time keeps a thread busy with one request while the next
    # arrives, so the others take their share even when one polls fastest.
    r = fm.run("load", "-t", transport, "--server-rx", "shared", "--server-threads", str(threads),
               "--service-ns", "100000", "--rate", "3000", "--count", "1500", "--warmup", "100",
               "--workload", "w1", "--max-size", "1K", "--loss-timeout-ms", "5000", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    server = p["server"]
    assert (p["server_threads"], p["server_rx"], p["conns"]) == (threads, "shared", 1)
    per = server["requests_per_thread"]
    assert len(per) == threads and all(n > 0 for n in per), per
    assert sum(per) == server["requests"], server
    assert server["requests"] >= p["completed"] + p["warmup_sent"] - p["warmup_lost"], (server, p)
    # A reply is stale only when it came after its request was counted lost (late, not garbled).
    assert server["malformed"] == 0 and p["stale_replies"] <= p["lost"] + p["warmup_lost"] + p["probes_lost"], p
    assert p["requests"] == 1500 and p["sent"] == p["completed"] + p["lost"], p
    if transport == "tcp":
        assert p["lost"] == 0, p
    if threads < 4:
        return
    # The pools are the one socket's, sampled by one thread, not counted once per reader.
    one = fm.run("load", "-t", transport, "--rate", "1000", "--count", "200", "--json")
    assert one.returncode == 0, one.stderr
    assert server["pools"]["rx_capacity"] == json_lines(one.stdout)[0]["server"]["pools"]["rx_capacity"]


def test_shared_socket_in_event_mode(fm):
    r = fm.run("load", "-t", "udp", "--poll", "event", "--server-rx", "shared", "--server-threads", "2",
               "--service-ns", "100000", "--rate", "3000", "--count", "1000", "--warmup", "100", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    per = p["server"]["requests_per_thread"]
    assert len(per) == 2 and all(n > 0 for n in per) and sum(per) == p["server"]["requests"], per


def test_own_connections_count_per_thread(fm, tmp_path):
    r = fm.run("load", "-t", "tcp", "--conns", "2", "--threads", "2", "--server-threads", "2", "--rate", "4000",
               "--count", "800", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    (p,) = json.loads((tmp_path / "run.json").read_text())["points"]
    per = p["server"]["requests_per_thread"]
    assert p["server_rx"] == "own" and len(per) == 2 and all(n > 0 for n in per), per
    assert sum(per) == p["server"]["requests"]
    assert "requests each server thread answered (each its own connections)" in r.stdout, r.stdout


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_transport_without_readers_refuses_shared(fm, engine, dry_run):
    args = ["load", "-t", "shm", "--server-rx", "shared", "--server-threads", "2", "--rate", "1000", "--count", "100"]
    said = refusal(fm, engine, args, dry_run)
    assert "--server-rx shared needs a socket several threads can read" in said, said


@pytest.mark.parametrize("args, says", [
    (["--server-rx", "shared", "--server-threads", "65"], "--server-threads must be at most 64"),
    (["--server-rx", "shared", "--poll", "event", "--conns", "2", "--threads", "2"], "give --conns 1"),
    (["--server-rx", "many"], "--server-rx"),
    (["--server-threads", "2"], "--server-rx shared lets every server thread read every connection"),
])
def test_bad_shapes_one_line_exit_2(fm, args, says):
    r = fm.run("load", "-t", "udp", "--rate", "1000", *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert says in one_line_error(r.stderr)
