"""Child processes: each in a process group of its own, never left behind.

Every engine or peer tool runs in its own process group, so a terminal's
Ctrl-C reaches only us and we forward exactly one SIGINT to each engine (a
second signal must not cut short the engine's partial-result output).
Children also get SIGTERM from the kernel if we die (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import threading
import time
from typing import Callable, Optional, Sequence

KILL_GRACE_S = 3.0              # SIGTERM -> SIGKILL

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not after fork
except (OSError, AttributeError):
    _prctl = None
_PR_SET_PDEATHSIG = 1


def child_setup() -> None:
    # Runs in the child between fork and exec; no threads of ours are alive
    # at that moment (readers start only after every Popen).
    os.setpgid(0, 0)
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def spawn(cmd: Sequence[str], env: Optional[dict] = None, stdout=subprocess.PIPE,
          stderr=subprocess.PIPE) -> subprocess.Popen:
    """cmd in a process group of its own, stdin closed; raw (unbuffered) pipes by default."""
    return subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, bufsize=0,
                            preexec_fn=child_setup, env=env)


def send(proc: Optional[subprocess.Popen], sig: int) -> None:
    """`sig` to the process if it is still running."""
    if proc is not None and proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def reap(proc: Optional[subprocess.Popen], timeout: float, first_signal: Optional[int] = None) -> None:
    """Wait up to `timeout`, then SIGTERM, then SIGKILL: never leave it behind."""
    if proc is None:
        return
    if first_signal is not None:
        send(proc, first_signal)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            proc.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            send(proc, sig)
            timeout = KILL_GRACE_S
    proc.wait()


def stop_group(proc: subprocess.Popen, grace: float = 0.0) -> None:
    """Let it end by itself for `grace` s, then SIGTERM, then SIGKILL, to its whole group.

    The group is signalled only while its leader is alive (not yet reaped),
    so the id cannot have been reused; children it forked (qperf forks one
    per test) get the same signals.
    """
    def wait(timeout: float) -> None:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass

    if grace > 0:
        wait(grace)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        wait(KILL_GRACE_S)
    proc.wait()


def read_line(fd: int, timeout: float, buf: bytearray) -> Optional[bytes]:
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
    end = buf.index(b"\n")
    line = bytes(buf[:end])
    del buf[:end + 1]
    return line


class Drain(threading.Thread):
    """Reads a pipe to the end, line by line, so the child never blocks on a full pipe."""

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


class SignalForwarder:
    """While active, SIGINT/SIGTERM are recorded and forwarded once to the children. `interrupt`: SIGHUP too,
    and each then raises KeyboardInterrupt in the main thread, ending whatever it waits for (mesh: a coordinator
    whose waits are its own, not an engine's)."""

    def __init__(self, interrupt: bool = False):
        self.procs: list[subprocess.Popen] = []
        self.signum: Optional[int] = None
        self._old = {}
        self._interrupt = interrupt

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if self._interrupt else ())):
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
            send(p, sig)
        if self._interrupt:
            raise KeyboardInterrupt

    @property
    def interrupted(self) -> bool:
        return self.signum is not None
