"""The fabric each end ran on (run.json's environment.engine.fabric and
environment.server_engine.fabric): between two network namespaces joined by
a veth pair of MTU 1400, each end names its own veth, its driver and MTU,
and the report's machine line says it. The NUMA warning's logic is the
GoogleTest FakeTree.* (a fake sysfs with two nodes)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import cli_cmd, veth_namespaces
from test_twohost import read_listening

from fabmeter.report.context import fabric_summary
from fabmeter.run import _fabric_warnings

MTU = 1400          # not a default anywhere: the value can only come from this link


def test_each_end_names_its_veth(fm, tmp_path):
    net = f"10.198.{os.getpid() % 250}"
    with veth_namespaces("fab", net, "mtu", str(MTU)) as (ns_a, ns_b, dev_a, dev_b):
        server = fm.popen("serve", "--bind", f"{net}.1", "--port", "0", "--once", "--cpu", "1",
                          prefix=("ip", "netns", "exec", ns_a))
        try:
            port = read_listening(server)["port"]
            out = tmp_path / "run"
            r = subprocess.run(["ip", "netns", "exec", ns_b,
                                *cli_cmd("lat", "-t", "tcp", "--server", f"{net}.1:{port}", "-n", "200",
                                         "--cpus", "0", "--out", str(out))],
                               env=fm.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert r.returncode == 0, r.stderr
            assert server.wait(timeout=10) == 0
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()
    env = json.loads((out / "run.json").read_text())["environment"]
    for key, dev in (("engine", dev_b), ("server_engine", dev_a)):
        fabric = env[key]["fabric"]
        netdev = fabric["netdev"]
        assert netdev["name"] == dev, (key, netdev)
        assert netdev["driver"] == "veth" and netdev["mtu"] == MTU, (key, netdev)
        assert netdev["rx_queues"] >= 1 and len(netdev["rps_cpus"]) == min(netdev["rx_queues"], 32)
        assert fabric["rdma"] is None                      # tcp: no RDMA device is in use
        assert fabric["numa"]["device"] == dev and fabric["numa"]["cpu"] == (0 if key == "engine" else 1)
        assert fabric["thp_enabled"] in ("always", "madvise", "never")
        assert fabric["warnings"] == [] or fabric["numa"]["cpu_node"] != fabric["numa"]["device_node"]
    r = subprocess.run(cli_cmd("report", str(out)), env=fm.env, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    html = Path(out / "report.html").read_text()
    assert f"client fabric {dev_b} veth MTU {MTU}" in html and f"server fabric {dev_a} veth MTU {MTU}" in html
    assert f"<th>server fabric</th><td>{dev_a} veth MTU {MTU}" in html      # the Environment table
    assert f"NUMA: {dev_b} node unknown, CPU 0 node" in html


def test_warnings_and_summary_from_the_start_line():
    """The CLI repeats each end's NUMA warning (the engine's stderr is not shown) and the report's machine line
    summarises an RDMA end; a malformed list says nothing."""
    far = "mlx5_0 is on NUMA node 1, the pinned CPU 2 on node 0: every message crosses the interconnect"
    start = {"env": {"fabric": {"warnings": [far]}}, "server_env": {"fabric": {"warnings": "not a list"}}}
    assert _fabric_warnings(start) == [f"client: {far}"]
    assert _fabric_warnings({"env": None}) == []
    rdma = {"device": "mlx5_0", "port": 1, "port_state": "ACTIVE", "link_layer": "infiniband", "speed_gbps": 100.0,
            "width": "4X", "active_mtu": 4096, "firmware": "20.31.1014", "gid": "fe80::1", "gid_type": "IB/RoCE v1"}
    netdev = {"name": "ib0", "driver": "mlx5_core", "mtu": 2044, "speed_mbps": 100000, "ipoib_mode": "datagram"}
    assert fabric_summary({"rdma": rdma, "netdev": netdev}) == (
        "mlx5_0 port 1 ACTIVE infiniband 100 Gb/s 4X MTU 4096 fw 20.31.1014, GID fe80::1 (IB/RoCE v1); "
        "ib0 mlx5_core MTU 2044 100000 Mb/s IPoIB datagram")
    assert fabric_summary({}) == ""


def test_compare_tells_a_firmware_update():
    """Two results from before and after a firmware update differ in the fabric's firmware, and compare says so."""
    from fabmeter.compare import env_diff
    before = {"engine": {"fabric": {"rdma": {"device": "mlx5_0", "firmware": "20.31.1014"}}}}
    after = {"engine": {"fabric": {"rdma": {"device": "mlx5_0", "firmware": "20.35.2000"}}}}
    assert env_diff([before], [after]) == [("engine.fabric.rdma.firmware", "20.31.1014", "20.35.2000")]
