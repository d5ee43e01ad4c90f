"""Size sweeps (-a): JSON Lines, one point per power-of-two size."""

from __future__ import annotations

import pytest

from conftest import json_lines

UDP_MAX = 65507  # largest UDP payload over IPv4


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_lat_sweep_to_64k(fm, transport):
    r = fm.run("lat", "-t", transport, "-a", "--max-size", "64K", "-n", "200", "--json")
    assert r.returncode == 0, r.stderr
    points = json_lines(r.stdout)
    assert [p["size"] for p in points] == [1 << i for i in range(17)]  # 1 B .. 64 KiB
    for p in points:
        assert p["type"] == "point" and p["experiment"] == "lat" and p["transport"] == transport
        assert p["iterations"] == 200
        lat = p["latency_ns"]
        assert lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"]


def test_udp_sweep_stops_at_udp_max(fm):
    r = fm.run("lat", "-t", "udp", "-a", "--max-size", "1M", "-n", "200", "--json")
    assert r.returncode == 0, r.stderr
    sizes = [p["size"] for p in json_lines(r.stdout)]
    assert sizes == sorted(sizes) and sizes[0] == 1
    assert all(s & (s - 1) == 0 for s in sizes), f"not powers of two: {sizes}"
    assert max(sizes) <= UDP_MAX
    assert max(sizes) == 32768  # the largest power of two that fits in one datagram


def test_human_sweep_table(fm):
    r = fm.run("lat", "-t", "shm", "-a", "--max-size", "16", "-n", "200")
    assert r.returncode == 0, r.stderr
    assert "size sweep" in r.stdout
    for label in ("one-way p50 ns (RTT/2)", "RTT p50 ns", "16 B"):
        assert label in r.stdout, label
