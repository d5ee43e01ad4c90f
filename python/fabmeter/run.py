"""One experiment: a server and a client engine, their JSON lines, their end.

Starts a local server (or uses a remote one) and a client for one
experiment, streams the client's JSON lines and makes sure that no engine
process outlives the run, whatever happens: bad arguments, a lost server or client,
Ctrl-C (procs.py: process groups, signal forwarding).
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from fabmeter import procs
from fabmeter.engine import engine_options, find_engine, last_error_line
from fabmeter.errors import (EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, FabmeterError,
                             exit_code_of)
from fabmeter.procs import KILL_GRACE_S
from fabmeter.terminal import shown_lines

SERVER_START_TIMEOUT_S = 10.0
SERVER_EXIT_TIMEOUT_S = 5.0     # after the client finished, the --once server should follow


# --- one experiment ---------------------------------------------------------

@dataclass
class RunSpec:
    experiment: str                      # one of the engine's experiments (`fabmeter-engine options`)
    options: dict                        # engine option key -> typed value (options.py); absent: the default
    # (client, server) pinning, each a CPU or "A+A2" (--flows); None = unpinned. A remote server's own CPU only
    # with `via` (the engine's --server-cpu): else its serve's --cpu
    cpus: Optional[tuple] = None
    server: Optional[str] = None         # HOST[:PORT] of a remote server; None = start one locally
    out: Optional[Path] = None           # results folder (the engine writes .npy there)
    engine: Optional[str] = None
    token_file: Optional[str] = None     # remote server's secret (else $FABMETER_TOKEN)
    start_at_ns: Optional[int] = None    # time.monotonic_ns() instant the first point starts (engine --start-at)
    via: Optional[str] = None            # HOST[:PORT] of a `fabmeter serve` that runs the client against `server`
    via_hop: Optional[str] = None        # HOST[:PORT] of a forwarding hop the session goes through to `server`
    hop_transport: Optional[str] = None  # with via_hop: the transport from the hop to `server` (None: the run's)


@dataclass
class RunResult:
    status: str = "failed"              # ok | failed | interrupted
    exit_code: int = EXIT_INTERNAL
    message: str = ""
    start: Optional[dict] = None        # the engine's "start" line
    points: list = field(default_factory=list)
    end: Optional[dict] = None          # the engine's "end" line
    events: list = field(default_factory=list)  # other lines, e.g. {"type": "transport", "granted": ...}
    server_port: Optional[int] = None


class LocalServer:
    """`fabmeter-engine serve --bind 127.0.0.1 --port 0 --once ...`, port read from its first line
    (`max_sessions`: serve that many sessions at once until stopped, instead of one)."""

    def __init__(self, engine: str, cpu: Optional[int], forwarder: procs.SignalForwarder,
                 bind: str = "127.0.0.1", env: Optional[dict] = None, max_sessions: Optional[int] = None):
        # The user's own server for one run: no time limit (memory keeps the default).
        cmd = [engine, "serve", "--bind", bind, "--port", "0", "--max-duration", "0"]
        cmd += ["--once"] if max_sessions is None else ["--max-sessions", str(max_sessions)]
        if cpu is not None:
            cmd += ["--cpu", str(cpu)]
        self.proc = procs.spawn(cmd, env)
        forwarder.procs.append(self.proc)
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self._rest = bytearray()
        line = procs.read_line(self.proc.stdout.fileno(), SERVER_START_TIMEOUT_S, self._rest)
        event = _parse_json(line.decode(errors="replace")) if line else None
        if not event or event.get("event") != "listening" or "port" not in event:
            if forwarder.interrupted:
                self.stop()
                raise FabmeterError("interrupted", EXIT_INTERRUPTED)
            procs.reap(self.proc, 0.5, signal.SIGTERM)
            err = self.proc.stderr.read().decode(errors="replace")
            rc = self.proc.returncode
            msg = last_error_line(err) or (f"first line was {line!r}" if line else "no 'listening' line")
            raise FabmeterError(f"local server did not start: {msg}", exit_code_of(rc))
        self.port = int(event["port"])
        self.bind = event.get("bind", bind)
        self._threads: list[procs.Drain] = []

    def start_draining(self) -> None:
        def keep(lines):
            return lambda ln: ln is not None and lines.append(ln)
        self._threads = [procs.Drain(self.proc.stdout, keep(self.stdout_lines), bytes(self._rest)),
                         procs.Drain(self.proc.stderr, keep(self.stderr_lines))]
        for thread in self._threads:
            thread.start()

    def stop(self, wait: float = 0.0) -> None:
        """Give the server `wait` seconds to end by itself, then make it end."""
        procs.reap(self.proc, wait if wait > 0 else 0.5, None if wait > 0 else signal.SIGTERM)
        for thread in self._threads:
            thread.join(timeout=2)

    def error_line(self) -> str:
        return last_error_line("\n".join(self.stderr_lines))


def _parse_json(line: str) -> Optional[dict]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _one_cpu_warning(spec: RunSpec, poll: str) -> Optional[str]:
    """A busy-polling client and server pinned to one CPU take turns in the scheduler's time slices, so the
    figures measure the scheduler (p50 in milliseconds): allowed, as an experiment may want it, but said."""
    if spec.server is None and spec.cpus and len(spec.cpus) == 2 and spec.cpus[0] == spec.cpus[1] and poll == "busy":
        return (f"--cpus {spec.cpus[0]},{spec.cpus[1]}: the busy-polling client and server share one CPU and take "
                "turns in the scheduler's time slices: the figures measure the scheduler (give two CPUs, or --poll "
                "event)")
    return None


def execute(spec: RunSpec,
            on_start: Optional[Callable[[dict], None]] = None,
            on_point: Optional[Callable[[dict], None]] = None,
            on_event: Optional[Callable[[dict], None]] = None) -> RunResult:
    """Runs one experiment (server + client) and returns what happened.

    Never raises for engine failures: the result carries the status, exit
    code and one-line message, and whatever points were measured.
    """
    engine = spec.engine or find_engine()
    table = engine_options(engine)
    res = RunResult()
    server: Optional[LocalServer] = None
    client: Optional[subprocess.Popen] = None
    client_err: list[str] = []
    warning = _one_cpu_warning(spec, spec.options.get("poll", table["poll"].default))
    if warning:
        sys.stderr.write(f"fabmeter: warning: {warning}\n")
        if on_event is not None:
            on_event({"type": "warning", "message": warning})
    # A local run's server admits only its own client: a fresh secret per run,
    # passed through the environment (another local user cannot take the port).
    env = None if spec.server is not None else {**os.environ, "FABMETER_TOKEN": secrets.token_hex(32)}
    with procs.SignalForwarder() as fwd:
        try:
            if spec.server is None:
                server = LocalServer(engine, spec.cpus[1] if spec.cpus and len(spec.cpus) > 1 else None, fwd,
                                     env=env)
                res.server_port = server.port
                address = f"127.0.0.1:{server.port}"
            else:
                address = spec.server
            if fwd.interrupted:
                raise FabmeterError("interrupted before the run started", EXIT_INTERRUPTED)

            cmd = [engine, "run", spec.experiment, "--server", address]
            if spec.cpus:
                cmd += ["--cpu", str(spec.cpus[0])]
            if spec.out is not None:
                cmd += ["--out", str(spec.out)]
            if spec.server is not None and spec.token_file is not None:
                cmd += ["--token-file", spec.token_file]
            if spec.start_at_ns is not None:
                cmd += ["--start-at", str(spec.start_at_ns)]
            if spec.via_hop is not None:
                cmd += ["--via-hop", spec.via_hop] + (["--hop-transport", spec.hop_transport]
                                                      if spec.hop_transport else [])
            if spec.via is not None:
                cmd += ["--via", spec.via]
                if spec.cpus and len(spec.cpus) > 1:
                    cmd += ["--server-cpu", str(spec.cpus[1])]
            cmd += table.engine_argv(spec.options)
            client = procs.spawn(cmd, env)
            fwd.procs.append(client)

            # Readers start only now: no thread may be alive during fork.
            lines: queue.Queue = queue.Queue()
            readers = [procs.Drain(client.stdout, lines.put),
                       procs.Drain(client.stderr, lambda ln: ln is not None and client_err.append(ln))]
            for thread in readers:
                thread.start()
            if server is not None:
                server.start_draining()

            timeout_ms = spec.options.get("timeout_ms", table["timeout_ms"].default)
            _stream(lines, client, server, timeout_ms / 1000.0, res, on_start, on_point, on_event)

            try:
                client.wait(timeout=10)
            except subprocess.TimeoutExpired:
                procs.reap(client, 0.1, signal.SIGTERM)
            for thread in readers:
                thread.join(timeout=2)
            rc = client.returncode
            _classify(res, rc, "\n".join(client_err), fwd, server)
            _samples_lost(res)
        except FabmeterError as e:
            res.status = "interrupted" if e.exit_code == EXIT_INTERRUPTED else "failed"
            res.exit_code, res.message = e.exit_code, e.message
        finally:
            # After a good run the --once server ends by itself; after Ctrl-C it
            # has had its SIGINT and gets time to clean up (shm segments); a
            # failed client leaves it waiting for nothing: stop it now.
            if client is not None and client.poll() is None:
                procs.reap(client, KILL_GRACE_S, signal.SIGTERM)
            if server is not None:
                if res.exit_code == EXIT_OK:
                    server.stop(SERVER_EXIT_TIMEOUT_S)
                else:
                    server.stop(KILL_GRACE_S if fwd.interrupted else 0.0)
        # The client only sees that the server went away; the server may know why.
        if server is not None and res.exit_code == EXIT_RUNTIME and server.proc.returncode not in (0, None):
            why = server.error_line()
            if why and why not in res.message:
                res.message = f"{res.message} (server: {why})" if res.message else f"server: {why}"
        if fwd.interrupted:
            res.status, res.exit_code = "interrupted", EXIT_INTERRUPTED
            res.message = res.message or "interrupted"
    return res


def _fabric_warnings(start: dict) -> list[str]:
    """The warnings of both ends' fabric (a device on another NUMA node than the pinned CPU) in an engine's
    start line, each prefixed with its end."""
    out = []
    for end, key in (("client", "env"), ("server", "server_env")):
        env = start.get(key)
        fabric = env.get("fabric") if isinstance(env, dict) else None
        said = fabric.get("warnings") if isinstance(fabric, dict) else None
        out += [f"{end}: {w}" for w in (said if isinstance(said, list) else ()) if isinstance(w, str)]
    return out


def _stream(lines: queue.Queue, client: subprocess.Popen, server: Optional[LocalServer],
            timeout_s: float, res: RunResult, on_start, on_point, on_event) -> None:
    """Reads the client's JSON lines until EOF, with a watchdog on the server."""
    server_gone_at: Optional[float] = None
    # The engine notices a lost other end itself within its timeout; this is
    # only a safety net if it does not.
    grace = timeout_s + 5.0
    stop_sent = False
    while True:
        try:    # no local server to watch: no timer either (a wake-up on a busy-polling end's CPU holds it off)
            line = lines.get(timeout=0.2 if server is not None else None)
        except queue.Empty:
            if server is not None and server.proc.poll() is not None and client.poll() is None:
                server_gone_at = server_gone_at or time.monotonic()
                if time.monotonic() - server_gone_at > grace and not stop_sent:
                    procs.send(client, signal.SIGTERM)
                    stop_sent = True
                    res.message = "the server engine exited and the client did not notice in time"
            continue
        if line is None:
            return
        obj = _parse_json(line)
        if obj is None:
            if line.strip():
                print(shown_lines(line), file=sys.stderr)  # engine log text: pass it on
            continue
        if take_line(res, obj, on_start, on_point, on_event) == "start":
            for warning in _fabric_warnings(obj):
                sys.stderr.write(f"fabmeter: warning: {shown_lines(warning)}\n")
                if on_event is not None:
                    on_event({"type": "warning", "message": warning})


