"""How a mesh's ranks come up: the hosts and the rank from Slurm's and the MPI launchers' environment (host
lists expanded as scontrol does), mpirun and srun on loopback, --launch local, and --launch ssh into network
namespaces running dropbear."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import cli_cmd, free_port, one_line_error, tagged_engine_procs, wait_until
from fabmeter.mesh import cluster
from mesh_helpers import LOOPBACK4, SMALL, check_pairs, check_series, remote_fabmeter


@pytest.mark.parametrize("text,hosts", [
    ("node[01-04]", ["node01", "node02", "node03", "node04"]),
    ("a[1-3,7],b5", ["a1", "a2", "a3", "a7", "b5"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),                  # as wide as LO: no padding from HI
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("r[1-2]n[1-2]-ib", ["r1n1-ib", "r1n2-ib", "r2n1-ib", "r2n2-ib"]),   # brackets multiply, the first slowest
    ("x,y[3],z", ["x", "y3", "z"]),
    ("10.0.0.1,10.0.0.2", ["10.0.0.1", "10.0.0.2"]),
    ("10.0.0.[1-3]", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
    ("fe80::1,::1", ["fe80::1", "::1"]),
    (" c[1-2] , d ", ["c1", "c2", "d"]),
])
def test_slurm_host_lists_expand_as_scontrol_show_hostnames(text, hosts):
    assert cluster.expand_hostlist(text) == hosts


def test_a_slurm_host_list_of_64_nodes():
    assert cluster.expand_hostlist("node[01-64]") == [f"node{i:02d}" for i in range(1, 65)]


@pytest.mark.parametrize("text,why", [("a,,b", "empty"), ("n[1-3", "without ']'"), ("n1-3]", "without '['"),
                                      ("n[3-1]", "backwards"), ("n[a-b]", "expected numbers"),
                                      ("n[1-2[3]]", "nested"), ("n[0-99999999]", "more than"),
                                      ("n[0-999]m[0-999]", "more than")])
def test_malformed_host_lists_are_refused(text, why):
    with pytest.raises(cluster.HostListError, match=why.replace("[", r"\[")):
        cluster.expand_hostlist(text)


def test_slurm_node_list_from_the_environment():
    assert cluster.slurm_hosts({}) is None
    assert cluster.slurm_hosts({"SLURM_JOB_NODELIST": "c[1-2]"}) == (["c1", "c2"], "SLURM_JOB_NODELIST")
    # srun: the step's nodes, which may be fewer than the job's
    assert cluster.slurm_hosts({"SLURM_JOB_NODELIST": "c[1-4]", "SLURM_STEP_NODELIST": "c[3-4]"}) == \
        (["c3", "c4"], "SLURM_STEP_NODELIST")


@pytest.mark.parametrize("environ,found", [
    ({}, None),
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}, (3, 8, "OMPI_COMM_WORLD_RANK")),
    ({"PMIX_RANK": "5", "SLURM_NTASKS": "64", "SLURM_PROCID": "5"}, (5, 64, "PMIX_RANK")),   # srun --mpi=pmix
    ({"PMIX_RANK": "2"}, (2, None, "PMIX_RANK")),                 # no size anywhere: not checked
    ({"PMI_RANK": "1", "PMI_SIZE": "2"}, (1, 2, "PMI_RANK")),
    ({"SLURM_PROCID": "63", "SLURM_NTASKS": "64"}, (63, 64, "SLURM_PROCID")),
    ({"SLURM_PROCID": "7", "SLURM_NPROCS": "16"}, (7, 16, "SLURM_PROCID")),
    # mpirun inside a Slurm batch step: the batch's SLURM_PROCID=0 is inherited, Open MPI's rank wins
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
      "PMIX_RANK": "2"}, (2, 4, "OMPI_COMM_WORLD_RANK")),
])
def test_rank_from_the_launchers_environment(environ, found):
    assert cluster.launcher_rank(environ) == found


def test_a_rank_that_is_not_a_number():
    with pytest.raises(ValueError, match="PMIX_RANK"):
        cluster.launcher_rank({"PMIX_RANK": "x"})


def test_mpirun_on_loopback(fm, token_file, tmp_path):
    if not shutil.which("mpirun"):
        pytest.skip("mpirun missing (Debian openmpi-bin; scripts/install-deps.sh installs it)")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# rank 0 first\n" + "".join("127.0.0.1 slots=1\n" for _ in range(4)))
    cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "4",
           *cli_cmd("mesh", "--hostfile", hostfile, "-t", "udp", "--mesh-port", free_port(),
                    "--token-file", token_file, "--json", *SMALL)]
    r = subprocess.run(cmd, env=fm.env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    check_pairs("\n".join(ln for ln in r.stdout.splitlines() if ln.startswith("{")), "all-to-all")


def test_srun_on_loopback(fm, token_file):
    """Two ranks as srun starts them: no --hosts, the hosts from $SLURM_JOB_NODELIST (a range), the rank from
    $SLURM_PROCID; a size that is not the node list's is refused."""
    slurm = {"SLURM_JOB_NODELIST": "127.0.0.[1-2]", "SLURM_NTASKS": "2"}
    args = cli_cmd("mesh", "-t", "udp", "--mesh-port", free_port(), "--token-file", token_file, "--json", *SMALL)
    procs = [subprocess.Popen(args, env={**fm.env, **slurm, "SLURM_PROCID": str(r)}, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        out, err = procs[0].communicate(timeout=90)
        assert procs[0].returncode == 0 and procs[1].wait(timeout=30) == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    pairs, summary = check_pairs(out, "all-to-all", 2)
    assert summary["hosts"] == ["127.0.0.1", "127.0.0.2"]
    r = subprocess.run(args, env={**fm.env, **slurm, "SLURM_PROCID": "0", "SLURM_NTASKS": "3"}, capture_output=True,
                       text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "started 3 ranks ($SLURM_PROCID) for 2 hosts" in one_line_error(r.stderr)
    r = fm.run("mesh", "--hosts", "n[2-1]", "--rank", "0", "-t", "udp")
    assert r.returncode == 2 and "--hosts: '2-1' in 'n[2-1]': the range runs backwards" in one_line_error(r.stderr)


def test_launch_local(fm, token_file, tmp_path):
    """--launch local --ranks 3: rank 0 starts ranks 1 and 2 here; each pair's throughput over time in mesh.json."""
    r = fm.run("mesh", "--launch", "local", "--ranks", "3", "-t", "tcp", "--experiment", "bw", "--pattern",
               "all-to-one", "--schedule", "chaotic", "--mesh-port", free_port(), "--token-file", token_file,
               "-s", "1K", "-n", "5000", "--warmup", "100", "--series-ms", "0.5", "--out", tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "mesh.json").read_text())
    assert doc["mesh"]["hosts"] == ["127.0.0.1"] * 3
    assert sorted((p["src"], p["dst"]) for p in doc["pairs"]) == [(1, 0), (2, 0)]
    for p in doc["pairs"]:
        assert p["status"] == "ok" and p["size"] == 1024, p
        check_series(p, 5000, 0.5e6)


def test_launch_local_refusals(fm):
    for args, why in ((["--launch", "local", "-t", "tcp"], "--launch local and --ranks N go together"),
                      (["--ranks", "3", "--hosts", LOOPBACK4, "-t", "tcp"], "--launch local and --ranks N go together"),
                      (["--launch", "local", "--ranks", "3", "--hosts", LOOPBACK4, "-t", "tcp"], "no --hosts"),
                      (["--launch", "local", "--ranks", "1", "-t", "tcp"], "needs at least 2 hosts")):
        r = fm.run("mesh", *args)
        assert r.returncode == 2 and why in one_line_error(r.stderr), (args, r.stderr)


@pytest.fixture
def ssh_hosts(four_hosts, tmp_path):
    """An ssh server (dropbear) on port 22 of hosts 1 and 2 (not 3: nothing
    listens there) admitting root with a key made here: its authorized_keys
    is bind-mounted over /root/.ssh in the server's own mount namespace, so
    the machine's is never touched. Yields (hosts, the --ssh command)."""
    for tool in ("dropbear", "dropbearkey", "ssh", "ssh-keygen", "unshare"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} missing (scripts/install-deps.sh installs dropbear-bin and openssh-client)")
    dot = tmp_path / "dotssh"
    dot.mkdir(mode=0o700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", tmp_path / "id"], check=True)
    (dot / "authorized_keys").write_text((tmp_path / "id.pub").read_text())
    (dot / "authorized_keys").chmod(0o600)
    subprocess.run(["dropbearkey", "-t", "ed25519", "-f", tmp_path / "hostkey"], check=True, capture_output=True)
    made_dot = not os.path.isdir("/root/.ssh")
    if made_dot:
        os.makedirs("/root/.ssh", mode=0o700)
    servers = []
    try:
        for ns, addr in four_hosts[1:3]:
            servers.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "-m", "sh", "-c",
                 f"mount --bind {dot} /root/.ssh && exec dropbear -F -E -s -p {addr}:22 -r {tmp_path / 'hostkey'} "
                 f"-P {tmp_path / ns}.pid"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True))
        listening = lambda ns: ":22 " in subprocess.run(["ip", "netns", "exec", ns, "ss", "-ltnH"],  # noqa: E731
                                                         capture_output=True, text=True).stdout
        assert wait_until(lambda: all(listening(ns) for ns, _ in four_hosts[1:3]), 20), "dropbear did not start"
        yield four_hosts, (f"ssh -i {tmp_path / 'id'} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                           "-o LogLevel=ERROR")
    finally:
        for proc in servers:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        if made_dot:
            os.rmdir("/root/.ssh")


def test_launch_over_ssh(fm, ssh_hosts, token_file):
    """`--launch ssh` run once, in rank 0's namespace: ranks 1 and 2 come up
    over ssh (the token down ssh's stdin), the mesh completes, they end."""
    hosts, ssh = ssh_hosts
    r = fm.run("mesh", "--launch", "ssh", "--hosts", ",".join(a for _, a in hosts[:3]), "-t", "udp", "--ssh", ssh,
               "--remote-fabmeter", remote_fabmeter(fm), "--token-file", token_file, "--json", *SMALL,
               prefix=("ip", "netns", "exec", hosts[0][0]), timeout=120)
    assert r.returncode == 0, r.stderr
    check_pairs(r.stdout, "all-to-all", 3)
    assert not [ln for ln in r.stderr.splitlines() if "token" in ln and ln.startswith("fabmeter: warning")]


def test_launch_over_ssh_to_a_host_without_sshd(fm, ssh_hosts, token_file):
    """Rank 3's host has no ssh server: one line naming it and what ssh said, exit 3, well within the
    control timeout; the ranks that did start are told and end."""
    hosts, ssh = ssh_hosts
    t0 = time.monotonic()
    r = fm.run("mesh", "--launch", "ssh", "--hosts", ",".join(a for _, a in hosts), "-t", "udp", "--ssh", ssh,
               "--remote-fabmeter", remote_fabmeter(fm), "--token-file", token_file, "--timeout-ms", "20000",
               *SMALL, prefix=("ip", "netns", "exec", hosts[0][0]), timeout=120)
    assert r.returncode == 3 and time.monotonic() - t0 < 15, (r.returncode, r.stderr)
    line = one_line_error(r.stderr)
    assert f"rank 3 ({hosts[3][1]}): ssh ended before the rank joined" in line and "refused" in line, line


def test_ranks_launched_over_ssh_end_with_rank_0(fm, ssh_hosts, token_file):
    """rank 0 killed (SIGKILL: no word to anyone) mid-run: its ssh clients see
    their input close, the remote shells end their ranks, and no engine is
    left on any host (the fm fixture checks, the remote ones carry its tag)."""
    hosts, ssh = ssh_hosts
    rank0 = fm.popen("mesh", "--launch", "ssh", "--hosts", ",".join(a for _, a in hosts[:3]), "-t", "tcp",
                     "--ssh", ssh, "--remote-fabmeter", remote_fabmeter(fm), "--token-file", token_file,
                     "--bursts", "40", "--pause-us", "250000", "--warmup", "10",
                     prefix=("ip", "netns", "exec", hosts[0][0]))
    try:
        assert wait_until(lambda: sum(" run oneway " in p for p in tagged_engine_procs(fm.tag)) >= 2, 60)
        rank0.kill()
    finally:
        if rank0.poll() is None:
            rank0.kill()
        rank0.communicate()
    assert wait_until(lambda: not tagged_engine_procs(fm.tag), 15), tagged_engine_procs(fm.tag)
