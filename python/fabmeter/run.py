"""Engine process management.

Finds the `fabmeter-engine` binary, reads its option table, starts a server
and a client for one experiment, streams the client's JSON lines and makes
sure that no engine process outlives the run, whatever happens: bad
arguments, a lost peer, Ctrl-C.

Every engine runs in a process group of its own, so a terminal's Ctrl-C
reaches only us and we forward exactly one SIGINT to each engine (a second
signal must not cut short the engine's partial-result output). Engines also
get SIGTERM from the kernel if we die (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import queue
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE_IN_REPO = REPO_ROOT / "build" / "engine" / "fabmeter-engine"

ENGINE_ERROR_PREFIX = "fabmeter-engine: error: "

# Exit codes shared by the engine and the CLI.
EXIT_OK = 0
EXIT_INTERNAL = 1   # engine missing or crashed, or our own bug
EXIT_USAGE = 2
EXIT_RUNTIME = 3    # peer unreachable or lost mid-run
EXIT_INTERRUPTED = 130

SERVER_START_TIMEOUT_S = 10.0
SERVER_EXIT_TIMEOUT_S = 5.0     # after the client finished, the --once server should follow
KILL_GRACE_S = 3.0              # SIGTERM -> SIGKILL


class FabmeterError(Exception):
    """An error that ends a command with a given exit code and one line."""

    def __init__(self, message: str, exit_code: int = EXIT_INTERNAL):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class EngineNotFound(FabmeterError):
    pass


def find_engine() -> str:
    """FABMETER_ENGINE, else the repo's build output, else PATH."""
    env = os.environ.get("FABMETER_ENGINE")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise EngineNotFound(f"FABMETER_ENGINE={env} is not an executable file")
    if ENGINE_IN_REPO.is_file() and os.access(ENGINE_IN_REPO, os.X_OK):
        return str(ENGINE_IN_REPO)
    found = shutil.which("fabmeter-engine")
    if found:
        return found
    raise EngineNotFound(
        f"fabmeter-engine not found (looked at $FABMETER_ENGINE, {ENGINE_IN_REPO}, PATH): run `make build`"
    )


@functools.lru_cache(maxsize=None)
def engine_info(engine: str) -> dict:
    """`fabmeter-engine options`: version, experiments, transports, option table."""
    try:
        res = subprocess.run([engine, "options"], stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FabmeterError(f"cannot run `{engine} options`: {e}") from e
    if res.returncode != 0:
        raise FabmeterError(f"`{engine} options` exited {res.returncode}: {last_error_line(res.stderr)}")
    try:
        return json.loads(res.stdout)
    except json.JSONDecodeError as e:
        raise FabmeterError(f"`{engine} options` printed no valid JSON: {e}") from e


def last_error_line(stderr: str) -> str:
    """The engine's one-line error, without its prefix (else its last line)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith(ENGINE_ERROR_PREFIX):
            return ln[len(ENGINE_ERROR_PREFIX):]
    last = lines[-1] if lines else ""
    return last[len("fabmeter-engine: "):] if last.startswith("fabmeter-engine: ") else last


# --- child processes -------------------------------------------------------

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not after fork
except (OSError, AttributeError):
    _prctl = None
_PR_SET_PDEATHSIG = 1


def _child_setup() -> None:
    # Runs in the child between fork and exec; no threads of ours are alive
    # at that moment (we start readers only after every Popen).
    os.setpgid(0, 0)
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _spawn(cmd: list[str], env: Optional[dict] = None) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0, preexec_fn=_child_setup, env=env)


def _signal(proc: Optional[subprocess.Popen], sig: int) -> None:
    if proc is not None and proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def _reap(proc: Optional[subprocess.Popen], timeout: float, first_signal: Optional[int] = None) -> None:
    """Wait up to `timeout`, then SIGTERM, then SIGKILL: never leave it behind."""
    if proc is None:
        return
    if first_signal is not None:
        _signal(proc, first_signal)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            proc.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            _signal(proc, sig)
            timeout = KILL_GRACE_S
    proc.wait()


def _read_line(fd: int, timeout: float, buf: bytearray) -> Optional[bytes]:
    """One line from a raw pipe within `timeout`; None on EOF or timeout."""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            ready, _, _ = select.select([fd], [], [], left)
        except InterruptedError:
            continue
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        buf.extend(chunk)
    i = buf.index(b"\n")
    line = bytes(buf[:i])
    del buf[:i + 1]
    return line


class _Drain(threading.Thread):
    """Reads a pipe to the end so the engine never blocks on a full pipe."""

    def __init__(self, stream, sink: Callable[[Optional[str]], None], initial: bytes = b""):
        super().__init__(daemon=True)
        self.stream, self.sink, self.initial = stream, sink, initial

    def run(self) -> None:
        pending = self.initial
        while True:
            chunk = self.stream.read(65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for ln in lines:
                self.sink(ln.decode(errors="replace"))
        if pending:
            self.sink(pending.decode(errors="replace"))
        self.sink(None)


class _SignalForwarder:
    """While active, SIGINT/SIGTERM are recorded and forwarded once to the engines."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.signum: Optional[int] = None
        self._old = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)

    def _handle(self, signum, frame):
        # First signal: let the engines stop cleanly and print their partial
        # results. A second one means "stop now".
        sig = signum if self.signum is None else signal.SIGKILL
        self.signum = self.signum or signum
        for p in self.procs:
            _signal(p, sig)

    @property
    def interrupted(self) -> bool:
        return self.signum is not None


