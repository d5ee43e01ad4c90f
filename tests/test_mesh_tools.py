"""`fabmeter mesh --tool`: an established tool between every pair, its client on the source rank, its server
side started by the destination rank's serve from the allow-list; refusals before anything runs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import bridged_namespaces, json_lines, one_line_error
from fabmeter.mesh import patterns
from mesh_helpers import run_ranks


def _tools_with(addresses: list[str]) -> list[str]:
    """Command lines of live sockperf processes that name one of `addresses`."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "comm").read_text().strip() == "sockperf":
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found += [cmd] if any(a in cmd for a in addresses) else []
        except OSError:
            continue
    return found


def test_sockperf_between_three_namespace_hosts(fm, token_file, tmp_path):
    if not shutil.which("sockperf"):
        pytest.skip("sockperf not installed")
    with bridged_namespaces("fmt", f"10.192.{os.getpid() % 250}", 3) as hosts:
        addresses = [addr for _, addr in hosts]
        rc, out, err, others = run_ranks(fm, addresses, ["--tool", "sockperf", "--experiment", "lat", "-t", "udp",
                                                         "-s", "64", "--duration", "1", "--token-file", token_file,
                                                         "--json", "--out", str(tmp_path / "out")],
                                         [("ip", "netns", "exec", ns) for ns, _ in hosts])
        assert rc == 0, err
        assert others == {1: 0, 2: 0}
        lines = json_lines(out)
        pairs = {(p["src"], p["dst"]): p for p in lines if p["type"] == "pair"}
        (summary,) = [p for p in lines if p["type"] == "mesh"]
        assert sorted(pairs) == patterns.pairs("all-to-all", 3)
        for p in pairs.values():
            assert p["status"] == "ok" and p["tool"] == "sockperf", p
            assert p["latency_kind"] == "rtt/2" and 0 < p["latency_ns"]["p50"] <= p["latency_ns"]["p99"], p
            assert p["size"] == 64 and p["lost"] == 0 and p["clock"] is None
            # the server side ran on the destination, under its rank's serve: its CPU came back from there
            assert p["cpu"]["server"]["window"] == "process" and p["cpu"]["server"]["window_s"] > 0, p["cpu"]
        assert summary["tool"] == "sockperf" and summary["failed"] == 0
        doc = json.loads((tmp_path / "out" / "mesh.json").read_text())
        assert doc["status"] == "ok" and doc["mesh"]["tool"] == "sockperf"
        assert all(doc["matrix"]["latency_p50_ns"][s][d] for s, d in pairs)
        assert not _tools_with(addresses), "a tool outlived its mesh"


@pytest.mark.parametrize("args,words", [
    (["--tool", "sockperf", "--experiment", "bw", "-t", "tcp"], "no case --experiment bw over tcp"),
    (["--tool", "iperf3", "--experiment", "bw", "-t", "tcp", "--bidir"], "--bidir is fabmeter's own"),
    (["--tool", "sockperf", "--experiment", "lat", "-t", "tcp", "--launch", "serve"], "not --launch serve"),
    (["--tool", "sockperf", "--experiment", "lat", "-t", "tcp", "--schedule", "slotted"], "slotted"),
])
def test_a_tool_mesh_is_refused_before_anything_runs(fm, token_file, args, words):
    if not shutil.which(args[1]):
        pytest.skip(f"{args[1]} not installed")
    r = fm.run("mesh", "--hosts", "127.0.0.1,127.0.0.2", *([] if "serve" in args else ["--rank", "0"]),
               "--token-file", token_file, *args, timeout=30)
    assert r.returncode == 2 and words in one_line_error(r.stderr), r.stderr


def test_a_tool_mesh_needs_a_token(fm):
    fm.env = {k: v for k, v in fm.env.items() if k != "FABMETER_TOKEN"}
    r = fm.run("mesh", "--hosts", "127.0.0.1,127.0.0.2", "--rank", "0", "--tool", "sockperf", "--experiment", "lat",
               "-t", "udp", timeout=30)
    assert r.returncode == 2 and "needs a token" in one_line_error(r.stderr), r.stderr
