"""limits' hiccup detector (`fabmeter-engine limits --hiccups`): a reader per CPU spinning on the TSC finds a
gap a test injects with a real-time busy loop on its CPU, at the length injected, and none on a CPU left to it;
the run's table and the report's machine line show what it found.

The readers run SCHED_FIFO (--hiccup-fifo), so the ordinary tasks of this shared, loaded VM do not preempt
them, for 0.8 s: the kernel's fair server takes 50 ms from a real-time thread that held a CPU for about 0.95 s
while ordinary tasks waited there (on this VM they always do). What still stops such a reader here (the
hypervisor's steal, interrupts) took at most 5.4 ms in a second over 8 runs of one CPU, so the tests count gaps
over 10 ms; with both CPUs held, a gap of the VM's own over 10 ms was seen once in 20 runs, which the injection
tests tell apart from the injected gaps by their length."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import json_lines

# The other limits at their least: the detector runs first, these take a few ms after it.
QUICK = ["-n", "100", "--sizes", "32", "--timer-wakeups", "1", "--wakeup-round-trips", "1", "--schedule-steps", "1",
         "--connects", "1"]
THRESHOLD_US = 10_000
WINDOW_S = 0.8
INJECT_MS = 20
INJECT_AFTER_S = 0.45   # after the engine starts: its window opens first (50 ms in, and the exec), closes 0.8 s later

# A SCHED_FIFO busy loop above the readers' priority, pinned to their CPU: it sleeps until `after` s past the
# time.monotonic() its standard input gives, then spins for exactly
# INJECT_MS on its own clock and gives up its priority; it ends on its own deadline whatever happens to the test.
INJECTOR = textwrap.dedent("""
    import os, sys, time
    os.sched_setaffinity(0, [{cpu}])
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    print("ready", flush=True)
    time.sleep(max(0.0, float(sys.stdin.readline()) + {after} - time.monotonic()))
    t0 = time.monotonic()
    while (spun := time.monotonic() - t0) < {ms} / 1000:
        pass
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # the reader's CPU back at once, not after our exit
    print(spun, flush=True)
