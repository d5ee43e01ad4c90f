"""The watch loop: a sweep every --interval, each pair of a sweep run as
`fabmeter mesh --launch serve` runs it (`fabmeter-engine run EXP --server
DST --via SRC`: SRC's standing serve runs the client and relays its output),
in rounds (each host with at most one partner per round, or all at once), and
the results folded into the aggregates of metrics.py. A round's pairs that
share a host run one after another (waves) unless --parallel: a host's two
busy-polling pairs at once take turns on its CPUs, and the figures are then
the scheduler's time slices, not the fabric's.

A pair that fails is marked so and run again the next sweep; a host whose
serve takes no connection has its pairs failed at once, without an engine,
until it answers again (it is checked before the first sweep, then after
each sweep in which it was down or one of its pairs failed, by a probe: a
hello of PROBE_HELLO alone, which a serve logs as a liveness probe).
SIGINT and SIGTERM end the loop: the engines of the sweep under way get
SIGTERM (those of the relays end with their sessions) and the command
exits 130, as every fabmeter command does.

While a pair measures, watch itself does nothing: its loop waits on a pipe
that a result or a signal writes to, never on a timer, as a watch thread
woken on a busy-polling end's CPU holds that end off it. A sweep's line is
logged once its figures are published (metrics and --textfile), so that
whoever reads it finds them there.
"""

from __future__ import annotations

import gc
import os
import queue
import select
import signal
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Optional

from fabmeter import analysis, procs, run, slo
from fabmeter.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, FabmeterError
from fabmeter.mesh.run import host_port
from fabmeter.watch import metrics

POLL_S = 0.1                    # how often a wait between sweeps looks at the stop flag
# A control frame (4-byte little-endian length, type 1: hello) holding "probe": the engine's serve logs it as a
# liveness probe and closes (engine/src/session/server_session.cpp, kProbeHello).
PROBE_HELLO = struct.pack("<IB", 5, 1) + b"probe"
STOP_GRACE_S = procs.KILL_GRACE_S + 2.0


@dataclass
class WatchSpec:
    hosts: list[str]
    rounds: list[list[tuple[int, int]]]    # host indices, each round's pairs run at once
    experiment: str
    options: dict                          # engine options (options.py), as mesh takes them
    cpus: Optional[tuple[str, str]]        # --cpus: (the client's on the source, the server's on the destination)
    engine: str
    serve_port: int
    timeout_s: float                       # the engine's control timeout; also the serve check's
    interval_s: float
    for_s: Optional[float]                 # None: until a signal
    round_lead_s: float                    # a round's pairs start together this long after it is sent (0: at once)
    objectives: Optional[list]             # --slo
    metrics_bind: str
    metrics_port: Optional[int]            # None: no HTTP endpoint
    textfile: Optional[str]
    info: dict                             # fabmeter_watch_info's labels


def pair_rounds(pairs: list[tuple[int, int]], schedule: str) -> list[list[tuple[int, int]]]:
    """A list of directed pairs in rounds: chaotic, one round; scheduled, each pair in the first round where
    neither host has another partner (both directions of a pair run together, as mesh's tournament has them)."""
    if schedule == "chaotic":
        return [list(pairs)]
    rounds: list[tuple[list, dict]] = []
    for s, d in pairs:
        for members, partner in rounds:
            if partner.get(s, d) == d and partner.get(d, s) == s:
                members.append((s, d))
                partner[s], partner[d] = d, s
                break
        else:
            rounds.append(([(s, d)], {s: d, d: s}))
    return [members for members, _ in rounds]


def waves(rounds: list[list[tuple[int, int]]]) -> list[list[tuple[int, int]]]:
    """Each round split so that no host is in two pairs at once: a pair goes to the first wave of its round
    where neither of its hosts is (scheduled rounds: each direction of a pair in a wave of its own)."""
    out = []
    for members in rounds:
        split: list[tuple[list, set]] = []
        for s, d in members:
            wave = next((w for w in split if s not in w[1] and d not in w[1]), None)
            if wave is None:
                split.append(([], set()))
                wave = split[-1]
            wave[0].append((s, d))
            wave[1].update((s, d))
        out += [pairs for pairs, _ in split]
    return out


