"""The machine-limits probe: its own output, and that every local run with
--out records it in run.json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from conftest import json_lines


def test_limits_probe_reports_every_figure(engine):
    r = subprocess.run([str(engine), "limits", "--cpus", "0,1", "-n", "2000", "--sizes", "32,65536",
                        "--timer-wakeups", "20", "--wakeup-round-trips", "20", "--schedule-rate", "50000",
                        "--schedule-steps", "2000", "--connects", "200"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (lim,) = json_lines(r.stdout)
    assert lim["cpus"] == [0, 1] and lim["cacheline_kind"] == "rtt/2"
    cl = lim["cacheline_oneway_ns"]
    assert 0 < cl["min"] <= cl["p50"] <= cl["p99"] <= cl["max"]
    assert lim["cacheline_oneway_bulk_ns"] > 0
    two = lim["two_lines_oneway_ns"]
    assert 0 < two["min"] <= two["p50"] <= two["max"] and lim["two_lines_oneway_bulk_ns"] > 0
    # Threads that really slept: a wake-up costs more than a cache-line hand-over.
    assert lim["wakeup_oneway_ns"]["p50"] > cl["p50"]
    assert set(lim["memcpy_gbps"]) == {"32", "65536"} and all(v > 0 for v in lim["memcpy_gbps"].values())
    assert lim["timestamp_cost_ns"]["clock_gettime"] > 0 and lim["record_cost_ns"] > 0
    assert lim["hist_record_cost_ns"] > 0
    for kind in ("timerfd_late_ns", "nanosleep_late_ns"):
        late = lim["timer_wakeup"][kind]
        assert late["min"] >= 0 and late["p50"] <= late["max"]
    # The schedule floor: on CPU A, at the rate asked, after stream's default warm-up (0.1 s, at most 1000).
    floor = lim["schedule_floor"]
    assert (floor["cpu"], floor["schedule_rate"], floor["schedule_steps"], floor["warmup"]) == (0, 50000, 2000, 1000)
    assert 0 <= floor["missed_steps"] <= 2000
    assert floor["missed_pct"] == 100.0 * floor["missed_steps"] / 2000
    lag = floor["lag_ns"]
    assert 0 <= lag["min"] <= lag["p50"] <= lag["p99"] <= lag["max"], lag
    # Once more with a thread spinning on CPU B, as stream's busy sink keeps it.
    busy = lim["schedule_floor_busy_sink"]
    assert (busy["cpu"], busy["busy_cpu"], busy["schedule_steps"]) == (0, 1, 2000) and "busy_cpu" not in floor
    assert busy["missed_pct"] == 100.0 * busy["missed_steps"] / 2000
    # setup's floor: a bare loopback connect/accept, as percentiles.
    conn = lim["connect_floor_ns"]
    assert 0 < conn["min"] <= conn["p50"] <= conn["p90"] <= conn["p99"] <= conn["max"]
    assert "connect" in lim["connect_floor_covers"]


def test_the_schedule_floor_counts_every_slot_a_stall_skipped_in_its_lag(engine):
    """The engine stopped for 50 ms in the middle of its schedule floor (10 kHz, 2 s): ~500 slots are skipped,
    each with the lag it had at the wake-up that skipped it (0 to 50 ms), so the p99 of 20,000 lies in the stall;
    were only the slots taken counted, one slot would carry it and the p99 would be the spin's microseconds."""
    quick = ["-n", "100", "--sizes", "32", "--timer-wakeups", "1", "--wakeup-round-trips", "1", "--connects", "1"]
    proc = subprocess.Popen([str(engine), "limits", *quick, "--schedule-rate", "10000", "--schedule-steps", "20000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)         # inside the first floor: it runs from ~0.1 s to ~2.2 s
    proc.send_signal(signal.SIGSTOP)
    time.sleep(0.05)
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    (lim,) = json_lines(out)
    floor = lim["schedule_floor"]
    assert floor["missed_steps"] >= 400, floor
    assert floor["lag_ns"]["p99"] > 20e6 and floor["lag_ns"]["max"] > 45e6, floor


def test_limits_bad_arguments(engine):
    for args in (["--cpus", "0"], ["-n", "0"], ["--wakeup-round-trips", "0"], ["--sizes", "x"], ["--bogus"],
                 ["--schedule-rate", "0"], ["--schedule-rate", "20000000"], ["--schedule-steps", "0"],
                 ["--connects", "0"]):
        r = subprocess.run([str(engine), "limits", *args], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("fabmeter-engine: error: ")


def test_every_local_run_records_limits(fm, tmp_path):
    r = fm.measuring_limits().run("lat", "-t", "tcp", "-s", "64", "-n", "500", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["limits"]["cpus"] == run["config"]["cpus"]
    # With the hiccup detector's 0.2 s on every allowed CPU.
    hiccups = run["limits"]["hiccups"]
    assert (hiccups["seconds"], hiccups["threshold_us"]) == (0.2, 100)
    assert hiccups["cpus"] == sorted(os.sched_getaffinity(0)) and hiccups["count"] == len(hiccups["gaps"])
    assert list(run["limits"]["memcpy_gbps"]) == ["64"]
    assert run["limits"]["schedule_floor"]["schedule_steps"] == 10000
    assert run["limits"]["connect_floor_ns"]["p50"] > 0


def test_the_test_hook_leaves_limits_out(fm, tmp_path):
    """FABMETER_LIMITS=off (conftest's runners say it): run.json without limits, the run itself whole."""
    assert fm.env["FABMETER_LIMITS"] == "off"
    r = fm.run("lat", "-t", "tcp", "-s", "64", "-n", "200", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    run = json.loads((tmp_path / "run.json").read_text())
    assert "limits" not in run and run["status"] == "ok" and run["points"]
