"""`fabmeter load --search OBJECTIVES`: the highest offered rate that holds
latency objectives. The bisection itself is checked on a synthetic latency
curve (search.search takes the function that makes one run); the command
end to end with the real engine on the cases whose answer does not depend
on this machine's timing: objectives every rate holds (the capacity is the
answer, one run) and objectives no rate can hold (exit 4)."""

from __future__ import annotations

import json

import pytest

from conftest import json_lines, one_line_error
from fabmeter import search, slo


def curve(knee: float, capacity: float = 100_000):
    """A path whose p99 is 10 us up to `knee` requests/s and 1 ms above it."""
    runs = []

    def run_point(options: dict) -> dict:
        rate = capacity if options.get("of_capacity") else options["rate"][0]
        runs.append(rate)
        return {"offered_rps": rate, "iterations": 100, "latency_ns": {"p99": 10_000 if rate <= knee else 1_000_000}}
    return run_point, runs


@pytest.mark.parametrize("knee", [1_000, 37_000, 62_500, 99_000])
def test_bisection_finds_the_knee_within_tolerance(knee):
    run_point, runs = curve(knee)
    out = search.search(slo.parse("p99<=50us"), run_point, lambda line: None)
    assert out["rate_rps"] <= knee, out
    assert out["rate_rps"] >= knee / (1 + search.SEARCH_TOLERANCE) or len(runs) == search.SEARCH_STEPS, (out, runs)
    assert len(runs) <= search.SEARCH_STEPS and out["capacity_rps"] == 100_000
    assert [s["met"] for s in out["steps"]] == [r <= knee for r in runs]


def test_capacity_that_holds_is_the_answer():
    run_point, runs = curve(knee=1e9)
    out = search.search(slo.parse("p99<=50us"), run_point, lambda line: None)
    assert out["rate_rps"] == 100_000 and runs == [100_000]


def test_nothing_holds():
    run_point, runs = curve(knee=0)
    out = search.search(slo.parse("p99<=50us"), run_point, lambda line: None)
    assert out["rate_rps"] is None and runs == [100_000, 100_000 // 16, round(100_000 / 256)]


def test_search_end_to_end(fm, tmp_path):
    # 50 us per request: a capacity near 20 000/s; every rate holds p99 <= 60 s.
    r = fm.run("load", "-t", "shm", "--service-ns", "50000", "--duration", "0.2", "--search", "p99<=60s",
               "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    lines = json_lines(r.stdout)
    capacity, at_capacity, result = lines
    assert capacity["phase"] == "capacity" and at_capacity["slo"]["met"]
    assert result["type"] == "search" and result["rate_rps"] == at_capacity["offered_rps"] == result["capacity_rps"]
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["config"]["search"] == "p99<=60s" and doc["search"]["rate_rps"] == result["rate_rps"]
    assert len(doc["points"]) == 2 and doc["exit_code"] == 0


def test_search_that_no_rate_holds_exits_4(fm):
    r = fm.run("load", "-t", "shm", "--duration", "0.1", "--search", "p50<=1ns")
    assert r.returncode == 4, r.stderr
    assert "search: the highest offered rate holding p50<=1ns: none" in r.stdout
    assert r.stdout.count("search step") == 3


@pytest.mark.parametrize("args, says", [
    (["--search", "p99<=20"], "--search"),
    (["--search", "p99<=20us", "--rate", "1000"], "not with --rate"),
    (["--search", "p99<=20us", "--of-capacity", "0.5"], "not with --of-capacity"),
    (["--search", "p99<=20us", "--slo", "p99<=20us"], "not with --slo"),
])
def test_bad_search_one_line_exit_2(fm, args, says):
    r = fm.run("load", "-t", "shm", *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert says in one_line_error(r.stderr)
