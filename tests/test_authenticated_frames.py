"""A token guards the whole session: a man in the middle between a client and a token `fabmeter serve`
on loopback changes, drops or replays control frames after the welcome, and the client ends with exit 3,
one line naming the frame, and nothing recorded as a figure. Without a token run.json says the figures are
as the server reported them. Wrong tokens on serve are logged as a summary per source and slowed down."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import one_line_error
from test_security_frames import (AUTH, CHALLENGE, CPU_COST, END_POINT, EXCHANGE, FAIL, HEARTBEAT, HELLO, WELCOME,
                                  Server, _read_exact, clean_env, fm_cmd, frame, hello_body, read_frame, shut_both)

__all__ = ["clean_env"]  # a fixture


class Mitm:
    """A relay between one client and the server that parses frames both ways; `s2c` and `c2s` see each
    frame after the opening (for the server's: after its welcome; the client's: after its proof) as
    (number, type, raw frame) and return the raw frames to pass on instead."""

    def __init__(self, server_port: int, s2c=None, c2s=None):
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.server_port = server_port
        self.edit = {"s2c": s2c, "c2s": c2s}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _pump(self, src: socket.socket, dst: socket.socket, key: str, opened_by: int) -> None:
        opened, n = False, 0
        try:
            while True:
                hdr = _read_exact(src, 5)
                length, ftype = struct.unpack("<IB", hdr)
                raw = hdr + _read_exact(src, length)
                out = [raw]
                if opened and self.edit[key] is not None:
                    out = self.edit[key](n, ftype, raw)
                    n += 1
                opened = opened or ftype == opened_by
                for f in out:
                    dst.sendall(f)
        except OSError:
            pass
        finally:
            shut_both(src, dst)

    def _run(self) -> None:
        c, _ = self.lsock.accept()
        s = socket.create_connection(("127.0.0.1", self.server_port))
        pumps = [threading.Thread(target=self._pump, args=(s, c, "s2c", WELCOME)),
                 threading.Thread(target=self._pump, args=(c, s, "c2s", AUTH))]
        for p in pumps:
            p.start()
        for p in pumps:
            p.join()

    def close(self) -> None:
        self.lsock.close()


def _first(ftype: int, change, bigger_than: int = 0):
    """An edit of the first frame of `ftype` (over `bigger_than` bytes) that passes the rest unchanged."""
    done = []

    def edit(n: int, t: int, raw: bytes) -> list[bytes]:
        if t != ftype or done or len(raw) <= bigger_than:
            return [raw]
        done.append(n)
        return change(bytearray(raw))
    edit.done = done
    return edit


def _flip_middle(raw: bytearray) -> list[bytes]:
    raw[5 + (len(raw) - 5) // 3] ^= 0x01
    return [bytes(raw)]


def _bump_digit(raw: bytearray) -> list[bytes]:
    """cpu_cost is JSON: its first digit one up, so the frame still parses."""
    i = next(i for i in range(5, len(raw)) if chr(raw[i]) in "012345678")
    raw[i] += 1
    return [bytes(raw)]


def _forge_reason(raw: bytearray) -> list[bytes]:
    raw[5:5 + 10] = b"FORGED!!!!"
    return [bytes(raw)]


def _run_through(fm, env: dict, mitm: Mitm, token_file, out, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(fm_cmd("oneway", "-t", "tcp", "--server", f"127.0.0.1:{mitm.port}", "--token-file",
                                 str(token_file), "--out", str(out), *extra),
                          env=env, capture_output=True, text=True, timeout=60)


CASES = {
    # (a) a byte of the server's report (its stamps) rewritten
    "report": lambda: {"s2c": _first(EXCHANGE, _flip_middle, bigger_than=1000)},
    # (b) the server's cpu_cost rewritten
    "cpu_cost": lambda: {"s2c": _first(CPU_COST, _bump_digit)},
    # (c) the server's fail reason rewritten (the server fails on the client's end of the point, changed first,
    # while the client waits for the server's report)
    "fail_reason": lambda: {"c2s": _first(END_POINT, _flip_middle), "s2c": _first(FAIL, _forge_reason)},
    # (d) a frame dropped (the server's first heartbeat: nothing else changes)
    "dropped": lambda: {"s2c": _first(HEARTBEAT, lambda raw: [])},
    # (e) a frame replayed
    "replayed": lambda: {"s2c": _first(HEARTBEAT, lambda raw: [bytes(raw), bytes(raw)])},
}


@pytest.mark.parametrize("case", CASES)
def test_man_in_the_middle_ends_the_run(fm, clean_env, token_file, tmp_path, case):
    srv = Server(clean_env, "--token-file", str(token_file))
    edits = CASES[case]()
    mitm = Mitm(srv.port, **edits)
    try:
        # Over a heartbeat's second after the welcome, so that (d) and (e) have one.
        r = _run_through(fm, clean_env, mitm, token_file, tmp_path / "out", "--bursts", "15", "--burst-size", "200",
                         "--pause-us", "100000")
        assert all(e.done for e in edits.values()), f"the relay never saw its frame: {r.stderr}"
        assert r.returncode == 3, (r.returncode, r.stderr)
        line = one_line_error(r.stderr)
        assert "from the server failed authentication" in line, line
        assert "FORGED" not in r.stderr
        doc = json.loads((tmp_path / "out" / "run.json").read_text())
        assert doc["status"] == "failed" and doc["exit_code"] == 3
        assert doc["points"] == [], "a figure was recorded"
        assert doc["control_channel"] == "authenticated"
        # The server said why on its side too, once.
        assert srv.alive()
    finally:
        mitm.close()
        srv.stop()
    if case == "fail_reason":
        assert sum("from the client failed authentication" in ln for ln in srv.err) == 1, srv.err


def test_untouched_relay_and_tokenless_run_say_what_they_are(fm, clean_env, token_file, tmp_path):
    srv = Server(clean_env, "--token-file", str(token_file))
    mitm = Mitm(srv.port)
    try:
        r = _run_through(fm, clean_env, mitm, token_file, tmp_path / "a", "--bursts", "2", "--burst-size", "200")
        assert r.returncode == 0, r.stderr
        assert json.loads((tmp_path / "a" / "run.json").read_text())["control_channel"] == "authenticated"
        assert "unauthenticated" not in r.stdout
    finally:
        mitm.close()
        srv.stop()
    srv = Server(clean_env)
    try:
        r = subprocess.run(fm_cmd("lat", "-t", "tcp", "-n", "200", "--server", f"127.0.0.1:{srv.port}",
                                  "--out", str(tmp_path / "b")), env=clean_env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        doc = json.loads((tmp_path / "b" / "run.json").read_text())
        assert doc["control_channel"] == "unauthenticated" and doc["points"]
        assert "figures are as the server reported them" in r.stdout
    finally:
        srv.stop()


def _wrong_proof(port: int, source: str = "127.0.0.2") -> float:
    """One handshake from `source` with a proof of zeros; how long its challenge took to come."""
    with socket.socket() as s:
        s.bind((source, 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        t0 = time.monotonic()
        s.sendall(frame(HELLO, hello_body()))
        ftype, _ = read_frame(s)
        took = time.monotonic() - t0
        assert ftype == CHALLENGE
        s.sendall(frame(AUTH, bytes(32)))
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
        return took


def test_wrong_tokens_are_summarised_per_source_and_slowed(fm, clean_env, token_file):
    srv = Server(clean_env, "--token-file", str(token_file))
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: _wrong_proof(srv.port), range(49)))
        slowed = _wrong_proof(srv.port)
        # Another source is not slowed, and a client with the token is served.
        other = _wrong_proof(srv.port, "127.0.0.1")
        env = dict(clean_env, FABMETER_TOKEN=Path(token_file).read_text().strip())
        r = subprocess.run(fm_cmd("lat", "-t", "tcp", "-n", "200", "--server", f"127.0.0.1:{srv.port}"),
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        time.sleep(1.5)  # the last summary's second
    finally:
        srv.stop()
    assert slowed >= 0.5 and other < 0.5, (slowed, other)
    lines = [ln for ln in srv.err if "authentication failed" in ln]
    counts = {src: sum(int(ln.split("authentication failed: ")[1].split()[0]) for ln in lines if f" from {src} " in ln)
              for src in ("127.0.0.2", "127.0.0.1")}
    assert counts == {"127.0.0.2": 50, "127.0.0.1": 1}, lines
    assert len(lines) <= 25, lines  # one a second at most per source, not one per attempt
