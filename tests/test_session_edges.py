"""The edges of a served session: a stalled handshake is dropped after serve's
--handshake-timeout-ms, a session that fails on the server after its
welcome tells the client why, and a relayed run brings its raw samples back.

Over loopback against the real engine; time bounds are loose (seconds, on a
shared 2-core machine) and one-sided where the machine's load could only
make a wait longer.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ENGINE, built_transports, json_lines, one_line_error, stop_serve


def closed_after(conn: socket.socket, t0: float, limit: float) -> float:
    """Seconds from t0 until the server closed `conn` (EOF or reset); fails past `limit`."""
    conn.settimeout(max(0.01, t0 + limit - time.monotonic()))
    try:
        assert conn.recv(1) == b"", "the server sent something to a connection that never finished its hello"
    except ConnectionResetError:
        pass
    except socket.timeout:
        pytest.fail(f"the server kept a stalled handshake open for {limit} s")
    return time.monotonic() - t0


# ---- serve --handshake-timeout-ms ----

def test_a_stalled_handshake_is_dropped_after_the_configured_time(fm, serve):
    # One connection says nothing (it waits in the accepting process), the
    # other sends half a frame header (a session process waits for the rest
    # of its hello). The old server dropped both after a fixed 2 s.
    proc, event = serve("--handshake-timeout-ms", "5000")
    assert event["handshake_timeout_ms"] == 5000
    silent = socket.create_connection(("127.0.0.1", event["port"]))
    stalled = socket.create_connection(("127.0.0.1", event["port"]))
    t0 = time.monotonic()
    stalled.sendall(b"\x10\x00")
    try:
        for conn in (silent, stalled):
            took = closed_after(conn, t0, 12.0)
            assert took >= 4.5, f"dropped after {took:.1f} s, before the 5 s asked for"
    finally:
        silent.close()
        stalled.close()
    stop_serve(proc)
    log = proc.stderr.read()
    assert "said nothing within 5 s" in log, log
    assert "client hello" in log, log


@pytest.mark.parametrize("value", ["99", "60001", "2s"])
def test_handshake_timeout_out_of_range_is_refused(fm, value):
    r = fm.run("serve", "--port", "0", "--handshake-timeout-ms", value, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("fabmeter-engine: error: --handshake-timeout-ms"), line


# ---- a session that fails after the welcome says why ----

def test_a_session_failing_after_the_welcome_tells_the_client_why(fm, serve):
    # The client names an endpoint port that is taken on the server's host: the
    # session passes its checks, is welcomed, and then cannot bind. The old
    # server closed without a word ("the other end closed the control channel").
    messaging = built_transports("messaging")
    if not messaging:
        pytest.skip("the engine was built without a messaging transport")
    transport = messaging[0]
    _, event = serve()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = fm.run("lat", "-t", transport, "--server", f"127.0.0.1:{event['port']}", "-n", "100",
                   "--endpoint", f"tcp://127.0.0.1:{port}", timeout=60)
    assert r.returncode == 3, (r.returncode, r.stderr)
    line = one_line_error(r.stderr)
    assert "the server's session ended" in line, line
    assert f"127.0.0.1:{port}" in line and "Address already in use" in line, line


# ---- a relayed run keeps its raw samples ----

def test_a_relayed_run_brings_its_raw_samples_back(fm, serve, token_file, tmp_path):
    # The relay's run writes each point's samples in the relay session's own
    # directory and sends them after the point's line, a chunk at a time,
    # removing each; the client writes them under its --out. The old relay
    # refused --out (the samples would have stayed on the relay host).
    _, target = serve("--token-file", token_file)
    relay_proc, relay = serve("--token-file", token_file, "--relay-to", "127.0.0.1")
    out = tmp_path / "out"
    r = subprocess.run([str(ENGINE), "run", "lat", "-t", "tcp", "-n", "300", "--warmup", "10", "--poll", "event",
                        "-a", "--max-size", "4", "--server", f"127.0.0.1:{target['port']}",
                        "--via", f"127.0.0.1:{relay['port']}", "--token-file", token_file, "--out", str(out)],
                       env=fm.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    points = [ln for ln in json_lines(r.stdout) if ln["type"] == "point"]
    assert [p["size"] for p in points] == [1, 2, 4]
    import numpy as np
    for p in points:
        rtt = np.load(out / p["samples"]["rtt_ns"])
        assert len(rtt) == p["iterations"] == 300 and rtt.min() > 0
    assert sorted(f.name for f in out.iterdir()) == sorted(p["samples"]["rtt_ns"] for p in points)
    assert not list(Path(relay["data_dir"]).iterdir()), "the relay kept sample files"
