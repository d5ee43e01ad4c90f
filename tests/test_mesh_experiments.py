"""Each experiment in a mesh of local ranks: lat (an odd mesh on IPv6) and bw (each pair's throughput over
time) with mesh.json and the report, shm on the one clock its ranks share, stream and load with their
options; how long a bw series may open empty."""

from __future__ import annotations

import json
import socket

import pytest

from conftest import free_port, json_lines
from fabmeter.mesh import patterns
from mesh_helpers import LOOPBACK4, SMALL, check_pairs, check_series, run_ranks


@pytest.mark.parametrize("experiment,hosts,args", [
    ("lat", ["::1"] * 3, ["-n", "300"]),        # an odd mesh on IPv6: 3 rounds, a rank resting in each
    # 48 MB a pair, more than tcp's socket buffers hold here (32 + 4 MiB): a sender can finish before its
    # receiver starts, and 3000 messages of 32 B then arrived within 2 bins (the report draws 3 or more)
    ("bw", LOOPBACK4.split(","), ["-n", "3000", "-s", "16K", "--schedule", "chaotic", "--series-ms", "0.1"])])
def test_lat_and_bw_on_loopback(fm, token_file, tmp_path, experiment, hosts, args):
    if ":" in hosts[0]:
        try:
            with socket.socket(socket.AF_INET6) as s:
                s.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
    args = ["-t", "tcp", "--experiment", experiment, "--mesh-port", free_port(), "--token-file", token_file,
            "--json", "--warmup", "50", "--out", tmp_path / "mesh", *args]
    rc, out, err, others = run_ranks(fm, hosts, args, [()] * len(hosts))
    assert rc == 0 and set(others.values()) == {0}, err
    lines = json_lines(out)
    pairs = [p for p in lines if p["type"] == "pair"]
    assert sorted((p["src"], p["dst"]) for p in pairs) == patterns.pairs("all-to-all", len(hosts))
    assert lines[-1]["experiment"] == experiment
    assert len(lines[-1]["rounds"]) == (3 if experiment == "lat" else 1)
    for p in pairs:
        if experiment == "bw":
            assert p["gbps"] > 0 and p["latency_ns"] is None, p
            check_series(p, 3000, 0.1e6)
        else:
            assert p["latency_kind"] == "rtt/2" and p["latency_ns"]["p50"] > 0 and p["gbps"] is None, p
    # --out: rank 0's mesh.json holds the same pairs, their N x N matrices and per-host figures; the report draws them.
    doc = json.loads((tmp_path / "mesh" / "mesh.json").read_text())
    summary = {k: v for k, v in lines[-1].items() if k not in ("outliers", "drift", "environments", "load")}
    assert doc["status"] == "ok" and doc["mesh"] == summary and doc["pairs"] == pairs
    assert doc["outliers"] == lines[-1]["outliers"] and doc["drift"] == lines[-1]["drift"]
    assert doc["load"] is lines[-1]["load"] is None
    assert [h["environment"] for h in doc["per_host"]] == lines[-1]["environments"]
    assert all(e["interface"] == "lo" for e in lines[-1]["environments"])    # every route to another rank: loopback
    key = "gbps" if experiment == "bw" else "latency_p50_ns"
    for p in pairs:
        assert doc["matrix"][key][p["src"]][p["dst"]] == (p["gbps"] if experiment == "bw" else p["latency_ns"]["p50"])
    assert all(doc["matrix"][key][i][i] is None for i in range(len(hosts)))
    assert [h["out"]["pairs"] for h in doc["per_host"]] == [len(hosts) - 1] * len(hosts)
    r = fm.run("report", tmp_path / "mesh")
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "mesh" / "report.html").read_text()
    assert text.count("<img ") == 2 and "Mesh: every directed pair" in text   # bw: Gbit/s and throughput over time
    if experiment == "bw":
        assert 'throughput over time"' in text     # the figure's alt


def test_a_series_may_open_empty_for_as_long_as_its_ends_were_off_cpu():
    # The run that failed the old rule (37 empty bins of 111) with off-CPU times as this VM's busy pairs show.
    def pair(leading: int, off_s: float) -> dict:
        msgs = [0] * leading + [68] * 73 + [36]
        side = {"window_s": 0.056, "cpu_s": 0.056 - off_s}
        return {"throughput_series": {"c2s": {"bin_ns": 0.5e6, "msgs": msgs}}, "cpu": {"client": side, "server": side}}
    check_series(pair(37, 0.012), 5000, 0.5e6)          # 18.5 ms empty, 24 ms off the CPUs
    with pytest.raises(AssertionError):
        check_series(pair(37, 0.004), 5000, 0.5e6)      # 18.5 ms empty, 8 ms off: begun before the warm-up's end


@pytest.mark.parametrize("schedule", ["scheduled", "chaotic"])
def test_shm_mesh_on_one_host(fm, token_file, schedule):
    """Shared memory applies where every rank is on one host: oneway between every pair of 3 local ranks, on
    the one clock they share."""
    r = fm.run("mesh", "--launch", "local", "--ranks", "3", "-t", "shm", "--schedule", schedule, "--mesh-port",
               free_port(), "--token-file", token_file, "--json", *SMALL, timeout=120)
    assert r.returncode == 0, r.stderr
    pairs, summary = check_pairs(r.stdout, "all-to-all", 3)
    assert all(p["clock"]["method"] == "shared_tsc" for p in pairs.values())
    assert summary["transport"] == "shm" and summary["schedule"] == schedule


@pytest.mark.parametrize("experiment,args,kind", [
    ("stream", ["--rate", "2000", "--count", "400"], "one-way (receive - scheduled step time)"),
    ("load", ["--rate", "1000,3000", "--count", "300"], "rtt from the intended send time")])
def test_stream_and_load_in_a_mesh(fm, token_file, experiment, args, kind):
    """Each pair runs the experiment with its options; a sweep's last point is the pair's figure."""
    hosts = ["127.0.0.1"] * 3
    rc, out, err, others = run_ranks(fm, hosts, ["-t", "tcp", "--experiment", experiment, "--mesh-port", free_port(),
                                                 "--token-file", token_file, "--json", "--warmup", "20", *args],
                                     [()] * 3)
    assert rc == 0 and set(others.values()) == {0}, err
    lines = json_lines(out)
    pairs = [p for p in lines if p["type"] == "pair"]
    assert sorted((p["src"], p["dst"]) for p in pairs) == patterns.pairs("all-to-all", 3)
    for p in pairs:
        assert p["status"] == "ok" and p["latency_kind"] == kind and p["latency_ns"]["p50"] > 0, p
        assert (p["gbps"] is not None and p["gbps"] > 0) == (experiment == "load") and p["lost"] == 0, p
    assert lines[-1]["experiment"] == experiment
