"""Faults on every transport, looped: kill -9 or SIGSTOP the client or the
server's session process at a random moment of a random phase (hello,
transport connect, the measured point, result writing).

Each fault must end the other side with a one-line error within 5 s, keep
what was measured, leave no process and no /dev/shm segment behind, and the
`fabmeter serve` that lost a session serves the next client (the next round
of the loop, and a clean run at the end).

The engines mark their phases in the file named by FABMETER_TRACE_PHASES (a
test hook set by whoever starts the engine, never by the other end). Rounds per
transport: FM_FAULT_ROUNDS (default 1: every victim x action once, phases
drawn at random); `make soak` runs many. FM_SEED replays a run (conftest's seed).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import TRANSPORTS, alive, state, stop_serve, tagged_engine_procs, wait_until
from test_twohost import read_listening

PHASES = ["hello", "connect", "point", "results"]
CASES = [(victim, action) for victim in ("client", "server") for action in ("kill", "stop")]
assert len(CASES) == len(PHASES)  # a round pairs each case with one phase
ROUNDS = int(os.environ.get("FM_FAULT_ROUNDS", "1"))
NOTICE_S = 5.0    # the bound for the surviving side
SLACK_S = 1.5     # process start-up and a busy 2-core machine


def shm_segments() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("fabmeter-*")}


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def socket_fds(pid: int) -> int:
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            n += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return n


def accept_queue(port: int) -> int:
    """Connections waiting in the kernel's accept queue of the loopback TCP listener on `port`."""
    for ln in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = ln.split()
        if f[3] == "0A" and int(f[1].split(":")[1], 16) == port:
            return int(f[4].split(":")[1], 16)
    return 0


def settled(serve: subprocess.Popen, port: int, listening_fds: int) -> bool:
    """The serve has done with every connection made so far: none waits to be accepted, none is held silent
    (a socket beyond those it listens with), no session process is left. Else a session for the last round's
    connection could start, and mark its hello, in the next round's trace."""
    return not accept_queue(port) and socket_fds(serve.pid) == listening_fds and not children(serve.pid)


def session_expected(marks: list[tuple[str, str, int]], client_pid: int) -> bool:
    """Whether the server must have started a session for the client engine `client_pid`, from that engine's
    final marks: once it marked `hello-sent` the hello is out. A client struck before that mark (killed or
    stopped) may have sent nothing, and a connection that said nothing gets no session process
    (docs/security.md): only the serve's own checks apply then."""
    return ("client", "hello-sent", client_pid) in marks


class Trace:
    """The phase marks the engines append to one file: 'ROLE PHASE PID'."""

    def __init__(self, path: Path):
        self.path = path
        path.write_text("")

    def reset(self) -> None:
        self.path.write_text("")

    def marks(self) -> list[tuple[str, str, int]]:
        out = []
        for ln in self.path.read_text().splitlines():
            parts = ln.split()
            if len(parts) == 3:
                out.append((parts[0], parts[1], int(parts[2])))
        return out

    def find(self, role: str, phase: str) -> int | None:
        for r, p, pid in self.marks():
            if r == role and p == phase:
                return pid
        return None


ARGS = {  # about two seconds of measuring, so a random delay lands in every phase
    "shm": ["lat", "--duration", "2"],
    "tcp": ["lat", "--duration", "2"],
    "udp": ["oneway", "--bursts", "40", "--burst-size", "200", "--pause-us", "20000", "-s", "64"],
    "zmq": ["lat", "--duration", "2", "--warmup", "100"],
    "nng": ["lat", "--duration", "2", "--warmup", "100"],
    "nanomsg": ["lat", "--duration", "2", "--warmup", "100"],
    "ofi": ["bw", "--duration", "2", "--warmup", "100"],
}


