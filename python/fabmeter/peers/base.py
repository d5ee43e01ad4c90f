"""What every peer adapter shares: parameters, processes, ports, points.

An adapter is a subclass of `Peer` in its own module that says

- which tool it runs (`tool`, the binary; `package`, the Debian package),
- which (experiment, transport) `cases` it measures,
- `version()`: the tool's version string,
- `command(role, case, params, port)`: the exact argv of the server
  ("server") or the client ("client"), CPU pinning and environment
  included (`pinned()`, `with_env()`), so the recorded command line is the
  one that ran,
- `listens(case, params)`: "tcp", "udp" or "rdma_cm", how to tell that the
  server is ready (its socket on `port` shows up in /proc/net; an rdma_cm
  listener, which no socket table shows, in the kernel's cm_ids as
  iproute2's `rdma res show cm_id` lists them: nothing connects to it early),
- `parse(text, case)`: the client's output -> point dicts in fabmeter's
  schema (`point()` builds the common keys),
- `request(case, params)`: what to ask a remote `fabmeter serve` for when
  the server side runs there (`--server`): the tool and its parameters as
  the server's allow-list takes them (engine/src/session/tool_server.cpp);
  None: the tool cannot run so.

`Peer.run(params)` does the rest for every case: a free port, the server in
a process group of its own, wait until it listens, the client under a
timeout, parse, and always stop both (SIGTERM, then SIGKILL, to the whole
group). With `params.server`, the server side runs on that host instead:
`fabmeter-engine tool` asks its `fabmeter serve` to start it (the port is
the server's pick) and holds it until the client is done (RemoteServer). A case that cannot run gives a record {"type": "skipped"} or
{"type": "failed"} with a one-line `reason` instead of points.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from fabmeter import path, procs
from fabmeter.peers import cpu as cpu_cost

SERVER_START_TIMEOUT_S = 10.0
SERVER_EXIT_GRACE_S = 2.0     # servers that end after one client get this long
UDP_MAX_PAYLOAD = 65507       # one UDP datagram over IPv4 (65535 less the IP and UDP headers)

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class PeerRun:
    """One `fabmeter peers` run, as every adapter reads it (the engine's key
    names where the engine has the knob: size, iters, duration, rate)."""
    size: int = 32                        # latency message size, bytes
    bw_size: int = 64 * 1024              # bandwidth message size, bytes
    iters: int = 10000                    # for tools that count messages
    rate: int = 10000                     # load: requests per second offered (fabmeter load's --rate)
    duration: float = 1.0                 # seconds, for tools that only stop on a timer
    flows: int = 1                        # bw: connections at once (fabmeter's --flows, iperf3 -P)
    cpus: Optional[tuple[int, int]] = None  # (client CPU, server CPU); None = unpinned
    transports: tuple[str, ...] = ("tcp", "udp", "shm")
    timeout_s: float = 30.0               # per client run, on top of duration
    raw_dir: Optional[Path] = None        # where to keep each tool's raw output
    server: Optional[str] = None          # HOST[:PORT] of a `fabmeter serve` that runs the server side
    token_file: Optional[str] = None      # its shared secret (else $FABMETER_TOKEN)
    engine: Optional[str] = None          # fabmeter-engine, which speaks to that serve
    rdma: Optional["Rdma"] = None         # RDMA tools: the devices of each side and the verbs knobs
    bidir: bool = False                   # bw: both ends send at once (fabmeter's --bidir, perftest -b)
    tests: Optional[tuple[str, ...]] = None  # only these of the tools' tests (Case.variant); None = all

    @property
    def host(self) -> str:
        """Where the client connects: the server's host, or loopback."""
        if self.server is None:
            return "127.0.0.1"
        host = self.server
        if host.startswith("["):
            return host[1:host.index("]")]
        return host.rsplit(":", 1)[0] if host.count(":") == 1 else host

    @property
    def client_cpu(self) -> Optional[int]:
        return self.cpus[0] if self.cpus else None

    @property
    def server_cpu(self) -> Optional[int]:
        return self.cpus[1] if self.cpus else None


