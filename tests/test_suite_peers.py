"""A suite's peer points (`tool = ...`): checked with the file, run beside fabmeter's points, through a
`fabmeter serve` in another network namespace, recorded as peers.json, resumed and reported."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import TAG_VAR, one_line_error, serve_across_namespaces, wait_until
from fabmeter.engine import engine_info
from fabmeter.suite import read as suite
from test_peers_server import strangers


@pytest.fixture(scope="module")
def info(engine) -> dict:
    return engine_info(str(engine))


# (the [[matrix]] table, the key named in the error, its line in the file, words the message must contain)
BAD = [
    ('tool = "sockperff"\nexperiment = "lat"\n', "tool", 3, "did you mean 'sockperf'"),
    ('tool = "/usr/bin/sockperf"\nexperiment = "lat"\n', "tool", 3, "unknown tool"),
    ('tool = "sockperf"\nexperiment = "lat"\npoll = "busy"\n', "poll", 5, "does not apply to peer points"),
    ('tool = "sockperf"\nexperiment = "lat"\nargs = "--tcp"\n', "args", 5, "unknown key"),
    ('tool = "sockperf"\nexperiment = "bw"\n', "", 3, "sockperf does not measure bw over tcp"),
    ('tool = "perftest"\nexperiment = "lat"\ntransport = "verbs"\n', "tests", 3, "several tests"),
    ('tool = "iperf3"\nexperiment = "bw"\nsize = "lots"\n', "size", 5, "expected"),
    ('tool = "qperf"\nexperiment = "lat"\nrate = 0\n', "rate", 5, "from 1"),
    ('tool = "perftest"\nexperiment = "lat"\ntransport = "verbs"\ntests = "ib_send_lat"\n'
     'device = "../mlx5"\n', "device", 7, "RDMA device name"),
    ('tool = "sockperf"\nexperiment = "lat"\ntoken_file = "t"\n', "token_file", 5, "goes with 'server'"),
    ('tool = "perftest"\nexperiment = "lat"\ntransport = "verbs"\ntests = "ib_send_lat"\nservice = "xrc"\n',
     "service", 7, "expected one of rc, uc, ud"),
    ('tool = "perftest"\nexperiment = "bw"\ntransport = "verbs"\ntests = "ib_send_bw"\nbidir = "yes"\n',
     "bidir", 7, "true or false"),
]


@pytest.mark.parametrize("table,key,line,words", BAD, ids=[f"{b[1] or 'case'}-{i}" for i, b in enumerate(BAD)])
def test_a_bad_peer_point_names_key_and_line(tmp_path, info, table, key, line, words):
    f = tmp_path / "s.toml"
    f.write_text("[[matrix]]\n\n" + table)
    with pytest.raises(suite.SuiteError) as e:
        suite.read(f, info)
    assert e.value.line == line and words in e.value.message, (e.value.line, e.value.message)
    assert not key or f"'{key}'" in e.value.message, e.value.message


def test_a_suite_with_an_unknown_tool_exits_2_before_running(fm, tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('[[matrix]]\nexperiment = "lat"\ntransport = "tcp"\niters = 100\n'
                 '[[matrix]]\ntool = ["sockperf", "netperf"]\nexperiment = "lat"\n')
    out = tmp_path / "out"
    r = fm.run("suite", f, "--out", out)
    assert r.returncode == 2
    err = one_line_error(r.stderr)
    assert f"{f}:6:" in err and "unknown tool 'netperf'" in err, err
    assert not out.exists()     # the fabmeter point before it did not run either


def test_peer_points_through_a_serve_between_two_namespaces(fm, tmp_path, token_file):
    """sockperf's server side started by the serve in namespace A from its allow-list, the client in B; a
    fabmeter point of the same suite through the same serve; one report with both; a second run resumes."""
    if not shutil.which("sockperf"):
        pytest.skip("sockperf not installed")
    net = f"10.197.{os.getpid() % 250}"
    with serve_across_namespaces(fm, "sp", net, token_file) as (serve, server, ns):
        f = tmp_path / "peers.toml"
        f.write_text(f'name = "beside"\n[defaults]\nserver = "{server}"\nsize = 64\n'
                     f'[[matrix]]\nexperiment = "lat"\ntransport = "udp"\niters = 2000\n'
                     f'[[matrix]]\ntool = "sockperf"\nexperiment = "lat"\ntransport = "udp"\nduration = 1\n'
                     f'token_file = "{token_file}"\n')
        out = tmp_path / "out"
        fm.env = {**fm.env, "FABMETER_TOKEN": Path(token_file).read_text().strip()}   # the fabmeter point's
        r = fm.run("suite", f, "--out", out, prefix=ns, timeout=120)
        assert r.returncode == 0, r.stderr
        doc = json.loads((out / "sockperf-lat-udp" / "peers.json").read_text())
        assert doc["status"] == "ok" and doc["suite"]["point"] == "sockperf-lat-udp"
        assert doc["params"]["size"] == 64 and doc["params"]["tool"] == "sockperf"
        (p,) = doc["points"]
        assert (p["tool"], p["experiment"], p["transport"], p["size"]) == ("sockperf", "lat", "udp", 64)
        assert p["server"] == server and Path(p["server_command"][0]).name == "sockperf"
        assert server.split(":")[0] in p["command"]
        assert p["latency_ns"]["p50"] > 0 and p["cpu"]["server"]["window_s"] > 0
        run = json.loads((out / "lat-udp-busy" / "run.json").read_text())
        assert run["status"] == "ok" and run["config"]["server"] == server
        index = {e["id"]: e for e in json.loads((out / "index.json").read_text())["points"]}
        assert index["sockperf-lat-udp"]["status"] == "ok" and index["sockperf-lat-udp"]["tool"] == "sockperf"
        assert not strangers(serve), "the tool outlived its session"

        r = fm.run("suite", f, "--out", out, prefix=ns, timeout=60)
        assert r.returncode == 0 and "2 finished before, 0 run now" in r.stdout, r.stdout + r.stderr
    r = fm.run("report", out)
    assert r.returncode == 0, r.stderr
    html = (out / "report.html").read_text()
    assert "peer: sockperf" in html and "lat-udp-busy" in html


MESH_TOOL = ('[[matrix]]\nexperiment = "mesh"\nmesh_experiment = "lat"\nmesh_tool = "sockperf"\ntransport = "udp"\n'
             'launch = "local"\nranks = 2\nsize = 64\n')


@pytest.mark.parametrize("text,line,words", [
    (MESH_TOOL + "warmup = 100\n", 4, "--warmup is fabmeter's own"),
    (MESH_TOOL.replace('mesh_experiment = "lat"', 'mesh_experiment = "bw"'), 4, "no case --experiment bw"),
    (MESH_TOOL.replace('"sockperf"', '"netperf"'), 4, "expected one of")])
def test_a_mesh_points_tool_is_checked_with_the_file(tmp_path, info, text, line, words):
    if not shutil.which("sockperf"):
        pytest.skip("sockperf not installed")
    f = tmp_path / "s.toml"
    f.write_text(text)
    with pytest.raises(suite.SuiteError) as e:
        suite.read(f, info)
    assert e.value.line == line and words in e.value.message, (e.value.line, e.value.message)


def test_a_mesh_point_runs_a_tool_between_its_ranks(fm, tmp_path, token_file):
    """mesh_tool: each pair's sockperf server side started by the destination rank's serve; mesh.json says so."""
    if not shutil.which("sockperf"):
        pytest.skip("sockperf not installed")
    f = tmp_path / "mt.toml"
    f.write_text(f'name = "mt"\n{MESH_TOOL}duration = 1\ntoken_file = "{token_file}"\n')
    out = tmp_path / "out"
    r = fm.run("suite", f, "--out", out, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    (point,) = json.loads((out / "index.json").read_text())["points"]
    doc = json.loads((out / point["id"] / "mesh.json").read_text())
    assert "sockperf" in point["id"] and doc["status"] == "ok" and doc["mesh"]["tool"] == "sockperf"
    assert [(p["tool"], p["status"], p["size"]) for p in doc["pairs"]] == [("sockperf", "ok", 64)] * 2
    r = fm.run("suite", f, "--out", out, timeout=60)
    assert r.returncode == 0 and "1 finished before, 0 run now" in r.stdout, r.stdout


def test_sigterm_during_a_peer_point_marks_it_interrupted(fm, tmp_path):
    if not shutil.which("sockperf"):
        pytest.skip("sockperf not installed")
    f = tmp_path / "si.toml"
    f.write_text('[[matrix]]\ntool = "sockperf"\nexperiment = "lat"\ntransport = "udp"\nduration = 5\n')
    out = tmp_path / "out"
    proc = fm.popen("suite", f, "--out", out)
    raw = out / "sockperf-lat-udp" / "peers-raw"

    def running() -> bool:
        index = out / "index.json"
        return index.exists() and json.loads(index.read_text())["points"][0]["status"] == "running"
    assert wait_until(running, 30)
    assert wait_until(lambda: len(_tagged("sockperf", fm.tag)) == 2, 10), "sockperf's server and client never ran"
    proc.terminate()
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    doc = json.loads((out / "sockperf-lat-udp" / "peers.json").read_text())
    assert doc["status"] == "interrupted" and not doc["points"] and not raw.exists()
    assert json.loads((out / "index.json").read_text())["points"][0]["status"] == "interrupted"
    assert not _tagged("sockperf", fm.tag), "the tool outlived its point"


def _tagged(name: str, tag: str) -> list[int]:
    """Live processes called `name` that carry this test's tag in their environment (started by its fabmeter)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if (d.name.isdigit() and (d / "comm").read_text().strip() == name
                    and f"{TAG_VAR}={tag}".encode() in (d / "environ").read_bytes().split(b"\0")):
                found.append(int(d.name))
        except OSError:
            continue
    return found
