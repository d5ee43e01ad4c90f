"""A source's pairs through engine clients that outlive a pair: `fabmeter-engine run --series`.

A series engine runs one experiment with one set of options against server after server, one run at a time,
each named by a line on its standard input; it starts, loads its transport and calibrates its clock once, and
with --via all its runs go through one session with that serve, whose one run process does the same. A pair then
costs its server's session and nothing else. `Pool` keeps the idle ones per relay, so the rounds of a source reuse
them; pairs run at once (chaotic) each take one of their own.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
from typing import Callable, Optional

from fabmeter import procs, run
from fabmeter.engine import engine_options, last_error_line
from fabmeter.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, FabmeterError

STDERR_KEPT = 20                 # lines of the engine's stderr kept for a failed run's message


class Series:
    """One `fabmeter-engine run EXPERIMENT --series [--via VIA]` process."""

    def __init__(self, engine: str, experiment: str, options: dict, via: Optional[str]):
        cmd = [engine, "run", experiment, "--series", *(["--via", via] if via else []),
               *engine_options(engine).engine_argv(options)]
        # A process group of its own, as every engine's, but no parent-death signal: that follows the thread that
        # started it (a pair's), not this process. Its standard input closes when this process ends: so does it.
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         bufsize=0, preexec_fn=lambda: os.setpgid(0, 0))
        except OSError as e:
            raise FabmeterError(f"cannot start {engine}: {e.strerror}", EXIT_INTERNAL) from e
        self.lines: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        self.alive = True
        self.runs = 0                # runs started so far
        # Readers start only now: no thread may be alive during fork.
        procs.Drain(self.proc.stdout, self.lines.put).start()
        procs.Drain(self.proc.stderr, self._keep_stderr).start()

    def _keep_stderr(self, line: Optional[str]) -> None:
        if line is not None:
            self.stderr.append(line)
            del self.stderr[:-STDERR_KEPT]

    def run(self, server: str, start_at_ns: Optional[int], on_start: Callable[[dict], None]) -> run.RunResult:
        """One run against `server`, as run.execute's result: the engine's lines up to that run's end line."""
        res = run.RunResult()
        self.runs += 1
        try:
            self.proc.stdin.write(f"{server} {start_at_ns or 0}\n".encode())
            self.proc.stdin.flush()
        except OSError:
            pass            # the engine is gone: its reader says so below
        while True:
            line = self.lines.get()
            if line is None:
                self.alive = False
                self.proc.wait()
                rc = self.proc.returncode
                res.status = "interrupted" if rc in (EXIT_INTERRUPTED, -signal.SIGINT) else "failed"
                res.exit_code = EXIT_INTERRUPTED if res.status == "interrupted" else EXIT_INTERNAL
                res.message = (last_error_line("\n".join(self.stderr))
                               or f"fabmeter-engine run --series exited {rc}")
                return res
            obj = run._parse_json(line)
            if obj is not None and run.take_line(res, obj, on_start) == "end":
                code = obj.get("code")
                res.exit_code = code if isinstance(code, int) else EXIT_INTERNAL
                res.status = obj.get("status", "failed") if res.exit_code == EXIT_OK else (
                    "interrupted" if res.exit_code == EXIT_INTERRUPTED else "failed")
                res.message = obj.get("message") or ""
                return res

    def close(self) -> None:
        """The end of its input: the engine ends its relay session, if any, and exits."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def reap(self, timeout: float) -> None:
        procs.reap(self.proc, timeout)


class Pool:
    """Idle series engines per relay (None: runs from here); counts the engines started and the pairs run."""

    def __init__(self, engine: str, experiment: str, options: dict):
        self.engine, self.experiment, self.options = engine, experiment, options
        self.idle: dict[Optional[str], list[Series]] = {}
        self.every: list[Series] = []
        self.lock = threading.Lock()

    def start(self, via: Optional[str], count: int) -> None:
        """Starts `count` idle engines for `via` ahead of their runs: a round's engines that start only with its
        plan load and calibrate inside its lead, all at once (12 on 2 loaded CPUs: ready up to 350 ms after a 2.2 s
        lead)."""
        with self.lock:
            for _ in range(count):
                series = Series(self.engine, self.experiment, self.options, via)
                self.every.append(series)
                self.idle.setdefault(via, []).append(series)

    def run(self, server: str, start_at_ns: Optional[int], via: Optional[str],
            on_start: Callable[[dict], None]) -> tuple[run.RunResult, int]:
        """One run on an idle engine for `via` (else a new one): its result, and which run of that engine it was."""
        with self.lock:
            idle = self.idle.setdefault(via, [])
            series = idle.pop() if idle else None
            if series is None:
                series = Series(self.engine, self.experiment, self.options, via)
                self.every.append(series)
        res = series.run(server, start_at_ns, on_start)
        if series.alive:
            with self.lock:
                self.idle[via].append(series)
        return res, series.runs

    def close(self, timeout: float) -> None:
        for series in self.every:
            series.close()
        for series in self.every:
            series.reap(timeout)