@dataclass(frozen=True)
class Rdma:
    """The RDMA devices perftest and qperf's RDMA tests use on each side, and the verbs knobs
    (fabmeter's names: --service, --inline, --mtu) that perftest and fabmeter's own verbs runs take."""
    client_device: Optional[str] = None   # perftest -d, qperf -cm1 ... -Li
    server_device: Optional[str] = None
    gid_index: Optional[int] = None       # perftest -x (RoCE: the GID of the address family used)
    ib_port: Optional[int] = None
    service: str = "rc"                   # rc | uc | ud (perftest -c)
    inline: int = 0                       # bytes sent inline (perftest -I); 0: none asked for
    mtu: int = 0                          # path MTU (perftest -m); 0: the port's active MTU
    cm: str = "raw"                       # raw (QP numbers over a socket) | rdma_cm (perftest -R)

    @property
    def knobs_set(self) -> bool:
        """Whether any verbs knob differs from what a tool does by itself (RC, no inline, the port's MTU, raw)."""
        return self.service != "rc" or self.inline != 0 or self.mtu != 0 or self.cm != "raw"

    def cm_conflict(self) -> Optional[str]:
        """Why the knobs cannot go with rdma_cm (fabmeter's verbs and perftest -R alike), or None."""
        if self.cm != "rdma_cm":
            return None
        if self.service == "uc":
            return "rdma_cm cannot connect UC (perftest -R refuses it); --service uc needs --cm raw"
        if self.mtu and self.service != "ud":
            return "with rdma_cm the route decides the path MTU (perftest -R applies no -m); --mtu needs --cm raw"
        if self.gid_index is not None:
            return "rdma_cm uses the GID of the address it binds (perftest -R sets no -x); --gid-index needs --cm raw"
        return None


@dataclass(frozen=True)
class Case:
    experiment: str   # lat | bw | load
    transport: str    # tcp | udp | shm | verbs
    variant: str = "" # which of the tool's tests or binaries, where it has several (qperf rc_lat, ib_send_bw)

    def size(self, params: PeerRun) -> int:
        return params.bw_size if self.experiment == "bw" else params.size


class PeerError(Exception):
    """A case that could not be measured; the message is one line."""


class Unsupported(PeerError):
    """The tool cannot do what was asked (e.g. a size below its minimum): skipped, not failed."""


# --- building commands --------------------------------------------------------

def pinned(argv: Sequence[str], cpu: Optional[int]) -> list[str]:
    """argv under `taskset -c CPU` (unchanged when cpu is None)."""
    return list(argv) if cpu is None else ["taskset", "-c", str(cpu), *argv]


def with_env(argv: Sequence[str], env: dict[str, str]) -> list[str]:
    """argv under `env K=V ...`, so the environment is part of the command line."""
    return ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else list(argv)


@functools.lru_cache(maxsize=None)
def probe_version(argv: tuple[str, ...], pattern: str) -> Optional[str]:
    """The first group of `pattern` in the output of argv (stdout + stderr)."""
    try:
        res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, ANSI_ESCAPE.sub("", res.stdout + res.stderr), re.M)
    return m.group(1) if m else None


def point(tool: str, case: Case, **fields) -> dict:
    """A peer point: fabmeter's point keys plus who measured it and how."""
    variant = {"variant": case.variant} if case.variant else {}
    return {"type": "point", "peer": True, "tool": tool, "experiment": case.experiment,
            "transport": case.transport, **variant, **fields}


def us_to_ns(value: str | float) -> float:
    return round(float(value) * 1000.0, 3)


def percentile_key(rank: str) -> str:
    """A tool's percentile label -> fabmeter's key: '99.990' -> 'p9999', '50.0' -> 'p50'."""
    return "p" + rank.rstrip("0").rstrip(".").replace(".", "")


# --- ports and processes --------------------------------------------------------

