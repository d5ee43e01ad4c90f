"""`fabmeter mesh`'s pair sets and schedules (python/fabmeter/mesh/patterns.py): every pattern's pairs, the
tournament's rounds, every schedule holding each pair once."""

from __future__ import annotations

import itertools

import pytest

from fabmeter.mesh import patterns


@pytest.mark.parametrize("n", range(2, 8))
def test_tournament_meets_every_two_hosts_once_and_no_host_twice_a_round(n):
    rounds = list(patterns.tournament(n))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    met = [p for r in rounds for p in r]
    assert sorted(met) == sorted(itertools.combinations(range(n), 2))
    for r in rounds:
        hosts = [h for p in r for h in p]
        assert len(hosts) == len(set(hosts)), r


@pytest.mark.parametrize("n", range(2, 8))
@pytest.mark.parametrize("pattern", patterns.PATTERNS)
def test_rounds_hold_each_pair_once(pattern, n):
    wanted = patterns.pairs(pattern, n)
    assert wanted and all(s != d and 0 <= s < n and 0 <= d < n for s, d in wanted)
    for schedule in patterns.SCHEDULES:
        rounds = patterns.rounds(pattern, schedule, n)
        assert sorted(p for r in rounds for p in r) == wanted
    for r in patterns.rounds(pattern, "scheduled", n):
        partner = {}
        for s, d in r:    # each host has at most one partner in a round (both directions to it allowed)
            assert partner.setdefault(s, d) == d and partner.setdefault(d, s) == s, r


def test_pair_sets():
    assert patterns.pairs("one-to-all", 4) == [(0, 1), (0, 2), (0, 3)]
    assert patterns.pairs("all-to-one", 4) == [(1, 0), (2, 0), (3, 0)]
    assert patterns.pairs("ring", 4) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert patterns.pairs("fixed-target", 4) == [(0, 2), (1, 3), (2, 0), (3, 1)]
    assert patterns.pairs("pairs", 5) == [(0, 1), (1, 0), (2, 3), (3, 2)]
    assert len(patterns.pairs("all-to-all", 4)) == 12
