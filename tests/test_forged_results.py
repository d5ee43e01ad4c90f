"""A server (or whoever sits between client and server) lies in its welcome
or in a relayed run's output: the client records nothing of it as its own.
Fake servers here speak the control channel's framing
(engine/include/fabmeter/handshake.hpp) from Python."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import ENGINE, cli_cmd
from test_security_frames import AUTH, CHALLENGE, EXCHANGE, WELCOME, frame, read_frame, sealer

FORGED_POINT = {"type": "point", "experiment": "lat", "size": 32, "iterations": 1000000,
                "rtt_ns": {"p50": 1, "p99": 1}, "one_way_ns": {"p50": 1, "p99": 1}}

# Environments a welcome may carry that must not reach the client's output.
POISONED_ENVS = {
    "extra line": '{"hostname":"evil"}\n' + json.dumps(FORGED_POINT),
    "closes the line early": '{"hostname":"evil"}},"points":99,"version":"forged","x":{"a":1',
    "override keys": '{"hostname":"evil"}, "version": "forged", "env": {}',
    "not an object": '["evil"]',
    "nested too deep": '{"a":{"b":{"c":{"d":{"e":1}}}}}',
    "bad key": '{"Host Name":"evil"}',
    "huge string": json.dumps({"hostname": "x" * 5000}),
    "raw control character": '{"hostname":"a\x01b"}',
    "not JSON": "hostname=evil",
}


def engine_error(stderr: str) -> str:
    """The engine's one error line (and nothing else on stderr)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("fabmeter-engine: error: "), lines
    return lines[0]


class FakeServer:
    """Listens on loopback; `script(conn, hello)` plays the server after the hello."""

    def __init__(self, script):
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.lsock.settimeout(20)
        self.error: list[BaseException] = []

        def serve():
            try:
                conn, _ = self.lsock.accept()
                with conn:
                    conn.settimeout(20)
                    ftype, hello = read_frame(conn)
                    script(conn, hello)
            except (OSError, ConnectionError) as e:  # the client hung up: its side is what is checked
                self.error.append(e)

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()

    def close(self):
        self.thread.join(timeout=20)
        self.lsock.close()


def tokenless_welcome(env: str):
    def script(conn, hello):
        conn.sendall(frame(CHALLENGE))  # no token: no nonce
        conn.sendall(frame(WELCOME, b"\nfake-host\n" + env.encode()))
        conn.recv(1)  # until the client closes
    return script


@pytest.fixture
def env_no_token(fm) -> dict:
    env = dict(fm.env)
    env.pop("FABMETER_TOKEN", None)
    return env


def run_client(env: dict, port: int, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENGINE), "run", "lat", "-t", "tcp", "-n", "200", "--server", f"127.0.0.1:{port}",
                           "--out", str(out), *extra],
                          env=env, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("case", POISONED_ENVS)
def test_poisoned_welcome_environment_is_refused(env_no_token, tmp_path, case):
    srv = FakeServer(tokenless_welcome(POISONED_ENVS[case]))
    r = run_client(env_no_token, srv.port, tmp_path / "out")
    srv.close()
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "malformed environment from the other end" in engine_error(r.stderr)
    assert "evil" not in r.stdout and "forged" not in r.stdout
    assert not [ln for ln in r.stdout.splitlines() if json.loads(ln).get("type") in ("start", "point")]


