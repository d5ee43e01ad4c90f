"""`fabmeter mesh --rank i` in four network namespaces on a bridge: tcp and udp, patterns and schedules, each
pair's clock fit (a rank's skewed clock recovered), a delay line on one link showing on that pair only."""

from __future__ import annotations

import time

import pytest

from delay_line import delay_line
from fabmeter.mesh import run as mesh_run
from mesh_helpers import DELAY_US, SMALL, check_pairs, run_ranks


@pytest.mark.parametrize("transport,pattern,schedule", [("tcp", "all-to-all", "chaotic"),
                                                        ("udp", "one-to-all", "scheduled")])
def test_mesh_in_four_namespaces(fm, four_hosts, token_file, transport, pattern, schedule):
    hosts = [addr for _, addr in four_hosts]
    rc, out, err, others = run_ranks(fm, hosts, ["-t", transport, "--pattern", pattern, "--schedule", schedule,
                                                 "--token-file", token_file, "--json", *SMALL],
                                     [("ip", "netns", "exec", ns) for ns, _ in four_hosts])
    assert rc == 0, err
    assert others == {1: 0, 2: 0, 3: 0}
    pairs, summary = check_pairs(out, pattern)
    assert summary["schedule"] == schedule and summary["round_start_skew_ns"] is not None
    # Every pair says how late after the round's instant it went on (its own clock) and how long before it its
    # engine was ready and had its session open; each round, and the whole mesh, the spread of them.
    assert all(p["start_late_ns"] >= 0 and p["start_margin_ns"] > 0 and p["start_ready_ns"] > 0
               for p in pairs.values()), pairs
    for r in summary["rounds"]:
        assert r["start_late_ns"]["n"] == len(r["pairs"]) and r["lead_ns"] >= mesh_run.MIN_LEAD_S * 1e9
        assert r["start_late_ns"]["p50"] <= r["start_late_ns"]["p99"] <= r["start_late_ns"]["max"]
        # A plan per other rank and a result per pair of its at least (rank 0's own pairs need no frame).
        others = [src for src, _ in r["pairs"] if src != 0]
        assert r["control"]["frames"] >= len(set(others)) + len(others)
        assert r["control"]["plan_ns"] < r["control"]["round_ns"]
    assert summary["start_late_ns"]["n"] == len(pairs)
    assert summary["start_skew_ns"]["n"] == len(summary["rounds"])
    assert summary["start_skew_ns"]["max"] == summary["round_start_skew_ns"]
    # A source's pairs of the rounds one after another on one engine client; at once (chaotic), one each.
    engines = len({src for src, _ in pairs}) if schedule == "scheduled" else len(pairs)
    assert summary["sessions"] == {"pairs": len(pairs), "client_engines": engines, "relay_sessions": None}


def test_a_skewed_clock_is_fitted_per_pair(fm, four_hosts, token_file):
    """Rank 2's engines run 1 s + 50 ppm off (FABMETER_CLOCK_SKEW): its
    pairs probe the clock and recover the offset, their one-way latencies
    are corrected; the other pairs share the clock."""
    hosts = [addr for _, addr in four_hosts]
    prefixes = [("ip", "netns", "exec", ns) for ns, _ in four_hosts]
    prefixes[2] += ("env", "FABMETER_CLOCK_SKEW=1000000000,50")
    injected_ns = lambda: 1e9 + 50e-6 * time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)  # noqa: E731
    first = injected_ns()
    rc, out, err, _ = run_ranks(fm, hosts, ["-t", "udp", "--schedule", "scheduled", "--token-file", token_file,
                                            "--json", "--poll", "event", *SMALL], prefixes)
    assert rc == 0, err
    pairs, _ = check_pairs(out, "all-to-all")
    last = injected_ns()
    for (src, dst), p in pairs.items():
        clock = p["clock"]
        if 2 not in (src, dst):
            assert clock["method"] == "shared_tsc", p
            continue
        assert clock["method"] == "probe" and clock["probes"] > 0, p
        # How the fit's probes travelled reaches the pair; which path a loaded machine allowed is not this
        # test's (on 2 busy CPUs every UDP burst fell back once: tests/test_twohost.py checks the kernel path).
        assert clock["path"] in ("udp_kernel_timestamps", "mixed", "control_channel"), p
        sign = 1 if dst == 2 else -1        # offset_ns is the server's clock minus the client's
        # The injected offset grew by 50 ppm while the test ran: the fit is what it was then, within the
        # bound; loose by 1 ms: at a load average of 8.5 a fit was 44 us outside its bound of 153 us.
        slack = clock["error_bound_ns"] + 1e6
        assert first - slack <= sign * clock["offset_ns"] <= last + slack, p
        # Corrected, the minimum is the truth within the bound; uncorrected it would be off by over 1 s.
        # Loose: at a load average of 8 a pair's minimum reached 37 ms (the receiver descheduled).
        assert abs(p["latency_ns"]["min"]) < 0.5e9, p


def test_delay_on_one_link_shows_on_that_pair_only(fm, four_hosts, token_file):
    """udp all-to-all, scheduled, a delay on A's packets to C: A->C's one-way
    latency carries it, the other pairs do not."""
    (ns_a, _), _, (_, addr_c), _ = four_hosts
    hosts = [addr for _, addr in four_hosts]
    with delay_line(ns_a, DELAY_US, ["-p", "udp", "-d", addr_c]):
        rc, out, err, others = run_ranks(fm, hosts, ["-t", "udp", "--pattern", "all-to-all", "--schedule",
                                                     "scheduled", "--token-file", token_file, "--json",
                                                     "--poll", "event", *SMALL],
                                         [("ip", "netns", "exec", ns) for ns, _ in four_hosts])
    assert rc == 0, err
    pairs, summary = check_pairs(out, "all-to-all")
    assert len(summary["rounds"]) == 3
    p50_us = {k: p["latency_ns"]["p50"] / 1000 for k, p in pairs.items()}
    print("p50 one-way us", p50_us, "round skew", [r["start_skew_ns"] for r in summary["rounds"]])
    delayed = p50_us.pop((0, 2))
    # Loose: the delayed pair is above the others' median by most of the delay.
    others = sorted(p50_us.values())
    assert delayed > others[len(others) // 2] + 0.5 * DELAY_US, (delayed, p50_us)
    delayed_min = pairs[(0, 2)]["latency_ns"]["min"] / 1000
    assert delayed_min >= 0.8 * DELAY_US
    # The others' minimum is well below it; loose: on 2 loaded CPUs one pair in a run may be descheduled.
    undelayed = {k: p["latency_ns"]["min"] / 1000 for k, p in pairs.items() if k != (0, 2)}
    below = [k for k, v in undelayed.items() if v < delayed_min - 0.5 * DELAY_US]
    assert len(below) >= len(undelayed) - 1, (delayed_min, undelayed)
