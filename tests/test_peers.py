"""Peer adapters: parsing of each tool's recorded output (tests/data/peers/,
captured from the installed tools), the shared process machinery, the
missing-tool path, and one short live run per installed tool."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import TAG_VAR, cli_cmd, cli_env, json_lines, one_line_error
from fabmeter.peers import base
from fabmeter.peers.base import Case, PeerRun, Peer, PeerError, Rdma, Unsupported
from fabmeter.peers.registry import PEERS

DATA = Path(__file__).parent / "data" / "peers"
sockperf, qperf, iperf3, ucx = (PEERS[t] for t in ("sockperf", "qperf", "iperf3", "ucx_perftest"))


def recorded(name: str) -> str:
    return (DATA / name).read_text()


def only(points: list[dict]) -> dict:
    assert len(points) == 1, points
    p = points[0]
    assert p["type"] == "point" and p["peer"] is True and p["statistic_note"]
    return p


# --- parsing recorded output ---------------------------------------------------

def test_sockperf_parse_tcp():
    p = only(sockperf.parse(recorded("sockperf-lat-tcp.txt"), Case("lat", "tcp")))
    assert (p["tool"], p["experiment"], p["transport"], p["latency_kind"]) == ("sockperf", "lat", "tcp", "rtt/2")
    lat = p["latency_ns"]
    assert lat["p50"] == 31522.0 and lat["p99"] == 2062295.0 and lat["p999"] == 4227416.0
    assert lat["min"] == 14682.0 and lat["max"] == 21165734.0 and lat["p25"] == 27403.0 and lat["p9999"] == 21165734.0
    assert lat["mean"] == 109771.0 and lat["stdev"] == 533596.0
    assert p["iterations"] == 2469 and p["lost"] == 0 and p["duration_s"] == 0.542
    assert "RTT/2" in p["statistic_note"] and "nearest-rank" in p["statistic_note"]


def test_sockperf_parse_udp_and_full_rtt():
    p = only(sockperf.parse(recorded("sockperf-lat-udp.txt"), Case("lat", "udp")))
    assert p["latency_ns"]["p50"] == 27340.0 and p["iterations"] == 902
    # --full-rtt prints the same table unhalved: it must not pass for RTT/2.
    rtt = only(sockperf.parse(recorded("sockperf-lat-udp-full-rtt.txt"), Case("lat", "udp")))
    assert rtt["latency_kind"] == "rtt" and "latency_ns" not in rtt and rtt["rtt_ns"]["mean"] == 82373.0


def test_sockperf_refusals_and_mismatch():
    # sockperf 3.7 exits 0 after refusing an option; the refusal is the error.
    with pytest.raises(PeerError, match="Invalid message size: 8"):
        sockperf.parse(recorded("sockperf-invalid-size.txt"), Case("lat", "tcp"))
    with pytest.raises(PeerError, match="ran TCP, expected udp"):
        sockperf.parse(recorded("sockperf-lat-tcp.txt"), Case("lat", "udp"))
    with pytest.raises(base.Unsupported):
        sockperf.command("client", Case("lat", "tcp"), PeerRun(size=8), 1234)


def test_sockperf_parse_under_load():
    # 160000 requests/s over TCP, every one answered: the round trip from the actual send.
    p = only(sockperf.parse(recorded("sockperf-load-tcp.txt"), Case("load", "tcp")))
    assert (p["experiment"], p["transport"], p["arrivals"]) == ("load", "tcp", "fixed")
    assert p["latency_kind"] == "rtt from the actual send time" and "rtt_ns" not in p
    lat = p["latency_ns"]
    assert lat["p50"] == 40299.0 and lat["p99"] == 3354821.0 and lat["min"] == 5589.0 and lat["mean"] == 522349.0
    assert (p["sent"], p["completed"], p["lost"], p["duration_s"]) == (88065, 88065, 0, 0.55)
    assert p["achieved_rps"] == pytest.approx(88065 / 0.55) and p["iterations"] == 88065
    assert "--reply-every 1" in p["statistic_note"] and "actual send" in p["statistic_note"]
    # UDP at 40000/s lost some: counted, and the achieved rate is of replies.
    udp = only(sockperf.parse(recorded("sockperf-load-udp.txt"), Case("load", "udp")))
    assert udp["lost"] == 369 and (udp["sent"], udp["completed"]) == (22017, 21648)
    assert udp["achieved_rps"] == pytest.approx(21648 / 0.55)
    # Halved figures are not the round trip fabmeter load reports.
    with pytest.raises(PeerError, match="expected the round trip"):
        sockperf.parse(recorded("sockperf-lat-tcp.txt"), Case("load", "tcp"))


def test_qperf_parse():
    tcp = only(qperf.parse(recorded("qperf-lat-tcp.txt"), Case("lat", "tcp")))
    assert tcp["latency_ns"] == {"mean": 122429.0} and tcp["latency_kind"] == "rtt/2"
    assert tcp["size"] == 32 and tcp["duration_s"] == 1.0 and "no percentiles" in tcp["statistic_note"]
    # Its own CPU figures, named as its own; round trips for CPU per round trip: msg_rate counts both ways.
    assert tcp["tool_cpu"]["loc_cpus_used_pct"] == 200 and tcp["tool_cpu"]["rem_cpus_used_pct"] == 200
    assert qperf.measured_count(tcp, Case("lat", "tcp"), PeerRun()) == 8168 / 2
    udp = only(qperf.parse(recorded("qperf-lat-udp.txt"), Case("lat", "udp")))
    assert udp["latency_ns"] == {"mean": 97628.0}
    bw = only(qperf.parse(recorded("qperf-bw-tcp.txt"), Case("bw", "tcp")))
    assert bw["gbps"] == pytest.approx(4.56392704) and bw["msg_rate"] == 8619 and bw["size"] == 65536
    assert "latency_ns" not in bw
    # udp_bw: what arrived is the point's bandwidth (the paper's Tables 5 and 7), what was sent beside it
    udp_bw = only(qperf.parse(recorded("qperf-bw-udp.txt"), Case("bw", "udp")))
    assert udp_bw["gbps"] == pytest.approx(0.076891248) and udp_bw["send_gbps"] == pytest.approx(0.221029893)
    assert udp_bw["msg_rate"] == 9386 and udp_bw["size"] == 1024 and "recv_bw" in udp_bw["statistic_note"]
    assert qperf.measured_count(udp_bw, Case("bw", "udp"), PeerRun()) == 9386
    assert qperf.parse(recorded("qperf-bw-udp.txt"), Case("bw", "tcp")) == []
    # Output of another test is not this case's result.
    assert qperf.parse(recorded("qperf-lat-tcp.txt"), Case("lat", "udp")) == []
    with pytest.raises(PeerError, match="failed to connect"):
        qperf.parse(recorded("qperf-no-server.txt"), Case("lat", "tcp"))
    # Above one datagram qperf's udp_bw sends nothing and says 0 bits/sec: refused, with the limit.
    with pytest.raises(Unsupported, match="at most 65507 B, not 65536"):
        qperf.command("client", Case("bw", "udp"), PeerRun(bw_size=64 * 1024), 5000)


def test_iperf3_parse():
    text = recorded("iperf3-bw-tcp.json")
    doc = json.loads(text)
    p = only(iperf3.parse(text, Case("bw", "tcp")))
    received = doc["end"]["sum_received"]
    assert received["bits_per_second"] != doc["end"]["sum_sent"]["bits_per_second"]
    assert p["gbps"] == received["bits_per_second"] / 1e9       # the receiver's figure, not the sender's
    assert p["size"] == 65536 and p["iterations"] == 2000
    assert p["msg_rate"] == pytest.approx(received["bytes"] / 65536 / received["seconds"])
    with pytest.raises(PeerError, match="unable to connect"):
        iperf3.parse(recorded("iperf3-no-server.json"), Case("bw", "tcp"))


def test_iperf3_parallel_streams_and_its_cpu_figure():
    # iperf3 -P 4 -k 1000 -l 64K (3.12): the streams share the 1000 blocks; the sums are over them.
    text = recorded("iperf3-bw-tcp-P4.json")
    doc = json.loads(text)
    p = only(iperf3.parse(text, Case("bw", "tcp")))
    assert p["flows"] == 4 and "the sum over 4 TCP streams" in p["statistic_note"]
    assert p["gbps"] == doc["end"]["sum_received"]["bits_per_second"] / 1e9
    assert sum(s["receiver"]["bytes"] for s in doc["end"]["streams"]) == doc["end"]["sum_received"]["bytes"]
    assert p["cpu_utilization_percent"] == doc["end"]["cpu_utilization_percent"]
    i = iperf3.command("client", Case("bw", "tcp"), PeerRun(bw_size=65536, iters=1000, flows=4), 5000)
    assert i[i.index("-P") + 1] == "4" and i[i.index("-k") + 1] == "1000"
    assert "-P" not in iperf3.command("client", Case("bw", "tcp"), PeerRun(), 5000)


def test_perftest_parse():
    """Recorded in the Soft-RoCE guest (a TCG virtual machine: perftest warns about its clock estimate)."""
    pt = PEERS["perftest"]
    lat = only(pt.parse(recorded("perftest-ib_send_lat-rxe.txt"), Case("lat", "verbs", "ib_send_lat")))
    assert lat["latency_kind"] == "rtt/2" and lat["variant"] == "ib_send_lat" and lat["iterations"] == 1000
    assert lat["latency_ns"] == {"min": 19820.0, "max": 54192660.0, "p50": 20880.0, "mean": 1393770.0,
                                 "stdev": 4756940.0, "p99": 26458820.0, "p999": 54192660.0}
    atomic = only(pt.parse(recorded("perftest-ib_atomic_lat-rxe.txt"), Case("lat", "verbs", "ib_atomic_lat")))
    assert atomic["latency_kind"] == "rtt" and atomic["size"] == 8 and atomic["rtt_ns"]["p50"] == 29680.0
    assert "latency_ns" not in atomic   # a whole operation, not half a round trip
    bw = only(pt.parse(recorded("perftest-ib_send_bw-rxe.txt"), Case("bw", "verbs", "ib_send_bw")))
    assert bw["gbps"] == 0.020436 and bw["msg_rate"] == pytest.approx(39.0) and bw["iterations"] == 80
    assert bw["tool_cpu"]["cpu_util_pct"] == 100.0 and "--cpu_util" in bw["tool_cpu"]["note"]
    write = only(pt.parse(recorded("perftest-ib_write_bw-rxe.txt"), Case("bw", "verbs", "ib_write_bw")))
    assert write["gbps"] == 0.0 and write["iterations"] == 109 and write["tool_cpu"]["cpu_util_pct"] == 10.13
    assert any("Correlation coefficient" in w for w in write["tool_warnings"])
    with pytest.raises(PeerError):
        pt.parse("Couldn't connect to 10.77.0.2:19001\n", Case("lat", "verbs", "ib_send_lat"))
    broken = recorded("perftest-ib_send_lat-rxe.txt").replace(" 32      1000          19.82 ", " 32      1000          inf ")
    with pytest.raises(Unsupported, match="clock estimate"):
        pt.parse(broken, Case("lat", "verbs", "ib_send_lat"))
    # perftest's t_stdev alone as -nan (its 8 MiB rounds in the guest): the point stands without it, said so.
    nan_stdev = recorded("perftest-ib_send_lat-rxe.txt").replace("\t4756.94\t", "\t-nan\t")
    lat = only(pt.parse(nan_stdev, Case("lat", "verbs", "ib_send_lat")))
    assert lat["latency_ns"]["p50"] == 20880.0 and "stdev" not in lat["latency_ns"]
    assert "perftest printed t_stdev[usec] as -nan: left out" in lat["tool_warnings"]


def test_qperf_rdma_parse():
    q = PEERS["qperf"]
    read = only(q.parse(recorded("qperf-rc_rdma_read_lat-rxe.txt"), Case("lat", "verbs", "rc_rdma_read_lat")))
    assert read["latency_kind"] == "rtt" and read["rtt_ns"] == {"mean": 106163.0} and read["msg_rate"] == 10669
    assert read["tool_cpu"]["send_cpus_used_pct"] == 50.3
    bw = only(q.parse(recorded("qperf-rc_bw-rxe.txt"), Case("bw", "verbs", "rc_bw")))
    assert bw["gbps"] > 0 and bw["variant"] == "rc_bw" and bw["size"] == 65536
    with pytest.raises(PeerError, match="address handle"):
        q.parse(recorded("qperf-ud_lat-rxe.txt"), Case("lat", "verbs", "ud_lat"))


def test_server_requests_are_the_allow_lists_shapes():
    """What `peers --server` asks a serve for, per adapter: only keys its allow-list takes."""
    params = PeerRun(iters=500, duration=2, server="10.0.0.2:18515", rdma=Rdma(server_device="rxe1", gid_index=1))
    assert sockperf.request(Case("lat", "udp"), params)["proto"] == "udp"
    assert set(qperf.request(Case("lat", "verbs", "rc_lat"), params)) == {"tool", "lifetime_s"}
    pt = PEERS["perftest"]
    assert pt.request(Case("lat", "verbs", "ib_send_lat"), params) == {
        "tool": "ib_send_lat", "conn": "RC", "size": 32, "iters": 500, "device": "rxe1", "gid_index": 1,
        "lifetime_s": 32}
    atomic = pt.request(Case("bw", "verbs", "ib_atomic_bw"), params)
    assert "size" not in atomic and atomic["duration_s"] == 2
    client = pt.command("client", Case("bw", "verbs", "ib_write_bw"), params, 4242)
    assert client[-1] == "10.0.0.2" and "--cpu_util" in client and client[client.index("-D") + 1] == "2"
    for peer in (PEERS["ucx_perftest"], PEERS["fi_pingpong"]):
        assert peer.request(peer.cases[0], params) is None


def test_perftest_takes_the_verbs_knobs_as_fabmeter_names_them():
    """--service, --inline, --mtu and --bidir become perftest's -c, -I, -m and -b on both sides
    (the serve's request the same), perftest's own rules skip what it cannot run, the banner is the
    evidence of what ran, and a tool without the knobs is skipped rather than run without them."""
    pt = PEERS["perftest"]
    knobs = Rdma(server_device="rxe1", service="uc", inline=64, mtu=1024)
    params = PeerRun(iters=500, duration=2, server="10.0.0.2:18515", rdma=knobs, bidir=True)
    lat = Case("lat", "verbs", "ib_send_lat")
    client = pt.command("client", lat, params, 4242)
    assert client[client.index("-c") + 1] == "UC" and client[client.index("-I") + 1] == "64"
    assert client[client.index("-m") + 1] == "1024" and "-b" not in client and "-R" not in client
    assert pt.request(lat, params) == {"tool": "ib_send_lat", "conn": "UC", "size": 32, "iters": 500, "inline": 64,
                                       "mtu": 1024, "device": "rxe1", "lifetime_s": 32}
    bw = Case("bw", "verbs", "ib_write_bw")
    assert "-b" in pt.command("server", bw, params, 4242) and pt.request(bw, params)["bidir"] is True
    far = "10.0.0.2:18515"   # the server's side runs there: no RDMA device needed here
    ud = PeerRun(server=far, rdma=Rdma(service="ud"))
    assert "UD" in pt.command("client", lat, ud, 1) and pt.request(lat, ud)["conn"] == "UD"
    for case, run, why in ((Case("lat", "verbs", "ib_read_lat"), params, "RC only"),
                           (Case("lat", "verbs", "ib_write_lat"), ud, "RC only"),
                           (Case("bw", "verbs", "ib_read_bw"), PeerRun(server=far, rdma=Rdma(inline=64)), "send and write")):
        with pytest.raises(Unsupported, match=why):
            pt.command("client", case, run, 1)
    banner = (recorded("perftest-ib_write_bw-rxe.txt").replace("Connection type : RC", "Connection type : UC")
              .replace("RDMA_Write BW Test", "RDMA_Write Bidirectional BW Test")
              .replace("Max inline data : 0[B]", "Max inline data : 64[B]").replace("rdma_cm QPs\t : OFF",
                                                                                   "rdma_cm QPs\t : ON"))
    ran = only(pt.parse(banner, bw))
    assert (ran["service"], ran["inline"], ran["mtu"], ran["cm"], ran["bidir"]) == ("UC", 64, 1024, "rdma_cm", True)
    assert "UC:" in ran["statistic_note"] and "sum of both directions" in ran["statistic_note"]
    plain = only(pt.parse(recorded("perftest-ib_write_bw-rxe.txt"), bw))
    assert plain["service"] == "RC" and plain["cm"] == "raw" and "bidir" not in plain
    with pytest.raises(Unsupported, match="one direction"):
        PEERS["iperf3"].check_knobs(Case("bw", "tcp"), PeerRun(bidir=True))
    with pytest.raises(Unsupported, match="--service"):
        qperf.check_knobs(Case("lat", "verbs", "rc_lat"), PeerRun(rdma=Rdma(service="uc")))
    qperf.check_knobs(Case("lat", "verbs", "rc_lat"), PeerRun(rdma=Rdma()))   # the defaults: runs
    pt.check_knobs(bw, params)


def test_perftest_connects_with_rdma_cm_when_asked():
    """--cm rdma_cm is perftest's -R on both sides (the serve's request says cm), its readiness is the rdma_cm
    listener, and what rdma_cm cannot do (UC; --mtu but for UD; --gid-index: the route decides) is skipped
    with the reason, qperf (whose RDMA tests name how they connect) too."""
    pt = PEERS["perftest"]
    far = "10.0.0.2:18515"
    cm = PeerRun(iters=500, server=far, rdma=Rdma(server_device="rxe1", cm="rdma_cm"))
    for case in (Case("lat", "verbs", "ib_send_lat"), Case("bw", "verbs", "ib_write_bw")):
        assert "-R" in pt.command("client", case, cm, 4242) and "-R" in pt.command("server", case, cm, 4242)
        assert pt.request(case, cm)["cm"] == "rdma_cm" and pt.listens(case, cm) == "rdma_cm"
    ud = PeerRun(server=far, rdma=Rdma(service="ud", mtu=1024, cm="rdma_cm"))   # UD's MTU is not the route's
    assert {"-R", "UD", "1024"} <= set(pt.command("client", Case("bw", "verbs", "ib_send_bw"), ud, 1))
    raw = PeerRun(server=far, rdma=Rdma())
    assert "-R" not in pt.command("client", Case("lat", "verbs", "ib_send_lat"), raw, 1)
    assert "cm" not in pt.request(Case("lat", "verbs", "ib_send_lat"), raw)
    assert pt.listens(Case("lat", "verbs", "ib_send_lat"), raw) == "tcp"
    for knobs, why in ((Rdma(service="uc", cm="rdma_cm"), "cannot connect UC"),
                       (Rdma(mtu=1024, cm="rdma_cm"), "--mtu needs --cm raw"),
                       (Rdma(gid_index=1, cm="rdma_cm"), "--gid-index needs --cm raw")):
        with pytest.raises(Unsupported, match=why):
            pt.command("client", Case("lat", "verbs", "ib_send_lat"), PeerRun(server=far, rdma=knobs), 1)
    with pytest.raises(Unsupported, match="--cm"):
        qperf.check_knobs(Case("lat", "verbs", "rc_lat"), PeerRun(rdma=Rdma(cm="rdma_cm")))


def test_a_local_rdma_cm_client_connects_to_the_server_devices_address(tmp_path, monkeypatch):
    """rdma_cm follows addresses: on one host perftest's client connects to the server device's IPv4 GID (as
    the guest's rxe1 lists it), not to loopback, and fabmeter's own verbs runs (their control connection on
    loopback) are skipped with the reason."""
    from fabmeter.peers import perftest
    from fabmeter.peers.command import run_fabmeter
    gids = tmp_path / "rxe1" / "ports" / "1" / "gids"
    gids.mkdir(parents=True)
    for i, gid in enumerate(("fe80:0000:0000:0000:b0c5:adff:fe4a:6a0b", "0000:0000:0000:0000:0000:ffff:0a4d:0002",
                             "0000:0000:0000:0000:0000:0000:0000:0000")):
        (gids / str(i)).write_text(gid + "\n")
    monkeypatch.setattr(perftest, "SYSFS_IB", tmp_path)
    pt, lat = PEERS["perftest"], Case("lat", "verbs", "ib_send_lat")
    assert pt.command("client", lat, PeerRun(rdma=Rdma(server_device="rxe1", cm="rdma_cm")), 1)[-1] == "10.77.0.2"
    assert pt.command("client", lat, PeerRun(rdma=Rdma(server_device="rxe1")), 1)[-1] == "127.0.0.1"
    for knobs, why in ((Rdma(cm="rdma_cm"), "needs --server-device"), (Rdma(server_device="rxe9", cm="rdma_cm"),
                                                                       "rxe9 has no IPv4 address")):
        with pytest.raises(Unsupported, match=why):
            pt.command("client", lat, PeerRun(rdma=knobs), 1)
    own = list(run_fabmeter(PeerRun(transports=("verbs",), rdma=Rdma(cm="rdma_cm")), "/no/engine", "", None))
    assert own and all(r["type"] == "skipped" and "on loopback" in r["reason"] for r in own)


def test_cm_listens_reads_the_kernels_cm_ids():
    """`rdma -j res show cm_id` as recorded in the Soft-RoCE guest while `ib_send_lat -R` (pid 141) listened
    on port 19555: its wildcard listener shows once per device, the port in src-addr."""
    shown = recorded("rdma-res-show-cm_id-rxe.json")
    assert base.cm_listens(shown, 19555, 141)
    assert not base.cm_listens(shown, 1955, 141) and not base.cm_listens(shown, 19556, 141)
    assert not base.cm_listens(shown, 19555, 142)   # another process's listener on the port
    assert not base.cm_listens(shown.replace('"LISTEN"', '"ADDR_BOUND"'), 19555, 141)
    assert not base.cm_listens("[]", 19555, 141) and not base.cm_listens("Failed to open", 19555, 141)


def test_wait_for_an_rdma_cm_listener(tmp_path, monkeypatch):
    """The wait asks iproute2's rdma for this server's listener on the port (src-port and pid filters), and
    without rdma the case is skipped with what to install."""
    fake = tmp_path / "rdma"
    fake.write_text('#!/bin/sh\n[ -e "$0.ready" ] || { echo "[]"; exit 0; }\n'
                    'echo "[{\\"state\\":\\"LISTEN\\",\\"pid\\":$8,\\"src-addr\\":\\"0.0.0.0:$6\\"}]"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    server = base.Process(["sleep", "30"])
    try:
        with pytest.raises(PeerError, match="did not listen on rdma_cm port 4791"):
            base.wait_until_bound(server, "rdma_cm", 4791, timeout=0.3)
        (tmp_path / "rdma.ready").touch()
        base.wait_until_bound(server, "rdma_cm", 4791, timeout=30)
    finally:
        server.stop()
        server.close()
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with pytest.raises(Unsupported, match="apt-get install iproute2"):
        base.cm_listening(4791, 1)

def test_ucx_perftest_parse():
    lat = only(ucx.parse(recorded("ucx_perftest-lat-shm.txt"), Case("lat", "shm")))
    assert lat["latency_ns"] == {"p50": 458.0, "mean": 15366.0} and lat["iterations"] == 20000
    assert lat["latency_kind"] == "rtt/2" and lat["percentile_window"] == 2048
    assert "last 2048 iterations" in lat["statistic_note"] and "biased" not in lat["statistic_note"]
    short = only(ucx.parse(recorded("ucx_perftest-lat-shm-2000.txt"), Case("lat", "shm")))
    assert short["latency_ns"] == {"p50": 493.0, "mean": 500.0} and "biased low" in short["statistic_note"]
    tcp = only(ucx.parse(recorded("ucx_perftest-lat-tcp.txt"), Case("lat", "tcp")))
    assert tcp["transport"] == "tcp" and tcp["latency_ns"]["p50"] == 3763.0
    bw = only(ucx.parse(recorded("ucx_perftest-bw-shm.txt"), Case("bw", "shm")))
    assert bw["gbps"] == pytest.approx(2054.70 * 2**20 * 8 / 1e9) and bw["msg_rate"] == 32875
    assert "latency_ns" not in bw
    # A run killed before its "Final:" line has periodic rows only: no result.
    assert ucx.parse(recorded("ucx_perftest-lat-shm-killed.txt"), Case("lat", "shm")) == []
    with pytest.raises(PeerError, match="connect"):
        ucx.parse(recorded("ucx_perftest-no-server.txt"), Case("lat", "tcp"))


# --- commands and helpers --------------------------------------------------------

def test_commands_match_params():
    params = PeerRun(size=64, bw_size=4096, iters=500, duration=1.5, cpus=(0, 1))
    c = sockperf.command("client", Case("lat", "udp"), params, 5000)
    assert c[:3] == ["taskset", "-c", "0"] and c[c.index("-m") + 1] == "64" and c[c.index("-t") + 1] == "2"
    assert "--tcp" not in c and "--tcp" in sockperf.command("server", Case("lat", "tcp"), params, 5000)
    assert sockperf.command("server", Case("lat", "tcp"), params, 5000)[:3] == ["taskset", "-c", "1"]
    ul = sockperf.command("client", Case("load", "tcp"), PeerRun(size=64, rate=25000, duration=1, cpus=(0, 1)), 5000)
    assert ul[3:5] == ["sockperf", "under-load"] and ul[ul.index("--mps") + 1] == "25000" and "--tcp" in ul
    assert ul[ul.index("--reply-every") + 1] == "1" and "--full-rtt" in ul and ul[ul.index("-m") + 1] == "64"
    q = qperf.command("client", Case("bw", "tcp"), params, 5000)
    assert q[-1] == "tcp_bw" and q[q.index("--msg_size") + 1] == "4096"
    i = iperf3.command("client", Case("bw", "tcp"), params, 5000)
    assert i[i.index("-k") + 1] == "500" and i[i.index("-l") + 1] == "4096" and "-J" in i
    u = ucx.command("client", Case("lat", "shm"), params, 5000)
    assert u[:2] == ["env", "UCX_TLS=posix,self"] and u[u.index("-c") + 1] == "0" and u[u.index("-n") + 1] == "500"
    assert "UCX_NET_DEVICES=lo" in ucx.command("server", Case("bw", "tcp"), params, 5000)
    assert ucx.selected(PeerRun(transports=("shm",))) == [Case("lat", "shm"), Case("bw", "shm")]


def test_percentile_key():
    assert base.percentile_key("99.990") == "p9999" and base.percentile_key("50.0") == "p50"


def test_bound_sees_tcp_listen_and_udp_bind():
    port = base.free_port()
    assert not base.bound("tcp", port) and not base.bound("udp", port)
    import socket
    with socket.socket() as t, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        t.bind(("127.0.0.1", port))
        assert not base.bound("tcp", port)   # bound but not listening: a client would be refused
        t.listen()
        u.bind(("127.0.0.1", port))
        assert base.bound("tcp", port) and base.bound("udp", port)


def tagged_procs(tag: str) -> list[str]:
    """Live processes (not zombies) whose environment carries the tag."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0") and ") Z " not in (d / "stat").read_text():
                cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{d.name}: {cmdline}")
        except OSError:
            continue
    return found


