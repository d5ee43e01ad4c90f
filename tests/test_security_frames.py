"""The control channel under attack, against a live `fabmeter serve` on
loopback: oversized, unknown, truncated and mutated frames, bad proofs,
wrong or missing tokens, a frozen (SIGSTOPped) client or server. After each blow the
server must still be up and serve a normal client at once."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import random
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import ENGINE, alive, cli_cmd, one_line_error, points_started, wait_until
from test_faults import NOTICE_S, SLACK_S  # the survivor's bound, and the slack of a busy 2-core machine

# Frame types (engine/include/fabmeter/ctrl.hpp).
HELLO, WELCOME, REFUSE, EXCHANGE, BARRIER, END_POINT, BYE, CHALLENGE, AUTH, HEARTBEAT, FAIL, CPU_COST = range(1, 13)
PROTOCOL = 9


def frame(ftype: int, body: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack("<IB", len(body) if length is None else length, ftype) + body


def sealer(token: bytes, hello: bytes, server_nonce: bytes, welcome_body: bytes, from_server: bool = True,
           first: int = 0):
    """One end's frames after the welcome, as docs/security.md specifies them: the session key is HKDF-SHA-256
    (RFC 5869 over Python's hmac) of the token, salted with both nonces; each frame's tag covers direction,
    number (from `first`), type, length and body. Returns seal(type, body) -> the whole frame."""
    client_nonce = bytes.fromhex(hello.split(b"\n")[2].decode())
    prk = hmac.new(client_nonce + server_nonce, token, hashlib.sha256).digest()
    info = b"fabmeter-v7 session\0" + hashlib.sha256(hello).digest() + hashlib.sha256(welcome_body).digest()
    key = hmac.new(prk, info + b"\x01", hashlib.sha256).digest()
    numbers = itertools.count(first)

    def seal(ftype: int, body: bytes) -> bytes:
        head = bytes([2 if from_server else 1]) + struct.pack("<QBI", next(numbers), ftype, len(body))
        return frame(ftype, body + hmac.new(key, head + body, hashlib.sha256).digest())
    return seal


def hello_body(nonce: bytes | None = None, version: int = PROTOCOL, host: str = "attacker-host",
               params: str = "experiment=lat\ntransport=tcp\n") -> bytes:
    """A hello as the engine's client writes it, with no relay, tool, cpus or hop line (fabmeter/handshake.hpp)."""
    nonce = os.urandom(32) if nonce is None else nonce
    return f"{version}\n{host}\n{nonce.hex()}\n\n\n\n\n{params}".encode()


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    hdr = _read_exact(sock, 5)
    length, ftype = struct.unpack("<IB", hdr)
    return ftype, _read_exact(sock, length)


def _read_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def shut_both(*socks: socket.socket) -> None:
    """A proxy's end: both sides shut down, so that the pump the other way returns too."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


@pytest.fixture
def token_file(tmp_path) -> Path:
    f = tmp_path / "token"
    f.write_text(os.urandom(24).hex() + "\n")
    f.chmod(0o600)
    return f


class Server:
    """`fabmeter serve` on 127.0.0.1, any port; stderr collected by a thread."""

    def __init__(self, env: dict, *args: str, bind: str = "127.0.0.1"):
        self.proc = cli_popen(env, "serve", "--bind", bind, "--port", "0", *args)
        line = self.proc.stdout.readline()
        assert line, f"server did not start: {self.proc.stderr.read()}"
        self.port = json.loads(line)["port"]
        self.err: list[str] = []
        self._t = threading.Thread(target=lambda: self.err.extend(iter(self.proc.stderr.readline, "")), daemon=True)
        self._t.start()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def sessions(self) -> list[int]:
        """The session processes (the server forks one per connection)."""
        try:
            return [int(x) for x in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()]
        except OSError:
            return []

    def status(self, key: str) -> int:
        """VmHWM / VmPeak of the server process, kB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._t.join(timeout=2)


@pytest.fixture
def clean_env(fm) -> dict:
    env = dict(fm.env)
    env.pop("FABMETER_TOKEN", None)
    return env


def engine_client(env: dict, port: int, *extra: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENGINE), "run", "lat", "-t", "tcp", "-n", "200", "--server", f"127.0.0.1:{port}", *extra],
                          env=env, capture_output=True, text=True, timeout=timeout)


