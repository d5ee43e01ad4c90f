"""`fabmeter bench`: fabmeter beside the established tools and the machine's
own limits, measured side by side in one run.

Every row pairs one fabmeter measurement with what it is judged against: a
peer tool on the same path (same size, iterations, CPUs) or a machine limit
(`fabmeter-engine limits`). Each round measures every row once, the two
sides of a row in alternating order (A B, then B A), so slow drift of a
shared machine favours neither. Reported per row: the median over rounds of
each side's figure, their ratio, and whether the row's target is met. Rows
without a target put fabmeter beside a floor beneath a target it does not
meet (shm against two lines, event mode against a wake-up).

Figures are compared like with like: where a peer gives only a mean
(fi_pingpong), fabmeter's mean is used; where it gives a median, the median.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from fabmeter import analysis, envinfo, run
from fabmeter.engine import engine_info, find_engine
from fabmeter.errors import EXIT_INTERRUPTED, EXIT_OK, FabmeterError
from fabmeter.peers import base as peer_base
from fabmeter.peers import registry, rawpp
from fabmeter.results import execute_recorded, now_iso, write_json

SIZE = 32
BW_SIZE = 64 * 1024
ITERS = 20000


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
    ours: list[float] = field(default_factory=list)
    theirs: list[float] = field(default_factory=list)
    skipped: str = ""

    def met(self, ratio: Optional[float]) -> Optional[bool]:
        if ratio is None or self.target is None:
            return None
        return ratio >= self.target if self.higher_is_better else ratio <= self.target


class Bench:
    def __init__(self, out: Path, cpus: Optional[tuple[int, ...]], engine: str):
        self.out, self.cpus, self.engine = out, cpus, engine
        self.info = engine_info(engine)
        self.peer_points: list[dict] = []
        self.limits: list[dict] = []
        self.runs = 0

    # --- one side of a row ----------------------------------------------------

    def fabmeter(self, experiment: str, options: dict, pick: Callable[[dict], float]) -> Callable[[], float]:
        transport = options["transport"]

        def measure() -> float:
            if transport not in self.info.get("transports", []):
                raise Skip(f"transport {transport} is not built into this engine")
            self.runs += 1
            words = "-".join(str(v) for k, v in options.items() if k not in ("size", "iters"))
            folder = self.out / "runs" / f"{self.runs:03d}-{experiment}-{words}"
            res = execute_recorded(run.RunSpec(experiment, options, cpus=self.cpus, out=folder, engine=self.engine))
            if res.exit_code == EXIT_INTERRUPTED:
                raise FabmeterError("interrupted", EXIT_INTERRUPTED)
            if res.exit_code != EXIT_OK or not res.points:
                raise Skip(f"fabmeter {experiment} {options} failed: {res.message}")
            return pick(res.points[-1])
        return measure

    def limit(self, pick: Callable[[dict], float]) -> Callable[[], float]:
        def measure() -> float:
            lim = run.run_limits(self.cpus, engine=self.engine)
            self.limits.append(lim)
            return pick(lim)
        return measure

    def peer(self, tool: str, experiment: str, transport: str, pick: Callable[[dict], float]) -> Callable[[], float]:
        adapter = registry.PEERS.get(tool)

        def measure() -> float:
            if adapter is None or not adapter.available():
                raise Skip(f"{tool} is not installed")
            params = peer_base.Params(size=SIZE, bw_size=BW_SIZE, iters=ITERS, duration=1.0,
                                      cpus=tuple(self.cpus) if self.cpus else None)
            try:
                points = adapter.run_case(peer_base.Case(experiment, transport), params)
            except peer_base.PeerError as e:
                raise Skip(f"{tool} {experiment} {transport}: {e}") from e
            self.peer_points += points
            return pick(points[0])
        return measure

    def rawpp(self, lib: str, mode: str) -> Callable[[], float]:
        def measure() -> float:
            try:
                r = rawpp.run(lib, mode, SIZE, ITERS, self.cpus)
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
            rows.append(Row(f"{lib} busy / raw {lib} loop", f("lat", lat(lib, "busy"), p50), f"rawpp_{lib} busy",
                            self.rawpp(lib, "busy"), "one-way (RTT/2) p50 ns", 1.05))
        return rows


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


def main(out: Path, rounds: int, cpus: Optional[tuple[int, ...]]) -> int:
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
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
        ratio = ours / theirs if ours is not None and theirs else None
        met = row.met(ratio)
        goal = "-" if row.target is None else f"{'>=' if row.higher_is_better else '<='} {row.target:.2f}x"
        verdict = "floor, no target" if row.target is None else "met" if met else "NOT met"
        table.append([row.name, row.figure, ours, theirs, None if ratio is None else f"{ratio:.2f}x", goal,
                      "skipped: " + row.skipped if row.skipped and ratio is None else
                      verdict + (f" ({row.skipped})" if row.skipped else "")])
        doc.append({"row": row.name, "figure": row.figure, "versus": row.versus, "fabmeter": row.ours,
                    "other": row.theirs, "fabmeter_median": ours, "other_median": theirs, "ratio": ratio,
                    "target": goal, "met": met, "skipped": row.skipped or None})
    print(f"{rounds} rounds; medians over rounds; sides of each row measured in alternating order")
    print(analysis.format_table(["row", "figure", "fabmeter", "versus", "ratio", "target", "result"], table,
                                left=2))
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
             "| row | figure | fabmeter | versus | ratio | target | result |", "|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append("| " + " | ".join(analysis.fmt_num(c, 1) if isinstance(c, float) else str(c if c is not None
                                                                                               else "-")
                                       for c in r) + " |")
    return "\n".join(lines) + "\n"
