"""The MPI layer: fabmeter-mpibench under mpirun (ping-pong latency, bandwidth, allreduce over 4 ranks), as a peer
tool of `fabmeter peers` and of suites, its figures beside a mesh's; `mesh --tool fabmeter-mpibench` over namespace
hosts."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import one_line_error

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

[[matrix]]
experiment = "mesh"
mesh_experiment = "lat"
mesh_tool = "fabmeter-mpibench"
transport = "tcp"
ranks = 4
launch = "local"
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
    result of its own, as peer points and as a mesh point of its own (mesh_tool)."""
    f = tmp_path / "mpi.toml"
    f.write_text(SUITE)
    out = tmp_path / "out"
    r = fm.run("suite", f, "--out", out, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    points = {p["id"]: p for p in json.loads((out / "index.json").read_text())["points"]}
    (mesh,) = [i for i in points if i.startswith("mesh-") and "mpibench" not in i]
    assert json.loads((out / mesh / "mesh.json").read_text())["mesh"]["pairs"] == 12
    (mpi,) = [i for i in points if i.startswith("mesh-") and "mpibench" in i]
    tests = json.loads((out / mpi / "mesh.json").read_text())["mesh"]["mpi"]["tests"]
    assert tests["lat"]["latency_ns"]["p50"] > 0 and tests["allreduce"]["ranks"] == 4
    for test in ("lat", "allreduce"):
        assert points[f"fabmeter-mpibench-{test}-shm"]["status"] == "ok"
        doc = json.loads((out / f"fabmeter-mpibench-{test}-shm" / "peers.json").read_text())
        (p,) = [x for x in doc["points"] if x["experiment"] == test]
        assert p["latency_ns"]["p50"] > 0 and p["ranks"] == (4 if test == "allreduce" else 2)


# A remote shell agent's line that gives each host a session directory of its own ($tmp), as each host of a cluster
# has its own /tmp: hosts that share this machine's raced to create one (Open MPI's "mkdir ... File exists" in
# orte_session_dir, or PMIx's shared-memory store of one daemon overwriting another's).
def own_tmp(tmp_path) -> str:
    return f'tmp={tmp_path}/host-$1 && mkdir -p "$tmp"'


def test_a_mesh_runs_the_mpi_program_over_four_namespace_hosts(fm, four_hosts, tmp_path):
    """mesh --tool fabmeter-mpibench --launch ssh over four namespace hosts: mpirun, in host 0's namespace, starts
    one rank on each host over --ssh (here a remote shell that runs the command in the namespace holding the
    host's address); the ping-pong of hosts 0 and 1 is the mesh's pair 0 -> 1 (RTT/2), the allreduce over all four
    the summary's mpi block beside it, both in mesh.json and in the report. No token: mpirun's channels are its
    own, and none of fabmeter's runs."""
    table = tmp_path / "namespaces"
    table.write_text("".join(f"{addr} {ns}\n" for ns, addr in four_hosts))
    agent = tmp_path / "agent"
    agent.write_text("#!/bin/sh\n# Open MPI's remote shell agent: [options] HOST COMMAND...\n"
                     'while [ "${1#-}" != "$1" ]; do shift; done\n'
                     f'ns=$(awk -v h="$1" \'$1 == h {{print $2}}\' {table})\n{own_tmp(tmp_path)}\nshift\n'
                     'exec ip netns exec "$ns" env OMPI_MCA_orte_tmpdir_base="$tmp" sh -c "$*"\n')
    agent.chmod(0o755)
    hosts = [addr for _, addr in four_hosts]
    out = tmp_path / "out"
    r = fm.run("mesh", "--launch", "ssh", "--hosts", ",".join(hosts), "--ssh", agent, "--tool", "fabmeter-mpibench", "--experiment", "lat", "-t", "tcp", "-s", "32", "--iters", "200",
               "--out", out, prefix=("ip", "netns", "exec", four_hosts[0][0]), timeout=180)
    assert r.returncode == 0 and "token" not in r.stderr, r.stdout + r.stderr
    assert "mpi allreduce: allreduce p50" in r.stdout and "over 4 ranks" in r.stdout, r.stdout
    doc = json.loads((out / "mesh.json").read_text())
    (pair,) = doc["pairs"]
    assert (pair["src"], pair["dst"], pair["status"], pair["tool"]) == (0, 1, "ok", "fabmeter-mpibench")
    assert pair["latency_kind"] == "rtt/2" and doc["matrix"]["latency_p50_ns"][0][1] == pair["latency_ns"]["p50"] > 0
    tests = doc["mesh"]["mpi"]["tests"]
    assert tests["lat"]["hosts"] == hosts[:2] and tests["lat"]["ranks"] == 2
    assert tests["allreduce"]["hosts"] == hosts and tests["allreduce"]["ranks"] == 4
    assert tests["allreduce"]["latency_kind"] == "allreduce" and tests["allreduce"]["latency_ns"]["p50"] > 0
    assert all("--host" in t["command"] for t in tests.values())
    r = fm.run("report", out, timeout=120)      # the report's MPI table: a row a test
    assert r.returncode == 0, r.stderr
    html = (out / "report.html").read_text()
    assert "MPI layer over a mesh" in html and "<td>allreduce</td>" in html and "<td>rtt/2</td>" in html


@pytest.mark.parametrize("args,words", [
    (["--launch", "local", "--ranks", "2", "--schedule", "slotted", "--experiment", "bw"], "slotted"),
    (["--hosts", "127.0.0.1,127.0.0.2", "--rank", "0", "--experiment", "lat"], "runs once, here"),
    (["--launch", "local", "--ranks", "2", "--experiment", "oneway"], "--experiment lat"),
    (["--launch", "local", "--ranks", "2", "--experiment", "lat", "--poll", "busy"], "not --poll"),
])
def test_a_mpi_mesh_is_refused_before_anything_runs(fm, token_file, args, words):
    r = fm.run("mesh", "--tool", "fabmeter-mpibench", "-t", "tcp", "--token-file", token_file, *args, timeout=30)
    assert r.returncode == 2 and words in one_line_error(r.stderr), r.stderr


def test_a_mpi_mesh_without_mpirun_or_the_program_is_refused(fm, tmp_path, token_file):
    """No mpirun on PATH, or an engine built without Open MPI (no fabmeter-mpibench beside it): one line, exit 2."""
    args = ("mesh", "--tool", "fabmeter-mpibench", "-t", "tcp", "--launch", "local", "--ranks", "2",
            "--experiment", "lat", "--token-file", token_file)
    fm.env["PATH"] = str(tmp_path)
    r = fm.run(*args, timeout=30)
    assert r.returncode == 2 and "no mpirun here" in one_line_error(r.stderr), r.stderr
    fm.env["PATH"] = os.environ["PATH"]
    (tmp_path / "fabmeter-engine").symlink_to(fm.env["FABMETER_ENGINE"])
    fm.env["FABMETER_ENGINE"] = str(tmp_path / "fabmeter-engine")
    r = fm.run(*args, timeout=30)
    assert r.returncode == 2 and "built without Open MPI" in one_line_error(r.stderr), r.stderr


def test_a_mpi_mesh_takes_slurms_node_list(fm, tmp_path):
    """No --hosts inside a Slurm allocation: mpirun's hosts are its node list (here three loopback addresses, the
    remote shell one that runs the command here)."""
    agent = tmp_path / "agent"
    agent.write_text('#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\n'
                     f'{own_tmp(tmp_path)}\nshift\nexec env OMPI_MCA_orte_tmpdir_base="$tmp" sh -c "$*"\n')
    agent.chmod(0o755)
    fm.env["SLURM_JOB_NODELIST"] = "127.0.0.[1-3]"
    r = fm.run("mesh", "--launch", "ssh", "--ssh", agent, "--tool", "fabmeter-mpibench", "--experiment", "lat",
               "-t", "tcp", "-s", "32", "--iters", "100", "--out", tmp_path / "out", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    tests = json.loads((tmp_path / "out" / "mesh.json").read_text())["mesh"]["mpi"]["tests"]
    assert tests["allreduce"]["hosts"] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"] and tests["allreduce"]["ranks"] == 3
