"""One rank of `fabmeter mesh`: an engine server for the incoming pairs,
engine clients for the outgoing ones, and the coordination channel.

Rank 0 listens on HOSTS[0]:--mesh-port; every other rank connects to it and
joins with its engine server's port (each engine server binds port 0, so
ranks that share an address, as under mpirun on one machine, never
collide; only rank 0's coordination port is fixed). Rank 0 then estimates
each rank's CLOCK_MONOTONIC offset over the channel (lowest-delay ping of
a few), and starts every round by sending each rank its pairs and a start
time ahead on that rank's own clock (Lead); the rank's engine
clients connect at once and wait for that instant (--start-at), so the
round starts together however late the frames arrive and however long an
engine takes to connect. Every pair's result comes back to rank 0, which
prints it.

With --launch serve there are no ranks: every host already runs `fabmeter
serve --relay-to HOSTS`, and this process, anywhere, runs each pair as
`fabmeter-engine run ... --server DST --via SRC`: SRC's serve runs the client
and relays its output here (engine/src/session/relay.hpp). The relay puts
the round's start time on SRC's clock and says by how much it differs from
ours, so the rounds start together and their skew is measured as in rank mode.
"""

from __future__ import annotations

import collections
import ipaddress
import itertools
import queue
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

from fabmeter import envinfo, procs, run
from fabmeter.engine import engine_options
from fabmeter.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, FabmeterError
from fabmeter.mesh import cluster, lateness, launch, outliers, output, patterns, rendezvous, series, slotted, tool_pair
from fabmeter.mesh.rendezvous import Channel, ChannelError

DEFAULT_SERVE_PORT = 18515      # the engine's default_port (perftest's); tests/test_options.py holds them equal
DEFAULT_MESH_PORT = DEFAULT_SERVE_PORT + 1
EXPERIMENTS = ("oneway", "lat", "bw", "stream", "load")
CLOCK_PINGS = 8                  # per rank; the lowest-delay one sets the offset
ROUND_LEAD_S = 1.0               # the first round's start time is sent this far ahead, and more (first_lead_s): an
MIN_LEAD_S = 0.2                 # engine client takes ~0.3 s to connect; the next rounds' lead is what they took
MAX_LEAD_S = 30.0                # (Lead), never less than this, nor more than this
LEAD_PER_ENGINE_S = 0.1          # the first round's lead grows by this for each engine client one machine starts for it
LEAD_WINDOW = 4                  # rounds whose slowest engine sets the lead
HEARTBEAT_S = 1.0                # a rank says it is alive this often; silent for the control timeout more: lost
MAX_MESSAGE = 300                # characters of a pair's error message kept
SSH_CHECK_S = 0.5                # --launch ssh: how often a rank's ssh is checked while waiting for joins


@dataclass
class MeshSpec:
    hosts: list[str]
    rank: int
    experiment: str              # one of EXPERIMENTS
    pattern: str
    schedule: str
    mesh_port: int               # rank 0's coordination port
    options: dict                # engine options of the experiment (options.py)
    token: bytes
    engine: str
    timeout_s: float             # rendezvous and control timeout (the engine's --timeout-ms)
    launch: Optional[tuple[Optional[str], str, list]] = None  # --launch: (ssh command, None for local; how the
                                                              # rank's host runs fabmeter; every rank's args but
                                                              # --hosts and --rank)
    serve_port: Optional[int] = None             # --launch serve: the port of every host's serve (no ranks)
    outlier_rule: tuple[float, float] = (outliers.K_MADS, outliers.MIN_RELATIVE)  # rank 0: K MADs, relative floor
    out: Optional[Path] = None   # --out with --samples raw: this rank's engine clients write there (samples_dir)
    slot_us: Optional[float] = None              # --schedule slotted: --slot-us (None: slotted.plan's default)
    link_gbps: Optional[float] = None            # --schedule slotted: --link-gbps (None: slotted.LINK_GBPS)
    slots: Optional[slotted.Plan] = None         # --schedule slotted: the plan every rank computes alike (main)
    tool: Optional[str] = None                   # --tool: the peer tool each pair runs (tool_pair.py)
    # Test hooks (tests/test_mesh_scale.py: many ranks, no engines): what runs a pair, this rank's identity fields,
    # the first round's lead, and how many rounds (None: all).
    run_pair: Optional[Callable[..., dict]] = None
    identity: Optional[Callable[[], Optional[dict]]] = None
    lead_s: Optional[float] = None                # None: first_lead_s
    max_rounds: Optional[int] = None
    pool: Optional[series.Pool] = None           # the engine clients that run this rank's pairs one after another


