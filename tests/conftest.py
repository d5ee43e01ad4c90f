"""Shared fixtures: the real engine binary and a way to run the real CLI.

Nothing here builds anything (the Makefile builds first); tests that need
the engine are skipped, with a clear reason, when the binary is missing.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import secrets
import shutil
import signal
import random
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENGINE = Path(os.environ.get("FABMETER_ENGINE") or REPO / "build" / "engine" / "fabmeter-engine")
sys.path.insert(0, str(REPO / "python"))  # this checkout's package, installed or not
from fabmeter.recorded import LIMITS_HOOK  # noqa: E402  (after the path above)
POLLS = ["busy", "event"]


@functools.cache
def engine_info() -> dict:
    """`fabmeter-engine options`: its experiments, transports and option table; {} where the engine is not
    built (the tests that need it then skip, see `engine` below)."""
    if not ENGINE.exists():
        return {}
    res = subprocess.run([str(ENGINE), "options"], capture_output=True, text=True, timeout=30, check=True)
    return json.loads(res.stdout)


# Transports a test host cannot run: verbs needs an RDMA device (`make test-rdma`'s Soft-RoCE guest).
NEEDS_A_DEVICE = {"verbs"}


def built_transports(group: str = "") -> list[str]:
    """The transports the engine was built with, as it lists them, those that need a device left out: what
    a per-transport test parametrises over, so that a transport added to the engine is tested at once. With
    `group`, only those that read that option group (e.g. "messaging"), as the option table says."""
    names = [t for t in engine_info().get("transports", []) if t not in NEEDS_A_DEVICE]
    if not group:
        return names
    readers = {t for o in engine_info()["options"] if o["group"] == group for t in o["transports"].split(",")}
    return [t for t in names if t in readers]


TRANSPORTS = built_transports()


@functools.cache
def built_in_transports() -> list[str]:
    """The transports compiled into the engine, not plugins (`fabmeter-engine transports` says "built in"):
    test_matrix's and test_stream's; the plugins' own files (test_messaging, test_ofi) run theirs."""
    if not ENGINE.exists():
        return []
    res = subprocess.run([str(ENGINE), "transports"], capture_output=True, text=True, timeout=30, check=True)
    return [line.split(":")[0] for line in res.stdout.splitlines() if line.endswith("(built in)")]


def need_transport(name: str) -> None:
    """Skips the test where the engine was built without `name`."""
    if name not in engine_info().get("transports", []):
        pytest.skip(f"the engine was built without {name}")


def script_module(name: str, rel_path: str):
    """A script of this checkout (not a package module) loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / rel_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def guest_report(kind: str):
    """rdma/guest_report's checks of one kind of case (cases, commands, perftest, faults, read)."""
    if str(REPO / "rdma") not in sys.path:
        sys.path.insert(0, str(REPO / "rdma"))
    return importlib.import_module(f"guest_report.{kind}")


# Every process a test starts carries this tag in its environment (children
# inherit it), so a test can tell whether engines it started were left behind
# without being confused by anyone else's engines on the machine.
TAG_VAR = "FABMETER_TEST_TAG"


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir(tmp_path_factory):
    """Engines take TMPDIR for their private directories (fabmeter-data-*,
    fabmeter-ipc-*). One a test SIGKILLs cannot remove them: under pytest's
    base temp, which pytest prunes, they do not pile up in /tmp."""
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmp"))
    yield
    if old is None:
        del os.environ["TMPDIR"]
    else:
        os.environ["TMPDIR"] = old


@pytest.fixture
def seed(request) -> int:
    """A randomised test's seed: FM_SEED where set (a rerun), else one drawn now. A failing test's report
    names it (pytest_runtest_makereport below), so `FM_SEED=N pytest ...` replays the draw."""
    value = int(os.environ["FM_SEED"]) if os.environ.get("FM_SEED") else secrets.randbits(32)
    request.node.user_properties.append(("FM_SEED", value))
    print(f"FM_SEED={value}")
    return value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    drawn = dict(item.user_properties).get("FM_SEED")
    if report.failed and drawn is not None:
        report.sections.append(("seed", f"rerun with FM_SEED={drawn}"))


@pytest.fixture(scope="session")
def engine() -> Path:
    if not (ENGINE.is_file() and os.access(ENGINE, os.X_OK)):
        pytest.skip(f"engine binary missing: {ENGINE} (run `make build` first; the tests build nothing)")
    return ENGINE


