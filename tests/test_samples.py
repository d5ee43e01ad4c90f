"""--samples: raw keeps every latency as .npy, hist a bounded histogram
encoded in the point (HdrHistogram's V2 form, 3 significant digits). Each
latency experiment in hist mode writes no sample file, and its histogram
decodes with the PyPI hdrhistogram package to the point's own count and
percentiles."""

from __future__ import annotations

import math

import pytest

from conftest import json_lines

RUNS = {
    "lat": (["-n", "3000"], "rtt_hist", "rtt_ns"),
    "oneway": (["--bursts", "3", "--burst-size", "500"], "latency_hist", "latency_ns"),
    "stream": (["--rate", "20000", "--count", "3000"], "latency_hist", "latency_ns"),
    "load": (["--rate", "20000", "--count", "3000"], "latency_hist", "latency_ns"),
}


def java_percentile(h, q: float, fig: dict, below: int = 0, above: int = 0) -> int:
    """HdrHistogram's (Java, and the engine's) rule: the bucket of rank
    ceil(q n / 100), reported as its highest equivalent value, which the
    engine's summaries cap at the exact max. Values outside the encoding
    (`below`, `above`) take their ranks at the ends and report the exact min
    or max. (The PyPI package rounds the rank to nearest instead, one rank
    apart.)"""
    rank = max(math.ceil(q * (h.get_total_count() + below + above) / 100), 1)
    if rank <= below:
        return fig["min"]
    seen = below
    for item in h.get_recorded_iterator():
        seen += item.count_at_value_iterated_to
        if seen >= rank:
            return min(h.get_highest_equivalent_value(item.value_iterated_to), fig["max"])
    return fig["max"]


@pytest.mark.parametrize("experiment", list(RUNS))
def test_hist_mode_keeps_a_histogram_not_samples(fm, tmp_path, experiment):
    hdrh = pytest.importorskip("hdrh.histogram")
    args, hist_key, figure = RUNS[experiment]
    r = fm.run(experiment, "-t", "shm", *args, "--samples", "hist", "--percentiles", "75", "--out", str(tmp_path),
               "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["samples_kind"] == "hist" and "samples" not in p
    assert not list(tmp_path.glob("*.npy"))
    h = hdrh.HdrHistogram.decode(p[hist_key])
    # A one-way value below 0 (a timer that woke a hair early) has no place
    # in the encoding: it is counted beside it, and the counts add up.
    below, above = p[hist_key + "_below"], p[hist_key + "_above"]
    assert h.get_total_count() + below + above == p["iterations"] > 0
    assert below + above <= p["iterations"] // 100, p
    for key, q in (("p10", 10), ("p50", 50), ("p75", 75), ("p90", 90), ("p99", 99), ("p999", 99.9), ("p9999", 99.99)):
        assert p[figure][key] == java_percentile(h, q, p[figure], below, above), (key, p[figure])
    if experiment == "lat":  # one-way is RTT/2 of the same histogram
        assert p["latency_ns"]["p50"] == p["rtt_ns"]["p50"] / 2


def test_hist_mode_keeps_oneway_stages(fm, tmp_path):
    """oneway's post stage in hist mode: its own histogram, one value per measured send."""
    hdrh = pytest.importorskip("hdrh.histogram")
    r = fm.run("oneway", "-t", "shm", *RUNS["oneway"][0], "--samples", "hist", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    h = hdrh.HdrHistogram.decode(p["post_hist"])
    assert h.get_total_count() + p["post_hist_below"] + p["post_hist_above"] == p["sent"] > 0
    assert p["post_ns"]["p50"] == java_percentile(h, 50, p["post_ns"], p["post_hist_below"], p["post_hist_above"])
    assert "completion_hist" not in p   # shm reports no send completions


@pytest.mark.parametrize("experiment", ["lat", "oneway", "stream"])
def test_raw_stays_the_default(fm, tmp_path, experiment):
    args, hist_key, figure = RUNS[experiment]
    r = fm.run(experiment, "-t", "shm", *args, "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["samples_kind"] == "raw" and hist_key not in p and p["samples"]


def test_load_defaults_to_hist(fm):
    r = fm.run("load", "-t", "shm", "--rate", "20000", "--count", "1000", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["samples_kind"] == "hist" and "latency_hist" in p
