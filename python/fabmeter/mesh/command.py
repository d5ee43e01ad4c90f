"""`fabmeter mesh`: its options, their checks, and one rank's (or the coordinator's) run with its output.

cli.py runs it for `fabmeter mesh`; suite/runner.py calls it for each mesh point in the suite's own
process, so it leaves the environment as it found it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Iterator, Optional

from fabmeter import command_options, envinfo
from fabmeter.command_options import CommandOption, Found
from fabmeter.engine import engine_options
from fabmeter.errors import EXIT_USAGE, FabmeterError
from fabmeter.mesh import outliers, output, patterns, rendezvous, slotted, tool_mpi, tool_pair
from fabmeter.mesh import run as mesh_run
from fabmeter.peers.registry import PEERS
from fabmeter.options import PY_ONLY, Options
from fabmeter.results import now_iso, out_folder, write_json
from fabmeter.terminal import shown_lines


# Shared with `fabmeter watch`, which runs its pairs as `--launch serve` does.
EXPERIMENT = CommandOption("experiment", "what each pair runs, with that experiment's options (default: %(default)s)",
                           default="oneway", choices=mesh_run.EXPERIMENTS)
SCHEDULE = CommandOption("schedule", "scheduled: rounds in which each host has at most one partner; chaotic: all pairs "
                                     "at once (default: %(default)s)",
                         default="scheduled", choices=patterns.ROUND_SCHEDULES)
HOSTFILE = CommandOption("hostfile", "the hosts, one per line (the first word; # comments)", metavar="F")
SERVE_PORT = CommandOption("serve-port", "the port every host's serve listens on (default: %(default)s)", metavar="N",
                           type=int, default=mesh_run.DEFAULT_SERVE_PORT)


def read_hostfile(path: str) -> list[str]:
    """--hostfile's hosts: each line's first word (so Open MPI's `HOST slots=N` lines do), # comments."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise FabmeterError(f"--hostfile {path}: {e.strerror}", EXIT_USAGE) from None
    return [ln.split("#", 1)[0].split()[0] for ln in lines if ln.split("#", 1)[0].strip()]


OPTIONS = (
    CommandOption("hosts", "the hosts' addresses, rank 0 first; Slurm's ranges too (node[01-64],b5); default under "
                           "Slurm: its node list", metavar="A,B,..."),
    HOSTFILE,
    CommandOption("rank", "this host's rank (default: from mpirun's, PMIx's, PMI's or Slurm's environment)",
                  metavar="R", type=int),
    EXPERIMENT,
    CommandOption("tool", "every pair runs this established tool's case for --experiment (lat, bw or load) and -t "
                          "instead of fabmeter's engines, as `fabmeter peers` runs it, with --size, --iters, "
                          "--duration and --rate: the client on the source rank, the server side started by the "
                          "destination rank's serve from its allow-list (needs a token; not with --launch serve); "
                          "fabmeter-mpibench: the MPI program under one mpirun over the hosts, a rank each (--launch "
                          "local or ssh; lat: its ping-pong of hosts 0 and 1 and its allreduce over all; bw)",
                  choices=tuple(PEERS)),
    CommandOption("pattern", "which directed pairs (default: %(default)s); many-to-many: load, every host a client of "
                             "all the others at once, its --rate and --count split among them (--schedule chaotic)",
                  default="all-to-all", choices=patterns.PATTERNS + patterns.SPLIT_PATTERNS),
    CommandOption("schedule", "scheduled: rounds in which each host has at most one partner; chaotic: all pairs at "
                              "once; slotted: all pairs at once, stream or bw, each message in a time slot of its own "
                              "at its receiver (default: %(default)s)",
                  default="scheduled", choices=patterns.SCHEDULES),
    CommandOption("slot-us", "--schedule slotted: the slot, microseconds (default: the message's time at "
                             "--link-gbps plus a guard of 20 x the transport's one-way floor: 50 us, shm 5, verbs "
                             "and ofi 10)",
                  metavar="US", type=float),
    CommandOption("link-gbps", "--schedule slotted: the links' rate, Gbit/s, that sizes the default slot and the "
                               "shortest one (default: %(default)g)", metavar="G", type=float,
                  default=slotted.LINK_GBPS),
    CommandOption("mesh-port", "rank 0's coordination port on the first host (default: %(default)s)", metavar="N",
                  type=int, default=mesh_run.DEFAULT_MESH_PORT),
    CommandOption("token-file", "the mesh's shared secret (default: $FABMETER_TOKEN)", metavar="F"),
    CommandOption("json", "print one JSON object per pair, then the mesh summary", flag=True),
    CommandOption("launch", "ssh: run here as rank 0 (the first host) and start every other rank over ssh; local: run "
                            "all --ranks here on 127.0.0.1, rank 0 starting the others; serve: coordinate from here "
                            "(any host), every pair run by its source host's `fabmeter serve --relay-to ...` (already "
                            "running on each host)",
                  choices=("ssh", "local", "serve")),
    CommandOption("ranks", "--launch local: how many ranks (at least 2); the hosts are N x 127.0.0.1", metavar="N",
                  type=int),
    dataclasses.replace(SERVE_PORT, help="--launch serve: " + SERVE_PORT.help),
    CommandOption("ssh", "--launch ssh: the ssh command, with its options (default: %(default)s; BatchMode and a "
                         "ConnectTimeout of the control timeout are added)", metavar="CMD", default="ssh"),
    CommandOption("remote-fabmeter", "--launch ssh: how the other hosts' shells run fabmeter (default: %(default)s)",
                  metavar="CMD", default="fabmeter"),
    CommandOption("outlier-mads", "a link is an outlier beyond K scaled MADs (median absolute deviations) of the "
                                  "links' median (default: %(default)s)", metavar="K", type=float,
                  default=outliers.K_MADS),
    CommandOption("outlier-floor", "... and also at least PCT %% from that median (default: %(default)g)",
                  metavar="PCT", type=float, default=outliers.MIN_RELATIVE * 100),
    CommandOption("out", "rank 0 writes DIR/mesh.json: every pair, the N x N matrices, per-host figures (`fabmeter "
                         "report DIR` draws them); with --samples raw every rank also writes its pairs' samples in "
                         "DIR/pairs/SRC-DST (on its own host; --launch serve: all here)", metavar="DIR"),
)


def add_parser(sub, info: Optional[dict]) -> None:
    command = sub.add_parser("mesh", help="oneway, lat, bw, stream or load between every pair of a pattern over "
                                          "N hosts, run once per host",
                             allow_abbrev=False,
                             description="Run once per host (by mpirun, srun or by hand with --rank): rank 0 "
                                         "coordinates, every rank serves its incoming pairs and runs its outgoing "
                                         "ones; rank 0 prints one result per directed pair (docs/cli.md). Or once, "
                                         "anywhere, with --launch serve: every host already runs `fabmeter serve "
                                         "--relay-to HOSTS`, which runs that host's outgoing pairs.")
    command_options.add_arguments(command, OPTIONS)
    if info is not None:
        Options(info).add_arguments(command, mesh_run.EXPERIMENTS, skip=PY_ONLY)


class _Refusing(argparse.ArgumentParser):
    def error(self, message):
        raise FabmeterError(f"mesh: {message}", EXIT_USAGE)


def parse(args: list[str], info: dict) -> argparse.Namespace:
    """`fabmeter mesh ARGS` as the command line reads them; a bad argument raises (exit 2)."""
    parser = _Refusing(prog="fabmeter", allow_abbrev=False)
    add_parser(parser.add_subparsers(dest="command"), info)
    return parser.parse_args(["mesh", *args])


def pair_options(ns: argparse.Namespace, table: Options, command: str) -> dict:
    """The engine options given for the pairs (mesh's and watch's), typed; a transport must be among them,
    and each must apply to --experiment (else exit 2)."""
    given = table.given(ns)
    if given.get("transport") is None:
        raise FabmeterError(f"{command}: choose a transport with -t", EXIT_USAGE)
    for key in given:
        if not table[key].for_experiment(ns.experiment):
            raise FabmeterError(f"--{table[key].name} does not apply to '{ns.experiment}' (only to "
                                f"{table[key].scope})", EXIT_USAGE)
    return given


@contextlib.contextmanager
def _token_in_environment(token: bytes) -> Iterator[None]:
    """The engines this process starts (its server, the pairs' clients) read the token from FABMETER_TOKEN;
    as it was afterwards (a suite goes on with its other points)."""
    before = os.environb.get(b"FABMETER_TOKEN")
    if token:
        os.environb[b"FABMETER_TOKEN"] = token
    else:
        os.environb.pop(b"FABMETER_TOKEN", None)
    try:
        yield
    finally:
        if before is None:
            os.environb.pop(b"FABMETER_TOKEN", None)
        else:
            os.environb[b"FABMETER_TOKEN"] = before


def _hosts(ns: argparse.Namespace) -> list[str]:
    if ns.launch == "local":
        if ns.hosts is not None or ns.hostfile is not None:
            raise FabmeterError("mesh: --launch local runs every rank on 127.0.0.1: no --hosts or --hostfile",
                                EXIT_USAGE)
        hosts = ["127.0.0.1"] * ns.ranks
    elif ns.hosts is not None and ns.hostfile is not None:
        raise FabmeterError("mesh: give the hosts by --hosts A,B,... or --hostfile F", EXIT_USAGE)
    elif ns.hosts is None and ns.hostfile is None:
        # Slurm's node list: ranks it started, or mpirun's over them (mpirun runs here, in the allocation)
        hosts = mesh_run.slurm_hosts(dict(os.environ)) if ns.launch is None or ns.tool == tool_mpi.TOOL else None
        if hosts is None:
            raise FabmeterError("mesh: give the hosts by --hosts A,B,... or --hostfile F (or run under Slurm)",
                                EXIT_USAGE)
    elif ns.hosts is not None:
        hosts = mesh_run.expand_hosts(ns.hosts, "--hosts")
    else:
        hosts = read_hostfile(ns.hostfile)
    if len(hosts) < 2 or not all(hosts):
        raise FabmeterError(f"mesh: needs at least 2 hosts, got {len(hosts)}", EXIT_USAGE)
    return hosts


def _rank(ns: argparse.Namespace, hosts: list[str]) -> Optional[int]:
    """This process's rank: --rank, 0 when it launches the others, the launcher's; None with --launch serve."""
    if ns.launch == "serve":
        if ns.rank is not None:
            raise FabmeterError("mesh: --launch serve has no ranks: it coordinates from here, the hosts' serves "
                                "run the pairs", EXIT_USAGE)
        return None
    if ns.launch:
        if ns.rank not in (None, 0):
            raise FabmeterError(f"mesh: --launch {ns.launch} runs rank 0 here (the first host) and starts the "
                                "other ranks", EXIT_USAGE)
        return 0
    rank = ns.rank
    if rank is None:
        launched = mesh_run.launcher_rank(dict(os.environ))
        if launched is None:
            raise FabmeterError("mesh: no rank: give --rank R, or run under mpirun, srun or a PMI launcher",
                                EXIT_USAGE)
        rank, size, var = launched
        if size is not None and size != len(hosts):
            raise FabmeterError(f"mesh: the launcher started {size} ranks (${var}) for {len(hosts)} hosts",
                                EXIT_USAGE)
    if not 0 <= rank < len(hosts):
        raise FabmeterError(f"mesh: rank {rank} is not one of 0..{len(hosts) - 1}", EXIT_USAGE)
    return rank


def _check_tool(ns: argparse.Namespace, given: dict, hosts: list[str]) -> None:
    """--tool: a case the tool has, knobs it takes, and a server side a rank's serve can start; else exit 2."""
    if ns.schedule == "slotted" or ns.pattern in patterns.SPLIT_PATTERNS:
        raise FabmeterError(f"mesh: --tool does not run --schedule slotted or --pattern {patterns.SPLIT_PATTERNS[0]} "
                            "(fabmeter's own stream and load do)", EXIT_USAGE)
    if ns.tool == tool_mpi.TOOL:
        tool_mpi.check(ns.launch, ns.experiment, given)
        return
    if ns.launch == "serve":
        raise FabmeterError("mesh: --tool runs the tool's client on the source host: run ranks (--rank, mpirun, "
                            "--launch ssh|local), not --launch serve", EXIT_USAGE)
    if not rendezvous.read_token(ns.token_file, dict(os.environ)):
        raise FabmeterError("mesh: --tool needs a token (FABMETER_TOKEN or --token-file): a serve starts tools only "
                            "for authenticated clients", EXIT_USAGE)
    tool_pair.case_of(ns.tool, ns.experiment, given)


def main(ns: argparse.Namespace, found: Found, command: Optional[list[str]] = None, quiet: bool = False) -> int:
    """Runs the mesh `ns` describes; the exit code (bad arguments raise, exit 2). `command`: the command line
    mesh.json records (default: this process's); `quiet`: print nothing (a suite's point: mesh.json is its
    result)."""
    engine = found.engine
    if (ns.launch == "local") != (ns.ranks is not None):
        raise FabmeterError("mesh: --launch local and --ranks N go together", EXIT_USAGE)
    hosts = _hosts(ns)
    rank = _rank(ns, hosts)
    if not 0 < ns.serve_port < 65536:
        raise FabmeterError(f"mesh: --serve-port {ns.serve_port} is not a port", EXIT_USAGE)
    if ns.pattern in patterns.SPLIT_PATTERNS and (ns.experiment != "load" or ns.schedule != "chaotic"):
        raise FabmeterError(f"mesh: --pattern {ns.pattern} splits load's rate among every other host at once: it "
                            "needs --experiment load --schedule chaotic", EXIT_USAGE)
    if not (0 < ns.outlier_mads < 1e6 and 0 <= ns.outlier_floor < 1e6):
        raise FabmeterError("mesh: --outlier-mads must be above 0 and --outlier-floor at least 0", EXIT_USAGE)
    table = engine_options(engine)
    given = pair_options(ns, table, "mesh")
    if ns.tool is not None:
        _check_tool(ns, given, hosts)
    raw = given.get("samples") == "raw"     # every rank keeps its pairs' raw samples (--launch serve: all come here)
    out = out_folder(ns.out) if ns.out and (rank in (0, None) or raw) else None   # rank 0 writes mesh.json
    token = rendezvous.read_token(ns.token_file, dict(os.environ))
    collective = ns.tool == tool_mpi.TOOL   # mpirun's own channels and processes: no channel or engine of ours
    if not token and not collective and not all(mesh_run.is_loopback(h) for h in hosts):
        raise FabmeterError("mesh: hosts beyond loopback need a shared token: FABMETER_TOKEN or --token-file",
                            EXIT_USAGE)
    say = (lambda line: None) if quiet else (lambda line: sys.stderr.write(f"fabmeter: {shown_lines(line)}\n"))
    if not token and not collective:
        say("warning: mesh without a token: its channel and engines are not authenticated")
    timeout_ms = given.get("timeout_ms", table["timeout_ms"].default)
    launch = None
    if ns.launch in ("ssh", "local"):
        rank_args = ["--experiment", ns.experiment, *(["--tool", ns.tool] if ns.tool else []),
                     "--pattern", ns.pattern, "--schedule", ns.schedule,
                     "--mesh-port", str(ns.mesh_port), *table.engine_argv(given),
                     *(["--slot-us", repr(ns.slot_us)] if ns.slot_us is not None else []),
                     *(["--link-gbps", repr(ns.link_gbps)] if ns.schedule == "slotted" else [])]
        if out and raw:     # the same folder on every host: as typed over ssh, this one's here
            rank_args += ["--out", str(out) if ns.launch == "local" else ns.out]
        # local: this interpreter, this fabmeter and this engine, whatever PATH says.
        here = (f"FABMETER_ENGINE={shlex.quote(engine)} "
                f"PYTHONPATH={shlex.quote(str(Path(__file__).resolve().parents[2]))} "
                f"{shlex.quote(sys.executable)} -m fabmeter")
        launch = (ns.ssh, ns.remote_fabmeter, rank_args) if ns.launch == "ssh" else (None, here, rank_args)
    spec = mesh_run.MeshSpec(hosts, rank, ns.experiment, ns.pattern, ns.schedule, ns.mesh_port, given, token,
                             engine, timeout_ms / 1000.0, launch, ns.serve_port if ns.launch == "serve" else None,
                             (ns.outlier_mads, ns.outlier_floor / 100.0), out=out if raw else None,
                             slot_us=ns.slot_us, link_gbps=ns.link_gbps, tool=ns.tool)
    pairs: list[dict] = []
    started_at = now_iso()

    def emit(obj: dict) -> None:
        if obj["type"] == "pair":
            pairs.append(obj)
        if ns.json and not quiet:
            print(json.dumps(obj), flush=True)
        elif obj["type"] != "pair" and not quiet:
            print(shown_lines(output.matrix(obj, pairs)), flush=True)
        if obj["type"] != "mesh":
            return
        results = ""
        if out:     # rank 0, at the end: failed and interrupted pairs are kept and marked
            path = out / output.MESH_FILE
            write_json(path, output.record(obj, pairs, started_at, now_iso(),
                                           sys.argv if command is None else command, given, envinfo.collect()))
            results = f"results: {path}"
        if obj["interrupted"]:      # the one line of an interrupted mesh (exit 130)
            say(f"interrupted: {obj['pairs'] - obj['interrupted']} of {obj['pairs']} pairs ended, the others "
                f"marked interrupted{'; ' + results if results else ''}")
        elif results:
            say(results)

    if collective:
        return tool_mpi.main(hosts, ns.experiment, ns.pattern, ns.schedule, given,
                             ns.ssh if ns.launch == "ssh" else None, emit)
    with _token_in_environment(token):
        return mesh_run.main(spec, emit, lambda line: say(f"warning: {line}"))
