"""Hardening: a client that sends malformed numbers costs the server
only that session; stream's source lateness is signed; 0 is not "auto";
--out on a full filesystem ends with one line and never half a file."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import ENGINE, json_lines, one_line_error, run_with_pause
from fabmeter.errors import FabmeterError
from fabmeter.results import RunRecord
from test_security_frames import (BARRIER, BYE, CHALLENGE, END_POINT, EXCHANGE, FAIL, HEARTBEAT, HELLO,
                                  WELCOME, frame, hello_body, read_frame)


def recv_frame(s: socket.socket) -> tuple[int, bytes]:
    while True:
        kind, body = read_frame(s)
        if kind != HEARTBEAT:  # the server's sign of life during a point
            return kind, body


def start_session(s: socket.socket, host: str, params: str) -> None:
    """The protocol against a server without a token: hello (no relay, tool or cpus), an empty challenge, welcome."""
    s.sendall(frame(HELLO, hello_body(host=host, params=params)))
    kind, nonce = recv_frame(s)
    assert (kind, nonce) == (CHALLENGE, b""), "a server without a token challenges with nothing"
    assert recv_frame(s)[0] == WELCOME


@pytest.fixture
def server(fm):
    proc = subprocess.Popen([str(ENGINE), "serve", "--bind", "127.0.0.1", "--port", "0"], env=fm.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = json.loads(proc.stdout.readline())["port"]
    yield proc, port
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("port_text", [b"abc", b"", b"-1", b"99999", b"1" * 30, b"12\n34"])
def test_server_survives_a_malformed_client_udp_port(fm, server, port_text):
    # A client with a valid hello, then garbage where its udp port belongs:
    # the server ends that session, telling the client why (a fail frame),
    # and serves the next client.
    proc, port = server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        start_session(s, "fuzzer", "experiment=lat\ntransport=udp\n")
        kind, _ = recv_frame(s)  # the server's own udp port
        assert kind == EXCHANGE
        s.sendall(frame(EXCHANGE, port_text))
        kind, why = recv_frame(s)
        assert kind == FAIL and why.startswith(b"the server's session ended: "), (kind, why)
        with pytest.raises(ConnectionError):
            recv_frame(s)  # ... and gives up on this session
    r = fm.run("lat", "-t", "udp", "--server", f"127.0.0.1:{port}", "-n", "200", "--json")
    assert r.returncode == 0, r.stderr
    assert proc.poll() is None, "the server died"
    assert json_lines(r.stdout)[0]["iterations"] > 0


def test_short_stream_samples_are_counted_not_read(fm, server):
    # A stream source that sends udp samples shorter than their 24-byte
    # header: the sink must count them corrupted without reading a header
    # from past the datagram (it used to read the stale receive buffer and
    # count them as received or duplicated), and then serve the next client.
    proc, port = server
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()  # same host: no clock probes
    short = list(range(1, 24))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.bind(("127.0.0.1", 0))
        start_session(s, boot_id, "experiment=stream\ntransport=udp\nrate=1000\ncount=10\nwarmup=0\n")
        kind, server_port = recv_frame(s)
        assert kind == EXCHANGE
        s.sendall(frame(EXCHANGE, str(u.getsockname()[1]).encode()))
        for _ in range(2):  # "udp connected", "start of point"
            s.sendall(frame(BARRIER))
            assert recv_frame(s)[0] == BARRIER
        for n in short:
            u.sendto(b"\0" * n, ("127.0.0.1", int(server_port)))
        s.sendall(frame(END_POINT, str(len(short)).encode()))
        kind, report = recv_frame(s)
        assert kind == EXCHANGE
        total, received, duplicated, _reordered, corrupted = struct.unpack_from("<5Q", report, 16)
        assert (total, received, duplicated, corrupted) == (10, 0, 0, len(short))
        s.sendall(frame(BYE))
    r = fm.run("stream", "-t", "udp", "--server", f"127.0.0.1:{port}", "--count", "100", "--json")
    assert r.returncode == 0, r.stderr
    assert proc.poll() is None


def test_timerfd_source_late_is_signed(fm, tmp_path):
    # After a late step (the source stopped for 0.2 s) a timerfd read returns
    # at once while expirations of past steps are pending: the next step went
    # out early and its lateness, subtracted unsigned, read ~8.2e18 ns. Now
    # no step leaves early and lateness is signed.
    rate = 5000
    rc, out, err = run_with_pause(fm, tmp_path, ["stream", "-t", "shm", "--timer", "timerfd", "--rate", str(rate),
                                                 "--count", "20000", "--warmup", "0", "--json"],
                                  after_s=0.5, stop_s=0.2)
    assert rc == 0, err
    (p,) = json_lines(out)
    late = p["source_late_ns"]
    assert late["max"] < 1e12, late
    assert late["min"] > -1e9 / rate / 2, late


@pytest.mark.parametrize("args", [["lat", "-n", "0"], ["bw", "--iters", "0"], ["stream", "--count", "0"]])
def test_zero_is_not_auto(fm, args, tmp_path):
    r = fm.run(*args, "-t", "shm")
    assert r.returncode == 2, r.stderr
    assert "auto" in one_line_error(r.stderr)
    # auto is spelled as the word, and a default still reads "auto".
    auto = [a if a != "0" else "auto" for a in args]
    r = fm.run(*auto, "-t", "shm", "--warmup", "0", "--out", str(tmp_path), "--json",
               *(["--rate", "10000"] if args[0] == "stream" else ["-s", "8"]))
    assert r.returncode == 0, r.stderr
    params = json.loads((tmp_path / "run.json").read_text())["config"]["params"]
    assert params["iters" if args[0] != "stream" else "count"] == "auto" and params["warmup"] == 0


@pytest.fixture
def small_fs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "full"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path, leave: int) -> None:
    st = os.statvfs(mnt)
    with open(mnt / "filler", "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))


def test_out_on_a_full_filesystem_run_json(fm, small_fs):
    # No room for run.json: one line, no half-written run.json and no temporary file left.
    fill(small_fs, 1024)
    out = small_fs / "run"
    r = fm.run("lat", "-t", "shm", "-n", "100", "--out", str(out))
    assert r.returncode == 3, r.stderr
    msg = one_line_error(r.stderr)
    assert "run.json" in msg and "No space left" in msg, msg
    assert not (out / "run.json").exists() and not (out / "run.json.tmp").exists()


def test_out_on_a_full_filesystem_samples(fm, small_fs):
    # Room for run.json but not for the samples (20000 float64 = 160 KB):
    # the engine says so in one line, removes the truncated .npy, and
    # run.json is whole and says the run failed.
    out = small_fs / "run"
    r = fm.run("lat", "-t", "shm", "-n", "20000", "--out", str(out))
    assert r.returncode == 3, r.stderr
    msg = one_line_error(r.stderr)
    assert "No space left" in msg and ".npy" in msg, msg
    assert not list(out.glob("*.npy")) and not list(out.glob("*.tmp"))
    doc = json.loads((out / "run.json").read_text())
    assert doc["status"] == "failed" and "No space left" in doc["message"]


def test_full_disk_keeps_the_point_statistics(fm, small_fs):
    # The samples (160 KB) cannot be written, run.json can: the point is recorded with its
    # statistics and samples_error, and the run says the samples were lost.
    out = small_fs / "run"
    r = fm.run("lat", "-t", "shm", "-n", "20000", "--out", str(out))
    assert r.returncode == 3, r.stderr
    assert "samples of 1 of 1 points were not written" in one_line_error(r.stderr)
    doc = json.loads((out / "run.json").read_text())
    assert doc["status"] == "failed" and "No space left" in doc["message"]
    [point] = doc["points"]
    assert point["iterations"] == 20000 and point["latency_ns"]["p50"] > 0 and "samples" not in point
    assert "No space left" in point["samples_error"] and ".npy" in point["samples_error"]
    assert [p.name for p in out.iterdir()] == ["run.json"]   # no truncated array, no temporary file


def test_full_disk_at_the_final_write_leaves_no_running_run(small_fs):
    # run.json says "running" on disk; the disk fills; the final rewrite cannot be made, and the file
    # left behind must not claim the run is still going. One line, exit 3.
    record = RunRecord(small_fs / "run", {"experiment": "lat"}, command=["fabmeter", "lat"])
    record.on_start({"points": 1, "params": {"experiment": "lat"}})
    assert json.loads((small_fs / "run" / "run.json").read_text())["status"] == "running"
    fill(small_fs, 0)
    with pytest.raises(FabmeterError) as e:
        record.finish("ok")
    assert e.value.exit_code == 3 and "No space left" in e.value.message and "\n" not in e.value.message
    doc = json.loads((small_fs / "run" / "run.json").read_text())
    assert doc["status"] == "failed"
    assert sorted(p.name for p in (small_fs / "run").iterdir()) == ["run.json"]
