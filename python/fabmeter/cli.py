"""The `fabmeter` command.

The experiment subcommands (lat, oneway, bw, stream, check, load, setup) get their
options from `fabmeter-engine options` (options.py), so names, types,
choices, help and defaults live in one place, the engine's option table.
Only options that concern orchestration are defined here: --cpus, --json,
--out, --server, --token-file, --slo (slo.py; and serve's and mesh's own).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

from fabmeter import __version__, analysis, envinfo, run, search, slo
from fabmeter.engine import engine_info, engine_options, find_engine
from fabmeter.errors import (EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_SLO, EXIT_USAGE, FabmeterError)
from fabmeter.mesh import output as mesh_output, patterns as mesh_patterns, rendezvous as mesh_rendezvous
from fabmeter.mesh import outliers as mesh_outliers
from fabmeter.mesh import run as mesh_run
from fabmeter.options import Options
from fabmeter.results import RunRecord, now_iso, out_folder, run_config, write_json

EXPERIMENTS_HELP = {
    "lat": "round-trip ping-pong; reports RTT and one-way = RTT/2",
    "oneway": "one-way latency of bursts (sender and receiver share the clock)",
    "bw": "streaming bandwidth and message rate",
    "stream": "a real-time stream at a fixed rate: latency, missed steps, deadline misses",
    "check": "conformance: sizes up to the transport's maximum, content, order, event-mode wake-up",
    "load": "open-loop request/response: tail latency against offered load (workloads W1-W5, server pools)",
    "setup": "setup costs: connection establishment, memory registration by size (with and without huge pages)",
}
PY_ONLY = {"cpus", "json", "out", "server", "help", "slo", "search"}
EXIT_CODES = ("exit codes: 0 ok, 1 engine missing or crashed, 2 bad input, 3 the run failed, "
              "4 a --slo objective was missed, 130 interrupted (docs/cli.md).")


class _Parser(argparse.ArgumentParser):
    """Bad arguments give one line on stderr and exit 2, not the usage block."""

    def error(self, message):
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        die(f"{sub}{message}", EXIT_USAGE)


def die(message: str, code: int):
    sys.stderr.write(f"fabmeter: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def build_parser(info: Optional[dict], engine_problem: str = "") -> _Parser:
    parser = _Parser(prog="fabmeter", allow_abbrev=False,
                     description="Measure one-way/round-trip latency, bandwidth and real-time streams over real transports.",
                     epilog=(f"note: {engine_problem} " if info is None else
                             "`fabmeter COMMAND --help` lists a command's options. ") + EXIT_CODES)
    parser.add_argument("--version", action="version", version=f"fabmeter {__version__}"
                        + (f" (engine {info.get('version')}; transports: {', '.join(info.get('transports', []))}"
                           + (f"; unavailable: {', '.join(info['transports_unavailable'])}"
                              if info.get("transports_unavailable") else "") + ")" if info else ""))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    experiments = (info or {}).get("experiments") or list(EXPERIMENTS_HELP)
    for exp in experiments:
        desc = EXPERIMENTS_HELP.get(exp, exp)
        full = desc + (f". Engine options are unavailable: {engine_problem}" if info is None else "")
        command = sub.add_parser(exp, help=desc, description=full, allow_abbrev=False)
        if info is not None:
            Options(info).add_arguments(command, exp, skip=PY_ONLY)
        command.add_argument("--cpus", metavar="A,B",
                       help="pin the client to CPU A and the local server to CPU B (default: the first two CPUs; "
                            "none: unpinned); A+A2+...,B+B2+...: with --flows, each end's flows on its CPUs in turn")
        command.add_argument("--json", action="store_true",
                       help="print one JSON object per measured point (JSON Lines for sweeps)")
        command.add_argument("--out", metavar="DIR", help="write DIR/run.json and the raw samples (.npy)")
        command.add_argument("--server", metavar="HOST[:PORT]",
                       help="use a server started elsewhere with `fabmeter serve` (two-host mode)")
        command.add_argument("--token-file", metavar="F",
                       help="with --server: the server's shared secret (default: $FABMETER_TOKEN)")
        if slo.applies(exp):
            command.add_argument("--slo", metavar="OBJECTIVES", help=slo.HELP)
        if exp == "load":
            command.add_argument("--search", metavar="OBJECTIVES", help=search.HELP)

    command = sub.add_parser("mesh", help="oneway, lat, bw, stream or load between every pair of a pattern over "
                                          "N hosts, run once per host",
                             allow_abbrev=False,
                             description="Run once per host (by mpirun, srun or by hand with --rank): rank 0 "
                                         "coordinates, every rank serves its incoming pairs and runs its outgoing "
                                         "ones; rank 0 prints one result per directed pair (docs/cli.md). Or once, "
                                         "anywhere, with --launch serve: every host already runs `fabmeter serve "
                                         "--peers HOSTS`, which runs that host's outgoing pairs.")
    command.add_argument("--hosts", metavar="A,B,...", help="the hosts' addresses, rank 0 first; Slurm's ranges "
                                                         "too (node[01-64],b5); default under Slurm: its node list")
    command.add_argument("--hostfile", metavar="F", help="the hosts, one per line (the first word; # comments)")
    command.add_argument("--rank", metavar="R", type=int,
                         help="this host's rank (default: from mpirun's, PMIx's, PMI's or Slurm's environment)")
    command.add_argument("--experiment", choices=mesh_run.EXPERIMENTS, default="oneway",
                         help="what each pair runs, with that experiment's options (default: %(default)s)")
    command.add_argument("--pattern", choices=mesh_patterns.PATTERNS + mesh_patterns.SPLIT_PATTERNS,
                         default="all-to-all",
                         help="which directed pairs (default: %(default)s); many-to-many: load, every host a client "
                              "of all the others at once, its --rate and --count split among them (--schedule "
                              "chaotic)")
    command.add_argument("--schedule", choices=mesh_patterns.SCHEDULES, default="scheduled",
                         help="scheduled: rounds in which each host has at most one peer; chaotic: all pairs at once; "
                              "slotted: all pairs at once, stream, each message in a time slot of its own at its "
                              "receiver (default: %(default)s)")
    command.add_argument("--slot-us", metavar="US", type=float,
                         help="--schedule slotted: the slot, microseconds (default: 20 x the transport's floor for "
                              "the sample: 50 us, shm 5, verbs and ofi 10, plus its time at 10 Gbit/s)")
    command.add_argument("--mesh-port", metavar="N", type=int, default=mesh_run.DEFAULT_MESH_PORT,
                         help="rank 0's coordination port on the first host (default: %(default)s)")
    command.add_argument("--token-file", metavar="F", help="the mesh's shared secret (default: $FABMETER_TOKEN)")
    command.add_argument("--json", action="store_true", help="print one JSON object per pair, then the mesh summary")
    command.add_argument("--launch", choices=["ssh", "local", "serve"],
                         help="ssh: run here as rank 0 (the first host) and start every other rank over ssh; "
                              "local: run all --ranks here on 127.0.0.1, rank 0 starting the others; "
                              "serve: coordinate from here (any host), every pair run by its source host's "
                              "`fabmeter serve --peers ...` (already running on each host)")
    command.add_argument("--ranks", metavar="N", type=int,
                         help="--launch local: how many ranks (at least 2); the hosts are N x 127.0.0.1")
    command.add_argument("--serve-port", metavar="N", type=int, default=mesh_run.DEFAULT_SERVE_PORT,
                         help="--launch serve: the port every host's serve listens on (default: %(default)s)")
    command.add_argument("--ssh", metavar="CMD", default="ssh",
                         help="--launch ssh: the ssh command, with its options (default: %(default)s; BatchMode and "
                              "a ConnectTimeout of the control timeout are added)")
    command.add_argument("--remote-fabmeter", metavar="CMD", default="fabmeter",
                         help="--launch ssh: how the other hosts' shells run fabmeter (default: %(default)s)")
    command.add_argument("--outlier-mads", metavar="K", type=float, default=mesh_outliers.K_MADS,
                         help="a link is an outlier beyond K scaled MADs of the links' median (default: %(default)s)")
    command.add_argument("--outlier-floor", metavar="PCT", type=float, default=mesh_outliers.MIN_RELATIVE * 100,
                         help="... and also at least PCT %% from that median (default: %(default)g)")
    command.add_argument("--out", metavar="DIR",
                         help="rank 0 writes DIR/mesh.json: every pair, the N x N matrices, per-host figures "
                              "(`fabmeter report DIR` draws them); with --samples raw every rank also writes its "
                              "pairs' samples in DIR/pairs/SRC-DST (on its own host)")
    if info is not None:
        Options(info).add_arguments(command, mesh_run.EXPERIMENTS, skip=PY_ONLY)

    command = sub.add_parser("serve", help="serve sessions for clients on other hosts", allow_abbrev=False,
                       description="Serve sessions for `fabmeter EXP --server HOST`, each in a process of its own. "
                                   "Nothing a client sends names a path on this host; docs/security.md lists what a "
                                   "client can make the server do.")
    command.add_argument("--bind", metavar="ADDR", help="address to listen on")
    command.add_argument("--port", metavar="N", help="port to listen on (0: any free port)")
    command.add_argument("--cpu", metavar="N", help="pin the server to this CPU")
    command.add_argument("--once", action="store_true",
                         help="exit after one session, with its exit code (a connection that never authenticated "
                              "is none; others are answered busy meanwhile)")
    command.add_argument("--data-dir", metavar="DIR",
                   help="server-side outputs (a stream's file sink, sent back to the client) go to one fresh 0700 "
                        "subdirectory per session here (default: a private temporary directory, removed at exit if empty)")
    command.add_argument("--max-memory", metavar="BYTES",
                   help="refuse a session whose plan needs more memory here (K/M/G/T suffixes; default: a quarter of RAM)")
    command.add_argument("--max-duration", metavar="SEC",
                   help="refuse a plan stating a longer run, and end a session running longer (default: 3600; 0: no limit)")
    command.add_argument("--max-sessions", metavar="N",
                   help="sessions at once (1 .. 1024), one process each, taken only by clients that have "
                        "authenticated; more are refused with 'busy' (default: 4)")
    command.add_argument("--token-file", metavar="F",
                   help="admit only clients that know the secret in F (default: $FABMETER_TOKEN)")
    command.add_argument("--peers", metavar="HOST,...",
                   help="the servers (hosts as clients name them) this one may run a client against for an "
                        "authenticated client (`fabmeter mesh --launch serve`); needs a token (default: none)")

    sub.add_parser("transports", allow_abbrev=False,
                   help="every transport: available, or unavailable and why (a plugin's library missing, ...)",
                   description="Lists every transport the engine knows of: available (built in: shm, tcp, udp; "
                               "or a plugin loaded from the engine's plugin directory, $FABMETER_PLUGIN_DIR if set), "
                               "or unavailable with the reason. A run naming an unavailable transport exits 2 "
                               "with that reason.")

    command = sub.add_parser("demo", help="compare every transport and polling mode on this machine",
                       allow_abbrev=False)
    command.add_argument("--out", metavar="DIR", default="results/demo", help="results folder (default: %(default)s)")
    command.add_argument("--cpus", metavar="A,B", help="client and server CPUs (default: the first two CPUs)")

    command = sub.add_parser("bench", help="fabmeter beside the peer tools and the machine's limits, with targets",
                       allow_abbrev=False)
    command.add_argument("--out", metavar="DIR", default="results/bench", help="results folder (default: %(default)s)")
    command.add_argument("--rounds", metavar="K", type=int, default=5, help="rounds, alternating configurations (default: 5)")
    command.add_argument("--cpus", metavar="A,B", help="the two CPUs (default: the first two CPUs)")

    command = sub.add_parser("suite", help="run a TOML suite: experiments x transports x options (docs/suites.md)",
                       allow_abbrev=False)
    command.add_argument("file", metavar="FILE.toml", help="the suite, e.g. suites/quick.toml")
    command.add_argument("--out", metavar="DIR", help="results folder (default: results/<suite name>)")
    command.add_argument("--dry-run", action="store_true", help="check the suite and list its points; run nothing")
    command.add_argument("--cpus", metavar="A,B", help="client and server CPUs for every point (overrides the suite)")
    command.add_argument("--server", metavar="HOST[:PORT]",
                         help="run every point against a server started elsewhere with `fabmeter serve` (overrides "
                              "the suite's `server`; its secret from $FABMETER_TOKEN); --cpus then pins the client only")

    command = sub.add_parser("report", help="one self-contained HTML report of a results folder", allow_abbrev=False)
    command.add_argument("results", metavar="RESULTS_DIR", help="searched recursively for run.json and peers.json")
    command.add_argument("-o", "--output", metavar="FILE", help="the HTML file (default: RESULTS_DIR/report.html)")
    command.add_argument("--compare", metavar="BASE", help="put RESULTS_DIR against the results folder BASE first, "
                                                          "as `fabmeter compare BASE RESULTS_DIR` does")

    from fabmeter.peers import command as peers_command
    peers_command.add_parser(sub)
    from fabmeter import compare
    compare.add_parser(sub)
    from fabmeter.watch import command as watch_command
    watch_command.add_parser(sub, info)
    return parser


def parse_cpus(text: Optional[str], remote: bool = False) -> Optional[tuple]:
    """--cpus A,B -> (A, B); the default is the first two CPUs we may run on; `none`: unpinned (None).
    A side may name several CPUs, A+A2+...: that end's --flows threads take them in turn (kept as the
    engine's --cpu text, "A+A2"; a side of one CPU stays an int)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except OSError:
        allowed = list(range(os.cpu_count() or 1))
    if text == "none":
        return None
    if text is None:
        if remote:
            return (allowed[0],) if allowed else None
        return (allowed[0], allowed[1]) if len(allowed) >= 2 else None
    expected = f"--cpus: expected A,B (client and server CPUs; a side may be A+A2+... for --flows), got '{text}'"
    try:
        sides = [[int(x) for x in side.split("+")] for side in text.split(",")]
    except ValueError:
        die(expected, EXIT_USAGE)
    if len(sides) != 2 and not (remote and len(sides) == 1):
        die(expected, EXIT_USAGE)
    bad = [c for side in sides for c in side if c not in allowed]
    if bad:
        die(f"--cpus: CPU {bad[0]} is not available (allowed: {','.join(map(str, allowed))})", EXIT_USAGE)
    return tuple(side[0] if len(side) == 1 else "+".join(map(str, side)) for side in sides)


