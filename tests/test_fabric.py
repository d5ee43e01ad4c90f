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