@dataclass
class Rank:
    rank: int
    channel: Channel
    engine_port: int
    offset_ns: int = 0           # its CLOCK_MONOTONIC minus rank 0's
    offset_error_ns: int = 0     # half the round trip of the ping that set it
    alive: bool = True
    last_heard: float = 0.0      # time.monotonic() of its last frame
    env: Optional[dict] = None   # its identity fields as it sent them (envinfo.identity), None if it sent none


def launcher_rank(environ: dict) -> Optional[tuple[int, Optional[int], str]]:
    """(rank, size or None, variable) from mpirun's, PMIx's, a PMI launcher's or Slurm's environment
    (cluster.RANK_ENV)."""
    try:
        return cluster.launcher_rank(environ)
    except ValueError as e:
        raise FabmeterError(str(e), EXIT_USAGE) from None


def expand_hosts(text: str, what: str) -> list[str]:
    """--hosts (or a Slurm node list) as hosts: A,B,... and Slurm's ranges (cluster.expand_hostlist)."""
    try:
        return cluster.expand_hostlist(text)
    except cluster.HostListError as e:
        raise FabmeterError(f"mesh: {what}: {e}", EXIT_USAGE) from None


def slurm_hosts(environ: dict) -> Optional[list[str]]:
    """The hosts of Slurm's node list (the step's, else the job's), None outside Slurm."""
    var = next((v for v in cluster.NODELIST_ENV if environ.get(v)), None)
    return expand_hosts(environ[var], f"${var}") if var else None


def host_port(host: str, port: int) -> str:
    """HOST:PORT as the engine's --server takes it ([v6]:PORT)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(spec: MeshSpec, emit: Callable[[dict], None], warn: Callable[[str], None]) -> int:
    """Runs this rank to the end; rank 0 emits the pair objects and the summary. The exit code."""
    # SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt in whatever wait the main thread is in (the rank's
    # engine server gets the signal too): rank 0 then ends the mesh and keeps what it measured
    # (_interrupted); the engine clients, in their own process groups, get SIGTERM from the finally below or
    # from the kernel as we exit (PR_SET_PDEATHSIG).
    with procs.SignalForwarder(interrupt=True) as fwd:
        if spec.schedule == "slotted":
            spec.slots = slotted.plan(len(spec.hosts), spec.experiment, spec.options, spec.slot_us, spec.link_gbps)
        if spec.run_pair is None and spec.experiment != "load":   # load: each pair its own --seed (pair_options)
            spec.pool = series.Pool(spec.engine, slotted.engine_experiment(spec.slots, spec.experiment),
                                    pair_options(spec, spec.rank or 0, 0))
            if spec.serve_port is None and spec.out is None and not spec.tool:   # pairs that run on the pool
                first = next(patterns.iter_rounds(spec.pattern, spec.schedule, len(spec.hosts)), [])
                spec.pool.start(None, sum(src == spec.rank for src, _ in first))
        try:
            return _rank_or_coordinator(spec, emit, warn, fwd)
        finally:
            if spec.pool is not None:
                spec.pool.close(0 if fwd.interrupted else spec.timeout_s)


def _rank_or_coordinator(spec: MeshSpec, emit: Callable[[dict], None], warn: Callable[[str], None],
                         fwd: procs.SignalForwarder) -> int:
    if spec.serve_port is not None:
        return _coordinate_serves(spec, emit)
    server = run.LocalServer(spec.engine, None, fwd, bind=spec.hosts[spec.rank], max_sessions=len(spec.hosts))
    server.start_draining()
    launched = None
    finished = False
    try:
        if spec.rank == 0:
            if spec.launch:
                ssh, remote, args = spec.launch
                launched = launch.start(spec.hosts,
                                        lambda r: ["--hosts", ",".join(spec.hosts), "--rank", str(r), *args],
                                        ssh, remote, spec.token, spec.timeout_s)
            code = _coordinate(spec, server.port, emit, warn, launched)
            finished = True
            return code
        return _follow(spec, server.port)
    finally:
        if launched:        # after "done" each rank ends by itself; else now
            launched.stop(spec.timeout_s if finished else 0)
        server.stop()


def first_lead_s(pairs: list, hostnames: list[Optional[str]]) -> float:
    """The first round's lead, before anything is measured: ROUND_LEAD_S (one engine client's connect) and
    LEAD_PER_ENGINE_S for each engine client (one a pair, on its source) that the busiest machine starts at once for
    `pairs`, at most MAX_LEAD_S. Sessions opened together on shared CPUs get ready one after another (12 on 2 CPUs
    at a load of 16, their engines started ahead: up to 1.0 s after the plan went). Hosts of one hostname
    (`hostnames`, by rank: network namespaces of one machine) are one machine, and so are those whose hostname is
    unknown."""
    engines = collections.Counter(hostnames[src] for src, _ in pairs)
    return min(MAX_LEAD_S, ROUND_LEAD_S + LEAD_PER_ENGINE_S * max(engines.values(), default=0))


def _rounds(spec: MeshSpec) -> Iterator[list]:
    """The pattern's rounds; slotted: its one round as many times as the plan has rounds."""
    rounds = patterns.iter_rounds(spec.pattern, spec.schedule, len(spec.hosts))
    if spec.slots is None:
        return rounds
    return itertools.chain.from_iterable(itertools.repeat(list(rounds), spec.slots.rounds))