def take_line(res: RunResult, obj: dict, on_start=None, on_point=None, on_event=None) -> Optional[str]:
    """One of the engine's JSON lines into res by its type (the start, a point, the end, else an event), handed to
    the callback for its kind; returns the type."""
    kind = obj.get("type")
    callback = None
    if kind == "start":
        res.start, callback = obj, on_start
    elif kind == "point":
        res.points.append(obj)
        callback = on_point
    elif kind == "end":
        res.end = obj
    else:
        res.events.append(obj)
        callback = on_event
    if callback:
        callback(obj)
    return kind


def _classify(res: RunResult, rc: int, stderr: str, fwd: procs.SignalForwarder,
              server: Optional[LocalServer]) -> None:
    end_msg = (res.end or {}).get("message") or ""
    err = last_error_line(stderr)
    if fwd.interrupted or rc == EXIT_INTERRUPTED:
        res.status, res.exit_code = "interrupted", EXIT_INTERRUPTED
        res.message = end_msg or err or "interrupted"
    elif rc == EXIT_OK:
        res.status, res.exit_code = (res.end or {}).get("status", "ok"), EXIT_OK
        res.message = end_msg
    elif rc == EXIT_USAGE:
        res.status, res.exit_code = "failed", EXIT_USAGE
        res.message = err or end_msg or "usage error"
    elif rc == EXIT_RUNTIME:
        res.status, res.exit_code = "failed", EXIT_RUNTIME
        res.message = end_msg or err or "runtime failure"
    elif rc is not None and rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
        res.status = "failed"
        if res.message:  # we stopped it (watchdog)
            res.exit_code = EXIT_RUNTIME
        else:
            res.exit_code = EXIT_INTERNAL
            res.message = f"fabmeter-engine run died of {name}"
    else:
        res.status, res.exit_code = "failed", EXIT_INTERNAL
        res.message = err or end_msg or f"fabmeter-engine run exited {rc}"


