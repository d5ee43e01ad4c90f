"""The messaging-library transports (those that read the messaging options:
zmq, nng, nanomsg) end to end, and the libraries' own ping-pongs (rawpp_*)
that `make bench` puts beside them.

The cases are the transports the engine was built with. Counts are small and
timing values are never asserted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import POLLS, built_transports, json_lines, need_transport, one_line_error
from fabmeter.peers import rawpp
from test_matrix import ARGS, check_point, check_stages

MESSAGING = built_transports("messaging")
WARMUP = ["--warmup", "100"]  # the default 1000 round trips cost more than the measured ones here


def granted(out) -> dict:
    doc = json.loads((out / "run.json").read_text())
    assert doc["status"] == "ok"
    (info,) = [e for e in doc["engine_events"] if e.get("type") == "transport"]
    return info["granted"]


@pytest.mark.parametrize("experiment", ["lat", "oneway", "bw"])
@pytest.mark.parametrize("poll", POLLS)
@pytest.mark.parametrize("transport", MESSAGING)
def test_run(fm, tmp_path, transport, poll, experiment):
    out = tmp_path / "out"
    r = fm.run(experiment, "-t", transport, "--poll", poll, *ARGS[experiment], *WARMUP, "--json", "--out", out)
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    check_point(p, experiment, transport, poll, 32)
    assert p["lost"] == 0, "a reliable transport lost messages"
    if experiment != "bw":
        kind = "rtt_ns" if experiment == "lat" else "latency_ns"
        samples = np.load(out / p["samples"][kind])
        assert samples.size == p["iterations"]
        assert p[kind]["p50"] == pytest.approx(np.percentile(samples, 50), rel=1e-6)
    if experiment == "oneway":
        check_stages(p, out, send_completions=False)
    g = granted(out)
    assert g["library_version"] and g["library_version"][0].isdigit(), g
    assert g["endpoint"].startswith("tcp://127.0.0.1:"), "default: tcp beside the control channel"
    assert int(g["endpoint"].rsplit(":", 1)[1]) > 0, "the port actually bound, not 0 or *"


@pytest.mark.parametrize("transport", MESSAGING)
def test_ipc_endpoint(fm, tmp_path, transport):
    # ipc:// with no path: the server makes the socket file in a private
    # directory of its own, tells the client, and removes both at the end.
    out = tmp_path / "out"
    r = fm.run("lat", "-t", transport, "--endpoint", "ipc://", "-n", "500", *WARMUP, "--json", "--out", out)
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["iterations"] == 500 and p["partial"] is False
    endpoint = granted(out)["endpoint"]
    assert endpoint.startswith("ipc:///") and endpoint.endswith(f"/{transport}.sock"), endpoint
    sock = Path(endpoint[len("ipc://"):])
    assert not sock.exists() and not sock.parent.exists(), "the server removes its socket file and directory"


@pytest.mark.parametrize("transport", MESSAGING)
def test_ipc_path_from_client_is_refused(fm, tmp_path, transport):
    # The old server bound at the client's path and then unlinked "its"
    # socket file there: any client could delete any file on the server host.
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    r = fm.run("lat", "-t", transport, "--endpoint", f"ipc://{victim}", "-n", "100", *WARMUP, timeout=30)
    assert victim.exists() and victim.read_text() == "precious\n", "the server deleted a file the client named"
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "the server names its ipc socket file itself" in one_line_error(r.stderr)


@pytest.mark.parametrize("endpoint,needle", [
    ("tcp://127.0.0.1:80", "ports below 1024 are refused"),
    ("tcp://10.255.255.1:5555", "the server listens only on the address the client reached it at"),
])
def test_client_named_tcp_endpoint_bounded(fm, endpoint, needle):
    # The server binds only its own control address, and no port below 1024.
    need_transport("zmq")
    r = fm.run("lat", "-t", "zmq", "--endpoint", endpoint, "-n", "100", *WARMUP, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert needle in one_line_error(r.stderr)


@pytest.mark.parametrize("transport", MESSAGING)
def test_wildcard_endpoint(fm, tmp_path, transport):
    # * means the server's control address (the server never listens on
    # every address for a client), on a free port actually bound.
    out = tmp_path / "out"
    r = fm.run("lat", "-t", transport, "--endpoint", "tcp://*:*", "-n", "200", *WARMUP, "--json", "--out", out)
    assert r.returncode == 0, r.stderr
    endpoint = granted(out)["endpoint"]
    assert endpoint.startswith("tcp://127.0.0.1:") and not endpoint.endswith((":0", ":*")), endpoint


@pytest.mark.parametrize("endpoint,needle", [
    ("inproc://fabmeter", "inproc://"),
    ("udp://127.0.0.1:5555", "expected tcp://HOST:PORT or ipc://"),
    ("tcp://127.0.0.1", "expected tcp://HOST:PORT"),
])
@pytest.mark.parametrize("transport", MESSAGING)
def test_endpoint_refused(fm, transport, endpoint, needle):
    r = fm.run("lat", "-t", transport, "--endpoint", endpoint, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert needle in one_line_error(r.stderr)
    assert r.stdout == ""


@pytest.mark.parametrize("transport", MESSAGING)
def test_sweep_to_64k(fm, transport):
    r = fm.run("lat", "-t", transport, "-a", "--max-size", "64K", "-n", "100", "--warmup", "10", "--json")
    assert r.returncode == 0, r.stderr
    points = json_lines(r.stdout)
    assert [p["size"] for p in points] == [1 << i for i in range(17)]  # 1 B .. 64 KiB
    for p in points:
        assert (p["experiment"], p["transport"], p["iterations"], p["lost"]) == ("lat", transport, 100, 0)
        lat = p["latency_ns"]
        assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"]


@pytest.mark.parametrize("mode", POLLS)
@pytest.mark.parametrize("lib", rawpp.LIBS)
def test_rawpp(engine, lib, mode, monkeypatch):
    need_transport(lib)
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))

    cpus = sorted(os.sched_getaffinity(0))[:2]
    res = rawpp.run(lib, mode, size=64, iters=300, cpus=cpus if len(cpus) == 2 else None, warmup=50, timeout_s=30)
    assert (res["tool"], res["mode"], res["size"], res["iterations"], res["warmup"]) == (f"rawpp_{lib}", mode, 64, 300, 50)
    assert res["rtt_ns_p50"] > 0 and res["rtt_ns_mean"] > 0
    assert res["oneway_ns_p50"] == pytest.approx(res["rtt_ns_p50"] / 2, abs=0.1)  # printed to 0.1 ns
    assert res["latency_kind"] == "rtt/2"
    assert res["library_version"][0].isdigit(), res
    assert res["endpoint"].startswith("tcp://127.0.0.1:")
    assert (res["io_cpu"], res["io_threads"], res["io_cpus"]) == (-1, 0, None), res


@pytest.mark.parametrize("lib", rawpp.LIBS)
def test_rawpp_places_the_librarys_threads(engine, lib, monkeypatch):
    """The raw loop's library threads go where asked, as fabmeter's --io-cpu puts them: here each end's on the
    other end's CPU (the client reports how many of its threads it moved)."""
    need_transport(lib)
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    res = rawpp.run(lib, "busy", size=64, iters=300, cpus=cpus, warmup=50, timeout_s=30, io_cpus=cpus[::-1])
    assert res["io_cpu"] == cpus[1] and res["io_threads"] >= 1 and res["io_cpus"] == cpus[::-1], res
