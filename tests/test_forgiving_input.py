"""What a newcomer types wrong or half-right: suffixed numbers (one rule in
the engine and in Python), mistyped options and subcommands, a client that
cannot reach a serve, a serve that says each session, and a transport whose
library is present with no device to run on."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import free_port, json_lines, one_line_error, veth_namespaces
from fabmeter.options import Options

# option: (text, its value): counts take decimal suffixes, sizes binary ones.
SUFFIXED = {"iters": ("2k", 2_000), "warmup": ("3K", 3_000), "size": ("4k", 4_096), "max_size": ("1M", 1 << 20)}


def test_counts_are_decimal_and_sizes_binary_in_the_engine_and_in_python(engine):
    table = Options(json.loads(subprocess.run([str(engine), "options"], capture_output=True, text=True,
                                              check=True).stdout))
    assert {key: table[key].parse(text) for key, (text, _) in SUFFIXED.items()} == \
        {key: value for key, (_, value) in SUFFIXED.items()}
    assert table["rate"].parse("1M,10k") == [1_000_000, 10_000]
    # The engine's own reading of the same words: the params of its start line.
    serve = subprocess.Popen([str(engine), "serve", "--once", "--port", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    port = json.loads(serve.stdout.readline())["port"]
    words = [w for key, (text, _) in SUFFIXED.items() for w in (f"--{key.replace('_', '-')}", text)]
    r = subprocess.run([str(engine), "run", "lat", "-t", "tcp", *words, "--server", f"127.0.0.1:{port}"],
                       capture_output=True, text=True, timeout=120)
    assert serve.wait(timeout=60) == 0 and r.returncode == 0, r.stderr
    params = next(e for e in json_lines(r.stdout) if e.get("type") == "start")["params"]
    assert {key: params[key] for key in SUFFIXED} == {key: value for key, (_, value) in SUFFIXED.items()}


def test_lat_n_10k_runs_ten_thousand(fm):
    r = fm.run("lat", "-t", "tcp", "-n", "10k", "--warmup", "0", "--cpus", "none", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    points = [e for e in json_lines(r.stdout) if e.get("type") == "point"]
    assert [p["iterations"] for p in points] == [10_000], points


@pytest.mark.parametrize("args, hint", [
    (["lat", "--iter", "100"], "(did you mean '--iters'?)"),
    (["lta"], "(did you mean 'lat'?)"),
    (["lat", "tcp"], "(did you mean '-t tcp'?)"),
    (["serve", "--bnd", "0.0.0.0"], "(did you mean '--bind'?)"),
    (["peers", "--tool", "iperf3"], "(did you mean '--tools'?)"),
    (["serve", "--log-format", "jsn"], "(did you mean 'json'?)"),
])
def test_a_mistyped_word_names_the_nearest(fm, args, hint):
    r = fm.run(*args)
    assert r.returncode == 2 and hint in one_line_error(r.stderr), r.stderr


def _session_lines(fm, *serve_args: str) -> tuple[list[str], subprocess.CompletedProcess]:
    """One --once serve and one lat session against it: the serve's stderr lines and the client's result."""
    serve = fm.popen("serve", "--once", "--bind", "127.0.0.1", "--port", "0", *serve_args)
    port = json.loads(serve.stdout.readline())["port"]
    client = fm.run("lat", "-t", "tcp", "-n", "200", "--cpus", "none", "--server", f"127.0.0.1:{port}")
    _, err = serve.communicate(timeout=60)
    assert serve.returncode == 0 and client.returncode == 0, (err, client.stderr)
    return err.splitlines(), client


def test_serve_says_each_session(fm):
    lines, _ = _session_lines(fm)
    said = [ln for ln in lines if "session from 127.0.0.1: " in ln]
    assert len(said) == 1 and ": lat over tcp, ok (exit 0) after " in said[0], lines


def test_serve_says_each_session_as_json(fm):
    lines, _ = _session_lines(fm, "--log-format", "json")
    events = [json.loads(ln) for ln in lines if ln.startswith("{")]
    assert len(events) == 1, lines
    e = events[0]
    assert (e["event"], e["experiment"], e["transport"], e["outcome"], e["exit_code"]) == \
        ("session", "lat", "tcp", "ok", 0), e
    assert e["client"] == "127.0.0.1" and e["duration_s"] > 0, e


def test_a_refused_connection_to_another_host_hints_at_serves_default_bind(fm):
    net = f"10.207.{os.getpid() % 250}"
    with veth_namespaces("fmin", net) as (_, ns_b, _, _):
        r = fm.run("lat", "-t", "tcp", "--timeout-ms", "500", "--server", f"{net}.1:{free_port()}",
                   prefix=("ip", "netns", "exec", ns_b))
    assert r.returncode == 3, r.stderr
    assert "Connection refused" in r.stderr and "default --bind 127.0.0.1" in r.stderr, r.stderr
    # On loopback the hint would be wrong: nothing is said of --bind.
    r = fm.run("lat", "-t", "tcp", "--timeout-ms", "500", "--server", f"127.0.0.1:{free_port()}")
    assert r.returncode == 3 and "Connection refused" in r.stderr and "--bind" not in r.stderr, r.stderr


def test_transports_tells_a_library_without_a_device(fm, engine):
    ib = Path("/sys/class/infiniband")
    if ib.is_dir() and any(ib.iterdir()):
        pytest.skip("this host has an RDMA device")
    engine_lines = subprocess.run([str(engine), "transports"], capture_output=True, text=True,
                                  check=True).stdout.splitlines()
    verbs = next(ln for ln in engine_lines if ln.startswith("verbs: "))
    if "unavailable" in verbs:
        pytest.skip(f"no verbs library here: {verbs}")
    assert verbs.startswith("verbs: library present, no RDMA device"), verbs
    r = fm.run("transports")
    assert r.returncode == 0, r.stderr
    assert any(ln.startswith("verbs: library present, no RDMA device") for ln in r.stdout.splitlines()), r.stdout
