"""`fabmeter watch`: its options and their checks (docs/cli.md#fabmeter-watch)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Optional

from fabmeter import __version__, command_options, slo
from fabmeter.command_options import CommandOption, Found
from fabmeter.engine import engine_options
from fabmeter.errors import EXIT_USAGE, FabmeterError
from fabmeter.mesh import command as mesh_command, patterns as mesh_patterns, rendezvous as mesh_rendezvous
from fabmeter.mesh import run as mesh_run
from fabmeter.options import PY_ONLY, Options
from fabmeter.terminal import shown_lines

DEFAULT_INTERVAL_S = 60.0
DEFAULT_METRICS_PORT = 9477
UNITS_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", text)
    if not m:
        raise ValueError(f"expected seconds, or a number with s, m, h or d, got {text!r}")
    return float(m.group(1)) * UNITS_S[m.group(2)]


def cpu_pair(text: str) -> tuple[str, str]:
    """--cpus A,B: each side a CPU or A+A2+... (--flows), as the engine's --cpu takes it."""
    sides = text.split(",")
    if len(sides) != 2 or not all(re.fullmatch(r"[0-9]+(\+[0-9]+)*", side) for side in sides):
        raise ValueError(f"expected A,B (each side a CPU, or A+A2+... for --flows), got {text!r}")
    return sides[0], sides[1]


OPTIONS = (
    CommandOption("hosts", "the hosts (their serves' addresses)", metavar="A,B,..."),
    mesh_command.HOSTFILE,
    CommandOption("pair", "a directed pair to run instead of a pattern over --hosts (repeat it)",
                  metavar=("SRC", "DST"), repeat=True),
    mesh_command.EXPERIMENT,
    CommandOption("pattern", "which directed pairs of --hosts (default: all-to-all)", choices=mesh_patterns.PATTERNS),
    mesh_command.SCHEDULE,
    CommandOption("parallel", "run a round's pairs that share a host at once (scheduled: both directions of a pair, "
                              "as mesh does); default: one after another, so no host runs two pairs at once",
                  flag=True),
    CommandOption("cpus", "each pair's client on CPU A of its source host and its server session on CPU B of its "
                          "destination (A+A2+...,B+B2+...: with --flows, each end's flows on its CPUs in turn), each "
                          "checked by that host's serve against its --cpu (default: each serve's own --cpu)",
                  metavar="A,B", type=cpu_pair),
    mesh_command.SERVE_PORT,
    CommandOption("token-file", "the serves' shared secret (default: $FABMETER_TOKEN)", metavar="F"),
    CommandOption("interval", "a sweep (every pair once) starts this often; one that runs longer is followed at once "
                              "(s, m, h, d suffixes; default: %(default)g)",
                  metavar="SEC", type=duration, default=DEFAULT_INTERVAL_S),
    CommandOption("for", "start no sweep after this long, then exit 0 (default: until Ctrl-C or SIGTERM)",
                  metavar="SEC", type=duration, dest="for_s"),
    CommandOption("round-lead", "a round's pairs start together this long after it begins, as in mesh (0: each as "
                                "soon as its engines connect; default: %(default)g)",
                  metavar="SEC", type=duration, default=mesh_run.ROUND_LEAD_S),
    CommandOption("metrics-port", f"serve the metrics over HTTP on this port (0: any free one, logged; default: "
                                  f"{DEFAULT_METRICS_PORT}, or none with --textfile)", metavar="N", type=int),
    CommandOption("metrics-bind", "the address the metrics are served on (default: %(default)s)", metavar="ADDR",
                  default="127.0.0.1"),
    CommandOption("textfile", "also write the metrics to PATH after every sweep, replaced atomically (node_exporter's "
                              "textfile collector reads *.prom)", metavar="PATH"),
    CommandOption("slo", "latency objectives checked on every run of every pair, e.g. 'p99<=200us'; misses are "
                         "counted per pair (fabmeter_pair_slo_misses_total) and logged", metavar="OBJECTIVES"),
)


def add_parser(sub, info: Optional[dict]) -> None:
    p = sub.add_parser("watch", allow_abbrev=False,
                       help="run a mesh (or a list of pairs) over standing serves every --interval; "
                            "publish OpenMetrics for Prometheus",
                       description="A continuous fabric monitor: every --interval, each directed pair runs as "
                                   "`fabmeter mesh --launch serve` runs it (every host runs `fabmeter serve "
                                   "--relay-to HOSTS`; pin each with its --cpu, or each pair's ends with --cpus), a round's pairs that share a "
                                   "host one after another unless --parallel; per pair latency histograms, loss, "
                                   "throughput, clock fits, "
                                   "failures and SLO misses are served over HTTP (--metrics-port) and/or written "
                                   "to a node_exporter textfile (--textfile). Until Ctrl-C or SIGTERM (exit 130), "
                                   "or --for (exit 0). docs/cli.md lists every metric.")
    command_options.add_arguments(p, OPTIONS)
    if info is not None:
        Options(info).add_arguments(p, mesh_run.EXPERIMENTS, skip=PY_ONLY)