def _first_round_lead(spec: MeshSpec, rounds: Iterator[list], hostnames: list[Optional[str]]
                      ) -> tuple["Lead", Iterator[list]]:
    """The Lead for `rounds` (spec.lead_s if set, else first_lead_s of the first round), and the rounds again."""
    first = next(rounds, [])
    lead = Lead(spec.lead_s if spec.lead_s is not None else first_lead_s(first, hostnames))
    return lead, itertools.chain([first], rounds)


class Lead:
    """How far ahead of its instant a round's plan is sent: twice what the slowest engine of the last LEAD_WINDOW
    rounds took from the plan's sending to ready (start_ready_ns: connected, first clock probes done, waiting for
    the instant), at least MIN_LEAD_S (or the first round's lead if that is less), at most MAX_LEAD_S. The first
    round takes the initial lead, as nothing is measured yet. Short, it keeps a mesh's rounds from waiting idle (at
    64 hosts, 127 of them); a round in which an engine was barely or not ready raises it for the next at once."""

    def __init__(self, initial_s: float = ROUND_LEAD_S):
        self.ns = int(initial_s * 1e9)
        self._least = int(min(initial_s, MIN_LEAD_S) * 1e9)
        self._needed: collections.deque = collections.deque(maxlen=LEAD_WINDOW)

    def after(self, ready_ns: list[int]) -> None:
        """`ready_ns`: how long before the instant each of the round's engines was ready (negative: after it)."""
        if not ready_ns:
            return
        self._needed.append(self.ns - min(ready_ns))
        self.ns = min(int(MAX_LEAD_S * 1e9), max(self._least, 2 * max(self._needed)))


# --- every rank -------------------------------------------------------------