def cli_env(tag: str) -> dict:
    env = dict(os.environ)
    # The CLI keeps its bytecode (in the checkout's ignored __pycache__ folders) whatever this environment says:
    # a test run starts it hundreds of times, and each start compiled the whole package again without it.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(REPO / "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["FABMETER_ENGINE"] = str(ENGINE)
    # No machine limits beside a run (0.7 s each, 219 of them in a whole test run) unless a test asks for them
    # (Fabmeter.measuring_limits).
    env[LIMITS_HOOK] = "off"
    env[TAG_VAR] = tag
    return env


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fabmeter", *map(str, args)]


class Fabmeter:
    """Runs `fabmeter ...` (this checkout's code, the real engine) as a subprocess."""

    def __init__(self, tag: str):
        self.tag = tag
        self.env = cli_env(tag)

    def run(self, *args, timeout: float = 120, prefix: tuple = (), **kw) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *cli_cmd(*args)], env=self.env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout, **kw)

    def popen(self, *args, prefix: tuple = (), **kw) -> subprocess.Popen:
        return subprocess.Popen([*prefix, *cli_cmd(*args)], env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def measuring_limits(self) -> Fabmeter:
        """This runner (its environment as it is now), its runs measuring the machine's limits beside them as a
        user's do."""
        other = Fabmeter(self.tag)
        other.env = {k: v for k, v in self.env.items() if k != LIMITS_HOOK}
        return other

    def leftovers(self, wait: float = 3.0) -> list[str]:
        """Engine processes started by this test still alive after `wait` seconds."""
        deadline = time.monotonic() + wait
        while True:
            found = tagged_engine_procs(self.tag)
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.1)


