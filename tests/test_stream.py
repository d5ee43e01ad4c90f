"""The stream experiment: a fixed-rate source, a sink that stamps arrivals.
Nothing is lost on one host, and between two namespaces exactly what the
kernel dropped is reported lost; a grid makes one point per
rate x values, the file sink writes what arrived, and a source that is late
(stopped on purpose) skips and counts steps instead of bunching samples."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from conftest import POLLS, built_in_transports, json_lines, one_line_error, run_with_pause
from lossy import lossy_pair  # noqa: F401  (the fixture)

KEYS = {"rate_hz", "values", "achieved_rate_hz", "sent", "received", "missed_steps", "missed_pct", "lost", "warmup_lost",
        "duplicated", "reordered", "deadline_us", "deadline_miss_pct", "latency_ns"}


@pytest.mark.parametrize("poll", POLLS)
@pytest.mark.parametrize("transport", built_in_transports())
def test_counts_add_up(fm, transport, poll, tmp_path):
    r = fm.run("stream", "-t", transport, "--poll", poll, "--rate", "2000", "--values", "4", "--count", "1000",
               "--warmup", "100", "--json", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert KEYS <= set(p)
    assert p["rate_hz"] == 2000 and p["values"] == 4 and p["size"] == 24 + 8 * 4
    # Every measured step was either sent or missed; on one host nothing is lost.
    assert p["sent"] + p["missed_steps"] == 1000
    assert p["received"] == p["sent"] and p["lost"] == 0 and p["warmup_lost"] == 0
    assert p["corrupted"] == 0 and p["duplicated"] == 0
    assert p["deadline_us"] == pytest.approx(500.0)  # one period by default
    lat = np.load(tmp_path / p["samples"]["latency_ns"])
    assert len(lat) == p["received"]
    assert np.percentile(lat, 50) == pytest.approx(p["latency_ns"]["p50"], rel=1e-6)


def test_lost_is_what_the_kernel_dropped(fm, lossy_pair):
    # udp between two namespaces; nftables drops 5 % of the datagrams at
    # random and counts them (tests/lossy.py, where test_loss.py covers more).
    with lossy_pair.server(fm) as port:
        lossy_pair.drop("udp", 5, warmup=50)
        p = lossy_pair.client(fm, port, "stream", "-t", "udp", "--poll", "event", "--timer", "timerfd",
                              "--rate", "4000", "--values", "4", "--count", "2000", "--warmup", "50",
                              "--loss-timeout-ms", "500")
    d = lossy_pair.dropped()
    assert d["rule"] > 0 and d["other"] == 0, d
    assert (p["lost"], p["warmup_lost"]) == (d["rule"], d["rule_warmup"]), (p, d)
    assert p["received"] == p["sent"] - p["lost"] and p["duplicated"] == 0, p


def test_grid_makes_one_point_per_rate_and_values(fm):
    r = fm.run("stream", "-t", "shm", "--rate", "1000,4000", "--values", "1,16", "--count", "200", "--json")
    assert r.returncode == 0, r.stderr
    points = json_lines(r.stdout)
    assert [(p["rate_hz"], p["values"]) for p in points] == [(1000, 1), (1000, 16), (4000, 1), (4000, 16)]


def test_file_sink_writes_every_received_sample(fm, tmp_path):
    path = tmp_path / "samples.csv"
    r = fm.run("stream", "-t", "tcp", "--rate", "5000", "--values", "3", "--count", "500", "--warmup", "0",
               "--sink", f"file:{path}", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["sink"]["kind"] == "file" and p["sink"]["write_capacity_mib_s"] > 0
    with open(path) as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["seq", "origin_ns", "recv_ns", "v0", "v1", "v2"]
    assert len(rows) - 1 == p["received"]
    assert not path.with_name(path.name + ".capture").exists()  # the raw capture is gone
    for row in rows[1:]:
        seq, origin, recv = int(row[0]), int(row[1]), int(row[2])
        assert recv >= origin
        assert [float(v) for v in row[3:]] == [seq + 0.25 * j for j in range(3)]


def test_late_source_skips_and_counts_missed_steps(fm, tmp_path):
    # 1 kHz for 3 s; the source is stopped for 0.5 s: about 500 steps must be
    # counted missed, and no burst of catch-up samples may follow.
    rc, out, err = run_with_pause(fm, tmp_path, ["stream", "-t", "shm", "--rate", "1000", "--values", "1",
                                                 "--count", "3000", "--warmup", "0", "--json"],
                                  after_s=0.5, stop_s=0.5)
    assert rc == 0, err
    (p,) = json_lines(out)
    # At least the 500 stopped steps (a busy machine can only add misses).
    assert p["missed_steps"] >= 450, p
    assert p["sent"] > 0 and p["sent"] + p["missed_steps"] == 3000
    # Skipping, not bunching: the sink never sees samples much faster than the rate.
    assert p["achieved_rate_hz"] < 1000 * 1.05


def test_bad_stream_arguments(fm):
    for args in (["--rate", "0"], ["--values", "0"], ["--timer", "sundial"], ["--sink", "file:"],
                 ["--count", "10", "--duration", "1"], ["-s", "64"]):
        r = fm.run("stream", "-t", "shm", *args)
        assert r.returncode == 2, (args, r.stderr)
        one_line_error(r.stderr)
    r = fm.run("stream", "-t", "udp", "--values", "9000")  # 72024 B: more than a datagram
    assert r.returncode == 2
    assert "65507" in one_line_error(r.stderr)
