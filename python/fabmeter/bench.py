"""`fabmeter bench`: fabmeter beside the established tools and the machine's
own limits, measured side by side in one run.

Every row pairs one fabmeter measurement with what it is judged against: a
peer tool on the same path (same size, iterations, CPUs) or a machine limit
(`fabmeter-engine limits`). Each round measures every row once, the two
sides of a row in alternating order (A B, then B A), so slow drift of a
shared machine favours neither. Reported per row: the median over rounds of
each side's figure, their ratio, the interval of the median round ratio
(stats.py) and, from where that interval lies against the row's target,
"met", "NOT met" or "cannot tell" (it spans the target, or too few rounds). Rows
without a target put fabmeter beside a floor beneath a target it does not
meet (shm against two lines, event mode against a wake-up).

Figures are compared like with like: where a peer gives only a mean
(fi_pingpong), fabmeter's mean is used; where it gives a median, the median.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from fabmeter import analysis, command_options, envinfo, procs, run, stats
from fabmeter.command_options import CommandOption, Found
from fabmeter.cpus import parse_cpus
from fabmeter.engine import engine_info, engine_options, find_engine, last_error_line
from fabmeter.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, FabmeterError
from fabmeter.peers import base as peer_base
from fabmeter.peers import registry, rawpp
from fabmeter.recorded import run_recorded
from fabmeter.results import now_iso, out_folder, write_json

SIZE = 32
BW_SIZE = 64 * 1024
ITERS = 20000

# The load rows (fabmeter load beside sockperf under-load, the generator's
# own accuracy, the knee beside bw).
LOAD_RATE = 20000                 # requests/s of the p99 rows: moderate for a 2-CPU VM
LOAD_SWEEP = (10000, 80000, 320000)  # the highest-rate row; the lowest is sockperf's unloaded reference
LOAD_SECONDS = 0.55               # fabmeter per point: sockperf's valid window of its shortest run (1 s)
LAG_RATE = 1_000_000              # the generator's accuracy at 1 M requests/s over shm ...
LAG_COUNT = 500_000
LAG_TARGET = 1.2                  # ... within 1.2x the bare schedule's own lag p99 on that CPU
KNEE_FRACTIONS = [0.25, 0.5, 0.75, 1.0]  # shm sweep as fractions of its closed-loop capacity
KNEE_SECONDS = 0.3
BW_MSGS = 1_000_000               # bw beside the knee: long enough to be more than its warm-up
FLOWS = 4                         # bw --flows beside iperf3 -P

# The setup row: tcp connects per round, fabmeter's and the bare floor's alike.
SETUP_REPS = 500

# The transmit-path stamps' row: closed-loop clients over libfabric's shm provider, a one-deep send queue and
# replies large enough that a send completes only once the peer has copied it: every reply waits for a buffer.
TX_CLIENTS = 4
TX_RESP_SIZE = 64 * 1024
TX_SECONDS = 0.3
TX_TARGET = 0.98                  # what the stamps may cost: at most 2 % of the requests/s

# The stream row: missed steps beside the schedule floor, same rate, steps and CPU.
STREAM_RATE = 100_000
STREAM_STEPS = 100_000            # 1 s, stream's default at this rate


# The authentication rows: lat with a token beside lat without one (a bench-owned serve and client, as a
# remote run; a local run always has a token), and the control channel's time per point over a run of many
# small points (lat -a up to AUTH_MAX_SIZE, AUTH_ITERS each).
AUTH_MAX_SIZE = 4096
AUTH_ITERS = 1000
AUTH_TIMEOUT_S = 120


class Skip(Exception):
    """This side of a row cannot be measured here (tool or transport missing)."""


@dataclass
class Row:
    name: str
    fabmeter: Callable[[], float]   # measures fabmeter's figure once
    versus: str                     # what it is judged against
    other: Callable[[], float]      # measures that figure once
    figure: str                     # what both numbers are, with units
    target: Optional[float]         # the ratio fabmeter / other must be <= (or >= when higher_is_better);
                                    # None: the row explains another (a floor beneath a target)
    higher_is_better: bool = False
    floor: bool = True              # a row without a target: the floor beneath another (False: side by side)
    ours: list[float] = field(default_factory=list)
    theirs: list[float] = field(default_factory=list)
    skipped: str = ""

    def judged(self) -> tuple[Optional[tuple[float, float]], Optional[str]]:
        """The interval of the median round ratio (each round's own ours / theirs) and, against the target,
        "met", "not met" or "cannot tell"; no verdict for a row without a target."""
        found = stats.median_interval([ratio_of(a, b) for a, b in zip(self.ours, self.theirs)])
        interval = None if found is None else (found[0], found[1])
        if self.target is None:
            return interval, None
        return interval, stats.against_target(interval, self.target, self.higher_is_better)


class Bench:
    def __init__(self, out: Path, cpus: Optional[tuple[int, ...]], engine: str):
        self.out, self.cpus, self.engine = out, cpus, engine
        self.info = engine_info(engine)
        self.peer_points: list[dict] = []
        self.limits: list[dict] = []
        self.io_cpus: dict[str, tuple[int, int]] = {}   # by transport: where fabmeter's run put the library's threads
        self.runs = 0

    # --- one side of a row ----------------------------------------------------

    def _points(self, experiment: str, options: dict, words: str) -> list[dict]:
        """One recorded fabmeter run (under runs/, named by `words`), its points."""
        if options["transport"] not in self.info.get("transports", []):
            raise Skip(f"transport {options['transport']} is not built into this engine")
        self.runs += 1
        folder = self.out / "runs" / f"{self.runs:03d}-{experiment}-{words}"
        res = run_recorded(run.RunSpec(experiment, options, cpus=self.cpus, out=folder, engine=self.engine),
                           limits=True).result
        if res.exit_code == EXIT_INTERRUPTED:
            raise FabmeterError("interrupted", EXIT_INTERRUPTED)
        if res.exit_code != EXIT_OK or not res.points:
            raise Skip(f"fabmeter {experiment} {options} failed: {res.message}")
        granted = analysis.granted(res.events)
        if isinstance(granted.get("io_cpus"), dict):
            self.io_cpus[options["transport"]] = tuple(io_cpu(granted["io_cpus"], end) for end in ("client", "server"))
        return res.points

    def fabmeter(self, experiment: str, options: dict, pick: Callable[[dict], float]) -> Callable[[], float]:
        words = "-".join(str(v) for k, v in options.items() if k not in ("size", "iters"))

        def measure() -> float:
            return pick(self._points(experiment, options, words)[-1])
        return measure

    def limit(self, pick: Callable[[dict], float], args: tuple[str, ...] = ()) -> Callable[[], float]:
        def measure() -> float:
            lim = run.run_limits(self.cpus, engine=self.engine, args=args)
            self.limits.append(lim)
            return pick(lim)
        return measure

    def peer(self, tool: str, experiment: str, transport: str, pick: Callable[[dict], float],
             flows: int = 1) -> Callable[[], float]:
        adapter = registry.PEERS.get(tool)

        def measure() -> float:
            if adapter is None or not adapter.available():
                raise Skip(f"{tool} is not installed")
            params = peer_base.PeerRun(size=SIZE, bw_size=BW_SIZE, iters=ITERS, duration=1.0, flows=flows,
                                      cpus=tuple(self.cpus) if self.cpus else None)
            try:
                points = adapter.run_case(peer_base.Case(experiment, transport), params)
            except peer_base.PeerError as e:
                raise Skip(f"{tool} {experiment} {transport}: {e}") from e
            self.peer_points += points
            return pick(points[0])
        return measure

    def fabmeter_all(self, experiment: str, options: dict, pick: Callable[[list[dict]], float]) -> Callable[[], float]:
        """As fabmeter(), `pick` given every point of the run (a sweep)."""
        words = "-".join(",".join(map(str, v)) if isinstance(v, list) else str(v) for v in options.values())

        def measure() -> float:
            return pick(self._points(experiment, options, words))
        return measure

    def one_run(self, experiment: str, options: dict, ours: Callable[[dict], float],
                theirs: Callable[[dict], float]) -> tuple[Callable[[], float], Callable[[], float]]:
        """Both sides of a row from one fabmeter run (two figures of one point): whichever side a round
        measures first runs it, the other takes its figure from the same point."""
        return self._both_sides(self.fabmeter(experiment, options, lambda p: p), ours, theirs)

    def one_limits(self, args: tuple[str, ...], ours: Callable[[dict], float],
                   theirs: Callable[[dict], float]) -> tuple[Callable[[], float], Callable[[], float]]:
        """Both sides of a row from one limits measurement, as one_run."""
        return self._both_sides(self.limit(lambda lim: lim, args), ours, theirs)

    @staticmethod
    def _both_sides(run_once: Callable[[], dict], ours: Callable[[dict], float],
                    theirs: Callable[[dict], float]) -> tuple[Callable[[], float], Callable[[], float]]:
        held: list[dict] = []

        def side(pick: Callable[[dict], float]) -> Callable[[], float]:
            def measure() -> float:
                if held:
                    return pick(held.pop())
                point = run_once()
                held.append(point)
                return pick(point)
            return measure
        return side(ours), side(theirs)

    def sockperf_load(self, transport: str, rates: tuple[int, ...],
                      pick: Callable[[list[dict]], float]) -> Callable[[], float]:
        """sockperf under-load at each rate (1 s each, the shortest it runs), `pick` given the points."""
        adapter = registry.PEERS.get("sockperf")

        def measure() -> float:
            if adapter is None or not adapter.available():
                raise Skip("sockperf is not installed")
            points = []
            for rate in rates:
                params = peer_base.PeerRun(size=SIZE, rate=rate, duration=1.0,
                                          cpus=tuple(self.cpus) if self.cpus else None)
                try:
                    points += adapter.run_case(peer_base.Case("load", transport), params)
                except peer_base.PeerError as e:
                    raise Skip(f"sockperf load {transport} at {rate}/s: {e}") from e
            self.peer_points += points
            return pick(points)
        return measure

    def rawpp(self, lib: str, mode: str, options: dict) -> Callable[[], float]:
        """The library's raw loop, its threads where fabmeter's run of `options` (the row's other side) put them,
        as that run's granted.io_cpus read them back; a raw loop measured before any such run runs it once first
        for that."""
        def measure() -> float:
            if lib not in self.io_cpus:
                self._points("lat", options, f"{lib}-placement")
            try:
                r = rawpp.run(lib, mode, SIZE, ITERS, self.cpus, io_cpus=self.io_cpus[lib])
            except peer_base.PeerError as e:
                raise Skip(str(e)) from e
            self.peer_points.append(r)
            return r["oneway_ns_p50"]
        return measure

    # --- the rows ---------------------------------------------------------------

    def rows(self) -> list[Row]:
        p50 = lambda p: p["latency_ns"]["p50"]  # noqa: E731
        mean = lambda p: p["latency_ns"]["mean"]  # noqa: E731
        lat = lambda t, poll, **extra: {"transport": t, "poll": poll, "size": SIZE, "iters": ITERS, **extra}  # noqa: E731
        f = self.fabmeter
        rows = [
            Row("shm busy / cache-line limit", f("lat", lat("shm", "busy"), p50), "bare cache-line ping-pong",
                self.limit(lambda lim: lim["cacheline_oneway_ns"]["p50"]),
                "one-way (RTT/2) p50 ns, both timestamped per round trip", 1.25),
            Row("shm busy / two-line hand-over", f("lat", lat("shm", "busy"), p50),
                "cache-line ping-pong, a line per direction", self.limit(lambda lim: lim["two_lines_oneway_ns"]["p50"]),
                "one-way (RTT/2) p50 ns, both timestamped per round trip", None),
            Row("shm busy / ucx_perftest posix", f("lat", lat("shm", "busy"), p50), "ucx_perftest tag_lat posix",
                self.peer("ucx_perftest", "lat", "shm", p50), "one-way (RTT/2) p50 ns (ucx: last 2048 only)", 1.0),
            Row("tcp busy / ucx_perftest tcp", f("lat", lat("tcp", "busy"), p50), "ucx_perftest tag_lat tcp",
                self.peer("ucx_perftest", "lat", "tcp", p50), "one-way (RTT/2) p50 ns (ucx: last 2048 only)", 1.0),
            Row("tcp event / sockperf tcp", f("lat", lat("tcp", "event"), p50), "sockperf ping-pong --tcp",
                self.peer("sockperf", "lat", "tcp", p50), "one-way (RTT/2) p50 ns", 1.0),
            Row("udp event / sockperf udp", f("lat", lat("udp", "event"), p50), "sockperf ping-pong (udp)",
                self.peer("sockperf", "lat", "udp", p50), "one-way (RTT/2) p50 ns", 1.0),
            Row("tcp event / wake-up limit", f("lat", lat("tcp", "event"), p50), "futex wake-up ping-pong",
                self.limit(lambda lim: lim["wakeup_oneway_ns"]["p50"]), "one-way (RTT/2) p50 ns", None),
            Row("udp event / wake-up limit", f("lat", lat("udp", "event"), p50), "futex wake-up ping-pong",
                self.limit(lambda lim: lim["wakeup_oneway_ns"]["p50"]), "one-way (RTT/2) p50 ns", None),
            Row("tcp bw 64 KiB / iperf3", f("bw", {"transport": "tcp", "size": BW_SIZE, "iters": ITERS},
                                            lambda p: p["gbps"]),
                "iperf3 -l 64K", self.peer("iperf3", "bw", "tcp", lambda p: p["gbps"]),
                "Gbit/s at the receiver", 1.0, higher_is_better=True),
            Row("measuring cost", self.limit(lambda lim: lim["record_cost_ns"]), "20 ns budget",
                lambda: 20.0, "ns to take and store one timestamp", 1.0),
            Row("histogram record cost", self.limit(lambda lim: lim["hist_record_cost_ns"]), "5 ns budget",
                lambda: 5.0, "ns to record one latency in the histogram (load, --samples hist)", 1.0),
        ]
        fi = registry.PEERS.get("fi_pingpong")
        if fi is not None:
            rows += [
                Row("tcp busy / fi_pingpong tcp msg", f("lat", lat("tcp", "busy"), mean), "fi_pingpong -p tcp -e msg",
                    self.peer("fi_pingpong", "lat", "ofi:tcp:msg", mean), "one-way (RTT/2) mean ns", 1.0),
                Row("udp busy / fi_pingpong udp dgram", f("lat", lat("udp", "busy"), mean),
                    "fi_pingpong -p udp -e dgram", self.peer("fi_pingpong", "lat", "ofi:udp:dgram", mean),
                    "one-way (RTT/2) mean ns", 1.0),
            ]
            # The same provider calls on both sides (fi_pingpong injects messages below the provider's
            # inject_size, so fabmeter does too): what fabmeter's layer adds, as for the raw loops below.
            for prov, ep in (("tcp", "msg"), ("udp", "dgram"), ("shm", "rdm")):
                rows.append(Row(f"ofi {prov} {ep} / fi_pingpong", f("lat", lat("ofi", "busy", provider=prov, ep=ep,
                                                                              inline=SIZE),
                                                                     mean),
                                f"fi_pingpong -p {prov} -e {ep}", self.peer("fi_pingpong", "lat", f"ofi:{prov}:{ep}", mean),
                                "one-way (RTT/2) mean ns", 1.05))
        for lib in rawpp.LIBS:
            rows.append(Row(f"{lib} busy / raw {lib} loop", f("lat", lat(lib, "busy"), p50),
                            f"rawpp_{lib} busy, its library's threads where fabmeter's ran",
                            self.rawpp(lib, "busy", lat(lib, "busy")), "one-way (RTT/2) p50 ns", 1.05))
        return (rows + self.stream_rows() + self.load_rows() + self.flows_rows() + self.setup_rows()
                + self.hiccup_rows() + self.cpu_rows() + self.measuring_rows() + self.auth_rows())

    def stream_rows(self) -> list[Row]:
        """stream's missed steps beside a bare TSC spin schedule at the same period on the source's CPU (limits'
        schedule floor) while the other CPU spins, as the stream's busy sink keeps it: timer interrupts make both
        miss slots, so only their ratio, measured back to back, says what the stream source adds. Beneath it the
        floor with the other CPU idle, which in a VM misses fewer."""
        limits = ("--schedule-rate", str(STREAM_RATE), "--schedule-steps", str(STREAM_STEPS))
        what = f"missed steps % of {STREAM_STEPS:,} (after the default warm-up), timer tsc, shm 32 B"
        return [Row(f"stream {STREAM_RATE // 1000} kHz missed % / schedule floor",
                    self.fabmeter_all("stream", {"transport": "shm", "poll": "busy", "timer": "tsc",
                                                 "rate": [STREAM_RATE], "count": STREAM_STEPS},
                                      lambda ps: ps[-1]["missed_pct"]),
                    "limits: bare TSC spin schedule, the stream source's step rule, the sink's CPU spinning",
                    self.limit(lambda lim: lim["schedule_floor_busy_sink"]["missed_pct"], limits), what, 1.1),
                Row(f"stream {STREAM_RATE // 1000} kHz schedule floor, the other CPU idle",
                    self.limit(lambda lim: lim["schedule_floor"]["missed_pct"], limits),
                    "limits: the same with the sink's CPU spinning",
                    self.limit(lambda lim: lim["schedule_floor_busy_sink"]["missed_pct"], limits), what, None)]

    def cpu_rows(self) -> list[Row]:
        """CPU per message on the client, fabmeter beside sockperf (both counted by fabmeter: its engine's
        getrusage, sockperf's processes' /proc/PID/stat over their whole run, warm-up included) ping-pong and at
        one offered rate, and beside qperf's own figure (loc_cpus_used: the whole machine's busy CPUs, over its
        message rate). No target: what each costs, side by side."""
        def lat(t: str, poll: str) -> dict:
            return {"transport": t, "poll": poll, "size": SIZE, "iters": ITERS}

        ours = lambda p: p["cpu"]["client"]["per_message_ns"]  # noqa: E731
        ours_last = lambda ps: ours(ps[-1])  # noqa: E731
        theirs = lambda p: p["cpu"]["client"]["per_message_ns"]  # noqa: E731
        return [Row("CPU per round trip: tcp event / sockperf ping-pong tcp",
                    self.fabmeter("lat", lat("tcp", "event"), ours), "sockperf ping-pong --tcp (its processes, "
                    "/proc/PID/stat)", self.peer("sockperf", "lat", "tcp", theirs),
                    "client CPU ns (user + system) per round trip, as fast as each goes", None, floor=False),
                Row(f"CPU per request @ {LOAD_RATE // 1000}k/s: load tcp / sockperf ul",
                    self.fabmeter_all("load", {"transport": "tcp", "poll": "busy", "rate": [LOAD_RATE],
                                               "arrivals": "fixed", "req_size": SIZE, "duration": LOAD_SECONDS},
                                      ours_last),
                    f"sockperf under-load --mps {LOAD_RATE} (its processes, /proc/PID/stat)",
                    self.sockperf_load("tcp", (LOAD_RATE,), lambda ps: theirs(ps[-1])),
                    f"client CPU ns per request at {LOAD_RATE:,}/s offered, both spinning senders", None, floor=False),
                Row("CPU per round trip: tcp event / qperf tcp_lat (its loc_cpus_used)",
                    self.fabmeter("lat", lat("tcp", "event"), ours), "qperf tcp_lat, its own loc_cpus_used",
                    self.peer("qperf", "lat", "tcp", qperf_cpu_per_round_trip),
                    "CPU ns per round trip: fabmeter its client process; qperf the whole machine's busy CPUs", None,
                    floor=False)]

    def measuring_rows(self) -> list[Row]:
        """What measuring costs. The CPU accounting reads, each side, before the first measured round trip and
        after the last: their time (read_ns, both reads) beside the measured window of the same point, the
        shortest window of the bench's lat runs (shm busy). The server's transmit-path stamps: closed-loop
        requests/s with --tx-stamps on beside off, where every reply waits for a send buffer; a round whose
        stamped run saw no wait measured nothing and skips the row."""
        def lat_shm() -> dict:
            return {"transport": "shm", "poll": "busy", "size": SIZE, "iters": ITERS}

        rows = []
        for end in ("client", "server"):
            reads, window = self.one_run("lat", lat_shm(), lambda p, e=end: cpu_side(p, e)["read_ns"],
                                         lambda p, e=end: cpu_side(p, e)["window_s"] * 1e9)
            rows.append(Row(f"CPU accounting reads / measured window: lat shm busy {end}", reads,
                            "the same point's measured window (window_s)", window,
                            f"ns: the {end}'s two cpu snapshots (read_ns) beside its window", None, floor=False))

        def tx_load(stamps: str) -> dict:
            return {"transport": "ofi", "provider": "shm", "ep": "rdm", "sq_depth": 1, "rq_depth": 4,
                    "req_size": SIZE, "resp_size": TX_RESP_SIZE, "clients": [TX_CLIENTS], "duration": TX_SECONDS,
                    "tx_stamps": stamps}
        rows.append(Row("load server tx stamps on / off: closed-loop req/s",
                        self.fabmeter_all("load", tx_load("on"), tx_stamped_rps), "the same with --tx-stamps off",
                        self.fabmeter_all("load", tx_load("off"), tx_unstamped_rps),
                        f"achieved req/s, {TX_CLIENTS} closed-loop clients, ofi shm rdm, --sq-depth 1, "
                        f"{TX_RESP_SIZE // 1024} KiB replies", TX_TARGET, higher_is_better=True))
        return rows

    def session(self, experiment: str, options: dict, token: bool,
                pick: Callable[[list[dict], float], float]) -> Callable[[], float]:
        """One run against a serve of the bench's own on loopback, both ends with a fresh token or neither:
        pick(its points, the client's wall time in s)."""
        def measure() -> float:
            if options["transport"] not in self.info.get("transports", []):
                raise Skip(f"transport {options['transport']} is not built into this engine")
            env = {k: v for k, v in os.environ.items() if k != "FABMETER_TOKEN"}
            if token:
                env["FABMETER_TOKEN"] = secrets.token_hex(32)
            with procs.SignalForwarder() as fwd:
                server = run.LocalServer(self.engine, self.cpus[1] if self.cpus and len(self.cpus) > 1 else None,
                                         fwd, env=env)
                server.start_draining()
                cmd = [self.engine, "run", experiment, "--server", f"127.0.0.1:{server.port}",
                       *(["--cpu", str(self.cpus[0])] if self.cpus else []),
                       *engine_options(self.engine).engine_argv(options)]
                t0 = time.monotonic()
                try:
                    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=AUTH_TIMEOUT_S)
                finally:
                    server.stop(run.SERVER_EXIT_TIMEOUT_S)
                wall_s = time.monotonic() - t0
            if fwd.interrupted:
                raise FabmeterError("interrupted", EXIT_INTERRUPTED)
            points = [p for p in map(json.loads, r.stdout.splitlines()) if p.get("type") == "point"]
            if r.returncode != EXIT_OK or not points:
                raise Skip(f"fabmeter {experiment} {options} against a serve failed: {last_error_line(r.stderr)}")
            return pick(points, wall_s)
        return measure

    def auth_rows(self) -> list[Row]:
        """What authenticating every control frame costs. lat p50 with a token beside without: the measured
        messages carry no tag, so the round ratio's interval must include 1.00. The control channel's time per
        point: a run of many small points, its client's wall time less the points' measured windows, per point,
        with a token beside without (handshake, key and every frame's tag included; start-up and warm-up alike)."""
        def lat(t: str) -> dict:
            return {"transport": t, "poll": "busy", "size": SIZE, "iters": ITERS}
        p50 = lambda points, wall_s: points[-1]["latency_ns"]["p50"]  # noqa: E731

        def per_point_us(points: list[dict], wall_s: float) -> float:
            measured = sum(cpu_side(p, "client")["window_s"] for p in points)
            return (wall_s - measured) / len(points) * 1e6
        sweep = {"transport": "tcp", "poll": "busy", "all": True, "max_size": AUTH_MAX_SIZE, "iters": AUTH_ITERS}
        rows = [Row(f"lat {t} busy p50: token / no token", self.session("lat", lat(t), True, p50),
                    "the same lat against a serve without a token", self.session("lat", lat(t), False, p50),
                    "latency p50 ns (RTT/2); the measured path is untouched: the interval must include 1.00", None,
                    floor=False) for t in ("shm", "tcp")]
        rows.append(Row("control channel per point: token / no token", self.session("lat", sweep, True, per_point_us),
                        "the same run against a serve without a token", self.session("lat", sweep, False, per_point_us),
                        f"us per point outside its measured window (set-up, warm-up, control frames): the client's "
                        f"wall time less the windows, lat tcp busy -a up to {AUTH_MAX_SIZE} B, {AUTH_ITERS} round "
                        "trips each", None, floor=False))
        return rows

    def flows_rows(self) -> list[Row]:
        """bw over FLOWS tcp connections beside iperf3 -P FLOWS: 64 KiB messages, ITERS of them in all (fabmeter
        sends ITERS / FLOWS on each flow; iperf3's streams share its -k), each end's flows on its one CPU. Event
        mode: FLOWS busy-polling threads on one CPU would take turns in time slices; iperf3 blocks in select.
        iperf3's own CPU figure stays in peers.json (cpu_utilization_percent)."""
        return [Row(f"tcp bw 64 KiB x{FLOWS} flows / iperf3 -P {FLOWS}",
                    self.fabmeter("bw", {"transport": "tcp", "poll": "event", "size": BW_SIZE, "iters": ITERS // FLOWS,
                                         "flows": FLOWS}, lambda p: p["gbps"]),
                    f"iperf3 -l 64K -P {FLOWS}", self.peer("iperf3", "bw", "tcp", lambda p: p["gbps"], flows=FLOWS),
                    f"Gbit/s at the receivers, the sum over {FLOWS} connections", 1.0, higher_is_better=True)]

    def hiccup_rows(self) -> list[Row]:
        """limits' hiccup detector, a reader per allowed CPU for its default second: the gaps over its threshold
        beside the longest. No target: what the machine does to a spinning thread, beside the other rows."""
        count, longest = self.one_limits(("--hiccups",), lambda lim: lim["hiccups"]["count"],
                                         lambda lim: lim["hiccups"]["longest_us"])
        return [Row("hiccups: gaps / the longest gap", count, "the longest gap us (limits --hiccups)", longest,
                    "gaps over the default threshold in 1 s on every allowed CPU; the longest one's us", None,
                    floor=False)]

    def setup_rows(self) -> list[Row]:
        """tcp connection establishment (setup: a new transport's whole connect(), with its 2 control-channel round
        trips) beside limits' bare loopback connect/accept in one thread: the kernel's part of it, a floor."""
        return [Row("tcp setup connect / bare connect-accept floor",
                    self.fabmeter("setup", {"transport": "tcp", "iters": SETUP_REPS}, lambda p: p["connect_ns"]["p50"]),
                    "limits: bare tcp socket, connect and accept on loopback, one thread, no control channel",
                    self.limit(lambda lim: lim["connect_floor_ns"]["p50"], ("--connects", str(SETUP_REPS))),
                    f"connect p50 ns over {SETUP_REPS} repetitions (setup: client, a new transport to its connect() "
                    "returned)", None)]

    def load_rows(self) -> list[Row]:
        """fabmeter load beside sockperf under-load (same CPUs, size, rate and a send every 1/rate; both figures
        the round trip from the *actual* send, sockperf's definition: fabmeter's service latency), the
        generator's accuracy against the issue's budget, and the shm knee beside bw's message rate."""
        def load(t: str, rates, **extra) -> dict:
            return {"transport": t, "poll": "busy", "rate": list(rates), "arrivals": "fixed", "req_size": SIZE,
                    "duration": LOAD_SECONDS, **extra}

        service_p99 = lambda ps: ps[-1]["service_latency_ns"]["p99"]  # noqa: E731
        peer_p99 = lambda ps: ps[-1]["latency_ns"]["p99"]  # noqa: E731
        rows = [Row(f"load {t} p99 @ {LOAD_RATE // 1000}k/s / sockperf ul",
                    self.fabmeter_all("load", load(t, [LOAD_RATE]), service_p99),
                    f"sockperf under-load --mps {LOAD_RATE} --reply-every 1 --full-rtt",
                    self.sockperf_load(t, (LOAD_RATE,), peer_p99),
                    "RTT p99 ns from the actual send (fabmeter: service latency), fixed arrivals", 1.0)
                for t in ("tcp", "udp")]
        rows.append(Row("load tcp highest rate, p99 < 10x unloaded / sockperf ul",
                        self.fabmeter_all("load", load("tcp", LOAD_SWEEP), fabmeter_highest_held),
                        f"sockperf under-load at {','.join(map(str, LOAD_SWEEP))}/s",
                        self.sockperf_load("tcp", LOAD_SWEEP, sockperf_highest_held),
                        f"highest offered req/s of {','.join(map(str, LOAD_SWEEP))} before the first whose RTT p99 "
                        f"(from the actual send) > {analysis.KNEE_P99_FACTOR:g}x the tool's unloaded p99 or achieved "
                        f"< {analysis.KNEE_ACHIEVED_SHARE:.0%}", 1.0, higher_is_better=True))
        # The generator's lag beside the least any sender on its CPU could have: a bare TSC spin to the 1 us
        # slots of a schedule at that rate (limits' schedule floor), each slot's wake-up less its due time.
        schedule = ("--schedule-rate", str(LAG_RATE), "--schedule-steps", str(LAG_COUNT))
        rows.append(Row(f"load generator lag p99 @ {LAG_RATE / 1e6:g}M/s shm / bare schedule's",
                        self.fabmeter_all("load", {"transport": "shm", "poll": "busy", "rate": [LAG_RATE],
                                                   "req_size": SIZE, "count": LAG_COUNT},
                                          lambda ps: ps[-1]["lag_ns"]["p99"]),
                        f"limits: bare {LAG_RATE / 1e6:g} MHz TSC spin schedule on the client CPU, its lag p99",
                        self.limit(lambda lim: lim["schedule_floor"]["lag_ns"]["p99"], schedule),
                        "ns from the scheduled to the actual send, p99 (the generator: poisson arrivals; the "
                        "schedule: even slots, a skipped slot's lag taken at the wake-up that skipped it)",
                        LAG_TARGET))
        # Beneath it: how often that bare spin is a slot or more late. Past 1 % of the slots, any sender's p99
        # lies in such a stall.
        rows.append(Row(f"load generator accuracy floor: bare {LAG_RATE / 1e6:g} MHz schedule",
                        self.limit(lambda lim: lim["schedule_floor"]["missed_pct"], schedule),
                        "1 % of the slots (the p99's share)", lambda: 1.0,
                        f"% of {LAG_COUNT:,} 1 us slots a bare TSC spin on the client CPU missed", None))
        rows.append(Row("load shm achieved rate at the knee / bw message rate",
                        self.fabmeter_all("load", {"transport": "shm", "poll": "busy", "of_capacity": KNEE_FRACTIONS,
                                                   "req_size": SIZE, "duration": KNEE_SECONDS}, achieved_at_knee),
                        f"fabmeter bw -t shm -s {SIZE}",
                        self.fabmeter("bw", {"transport": "shm", "size": SIZE, "iters": BW_MSGS},
                                      lambda p: p["msg_rate"]),
                        "requests/s (round trips) at the knee beside messages/s one way", None,
                        higher_is_better=True))
        return rows


def _highest_held(points: list[dict], p99: Callable[[dict], float], unloaded_p99: Callable[[dict], float]) -> float:
    """The highest offered rate below the first that does not hold, by analysis.load_knee's rule on the given
    p99 and unloaded p99; 0 when the first does not."""
    held = analysis.load_knee([{"phase": "open loop", "offered_rps": p["offered_rps"],
                                "achieved_rps": p["achieved_rps"], "latency_ns": {"p99": p99(p)},
                                "unloaded_ns": {"p99": unloaded_p99(p)}} for p in points])["last_held_rps"]
    return float(held or 0)


def fabmeter_highest_held(points: list[dict]) -> float:
    # Service latency: from the actual send, as sockperf measures; unloaded: fabmeter's one-in-flight probe.
    return _highest_held(points, lambda p: p["service_latency_ns"]["p99"], lambda p: p["unloaded_ns"]["p99"])


def sockperf_highest_held(points: list[dict]) -> float:
    # sockperf has no unloaded probe: its lowest-rate run stands in for one.
    base = min(points, key=lambda p: p["offered_rps"])["latency_ns"]["p99"]
    return _highest_held(points, lambda p: p["latency_ns"]["p99"], lambda p: base)


def io_cpu(io_cpus: dict, end: str) -> int:
    """Where one end of a fabmeter run had its library's threads (granted.io_cpus, read back from the kernel): its
    one CPU, else -1 (unpinned: where they start)."""
    cpus = (io_cpus.get(end) or {}).get("cpus")
    return cpus[0] if isinstance(cpus, list) and len(cpus) == 1 and isinstance(cpus[0], int) else -1


def cpu_side(point: dict, end: str) -> dict:
    """A point's cpu side of `end` (client or server); a server's that never came is no figure."""
    side = point["cpu"][end]
    if side is None:
        raise Skip(f"the point has no {end} cpu side")
    return side


def tx_stamped_rps(points: list[dict]) -> float:
    """The last point's achieved req/s, where the server's send queue filled and its waits were stamped."""
    tx = points[-1]["server"]["tx"]
    if not tx or not tx["waits"]:
        raise Skip("the server's send queue never filled: the transmit path was not measured")
    return points[-1]["achieved_rps"]


def tx_unstamped_rps(points: list[dict]) -> float:
    """The last point's achieved req/s, the server's transmit path unstamped (server.tx null)."""
    if points[-1]["server"]["tx"] is not None:
        raise Skip("--tx-stamps off still reported server.tx")
    return points[-1]["achieved_rps"]


def qperf_cpu_per_round_trip(p: dict) -> float:
    """qperf's own CPU per round trip: loc_cpus_used (% of one CPU, the whole machine) over its round trips/s
    (its lat msg_rate counts both directions)."""
    return p["tool_cpu"]["loc_cpus_used_pct"] / 100 / (p["msg_rate"] / 2) * 1e9


def achieved_at_knee(points: list[dict]) -> float:
    """The achieved rate of the sweep's knee point (fabmeter's own knee: latency from the intended send), or of
    its last point if every point held."""
    knee = analysis.load_knee(points)
    at = [p for p in points if p.get("phase") == "open loop" and p.get("offered_rps") == knee["offered_rps"]]
    return (at[0] if at else points[-1])["achieved_rps"]


def ratio_of(ours: Optional[float], theirs: Optional[float]) -> Optional[float]:
    """ours / theirs. A zero beside a zero is parity (the stream row: neither missed a step); anything beside a
    zero is infinitely worse, or better, whichever way the row counts."""
    if ours is None or theirs is None:
        return None
    if theirs == 0:
        return 1.0 if ours == 0 else math.inf
    return ours / theirs


def _measure(fn: Callable[[], float], into: list[float]) -> None:
    into.append(fn())


RDMA_RESULTS = Path(__file__).resolve().parents[2] / "build" / "rdma-results" / "results.json"


def rdma_table() -> Optional[tuple[str, list[list]]]:
    """fabmeter verbs beside perftest from the last `make test-rdma` (the
    Soft-RoCE guest boots for a minute: the bench reads its results rather
    than booting it again). None when it has not run here."""
    try:
        doc = json.loads(RDMA_RESULTS.read_text())
    except (OSError, ValueError):
        return None
    rows = []
    for c in doc.get("comparison", []):
        ours, theirs = c.get("fabmeter_p50_ns"), c.get("perftest_typical_us")
        ratio = ours / (theirs * 1000) if ours and theirs else None
        rows.append([f"verbs {c['service']} {c['op']}", c.get("perftest_tool"), ours,
                     None if theirs is None else theirs * 1000, None if ratio is None else f"{ratio:.2f}x"])
    return doc.get("date", "?"), rows


OPTIONS = (
    CommandOption("out", "results folder (default: %(default)s)", metavar="DIR", default="results/bench"),
    CommandOption("rounds", "rounds, alternating configurations (default: %(default)s)", metavar="K", type=int,
                  default=5),
    CommandOption("cpus", "the two CPUs (default: the first two CPUs)", metavar="A,B"),
)


def add_parser(sub, info: Optional[dict]) -> None:
    command = sub.add_parser("bench", help="fabmeter beside the peer tools and the machine's limits, with targets",
                             allow_abbrev=False)
    command_options.add_arguments(command, OPTIONS)


def main(ns, found: Found) -> int:
    if ns.rounds < 1:
        raise FabmeterError("--rounds must be at least 1", EXIT_USAGE)
    out, rounds, cpus = out_folder(ns.out), ns.rounds, parse_cpus(ns.cpus)
    started = now_iso()
    env = envinfo.collect()
    engine = find_engine()
    bench = Bench(out, cpus, engine)
    rows = bench.rows()
    print(f"fabmeter bench  {started}")
    print(f"CPU: {env['cpu_model']}  kernel: {env['kernel']['release']}  CPUs: {list(cpus) if cpus else 'unpinned'}")
    status = "ok"
    tty = sys.stderr.isatty()
    try:
        for r in range(rounds):
            if not tty:
                sys.stderr.write(f"bench: round {r + 1}/{rounds}\n")
            for i, row in enumerate(rows):
                if row.skipped:
                    continue
                if tty:
                    sys.stderr.write(f"\rbench: round {r + 1}/{rounds}, row {i + 1}/{len(rows)}: {row.name:<40}")
                    sys.stderr.flush()
                sides = [(row.fabmeter, row.ours), (row.other, row.theirs)]
                if (r + i) % 2:
                    sides.reverse()
                try:
                    for fn, into in sides:
                        _measure(fn, into)
                except Skip as e:
                    row.skipped = str(e)
                    sys.stderr.write(f"{chr(10) if tty else ''}bench: {row.name}: skipped: {row.skipped}\n")
        if tty:
            sys.stderr.write("\n")
    except FabmeterError as e:
        if e.exit_code != EXIT_INTERRUPTED:
            raise
        status = "interrupted"

    table, doc = [], []
    for row in rows:
        ours = statistics.median(row.ours) if row.ours else None
        theirs = statistics.median(row.theirs) if row.theirs else None
        ratio = ratio_of(ours, theirs)
        ratio = None if ratio == math.inf else ratio
        interval, verdict = row.judged()
        goal = "-" if row.target is None else f"{'>=' if row.higher_is_better else '<='} {row.target:.2f}x"
        shown = ("floor, no target" if row.floor else "no target") if verdict is None else "NOT met" if verdict == "not met" else verdict
        table.append([row.name, row.figure, ours, theirs, None if ratio is None else f"{ratio:.2f}x",
                      "-" if interval is None else f"{interval[0]:.2f}..{interval[1]:.2f}", goal,
                      "skipped: " + row.skipped if row.skipped and ratio is None else
                      shown + (f" ({row.skipped})" if row.skipped else "")])
        doc.append({"row": row.name, "figure": row.figure, "versus": row.versus, "fabmeter": row.ours,
                    "other": row.theirs, "fabmeter_median": ours, "other_median": theirs, "ratio": ratio,
                    "round_ratio_interval": None if interval is None else list(interval),
                    "target": goal, "verdict": verdict, "met": {"met": True, "not met": False}.get(verdict),
                    "skipped": row.skipped or None})
    print(f"{rounds} rounds; medians over rounds; sides of each row measured in alternating order; "
          f"interval: the rounds' own ratios, {stats.CONFIDENCE:.0%} for their median (stats.py); a target is "
          f"met or NOT met when that interval lies wholly on one side of it, else: cannot tell"
          + (f" (at least {stats.MIN_ROUNDS} rounds give an interval)" if rounds < stats.MIN_ROUNDS else ""))
    print(analysis.format_table(["row", "figure", "fabmeter", "versus", "ratio", "interval", "target", "result"],
                                table, left=2))
    rdma = rdma_table()
    if rdma:
        print(f"\nSoft-RoCE guest (qemu TCG, emulated; from `make test-rdma` of {rdma[0]}): 32 B, one-way = RTT/2,"
              " fabmeter p50 beside perftest's t_typical (its median)")
        print(analysis.format_table(["case", "perftest tool", "fabmeter ns", "perftest ns", "ratio"], rdma[1],
                                    left=2))
    else:
        print("\nSoft-RoCE guest: no results yet (run `make test-rdma` for verbs beside perftest)")
    write_json(out / "bench.json", {"started_at": started, "finished_at": now_iso(), "status": status,
                                    "rounds": rounds, "cpus": list(cpus) if cpus else None, "size": SIZE,
                                    "bw_size": BW_SIZE, "iters": ITERS, "environment": env,
                                    "rows": doc, "limits": bench.limits,
                                    "rdma": {"from": rdma[0], "rows": rdma[1]} if rdma else None})
    write_json(out / "peers.json", {"points": bench.peer_points})
    (out / "bench.md").write_text(markdown(table, started, env, rounds, cpus))
    from fabmeter.report.html import write as write_report   # matplotlib: loaded only when needed
    path = write_report(out)
    print(f"results: {out / 'bench.json'}, table: {out / 'bench.md'}, report: {path}")
    if status == "interrupted":
        sys.stderr.write("fabmeter: interrupted\n")
        return EXIT_INTERRUPTED
    return EXIT_OK


def markdown(table: list[list], started: str, env: dict, rounds: int, cpus) -> str:
    lines = [f"Measured {started} on {env['cpu_model']} ({env.get('cpu_count')} CPUs), kernel "
             f"{env['kernel']['release']}, CPUs {list(cpus) if cpus else 'unpinned'}; {rounds} rounds, "
             "medians over rounds.", "",
             "| row | figure | fabmeter | versus | ratio | interval | target | result |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append("| " + " | ".join(analysis.fmt_num(c, 1) if isinstance(c, float) else str(c if c is not None
                                                                                               else "-")
                                       for c in r) + " |")
    return "\n".join(lines) + "\n"