# --- one experiment ---------------------------------------------------------

@dataclass
class RunSpec:
    experiment: str                      # lat | oneway | bw
    engine_args: list[str]               # options exactly as the engine takes them
    cpus: Optional[tuple[int, ...]] = None  # (client, server) pinning; None = unpinned
    server: Optional[str] = None         # HOST[:PORT] of a remote server; None = start one locally
    out: Optional[Path] = None           # results folder (the engine writes .npy there)
    engine: Optional[str] = None
    token_file: Optional[str] = None     # remote server's secret (else $FABMETER_TOKEN)


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
    """`fabmeter-engine serve --bind 127.0.0.1 --port 0 --once ...`, port read from its first line."""

    def __init__(self, engine: str, cpu: Optional[int], forwarder: _SignalForwarder,
                 bind: str = "127.0.0.1", env: Optional[dict] = None):
        # The user's own server for one run: no time limit (memory keeps the default).
        cmd = [engine, "serve", "--bind", bind, "--port", "0", "--once", "--max-duration", "0"]
        if cpu is not None:
            cmd += ["--cpu", str(cpu)]
        self.proc = _spawn(cmd, env)
        forwarder.procs.append(self.proc)
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self._rest = bytearray()
        line = _read_line(self.proc.stdout.fileno(), SERVER_START_TIMEOUT_S, self._rest)
        event = _parse_json(line.decode(errors="replace")) if line else None
        if not event or event.get("event") != "listening" or "port" not in event:
            if forwarder.interrupted:
                self.stop()
                raise FabmeterError("interrupted", EXIT_INTERRUPTED)
            _reap(self.proc, 0.5, signal.SIGTERM)
            err = self.proc.stderr.read().decode(errors="replace")
            rc = self.proc.returncode
            msg = last_error_line(err) or (f"first line was {line!r}" if line else "no 'listening' line")
            raise FabmeterError(f"local server did not start: {msg}", _exit_code_of(rc))
        self.port = int(event["port"])
        self.bind = event.get("bind", bind)
        self._threads: list[_Drain] = []

    def start_draining(self) -> None:
        def keep(lines):
            return lambda ln: ln is not None and lines.append(ln)
        self._threads = [_Drain(self.proc.stdout, keep(self.stdout_lines), bytes(self._rest)),
                         _Drain(self.proc.stderr, keep(self.stderr_lines))]
        for t in self._threads:
            t.start()

    def stop(self, wait: float = 0.0) -> None:
        """Give the server `wait` seconds to end by itself, then make it end."""
        _reap(self.proc, wait if wait > 0 else 0.5, None if wait > 0 else signal.SIGTERM)
        for t in self._threads:
            t.join(timeout=2)

    def error_line(self) -> str:
        return last_error_line("\n".join(self.stderr_lines))


def _parse_json(line: str) -> Optional[dict]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _exit_code_of(rc: Optional[int]) -> int:
    if rc in (EXIT_USAGE, EXIT_RUNTIME, EXIT_INTERRUPTED):
        return rc
    return EXIT_INTERNAL


