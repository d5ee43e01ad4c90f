"""Failures end cleanly: bad arguments, an unreachable or lost server, Ctrl-C.

Each test also checks (through the `fm` fixture) that no engine process
it started is left running.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from conftest import built_in_transports, one_line_error
from test_twohost import read_listening


@pytest.mark.parametrize("args", [
    ["lat", "-t", "nosuch"],                # unknown transport
    ["lat", "-t", "tcp", "-s", "0"],        # zero-byte messages
    ["lat", "-t", "udp", "-s", "100000"],   # larger than a UDP datagram
    ["lat", "-t", "tcp", "--bursts", "3"],  # an oneway option given to lat
    ["oneway", "-t", "shm", "-a"],          # sweeps are for lat and bw
    ["bw", "-t", "tcp", "-n", "10", "--duration", "1"],  # both -n and --duration
    ["lat", "-t", "tcp", "--cpus", "0,4096"],
    ["lat", "-t", "tcp", "--poll", "sometimes"],
    ["lat", "-t", "tcp", "-s", "lots"],
    ["lat", "-t", "shm", "--no-such-option"],
], ids=lambda a: " ".join(a))
def test_bad_arguments(fm, args):
    t0 = time.monotonic()
    r = fm.run(*args, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    one_line_error(r.stderr)
    assert r.stdout == ""
    assert time.monotonic() - t0 < 10


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("transport", built_in_transports())
def test_server_unreachable(fm, transport):
    t0 = time.monotonic()
    r = fm.run("lat", "-t", transport, "--server", f"127.0.0.1:{closed_port()}", "--timeout-ms", "1000",
               timeout=30)
    elapsed = time.monotonic() - t0
    assert r.returncode == 3, (r.returncode, r.stderr)
    line = one_line_error(r.stderr)
    assert len(line) > len("fabmeter: error: ") + 5, "a clear message"
    assert elapsed < 6, f"took {elapsed:.1f} s"


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def run_json_with_start(out: Path):
    """run.json once the engine's start line has arrived (params recorded)."""
    try:
        doc = json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if doc["config"].get("params") else None


@pytest.mark.parametrize("transport", built_in_transports())
def test_server_killed_mid_run(fm, tmp_path, transport):
    out = tmp_path / "out"
    trace = tmp_path / "phases"
    fm.env = dict(fm.env, FABMETER_TRACE_PHASES=str(trace))  # both engines mark their point's start
    # Pinned apart: two unpinned busy-polling engines may share one CPU and crawl.
    server = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0", "--once", "--cpu", "1")
    client = None
    try:
        port = read_listening(server)["port"]
        # A short warm-up: on a starved machine 1000 round trips take seconds.
        client = fm.popen("lat", "-t", transport, "--server", f"127.0.0.1:{port}", "--duration", "30",
                          "--warmup", "10", "--cpus", "0", "--out", out)
        # Killed once the client has a measured round trip (after the warm-up, however long a starved machine
        # takes for it), so that the partial point it keeps has one.
        wait_for(lambda: trace.exists() and "client measured" in trace.read_text(), 60,
                 "the client's first measured round trip")
        server.kill()  # `fabmeter serve` became the engine itself: this is kill -9 of the server engine
        t_kill = time.monotonic()
        _, stderr = client.communicate(timeout=30)
        elapsed = time.monotonic() - t_kill
        assert client.returncode == 3, (client.returncode, stderr)
        assert elapsed < 8, f"client took {elapsed:.1f} s to notice"
        assert stderr.strip(), "a message on stderr"
        doc = json.loads((out / "run.json").read_text())
        assert doc["status"] == "failed"
        assert doc["points"], "the partial point is kept"
        p = doc["points"][-1]
        assert p["partial"] is True and p["iterations"] > 0
        if "samples" in p:
            for name in p["samples"].values():
                assert (out / name).is_file()
    finally:
        for proc in (server, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait()


def shm_segments() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("fabmeter-*")}


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_ctrl_c(fm, tmp_path, transport):
    before = shm_segments()
    out = tmp_path / "out"
    # Own session: the SIGINT below reaches this fabmeter and nothing else of pytest's.
    cli = fm.popen("lat", "-t", transport, "--duration", "30", "--out", out, start_new_session=True)
    try:
        wait_for(lambda: run_json_with_start(out), 20, "the run to start")
        time.sleep(1.0)
        os.killpg(cli.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        t0 = time.monotonic()
        _, stderr = cli.communicate(timeout=30)
        assert cli.returncode == 130, (cli.returncode, stderr)
        assert time.monotonic() - t0 < 8
        doc = json.loads((out / "run.json").read_text())
        assert doc["status"] == "interrupted"
        assert doc["points"], "partial results kept"
        assert doc["points"][-1]["partial"] is True
        left = shm_segments() - before
        assert not left, f"shared-memory segments left: {left}"
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
        cli.wait()


@pytest.mark.parametrize("args", [["lat", "-n", "1000000000000000"],
                                  ["oneway", "--bursts", "100000", "--burst-size", "100000"],
                                  ["stream", "--rate", "10000000", "--duration", "86400"]],
                         ids=["lat-n", "oneway-bursts", "stream-duration"])
def test_counts_beyond_sample_memory_are_usage_errors(fm, args):
    # Checked against the plan's sample storage before anything is allocated: exit 2 at once, not 3
    # ("cannot allocate") after the session started.
    t0 = time.monotonic()
    r = fm.run(*args, "-t", "shm", timeout=30)
    assert r.returncode == 2, r.stderr
    assert "B of samples in memory, over the limit of 2 GiB per point" in one_line_error(r.stderr)
    assert time.monotonic() - t0 < 10


def test_busy_client_and_server_on_one_cpu_warn(fm, tmp_path):
    cpu = sorted(os.sched_getaffinity(0))[0]
    r = fm.run("lat", "-t", "shm", "-n", "300", "--warmup", "10", "--cpus", f"{cpu},{cpu}", "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    [warning] = [ln for ln in r.stderr.splitlines() if ln.startswith("fabmeter: warning:")]
    assert f"--cpus {cpu},{cpu}" in warning and "measure the scheduler" in warning
    assert json.loads((tmp_path / "r" / "run.json").read_text())["warnings"] == [warning.split("warning: ", 1)[1]]
    r = fm.run("lat", "-t", "shm", "-n", "300", "--warmup", "10", "--poll", "event", "--cpus", f"{cpu},{cpu}")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr   # sleeping ends take turns as they should
