"""Load meshes: each server's histogram merged from its clients' (against their raw samples), many-to-many
splitting each client's rate, and the load figures that cross the channel bounded."""

from __future__ import annotations

import base64
import json
import math
import struct
import zlib

import numpy
import pytest
from hdrh.codec import get_compression_cookie, get_encoding_cookie

from conftest import free_port, json_lines, one_line_error
from fabmeter import hdr
from fabmeter.mesh import aggregate, output, patterns
from fabmeter.mesh import run as mesh_run
from mesh_helpers import run_ranks


def nearest_rank(v: list, q: float) -> float:
    return v[max(0, math.ceil(len(v) * q / 100) - 1)]


def test_load_all_to_one_merges_every_client_per_server(fm, four_hosts, token_file, tmp_path):
    """Three clients load one server at once: the server's merged histogram counts every pair's requests, its
    percentiles are those of all the pairs' raw samples together (within the histogram's digits), per size
    bucket too, and its requests/s are the sum of its pairs'."""
    hosts = [addr for _, addr in four_hosts]
    rc, out, err, others = run_ranks(fm, hosts, ["-t", "tcp", "--experiment", "load", "--pattern", "all-to-one",
                                                 "--schedule", "chaotic", "--rate", "1500", "--count", "600",
                                                 "--warmup", "30", "--samples", "raw", "--out", str(tmp_path),
                                                 "--token-file", token_file, "--json"],
                                     [("ip", "netns", "exec", ns) for ns, _ in four_hosts])
    assert rc == 0 and others == {1: 0, 2: 0, 3: 0}, err
    doc = json.loads((tmp_path / "mesh.json").read_text())
    pairs = doc["pairs"]
    assert sorted((p["src"], p["dst"]) for p in pairs) == [(1, 0), (2, 0), (3, 0)]
    (server,) = doc["load"]["servers"]
    assert server["rank"] == 0 and server["pairs"] == server["pairs_merged"] == 3 and not doc["load"]["unmerged"]
    digits = None
    raw, sizes = [], []
    for p in pairs:
        h = hdr.decode(p["load"]["latency_hist"])
        assert h.get_total_count() + p["load"]["latency_hist_above"] == p["load"]["completed"] > 0
        digits = h.significant_figures
        (lat_file,) = (tmp_path / p["samples_dir"]).glob("*.latency_ns.npy")      # on the source's host: here
        lat = numpy.load(lat_file)
        assert len(lat) == p["load"]["completed"], p     # every request kept: below the engine's raw cap
        raw += lat.tolist()
        sizes += numpy.load(str(lat_file).replace(".latency_ns.", ".size_bytes.")).tolist()
    merged = server["latency_ns"]
    assert merged["count"] == sum(p["load"]["completed"] for p in pairs) == len(raw)
    raw.sort()
    for key, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9)):
        exact = nearest_rank(raw, q)
        assert exact <= merged[key] <= exact * (1 + 10 ** -digits) + 1, (key, exact, merged)
    assert merged["min"] == raw[0] and merged["max"] == raw[-1]
    assert doc["load"]["overall"]["latency_ns"] == merged        # one server: the whole run is its
    # Rates: the pairs ran together (one round), so the server's are their sums.
    for key in ("offered_rps", "achieved_rps", "completed"):
        assert server[key] == pytest.approx(sum(p["load"][key] for p in pairs)), key
    assert server["offered_rps"] == pytest.approx(3 * 1500) and server["by_round"][0]["pairs"] == 3
    # Per size bucket (one size: one bucket): the merged latency's percentiles, over the merged unloaded p50.
    (bucket,) = server["slowdown"]
    assert bucket["count"] == len(raw) and set(sizes) == {bucket["size_lo"]}
    assert bucket["latency_p99_ns"] == merged["p99"] or abs(bucket["latency_p99_ns"] - merged["p99"]) <= \
        merged["p99"] * 10 ** -digits
    assert bucket["p50"] == pytest.approx(bucket["latency_p50_ns"] / bucket["unloaded_p50_ns"])
    assert bucket["unloaded_count"] == sum(p["load"]["slowdown"][0]["unloaded_count"] for p in pairs)
    # The merged encoding decodes to the same count.
    assert hdr.decode(server["latency_hist"]).get_total_count() + server["latency_hist_above"] == merged["count"]


