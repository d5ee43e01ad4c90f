"""`fabmeter mesh` at cluster size without a data path: the real coordinator (join, clock offsets, every round's
plan, round barriers, the summary) with 256 and 1,024 light ranks (tests/mesh_sim.py), its per-round planning
time, control frames and bytes and its memory. docs/performance.md has the figures."""

from __future__ import annotations

import time

import pytest

import mesh_sim
from fabmeter.mesh import patterns


@pytest.mark.parametrize("n,rounds", [(256, 32), (1024, 16)])
def test_a_simulated_mesh_of_many_ranks(n, rounds):
    t0 = time.monotonic()
    result = mesh_sim.simulate(n, rounds, timeout=120)
    took = time.monotonic() - t0
    print({k: v for k, v in result.items() if k != "rounds"})
    for r in result["rounds"]:
        print(r)
    assert result["exit"] == 0 and result["rank_exits"] == [0, 0] and result["failed"] == 0
    expected = list(patterns.iter_rounds("all-to-all", "scheduled", n))[:rounds]
    assert [r["pairs"] for r in result["rounds"]] == [len(x) for x in expected]
    assert result["pairs"] == sum(len(x) for x in expected) == n * rounds
    for r in result["rounds"]:
        # a round frame to every rank but 0, every pair's result but rank 0's own (no channel), each over 200 B;
        # heartbeats beside, as many as the round's time allows (small: not counted in the bound on bytes)
        planned = (n - 1) + (r["pairs"] - 1)
        assert r["frames"] >= planned and r["bytes"] > 200 * planned
        assert 0 < r["plan_ns"] < r["round_ns"]
    assert result["rss_mesh_kib"] < 200 * 1024      # the coordinator's memory for the whole mesh
    assert took < 60, took