class _Stop(procs.SignalForwarder):
    """SIGINT and SIGTERM set a flag the loop's waits look at (a handler that raised could land between a
    textfile's write and its rename, or in a thread's bookkeeping), and wake a sweep's wait for its pairs (a byte
    down a pipe, as a pair's result does). Entered in the main thread only (set_wakeup_fd's rule)."""

    def __enter__(self):
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # The interpreter writes a signal's number there whichever thread the kernel gave it to.
        self._old_wakeup = signal.set_wakeup_fd(self._wake_w)
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        signal.set_wakeup_fd(self._old_wakeup)
        # The pipe stays open: a pair thread still ending may write to it (a closed fd's number may be reused).

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"w")
        except BlockingIOError:         # a full pipe wakes the wait as well
            pass

    def get(self, done: queue.Queue):
        """The next item of `done` (its putter calls wake() after the put), or None once stopped."""
        while not self:
            try:
                return done.get_nowait()
            except queue.Empty:
                select.select([self._wake_r], [], [])
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
        return None

    def __bool__(self) -> bool:
        return self.interrupted

    def sleep_until(self, t: float) -> None:
        while not self and (left := t - time.monotonic()) > 0:
            time.sleep(min(POLL_S, left))


def main(spec: WatchSpec, log: Callable[[str], None]) -> int:
    with _Stop() as stop:           # from the start: a signal during set-up ends it as cleanly
        code = _watch(spec, stop, log)
        if stop:
            log(f"ended by {signal.Signals(stop.signum).name}")
    return code


def _watch(spec: WatchSpec, stop: "_Stop", log: Callable[[str], None]) -> int:
    n = len(spec.hosts)
    pairs = [p for r in spec.rounds for p in r]
    state = metrics.WatchState([(spec.hosts[s], spec.hosts[d]) for s, d in pairs], spec.options.get("transport"),
                               spec.experiment, spec.info, spec.hosts, spec.interval_s, bool(spec.objectives))
    registry = metrics.registry_for(state)
    server = None
    if spec.metrics_port is not None:
        try:
            server = metrics.MetricsServer(registry, spec.metrics_bind, spec.metrics_port)
        except OSError as e:
            raise FabmeterError(f"--metrics-port: cannot listen on {host_port(spec.metrics_bind, spec.metrics_port)}:"
                                f" {e.strerror or e}", EXIT_RUNTIME) from e
        log(f"metrics at http://{host_port(spec.metrics_bind, server.port)}/metrics")
    try:
        textfile_error = ""
        if spec.textfile:
            try:
                metrics.write_textfile(spec.textfile, registry)
            except OSError as e:
                raise FabmeterError(f"--textfile {spec.textfile}: {e.strerror or e}", EXIT_USAGE) from e
        log(f"{len(pairs)} pairs over {n} hosts in {len(spec.rounds)} round(s) of pairs at once, "
            f"every {spec.interval_s:g} s"
            + (f" for {spec.for_s:g} s" if spec.for_s is not None else ""))
        down: set[int] = set(range(n))          # unknown counts as down: checked before the first sweep
        began = time.monotonic()
        next_start = began
        while not stop:
            down = _check_hosts(spec, state, down, stop, log)
            if stop:
                break
            failed_hosts, line = _sweep(spec, state, down, stop, log)
            if stop:
                break
            down |= failed_hosts                # re-checked before the next sweep
            gc.collect()                        # the histogram decoder's objects hold cycles: freed each sweep
            if spec.textfile:                   # a full disk or a lost folder is logged (once), not the end
                try:
                    metrics.write_textfile(spec.textfile, registry)
                    textfile_error = ""
                except OSError as e:
                    if textfile_error != str(e):
                        log(f"--textfile {spec.textfile}: {e.strerror or e}")
                    textfile_error = str(e)
            log(line)
            next_start = max(next_start + spec.interval_s, time.monotonic())
            if spec.for_s is not None and next_start - began >= spec.for_s:
                stop.sleep_until(began + spec.for_s)    # no sweep left: the metrics are served to the end
                break
            stop.sleep_until(next_start)
        return EXIT_INTERRUPTED if stop else EXIT_OK
    finally:
        if server is not None:
            server.stop()