def _timeout_ms(engine_args: list[str]) -> float:
    """The run's --timeout-ms if given (seconds), for our own watchdogs."""
    for i, a in enumerate(engine_args):
        v = None
        if a == "--timeout-ms" and i + 1 < len(engine_args):
            v = engine_args[i + 1]
        elif a.startswith("--timeout-ms="):
            v = a.split("=", 1)[1]
        if v is not None:
            try:
                return float(v) / 1000.0
            except ValueError:
                pass
    return 5.0


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """'32', '64K', '1M' -> bytes (K = 1024, as fabmeter's -s)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", str(text), re.I)
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"not a message size: {text!r} (e.g. 32, 64K, 1M)")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]


# The limits recorded with every run: about 0.3 s, cheap enough for that.
RECORD_LIMITS_ITERS = 20000
RECORD_LIMITS_ARGS = ["--timer-wakeups", "50", "--wakeup-round-trips", "100"]


def _limits_for_record(engine: str, spec: "RunSpec") -> Optional[dict]:
    """Limits between the run's two CPUs, sized for its message; None when
    they cannot be measured (one CPU, probe failed). Ctrl-C still stops."""
    if not spec.cpus or len(spec.cpus) < 2:
        return None
    args = list(RECORD_LIMITS_ARGS)
    for i, a in enumerate(spec.engine_args[:-1]):
        if a in ("-s", "--size"):
            try:
                args += ["--sizes", str(parse_size(spec.engine_args[i + 1]))]
            except ValueError:
                pass  # the engine refuses the size itself, with its own message
    try:
        return run_limits(spec.cpus, RECORD_LIMITS_ITERS, engine, timeout=30, args=args)
    except FabmeterError as e:
        if e.exit_code == EXIT_INTERRUPTED:
            raise
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
    res = RunResult()
    server: Optional[LocalServer] = None
    client: Optional[subprocess.Popen] = None
    client_err: list[str] = []
    # Limits are recorded with every local run that keeps results, measured
    # before the engines start so neither disturbs the other.
    if spec.out is not None and spec.server is None and on_event is not None:
        try:
            limits = _limits_for_record(engine, spec)
        except FabmeterError as e:
            res.status, res.exit_code, res.message = "interrupted", e.exit_code, e.message
            return res
        if limits:
            on_event(limits)
    # A local run's server admits only its own client: a fresh secret per run,
    # passed through the environment (another local user cannot take the port).
    env = None if spec.server is not None else {**os.environ, "FABMETER_TOKEN": secrets.token_hex(32)}
    with _SignalForwarder() as fwd:
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
            cmd += spec.engine_args
            client = _spawn(cmd, env)
            fwd.procs.append(client)

            # Readers start only now: no thread may be alive during fork.
            lines: queue.Queue = queue.Queue()
            readers = [_Drain(client.stdout, lines.put),
                       _Drain(client.stderr, lambda ln: ln is not None and client_err.append(ln))]
            for t in readers:
                t.start()
            if server is not None:
                server.start_draining()

            _stream(lines, client, server, _timeout_ms(spec.engine_args), res, on_start, on_point, on_event)

            try:
                client.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _reap(client, 0.1, signal.SIGTERM)
            for t in readers:
                t.join(timeout=2)
            rc = client.returncode
            _classify(res, rc, "\n".join(client_err), fwd, server)
        except FabmeterError as e:
            res.status = "interrupted" if e.exit_code == EXIT_INTERRUPTED else "failed"
            res.exit_code, res.message = e.exit_code, e.message
        finally:
            # After a good run the --once server ends by itself; after Ctrl-C it
            # has had its SIGINT and gets time to clean up (shm segments); a
            # failed client leaves it waiting for nothing: stop it now.
            if client is not None and client.poll() is None:
                _reap(client, KILL_GRACE_S, signal.SIGTERM)
            if server is not None:
                if res.exit_code == EXIT_OK:
                    server.stop(SERVER_EXIT_TIMEOUT_S)
                else:
                    server.stop(KILL_GRACE_S if fwd.interrupted else 0.0)
        # The client only sees that the peer went away; the server may know why.
        if server is not None and res.exit_code == EXIT_RUNTIME and server.proc.returncode not in (0, None):
            why = server.error_line()
            if why and why not in res.message:
                res.message = f"{res.message} (server: {why})" if res.message else f"server: {why}"
        if fwd.interrupted:
            res.status, res.exit_code = "interrupted", EXIT_INTERRUPTED
            res.message = res.message or "interrupted"
    return res


def _stream(lines: queue.Queue, client: subprocess.Popen, server: Optional[LocalServer],
            timeout_s: float, res: RunResult, on_start, on_point, on_event) -> None:
    """Reads the client's JSON lines until EOF, with a watchdog on the server."""
    server_gone_at: Optional[float] = None
    # The engine notices a lost peer itself within its timeout; this is
    # only a safety net if it does not.
    grace = timeout_s + 5.0
    stop_sent = False
    while True:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            if server is not None and server.proc.poll() is not None and client.poll() is None:
                server_gone_at = server_gone_at or time.monotonic()
                if time.monotonic() - server_gone_at > grace and not stop_sent:
                    _signal(client, signal.SIGTERM)
                    stop_sent = True
                    res.message = "the server engine exited and the client did not notice in time"
            continue
        if line is None:
            return
        obj = _parse_json(line)
        if obj is None:
            if line.strip():
                print(line, file=sys.stderr)  # engine log text: pass it on
            continue
        kind = obj.get("type")
        if kind == "start":
            res.start = obj
            if on_start:
                on_start(obj)
        elif kind == "point":
            res.points.append(obj)
            if on_point:
                on_point(obj)
        elif kind == "end":
            res.end = obj
        else:
            res.events.append(obj)
            if on_event:
                on_event(obj)


def _classify(res: RunResult, rc: int, stderr: str, fwd: _SignalForwarder,
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
    proc = _spawn(cmd)
    with _SignalForwarder() as fwd:
        fwd.procs.append(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _reap(proc, 0.1, signal.SIGTERM)
            raise FabmeterError(f"`{' '.join(cmd)}` did not finish in {timeout:.0f} s", EXIT_RUNTIME)
        if fwd.interrupted:
            raise FabmeterError("interrupted", EXIT_INTERRUPTED)
    if proc.returncode != 0:
        raise FabmeterError(f"fabmeter-engine limits: {last_error_line(err.decode(errors='replace'))}",
                            _exit_code_of(proc.returncode))
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