def _run_pair(spec: MeshSpec, src: int, dst: int, server: str, start_ns: int, via: Optional[str] = None,
              envs: Optional[dict] = None) -> dict:
    """One experiment run from `src` to `dst`, its measured part started at `start_ns` on our clock (the engine
    connects first, then waits for that instant: --start-at; slotted: that instant plus the pair's slot offset),
    here or relayed by `via`: its result body. `envs`: where the identity fields of the two ends' engines (their
    start line) are kept, by rank. Slotted, started_ns is less the offset: the round's instant as this pair met it."""
    if spec.tool:
        pair = tool_pair.run(spec.tool, spec.experiment, spec.options, src, dst, server, spec.engine)
        pair["message"] = pair["message"][:MAX_MESSAGE]
        return pair
    slot_offset = spec.slots.offset_ns(src, dst) if spec.slots else 0
    start_ns += slot_offset
    opened: list[int] = []      # when the engine's start line came: its session open, the plan accepted
    samples = output.samples_dir(src, dst) if spec.out is not None else None   # relayed: the relay sends them here
    folder = None if samples is None else spec.out / samples
    try:
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return output.failed_pair(src, dst, f"{folder}: {e.strerror or e}")
    engine_run = 1                  # which run of its engine client this pair was (1: a fresh one)
    try:
        if spec.pool is not None and folder is None:
            res, engine_run = spec.pool.run(server, start_ns, via, lambda _: opened.append(time.monotonic_ns()))
        else:
            res = run.execute(run.RunSpec(slotted.engine_experiment(spec.slots, spec.experiment),
                                          pair_options(spec, src, dst), server=server, engine=spec.engine,
                                          start_at_ns=start_ns, via=via, out=folder),
                              on_start=lambda _: opened.append(time.monotonic_ns()))
    except FabmeterError as e:      # the coordinator must hear of every pair, whatever happened
        return output.failed_pair(src, dst, e.message)
    if envs is not None and res.start:
        for rank, key in ((src, "env"), (dst, "server_env")):
            if isinstance(res.start.get(key), dict):
                envs.setdefault(rank, envinfo.identity_from_engine(res.start[key]))
    point = res.points[0] if res.points else {}
    started, late, ready = point.get("started_mono_ns"), point.get("start_late_ns"), point.get("ready_mono_ns")
    started = started if isinstance(started, int) else None
    late = late if isinstance(late, int) else None      # after the planned instant, on the run's own clock
    # How long before the planned instant the engine was ready, on the run's own clock too.
    ready = started - late - ready if None not in (started, late) and isinstance(ready, int) else None
    late_step, late_reason = lateness.late_reason(point)
    clock_error = 0
    relay = next((e for e in res.events if e.get("type") == "relay"), {})
    relay_run = relay.get("run", 1) if via is not None else None    # which run of its relay session (1: a new one)
    if via is not None:             # the run stamped its start on the relay's clock
        offset, clock_error = relay.get("clock_offset_ns"), relay.get("clock_error_ns")
        started = started - offset if started is not None and isinstance(offset, int) else None
        clock_error = clock_error if isinstance(clock_error, int) else 0
    return {"type": "pair", "src": src, "dst": dst, "status": "ok" if res.exit_code == EXIT_OK else "failed",
            "message": res.message[:MAX_MESSAGE], "started_ns": None if started is None else started - slot_offset,
            "start_late_ns": late, "start_ready_ns": ready,
            "start_margin_ns": start_ns - opened[0] if opened else None,
            "late_step": late_step, "late_reason": late_reason,
            "clock_error_ns": clock_error,
            "samples_dir": samples if any(p.get("samples") for p in res.points) else None,
            "steps": slotted.steps_of(point) if spec.slots else None,
            "engine_run": engine_run, "relay_run": relay_run if isinstance(relay_run, int) else None,
            **output.pair_figures(res.points[-1] if res.points else {})}