@pytest.fixture
def tag(monkeypatch):
    """Children started by the test carry a tag; none may outlive it."""
    t = uuid.uuid4().hex
    monkeypatch.setenv(TAG_VAR, t)
    yield t
    deadline = time.monotonic() + 5
    while (left := tagged_procs(t)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for entry in left:
        os.kill(int(entry.split(":")[0]), signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


def test_stop_ends_the_whole_group(tag):
    # qperf's server forks a child per test: stopping it must end both.
    proc = base.Process(["sh", "-c", "sleep 60 & sleep 60"])
    time.sleep(0.2)
    assert len(tagged_procs(tag)) >= 2
    proc.stop()
    proc.close()
    assert proc.proc.returncode == -signal.SIGTERM


class _Hang(Peer):
    """A real server that listens and a client that never finishes."""

    def __init__(self):
        super().__init__(tool="hang", package="-", cases=(Case("lat", "tcp"),))

    def available(self):
        return True

    def version(self):
        return "0"

    def command(self, role, case, params, port):
        if role == "server":
            return [sys.executable, "-c", f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1',{port}));"
                                          "s.listen(); time.sleep(60)"]
        return [sys.executable, "-c", "import time; time.sleep(60)"]

    def parse(self, text, case):
        return []


def test_client_timeout_fails_the_case_and_cleans_up(tag):
    started = time.monotonic()
    [rec] = _Hang().run(PeerRun(duration=0.1, timeout_s=0.5))
    assert rec["type"] == "failed" and "did not finish within" in rec["reason"]
    assert time.monotonic() - started < 10


# --- the command ----------------------------------------------------------------

def _cli(*args, env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(cli_cmd("peers", *args), env=env or cli_env(uuid.uuid4().hex), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def test_missing_tool_is_skipped_with_one_line(tmp_path):
    env = cli_env(uuid.uuid4().hex)
    env["PATH"] = str(tmp_path / "empty")          # no sockperf (nor anything else) on PATH
    r = _cli("--tools", "sockperf", "--out", tmp_path / "o", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == ["skipped sockperf: not installed (apt-get install sockperf)"]
    assert "nothing measured" in r.stdout
    doc = json.loads((tmp_path / "o" / "peers.json").read_text())
    assert doc["points"] == [] and doc["skipped"][0]["reason"].startswith("not installed")
    j = _cli("--tools", "ucx_perftest", "--json", env=env)
    assert json_lines(j.stdout) == [{"type": "skipped", "peer": True, "tool": "ucx_perftest",
                                     "reason": "not installed (apt-get install ucx-utils)"}]


@pytest.mark.parametrize("args, message", [
    (["--tools", "netperf"], "--tools: unknown 'netperf'"),
    (["--transports", "rdma"], "--transports: unknown 'rdma'"),
    (["-s", "0"], "-s/--size: expected a message size of at least 1 byte, got '0'"),
    (["--bw-size", "64KiB"], "--bw-size: expected a non-negative integer (K/M/G/T suffixes: 64K = 65,536)"),
    (["--iters", "0"], "--iters must be at least 1"),
    (["--rate", "0"], "--rate must be between 1 and 10000000 per second"),
    (["--cm", "rdma_cm", "--service", "uc"], "--cm rdma_cm: rdma_cm cannot connect UC"),
    (["--cm", "rdma_cm", "--mtu", "1024"], "--mtu needs --cm raw"),
    (["--cm", "rdma_cm", "--gid-index", "1"], "--gid-index needs --cm raw"),
])
def test_bad_arguments(args, message):
    r = _cli(*args)
    assert r.returncode == 2 and message in one_line_error(r.stderr)


# --- live runs, small counts ---------------------------------------------------------

def installed(tool: str):
    return pytest.mark.skipif(shutil.which(tool) is None, reason=f"{tool} not installed")


def _cpus() -> tuple[int, int] | None:
    allowed = sorted(os.sched_getaffinity(0))
    return (allowed[0], allowed[1]) if len(allowed) >= 2 else None


@pytest.mark.parametrize("tool", [pytest.param(t, marks=installed(t)) for t in PEERS])
def test_live_run(tool, tag, tmp_path):
    peer = PEERS[tool]
    # 32 KiB bandwidth messages: the paper's largest UDP datagrams (qperf's udp_bw takes one datagram)
    params = PeerRun(iters=300, duration=1, bw_size=32 * 1024, cpus=_cpus(), timeout_s=20, raw_dir=tmp_path)
    records = peer.run(params)
    assert [r["type"] for r in records] == ["point"] * len(peer.selected(params)), records
    for p in records:
        assert p["tool"] == tool and p["tool_version"] and p["command"][0] in ("taskset", "env")
        assert tool in p["command"] and p["size"] == (params.bw_size if p["experiment"] == "bw" else params.size)
        assert (tmp_path / p["raw_output"]).read_text()
        if p["experiment"] == "lat":
            assert p["latency_kind"] == "rtt/2" and all(v > 0 for v in p["latency_ns"].values())
        elif p["experiment"] == "load":   # sockperf under-load, 1 s at 10000 requests/s
            lat = p["latency_ns"]
            assert p["latency_kind"] == "rtt from the actual send time" and p["offered_rps"] == params.rate
            assert all(v > 0 for v in lat.values()) and lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"]
            assert 0 < p["completed"] <= p["sent"] and p["achieved_rps"] > 0 and p["duration_s"] > 0
            assert p["iterations"] == p["completed"] and "load" in p["raw_output"]
            # Its receiver thread ran on the server's CPU, not behind its own spinning sender.
            assert p.get("receiver_cpu") == (params.server_cpu if params.cpus else None), p
        else:
            assert p["gbps"] > 0
        # fabmeter's accounting of the tool's processes, both ends, over their whole run.
        for side in ("client", "server"):
            cpu = p["cpu"][side]
            assert cpu["window"] == "process" and "warm-up" in cpu["window_note"] and cpu["window_s"] > 0, cpu
            assert cpu["cpu_s"] == pytest.approx(cpu["user_s"] + cpu["system_s"])
            assert (cpu["cpus"] is None) == (params.cpus is None), cpu
        # The kernel counts a process's CPU in ticks (10 ms): half a second of ping-pong spends some, a tool
        # done in 50 ms (ucx_perftest's 300 round trips) may show none.
        if p["experiment"] != "bw" and p["cpu"]["client"]["window_s"] >= 0.5:
            assert p["cpu"]["client"]["cpu_s"] > 0 and p["cpu"]["client"]["per_message_ns"] > 0, p["cpu"]


@installed("iperf3")
def test_cli_side_by_side(engine, tmp_path):
    r = _cli("--tools", "fabmeter,iperf3", "--transports", "tcp", "-n", "300", "--json", "--out", tmp_path)
    assert r.returncode == 0, r.stderr
    lines = json_lines(r.stdout)
    assert {(p["tool"], p["experiment"], p.get("poll")) for p in lines} == {
        ("fabmeter", "lat", "busy"), ("fabmeter", "lat", "event"), ("fabmeter", "bw", "busy"),
        ("fabmeter", "load", "busy"), ("iperf3", "bw", "blocking")}
    doc = json.loads((tmp_path / "peers.json").read_text())
    assert [p["tool"] for p in doc["points"]] == ["iperf3"] and doc["params"]["iters"] == 300
    assert (tmp_path / "fabmeter" / "lat-tcp-busy" / "run.json").is_file()
    table = _cli("--tools", "iperf3", "-n", "300").stdout
    assert "iperf3" in table and "Gbit/s" in table and "[1] iperf3" in table


def test_run_case_checks_knobs_for_every_adapter(monkeypatch):
    """run_case is the one entry point: a case the asked-for knobs would misdescribe is refused before any
    adapter's `measure` runs, mpibench's (which measures without the base's server and client) included."""
    for tool, peer in PEERS.items():
        monkeypatch.setattr(peer, "measure", lambda *a, tool=tool: pytest.fail(f"{tool} measured a refused case"))
        bw = next((c for c in peer.cases if c.experiment == "bw"), None)
        if bw is not None and not peer.bidir:
            with pytest.raises(Unsupported, match="--bidir"):
                peer.run_case(bw, PeerRun(bidir=True))
    assert not PEERS["fabmeter-mpibench"].bidir
