"""The path is part of what a point is: run.json records where a run ran (`path`), the terminal header names it,
and a local run and a run across two network namespaces of one configuration are two rows of the report, each
naming its path, that compare does not match."""

from __future__ import annotations

import json
import os
import re

from conftest import serve_across_namespaces

from fabmeter import path

LAT = ("lat", "-t", "tcp", "--poll", "event", "-s", "32", "-n", "2000")


def test_a_local_and_a_namespace_run_are_two_paths(fm, token_file, tmp_path):
    results = tmp_path / "results"
    local = fm.run(*LAT, "--out", str(results / "local"))
    assert local.returncode == 0, local.stderr
    assert re.match(r"path: local \(on host \S+\)\n", local.stdout), local.stdout
    net = f"10.187.{os.getpid() % 250}"
    with serve_across_namespaces(fm, "fpth", net, token_file) as (_, server, ns):
        remote = fm.run(*LAT, "--server", server, "--token-file", token_file, "--out", str(results / "ns"),
                        prefix=ns)
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout.startswith(f"path: server {server} (on host "), remote.stdout
    assert "the ends in two network namespaces" in remote.stdout.splitlines()[0], remote.stdout

    docs = {name: json.loads((results / name / "run.json").read_text()) for name in ("local", "ns")}
    for name, doc in docs.items():
        p = doc["path"]
        assert p["server"] == ("local" if name == "local" else server) and p["relay"] is None, p
        assert p["peer_tool"] is None and p["same_host"] is True, p
        client, far = p["hosts"]["client"], p["hosts"]["server"]
        assert client["hostname"] and client["hostname"] == far["hostname"], p
        assert isinstance(client["netns"], int) and isinstance(far["netns"], int), p
        assert (client["netns"] == far["netns"]) == (name == "local"), p

    report = fm.run("report", str(results))
    assert report.returncode == 0, report.stderr
    html = (results / "report.html").read_text()
    assert not re.search(r"\bNone\b", html), re.findall(r".{60}\bNone\b.{20}", html)
    header = re.search(r'<p class="machine">(paths [^<]*)</p>', html)
    assert header, "the header lists no paths"
    assert "local (on host " in header.group(1) and f"to {net}.1 ({server}, on host " in header.group(1), header
    rows = re.findall(r"<td>(tcp event \([^<]*\))</td>", html)
    assert sorted(rows) == ["tcp event (local)", f"tcp event (to {net}.1)"], rows

    compared = fm.run("compare", str(results / "local"), str(results / "ns"), "--json")
    doc = json.loads(compared.stdout)
    assert doc["points"] == [], doc
    assert doc["unmatched_base"] == ["lat tcp event 32 B local"], doc
    assert doc["unmatched_new"] == [f"lat tcp event 32 B to {net}.1"], doc


def test_a_path_from_any_run_json():
    """A run.json from before there was a `path` gets one from config.server; one with a `path` of the wrong
    shape gets the unknowns, never an exception."""
    assert path.key(path.of_run({})) == ("local", None, None)
    assert path.key(path.of_run({"config": {"server": "10.0.0.2:18515"}})) == ("10.0.0.2", None, None)
    assert path.key(path.of_run({"config": {"server": "[fd00::2]:18515"}})) == ("fd00::2", None, None)
    assert path.key(path.of_run({"peer": True, "tool": "sockperf", "server": None})) == ("local", None, "sockperf")
    for odd in ("x", [], {"server": 5, "relay": {}, "hosts": "x"}, {"hosts": {"client": [1], "server": None}}):
        p = path.of_run({"path": odd})
        assert path.label(p) and path.header(p).startswith("path: ") and "None" not in path.header(p), odd
    ran = path.of_run({"path": {"server": "10.0.0.2:1", "relay": "10.0.0.3:2", "same_host": False,
                                "hosts": {"client": {"hostname": "a", "netns": 1},
                                          "server": {"hostname": "b", "netns": 1}}}})
    assert path.label(ran) == "to 10.0.0.2 via 10.0.0.3"
    assert path.header(ran) == "path: server 10.0.0.2:1 via 10.0.0.3:2 (server on host b, client on host a)"


def test_no_none_reaches_the_page(tmp_path):
    """Records whose every value is null (a run against a server, one that never started, a peer point, a suite's
    index) give a page without Python's None."""
    from fabmeter.report import html
    point = {"type": "point", "experiment": "lat", "transport": "tcp", "poll": "busy", "size": 32, "iterations": None,
             "warmup": None, "latency_ns": {"min": 1, "p50": 2, "p90": 3, "p99": 4, "max": 5}}
    env = {key: None for key in ("hostname", "cpu_model", "cpu_count", "cpus_allowed", "isolated_cpus", "tsc_flags")}
    env.update(kernel={"release": None, "version": None}, governors={"0": None}, libraries={"glibc": None},
               engine={"clock_source": None, "tsc_ghz": None, "timestamp_cost_ns": None,
                       "fabric": {"netdev": {"name": "lo", "rx_queues": None, "tx_queues": None, "irq_count": None},
                                  "numa": {"device": None, "cpu": None}}},
               server_engine=None)
    doc = {"config": {"experiment": "lat", "mode": None, "server": None, "cpus": None,
                      "params": {"transport": "tcp", "poll": "busy"}},
           "path": {"server": None, "relay": None, "peer_tool": None, "same_host": None, "hosts": None},
           "environment": env, "points": [point], "status": None, "message": None}
    for name, more in (("local", {}), ("remote", {"config": {**doc["config"], "server": "10.0.0.2:1"}, "path": None,
                                                 "points": []})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps({**doc, **more}))
    (tmp_path / "peers.json").write_text(json.dumps({"environment": None, "points": [
        {**point, "peer": True, "tool": None, "server": None, "statistic_note": None}]}))
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "index.json").write_text(json.dumps({"suite": None, "description": None, "status": None}))
    text = html.write(tmp_path).read_text()
    assert not re.search(r"\bNone\b", text), re.findall(r".{0,80}\bNone\b.{0,40}", text)