def _samples_lost(res: RunResult) -> None:
    """Points whose samples the engine could not write (a full disk) keep their statistics; a run that
    went well otherwise failed to keep what it measured, and says so."""
    lost = [p for p in res.points if p.get("samples_error")]
    if lost and res.exit_code == EXIT_OK:
        res.status, res.exit_code = "failed", EXIT_RUNTIME
        res.message = (f"the samples of {len(lost)} of {len(res.points)} points were not written (their statistics "
                       f"are kept): {lost[0]['samples_error']}")


def run_limits(cpus: Optional[tuple[int, ...]], iters: Optional[int] = None,
               engine: Optional[str] = None, timeout: float = 120.0, args: Sequence[str] = ()) -> dict:
    """`fabmeter-engine limits` between two CPUs: cache-line ping-pong,
    memcpy, timestamp and timer costs (`args`: more of its options)."""
    engine = engine or find_engine()
    cmd = [engine, "limits"]
    if cpus and len(cpus) >= 2:
        cmd += ["--cpus", f"{cpus[0]},{cpus[1]}"]
    if iters:
        cmd += ["-n", str(iters)]
    cmd += list(args)
    proc = procs.spawn(cmd)
    with procs.SignalForwarder() as fwd:
        fwd.procs.append(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            procs.reap(proc, 0.1, signal.SIGTERM)
            raise FabmeterError(f"`{' '.join(cmd)}` did not finish in {timeout:.0f} s", EXIT_RUNTIME)
        if fwd.interrupted:
            raise FabmeterError("interrupted", EXIT_INTERRUPTED)
    if proc.returncode != 0:
        raise FabmeterError(f"fabmeter-engine limits: {last_error_line(err.decode(errors='replace'))}",
                            exit_code_of(proc.returncode))
    for line in out.decode(errors="replace").splitlines():
        obj = _parse_json(line)
        if obj and obj.get("type") == "limits":
            return obj
    raise FabmeterError("fabmeter-engine limits printed no 'limits' line")


def exec_server(args: list[str], engine: Optional[str] = None) -> None:
    """`fabmeter serve`: becomes the engine server (signals reach it directly)."""
    engine = engine or find_engine()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(engine, [engine, "serve", *args])
