"""A step of CLOCK_REALTIME during a clock probe burst (date -s, an NTP
step). The UDP probes' kernel stamps are CLOCK_REALTIME, each put on the
engine's clock by a pair read beside its probe; a step between the two moves
the probe by the step, which its delay does not show. An end that sees the
step (a timerfd the kernel cancels on every set of the clock) drops the
burst's stamps and both take it again over the control channel.

A time namespace cannot step CLOCK_REALTIME (it offsets only monotonic and
boottime), so the test steps this machine's clock, as root: forward by
STEP_S while the client is stopped inside its first probe, and back by as
much 0.3 s later, whatever happens, with a net error of microseconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import ENGINE, json_lines, wait_until

STEP_S = 0.02
SKEW_OFFSET_NS = 5_000_000   # FABMETER_CLOCK_SKEW on the server: another host, whose offset is known


def can_set_the_clock() -> bool:
    if os.geteuid() != 0:
        return False
    caps = next(ln for ln in open("/proc/self/status") if ln.startswith("CapEff:"))
    return bool(int(caps.split()[1], 16) >> 25 & 1)   # CAP_SYS_TIME


def step_realtime(seconds: float) -> None:
    time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME) + seconds)


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.skipif(not can_set_the_clock(), reason="needs root with CAP_SYS_TIME (it steps CLOCK_REALTIME)")
def test_a_realtime_step_during_a_probe_burst_is_caught_and_the_burst_taken_again(fm):
    server = subprocess.Popen([str(ENGINE), "serve", "--bind", "127.0.0.1", "--port", "0", "--once"],
                              env=dict(fm.env, FABMETER_CLOCK_SKEW=f"{SKEW_OFFSET_NS},0"), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = None
    try:
        port = json.loads(server.stdout.readline())["port"]
        # One point of 400 messages 5 ms apart: its 2 s hold no probe burst,
        # so the step back lands between the first burst and the second.
        client = subprocess.Popen(
            [str(ENGINE), "run", "oneway", "-t", "tcp", "-s", "32", "--poll", "event", "--bursts", "400",
             "--burst-size", "1", "--pause-us", "5000", "--clock", "monotonic", "--server", f"127.0.0.1:{port}"],
            env=dict(fm.env, FABMETER_STOP_AT="client clock probe"), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert wait_until(lambda: stopped(client.pid), 30), "the client never reached its first clock probe"
        step_realtime(STEP_S)
        try:
            client.send_signal(signal.SIGCONT)
            time.sleep(0.3)
        finally:
            step_realtime(-STEP_S)
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, err
        assert server.wait(timeout=10) == 0
    finally:
        for proc in (client, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    (clock,) = [ln["clock"] for ln in json_lines(out) if ln["type"] == "clock"]
    # The stepped burst again over the control channel, the other by UDP.
    assert clock["realtime_steps"] >= 1 and clock["fallback_bursts"] == clock["realtime_steps"], clock
    assert clock["path"] == "mixed", clock
    # The fit holds the server's offset (no drift injected; the two engines'
    # clocks are one CLOCK_MONOTONIC) within its bound and 100 ns of stamp slack.
    assert abs(clock["offset_ns"] - SKEW_OFFSET_NS) <= clock["error_bound_ns"] + 100, clock
    assert clock["error_bound_ns"] < STEP_S * 1e9 / 10, clock