def test_cli_records_nothing_forged(fm, env_no_token, tmp_path):
    """Through the fabmeter CLI (run.json): one error line, no forged point, no traceback."""
    srv = FakeServer(tokenless_welcome(POISONED_ENVS["extra line"]))
    out = tmp_path / "run"
    r = subprocess.run(cli_cmd("lat", "-t", "tcp", "-n", "200", "--server", f"127.0.0.1:{srv.port}", "--out", str(out)),
                       env=env_no_token, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    srv.close()
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert "malformed environment" in r.stderr
    doc = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {"points": []}
    assert doc.get("points", []) == []
    assert "evil" not in json.dumps(doc)


def test_environment_values_stay_data(env_no_token, tmp_path):
    """A well-formed environment whose strings hold newlines and look like lines is carried
    as data: escaped, inside server_env, one line."""
    env = {"hostname": "a\nb", "x": {"type": "point", "p50": 1}, "cpus": [0, 1]}
    srv = FakeServer(tokenless_welcome(json.dumps(env)))
    r = run_client(env_no_token, srv.port, tmp_path / "out")
    srv.close()
    assert r.returncode != 0  # the fake runs no point
    lines = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert [ln["type"] for ln in lines if ln["type"] == "point"] == []
    start = [ln for ln in lines if ln["type"] == "start"]
    assert len(start) == 1 and start[0]["server_env"] == env
    assert start[0]["version"] != "forged" and start[0]["env"]["hostname"] != "a\nb"


def test_client_with_token_refuses_a_server_without_one(env_no_token, tmp_path):
    """A challenge stripped in the middle (an empty one) cannot downgrade an authenticated client."""
    token = tmp_path / "token"
    token.write_text(os.urandom(24).hex())
    token.chmod(0o600)
    srv = FakeServer(tokenless_welcome('{"hostname":"fake"}'))
    r = run_client(env_no_token, srv.port, tmp_path / "out", "--token-file", str(token))
    srv.close()
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "asks for no token" in engine_error(r.stderr)
    assert '"type": "start"' not in r.stdout and '"type":"start"' not in r.stdout


def relay_lying(token: bytes, lines: list[bytes]):
    """A relay that knows the token (it authenticates) and then returns made-up output lines."""
    def script(conn, hello):
        nonce = os.urandom(32)
        conn.sendall(frame(CHALLENGE, nonce))
        ftype, proof = read_frame(conn)
        assert ftype == AUTH
        client_nonce = bytes.fromhex(hello.split(b"\n")[2].decode())
        transcript = b"fabmeter-v2 server\0" + client_nonce + nonce + hashlib.sha256(hello).digest()
        body = b"relay-host\n{}"
        mac = hmac.new(token, transcript + hashlib.sha256(body).digest(), hashlib.sha256).hexdigest()
        conn.sendall(frame(WELCOME, mac.encode() + b"\n" + body))
        seal = sealer(token, hello, nonce, body)  # every frame from here on authenticated
        ftype, start = read_frame(conn)  # "start 0"
        for line in lines:
            conn.sendall(seal(EXCHANGE, line))
        conn.sendall(seal(EXCHANGE, b"exit 0"))
        conn.recv(1)
    return script


@pytest.mark.parametrize("line", [
    b"out " + json.dumps({"type": "start"}).encode() + b"\n" + json.dumps(FORGED_POINT).encode(),
    b"out not json at all",
    b"err a line\rwith a carriage return",
], ids=["two lines in one", "not json", "control character"])
def test_relayed_output_is_one_line_each(env_no_token, tmp_path, line):
    token = os.urandom(24).hex().encode()
    tf = tmp_path / "token"
    tf.write_bytes(token)
    tf.chmod(0o600)
    srv = FakeServer(relay_lying(token, [line]))
    r = subprocess.run([str(ENGINE), "run", "lat", "-t", "tcp", "-n", "200", "--server", "127.0.0.1:1",
                        "--via", f"127.0.0.1:{srv.port}", "--token-file", str(tf)],
                       env=env_no_token, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    srv.close()
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "relay: the run's output" in engine_error(r.stderr)
    assert "1000000" not in r.stdout


POINT_WITH_SAMPLES = {"type": "point", "samples": {"rtt_ns": "lat-tcp-busy-32B.rtt_ns.npy"}}
SAMPLE_FILE = POINT_WITH_SAMPLES["samples"]["rtt_ns"]


def point_naming(**files: str) -> bytes:
    return b"out " + json.dumps({**POINT_WITH_SAMPLES, "samples": files}).encode()


def run_relayed(env: dict, tmp_path: Path, frames: list[bytes], out: Path) -> subprocess.CompletedProcess:
    """A relayed lat run with --out whose relay (it knows the token) sends `frames`, then exit 0."""
    token = os.urandom(24).hex().encode()
    tf = tmp_path / "token"
    tf.write_bytes(token)
    tf.chmod(0o600)
    srv = FakeServer(relay_lying(token, frames))
    try:
        return subprocess.run([str(ENGINE), "run", "lat", "-t", "tcp", "-n", "200", "--server", "127.0.0.1:1",
                               "--via", f"127.0.0.1:{srv.port}", "--token-file", str(tf), "--out", str(out)],
                              env=env, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    finally:
        srv.close()


@pytest.mark.parametrize("frames,why", [
    ([b"file ..%2Fevil.npy 4", b"data evil"], "did not name"),                  # before any point named it
    ([b"out " + json.dumps({**POINT_WITH_SAMPLES, "samples": {"rtt_ns": "../evil.npy"}}).encode(),
      b"file ../evil.npy 4", b"data evil"], "did not name"),                    # a path, not a name
    ([b"out " + json.dumps(POINT_WITH_SAMPLES).encode(), b"file lat-tcp-busy-32B.rtt_ns.npy 3000000000"],
     "sample file size"),                                                     # over a point's 2 GiB
    ([b"out " + json.dumps(POINT_WITH_SAMPLES).encode(), b"file lat-tcp-busy-32B.rtt_ns.npy 4",
      b"data 12345"], "more bytes"),                                          # more than announced
    ([point_naming(rtt_ns="a.npy", post_ns="a.npy"), b"file a.npy 4", b"data 1234", b"file a.npy 4", b"data 5678"],
     "names the sample file 'a.npy' twice"),                                  # the second would replace the first
    ([point_naming(**{f"s{i}": f"s{i}.npy" for i in range(300)}),
      *[f for i in range(300) for f in (f"file s{i}.npy 4".encode(), b"data 1234")]],
     "names 300 sample files, more than 8"),                                  # no point keeps that many arrays
    ([point_naming(rtt_ns="b.npy")], "named the sample file 'b.npy', which never came"),  # the run's exit follows
    ([point_naming(rtt_ns="b.npy"), b'out {"type": "point"}'], "named the sample file 'b.npy', which never came"),
], ids=["unnamed", "a path", "too big", "longer than said", "named twice", "300 files", "never sent",
        "never sent before the next line"])
def test_relayed_samples_are_only_what_the_point_named(env_no_token, tmp_path, frames, why):
    out = tmp_path / "out"
    r = run_relayed(env_no_token, tmp_path, frames, out)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert why in engine_error(r.stderr)
    assert not (tmp_path / "evil.npy").exists() and list(out.iterdir()) == []


def test_a_relayed_sample_file_never_replaces_one_in_out(env_no_token, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / SAMPLE_FILE).write_bytes(b"mine")
    r = run_relayed(env_no_token, tmp_path, [point_naming(rtt_ns=SAMPLE_FILE), f"file {SAMPLE_FILE} 4".encode(),
                                             b"data evil"], out)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "File exists" in engine_error(r.stderr) and SAMPLE_FILE in engine_error(r.stderr)
    assert (out / SAMPLE_FILE).read_bytes() == b"mine" and [f.name for f in out.iterdir()] == [SAMPLE_FILE]
