"""The engine's latency histogram against a real HdrHistogram implementation.

build/engine/hist-tool records values with fm::Histogram and prints its
figures and its V2 encoding ("HISTF..."); the PyPI `hdrhistogram` package
decodes that, and both are held against numpy on the raw values. The package
recording the same values must give the same counts bucket for bucket, so a
layout, zig-zag or compression mistake in the engine shows here.
"""

from __future__ import annotations

import json
import math
import os
import subprocess

import numpy as np
import pytest

from conftest import ENGINE

hdrh_histogram = pytest.importorskip("hdrh.histogram", reason="the hdrhistogram package (pip: hdrhistogram)")
HdrHistogram = hdrh_histogram.HdrHistogram

TOOL = ENGINE.parent / "hist-tool"
PERCENTILES = [0, 1, 25, 50, 90, 99, 99.9, 99.99, 100]
# (lowest discernible, highest trackable, significant digits): the default,
# then coarse and fine layouts so every layout parameter reaches the decoder.
CONFIGS = [(1, 10_000_000_000, 3), (1000, 3_600_000_000_000, 2), (1, 1_000_000, 5), (1, 1_000_000_000, 1)]


@pytest.fixture(scope="module")
def tool():
    if not (TOOL.is_file() and os.access(TOOL, os.X_OK)):
        pytest.skip(f"{TOOL} missing (built with the engine's tests: `make build`)")
    return TOOL


def run_tool(tool, groups, config, percentiles=PERCENTILES) -> list[dict]:
    lowest, highest, digits = config
    stdin = "\n-\n".join("\n".join(str(int(v)) for v in g) for g in groups) + "\n"
    out = subprocess.run([str(tool), "--lowest", str(lowest), "--highest", str(highest), "--digits", str(digits),
                          "--percentiles", ",".join(map(str, percentiles))],
                         input=stdin, capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def latencies(seed: int, n: int, highest: int) -> np.ndarray:
    """Latency-like integers: a lognormal body (~8 us), a long tail, and the
    exact ends of the range (0, 1, highest), all within [0, highest]."""
    rng = np.random.default_rng(seed)
    v = rng.lognormal(9.0, 1.5, n).astype(np.int64)
    v[: n // 50] = rng.integers(0, 3000, n // 50)  # the unit-resolution region
    v = np.clip(v, 0, highest)
    v[-3:] = [0, 1, highest]
    return v


def reference(values: np.ndarray, config) -> HdrHistogram:
    h = HdrHistogram(*config)
    for v, c in zip(*np.unique(values, return_counts=True)):
        h.record_value(int(v), int(c))
    return h


def counts(h: HdrHistogram) -> list[int]:
    return [h.get_count_at_index(i) for i in range(h.counts_len)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}d")
def test_engine_histogram_matches_hdrhistogram_and_numpy(tool, config):
    values = latencies(seed=config[2], n=40_003, highest=config[1])  # n: p * n / 100 never integral
    (eng,) = run_tool(tool, [values], config)
    decoded = HdrHistogram.decode(eng["hdr"])
    assert eng["hdr"].startswith("HISTF")

    # The layout and every count, as the package itself records the values.
    ref = reference(values, config)
    assert decoded.counts_len == ref.counts_len
    assert counts(decoded) == counts(ref)
    assert decoded.get_total_count() == eng["count"] == len(values)

    # Exact figures against numpy: the engine keeps min, max and mean exactly.
    assert eng["min"] == values.min() and eng["max"] == values.max()
    assert eng["mean"] == pytest.approx(values.mean(), rel=1e-9)  # printed to 10 digits
    assert eng["below"] == eng["above"] == 0
    # The package's bucketed ones within the histogram's precision.
    resolution = 10.0 ** -config[2]
    assert decoded.get_max_value() == decoded.get_highest_equivalent_value(int(values.max()))
    assert decoded.get_mean_value() == pytest.approx(values.mean(), rel=resolution)
    assert eng["stdev"] == pytest.approx(values.std(), rel=resolution)
    assert eng["stdev"] == pytest.approx(decoded.get_stddev(), rel=resolution)

    ordered = np.sort(values)
    for p in PERCENTILES:
        got = eng["percentiles"][str(p)]
        # HdrHistogram's (Java) rule: the value of rank ceil(p n / 100), i.e.
        # numpy's inverted_cdf, reported as its bucket's highest equivalent value.
        exact = int(np.percentile(values, p, method="inverted_cdf"))
        want = decoded.get_lowest_equivalent_value(exact) if p == 0 else decoded.get_highest_equivalent_value(exact)
        assert got == want, f"p{p}: engine {got}, numpy {exact} -> bucket {want}"
        # The package rounds the rank to nearest instead: one rank apart at most.
        rank = max(math.ceil(p * len(values) / 100), 1)
        lo = decoded.get_lowest_equivalent_value(int(ordered[max(rank - 2, 0)]))
        hi = decoded.get_highest_equivalent_value(int(ordered[min(rank, len(values) - 1)]))
        assert lo <= decoded.get_value_at_percentile(p) <= hi, f"p{p}"


@pytest.mark.parametrize("config", CONFIGS[:2], ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}d")
def test_merged_engine_histograms_equal_the_union(tool, config):
    a, b = (latencies(seed=s, n=n, highest=config[1]) for s, n in ((1, 20_000), (2, 5_000)))
    c = np.array([123_456])  # a histogram of one value merges like any other
    *parts, merged = run_tool(tool, [a, b, c], config)
    assert merged["merged"] and merged["count"] == len(a) + len(b) + len(c)
    union = np.concatenate([a, b, c])
    (whole,) = run_tool(tool, [union], config)
    assert merged["hdr"] == whole["hdr"]  # byte for byte: merge is exact
    assert counts(HdrHistogram.decode(merged["hdr"])) == counts(reference(union, config))
    # And the package's own add of the engine's parts agrees.
    added = HdrHistogram(*config)
    for part in parts:
        added.add(HdrHistogram.decode(part["hdr"]))
    assert counts(added) == counts(HdrHistogram.decode(merged["hdr"]))
    for key in ("min", "max", "count"):
        assert merged[key] == whole[key]
    assert merged["mean"] == pytest.approx(union.mean(), rel=1e-9)
    for p in PERCENTILES:
        assert merged["percentiles"][str(p)] == whole["percentiles"][str(p)]


def test_out_of_range_values_are_reported_not_encoded(tool):
    config = (1, 1_000_000, 3)
    values = list(range(1, 999)) + [5_000_000, 7_000_000]
    (eng,) = run_tool(tool, [values + [-4]], config)
    assert eng["count"] == 1001 and eng["above"] == 2 and eng["below"] == 1
    assert eng["max"] == 7_000_000 and eng["min"] == -4
    assert eng["percentiles"]["100"] == 7_000_000
    assert eng["percentiles"]["99.9"] == 7_000_000  # rank 1000 of 1001 lies above the range: the max
    # The standard encoding holds only what fits; the counts beside it say what did not.
    decoded = HdrHistogram.decode(eng["hdr"])
    assert decoded.get_total_count() == 998
    assert counts(decoded) == counts(reference(np.array(values[:-2]), config))


def test_bad_input_exits_2(tool):
    for args, stdin in ((["--digits", "7"], "1\n"), ([], "12x\n"), (["--lowest", "0"], "")):
        r = subprocess.run([str(tool), *args], input=stdin, capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "error" in r.stderr
