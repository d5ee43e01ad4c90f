"""A round's start: its lead and the spread of its start; the engine's --start-at (connected first, then
waiting for the instant at real-time priority; a stream's steps planned from it; a bad instant refused);
every pair of a round ready before its instant and starting at it."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import free_port
from fabmeter import run, stats
from mesh_helpers import SMALL


def test_spread_is_nearest_rank():
    assert stats.spread([]) is None
    assert stats.spread([5]) == {"n": 1, "p50": 5, "p99": 5, "max": 5}
    assert stats.spread(list(range(100, 0, -1))) == {"n": 100, "p50": 50, "p99": 99, "max": 100}


def test_the_lead_is_twice_what_the_slowest_recent_engine_needed():
    from fabmeter.mesh import run as mesh_run
    lead = mesh_run.Lead(1.0)
    lead.after([])                              # no pair said: as it was
    assert lead.ns == 1_000_000_000
    lead.after([900_000_000, 600_000_000])      # the slowest ready 0.4 s after the plan went: 0.8 s
    assert lead.ns == 800_000_000
    lead.after([700_000_000])                   # 0.1 s needed now, but 0.4 s a round ago: kept
    assert lead.ns == 800_000_000
    lead.after([-2_000_000_000])                # one not ready until 2 s after its instant: 2.8 s needed
    assert lead.ns == 5_600_000_000
    lead.after([-60_000_000_000])
    assert lead.ns == int(mesh_run.MAX_LEAD_S * 1e9)
    quick = mesh_run.Lead(1.0)
    for _ in range(mesh_run.LEAD_WINDOW + 1):   # engines ready at once: down to the floor, not below
        quick.after([quick.ns])
    assert quick.ns == int(mesh_run.MIN_LEAD_S * 1e9)


def test_the_first_lead_grows_with_the_engines_one_machine_starts():
    """Nothing is measured before the first round: its lead grows with the engine clients (one a pair, on its
    source) the busiest machine starts at once; namespaces of one machine share a hostname."""
    from fabmeter.mesh import patterns, run as mesh_run
    chaotic = patterns.rounds("all-to-all", "chaotic", 4)[0]          # 12 pairs, 3 from each host
    scheduled = patterns.rounds("all-to-all", "scheduled", 4)[0]      # 4 pairs, 1 from each host
    one_machine, four_machines = ["vm"] * 4, ["a", "b", "c", "d"]
    lead = mesh_run.first_lead_s
    assert lead(chaotic, one_machine) == pytest.approx(mesh_run.ROUND_LEAD_S + 12 * mesh_run.LEAD_PER_ENGINE_S)
    assert lead(chaotic, four_machines) == pytest.approx(mesh_run.ROUND_LEAD_S + 3 * mesh_run.LEAD_PER_ENGINE_S)
    assert lead(scheduled, one_machine) == pytest.approx(mesh_run.ROUND_LEAD_S + 4 * mesh_run.LEAD_PER_ENGINE_S)
    assert lead(chaotic, [None, None, "c", "d"]) == lead(chaotic, ["x", "x", "c", "d"])   # unknown: shared
    assert lead([], one_machine) == mesh_run.ROUND_LEAD_S
    assert lead(patterns.rounds("all-to-all", "chaotic", 64)[0], ["vm"] * 64) == mesh_run.MAX_LEAD_S


@pytest.mark.parametrize("poll", ["busy", "event"])
def test_the_engine_starts_its_first_point_at_the_given_instant(fm, engine, poll):
    """`fabmeter-engine run --start-at NS`, as mesh starts a round's pairs: the
    connection is made at once, the first point's measured part waits for NS
    on CLOCK_MONOTONIC (Python's time.monotonic_ns) and its point line says
    when it went on; the second point does not wait again."""
    start = time.monotonic_ns() + 2_000_000_000       # room for a loaded host to connect first
    res = run.execute(run.RunSpec("lat", {"transport": "tcp", "poll": poll, "all": True, "max_size": 2, "iters": 200,
                                          "warmup": 20}, engine=str(engine), start_at_ns=start))
    assert res.exit_code == 0, res.message
    first, second = res.points
    assert first["started_mono_ns"] >= start and first["start_late_ns"] == first["started_mono_ns"] - start
    # Connected, authenticated and at the first point's barrier before the instant, not after it; each step to
    # it stamped in order (the late reason's evidence), no SYN lost on loopback.
    assert first["ready_mono_ns"] < start
    steps = first["start_steps_mono_ns"]
    order = [steps[k] for k in ("begun", "control_connected", "welcomed", "transport_connected", "probed")]
    assert order == sorted(order) and order[0] > 0 and order[-1] <= first["ready_mono_ns"], steps
    assert steps["control_syn_retransmits"] == 0, steps
    assert "started_mono_ns" not in second and "ready_mono_ns" not in second
    assert "start_steps_mono_ns" not in second
    past = time.monotonic_ns() - 1_000_000_000       # an instant gone by: at once, and said how late
    res = run.execute(run.RunSpec("lat", {"transport": "tcp", "iters": 100}, engine=str(engine), start_at_ns=past))
    assert res.exit_code == 0 and res.points[0]["start_late_ns"] >= 1_000_000_000


def _policies(pid: int) -> set[int]:
    """The scheduling policies of a process's threads (/proc stat field 41: 0 normal, 1 SCHED_FIFO)."""
    out = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{task}/stat").read()
        except OSError:
            continue
        out.add(int(stat[stat.rindex(")") + 2:].split()[38]))
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="real-time priority wants root (else the shortest slice)")
def test_the_start_at_wait_runs_first_and_the_run_does_not(engine):
    """While the engine sleeps for its --start-at instant its thread is at real-time priority (SCHED_FIFO), so a
    round's engines woken together each start then; from its start stamp on, every thread is back to normal."""
    port = free_port()
    server = subprocess.Popen([str(engine), "serve", "--bind", "127.0.0.1", "--port", str(port), "--once"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "listening" in server.stdout.readline()
        start = time.monotonic_ns() + 3_000_000_000      # room for a loaded host to connect first
        client = subprocess.Popen([str(engine), "run", "lat", "--server", f"127.0.0.1:{port}", "-t", "tcp",
                                   "--poll", "event", "--duration", "1.5", "--start-at", str(start)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        waiting, running = set(), set()
        while client.poll() is None and time.monotonic_ns() < start + 1_200_000_000:
            now = time.monotonic_ns()
            try:
                got = _policies(client.pid)
            except FileNotFoundError:
                break
            if now < start - 50_000_000:
                waiting |= got
            elif now > start + 300_000_000:
                running |= got
            time.sleep(0.05)
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, err
        assert 1 in waiting, waiting
        assert running == {0}, running
    finally:
        server.kill()
        server.communicate()


def test_stream_steps_start_at_the_given_instant_and_are_listed(engine):
    """stream with --start-at: step 0 is due at that instant (step0_mono_ns), so each step's send lateness is
    against the plan; --per-step lists every measured step's lateness and latency; too many steps are refused."""
    start = time.monotonic_ns() + 400_000_000
    res = run.execute(run.RunSpec("stream", {"transport": "udp", "poll": "event", "timer": "nanosleep",
                                             "rate": [200], "count": 20, "warmup": 3, "per_step": True},
                                  engine=str(engine), start_at_ns=start))
    assert res.exit_code == 0, res.message
    (point,) = res.points
    assert point["step0_mono_ns"] == start and point["started_mono_ns"] >= start
    assert len(point["step_late_ns"]) == len(point["step_latency_ns"]) == 20
    sent = [x for x in point["step_late_ns"] if x is not None]
    # Loose: on 2 loaded CPUs a wake-up may come milliseconds late, never a whole step early.
    assert len(sent) >= 10 and min(sent) > -5_000_000 and abs(point["source_late_ns"]["max"] - max(sent)) <= 1
    r = subprocess.run([str(engine), "run", "stream", "--server", "127.0.0.1:9", "--per-step", "--rate", "5000",
                        "--count", "3000"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "--per-step lists at most 2048" in r.stderr, r.stderr


@pytest.mark.parametrize("value,why", [("soon", "expected CLOCK_MONOTONIC nanoseconds"), ("0", "expected"),
                                      (str(10**18), "more than 600 s ahead")])
def test_the_engine_refuses_a_bad_start_instant(engine, value, why):
    r = subprocess.run([str(engine), "run", "lat", "--server", "127.0.0.1:9", "--start-at", value],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and why in r.stderr, r.stderr


def test_a_round_connects_before_its_instant_and_starts_at_it(fm, token_file, tmp_path):
    """Every pair of a scheduled round is ready before the round's instant (its engine connected, authenticated,
    probed and at its first point's barrier: start_ready_ns > 0, and after the plan went out: < the round's
    lead) and sends its first message no earlier than the instant (start_late_ns >= 0); mesh.json says so per
    round and over the mesh. Not a speed check: the lead leaves any loaded host room, and lateness has no upper
    bound."""
    r = fm.run("mesh", "--launch", "local", "--ranks", "4", "-t", "tcp", "--poll", "event", "--mesh-port",
               free_port(), "--token-file", token_file, "--out", tmp_path, *SMALL, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "mesh.json").read_text())
    assert len(doc["pairs"]) == 12 and len(doc["mesh"]["rounds"]) == 3
    lead = {tuple(p): rnd["lead_ns"] for rnd in doc["mesh"]["rounds"] for p in rnd["pairs"]}
    for p in doc["pairs"]:
        assert p["status"] == "ok", p
        assert 0 < p["start_ready_ns"] < lead[p["src"], p["dst"]], p
        assert p["start_late_ns"] >= 0, p
    for rnd in doc["mesh"]["rounds"]:
        assert 0 < rnd["start_ready_min_ns"] < rnd["lead_ns"] and rnd["start_skew_ns"] >= 0, rnd
    assert doc["mesh"]["start_ready_ns"]["n"] == doc["mesh"]["start_late_ns"]["n"] == 12
    assert doc["mesh"]["start_skew_ns"]["n"] == 3