""")


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def _limits(engine, cpus: list[int]) -> list[str]:
    return [str(engine), "limits", *QUICK, "--hiccups", "--hiccup-cpus", ",".join(map(str, cpus)), "--hiccup-fifo",
            "10", "--hiccup-seconds", str(WINDOW_S), "--hiccup-threshold-us", str(THRESHOLD_US)]


def _hiccups_of(returncode: int, out: str, err: str) -> dict:
    assert returncode == 0, err
    (lim,) = json_lines(out)
    return lim["hiccups"]


def _hiccups(engine, cpus: list[int]) -> dict:
    r = subprocess.run(_limits(engine, cpus), capture_output=True, text=True, timeout=60)
    return _hiccups_of(r.returncode, r.stdout, r.stderr)


def _can_fifo() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (PermissionError, AttributeError):
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True


needs_fifo = pytest.mark.skipif(not _can_fifo(), reason="SCHED_FIFO is not ours to take here")


def _injected(engine, cpus: list[int], starts: list[float]) -> tuple[dict, list[float]]:
    """The detector on `cpus` while a loop is injected on each, INJECT_AFTER_S + `starts` s after the engine
    starts; and what each spun."""
    injs = [subprocess.Popen([sys.executable, "-c", INJECTOR.format(cpu=c, after=INJECT_AFTER_S + s, ms=INJECT_MS)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for c, s in zip(cpus, starts)]
    try:
        assert [inj.stdout.readline().strip() for inj in injs] == ["ready"] * len(injs)
        limits = subprocess.Popen(_limits(engine, cpus), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started = time.monotonic()
        for inj in injs:
            inj.stdin.write(f"{started}\n")
            inj.stdin.close()
        out, err = limits.communicate(timeout=60)
        spun = [float(inj.stdout.readline()) for inj in injs]
    finally:
        for inj in injs:
            if not inj.stdin.closed:
                inj.stdin.close()   # no start time: it fails at once, and never spins
            inj.wait(timeout=30)
    assert [inj.returncode for inj in injs] == [0] * len(injs)
    return _hiccups_of(limits.returncode, out, err), spun


def _the_injected(h: dict, cpu: int, spun_s: float) -> dict:
    """The gap the loop injected on `cpu` made: at least what it spun, plus its wake-up (0.01-0.3 ms), the call
    that gave up its priority, and whatever ordinary task the readers had kept waiting on that CPU and the kernel's
    fair server runs before the reader gets it back (0.15 ms on 2026-11-27; 1.3-3 ms on 2026-11-28, while DAMON's
    kdamond, an ordinary kernel thread, ran ~1.4 ms a turn on the VM). Any other gap over the threshold is the VM's own (the hypervisor's
    steal)."""
    found = [g for g in h["gaps"] if g["cpu"] == cpu and spun_s * 1e6 <= g["length_us"] <= spun_s * 1e6 + 5000]
    assert len(found) == 1, (h["gaps"], spun_s)
    gap = found[0]
    assert 0 < gap["start_us"] < WINDOW_S * 1e6
    return gap


@needs_fifo
def test_detector_finds_an_injected_gap_at_its_length(engine):
    cpu = _cpus()[-1]
    h, (spun_s,) = _injected(engine, [cpu], [0.0])
    assert h["cpus"] == [cpu] and h["threshold_us"] == THRESHOLD_US and h["fifo"] == 10
    gap = _the_injected(h, cpu, spun_s)
    assert not gap["all_cpus"] and h["all_cpus_gaps"] == []
    lengths = [g["length_us"] for g in h["gaps"]]
    assert (h["count"], h["unlisted"]) == (len(lengths), 0)
    assert (h["longest_us"], h["total_us"]) == (pytest.approx(max(lengths)), pytest.approx(sum(lengths)))
    assert h["per_cpu"] == [{"cpu": cpu, "count": len(lengths), "longest_us": pytest.approx(max(lengths)),
                             "total_us": pytest.approx(sum(lengths))}]


@needs_fifo
def test_detector_finds_nothing_on_a_cpu_left_to_it(engine):
    h = _hiccups(engine, _cpus()[-1:])
    assert (h["count"], h["gaps"], h["unlisted"], h["longest_us"]) == (0, [], 0, 0), json.dumps(h)


def _overlap(a: dict, b: dict) -> bool:
    return a["start_us"] < b["start_us"] + b["length_us"] and b["start_us"] < a["start_us"] + a["length_us"]


@needs_fifo
@pytest.mark.parametrize("apart_s", [0.0, 0.2])
def test_gaps_on_every_cpu_at_once_are_the_smi_signature(engine, apart_s):
    """Two readers, each CPU stopped once by an injected loop: flagged when the two loops run at once (their
    common span listed), not when they run 0.2 s apart. A gap is flagged exactly when it overlaps one of the
    other CPU's (the VM's own gaps included)."""
    cpus = _cpus()[:2]
    if len(cpus) < 2:
        pytest.skip("one CPU")
    h, spun = _injected(engine, cpus, [0.0, apart_s])
    first, second = (_the_injected(h, c, s) for c, s in zip(cpus, spun))
    assert _overlap(first, second) is not bool(apart_s)
    for g in h["gaps"]:
        assert g["all_cpus"] == any(_overlap(g, o) for o in h["gaps"] if o["cpu"] != g["cpu"]), h["gaps"]
    if not apart_s:
        later = max(first, second, key=lambda g: g["start_us"])
        common = {"start_us": pytest.approx(later["start_us"]),
                  "length_us": pytest.approx(min(g["start_us"] + g["length_us"] for g in (first, second))
                                             - later["start_us"])}
        assert common in h["all_cpus_gaps"]


def test_hiccup_options_refused(engine):
    for args in (["--hiccup-seconds", "0"], ["--hiccup-seconds", "x"], ["--hiccup-threshold-us", "0"],
                 ["--hiccup-fifo", "100"], ["--hiccup-cpus", "100000"], ["--hiccup-cpus", "0,,1"]):
        r = subprocess.run([str(engine), "limits", "--hiccups", *args], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("fabmeter-engine: error: --hiccup-"), r.stderr


# --- where the hiccups are shown ------------------------------------------------------

HICCUPS = {"seconds": 0.2, "threshold_us": 100, "fifo": 0, "cpus": [0, 1], "count": 3, "longest_us": 260.5,
           "total_us": 650.0, "unlisted": 0,
           "per_cpu": [{"cpu": 0, "count": 2, "longest_us": 260.5, "total_us": 390.5},
                       {"cpu": 1, "count": 1, "longest_us": 259.5, "total_us": 259.5}],
           "gaps": [{"cpu": 0, "start_us": 10.0, "length_us": 260.5, "all_cpus": True},
                    {"cpu": 1, "start_us": 11.0, "length_us": 259.5, "all_cpus": True},
                    {"cpu": 0, "start_us": 9000.0, "length_us": 130.0, "all_cpus": False}],
           "all_cpus_gaps": [{"start_us": 11.0, "length_us": 259.5}]}


def test_the_run_table_ends_with_the_hiccups_per_cpu():
    from fabmeter import analysis
    text = analysis.hiccups_table(HICCUPS)
    assert text.splitlines()[0] == ("hiccups over 100 us in 0.2 s on CPUs 0,1: 3, longest 260.5 us, 1 on every "
                                    "CPU at once (readers at normal priority: an SMI or preemption, cannot tell)")
    # Readers at real-time priority: the scheduler cannot have preempted them all at once.
    assert analysis.hiccups_words(dict(HICCUPS, fifo=10)).endswith("1 on every CPU at once (the SMI signature)")
    assert [line.split() for line in text.splitlines()[3:]] == [["0", "2", "260.5", "390.5"],
                                                                ["1", "1", "259.5", "259.5"]]
    none = dict(HICCUPS, count=0, per_cpu=[], gaps=[], all_cpus_gaps=[])
    assert analysis.hiccups_words(none) == "hiccups over 100 us in 0.2 s on CPUs 0,1: 0"


def test_a_runs_table_ends_with_its_hiccups_where_there_were_some(fm, tmp_path):
    from fabmeter import analysis
    r = fm.measuring_limits().run("lat", "-t", "tcp", "-n", "300", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "run.json").read_text())
    some = analysis.run_report(doc["points"], limits=dict(doc["limits"], hiccups=HICCUPS))
    assert some.endswith(analysis.hiccups_table(HICCUPS))
    none = analysis.run_report(doc["points"], limits=dict(doc["limits"], hiccups=dict(HICCUPS, count=0)))
    assert "hiccups" not in none and some.startswith(none)


def test_the_reports_machine_line_sums_the_runs_hiccups(tmp_path):
    from fabmeter.report import context
    from fabmeter.report.model import Run
    env = {"cpu_model": "X", "cpu_count": 2, "kernel": {"release": "6"}}
    runs = [Run(f"r{i}", tmp_path, {"environment": env, "limits": {"hiccups": h}})
            for i, h in enumerate([HICCUPS, dict(HICCUPS, count=0, longest_us=0, all_cpus_gaps=[])])]
    assert context.hiccups_summary(runs) == ("hiccups over 100 us: 3 in 2 runs' limits, longest 260.5 us, 1 on every "
                                             "CPU at once (readers at normal priority: an SMI or preemption, "
                                             "cannot tell)")
    assert context.hiccups_summary(runs) in context.machine_line(runs)
    assert context.hiccups_summary([Run("r", tmp_path, {"environment": env})]) == ""