def free_port() -> int:
    """A loopback port that is free for both TCP and UDP right now."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port
    raise PeerError("no free loopback port")


def bound(proto: str, port: int) -> bool:
    """Is a socket listening (tcp) or bound (udp) on `port`, any address?"""
    for table in (f"/proc/net/{proto}", f"/proc/net/{proto}6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if len(f) > 3 and int(f[1].rsplit(":", 1)[1], 16) == port and (proto != "tcp" or f[3] == "0A"):
                return True
    return False


class Process:
    """A tool process in its own process group; output kept in a temp file."""

    def __init__(self, argv: Sequence[str]):
        self.argv = list(argv)
        self._log = tempfile.TemporaryFile(mode="w+")
        try:
            self.proc = procs.spawn(self.argv, stdout=self._log, stderr=subprocess.STDOUT)
        except OSError as e:
            self._log.close()
            raise PeerError(f"cannot start {self.argv[0]}: {e.strerror}") from e

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> bool:
        """True if it ended within `timeout` seconds."""
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read()

    def last_line(self) -> str:
        lines = [ANSI_ESCAPE.sub("", ln).strip() for ln in self.output().splitlines() if ln.strip()]
        return lines[-1] if lines else "(no output)"

    def stop(self, grace: float = 0.0) -> None:
        """Let it end by itself for `grace` s, then stop its whole process group."""
        procs.stop_group(self.proc, grace)

    def close(self) -> None:
        self._log.close()


def cm_listens(shown: str, port: int, pid: int) -> bool:
    """Does `rdma -j res show cm_id` (its JSON: shown) list an rdma_cm listener of process `pid` on `port`?
    (A wildcard listener shows once per device, its "src-addr" ADDRESS:PORT.)"""
    try:
        ids = json.loads(shown)
    except ValueError:
        return False
    return isinstance(ids, list) and any(isinstance(i, dict) and i.get("state") == "LISTEN" and i.get("pid") == pid
                                         and str(i.get("src-addr")).rpartition(":")[2] == str(port) for i in ids)


def cm_listening(port: int, pid: int) -> bool:
    """Does process `pid` listen with rdma_cm on `port`? The kernel's cm_ids (iproute2's rdma tool, netlink):
    an rdma_cm listener opens no socket that /proc/net would show."""
    rdma = shutil.which("rdma")
    if rdma is None:
        raise Unsupported("rdma_cm: iproute2's rdma, which shows the server's listener, is not installed "
                          "(apt-get install iproute2)")
    try:
        res = subprocess.run([rdma, "-j", "res", "show", "cm_id", "src-port", str(port), "pid", str(pid)],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return cm_listens(res.stdout, port, pid)


def wait_until_bound(server: Process, proto: str, port: int, timeout: float = SERVER_START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not (cm_listening(port, server.proc.pid) if proto == "rdma_cm" else bound(proto, port)):
        if not server.running():
            raise PeerError(f"server exited {server.proc.returncode} before listening: {server.last_line()}")
        if time.monotonic() > deadline:
            raise PeerError(f"server did not listen on {proto} port {port} within {timeout:.0f} s")
        time.sleep(0.02)


# --- the adapter ----------------------------------------------------------------

@dataclass
class Peer:
    tool: str                              # binary on PATH
    package: str                           # Debian package that has it
    cases: tuple[Case, ...] = ()
    server_exits_alone: bool = False       # ends after one client (iperf3 -1, ucx_perftest)
    poll: str = "blocking"                 # how it waits for a message: blocking | busy
    bidir: bool = False                    # its bw cases run both directions at once when asked (--bidir)
    verbs_knobs: bool = False              # its verbs cases take --service, --inline, --mtu

    def available(self) -> bool:
        return shutil.which(self.tool) is not None

    def version(self) -> Optional[str]:
        raise NotImplementedError

    def listens(self, case: Case, params: PeerRun) -> str:
        return "tcp"

    def command(self, role: str, case: Case, params: PeerRun, port: int) -> list[str]:
        raise NotImplementedError

    def parse(self, text: str, case: Case) -> list[dict]:
        raise NotImplementedError

    def request(self, case: Case, params: PeerRun) -> Optional[dict]:
        return None

    def started(self, case: Case, params: PeerRun, client: "Process") -> dict:
        """Called once the client runs (it may place the client's threads); what it returns goes into every
        point of the case."""
        return {}

    def measured_count(self, p: dict, case: Case, params: PeerRun) -> Optional[float]:
        """How many `per_unit(case)` the tool reports for its point, for CPU per message."""
        return p.get("iterations")

    @staticmethod
    def per_unit(case: Case) -> str:
        return {"lat": "round_trip", "load": "request"}.get(case.experiment, "message")

    def skipped(self, reason: str, case: Optional[Case] = None) -> dict:
        rec = {"type": "skipped", "peer": True, "tool": self.tool, "reason": reason}
        if case is not None:
            rec.update(experiment=case.experiment, transport=case.transport)
            if case.variant:
                rec["variant"] = case.variant
        return rec

    def not_installed(self) -> dict:
        return self.skipped(f"not installed (apt-get install {self.package})")

    def selected(self, params: PeerRun) -> list[Case]:
        return [c for c in self.cases if c.transport in params.transports
                and (params.tests is None or c.variant in params.tests)]

    def run(self, params: PeerRun, on_record: Optional[Callable[[dict], None]] = None) -> list[dict]:
        """Every selected case: points, or one skipped/failed record per case.
        `on_record` sees each record as soon as it is known."""
        records: list[dict] = []

        def add(recs: list[dict]) -> list[dict]:
            for rec in recs:
                records.append(rec)
                if on_record is not None:
                    on_record(rec)
            return records

        if not self.available():
            return add([self.not_installed()])
        if params.cpus is not None and shutil.which("taskset") is None:
            return add([self.skipped("taskset not found, needed for --cpus (apt-get install util-linux)")])
        for case in self.selected(params):
            try:
                add(self.run_case(case, params))
            except Unsupported as e:
                add([self.skipped(str(e), case)])
            except PeerError as e:
                add([{"type": "failed", "peer": True, "tool": self.tool, "experiment": case.experiment,
                      "transport": case.transport, **({"variant": case.variant} if case.variant else {}),
                      "reason": str(e)}])
        return records

    def check_knobs(self, case: Case, params: PeerRun) -> None:
        """A case the asked-for knobs would misdescribe is skipped, not run without them."""
        if params.bidir and case.experiment == "bw" and not self.bidir:
            raise Unsupported(f"{self.tool} measures one direction at a time (--bidir)")
        if (case.transport == "verbs" and params.rdma is not None and params.rdma.knobs_set
                and not self.verbs_knobs):
            raise Unsupported(f"{self.tool} takes none of --service, --inline, --mtu, --cm (its RDMA tests name "
                              "their service and how they connect)")

    def run_case(self, case: Case, params: PeerRun) -> list[dict]:
        """One case, the one entry point for every caller: its knobs checked (Unsupported), then measured by
        the adapter's `measure`."""
        self.check_knobs(case, params)
        return self.measure(case, params)

    def measure(self, case: Case, params: PeerRun) -> list[dict]:
        """The adapter's hook: the case's points. This one runs the tool's server and client, here or the
        server on params.server."""
        if params.server is not None:
            return self.run_remote_case(case, params)
        port = free_port()
        server_cmd = self.command("server", case, params, port)
        client_cmd = self.command("client", case, params, port)
        pinned_cpus = tuple(c for c in (params.client_cpu, params.server_cpu) if c is not None)
        server = Process(server_cmd)
        server_cpu0 = cpu_cost.read(server.proc.pid, pinned_cpus[1:])
        client: Optional[Process] = None
        try:
            wait_until_bound(server, self.listens(case, params), port)
            client = Process(client_cmd)
            client_cpu0 = cpu_cost.read(client.proc.pid, pinned_cpus[:1])
            placed = self.started(case, params, client)
            if not cpu_cost.exited(client.proc.pid, params.duration + params.timeout_s):
                raise PeerError(f"client did not finish within {params.duration + params.timeout_s:.0f} s")
            client_cpu1 = cpu_cost.read(client.proc.pid, pinned_cpus[:1])
            server_cpu1 = cpu_cost.read(server.proc.pid, pinned_cpus[1:])
            client.wait(SERVER_EXIT_GRACE_S)
            points = self._client_points(client, case, params)
        finally:
            if client is not None:
                client.stop()
                client.close()
            server.stop(SERVER_EXIT_GRACE_S if self.server_exits_alone else 0.0)
            server.close()
        return self._label(points, case, params,
                           lambda count, per, nbytes: {
                               "client": cpu_cost.side(client_cpu0, client_cpu1, count, per, nbytes),
                               "server": cpu_cost.side(server_cpu0, server_cpu1, count, per, nbytes)},
                           command=client_cmd, server_command=server_cmd, **placed)

    def run_remote_case(self, case: Case, params: PeerRun) -> list[dict]:
        """The server side on params.server, started by its `fabmeter serve`; the client here."""
        request = self.request(case, params)
        if request is None:
            raise Unsupported(f"{self.tool} does not run its server side through fabmeter serve (--server)")
        pinned_cpus = (params.client_cpu,) if params.client_cpu is not None else ()
        server = RemoteServer(params, request)
        client: Optional[Process] = None
        try:
            port = server.wait_ready()
            client_cmd = self.command("client", case, params, port)
            client = Process(client_cmd)
            client_cpu0 = cpu_cost.read(client.proc.pid, pinned_cpus)
            placed = self.started(case, params, client)
            if not cpu_cost.exited(client.proc.pid, params.duration + params.timeout_s):
                raise PeerError(f"client did not finish within {params.duration + params.timeout_s:.0f} s")
            client_cpu1 = cpu_cost.read(client.proc.pid, pinned_cpus)
            client.wait(SERVER_EXIT_GRACE_S)
            end = server.finish()
            points = self._client_points(client, case, params,
                                         f" (server: {end['output']})" if end.get("output") else "")
        finally:
            if client is not None:
                client.stop()
                client.close()
            server.close()
        return self._label(points, case, params,
                           lambda count, per, nbytes: {
                               "client": cpu_cost.side(client_cpu0, client_cpu1, count, per, nbytes),
                               "server": cpu_cost.remote_side(end, count, per, nbytes)},
                           command=client_cmd, server_command=server.argv, server=params.server, **placed)

    def _client_points(self, client: Process, case: Case, params: PeerRun, server_said: str = "") -> list[dict]:
        """The ended client's points: its output kept (--raw) and parsed; PeerError if it failed or said nothing."""
        text = client.output()
        self._keep_raw(params, case, text)
        if client.proc.returncode != 0:
            raise PeerError(f"client exited {client.proc.returncode}: {client.last_line()}{server_said}")
        points = self.parse(text, case)
        if not points:
            raise PeerError(f"no result in the client's output: {client.last_line()}")
        return points

    def _label(self, points: list[dict], case: Case, params: PeerRun,
               cpu: Callable[[Optional[float], str, Optional[float]], dict], **fields) -> list[dict]:
        """Each parsed point with its size, both ends' CPU cost (cpu(count, per, bytes)), the tool's
        version and where it ran (fields)."""
        version = self.version()
        here = path.this_end()    # the client's end; a remote server's host is its serve's, unrecorded
        where = path.record(params.server, tool=self.tool, client=here, server_end=None if params.server else here,
                            same_host=None if params.server else True)
        for p in points:
            p.setdefault("size", case.size(params))
            count, per = self.measured_count(p, case, params), self.per_unit(case)
            nbytes = count * p["size"] if count and case.experiment == "bw" else None
            p["cpu"] = cpu(count, per, nbytes)
            p.update(poll=self.poll, tool_version=version, path=where, **fields)
            if params.raw_dir is not None:
                p["raw_output"] = self._raw_name(case, params)
        return points

    def _raw_name(self, case: Case, params: PeerRun) -> str:
        return f"{self.tool}-{case.experiment}-{case.transport}-{case.size(params)}B.txt"

    def _keep_raw(self, params: PeerRun, case: Case, text: str) -> None:
        if params.raw_dir is not None:
            params.raw_dir.mkdir(parents=True, exist_ok=True)
            (params.raw_dir / self._raw_name(case, params)).write_text(text)


class RemoteServer:
    """A tool's server side on another host: `fabmeter-engine tool --server HOST --request JSON` asks that host's
    `fabmeter serve` to start it and holds it until our standard input to it closes."""

    def __init__(self, params: PeerRun, request: dict):
        if params.engine is None:
            raise PeerError("--server needs fabmeter-engine (make build)")
        argv = [params.engine, "tool", "--server", params.server, "--request", json.dumps(request)]
        if params.token_file is not None:
            argv += ["--token-file", params.token_file]
        self.argv: list[str] = []
        self._err = tempfile.TemporaryFile(mode="w+")
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                         text=True, preexec_fn=procs.child_setup)
        except OSError as e:
            self._err.close()
            raise PeerError(f"cannot start {argv[0]}: {e.strerror}") from e

    def _line(self, kind: str) -> dict:
        for text in self.proc.stdout:
            try:
                rec = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and rec.get("type") == kind:
                return rec
        self.proc.wait(timeout=10)
        self._err.seek(0)
        lines = [ln.strip() for ln in self._err.read().splitlines() if ln.strip()]
        reason = lines[-1].removeprefix("fabmeter-engine: error: ") if lines else f"exit {self.proc.returncode}"
        if self.proc.returncode == 2:
            raise Unsupported(f"the server refused: {reason}")
        raise PeerError(f"the server's tool: {reason}")

    def wait_ready(self) -> int:
        ready = self._line("ready")
        if not ready.get("ready"):
            raise PeerError(f"the server's tool did not listen: {ready.get('reason')}")
        self.argv = list(ready.get("server_argv") or [])
        return int(ready["port"])

    def finish(self) -> dict:
        """Stops the tool there (our stdin closes) and returns the engine's "end" line."""
        self.proc.stdin.close()
        return self._line("end")

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            procs.stop_group(self.proc, 0.0)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._err.close()
