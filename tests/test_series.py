"""`fabmeter-engine run --series`: one engine client for many runs, and with --via one relay session for them all
(fabmeter mesh's sources run their pairs so). Two serves on 127.0.0.1 and 127.0.0.2: the relay and the target."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import ENGINE, free_port, json_lines
from test_security_frames import (AUTH, CHALLENGE, EXCHANGE, HELLO, PROTOCOL, WELCOME, frame, hello_body, read_frame,
                                  sealer)

RELAY, TARGET = "127.0.0.1", "127.0.0.2"
MAX_DURATION_S = 2                  # the relay's --max-duration in the watchdog test
WATCHDOG_S = MAX_DURATION_S + 2     # ... and its watchdog (server_session.hpp's kWatchdogGraceS more)


@pytest.fixture
def serves(fm, token_file, tmp_path, request):
    """The relay's and the target's serve, each tracing its phases to a file of its own (FABMETER_TRACE_PHASES:
    one "server hello" line per session, one "client hello" line per run of the relay's run process); the
    relay's --max-duration the test's parameter, if any."""
    limit = ("--max-duration", str(request.param)) if hasattr(request, "param") else ()
    port = free_port()
    procs, traces = [], []
    try:
        for host, extra in ((RELAY, ("--relay-to", f"{RELAY},{TARGET}", *limit)), (TARGET, ())):
            trace = tmp_path / f"trace-{host}"
            env = {**fm.env, "FABMETER_TRACE_PHASES": str(trace)}
            env.pop("FABMETER_TOKEN", None)
            p = subprocess.Popen([str(ENGINE), "serve", "--bind", host, "--port", str(port), "--token-file",
                                  token_file, *extra], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            assert json.loads(p.stdout.readline())["event"] == "listening"
            procs.append(p)
            traces.append(trace)
        yield port, traces
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.communicate(timeout=20)


def phases(trace) -> list[tuple[str, str]]:
    """(role phase, pid) of each traced phase boundary."""
    return [(" ".join(ln.split()[:2]), ln.split()[2]) for ln in trace.read_text().splitlines()] if trace.exists() else []


def series(fm, token_file, lines: list, via: str | None, *extra: str):
    """`run lat --series` fed `lines` (a number N instead: wait for N runs to end, then 1 s more than the relay's
    watchdog allows); its stdout's runs, each [lines up to its end line], and its exit code."""
    env = dict(fm.env)
    env.pop("FABMETER_TOKEN", None)
    p = subprocess.Popen([str(ENGINE), "run", "lat", "--series", "-t", "tcp", "-n", "300", "--warmup", "30",
                          "--token-file", token_file, *(["--via", via] if via else []), *extra],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[dict] = []
    reader = threading.Thread(target=lambda: out.extend(json.loads(ln) for ln in p.stdout if ln.startswith("{")),
                              daemon=True)
    reader.start()
    for line in lines:
        if isinstance(line, int):
            deadline = time.monotonic() + 60
            while sum(o["type"] == "end" for o in list(out)) < line and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(WATCHDOG_S + 1)
        else:
            p.stdin.write(line + "\n")
            p.stdin.flush()
    p.stdin.close()
    err = p.stderr.read()
    p.wait(timeout=120)
    reader.join(timeout=10)
    runs, run = [], []
    for obj in out:
        run.append(obj)
        if obj["type"] == "end":
            runs.append(run)
            run = []
    assert not run, f"lines after the last end line: {run}"
    return runs, p.returncode, err


def test_a_series_runs_each_line_on_one_engine_and_one_relay_session(fm, token_file, serves):
    port, (relay_trace, target_trace) = serves
    start = time.monotonic_ns() + 1_500_000_000
    lines = [f"{TARGET}:{port} 0", f"{TARGET}:{port} {start}", f"{TARGET}:1 0", f"{TARGET}:{port} 0"]
    runs, rc, err = series(fm, token_file, lines, f"{RELAY}:{port}", "--timeout-ms", "1000")
    assert rc == 0, err
    assert len(runs) == 4
    ok = [runs[i] for i in (0, 1, 3)]
    for run in ok:      # each run whole and its own: start, its one point of 300 round trips, end with code 0
        kinds = [o["type"] for o in run]
        assert kinds[-3:] == ["point", "transport", "end"] and "start" in kinds, run
        point = next(o for o in run if o["type"] == "point")
        assert point["iterations"] == 300 and point["rtt_ns"]["p50"] > 0 and run[-1] == {"type": "end",
                                                                                        "status": "ok", "code": 0}
    # The second run waited for its start on the relay's clock, the others did not.
    relay_line = next(o for o in runs[1] if o["type"] == "relay")
    point = next(o for o in runs[1] if o["type"] == "point")
    assert point["started_mono_ns"] - relay_line["clock_offset_ns"] >= start - relay_line["clock_error_ns"]
    assert all("started_mono_ns" not in o for run in (runs[0], runs[3]) for o in run)
    # A run whose server is not there fails alone, with its code; the series and its session go on.
    assert runs[2][-1]["code"] == 3 and runs[2][-1]["status"] == "failed" and "127.0.0.2:1" in runs[2][-1]["message"]
    assert [next(o["run"] for o in run if o["type"] == "relay") for run in runs] == [1, 2, 3, 4]
    # One session on the relay and one run process there for the four runs; the target saw a session per run.
    relay_sessions = [pid for ph, pid in phases(relay_trace) if ph == "server hello"]
    relay_runs = {pid for ph, pid in phases(relay_trace) if ph == "client hello"}
    assert len(relay_sessions) == 1 and len(relay_runs) == 1, phases(relay_trace)
    assert len({pid for ph, pid in phases(target_trace) if ph == "server hello"}) == 3


def test_a_series_without_relay_starts_once(fm, token_file, serves, tmp_path):
    port, _ = serves
    trace = tmp_path / "client-trace"
    env = {"FABMETER_TRACE_PHASES": str(trace)}
    fm.env.update(env)
    try:
        runs, rc, err = series(fm, token_file, [f"{TARGET}:{port} 0"] * 3, None)
    finally:
        fm.env.pop("FABMETER_TRACE_PHASES")
    assert rc == 0, err
    assert [run[-1] for run in runs] == [{"type": "end", "status": "ok", "code": 0}] * 3
    assert len({pid for ph, pid in phases(trace) if ph == "client hello"}) == 1      # one process, three sessions
    assert len([1 for ph, _ in phases(trace) if ph == "client hello"]) == 3


class Injector:
    """A TCP proxy to the relay that, in its first connection, puts an exchange frame of its own (`inject`, its
    body), sealed as the client would seal it (it knows the token), in place of the series' first
    "next HOST[:PORT]": what the relay reads there is out of order."""

    def __init__(self, port: int, inject: bytes, token_file: str):
        self.listener = socket.create_server((RELAY, 0))
        self.port, self.target, self.inject = self.listener.getsockname()[1], port, inject
        self.token = Path(token_file).read_bytes().strip()
        self.seen: dict[int, bytes] = {}   # the first connection's hello, server nonce and welcome body
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection((RELAY, self.target))
            first = self.connections == 1
            threading.Thread(target=self._pump, args=(client, upstream, first, first), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False, first), daemon=True).start()

    def _pump(self, src, dst, replace_next: bool, note: bool) -> None:
        sent = None  # the client's frames after its proof
        try:
            while True:
                ftype, body = read_frame(src)
                if note and ftype in (HELLO, CHALLENGE, WELCOME):
                    self.seen[ftype] = body if ftype != WELCOME else body.split(b"\n", 1)[1]
                if replace_next and ftype == EXCHANGE and body.startswith(b"next "):
                    seal = sealer(self.token, self.seen[HELLO], self.seen[CHALLENGE], self.seen[WELCOME],
                                  from_server=False, first=sent)
                    dst.sendall(seal(EXCHANGE, self.inject))
                    replace_next = False
                else:
                    dst.sendall(frame(ftype, body))
                sent = 0 if ftype == AUTH else None if sent is None else sent + 1
        except (OSError, ConnectionError):
            try:        # what came is passed on whole, then the end: the other direction finishes by itself
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("inject,why", [
    (b"start 0", "expected 'next HOST[:PORT]' or 'done'"),
    (b"next 127.0.0.9:1", "may not relay to 127.0.0.9"),
    # A target among --relay-to with a second line behind it: never the run's next line.
    (b"next [127.0.0.2] 0\n127.0.0.9:1", "a series' target must be HOST[:PORT]"),
])
def test_a_frame_out_of_order_ends_only_its_session(fm, token_file, serves, inject, why):
    """After a run, the relay takes only "next HOST[:PORT]" (a host of its --relay-to) or "done": anything else ends
    that session, with the reason for the client; the run then fails alone and the series goes on in a new
    session, the serve serving as before."""
    port, (relay_trace, _) = serves
    proxy = Injector(port, inject, token_file)
    try:
        runs, rc, err = series(fm, token_file, [f"{TARGET}:{port} 0"] * 3, f"{RELAY}:{proxy.port}")
    finally:
        proxy.close()
    assert rc == 0, err
    assert runs[0][-1]["code"] == 0 and runs[2][-1]["code"] == 0, runs
    assert runs[1][-1]["status"] == "failed" and why in runs[1][-1]["message"], runs[1][-1]
    assert proxy.connections == 2
    assert len([1 for ph, _ in phases(relay_trace) if ph == "server hello"]) == 2


@pytest.mark.parametrize("serves", [MAX_DURATION_S], indirect=True)
def test_a_series_session_lives_within_the_servers_max_duration(fm, token_file, serves):
    """The relay's watchdog (--max-duration 2 + 2 s) is set again at each run: runs in quick succession go on in
    one session past it, and a client idle beyond it between runs loses that session (its next run fails) and
    the series opens another."""
    port, (relay_trace, _) = serves
    lines = [f"{TARGET}:{port} {time.monotonic_ns() + int(i * 1.5e9)}" for i in range(4)]    # 4.5 s and more
    runs, rc, err = series(fm, token_file, lines + [4, f"{TARGET}:{port} 0", f"{TARGET}:{port} 0"], f"{RELAY}:{port}")
    assert rc == 0, err
    codes = [run[-1]["code"] for run in runs]
    assert codes[:4] == [0, 0, 0, 0] and codes[4] != 0 and codes[5] == 0, [run[-1] for run in runs]
    assert len([1 for ph, _ in phases(relay_trace) if ph == "server hello"]) == 2


def test_an_old_client_is_told_the_protocol_version(fm, serves):
    port, _ = serves
    with socket.create_connection((RELAY, port), timeout=5) as s:
        s.sendall(frame(1, hello_body(version=PROTOCOL - 1)))
        ftype, body = read_frame(s)
    assert body.decode() == f"protocol version mismatch: server speaks {PROTOCOL}, client {PROTOCOL - 1}"
