"""`fabmeter mesh --launch serve`: a `fabmeter serve --relay-to` on every host and no ranks; each pair run by
its source host's serve (relayed), over four namespace hosts with a delay on one link and on loopback; the
refusals."""

from __future__ import annotations

import os
import subprocess
import time

import numpy as np

from conftest import free_port, json_lines, one_line_error, start_serves, stop_serves
from delay_line import delay_line
from fabmeter.mesh import patterns
from mesh_helpers import DELAY_US, SMALL, check_pairs


def test_launch_serve_runs_each_pair_on_its_source_host(fm, four_hosts, token_file):
    """One `fabmeter mesh --launch serve` and a serve per namespace: every pair
    is run by its source host's serve (relayed), so a delay on A's packets to C
    shows on A->C and not on C->A; every round's start skew is measured on the
    coordinator's clock."""
    (ns_a, _), _, (_, addr_c), _ = four_hosts
    hosts = [addr for _, addr in four_hosts]
    prefixes = [("ip", "netns", "exec", ns) for ns, _ in four_hosts]
    serves = start_serves(fm, hosts, 18515, token_file, prefixes)
    try:
        with delay_line(ns_a, DELAY_US, ["-p", "udp", "-d", addr_c]):
            r = fm.run("mesh", "--launch", "serve", "--hosts", ",".join(hosts), "-t", "udp", "--pattern", "all-to-all",
                       "--schedule", "scheduled", "--token-file", token_file, "--json", "--poll", "event", *SMALL,
                       prefix=prefixes[0], timeout=180)
    finally:
        stop_serves(serves)
    assert r.returncode == 0, r.stderr
    pairs, summary = check_pairs(r.stdout, "all-to-all")
    assert len(summary["rounds"]) == 3 and all(x["start_skew_ns"] is not None for x in summary["rounds"])
    assert 0 < summary["start_clock_error_ns"] < 50e6, summary   # half the relay's best ping round trip
    # Each source's three pairs ran on one engine here and through one session with its serve.
    assert summary["sessions"] == {"pairs": 12, "client_engines": 4, "relay_sessions": 4}, summary["sessions"]
    assert sorted(p["relay_run"] for p in pairs.values()) == [1] * 4 + [2] * 4 + [3] * 4
    p50_us = {k: p["latency_ns"]["p50"] / 1000 for k, p in pairs.items()}
    print("p50 one-way us", p50_us, "round skew", [x["start_skew_ns"] for x in summary["rounds"]])
    # Loose, as in test_delay_on_one_link_shows_on_that_pair_only: most of the delay, on that direction only.
    assert p50_us[(0, 2)] > p50_us[(2, 0)] + 0.5 * DELAY_US, p50_us
    assert pairs[(0, 2)]["latency_ns"]["min"] / 1000 >= 0.8 * DELAY_US


def test_launch_serve_on_loopback_and_its_refusals(fm, engine, token_file, tmp_path):
    """Three serves on 127.0.0.1-3 (one port): lat all-to-all relayed; a serve
    without --relay-to refuses to run pairs (the pairs fail with the reason); a
    host with no serve is named at once, exit 3; --rank has no place here."""
    port = free_port()
    hosts = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    serves = start_serves(fm, hosts, port, token_file)
    try:
        r = fm.run("mesh", "--launch", "serve", "--serve-port", port, "--hosts", ",".join(hosts), "--experiment",
                   "lat", "-t", "tcp", "-n", "300", "--warmup", "30", "--token-file", token_file, "--json",
                   "--samples", "raw", "--out", tmp_path / "mesh")
        assert r.returncode == 0, r.stderr
        lines = json_lines(r.stdout)
        pairs = {(p["src"], p["dst"]): p for p in lines if p["type"] == "pair"}
        assert sorted(pairs) == patterns.pairs("all-to-all", 3)
        assert all(p["status"] == "ok" and p["latency_ns"]["p50"] > 0 for p in pairs.values()), pairs
        # Every pair's raw samples, relayed back to where the mesh was launched.
        for (src, dst), p in pairs.items():
            assert p["samples_dir"] == f"pairs/{src}-{dst}", p
            (npy,) = (tmp_path / "mesh" / p["samples_dir"]).glob("*.rtt_ns.npy")
            assert len(np.load(npy)) == 300
        # No fabmeter on the hosts: their identity is what their engines' start lines say (lo's MTU in their fabric).
        envs = lines[-1]["environments"]
        lo_mtu = int(open("/sys/class/net/lo/mtu").read())
        assert all(e["collected_by"] == "engine" and e["kernel_release"] and e["interface"] == "lo"
                   and e["mtu"] == lo_mtu for e in envs), envs
        assert lines[-1]["drift"]["fields"] == [] and lines[-1]["outliers"]["links_judged"] == 6
        # Relaying needs the target among the serve's --relay-to: an engine asked for another host is refused.
        bad = subprocess.run([str(engine), "run", "lat", "--server", f"127.0.0.9:{port}", "--via",
                              f"127.0.0.1:{port}", "--token-file", token_file, "-t", "tcp"],
                             capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert bad.returncode == 2 and "not in its --relay-to list" in bad.stderr, bad.stderr
        # The relayed run is a client on the serve's host: no option of the remote client may name a file there.
        workload = tmp_path / "sizes.csv"       # the client's own file, read by the client: fine here, not there
        workload.write_text("length_bytes,weight\n100,1\n200,1\n")
        for exp, args, why in (("stream", ["-t", "tcp", "--sink", "file:/tmp/fm-relay-sink.csv"], "--sink file:PATH"),
                               ("load", ["-t", "tcp", "--workload", str(workload)], "only the built-in workloads"),
                               ("lat", ["-t", "zmq", "--endpoint", "ipc:///tmp/fm.sock"], "ipc://")):
            bad = subprocess.run([str(engine), "run", exp, "--server", f"127.0.0.2:{port}", "--via",
                                  f"127.0.0.1:{port}", "--token-file", token_file, *args],
                                 capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
            assert bad.returncode == 2 and why in bad.stderr, (exp, bad.stderr)
        assert not os.path.exists("/tmp/fm-relay-sink.csv")
    finally:
        stop_serves(serves)
    t0 = time.monotonic()
    r = fm.run("mesh", "--launch", "serve", "--serve-port", port, "--hosts", "127.0.0.1,127.0.0.5", "-t", "tcp",
               "--timeout-ms", "3000", "--token-file", token_file)
    assert r.returncode == 3 and f"127.0.0.5:{port}" in one_line_error(r.stderr), r.stderr
    assert time.monotonic() - t0 < 20
    serves = start_serves(fm, hosts[:2], port, token_file, relay_to="")
    try:
        r = fm.run("mesh", "--launch", "serve", "--serve-port", port, "--hosts", ",".join(hosts[:2]),
                   "--experiment", "lat", "-t", "tcp", "-n", "100", "--token-file", token_file, "--json")
    finally:
        stop_serves(serves)
    assert r.returncode == 3
    failed = [p for p in json_lines(r.stdout) if p["type"] == "pair"]
    assert len(failed) == 2 and all("--relay-to" in p["message"] and p["status"] == "failed" for p in failed), failed
    r = fm.run("mesh", "--launch", "serve", "--rank", "0", "--hosts", "127.0.0.1,127.0.0.2", "-t", "tcp")
    assert r.returncode == 2 and "no ranks" in r.stderr