class _Progress:
    """'point i/N: size' on stderr for sweeps, only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.total: Optional[int] = None
        self.count = 0

    def start(self, start: dict) -> None:
        self.total = start.get("points")

    def point(self, point: dict) -> None:
        self.count += 1
        if self.enabled:
            of = f"/{self.total}" if self.total else ""
            sys.stderr.write(f"\rpoint {self.count}{of}: {analysis.fmt_size(point.get('size'))}      ")
            sys.stderr.flush()

    def done(self) -> None:
        if self.enabled and self.count:
            sys.stderr.write("\n")


def cmd_experiment(ns: argparse.Namespace, experiment: str, engine: str) -> int:
    if getattr(ns, "search", None) is not None:
        return cmd_search(ns, engine)
    try:
        objectives = slo.parse(ns.slo) if getattr(ns, "slo", None) is not None else None
    except slo.SloError as e:
        die(f"--slo: {e}", EXIT_USAGE)
    given = engine_options(engine).given(ns)
    remote = ns.server is not None
    if ns.token_file is not None and not remote:
        die("--token-file goes with --server (a local run makes its own secret)", EXIT_USAGE)
    cpus = parse_cpus(ns.cpus, remote)
    out = out_folder(ns.out) if ns.out else None
    record = RunRecord(out, run_config(experiment, cpus, ns.server, engine,
                                       slo=slo.canonical(objectives) if objectives else None))
    progress = _Progress(enabled=sys.stderr.isatty() and bool(given.get("all")))

    def on_start(start):
        record.on_start(start)
        progress.start(start)

    def on_point(point):
        record.on_point(point)
        progress.point(point)
        if ns.json:
            print(json.dumps({**point, "slo": slo.evaluate_point(objectives, point)} if objectives else point),
                  flush=True)

    res = run.execute(run.RunSpec(experiment, given, cpus=cpus, server=ns.server, out=out, engine=engine,
                                   token_file=ns.token_file),
                      on_start=on_start, on_point=on_point, on_event=record.on_event)
    progress.done()
    verdict = slo.evaluate(objectives, res.points) if objectives and res.start is not None else None
    code = slo.exit_code(res.exit_code, verdict)
    if not (res.exit_code == EXIT_USAGE and res.start is None):
        record.finish(res.status, res.message, code, slo=verdict)
    if not ns.json and res.points:
        chosen = ((res.start or {}).get("params") or {}).get("percentiles") or ()
        print(analysis.run_report(res.points, chosen, record.doc.get("limits")), flush=True)
    if verdict is not None and not ns.json:
        print(slo.table(verdict, res.points), flush=True)
    if res.exit_code == EXIT_INTERRUPTED:
        where = f"; partial results in {out / 'run.json'}" if out else ""
        sys.stderr.write(f"fabmeter: interrupted{where}\n")
    elif res.exit_code != EXIT_OK:
        where = f" (partial results in {out / 'run.json'})" if out and res.points else ""
        sys.stderr.write(f"fabmeter: error: {res.message}{where}\n")
    elif code == EXIT_SLO:
        sys.stderr.write(f"fabmeter: {slo.summary(verdict)}\n")
    return code


def cmd_search(ns: argparse.Namespace, engine: str) -> int:
    """`load --search`: one engine run per step (search.py), every point into one run.json."""
    try:
        objectives = slo.parse(ns.search)
    except slo.SloError as e:
        die(f"--search: {e}", EXIT_USAGE)
    given = engine_options(engine).given(ns)
    clash = [f"--{k}" for k in ("rate", "load") if given.get(k) is not None] + (["--slo"] if ns.slo else [])
    if clash:
        die(f"--search finds the rate itself: not with {', '.join(clash)}", EXIT_USAGE)
    if ns.token_file is not None and ns.server is None:
        die("--token-file goes with --server (a local run makes its own secret)", EXIT_USAGE)
    cpus = parse_cpus(ns.cpus, ns.server is not None)
    out = out_folder(ns.out) if ns.out else None
    record = RunRecord(out, run_config("load", cpus, ns.server, engine, search=slo.canonical(objectives)))
    failed: list = []

    def on_point(point):
        record.on_point(point)
        if ns.json:
            print(json.dumps({**point, "slo": slo.evaluate_point(objectives, point)}), flush=True)

    def run_point(options: dict) -> Optional[dict]:
        spec = run.RunSpec("load", {**given, **options}, cpus=cpus, server=ns.server, out=out, engine=engine,
                           token_file=ns.token_file)
        res = run.execute(spec, on_start=record.on_start, on_point=on_point, on_event=record.on_event)
        if res.exit_code != EXIT_OK or not res.points:
            failed.append(res)
            return None
        return res.points[-1]

    def say(line: str) -> None:
        (sys.stderr if ns.json else sys.stdout).write(line + "\n")
        (sys.stderr if ns.json else sys.stdout).flush()

    outcome = search.search(objectives, run_point, say)
    record.doc["search"] = outcome
    res = failed[0] if failed else None
    code = res.exit_code if res else (EXIT_OK if outcome["rate_rps"] else EXIT_SLO)
    record.finish(res.status if res else "ok", res.message if res else "", code)
    if ns.json:
        print(json.dumps({"type": "search", **{k: v for k, v in outcome.items() if k != "steps"}}), flush=True)
    found = (f"{analysis.fmt_num(outcome['rate_rps'], 0)} requests/s" if outcome["rate_rps"] else "none")
    say(f"search: the highest offered rate holding {outcome['objectives']}: {found} "
        f"(capacity {analysis.fmt_num(outcome['capacity_rps'], 0)}/s; {len(outcome['steps'])} runs; {outcome['why']})")
    if res:
        sys.stderr.write(f"fabmeter: error: {res.message}\n")
    return code


def cmd_mesh(ns: argparse.Namespace, engine: str) -> int:
    if (ns.launch == "local") != (ns.ranks is not None):
        die("mesh: --launch local and --ranks N go together", EXIT_USAGE)
    if ns.launch == "local":
        if ns.hosts is not None or ns.hostfile is not None:
            die("mesh: --launch local runs every rank on 127.0.0.1: no --hosts or --hostfile", EXIT_USAGE)
        hosts = ["127.0.0.1"] * ns.ranks
    elif ns.hosts is not None and ns.hostfile is not None:
        die("mesh: give the hosts by --hosts A,B,... or --hostfile F", EXIT_USAGE)
    elif ns.hosts is None and ns.hostfile is None:
        hosts = mesh_run.slurm_hosts(dict(os.environ)) if ns.launch is None else None
        if hosts is None:
            die("mesh: give the hosts by --hosts A,B,... or --hostfile F (or run under Slurm)", EXIT_USAGE)
    elif ns.hosts is not None:
        hosts = mesh_run.expand_hosts(ns.hosts, "--hosts")
    else:
        try:
            lines = Path(ns.hostfile).read_text().splitlines()
        except OSError as e:
            die(f"--hostfile {ns.hostfile}: {e.strerror}", EXIT_USAGE)
        hosts = [ln.split("#", 1)[0].split()[0] for ln in lines if ln.split("#", 1)[0].strip()]
    if len(hosts) < 2 or not all(hosts):
        die(f"mesh: needs at least 2 hosts, got {len(hosts)}", EXIT_USAGE)
    if ns.launch == "serve":
        if ns.rank is not None:
            die("mesh: --launch serve has no ranks: it coordinates from here, the hosts' serves run the pairs",
                EXIT_USAGE)
        rank = None
    elif ns.launch:
        if ns.rank not in (None, 0):
            die(f"mesh: --launch {ns.launch} runs rank 0 here (the first host) and starts the other ranks",
                EXIT_USAGE)
        rank = 0
    elif ns.rank is not None:
        rank = ns.rank
    else:
        launched = mesh_run.launcher_rank(dict(os.environ))
        if launched is None:
            die("mesh: no rank: give --rank R, or run under mpirun, srun or a PMI launcher", EXIT_USAGE)
        rank, size, var = launched
        if size is not None and size != len(hosts):
            die(f"mesh: the launcher started {size} ranks (${var}) for {len(hosts)} hosts", EXIT_USAGE)
    if rank is not None and not 0 <= rank < len(hosts):
        die(f"mesh: rank {rank} is not one of 0..{len(hosts) - 1}", EXIT_USAGE)
    if not 0 < ns.serve_port < 65536:
        die(f"mesh: --serve-port {ns.serve_port} is not a port", EXIT_USAGE)
    if ns.pattern in mesh_patterns.SPLIT_PATTERNS and (ns.experiment != "load" or ns.schedule != "chaotic"):
        die(f"mesh: --pattern {ns.pattern} splits load's rate among every other host at once: it needs "
            "--experiment load --schedule chaotic", EXIT_USAGE)
    if not (0 < ns.outlier_mads < 1e6 and 0 <= ns.outlier_floor < 1e6):
        die("mesh: --outlier-mads must be above 0 and --outlier-floor at least 0", EXIT_USAGE)
    table = engine_options(engine)
    given = table.given(ns)
    raw = given.get("samples") == "raw" and ns.launch != "serve"     # every rank keeps its pairs' raw samples
    out = out_folder(ns.out) if ns.out and (rank in (0, None) or raw) else None   # rank 0 writes mesh.json
    if given.get("transport") is None:
        die("mesh: choose a transport with -t", EXIT_USAGE)
    for key in given:
        if not table[key].for_experiment(ns.experiment):
            die(f"--{table[key].name} does not apply to '{ns.experiment}' (only to {table[key].scope})", EXIT_USAGE)
    token = mesh_rendezvous.read_token(ns.token_file, dict(os.environ))
    if not token and not all(mesh_run.is_loopback(h) for h in hosts):
        die("mesh: hosts beyond loopback need a shared token: FABMETER_TOKEN or --token-file", EXIT_USAGE)
    if not token:
        sys.stderr.write("fabmeter: warning: mesh without a token: its channel and engines are not authenticated\n")
        os.environ.pop("FABMETER_TOKEN", None)
    else:
        os.environb[b"FABMETER_TOKEN"] = token   # the engines (server and clients) read it from there
    timeout_ms = given.get("timeout_ms", table["timeout_ms"].default)
    launch = None
    if ns.launch in ("ssh", "local"):
        rank_args = ["--experiment", ns.experiment, "--pattern", ns.pattern, "--schedule", ns.schedule,
                     "--mesh-port", str(ns.mesh_port), *table.engine_argv(given),
                     *(["--slot-us", repr(ns.slot_us)] if ns.slot_us is not None else [])]
        if out and raw:     # the same folder on every host: as typed over ssh, this one's here
            rank_args += ["--out", str(out) if ns.launch == "local" else ns.out]
        # local: this interpreter, this fabmeter and this engine, whatever PATH says.
        here = (f"FABMETER_ENGINE={shlex.quote(engine)} PYTHONPATH={shlex.quote(str(Path(__file__).parent.parent))} "
                f"{shlex.quote(sys.executable)} -m fabmeter")
        launch = (ns.ssh, ns.remote_fabmeter, rank_args) if ns.launch == "ssh" else (None, here, rank_args)
    spec = mesh_run.MeshSpec(hosts, rank, ns.experiment, ns.pattern, ns.schedule, ns.mesh_port, given, token, engine,
                             timeout_ms / 1000.0, launch, ns.serve_port if ns.launch == "serve" else None,
                             (ns.outlier_mads, ns.outlier_floor / 100.0), out=out if raw else None, slot_us=ns.slot_us)
    pairs: list[dict] = []
    started_at = now_iso()

    def emit(obj: dict) -> None:
        if obj["type"] == "pair":
            pairs.append(obj)
        if ns.json:
            print(json.dumps(obj), flush=True)
        elif obj["type"] != "pair":
            print(mesh_output.matrix(obj, pairs), flush=True)
        if obj["type"] == "mesh" and out:     # rank 0, at the end: failed pairs are kept and marked
            path = out / mesh_output.MESH_FILE
            write_json(path, mesh_output.record(obj, pairs, started_at, now_iso(), sys.argv, given,
                                                envinfo.collect()))
            sys.stderr.write(f"fabmeter: results: {path}\n")

    return mesh_run.main(spec, emit, lambda line: sys.stderr.write(f"fabmeter: warning: {line}\n"))


def cmd_transports(info: dict) -> int:
    """One line a transport, as `fabmeter-engine transports` says it."""
    unavailable = info.get("transports_unavailable") or {}
    plugins = info.get("plugin_dir", "")
    for name in [*info.get("transports", []), *unavailable]:
        print(f"{name}: unavailable: {unavailable[name]}" if name in unavailable else f"{name}: available")
    if plugins:
        print(f"(plugin directory: {plugins})")
    return EXIT_OK


def cmd_serve(ns: argparse.Namespace) -> int:
    args = []
    for name in ("bind", "port", "cpu", "data_dir", "max_memory", "max_duration", "max_sessions", "token_file", "peers"):
        value = getattr(ns, name)
        if value is not None:
            args += [f"--{name.replace('_', '-')}", str(value)]
    if ns.once:
        args.append("--once")
    run.exec_server(args)  # does not return
    return EXIT_INTERNAL


def main(argv: Optional[list[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    info, engine, problem = None, None, ""
    try:
        engine = find_engine()
        info = engine_info(engine)
    except FabmeterError as e:
        problem = e.message

    parser = build_parser(info, problem)
    ns, extras = parser.parse_known_args(argv)
    if ns.command in EXPERIMENTS_HELP and info is None:
        die(problem, EXIT_INTERNAL)
    if extras:
        # Say why an engine option is refused here rather than just "unrecognized".
        for word in extras:
            if word.split("=", 1)[0] == "--slo" and not slo.applies(ns.command):
                die(slo.refusal(ns.command), EXIT_USAGE)
            opt = Options(info).find(word) if info and word.startswith("-") else None
            if opt is not None:
                die(f"{word.split('=', 1)[0]} does not apply to '{ns.command}' (only to {opt.scope})", EXIT_USAGE)
        die(f"unrecognized arguments: {' '.join(extras)}", EXIT_USAGE)

    try:
        if ns.command in EXPERIMENTS_HELP or (info and ns.command in info.get("experiments", [])):
            code = cmd_experiment(ns, ns.command, engine)
        elif ns.command == "mesh":
            if info is None:
                die(problem, EXIT_INTERNAL)
            code = cmd_mesh(ns, engine)
        elif ns.command == "serve":
            code = cmd_serve(ns)
        elif ns.command == "transports":
            if info is None:
                die(problem, EXIT_INTERNAL)
            code = cmd_transports(info)
        elif ns.command == "demo":
            from fabmeter import demo
            code = demo.main(out_folder(ns.out), parse_cpus(ns.cpus))
        elif ns.command == "bench":
            from fabmeter import bench
            if ns.rounds < 1:
                die("--rounds must be at least 1", EXIT_USAGE)
            code = bench.main(out_folder(ns.out), ns.rounds, parse_cpus(ns.cpus))
        elif ns.command == "suite":
            from fabmeter.suite import runner
            if info is None:
                die(problem, EXIT_INTERNAL)
            code = runner.main(Path(ns.file), Path(ns.out) if ns.out else None, ns.dry_run, engine,
                               parse_cpus(ns.cpus, remote=bool(ns.server)) if ns.cpus else None, parse_cpus(None),
                               server=ns.server)
        elif ns.command == "report":
            try:
                from fabmeter.report import html as report_html
            except ModuleNotFoundError as e:
                if e.name != "matplotlib":
                    raise
                die("fabmeter report draws with matplotlib, which is not installed: "
                    "pip install 'fabmeter[report]'", EXIT_INTERNAL)
            output = out_folder(Path(ns.output).parent, "-o") / Path(ns.output).name if ns.output else None
            code = report_html.main(Path(ns.results), output, Path(ns.compare) if ns.compare else None)
        elif ns.command == "peers":
            from fabmeter.peers import command as peers_command
            code = peers_command.main(ns, parse_cpus(ns.cpus), engine, problem)
        elif ns.command == "compare":
            from fabmeter import compare
            code = compare.main(ns)
        elif ns.command == "watch":
            from fabmeter.watch import command as watch_command
            if info is None:
                die(problem, EXIT_INTERNAL)
            code = watch_command.main(ns, engine, engine_options(engine))
        else:
            parser.error(f"unknown command {ns.command}")
    except FabmeterError as e:
        if e.exit_code == EXIT_INTERRUPTED:
            sys.stderr.write("fabmeter: interrupted\n")
            code = e.exit_code
        else:
            die(e.message, e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("fabmeter: interrupted\n")
        code = EXIT_INTERRUPTED
    sys.exit(code)


if __name__ == "__main__":
    main()