def normal_client(fm, env: dict, port: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(fm_cmd("lat", "-t", "tcp", "-n", "200", "--server", f"127.0.0.1:{port}", *extra),
                          env=env, capture_output=True, text=True, timeout=30)


def fm_cmd(*args: str) -> list[str]:
    return cli_cmd(*args)


def cli_popen(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(cli_cmd(*args), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def throw(port: int, data: bytes, answer: bool = False) -> bytes:
    """One connection: send `data`, half-close, read what comes back until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # the server may already have closed on a bad header
            pass
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        return got


def test_giant_length_frame_costs_nothing(fm, clean_env):
    """One 37-byte frame used to make the server allocate 4 GiB and stall the next client."""
    srv = Server(clean_env)
    try:
        t0 = time.monotonic()
        throw(srv.port, frame(HELLO, os.urandom(32), length=0xFFFFFFFF))
        assert time.monotonic() - t0 < 1.5, "the server kept the connection after an impossible length"
        throw(srv.port, frame(EXCHANGE, b"x" * 32, length=0xFFFFFFF0))
        assert srv.alive(), f"server died: {srv.err}"
        t0 = time.monotonic()
        r = normal_client(fm, clean_env, srv.port)
        assert r.returncode == 0, r.stderr
        assert time.monotonic() - t0 < 10
        assert srv.status("VmHWM") < 200_000, f"server peak RSS {srv.status('VmHWM')} kB"
        assert any("exceeds its limit" in ln for ln in srv.err), srv.err
    finally:
        srv.stop()


def _mutants(rng: random.Random, good_hello: bytes) -> list[bytes]:
    out = []
    for _ in range(40):
        out.append(rng.randbytes(rng.randrange(0, 600)))                                 # garbage
        out.append(frame(rng.choice([0, *range(12, 256)]), rng.randbytes(8)))              # unknown type
        out.append(frame(rng.randrange(1, 12), b"", length=rng.randrange(1 << 14, 1 << 32)))  # oversized
        b = bytearray(good_hello)
        for _ in range(rng.randrange(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        out.append(bytes(b))                                                                # mutated hello
        out.append(good_hello[: rng.randrange(len(good_hello))])                            # truncated
        out.append(frame(HEARTBEAT) * rng.randrange(1, 50) + frame(rng.choice([WELCOME, EXCHANGE, BYE, AUTH])))
        out.append(frame(HELLO, hello_body(nonce=rng.randbytes(rng.randrange(0, 40)))))     # bad nonce length
        out.append(frame(HELLO, rng.choice([b"", b"\n\n\n", b"99999999999999999999\n", b"2\n\n\n",
                                            b"-1\nx\n" + b"0" * 64 + b"\n", hello_body(version=1)])))
        out.append(frame(HEARTBEAT, b"abc"))                                                # heartbeat with a body
    return out


def _bad_auth(port: int, rng: random.Random) -> tuple[int, bytes]:
    """A well-formed hello, then a wrong (or malformed) proof: the server must answer 'fail'. Each from a
    loopback address of its own: the server slows down a source that keeps failing (auth_failures.hpp)."""
    source = (f"127.1.{rng.randrange(256)}.{rng.randrange(1, 255)}", 0)
    with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=source) as s:
        s.sendall(frame(HELLO, hello_body(nonce=rng.randbytes(32))))
        ftype, nonce = read_frame(s)
        assert ftype == CHALLENGE and len(nonce) == 32
        proof = rng.choice([rng.randbytes(32), b"\0" * 32, rng.randbytes(rng.randrange(0, 32))])
        s.sendall(frame(AUTH, proof))
        try:
            return read_frame(s)
        except (ConnectionError, ConnectionResetError):
            return (0, b"")


def test_random_and_mutated_frames_leave_the_server_serving(fm, clean_env, token_file, seed):
    srv = Server(clean_env, "--token-file", str(token_file))
    rng = random.Random(seed)
    good_hello = frame(HELLO, hello_body(nonce=rng.randbytes(32)))
    thrown = 0
    deadline = time.monotonic() + 50
    try:
        for batch in range(6):
            for data in _mutants(rng, good_hello):
                throw(srv.port, data)
                thrown += 1
            for _ in range(20):
                ftype, text = _bad_auth(srv.port, rng)
                assert ftype in (FAIL, 0), (ftype, text)
                if ftype == FAIL:
                    assert b"authentication failed" in text
                thrown += 1
            assert srv.alive(), f"server died after batch {batch}: {srv.err[-3:]}"
            r = normal_client(fm, clean_env, srv.port, "--token-file", str(token_file))
            assert r.returncode == 0, f"batch {batch}: {r.stderr}"
            assert time.monotonic() < deadline, f"only {batch + 1} batches in the time budget"
        assert thrown >= 2000
        assert srv.status("VmHWM") < 200_000
    finally:
        srv.stop()


def test_wrong_and_missing_token_refused(fm, clean_env, token_file, tmp_path):
    srv = Server(clean_env, "--token-file", str(token_file))
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-right-secret-at-all\n")
    wrong.chmod(0o600)
    try:
        r = normal_client(fm, clean_env, srv.port, "--token-file", str(wrong))
        assert r.returncode == 3, r.stderr
        assert "authentication failed" in one_line_error(r.stderr)
        r = normal_client(fm, clean_env, srv.port)
        assert r.returncode == 3, r.stderr
        assert "authentication failed" in one_line_error(r.stderr)
        env = dict(clean_env, FABMETER_TOKEN=token_file.read_text().strip())
        r = normal_client(fm, env, srv.port)
        assert r.returncode == 0, r.stderr
        assert srv.alive()
    finally:
        srv.stop()


def test_bad_token_files_refused(fm, clean_env, tmp_path):
    short = tmp_path / "short"
    short.write_text("tooshort\n")
    short.chmod(0o600)
    shared = tmp_path / "shared"
    shared.write_text(os.urandom(24).hex())
    shared.chmod(0o644)
    for f, why in ((short, "at least 16"), (shared, "readable by every user")):
        r = subprocess.run([str(ENGINE), "serve", "--port", "0", "--once", "--token-file", str(f)],
                           env=clean_env, capture_output=True, text=True, timeout=10)
        assert r.returncode == 2 and why in r.stderr, r.stderr


def test_token_file_fifo_or_missing_exits_2_at_once(fm, clean_env, tmp_path):
    # A FIFO blocked the old open() until someone wrote to it: serve, client
    # and mesh hung without a word. A missing file was exit 3 (not usage).
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    for path, why in ((fifo, "not a regular file"), (tmp_path / "missing", "No such file")):
        for args in (("serve", "--port", "0"), ("run", "lat", "-t", "tcp", "--server", "127.0.0.1:9")):
            t0 = time.monotonic()
            r = subprocess.run([str(ENGINE), *args, "--token-file", str(path)], env=clean_env, capture_output=True,
                               text=True, timeout=5, stdin=subprocess.DEVNULL)
            assert time.monotonic() - t0 < 1.0 and r.returncode == 2, (args, r.returncode, r.stderr)
            (line,) = r.stderr.strip().splitlines()
            assert why in line, line
        for args in (("serve", "--port", "0"), ("lat", "-t", "tcp", "--server", "127.0.0.1:9", "-n", "10"),
                     ("mesh", "-t", "udp", "--launch", "local", "--ranks", "2")):
            r = subprocess.run(fm_cmd(*args, "--token-file", str(path)), env=clean_env, capture_output=True,
                               text=True, timeout=10, stdin=subprocess.DEVNULL)
            assert r.returncode == 2, (args, r.returncode, r.stderr)
            (line,) = r.stderr.strip().splitlines()
            assert why in line, line


def test_client_authenticates_the_server(clean_env, token_file):
    """A fake server that does not know the token cannot pass as the real one."""
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]

    def fake():
        conn, _ = lsock.accept()
        with conn:
            read_frame(conn)
            conn.sendall(frame(CHALLENGE, os.urandom(32)))
            read_frame(conn)
            conn.sendall(frame(WELCOME, os.urandom(32).hex().encode() + b"\nfake-host\n{}"))
            time.sleep(1)

    t = threading.Thread(target=fake, daemon=True)
    t.start()
    r = engine_client(clean_env, port, "--token-file", str(token_file))
    lsock.close()
    assert r.returncode == 3, r.stderr
    assert "the server did not prove it knows the token" in r.stderr


def test_token_never_crosses_the_wire(fm, clean_env, token_file):
    srv = Server(clean_env, "--token-file", str(token_file))
    lsock = socket.create_server(("127.0.0.1", 0))
    seen = {"c2s": bytearray(), "s2c": bytearray()}

    def pump(src, dst, key):
        try:
            while data := src.recv(65536):
                seen[key] += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            shut_both(src, dst)

    def proxy():
        c, _ = lsock.accept()
        s = socket.create_connection(("127.0.0.1", srv.port))
        a = threading.Thread(target=pump, args=(c, s, "c2s"))
        b = threading.Thread(target=pump, args=(s, c, "s2c"))
        a.start(), b.start()
        a.join(), b.join()

    t = threading.Thread(target=proxy, daemon=True)
    t.start()
    try:
        r = engine_client(clean_env, lsock.getsockname()[1], "--token-file", str(token_file))
        assert r.returncode == 0, r.stderr
        t.join(timeout=10)
        secret = token_file.read_text().strip().encode()
        assert len(seen["c2s"]) > 100 and len(seen["s2c"]) > 100
        for key, data in seen.items():
            assert secret not in data, f"the token crossed the wire ({key})"
            assert secret[:16] not in data and secret[-16:] not in data, key
    finally:
        lsock.close()
        srv.stop()


@pytest.mark.parametrize("bind,token,warns", [("0.0.0.0", False, True), ("0.0.0.0", True, False),
                                              ("127.0.0.1", False, False)])
def test_non_loopback_bind_without_token_warns(fm, clean_env, token_file, bind, token, warns):
    args = ["--token-file", str(token_file)] if token else []
    srv = Server(clean_env, *args, bind=bind)
    srv.stop()
    warned = any("warning" in ln and "without a token" in ln for ln in srv.err)
    assert warned == warns, srv.err


# A long --timeout-ms: the heartbeat, not the session's timeout, must notice.
FROZEN_CASES = [("lat", "tcp", []), ("stream", "udp", ["--rate", "1000"]), ("bw", "tcp", [])]


@pytest.mark.parametrize("experiment,transport,extra", FROZEN_CASES)
def test_frozen_server_ends_the_client(fm, clean_env, experiment, transport, extra, tmp_path):
    # Struck once both engines are in the point (their phase marks): on a loaded machine the client's start-up
    # alone outlasted a fixed 2 s wait, and no session was there to freeze.
    trace = tmp_path / "phases"
    env = dict(clean_env, FABMETER_TRACE_PHASES=str(trace))
    srv = Server(env)
    try:
        client = cli_popen(env, experiment, "-t", transport, "--duration", "30", "--timeout-ms", "15000", *extra,
                           "--server", f"127.0.0.1:{srv.port}")
        assert wait_until(lambda: points_started(trace) or client.poll() is not None, 30)
        assert client.poll() is None, client.stderr.read()
        (session,) = srv.sessions()
        engine = next(int(ln.split()[2]) for ln in trace.read_text().splitlines() if ln.startswith("client point "))
        os.kill(session, signal.SIGSTOP)
        t0 = time.monotonic()
        # The client engine's end is the notice; the CLI's own exit after it is no part of the bound.
        wait_until(lambda: not alive(engine), 10)
        took = time.monotonic() - t0
        try:
            client.wait(timeout=10)
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()
        err = client.stderr.read()
        assert client.returncode == 3, err
        assert took < NOTICE_S + SLACK_S, f"client noticed the frozen server after {took:.1f} s"
        assert "stopped answering" in one_line_error(err)
    finally:
        srv.stop()


@pytest.mark.parametrize("experiment,transport,extra", FROZEN_CASES[:2])
def test_frozen_client_ends_the_session(fm, clean_env, experiment, transport, extra, tmp_path):
    trace = tmp_path / "phases"   # struck in the point, as test_frozen_server_ends_the_client
    env = dict(clean_env, FABMETER_TRACE_PHASES=str(trace))
    srv = Server(env)
    client = subprocess.Popen([str(ENGINE), "run", experiment, "-t", transport, "--duration", "30",
                               "--timeout-ms", "15000", *extra, "--server", f"127.0.0.1:{srv.port}"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: points_started(trace) or client.poll() is not None, 30)
        assert client.poll() is None
        client.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        assert wait_until(lambda: any("session ended" in ln for ln in srv.err), 8), srv.err
        assert time.monotonic() - t0 < NOTICE_S + SLACK_S
        assert any("stopped answering" in ln for ln in srv.err), srv.err
        client.kill()
        client.wait()
        r = normal_client(fm, clean_env, srv.port)
        assert r.returncode == 0, r.stderr
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        srv.stop()


def test_local_run_has_its_own_token(fm, clean_env):
    """A local run's server admits only its client: a fresh secret per run, in both environments."""
    tokens = []
    for _ in range(2):
        run = cli_popen(clean_env, "lat", "-t", "tcp", "--duration", "2")
        seen: dict[str, bytes] = {}

        def engines():
            for d in Path("/proc").iterdir():
                if not d.name.isdigit():
                    continue
                try:
                    if f"FABMETER_TEST_TAG={fm.tag}".encode() not in (d / "environ").read_bytes():
                        continue
                    cmd = (d / "cmdline").read_bytes().split(b"\0")
                    env = dict(kv.split(b"=", 1) for kv in (d / "environ").read_bytes().split(b"\0") if b"=" in kv)
                except OSError:
                    continue
                if cmd[0].endswith(b"fabmeter-engine") and len(cmd) > 1 and cmd[1] in (b"serve", b"run"):
                    seen[cmd[1].decode()] = env.get(b"FABMETER_TOKEN", b"")
            return len(seen) == 2

        assert wait_until(engines, 10), seen
        out, err = run.communicate(timeout=30)
        assert run.returncode == 0, err
        assert seen["serve"] == seen["run"] and len(seen["serve"]) >= 32
        tokens.append(seen["serve"])
    assert tokens[0] != tokens[1]