def fault_round(fm, serve: subprocess.Popen, port: int, listening_fds: int, trace: Trace, transport: str,
                victim: str, action: str, phase: str, delay: float, tmp: Path) -> bool:
    """One run with one fault; False if the run ended before the fault struck. `listening_fds`: the serve's
    sockets when it has no connection (settled)."""
    what = f"{transport}: {action} {victim} in {phase} +{delay * 1000:.0f} ms"
    trace.reset()
    out = tmp / f"{transport}-{victim}-{action}-{phase}"
    experiment, *rest = ARGS[transport]
    before_shm = shm_segments()
    # A long control timeout: only the heartbeat can meet the 5 s bound.
    client = fm.popen(experiment, "-t", transport, *rest, "--timeout-ms", "15000", "--server", f"127.0.0.1:{port}",
                      "--cpus", "0", "--out", out)
    stopped: list[int] = []
    try:
        role = "client" if victim == "client" else "server"
        assert wait_until(lambda: trace.find(role, phase) is not None or client.poll() is not None, 30), \
            f"{what}: the {role} never reached {phase}"
        assert trace.find(role, phase) is not None, f"{what}: the run ended before {phase}: {client.stderr.read()}"
        if client.poll() is not None:
            return False  # it reached the phase and ended (results): nothing left to strike
        time.sleep(delay)
        pid = trace.find(role, phase)
        try:
            os.kill(pid, signal.SIGKILL if action == "kill" else signal.SIGSTOP)
        except ProcessLookupError:
            return False  # that side had already finished
        if action == "stop":
            stopped.append(pid)
        t_fault = time.monotonic()

        if victim == "server":
            # The client notices (control channel closed, or no heartbeat) and ends.
            try:
                _, stderr = client.communicate(timeout=NOTICE_S + SLACK_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{what}: the client did not end within {NOTICE_S + SLACK_S:.1f} s")
            took = time.monotonic() - t_fault
            if client.returncode == 0:
                return False  # the run finished before the fault landed: nothing to check
            assert client.returncode == 3, f"{what}: exit {client.returncode}: {stderr}"
            lines = [ln for ln in stderr.splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("fabmeter: error: "), f"{what}: {lines}"
            assert took < NOTICE_S + SLACK_S, f"{what}: the client took {took:.1f} s"
            doc = json.loads((out / "run.json").read_text())
            assert doc["status"] == "failed" and doc["message"], f"{what}: {doc['status']}"
            if doc["points"]:
                p = doc["points"][-1]
                # In "results" the server had finished the point: a client holding
                # all of it keeps it whole.
                if phase != "results":
                    assert p["partial"] is True, f"{what}: the point cut short is not marked partial"
                for name in (p.get("samples") or {}).values():
                    assert (out / name).is_file(), f"{what}: {name} missing"
        else:
            # The server's session process ends by itself; the listener stays. The client's marks are final
            # once the signal has taken it (a kill lets a write of a mark in progress finish).
            assert wait_until(lambda: state(pid) in ("", "Z", "T"), NOTICE_S), f"{what}: the signal did not take"
            if session_expected(trace.marks(), pid):
                assert wait_until(lambda: trace.find("server", "hello") is not None, NOTICE_S + SLACK_S), \
                    f"{what}: no server session"
                session = trace.find("server", "hello")
                assert wait_until(lambda: not alive(session) or session not in children(serve.pid),
                                  NOTICE_S + SLACK_S), f"{what}: the server session did not end within 5 s"
                took = time.monotonic() - t_fault
                assert took < NOTICE_S + SLACK_S, f"{what}: the server session took {took:.1f} s"
            else:
                assert phase == "hello", f"{what}: no hello-sent mark past the hello"
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if client.poll() is None:
            client.kill()
        client.wait()
    assert serve.poll() is None, f"{what}: fabmeter serve itself died"
    assert wait_until(lambda: settled(serve, port, listening_fds), NOTICE_S), f"{what}: connections or session processes left"
    left = shm_segments() - before_shm
    assert wait_until(lambda: not (shm_segments() - before_shm), 2.0), f"{what}: /dev/shm left: {left}"
    return True


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_faults(fm, tmp_path, transport, seed):
    rng = random.Random(f"{seed}-{transport}")
    trace = Trace(tmp_path / "phases")
    env = dict(fm.env, FABMETER_TRACE_PHASES=str(trace.path))
    fm.env = env  # the client engines mark their phases too
    serve = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0", "--cpu", "1")
    try:
        port = read_listening(serve)["port"]
        listening_fds = socket_fds(serve.pid)
        struck = 0
        for k in range(ROUNDS):
            # Each round strikes every phase once, in a random order: drawn
            # independently, three "results" faults (which often find the
            # run already over) could leave too few that strike.
            for (victim, action), phase in zip(CASES, rng.sample(PHASES, len(PHASES))):
                # Only the point lasts long enough to land anywhere in; the
                # other phases take milliseconds, so strike them at once.
                delay = rng.uniform(0, 0.3) if phase == "point" else 0.0
                struck += fault_round(fm, serve, port, listening_fds, trace, transport, victim, action, phase,
                                      delay, tmp_path / f"r{k}")
        # A fault drawn for the last moments may find the run over; most must strike.
        assert struck >= len(CASES) * ROUNDS // 2, f"only {struck} faults struck"
        # After all that, a normal client is served.
        r = fm.run("lat", "-t", transport, "-n", "200", "--warmup", "10", "--server", f"127.0.0.1:{port}",
                   "--cpus", "0", "--json", timeout=60)
        assert r.returncode == 0, r.stderr
    finally:
        stop_serve(serve)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_faults_while_connecting(fm, tmp_path, transport):
    # The transports' own connection waits (a data listener's accept, a
    # library's first message, a connection event) must watch the control
    # channel: a client killed there, or a server frozen there, is noticed
    # within the bound, not after --timeout-ms (15 s here). Each fault must
    # strike: the run lasts seconds past the connect, so one that ends first
    # (fault_round returns False) means the fault was not tested.
    trace = Trace(tmp_path / "phases")
    fm.env = dict(fm.env, FABMETER_TRACE_PHASES=str(trace.path))
    serve = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0", "--cpu", "1")
    try:
        port = read_listening(serve)["port"]
        listening_fds = socket_fds(serve.pid)
        for victim, action in (("client", "kill"), ("server", "stop")):
            assert fault_round(fm, serve, port, listening_fds, trace, transport, victim, action, "connect", 0.0,
                               tmp_path / victim), \
                f"{transport}: {action} {victim} in connect: the run ended before the fault struck"
    finally:
        stop_serve(serve)


def test_a_session_is_expected_once_the_hello_is_out():
    hello, sent = ("client", "hello", 7), ("client", "hello-sent", 7)
    assert not session_expected([hello], 7)                                    # struck before the hello left
    assert session_expected([hello, ("server", "hello", 9), sent], 7)
    assert not session_expected([hello, ("client", "hello-sent", 8)], 7)     # another run's engine


@pytest.mark.parametrize("action", ["kill", "stop"])
def test_a_client_struck_before_its_hello_passes(fm, tmp_path, action):
    # The client stops itself at its hello mark, before it sends the hello (FABMETER_STOP_AT): the fault lands
    # before the hello every time, the server has no session to end, and the round passes.
    trace = Trace(tmp_path / "phases")
    fm.env = dict(fm.env, FABMETER_TRACE_PHASES=str(trace.path), FABMETER_STOP_AT="client hello")
    serve = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0", "--cpu", "1")
    try:
        port = read_listening(serve)["port"]
        assert fault_round(fm, serve, port, socket_fds(serve.pid), trace, "tcp", "client", action, "hello", 0.0,
                           tmp_path / "run")
    finally:
        stop_serve(serve)


def test_a_hello_sent_without_a_session_fails(fm, tmp_path):
    # The client stops itself once its hello is out; the serve marks nothing (no FABMETER_TRACE_PHASES), as one
    # that started no session for it would: the round must fail, not excuse it.
    serve = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0", "--cpu", "1")
    trace = Trace(tmp_path / "phases")
    fm.env = dict(fm.env, FABMETER_TRACE_PHASES=str(trace.path), FABMETER_STOP_AT="client hello-sent")
    try:
        port = read_listening(serve)["port"]
        with pytest.raises(AssertionError, match="no server session"):
            fault_round(fm, serve, port, socket_fds(serve.pid), trace, "tcp", "client", "stop", "hello-sent", 0.0,
                        tmp_path / "run")
    finally:
        stop_serve(serve)


def test_the_beat_thread_holds_the_control_socket_alone(fm):
    """In the client and in the server's session, the heartbeat thread's
    descriptor table is its control socket alone, so the session's thread has
    one to itself: shared, every system call on a descriptor would take a
    reference on its file (docs/performance.md)."""
    run = fm.popen("lat", "-t", "tcp", "--duration", "4", "--json")
    seen = set()  # engines seen with two tasks and the beat's table as it should be
    deadline = time.monotonic() + 30
    while run.poll() is None and len(seen) < 2 and time.monotonic() < deadline:
        for entry in tagged_engine_procs(fm.tag):
            pid = entry.split(":")[0]
            try:
                tids = sorted(os.listdir(f"/proc/{pid}/task"), key=lambda t: t != pid)  # the main task first
                fds = [set(os.listdir(f"/proc/{pid}/task/{t}/fd")) for t in tids]
            except OSError:
                continue
            # The beat's one descriptor is also the main task's, which has the data socket too.
            if len(fds) == 2 and len(fds[1]) == 1 and fds[1] < fds[0]:
                seen.add(pid)
        time.sleep(0.02)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert len(seen) >= 2, f"the beat thread's table was the control socket alone in {len(seen)} of the 2 engines"


def test_a_point_whose_announcement_finds_the_server_gone_is_kept(fm, tmp_path):
    # Both engines stop themselves at their point's mark (FABMETER_STOP_AT). The server's session is then
    # reset (`ss -K`: an RST, as a kill with unread control bytes sends) and killed. The client, resumed,
    # sends its few bw messages into the shm ring, which has room for them all, so nothing on its data
    # path fails and its guard (every 64 messages) never looks: the first it learns of the loss is its
    # announcement's send failing. What it measured stays, a partial point (as a UD sender in the
    # Soft-RoCE guest, whose guard is as rare at TCG's rate, when its server is killed mid-point).
    trace = Trace(tmp_path / "phases")
    fm.env = dict(fm.env, FABMETER_TRACE_PHASES=str(trace.path), FABMETER_STOP_AT="server point")
    serve = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0", "--cpu", "1")
    client = None
    try:
        port = read_listening(serve)["port"]
        fm.env["FABMETER_STOP_AT"] = "client point"
        out = tmp_path / "run"
        client = fm.popen("bw", "-t", "shm", "-n", "40", "--warmup", "10", "--server", f"127.0.0.1:{port}",
                          "--cpus", "0", "--out", out)
        assert wait_until(lambda: trace.find("client", "point") and trace.find("server", "point"), 30), \
            trace.marks()
        client_pid, session = trace.find("client", "point"), trace.find("server", "point")
        assert wait_until(lambda: state(client_pid) == "T" and state(session) == "T", 10)
        r = subprocess.run(["ss", "-K", "state", "established", "sport", "=", f":{port}"], capture_output=True,
                           text=True)
        assert f":{port}" in r.stdout, r
        os.kill(session, signal.SIGKILL)
        os.kill(client_pid, signal.SIGCONT)
        _, stderr = client.communicate(timeout=NOTICE_S + SLACK_S)
        assert client.returncode == 3, stderr
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(
            "fabmeter: error: the other end closed the control channel (partial results in "), lines
        doc = json.loads((out / "run.json").read_text())
        assert doc["status"] == "failed", doc["status"]
        assert len(doc["points"]) == 1 and doc["points"][0]["partial"] is True, doc["points"]
    finally:
        if client and client.poll() is None:
            client.kill()
            client.wait()
        stop_serve(serve)


def test_a_point_whose_server_freezes_before_its_cpu_cost_is_kept(fm, tmp_path):
    # The server's session stops itself at its results mark, after its last reply and before it sends
    # the point's cpu cost. The client's loop has ended on its own (as a lossy point that runs out its
    # time with its server frozen, UD in the Soft-RoCE guest), and its wait for that cost meets the
    # silence: what it measured stays, a partial point.
    trace = Trace(tmp_path / "phases")
    fm.env = dict(fm.env, FABMETER_TRACE_PHASES=str(trace.path), FABMETER_STOP_AT="server results")
    serve = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0", "--cpu", "1")
    client = session = None
    try:
        port = read_listening(serve)["port"]
        fm.env.pop("FABMETER_STOP_AT")
        out = tmp_path / "run"
        client = fm.popen("lat", "-t", "tcp", "-n", "200", "--warmup", "10", "--server", f"127.0.0.1:{port}",
                          "--cpus", "0", "--out", out)
        assert wait_until(lambda: trace.find("server", "results"), 30), trace.marks()
        session = trace.find("server", "results")
        assert wait_until(lambda: state(session) == "T", 10)
        started = time.monotonic()
        _, stderr = client.communicate(timeout=NOTICE_S + SLACK_S)
        took = time.monotonic() - started
        assert client.returncode == 3, stderr
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(
            "fabmeter: error: the other end stopped answering") and "(partial results in " in lines[0], lines
        assert took < NOTICE_S + SLACK_S, f"the client took {took:.1f} s"
        doc = json.loads((out / "run.json").read_text())
        assert doc["status"] == "failed", doc["status"]
        assert len(doc["points"]) == 1 and doc["points"][0]["partial"] is True, doc["points"]
        assert doc["points"][0]["iterations"] == 200, doc["points"][0]
    finally:
        if session and alive(session):
            os.kill(session, signal.SIGKILL)
        if client and client.poll() is None:
            client.kill()
            client.wait()
        stop_serve(serve)