def proc_status(pid: int, *keys: str) -> dict:
    """Fields of /proc/PID/status as integers (kB for the Vm* ones), e.g. proc_status(pid, "VmRSS", "Threads")."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            out[key] = int(rest.split()[0])
    return out


def children(pid: int) -> list[str]:
    """The live children of `pid`, as 'PID: cmdline', from its threads' children lists (a child is listed under
    the thread that forked it): a few small reads, as a sampler sharing the CPUs with a measured run must be (a
    walk of the whole tree every 20 ms held a busy-polling end off its CPU for milliseconds on a loaded machine)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids = f.read().split()
        except OSError:
            continue
        for kid in kids:
            try:
                with open(f"/proc/{kid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if cmd:                     # a zombie's is empty
                found.append(f"{kid}: {cmd}")
    return found


def tagged_engine_procs(tag: str) -> list[str]:
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle not in (d / "environ").read_bytes().split(b"\0"):
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if "fabmeter-engine" in cmd and ") Z " not in stat:  # zombies are already dead
            found.append(f"{d.name}: {cmd}")
    return found


@pytest.fixture
def fm(engine, request):
    runner = Fabmeter(uuid.uuid4().hex)
    yield runner
    # Whatever the test did, it must not leave engines running; kill them
    # so one failing test does not spoil the next, then report.
    left = runner.leftovers(wait=5.0)
    for entry in left:
        try:
            os.kill(int(entry.split(":")[0]), signal.SIGKILL)
        except OSError:
            pass
    assert not left, f"engine processes left behind: {left}"


def json_lines(text: str) -> list[dict]:
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def one_line_error(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected exactly one stderr line, got {lines!r}"
    assert lines[0].startswith("fabmeter: error: "), lines[0]
    return lines[0]


@contextlib.contextmanager
def veth_namespaces(name: str, net: str, *link_args: str):
    """Two fresh network namespaces NAME<pid>a and NAME<pid>b joined by a veth
    pair, NET.1/24 in the first and NET.2/24 in the second (`link_args`: more
    `ip link set` arguments for both ends). Yields (ns_a, ns_b, dev_a, dev_b);
    deleting the namespaces afterwards, whatever happened, removes the rest.
    Skips the test where namespaces cannot be made (not root, no iproute2)."""
    tag = f"{name}{os.getpid() % 100000}"
    ns_a, ns_b, dev_a, dev_b = f"{tag}a", f"{tag}b", f"{tag}va", f"{tag}vb"
    created = []
    try:
        _add_namespaces(created, ns_a, ns_b)
        _sh("ip", "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b)
        for ns, dev, addr in ((ns_a, dev_a, f"{net}.1/24"), (ns_b, dev_b, f"{net}.2/24")):
            _sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, *link_args, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield ns_a, ns_b, dev_a, dev_b
    finally:
        _del_namespaces(created)


@contextlib.contextmanager
def serve_across_namespaces(fm, name: str, net: str, token_file: str):
    """A token-holding `fabmeter serve` in the first of two veth_namespaces, listening on NET.1. Yields
    (serve process, "NET.1:PORT", the prefix that runs a command in the second namespace); stops the serve."""
    with veth_namespaces(name, net) as (ns_a, ns_b, _, _):
        addr, port = f"{net}.1", str(free_port())
        serve = fm.popen("serve", "--bind", addr, "--port", port, "--token-file", token_file,
                         prefix=("ip", "netns", "exec", ns_a))
        try:
            assert json.loads(serve.stdout.readline())["event"] == "listening"
            yield serve, f"{addr}:{port}", ("ip", "netns", "exec", ns_b)
        finally:
            stop_serves([serve])


@contextlib.contextmanager
def bridged_namespaces(name: str, net: str, hosts: int):
    """`hosts` fresh network namespaces NAME<pid>h0, h1, ..., each joined by
    a veth pair to one bridge in namespace NAME<pid>sw (a switch), with
    NET.1/24, NET.2/24, ... Yields [(namespace, address), ...]; deleting the
    namespaces afterwards, whatever happened, removes the rest. Skips as
    veth_namespaces does."""
    tag = f"{name}{os.getpid() % 100000}"
    switch, br = f"{tag}sw", f"{tag}br"
    nss = [f"{tag}h{i}" for i in range(hosts)]
    created = []
    try:
        _add_namespaces(created, switch, *nss)
        _sh("ip", "-n", switch, "link", "add", br, "type", "bridge")
        _sh("ip", "-n", switch, "link", "set", br, "up")
        for i, ns in enumerate(nss):
            dev, port = f"{tag}v{i}", f"{tag}p{i}"
            _sh("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", port, "netns", switch)
            _sh("ip", "-n", switch, "link", "set", port, "master", br, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{net}.{i + 1}/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield [(ns, f"{net}.{i + 1}") for i, ns in enumerate(nss)]
    finally:
        _del_namespaces(created)


@pytest.fixture
def four_hosts():
    """Four namespace hosts on a bridge, as the mesh tests use them: [(namespace, address), ...]."""
    net = f"10.193.{os.getpid() % 250}"
    with bridged_namespaces("fmm", net, 4) as hosts:
        yield hosts


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)


def _add_namespaces(created: list, *nss: str) -> None:
    """Adds each namespace, appending it to `created` (for _del_namespaces);
    skips the test where namespaces cannot be made (not root, no iproute2)."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and `ip` (iproute2) for network namespaces")
    try:
        for ns in nss:
            _sh("ip", "netns", "add", ns)
            created.append(ns)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot create network namespaces here: {e.stderr.strip()}")


def _del_namespaces(created: list) -> None:
    for ns in created:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def run_with_pause(fm: Fabmeter, tmp_path: Path, args: list, after_s: float, stop_s: float):
    """`fabmeter ARGS` with its client engine SIGSTOPped for `stop_s`, `after_s`
    into its first point (the engine marks it in FABMETER_TRACE_PHASES), so a
    loaded machine's slow start-up cannot move the pause. Returns
    (returncode, stdout, stderr)."""
    trace = tmp_path / "phases"
    env = dict(fm.env, FABMETER_TRACE_PHASES=str(trace))
    proc = subprocess.Popen(cli_cmd(*args), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            marks = trace.read_text().splitlines() if trace.exists() else []
            pid = next((int(m.split()[2]) for m in marks if m.startswith("client point ")), None)
            if pid is not None:
                break
            assert proc.poll() is None and time.monotonic() < deadline, "the client never started its point"
            time.sleep(0.01)
        time.sleep(after_s)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(stop_s)
        os.kill(pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def stop_serve(serve: subprocess.Popen) -> None:
    """Ends `fabmeter serve` as Ctrl-C would, killing it if it hangs."""
    serve.send_signal(signal.SIGTERM)
    try:
        serve.wait(timeout=10)
    except subprocess.TimeoutExpired:
        serve.kill()
        serve.wait()


def points_started(trace: Path) -> bool:
    """Both engines marked the start of a point in a FABMETER_TRACE_PHASES file."""
    text = trace.read_text() if trace.exists() else ""
    return "client point" in text and "server point" in text


def engines_alive() -> str:
    """Every fabmeter-engine process now, one line each: pid, parent, state, kernel wait channel and command
    line (what a test that waited in vain reports, so that its failure names who was still there)."""
    lines = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if "fabmeter-engine" not in args.split(" ", 1)[0]:
                continue
            st, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            wchan = (proc / "wchan").read_text()
        except (OSError, ValueError):
            continue
        lines.append(f"pid {proc.name} ppid {ppid} {st} wchan {wchan or '-'}: {args}")
    return "\n".join(sorted(lines)) or "(no engine left)"


def state(pid: int) -> str:
    """The process's state letter (R, S, T, Z, ...); "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def alive(pid: int) -> bool:
    return state(pid) not in ("", "Z")


def wait_until(pred, timeout: float) -> bool:
    """Polls `pred` until it is true or `timeout` seconds passed; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())


def start_serves(fm, hosts: list[str], port: int, token_file, prefixes=None, relay_to: str | None = None,
                 extra: tuple = ()):
    """`fabmeter serve` on each host (in its namespace: `prefixes`), all on one port, `--relay-to` all the hosts
    unless `relay_to` says otherwise ("" for none), with `extra` arguments; returns them once each listens, or stops
    them all."""
    relay_to = ",".join(hosts) if relay_to is None else relay_to
    serves = []
    try:
        for i, host in enumerate(hosts):
            args = ["serve", "--bind", host, "--port", port, "--token-file", token_file, *extra]
            serves.append(fm.popen(*args, *(["--relay-to", relay_to] if relay_to else []),
                                   prefix=prefixes[i] if prefixes else ()))
        for s in serves:
            line = s.stdout.readline()
            if not line:   # it ended before listening: its reason is on stderr
                s.wait(timeout=10)
                pytest.fail(f"serve {s.args} ended ({s.returncode}) before listening: {s.stderr.read().strip()}")
            assert json.loads(line)["event"] == "listening"
    except BaseException:
        stop_serves(serves)
        raise
    return serves


def stop_serves(serves, sig=signal.SIGTERM) -> None:
    for s in serves:
        if s.poll() is None:
            s.send_signal(sig)
    for s in serves:
        try:
            s.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            s.kill()
            s.communicate()


def free_port() -> int:
    """A loopback port free at this moment for TCP and UDP, below the kernel's ephemeral range: a port from that
    range (what binding port 0 hands out) may become the source port of any connection made meanwhile, and a
    serve's later bind to it then fails."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        try:
            with socket.socket() as t, socket.socket(type=socket.SOCK_DGRAM) as u:
                t.bind(("127.0.0.1", port))
                u.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port below the ephemeral range")


@pytest.fixture
def token_file(tmp_path):
    """A fresh shared secret in a file only its owner reads (a module may define its own)."""
    path = tmp_path / "token"
    path.write_text(os.urandom(16).hex() + "\n")
    path.chmod(0o600)
    return str(path)


@pytest.fixture
def serve(fm):
    """Starts `fabmeter serve --port 0 ARGS...`; returns (process, listening event)."""
    started = []

    def start(*args):
        proc = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0", *args)
        line = proc.stdout.readline()
        assert line, f"server printed nothing: {proc.stderr.read() if proc.poll() is not None else ''}"
        event = json.loads(line)
        assert event["event"] == "listening", event
        started.append(proc)
        return proc, event

    yield start
    for proc in started:
        if proc.poll() is None:
            stop_serve(proc)


def refusal(fm, engine, args: list[str], dry_run: bool) -> str:
    """The one line `fabmeter ARGS` (or the engine's `run ARGS --dry-run`, which checks the plan and runs
    nothing) refuses ARGS with, exit 2."""
    if dry_run:
        r = subprocess.run([str(engine), "run", *args, "--server", "127.0.0.1:1", "--dry-run"],
                           capture_output=True, text=True, timeout=10)
    else:
        r = fm.run(*args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    return r.stderr


@pytest.fixture(scope="session")
def fixture_report(tmp_path_factory) -> tuple[Path, Path]:
    """tests/report_fixture.py's results folder and the report `fabmeter report` (no engine needed) wrote of it,
    made once for the report tests that only read them: drawing its figures takes most of half a minute."""
    import report_fixture
    root = report_fixture.build(tmp_path_factory.mktemp("results"))
    r = Fabmeter("report-test").run("report", root)
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path == root / "report.html" and path.is_file()
    return root, path
