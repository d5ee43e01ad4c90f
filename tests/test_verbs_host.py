"""The verbs transport on a host without RDMA devices (the usual build and CI
machine): a clear error pointing at the Soft-RoCE guest, and its option
checks. The datapath itself runs in the guest: `make test-rdma`
(rdma/test-rdma.sh).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import json_lines, need_transport, one_line_error


@pytest.fixture(scope="module")
def verbs_engine(engine):
    info = json.loads(subprocess.run([str(engine), "options"], capture_output=True, text=True, check=True).stdout)
    if "verbs" not in info["transports"]:
        pytest.skip("engine built without the verbs transport (libibverbs-dev/librdmacm-dev missing)")
    return engine


def has_rdma_device() -> bool:
    return os.path.isdir("/sys/class/infiniband") and bool(os.listdir("/sys/class/infiniband"))


@pytest.fixture
def no_device(verbs_engine):
    if has_rdma_device():
        pytest.skip("this host has RDMA devices: the no-device error cannot be seen here")


def test_no_device_cli(fm, no_device):
    r = fm.run("lat", "-t", "verbs", "-n", "10", "--timeout-ms", "3000", timeout=60)
    assert r.returncode == 3, (r.returncode, r.stderr)
    line = one_line_error(r.stderr)
    assert "no RDMA device" in line and "rdma/guest" in line and "Soft-RoCE" in line, line


def engine_pair(fm, engine, *args) -> tuple[subprocess.CompletedProcess, str, int]:
    """The engine alone, server (one session) and client: the client's run, the server's stderr and exit code."""
    server = subprocess.Popen([str(engine), "serve", "--bind", "127.0.0.1", "--port", "0", "--once"],
                              env=fm.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        port = json.loads(server.stdout.readline())["port"]
        r = subprocess.run([str(engine), "run", "lat", "--server", f"127.0.0.1:{port}", "-t", "verbs", *args],
                           capture_output=True, text=True, timeout=60, env=fm.env)
        server_err = server.communicate(timeout=30)[1]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return r, server_err, server.returncode


@pytest.mark.parametrize("service", ["rc", "uc", "ud"])
def test_no_device_engine(fm, no_device, verbs_engine, service):
    # Both ends fail with the same clear reason, the client's run ends with a failed "end" line.
    r, server_err, server_rc = engine_pair(fm, verbs_engine, "--service", service, "-n", "10")
    assert r.returncode == 3, (r.returncode, r.stderr)
    end = [o for o in json_lines(r.stdout) if o.get("type") == "end"]
    assert end and end[-1]["status"] == "failed"
    assert "no RDMA device" in end[-1]["message"] and "rdma/guest" in end[-1]["message"]
    assert "no RDMA device" in server_err
    assert server_rc == 3


def test_named_port_in_both_ends_fabric(fm, no_device, verbs_engine):
    # --device, --port and --gid-index name the port whose facts each end
    # records before connecting (the transport's fabric_port), device or not.
    r, _, _ = engine_pair(fm, verbs_engine, "--cm", "raw", "--device", "mlx5_9", "--port", "2", "--gid-index", "3",
                          "-n", "10")
    assert r.returncode == 3, (r.returncode, r.stderr)
    (start,) = [o for o in json_lines(r.stdout) if o.get("type") == "start"]
    for env in (start["env"], start["server_env"]):
        rdma = env["fabric"]["rdma"]
        assert (rdma["device"], rdma["port"], rdma["gid_index"]) == ("mlx5_9", 2, 3), rdma


@pytest.mark.parametrize("args, says", [
    (["--service", "ud", "--op", "write-imm"], "UD has only send"),
    (["--service", "ud", "--op", "write"], "UD has only send"),
    (["--service", "uc", "--op", "read"], "UC has no RDMA read or atomics"),
    (["--service", "uc", "--op", "atomic-fadd"], "UC has no RDMA read or atomics"),
    (["--service", "uc", "--cm", "rdma_cm"], "--cm raw"),
    (["--service", "rc", "--mtu", "512"], "--mtu needs --cm raw"),
    (["--service", "rc", "--cm", "raw", "--mtu", "1000"], "--mtu must be"),
    (["--service", "rc", "--gid-index", "1"], "--gid-index needs --cm raw"),
    (["--sq-depth", "16", "--signal-every", "32"], "exceeds --sq-depth"),
    (["--rq-depth", "16", "--rq-refill", "32"], "exceeds --rq-depth"),
    (["--service", "tcp"], "expected rc|uc|ud"),
    (["--op", "write", "--poll", "event"], "--poll event: --op write completes nothing at the receiver"),
    (["--op", "read", "--poll", "event"], "--poll event: one-sided ops are polled"),
    (["--op", "atomic-fadd", "-s", "64"], "--op atomic-fadd moves exactly 8 B: give -s 8"),
    (["--op", "atomic-cswap", "-s", "4"], "--op atomic-cswap moves exactly 8 B: give -s 8 (not 4)"),
    (["--op", "atomic-cswap", "-a", "--max-size", "64"], "moves exactly 8 B"),
    (["--op", "read", "--experiment", "oneway"], "--op read is one-sided"),
    (["--op", "atomic-fadd", "--experiment", "stream"], "runs lat and bw, not stream"),
    (["--op", "send", "--passive-rx", "--experiment", "bw"], "--passive-rx needs --op write on --service rc"),
    (["--service", "uc", "--op", "write", "--passive-rx", "--experiment", "bw"], "only RC acknowledges a write"),
    (["--op", "write", "--passive-rx"], "--passive-rx does not apply to 'lat' (only to bw)"),
    (["--op", "write", "--passive-rx", "--poll", "event", "--experiment", "bw"], "--poll event: one-sided ops are polled"),
    (["--op", "write", "--passive-rx", "--size-spread", "10", "--experiment", "bw"], "--size-spread: this op moves"),
    (["--service", "ud", "--ops", "send,read", "--experiment", "bw"], "--ops send,read: verbs: --op read needs"),
    (["--service", "ud", "--ops", "send,write", "--experiment", "bw"], "UD has only send"),
    (["--service", "uc", "--ops", "send,read", "--experiment", "bw"], "UC has no RDMA read or atomics"),
    (["--ops", "send,atomic-fadd", "-s", "64", "--experiment", "bw"], "--ops send,atomic-fadd moves exactly 8 B"),
    (["--ops", "read,write", "--poll", "event", "--experiment", "bw"], "--poll event: one-sided ops are polled"),
    (["--op", "read", "--ops", "send,read", "--experiment", "bw"], "give --op or --ops, not both"),
    (["--ops", "send,read,send", "--experiment", "bw"], "--ops names send twice"),
    (["--ops", "send,receive", "--experiment", "bw"], "--ops: 'receive' is no --op (send,write-imm"),
    (["--ops", "send,read", "--flows", "40", "--experiment", "bw"], "more than 64 connections"),
    (["--ops", "send,read"], "--ops does not apply to 'lat' (only to bw)"),
], ids=lambda a: " ".join(a) if isinstance(a, list) else None)
def test_refused_combinations(fm, verbs_engine, args, says):
    experiment = "lat"
    if "--experiment" in args:  # (a pseudo-option of this table: the experiment to run)
        i = args.index("--experiment")
        experiment, args = args[i + 1], args[:i] + args[i + 2:]
    extra = [] if experiment in ("oneway", "stream") else ["-n", "10"]
    r = fm.run(experiment, "-t", "verbs", *extra, *args, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert says in one_line_error(r.stderr)
    assert r.stdout == ""


@pytest.mark.parametrize("option", [["--service", "uc"], ["--cm", "raw"], ["--device", "rxe0"], ["--mtu", "1024"]])
def test_verbs_options_refused_on_tcp(fm, engine, option):
    # (values other than the defaults: validate() refuses options whose value differs from the default)
    r = fm.run("lat", "-t", "tcp", "-n", "10", *option, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "does not apply to transport 'tcp'" in one_line_error(r.stderr)


def test_verbs_knobs_in_help(fm, verbs_engine):
    r = fm.run("lat", "--help", timeout=30)
    assert r.returncode == 0
    for knob in ["--service", "--op", "--inline", "--signal-every", "--sq-depth", "--rq-depth", "--rq-refill",
                 "--mtu", "--device", "--port", "--gid-index", "--cm"]:
        assert knob in r.stdout, knob


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("ops", ["read", "send,read"])
def test_ops_refused_where_no_op_is_chosen(fm, engine, transport, ops):
    # tcp and shm move sends only: they cannot run a read, nor several ops.
    r = fm.run("bw", "-t", transport, "-n", "10", "--ops", ops, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f"--ops does not apply to transport '{transport}'" in one_line_error(r.stderr)


def test_several_ops_refused_on_ofi(fm, engine):
    need_transport("ofi")
    r = fm.run("bw", "-t", "ofi", "-n", "10", "--ops", "send,write-imm", timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "ofi: --ops send,write-imm: its connections run one op each point (several ops at once: verbs)" in \
        one_line_error(r.stderr)


def test_ops_reach_both_ends(fm, no_device, verbs_engine):
    # --ops travels to the server in the start line; each op's connection then
    # fails alike for want of a device (the datapath runs in the guest).
    server = subprocess.Popen([str(verbs_engine), "serve", "--bind", "127.0.0.1", "--port", "0", "--once"],
                              env=fm.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        port = json.loads(server.stdout.readline())["port"]
        r = subprocess.run([str(verbs_engine), "run", "bw", "--server", f"127.0.0.1:{port}", "-t", "verbs",
                            "--ops", "send,read,write", "-n", "10"], capture_output=True, text=True, timeout=60,
                           env=fm.env)
        server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert r.returncode == 3, (r.returncode, r.stderr)
    (start,) = [o for o in json_lines(r.stdout) if o.get("type") == "start"]
    assert start["params"]["ops"] == "send,read,write" and start["params"]["op"] == "send", start["params"]