def _check_hosts(spec: WatchSpec, state: metrics.WatchState, hosts: set[int], stop: "_Stop", log) -> set[int]:
    """Which of `hosts` have no serve taking connections (all checked at once); the others are up."""
    if not hosts:
        return set()
    result: dict[int, Optional[str]] = {}

    def check(i: int) -> None:
        try:
            with socket.create_connection((spec.hosts[i], spec.serve_port), timeout=spec.timeout_s) as sock:
                sock.sendall(PROBE_HELLO)
            result[i] = None
        except OSError as e:
            result[i] = e.strerror or str(e)
    threads = [threading.Thread(target=check, args=(i,), daemon=True) for i in sorted(hosts)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + spec.timeout_s + 1
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline and not stop:
        time.sleep(POLL_S)
    if stop:
        return hosts
    down = set()
    with state.lock:
        for i in sorted(hosts):
            why = result.get(i, "no answer")
            was = state.hosts[spec.hosts[i]]
            state.hosts[spec.hosts[i]] = 0 if why else 1
            if why:
                down.add(i)
                if was != 0:
                    log(f"no fabmeter serve answers at {host_port(spec.hosts[i], spec.serve_port)} ({why}): "
                        "its pairs fail until it does")
            elif was == 0:
                log(f"{host_port(spec.hosts[i], spec.serve_port)} answers again")
    return down


def _sweep(spec: WatchSpec, state: metrics.WatchState, down: set[int], stop: _Stop, log) -> tuple[set[int], str]:
    """Every round once; returns the hosts of the pairs that failed and the sweep's line."""
    t0 = time.monotonic()
    address = [host_port(h, spec.serve_port) for h in spec.hosts]
    results: list[tuple[int, int, bool]] = []
    skews: list[int] = []
    most_here = 0                   # the most busy-polling threads at once on this machine
    for pairs in spec.rounds:
        done: queue.Queue = queue.Queue()
        start_ns = time.monotonic_ns() + int(spec.round_lead_s * 1e9) if spec.round_lead_s > 0 else None
        threads = []
        for s, d in pairs:
            dead = [i for i in (s, d) if i in down]
            if dead:
                done.put((s, d, None, f"no fabmeter serve answers at {address[dead[0]]}", 0.0))
                continue
            t = threading.Thread(target=_run_pair, args=(spec, s, d, address, start_ns, done, stop), daemon=True)
            t.start()
            threads.append(t)
        started: list[int] = []
        spinning: list[Counter] = []
        for _ in pairs:
            item = stop.get(done)
            if item is None:            # stopped: the round's engines end, its results are dropped
                _stop_engines(threads)
                return set(), ""
            s, d, res, message, duration = item
            ok = _record(spec, state, s, d, res, message, duration, log)
            results.append((s, d, ok))
            if res is not None and (at := _started_ns(res)) is not None:
                started.append(at)
            if res is not None:
                spinning.append(_spinning(res))
        if start_ns is not None and len(started) > 1:
            skews.append(max(started) - min(started))
        here = sum(c[socket.gethostname()] for c in spinning)
        most_here = max(most_here, here)
    failed = [(s, d) for s, d, ok in results if not ok]
    with state.lock:
        state.sweeps += 1
        state.sweep_duration_s = time.monotonic() - t0
        state.sweep_finished_at = time.time()
        state.sweep_ok, state.sweep_failed = len(results) - len(failed), len(failed)
        state.round_skew_s = max(skews) / 1e9 if skews else None
        state.judge_outliers()
        line = _sweep_line(spec, state, results)
        # The report's rule, on the machine watch runs on: the one whose usable CPUs it knows (namespace hosts
        # share it).
        crowding = analysis.crowded_cpus(most_here, len(os.sched_getaffinity(0))) if most_here else None
        if crowding != state.warning:
            log(f"warning: {crowding}" if crowding else "no warning now: this machine had a CPU left beside the "
                                                         "busy-polling threads")
        state.warning = crowding
    return {i for p in failed for i in p}, line


def _sweep_line(spec: WatchSpec, state: metrics.WatchState, results: list[tuple[int, int, bool]]) -> str:
    """'sweep N: K of M pairs ok in S s', the failed pairs, and the slowest of the others: the highest p50
    (the lowest throughput where there is no latency); the caller holds the lock."""
    names = {(s, d): f"{spec.hosts[s]}->{spec.hosts[d]}" for s, d, _ in results}
    ok = [(s, d) for s, d, good in results if good]
    failed = [names[(s, d)] for s, d, good in results if not good]
    line = f"sweep {state.sweeps}: {len(ok)} of {len(results)} pairs ok in {state.sweep_duration_s:.1f} s"
    if failed:
        line += f"; failed: {', '.join(failed[:5])}" + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
    last = {p: state.pairs[(spec.hosts[p[0]], spec.hosts[p[1]])].last for p in ok}
    with_p50 = [p for p in ok if "q0.5" in last[p]]
    with_tput = [p for p in ok if "bytes_per_second" in last[p]]
    if with_p50:
        slow = max(with_p50, key=lambda p: last[p]["q0.5"])
        line += f"; slowest {names[slow]}: p50 {slo.fmt_ns(last[slow]['q0.5'] * 1e9)}"
    elif with_tput:
        slow = min(with_tput, key=lambda p: last[p]["bytes_per_second"])
        line += f"; slowest {names[slow]}: {last[slow]['bytes_per_second'] * 8 / 1e9:.3g} Gb/s"
    absent = [(names[p], words) for p in ok
              if (words := state.pairs[(spec.hosts[p[0]], spec.hosts[p[1]])].off_cpu_words)]
    if absent:
        line += f"; {absent[0][0]}: {absent[0][1]}" + (f" (and {len(absent) - 1} more pairs)" if len(absent) > 1
                                                      else "")
    return line


def _spinning(res: run.RunResult) -> Counter:
    """The run's busy-polling threads by machine (each end's hostname, as its engine reports it): one per end and
    flow; none in event mode."""
    start = res.start or {}
    params = start.get("params") if isinstance(start.get("params"), dict) else {}
    if params.get("poll") != "busy":
        return Counter()
    flows = params.get("flows") if isinstance(params.get("flows"), int) and params.get("flows") > 0 else 1
    out: Counter = Counter()
    for key in ("env", "server_env"):
        env = start.get(key)
        if isinstance(env, dict) and isinstance(env.get("hostname"), str):
            out[env["hostname"]] += flows
    return out


def _run_pair(spec: WatchSpec, s: int, d: int, address: list[str], start_ns: Optional[int], done: queue.Queue,
              stop: _Stop):
    t0 = time.monotonic()
    try:
        res = run.execute(run.RunSpec(spec.experiment, spec.options, cpus=spec.cpus, server=address[d],
                                      engine=spec.engine, start_at_ns=start_ns, via=address[s]))
        message = res.message if res.exit_code != EXIT_OK or not res.points else ""
        done.put((s, d, res, message or ("" if res.points else "no point measured"), time.monotonic() - t0))
    except Exception as e:      # noqa: BLE001 -- a pair's failure, whatever it is, never ends the loop
        done.put((s, d, None, f"{type(e).__name__}: {e}", time.monotonic() - t0))
    stop.wake()


def _started_ns(res: run.RunResult) -> Optional[int]:
    """When the run's measured part began, on our clock (the relay says how its clock differs)."""
    started = (res.points[0] if res.points else {}).get("started_mono_ns")
    relay = next((e for e in res.events if e.get("type") == "relay"), {})
    offset = relay.get("clock_offset_ns")
    return started - offset if isinstance(started, int) and isinstance(offset, int) else None


def _record(spec: WatchSpec, state: metrics.WatchState, s: int, d: int, res: Optional[run.RunResult],
            message: str, duration: float, log) -> bool:
    key = (spec.hosts[s], spec.hosts[d])
    name = f"{key[0]}->{key[1]}"
    with state.lock:
        pair = state.pairs[key]
        was = pair.up
        if res is None or message:
            pair.failed(message or "failed", duration)
            if was != 0:
                log(f"pair {name} failed: {pair.message}")
            return False
        verdict = pair.measured(res.points[-1], duration, spec.objectives)
        if was == 0:
            log(f"pair {name} is up again")
    if verdict is not None:
        what = "; ".join(f"{c['objective']} measured {slo.fmt_ns(c['measured_ns'])}"
                         for c in verdict["checks"] if not c["met"])
        log(f"pair {name} missed the SLO: {what}" + (f" ({verdict['why']})" if verdict["why"] else ""))
    return True


def _stop_engines(threads: list[threading.Thread]) -> None:
    """SIGTERM to our engine clients (each relayed run ends with its session), then wait for their threads."""
    me = os.getpid()
    for pid in _children(me):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    for pid in _children(me):       # run.execute reaps what it started; this is for one that would not end
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _children(parent: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(parent) and fields[0] != "Z":
            out.append(int(entry))
    return out
