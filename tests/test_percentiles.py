"""Percentiles: p10 and p99.99 beside the usual ones in every summary, and
--percentiles adding keys of its own (p, the whole part in two digits, then
the decimals), exact against numpy over the raw samples, shown instead of
the fixed ones in the terminal tables, and refused when a key could not
name them."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import json_lines
from fabmeter import analysis


def test_raw_percentiles_match_numpy(fm, tmp_path):
    r = fm.run("lat", "-t", "shm", "-n", "3000", "--percentiles", "75,99.995,1.5", "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    rtt = np.load(tmp_path / p["samples"]["rtt_ns"])
    want = analysis.summarize(rtt, (75, 99.995, 1.5))
    for key in ("p10", "p015", "p50", "p75", "p9999", "p99995"):
        assert p["rtt_ns"][key] == pytest.approx(want[key], rel=1e-9), key
        assert p["latency_ns"][key] == pytest.approx(want[key] / 2, rel=1e-9), key
    lat = p["latency_ns"]
    assert lat["min"] <= lat["p015"] <= lat["p10"] <= lat["p50"] <= lat["p75"] <= lat["p9999"] <= lat["p99995"] <= lat["max"]


def test_tables_show_the_chosen_percentiles(fm):
    r = fm.run("lat", "-t", "shm", "-n", "500", "--percentiles", "99.9,75")
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if line.startswith("figure") and "min" in line).split()
    assert header == ["figure", "min", "p75", "p99.9", "max", "mean", "stdev"]
    r = fm.run("lat", "-t", "shm", "-n", "500")
    header = next(line for line in r.stdout.splitlines() if line.startswith("figure") and "min" in line).split()
    assert header == ["figure", "min", "p10", "p50", "p90", "p99", "p99.9", "p99.99", "max", "mean", "stdev"]


@pytest.mark.parametrize("value, why", [("0", "above 0 and below 100"), ("100", "above 0 and below 100"),
                                        ("99.99999", "four decimals"), (",".join(["50"] * 9), "at most 8"),
                                        ("x", "percentiles")])
def test_bad_percentiles_refused(fm, value, why):
    r = fm.run("lat", "-t", "shm", "-n", "10", "--percentiles", value)
    assert r.returncode == 2 and why in r.stderr, r.stderr


def test_keys_round_trip():
    for q, key in ((10, "p10"), (99.9, "p999"), (99.99, "p9999"), (1.5, "p015"), (0.1, "p001"), (75, "p75"),
                   (9.99, "p0999"), (99.999, "p99999")):
        assert analysis.percentile_key(q) == key and analysis.key_percentile(key) == pytest.approx(q)
    assert analysis.percentile_label("p015") == "p1.5" and analysis.percentile_label("p9999") == "p99.99"