def pair_options(spec: MeshSpec, src: int, dst: int) -> dict:
    """The engine options of one pair. load: its own --seed, the given one (else the engine's default) plus
    src x N + dst, so that clients sending at once draw independent send times and sizes (one seed would make
    every client send at the same instants); many-to-many: the client's --rate and --count split evenly over
    its N - 1 servers (rounded up to whole requests)."""
    if spec.slots:
        return slotted.pair_options(spec.slots, spec.options)
    if spec.experiment != "load":
        return spec.options
    n = len(spec.hosts)
    seed = spec.options.get("seed", engine_options(spec.engine)["seed"].default)
    out = {**spec.options, "seed": seed + src * n + dst}
    if spec.pattern in patterns.SPLIT_PATTERNS:
        share = lambda v: max(1, -(-v // (n - 1)))      # noqa: E731
        if isinstance(out.get("rate"), list):
            out["rate"] = [share(r) for r in out["rate"]]
        if isinstance(out.get("count"), int):
            out["count"] = share(out["count"])
    return out


def _run_round(spec: MeshSpec, dsts: list[tuple[int, int]], start_ns: int, report: Callable[[dict], None]) -> list:
    """This rank's pairs of one round, each in a thread (several at once when chaotic)."""
    run_pair = spec.run_pair or _run_pair
    threads = [threading.Thread(target=lambda d=d, p=p: report(run_pair(spec, spec.rank, d,
                                                                         host_port(spec.hosts[d], p), start_ns)),
                                daemon=True)
               for d, p in dsts]
    for t in threads:
        t.start()
    return threads


# --- ranks 1..n-1 -----------------------------------------------------------

def _identity(spec: MeshSpec) -> Optional[dict]:
    return spec.identity() if spec.identity else envinfo.identity(_other_ranks_addresses(spec))


def _follow(spec: MeshSpec, engine_port: int) -> int:
    env = _identity(spec)
    channel = rendezvous.connect(spec.hosts[0], spec.mesh_port, spec.token, spec.timeout_s)
    threads: list[threading.Thread] = []
    stop = threading.Event()
    try:
        channel.send({"type": "join", "rank": spec.rank, "size": len(spec.hosts), "engine_port": engine_port,
                      "env": env})
        ports: list[int] = []
        while True:
            body = channel.recv(None)
            kind = body.get("type")
            if kind == "ping":
                channel.send({"type": "pong", "mono_ns": time.monotonic_ns()})
            elif kind == "welcome":
                ports = _valid_ports(body.get("engine_ports"), len(spec.hosts))
                # Only now: before the welcome rank 0 reads pongs and nothing else.
                threading.Thread(target=_heartbeat, args=(channel, stop), daemon=True).start()
            elif kind == "round" and ports:
                dsts = _valid_dsts(body.get("dsts"), len(spec.hosts), spec.rank)
                start_ns = body.get("start_ns")
                if not isinstance(start_ns, int):
                    raise ChannelError("malformed round")
                threads = [t for t in threads if t.is_alive()]
                threads += _run_round(spec, [(d, ports[d]) for d in dsts], start_ns, lambda b: _report(channel, b))
            elif kind == "done":
                for t in threads:       # every pair was reported: they are ending
                    t.join(timeout=spec.timeout_s)
                return EXIT_OK
            elif kind == "abort":
                raise FabmeterError(f"rank 0 ended the mesh: {str(body.get('message'))[:MAX_MESSAGE]}", EXIT_RUNTIME)
            else:
                raise ChannelError(f"unexpected frame from rank 0: {str(kind)[:40]}")
    except ChannelError as e:
        raise FabmeterError(f"rank 0 ({host_port(spec.hosts[0], spec.mesh_port)}): {e}", EXIT_RUNTIME) from e
    finally:
        stop.set()      # on an error, pairs still running end with us (their engines get SIGTERM as we exit)
        channel.close()


def _other_ranks_addresses(spec: MeshSpec) -> list[str]:
    """The other ranks' addresses, rank 0's first: the routes whose interface this rank's identity records."""
    return [h for r, h in enumerate(spec.hosts) if r != spec.rank]


def _heartbeat(channel: Channel, stop: threading.Event) -> None:
    """Lets rank 0 tell a rank that hangs (stopped, wedged) from one whose pairs run long."""
    while not stop.wait(HEARTBEAT_S):
        _report(channel, {"type": "alive"})


def _report(channel: Channel, body: dict) -> None:
    try:
        channel.send(body)
    except ChannelError:
        pass        # rank 0 is gone: the main loop sees it on its next read


def _valid_ports(value, n: int) -> list[int]:
    if not (isinstance(value, list) and len(value) == n
            and all(isinstance(p, int) and 0 < p < 65536 for p in value)):
        raise ChannelError("malformed welcome")
    return value


def _valid_dsts(value, n: int, me: int) -> list[int]:
    if not (isinstance(value, list) and len(value) < n
            and all(isinstance(d, int) and 0 <= d < n and d != me for d in value) and len(set(value)) == len(value)):
        raise ChannelError("malformed round")
    return value


# --- rank 0 -----------------------------------------------------------------

def _coordinate(spec: MeshSpec, engine_port: int, emit: Callable[[dict], None], warn: Callable[[str], None],
                launched: Optional[launch.Launched]) -> int:
    n = len(spec.hosts)
    env = _identity(spec)
    joined = _gather(spec, warn, launched)
    try:
        ports = [engine_port] + [joined[r].engine_port for r in range(1, n)]
        for other in joined.values():
            try:
                _estimate_offset(other, spec.timeout_s)
                other.channel.send({"type": "welcome", "engine_ports": ports})
            except ChannelError as e:
                raise FabmeterError(f"rank {other.rank} ({spec.hosts[other.rank]}): {e}", EXIT_RUNTIME) from e
        inbox: queue.Queue = queue.Queue()
        for other in joined.values():     # here, not in the reader: the first round may check them before it runs
            other.last_heard = time.monotonic()
        threading.Thread(target=_read_results, args=(list(joined.values()), inbox), daemon=True).start()
        summary = output.Summary(spec.hosts, spec.pattern, spec.schedule, spec.experiment, spec.options,
                                 max((p.offset_error_ns for p in joined.values()), default=0))
        summary.environments = [env] + [joined[r].env for r in range(1, n)]
        summary.outlier_rule = spec.outlier_rule
        summary.slots = spec.slots
        summary.tool = spec.tool
        lead, rounds = _first_round_lead(
            spec, itertools.islice(_rounds(spec), spec.max_rounds),
            [e.get("hostname") if e else None for e in summary.environments])
        pairs: list = []
        try:
            for index, pairs in enumerate(rounds):
                lead.after(_one_round(spec, index, pairs, joined, ports, inbox, summary, emit, lead.ns))
        except KeyboardInterrupt:
            for other in joined.values():
                _try_send(other, {"type": "abort", "message": "interrupted"})
            return _interrupted(summary, emit, itertools.chain([pairs], rounds))
        for other in joined.values():
            if other.alive:
                _try_send(other, {"type": "done"})
        emit(summary.as_json())
        return EXIT_OK if summary.all_ok() else EXIT_RUNTIME
    finally:
        for other in joined.values():
            other.channel.close()


def _interrupted(summary: "output.Summary", emit: Callable[[dict], None], rounds) -> int:
    """Ctrl-C, SIGTERM or SIGHUP: the pairs that finished are kept, every other pair of `rounds` (the one under
    way and those not begun) is marked interrupted, and the summary goes out (mesh.json). Exit 130."""
    done = {(p["src"], p["dst"]) for p in summary.pairs}
    for pairs in rounds:
        for src, dst in pairs:
            if (src, dst) not in done:      # once: slotted repeats its round
                done.add((src, dst))
                summary.add(emit, output.failed_pair(src, dst, "the mesh was interrupted first", "interrupted"))
    emit(summary.as_json())
    return EXIT_INTERRUPTED


def _gather(spec: MeshSpec, warn: Callable[[str], None], launched: Optional[launch.Launched]) -> dict[int, Rank]:
    """Every other rank's join within the timeout; else exit 3 naming the missing ones (at once for a rank
    whose ssh ended)."""
    n = len(spec.hosts)
    family = socket.AF_INET6 if ":" in spec.hosts[0] else socket.AF_INET
    # A backlog for every rank: 1,000 ranks connect at once, and the default (128) would drop SYNs that then wait
    # for the kernel's retry (1 s, 3 s, ...).
    listener = socket.create_server((spec.hosts[0], spec.mesh_port), family=family, backlog=min(n, 4096))
    joined: dict[int, Rank] = {}
    deadline = time.monotonic() + spec.timeout_s
    try:
        while len(joined) < n - 1:
            if launched:
                try:
                    launched.check(joined)
                except FabmeterError as e:
                    _abort_joined(joined, e.message)
                    raise
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [f"rank {r} ({spec.hosts[r]})" for r in range(1, n) if r not in joined]
                _abort_joined(joined, f"{', '.join(missing)} did not join")
                raise FabmeterError(f"{', '.join(missing)} did not join within {spec.timeout_s:g} s", EXIT_RUNTIME)
            listener.settimeout(min(left, SSH_CHECK_S) if launched else left)
            try:
                channel = rendezvous.accept(listener, spec.token, min(left, 5.0))
            except (socket.timeout, ChannelError, OSError):
                continue
            try:
                body = channel.recv(min(deadline - time.monotonic(), 5.0))
                rank, port = body.get("rank"), body.get("engine_port")
                if (body.get("type") != "join" or not isinstance(rank, int) or not 0 < rank < n or rank in joined
                        or body.get("size") != n or not isinstance(port, int) or not 0 < port < 65536):
                    raise ChannelError(f"bad join {str(body)[:80]}")
            except ChannelError as e:
                warn(f"mesh: refused a connection: {e}")
                channel.close()
                continue
            joined[rank] = Rank(rank, channel, port, env=envinfo.valid_identity(body.get("env")))
    finally:
        listener.close()
    return joined


def _abort_joined(joined: dict[int, Rank], message: str) -> None:
    """The rendezvous failed: the ranks that joined are told why and let go."""
    for other in joined.values():
        _try_send(other, {"type": "abort", "message": message})
        other.channel.close()


def _estimate_offset(other: Rank, timeout_s: float) -> None:
    best = None
    for _ in range(CLOCK_PINGS):
        t0 = time.monotonic_ns()
        other.channel.send({"type": "ping"})
        body = other.channel.recv(timeout_s)
        t1 = time.monotonic_ns()
        mono = body.get("mono_ns")
        if body.get("type") != "pong" or not isinstance(mono, int):
            raise ChannelError("malformed pong")
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, mono - (t0 + t1) // 2)
    other.offset_error_ns, other.offset_ns = (best[0] + 1) // 2, best[1]


def _read_results(joined: list[Rank], inbox: queue.Queue) -> None:
    """Every rank's frames into the inbox as (rank, body), a lost connection as (rank, ChannelError): one thread
    for all ranks (a selector), not one each: 1,000 ranks would be 1,000 threads contending for the interpreter."""
    sel = selectors.DefaultSelector()
    for other in joined:
        other.channel.sock.settimeout(None)      # sends wait as before; feed() reads without waiting
        sel.register(other.channel.sock, selectors.EVENT_READ, other)
    try:
        while sel.get_map():
            for key, _ in sel.select():
                other = key.data
                try:
                    bodies = other.channel.feed()
                except ChannelError as e:
                    sel.unregister(key.fileobj)
                    inbox.put((other.rank, e))
                    continue
                if bodies:
                    other.last_heard = time.monotonic()
                for body in bodies:
                    inbox.put((other.rank, body))
    finally:
        sel.close()


def _try_send(other: Rank, body: dict) -> None:
    try:
        other.channel.send(body)
    except ChannelError:
        other.alive = False


def _one_round(spec: MeshSpec, index: int, pairs: list, joined: dict[int, Rank], ports: list[int],
               inbox: queue.Queue, summary: "output.Summary", emit: Callable[[dict], None], lead_ns: int) -> list:
    """Runs one round: its plan to every rank with the instant lead_ns ahead, then every pair's result. The
    start_ready_ns of its pairs that said."""
    began = time.monotonic_ns()
    traffic = _traffic(joined)
    start_ns = began + lead_ns
    pending = set()
    for src in sorted({s for s, _ in pairs}):
        dsts = [d for s, d in pairs if s == src]
        for dst in dsts:
            dead = [r for r in (src, dst) if r in joined and not joined[r].alive]
            if dead:
                summary.add(emit, output.failed_pair(src, dst, f"rank {dead[0]} ({spec.hosts[dead[0]]}) is gone"))
            else:
                pending.add((src, dst))
        live = [d for d in dsts if (src, d) in pending]
        if not live:
            continue
        if src == 0:
            _run_round(spec, [(d, ports[d]) for d in live], start_ns, lambda body: inbox.put((0, body)))
        else:
            _try_send(joined[src], {"type": "round", "round": index, "dsts": live,
                                   "start_ns": start_ns + joined[src].offset_ns})
    planned_ns = time.monotonic_ns() - began       # every rank's plan computed and sent
    started: list[int] = []
    late: list[int] = []
    margins: list[int] = []
    readies: list[int] = []
    checked = 0.0
    while pending:
        # Checked at every frame too (the others' heartbeats keep the queue from ever being empty for long), but at
        # most every HEARTBEAT_S / 4: with 1,000 ranks a check at each of their frames would cost O(n^2) a round.
        if time.monotonic() - checked > HEARTBEAT_S / 4:
            _give_up_on_silent(spec, joined, pending, inbox)
            checked = time.monotonic()
        try:
            rank, body = inbox.get(timeout=HEARTBEAT_S)
        except queue.Empty:
            continue
        if isinstance(body, ChannelError):
            joined[rank].alive = False
            for src, dst in sorted(p for p in pending if p[0] == rank):
                pending.discard((src, dst))
                summary.add(emit, output.failed_pair(src, dst, f"rank {rank} ({spec.hosts[rank]}) lost: {body}"))
            continue
        pair = output.valid_pair(body, rank, pending)
        if pair is None:
            continue        # a malformed or unexpected frame counts for nothing
        pending.discard((pair["src"], pair["dst"]))
        started_ns = pair.pop("started_ns")
        if started_ns is not None:
            started.append(started_ns - (joined[rank].offset_ns if rank else 0))
        if pair["start_late_ns"] is not None:
            late.append(pair["start_late_ns"])
        if pair["start_margin_ns"] is not None:
            margins.append(pair["start_margin_ns"])
        if pair["start_ready_ns"] is not None:
            readies.append(pair["start_ready_ns"])
        summary.add(emit, pair)
    summary.add_round(index, pairs, started, late, lead_ns, margins, readies)
    frames, nbytes = (a - b for a, b in zip(_traffic(joined), traffic))
    summary.rounds[-1]["control"] = {"plan_ns": planned_ns, "round_ns": time.monotonic_ns() - began,
                                     "frames": frames, "bytes": nbytes}
    return readies


def _traffic(joined: dict[int, Rank]) -> tuple[int, int]:
    """Frames and bytes the coordination channels carried so far, both ways (heartbeats too)."""
    chans = [p.channel for p in joined.values()]
    return (sum(c.frames_sent + c.frames_received for c in chans),
            sum(c.bytes_sent + c.bytes_received for c in chans))


def _give_up_on_silent(spec: MeshSpec, joined: dict[int, Rank], pending: set, inbox: queue.Queue) -> None:
    """A rank with pairs pending that has not been heard for the control timeout is lost."""
    for rank in sorted({src for src, _ in pending if src != 0}):
        other = joined[rank]
        silent = time.monotonic() - other.last_heard
        if other.alive and silent > spec.timeout_s + HEARTBEAT_S:
            other.alive = False
            inbox.put((rank, ChannelError(f"silent for {silent:.0f} s")))
            other.channel.shutdown()     # its reader ends too


# --- --launch serve -----------------------------------------------------------

def _coordinate_serves(spec: MeshSpec, emit: Callable[[dict], None]) -> int:
    n = len(spec.hosts)
    address = [host_port(h, spec.serve_port) for h in spec.hosts]
    _check_serves(spec, address)
    summary = output.Summary(spec.hosts, spec.pattern, spec.schedule, spec.experiment, spec.options, 0)
    summary.outlier_rule = spec.outlier_rule
    summary.slots = spec.slots
    envs: dict[int, dict] = {}      # no fabmeter runs on the hosts: what their engines' start lines say
    # No host's identity is known before its engines' start lines: all count as one machine.
    lead, rounds = _first_round_lead(spec, _rounds(spec), [None] * n)
    pairs: list = []
    try:
        for index, pairs in enumerate(rounds):
            _serves_round(spec, index, pairs, address, envs, summary, emit, lead)
    except KeyboardInterrupt:
        summary.environments = [envs.get(r) for r in range(n)]
        return _interrupted(summary, emit, itertools.chain([pairs], rounds))
    summary.environments = [envs.get(r) for r in range(n)]
    emit(summary.as_json())
    return EXIT_OK if summary.all_ok() else EXIT_RUNTIME


def _serves_round(spec: MeshSpec, index: int, pairs: list, address: list[str], envs: dict,
                  summary: "output.Summary", emit: Callable[[dict], None], lead: Lead) -> None:
    """One round of --launch serve: every pair relayed by its source's serve, each in a thread."""
    lead_ns = lead.ns
    start_ns = time.monotonic_ns() + lead_ns
    done: queue.Queue = queue.Queue()
    for src, dst in pairs:
        threading.Thread(target=lambda s=src, d=dst: done.put(_run_pair(spec, s, d, address[d], start_ns,
                                                                        via=address[s], envs=envs)),
                         daemon=True).start()
    started: list[int] = []
    late: list[int] = []
    margins: list[int] = []
    readies: list[int] = []
    for _ in pairs:
        pair = done.get()
        pair["load"] = output.valid_load(pair["load"]) or None     # relayed by a serve: taken as a rank's
        pair["steps"] = slotted.valid_steps(pair["steps"])
        summary.start_clock_error_ns = max(summary.start_clock_error_ns, pair.pop("clock_error_ns", 0))
        started_ns = pair.pop("started_ns", None)
        if started_ns is not None:
            started.append(started_ns)
        if pair.get("start_late_ns") is not None:
            late.append(pair["start_late_ns"])
        if pair.get("start_margin_ns") is not None:
            margins.append(pair["start_margin_ns"])
        if pair.get("start_ready_ns") is not None:
            readies.append(pair["start_ready_ns"])
        summary.add(emit, pair)
    summary.add_round(index, pairs, started, late, lead_ns, margins, readies)
    lead.after(readies)


def _check_serves(spec: MeshSpec, address: list[str]) -> None:
    """Every host's serve takes a connection within the control timeout, else exit 3 naming the ones that do
    not (before any pair runs, as a rank that does not join ends rank mode)."""
    def unreachable(i: int) -> Optional[str]:
        try:
            socket.create_connection((spec.hosts[i], spec.serve_port), timeout=spec.timeout_s).close()
            return None
        except OSError as e:
            return f"{address[i]} ({e.strerror or e})"
    with ThreadPoolExecutor(len(address)) as pool:
        missing = [r for r in pool.map(unreachable, range(len(address))) if r]
    if missing:
        raise FabmeterError(f"no fabmeter serve answers at {', '.join(missing)}", EXIT_RUNTIME)