def test_load_many_to_many_splits_each_clients_rate(fm, engine, token_file, tmp_path):
    """many-to-many: every host a client of both others at once, its --rate and --count split between them, each
    pair on its own seed; each server's merged histogram holds what its two clients completed."""
    r = fm.run("mesh", "--launch", "local", "--ranks", "3", "-t", "tcp", "--experiment", "load", "--pattern",
               "many-to-many", "--schedule", "chaotic", "--rate", "801", "--count", "301", "--warmup", "20",
               "--mesh-port", free_port(), "--token-file", token_file, "--json", "--out", tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "mesh.json").read_text())
    pairs = doc["pairs"]
    assert sorted((p["src"], p["dst"]) for p in pairs) == patterns.pairs("all-to-all", 3)
    assert all(p["load"]["offered_rps"] == 401 and p["load"]["completed"] == 151 for p in pairs), pairs
    assert [s["rank"] for s in doc["load"]["servers"]] == [0, 1, 2]
    for s in doc["load"]["servers"]:
        assert s["latency_ns"]["count"] == s["completed"] == 2 * 151 and s["offered_rps"] == 2 * 401, s
    assert doc["load"]["overall"]["latency_ns"]["count"] == 6 * 151
    r = fm.run("report", tmp_path)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "report.html").read_text()
    assert 'merged cdf"' in text and all(f"<td>server {i} 127.0.0.1</td>" in text for i in range(3))
    spec = mesh_run.MeshSpec(["h"] * 3, 0, "load", "many-to-many", "chaotic", 1, {"rate": [801]}, b"", str(engine),
                             5.0)
    seeds = {mesh_run.pair_options(spec, s, d)["seed"] for s, d in patterns.pairs("many-to-many", 3)}
    assert len(seeds) == 6
    r = fm.run("mesh", "--launch", "local", "--ranks", "3", "-t", "tcp", "--pattern", "many-to-many",
               "--experiment", "load")
    assert r.returncode == 2 and "--experiment load --schedule chaotic" in one_line_error(r.stderr), r.stderr


def test_load_figures_that_cross_the_channel_are_bounded(fm):
    """A rank's load figures are taken only with the keys and sizes load_figures writes; a histogram that does
    not decode leaves its pair out of every sum, named."""
    r = fm.run("load", "-t", "shm", "--rate", "2000", "--count", "200", "--json")
    assert r.returncode == 0, r.stderr
    (point,) = [p for p in json_lines(r.stdout) if p["type"] == "point"]
    body = {"type": "pair", "src": 1, "dst": 0, "status": "ok", "message": "",
            **output.pair_figures(point), "samples_dir": None}
    assert output.valid_pair(body, 1, {(1, 0)})["load"]["latency_hist"] == point["latency_hist"]
    for bad in ({**body["load"], "extra": 1}, {**body["load"], "latency_hist": "A" * (output.HIST_BUDGET + 1)},
                {**body["load"], "latency_hist_below": -1}, {**body["load"], "slowdown": [{}]}):
        assert output.valid_pair({**body, "load": bad}, 1, {(1, 0)}) is None
    assert output.valid_pair({**body, "samples_dir": "../../etc"}, 1, {(1, 0)}) is None
    # Too large to travel: the bucket histograms go first.
    big = output.load_figures({**point, "slowdown": point["slowdown"] * 3,
                               "latency_hist": "A" * (output.HIST_BUDGET - 10)})
    assert point["slowdown"][0]["latency_hist"] and output.load_figures(point)["slowdown"][0]["latency_hist"]
    assert big["latency_hist"] is not None and all(b["latency_hist"] is None for b in big["slowdown"])
    assert output.load_figures({**point, "latency_hist": "A" * (output.HIST_BUDGET + 1)})["latency_hist"] is None
    totals = aggregate.LoadTotals(["a", "b", "c"])
    totals.add(output.valid_pair(body, 1, {(1, 0)}))
    totals.add({**body, "src": 2, "load": {**body["load"], "latency_hist": "bm90IGEgaGlzdG9ncmFt"}})
    # A small histogram whose header claims a layout of 6 million counters, which decoding would allocate.
    header = zlib.compress(struct.pack(">IIIIQQd", get_encoding_cookie(), 0, 0, 5, 1, 1 << 62, 1.0))
    huge = base64.b64encode(struct.pack(">II", get_compression_cookie(), len(header)) + header).decode()
    totals.add({**body, "src": 3, "load": {**body["load"], "latency_hist": huge}})
    got = totals.as_json([{"round": 0, "pairs": [[1, 0], [2, 0], [3, 0]]}])
    assert [u["src"] for u in got["unmerged"]] == [2, 3] and "counters" in got["unmerged"][1]["reason"]
    assert got["servers"][0]["pairs"] == 3 and got["servers"][0]["pairs_merged"] == 1
    assert got["overall"]["latency_ns"]["count"] == point["completed"]
    # Rates add up only over pairs that ran together: two rounds, a sum per round and none for the server.
    totals = aggregate.LoadTotals(["a", "b", "c"])
    for src in (1, 2):
        totals.add(output.valid_pair({**body, "src": src}, src, {(src, 0)}))
    got = totals.as_json([{"round": 0, "pairs": [[1, 0]]}, {"round": 1, "pairs": [[2, 0]]}])["servers"][0]
    assert got["offered_rps"] is None and got["latency_ns"]["count"] == 2 * point["completed"]
    assert [(r["round"], r["pairs"], r["offered_rps"]) for r in got["by_round"]] == \
        [(0, 1, point["offered_rps"]), (1, 1, point["offered_rps"])]
