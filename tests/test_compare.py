"""`fabmeter compare` and the statistics module under it (python/fabmeter/stats.py): a folder against itself
is indistinguishable; a link with a delay added reads worse, by about the delay; the exit code follows
--fail-worse; unmatched points are listed."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import bridged_namespaces, cli_cmd
from delay_line import delay_line
from lossy import LossyPair

from fabmeter import stats

DELAY_US = 300
LAT = ["lat", "-t", "udp", "-s", "32", "-n", "400", "--warmup", "50", "--poll", "event"]


def compare(fm, *args) -> subprocess.CompletedProcess:
    return fm.run("compare", *map(str, args), timeout=120)


def compare_json(fm, *args) -> dict:
    r = compare(fm, *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# --- the statistics ------------------------------------------------------------------------------------------

def test_median_interval_is_the_sign_test_interval():
    assert stats.median_interval([1, 2, 3, 4]) is None                     # 4 values: 87.5 % at most
    lo, hi, cover = stats.median_interval([5, 1, 4, 2, 3])
    assert (lo, hi, cover) == (1, 5, pytest.approx(0.9375))
    lo, hi, cover = stats.median_interval(list(range(12)))
    assert (lo, hi) == (2, 9) and cover == pytest.approx(0.9614, abs=1e-4)


def test_shift_interval_from_the_exact_mann_whitney_law():
    assert sum(stats._mann_whitney_counts(3, 3)) == 20                      # C(6, 3) orderings
    assert stats.shift_interval([1, 2], [3, 4]) is None                      # 2 + 2 runs: 67 % at most
    lo, hi, cover = stats.shift_interval([1.0, 1.1, 0.9], [1.2, 1.3, 1.25])
    assert cover == pytest.approx(0.9) and lo == pytest.approx(1.2 / 1.1) and hi == pytest.approx(1.3 / 0.9)


@pytest.mark.parametrize("higher, interval, want", [
    (False, (1.02, 1.10), stats.WORSE), (False, (0.90, 0.98), stats.BETTER), (False, (0.98, 1.02), stats.SAME),
    (True, (1.02, 1.10), stats.BETTER), (True, (0.90, 0.98), stats.WORSE), (False, None, stats.UNKNOWN)])
def test_verdicts(higher, interval, want):
    assert stats.verdict(interval, higher) == want


def test_bootstrap_tells_a_shift_and_not_noise():
    rng = np.random.default_rng(7)
    base = 1000 + rng.exponential(200, 20000)
    assert stats.compare_samples(base, base).verdict == stats.SAME
    shifted = stats.compare_samples(base, base + 100)
    assert shifted.verdict == stats.WORSE and shifted.interval[0] > 1.0
    assert stats.compare_samples(base[:50], base[:50]).verdict == stats.UNKNOWN   # too few samples
    rounds = stats.compare_rounds([1.0, 1.1, 0.9, 1.0, 1.05], [1.2, 1.3, 1.25, 1.2, 1.22], higher_is_better=False)
    assert rounds.verdict == stats.WORSE and rounds.method == "rounds"


# --- fabmeter compare -----------------------------------------------------------------------------------------

def test_a_folder_against_itself_and_repeated_runs(fm, tmp_path):
    for i in range(3):
        r = fm.run("lat", "-t", "udp", "-n", "500", "--poll", "event", "--out", tmp_path / "base" / f"r{i}")
        assert r.returncode == 0, r.stderr
    r = fm.run("bw", "-t", "tcp", "-n", "300000", "--out", tmp_path / "base" / "bw")
    assert r.returncode == 0, r.stderr
    doc = compare_json(fm, tmp_path / "base", tmp_path / "base", "--fail-worse", "0%")
    assert {p["point"].split()[0]: p["verdict"] for p in doc["points"]} == {"lat": stats.SAME, "bw": stats.SAME}
    bw = [p for p in doc["points"] if p["point"].startswith("bw")][0]
    assert bw["method"] == "samples" and bw["figure"] == "msg/s", bw   # messages per bin of its series
    lat = [p for p in doc["points"] if p["point"].startswith("lat")][0]
    assert lat["method"] == "runs" and lat["runs"] == [3, 3] and lat["ratio"] == 1.0
    assert doc["unmatched_base"] == doc["unmatched_new"] == [] and doc["failing"] == 0
    assert doc["environment_diff"] == []
    r = fm.run("report", tmp_path / "base", "--compare", tmp_path / "base", "-o", tmp_path / "cmp.html")
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "cmp.html").read_text()
    assert 'id="comparison"' in html and "~ (cannot tell apart)" in html and "by the runs" not in html
    assert ">runs (3 + 3 runs)<" in html

    r = fm.run("lat", "-t", "tcp", "-n", "500", "--poll", "event", "--out", tmp_path / "other" / "tcp")
    assert r.returncode == 0, r.stderr
    text = compare(fm, tmp_path / "base", tmp_path / "other")
    assert text.returncode == 0, text.stderr
    assert "only in base: lat udp" in text.stdout and "only in new: lat tcp" in text.stdout


def test_mesh_pairs_are_matched_by_their_hosts(fm, tmp_path):
    token = tmp_path / "token"
    token.write_text(os.urandom(24).hex())
    token.chmod(0o600)
    r = fm.run("mesh", "--launch", "local", "--ranks", "3", "-t", "tcp", "--experiment", "bw", "--pattern",
               "all-to-one", "--token-file", token, "-s", "1K", "-n", "100000", "--series-ms", "0.5",
               "--out", tmp_path / "m", timeout=120)
    assert r.returncode == 0, r.stderr
    doc = compare_json(fm, tmp_path / "m", tmp_path / "m")
    assert sorted(p["point"] for p in doc["points"]) == ["mesh bw tcp 127.0.0.1#1 -> 127.0.0.1#0",
                                                        "mesh bw tcp 127.0.0.1#2 -> 127.0.0.1#0"], doc
    assert {(p["figure"], p["verdict"], p["method"]) for p in doc["points"]} == {("Gbit/s", stats.SAME, "samples")}


def test_refusals(fm, tmp_path):
    (tmp_path / "empty").mkdir()
    for args, needle in [((tmp_path / "nope", tmp_path / "empty"), "not a results folder"),
                         ((tmp_path / "empty", tmp_path / "empty"), "no measured point"),
                         ((tmp_path / "empty", tmp_path / "empty", "--fail-worse", "x"), "--fail-worse")]:
        r = compare(fm, *args)
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r


def test_a_delayed_link_reads_worse_by_the_delay(fm, tmp_path):
    """A, B, C on a bridge; base: A's round trips to B and to C; new: the same with DELAY_US added to A's
    packets to C. compare says worse on A-C, by an interval that holds the added half round trip."""
    net = f"10.195.{os.getpid() % 250}"
    with bridged_namespaces("fmcmp", net, 3) as [(ns_a, _), (ns_b, addr_b), (ns_c, addr_c)]:
        pairs = {"b": LossyPair(ns_b, ns_a, addr_b, {}), "c": LossyPair(ns_c, ns_a, addr_c, {})}

        def measure(folder: str) -> None:
            for name, pair in pairs.items():
                with pair.server(fm) as port:
                    pair.client(fm, port, *LAT, "--out", str(tmp_path / folder / name))

        measure("base")
        with delay_line(ns_a, DELAY_US, ["-p", "udp", "-d", addr_c]):
            measure("new")
    doc = compare_json(fm, tmp_path / "base", tmp_path / "new")
    by_host = {p["point"].rsplit(" to ", 1)[1]: p for p in doc["points"]}
    assert set(by_host) == {addr_b, addr_c}, doc
    c = by_host[addr_c]
    print("A-C", c, "\nA-B", by_host[addr_b])
    assert c["verdict"] == stats.WORSE and c["method"] == "samples", c
    # One direction delayed: RTT/2 rises by half the delay, and the delay line's own hop a little more.
    low, high = c["difference_interval"]
    assert low >= 0.8 * DELAY_US * 1000 / 2 and high >= DELAY_US * 1000 / 2, c
    assert compare(fm, tmp_path / "base", tmp_path / "new", "--fail-worse", "5%").returncode == 4
    assert compare(fm, tmp_path / "base", tmp_path / "new").returncode == 0