def _hosts(ns: argparse.Namespace) -> tuple[list[str], list[tuple[int, int]]]:
    """The hosts and the directed pairs (indices into the hosts)."""
    given = [x for x in (ns.hosts, ns.hostfile, ns.pair) if x is not None]
    if len(given) != 1:
        raise FabmeterError("watch: give the hosts by --hosts A,B,..., --hostfile F or --pair SRC DST ...",
                            EXIT_USAGE)
    if ns.pair is not None:
        if ns.pattern is not None:
            raise FabmeterError("watch: --pattern goes with --hosts or --hostfile, not --pair", EXIT_USAGE)
        hosts: list[str] = []
        for pair in ns.pair:
            for h in pair:
                if h and h not in hosts:
                    hosts.append(h)
        pairs = []
        for s, d in ns.pair:
            if not s or not d or s == d:
                raise FabmeterError(f"watch: --pair {s} {d}: two different hosts", EXIT_USAGE)
            if (hosts.index(s), hosts.index(d)) in pairs:
                raise FabmeterError(f"watch: --pair {s} {d} is given twice", EXIT_USAGE)
            pairs.append((hosts.index(s), hosts.index(d)))
        return hosts, pairs
    if ns.hosts is not None:
        hosts = [h.strip() for h in ns.hosts.split(",")]
    else:
        hosts = mesh_command.read_hostfile(ns.hostfile)
    if len(hosts) < 2 or not all(hosts) or len(set(hosts)) != len(hosts):
        raise FabmeterError(f"watch: needs at least 2 different hosts, got {','.join(hosts)}", EXIT_USAGE)
    return hosts, mesh_patterns.pairs(ns.pattern or "all-to-all", len(hosts))


def main(ns: argparse.Namespace, found: Found) -> int:
    from fabmeter.watch import loop      # prometheus_client: only for this command

    engine, table = found.engine, engine_options(found.engine)

    hosts, pairs = _hosts(ns)
    if ns.pair is not None:
        rounds = loop.pair_rounds(pairs, ns.schedule)
    else:
        rounds = mesh_patterns.rounds(ns.pattern or "all-to-all", ns.schedule, len(hosts))
    if not ns.parallel:
        rounds = loop.waves(rounds)
    for name, value in (("--serve-port", ns.serve_port), ("--metrics-port", ns.metrics_port)):
        if value is not None and not (0 if name == "--metrics-port" else 1) <= value < 65536:
            raise FabmeterError(f"watch: {name} {value} is not a port", EXIT_USAGE)
    if ns.interval <= 0:
        raise FabmeterError("watch: --interval must be more than 0", EXIT_USAGE)
    if ns.for_s is not None and ns.for_s <= 0:
        raise FabmeterError("watch: --for must be more than 0", EXIT_USAGE)
    given = mesh_command.pair_options(ns, table, "watch")
    if "samples" in table and table["samples"].for_experiment(ns.experiment) and "samples" not in given:
        given["samples"] = "hist"        # the engine's HdrHistogram in each point: exact bucket counts
    objectives = None
    if ns.slo is not None:
        if not slo.applies(ns.experiment):
            raise FabmeterError(slo.refusal(ns.experiment), EXIT_USAGE)
        try:
            objectives = slo.parse(ns.slo)
        except slo.SloError as e:
            raise FabmeterError(f"--slo: {e}", EXIT_USAGE) from None
    if ns.textfile is not None:
        folder = Path(ns.textfile).resolve().parent
        if not folder.is_dir():
            raise FabmeterError(f"--textfile {ns.textfile}: no folder {folder}", EXIT_USAGE)
    port = ns.metrics_port if ns.metrics_port is not None else (None if ns.textfile else DEFAULT_METRICS_PORT)
    token = mesh_rendezvous.read_token(ns.token_file, dict(os.environ))
    if not token and not all(mesh_run.is_loopback(h) for h in hosts):
        raise FabmeterError("watch: hosts beyond loopback need a shared token: FABMETER_TOKEN or --token-file",
                            EXIT_USAGE)
    if token:
        os.environb[b"FABMETER_TOKEN"] = token   # the engine clients read it from there
    else:
        os.environ.pop("FABMETER_TOKEN", None)
    timeout_ms = given.get("timeout_ms", table["timeout_ms"].default)
    info = {"version": __version__, "experiment": ns.experiment, "transport": str(given["transport"]),
            "pattern": "pairs-given" if ns.pair is not None else (ns.pattern or "all-to-all"),
            "schedule": ns.schedule}
    spec = loop.WatchSpec(hosts, rounds, ns.experiment, given, ns.cpus, engine, ns.serve_port, timeout_ms / 1000.0,
                          ns.interval, ns.for_s, ns.round_lead, objectives, ns.metrics_bind, port, ns.textfile, info)
    def log(line: str) -> None:
        sys.stderr.write(f"fabmeter: watch: {shown_lines(line)}\n")
        sys.stderr.flush()
    return loop.main(spec, log)
