"""A server's clock-probe replies rewritten on their way (a tokenless
session: nothing proves them) into what no real clock gives: an offset of
1e15 ns, a drift of 2.3 %, a reading of 1e300 ns. The client refuses the fit
(docs/results.md "clock"): one line, exit 3, run.json failed, no point."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
from typing import Callable

import pytest

from conftest import ENGINE, cli_cmd, one_line_error
from test_security_frames import EXCHANGE, frame, read_frame

Rewrite = Callable[[int, bytes], bytes]


class ServerFrameRewriter:
    """Sits between a client and a real server on the control channel, passing every frame through but the
    server's, which `rewrite(type, body)` may replace (the new body)."""

    def __init__(self, server_port: int, rewrite: Rewrite):
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.lsock.settimeout(20)
        self.rewrite = rewrite
        self.server_port = server_port
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            client, _ = self.lsock.accept()
        except OSError:
            return
        server = socket.create_connection(("127.0.0.1", self.server_port), timeout=20)
        threading.Thread(target=self.pump, args=(client, server, None), daemon=True).start()
        self.pump(server, client, self.rewrite)

    def pump(self, src, dst, rewrite: Rewrite | None):
        try:
            while True:
                ftype, body = read_frame(src)
                dst.sendall(frame(ftype, rewrite(ftype, body) if rewrite else body))
        except OSError:   # one end closed: end the other pump too (a close alone would not wake its recv)
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.lsock.close()
        self.thread.join(timeout=20)


# A control-channel probe's answer: the server's clock when the probe came, and its turnaround (clock_probe.cpp).
ANSWER = re.compile(rb"(\d+\.\d{3}) (\d+\.\d{3})")


def answers(change: Callable[[float], str]) -> Rewrite:
    """Every probe answer's reading through `change`."""
    def rewrite(ftype: int, body: bytes) -> bytes:
        m = ANSWER.fullmatch(body) if ftype == EXCHANGE else None
        return (change(float(m[1])) + " ").encode() + m[2] if m else body
    return rewrite


def drifting(rate: float) -> Rewrite:
    first: list[float] = []

    def change(t: float) -> str:
        first[:] = first or [t]
        return f"{first[0] + (t - first[0]) * (1 + rate):.3f}"
    return answers(change)


# A skewed server (FABMETER_CLOCK_SKEW) is another host: the client probes its clock, over the control channel.
PROBES = {"FABMETER_CLOCK_PROBES": "control_channel"}
SKEW = {"FABMETER_CLOCK_SKEW": "5000000,0"}
ONEWAY = ("oneway", "-t", "tcp", "--bursts", "4", "--burst-size", "50", "--pause-us", "20000")


def run_through(fm, tmp_path, rewrite: Rewrite) -> subprocess.CompletedProcess:
    env = dict(fm.env, **PROBES)
    env.pop("FABMETER_TOKEN", None)
    server = subprocess.Popen([str(ENGINE), "serve", "--bind", "127.0.0.1", "--port", "0", "--once"],
                              env=dict(env, **SKEW),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proxy = ServerFrameRewriter(json.loads(server.stdout.readline())["port"], rewrite)
    try:
        return subprocess.run(cli_cmd(*ONEWAY, "--server", f"127.0.0.1:{proxy.port}", "--out", str(tmp_path / "run")),
                              env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90)
    finally:
        proxy.close()
        server.kill()
        server.communicate()


def test_untouched_replies_are_fitted(fm, tmp_path):
    r = run_through(fm, tmp_path, lambda ftype, body: body)
    assert r.returncode == 0, r.stderr
    (point,) = json.loads((tmp_path / "run" / "run.json").read_text())["points"]
    clock = point["clock"]
    assert clock["method"] == "probe", point
    # The fit is as good as it says: the injected offset within its error bound, and the one-way figure no further
    # below zero than that. Not above zero: through this proxy the fit's error (+5 us once, its bound 20 us)
    # can exceed loopback's one-way (~4 us), so a sound fit read a p50 of -0.9 us, 3 runs in 5 (the engine of
    # 1f6c8bd too).
    assert abs(clock["offset_ns"] - int(SKEW["FABMETER_CLOCK_SKEW"].split(",")[0])) <= clock["error_bound_ns"], clock
    assert point["latency_ns"]["p50"] > -clock["error_bound_ns"], point


@pytest.mark.parametrize("rewrite,why", [
    (answers(lambda t: f"{t + 1e15:.3f}"), "before it was sent"),
    (drifting(0.023), "a drift of"),
    (answers(lambda t: "1e300"), "a reading of 1e300 ns"),
], ids=["offset 1e15 ns", "drift 2.3 %", "reading 1e300"])
def test_implausible_clock_replies_are_refused(fm, tmp_path, rewrite, why):
    r = run_through(fm, tmp_path, rewrite)
    assert r.returncode == 3, (r.stdout, r.stderr)
    line = one_line_error(r.stderr)
    assert "the server's clock replies are implausible: " in line and why in line, line
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["status"] == "failed" and doc["points"] == [], doc
