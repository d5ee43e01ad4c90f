"""The MPI layer: fabmeter-mpibench under mpirun (ping-pong latency, bandwidth, allreduce over 4 ranks), as a peer
tool of `fabmeter peers` and of suites, its figures beside a mesh's."""

from __future__ import annotations

import json
import shutil

import pytest

from fabmeter.peers import mpibench

pytestmark = pytest.mark.skipif(not shutil.which("mpirun") or not mpibench.binary().is_file(),
                                reason="the engine was built without Open MPI (libopenmpi-dev)")

SUITE = '''name = "mpi"
[[matrix]]
experiment = "mesh"
mesh_experiment = "lat"
transport = "tcp"
ranks = 4
launch = "local"
poll = "event"
iters = 200
warmup = 20

[[matrix]]
tool = "fabmeter-mpibench"
experiment = ["lat", "allreduce"]
transport = "shm"
size = 32
iters = 200
'''


def test_allreduce_and_latency_over_four_ranks():
    """Four ranks on this host: the ping-pong between ranks 0 and 1 and an allreduce across all four (its sum is
    checked by the program: a wrong one exits non-zero)."""
    for test in ("lat", "allreduce"):
        doc = mpibench.run(test, 32, 200, "tcp", ranks=4)
        assert doc["ranks"] == 4 and doc["iterations"] == 200 and doc["size"] == 32, doc
        assert 0 < doc[f"{'oneway' if test == 'lat' else 'allreduce'}_ns_p50"], doc
        assert "Open MPI" in doc["library_version"]
    with pytest.raises(mpibench.PeerError, match="exited 2"):
        mpibench.run("scan", 32, 200, "tcp")


def test_peers_runs_every_case(fm):
    r = fm.run("peers", "--tools", "fabmeter-mpibench", "--transports", "shm", "-n", "200", "--json", timeout=180)
    assert r.returncode == 0, r.stderr
    points = {p["experiment"]: p for p in map(json.loads, r.stdout.splitlines()) if p.get("type") == "point"}
    assert sorted(points) == ["allreduce", "bw", "lat"]
    assert points["lat"]["latency_kind"] == "rtt/2" and points["lat"]["latency_ns"]["p50"] > 0
    assert points["allreduce"]["ranks"] == mpibench.ALLREDUCE_RANKS and points["allreduce"]["latency_ns"]["p50"] > 0
    assert points["bw"]["gbps"] > 0 and points["bw"]["tool_version"]


def test_a_suite_sets_mpi_figures_beside_a_mesh(fm, tmp_path):
    """One suite: a lat mesh over 4 local ranks and the MPI program's latency and allreduce (4 ranks), each a
    result of its own."""
    f = tmp_path / "mpi.toml"
    f.write_text(SUITE)
    out = tmp_path / "out"
    r = fm.run("suite", f, "--out", out, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    points = {p["id"]: p for p in json.loads((out / "index.json").read_text())["points"]}
    (mesh,) = [i for i in points if i.startswith("mesh-")]
    assert json.loads((out / mesh / "mesh.json").read_text())["mesh"]["pairs"] == 12
    for test in ("lat", "allreduce"):
        assert points[f"fabmeter-mpibench-{test}-shm"]["status"] == "ok"
        doc = json.loads((out / f"fabmeter-mpibench-{test}-shm" / "peers.json").read_text())
        (p,) = [x for x in doc["points"] if x["experiment"] == test]
        assert p["latency_ns"]["p50"] > 0 and p["ranks"] == (4 if test == "allreduce" else 2)
