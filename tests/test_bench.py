"""The bench's own logic (its figures are measured by `make bench`, never
asserted): verdicts against targets, and the Soft-RoCE table it reads."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import need_transport
from fabmeter import bench, recorded, run
from fabmeter.errors import FabmeterError


def row(target, ours, theirs, higher=False):
    r = bench.Row("r", lambda: 0.0, "v", lambda: 0.0, "f", target, higher_is_better=higher)
    r.ours, r.theirs = list(ours), list(theirs)
    return r


def test_verdicts_come_from_the_rounds_interval_against_the_target():
    """Met or not met only when every plausible median round ratio lies on one side of the target; rounds
    that straddle it, or fewer than five, cannot tell."""
    theirs = [100.0] * 5
    assert row(1.25, [110, 112, 115, 118, 120], theirs).judged() == ((1.10, 1.20), "met")
    assert row(1.05, [110, 112, 115, 118, 120], theirs).judged()[1] == "not met"
    assert row(1.15, [110, 112, 115, 118, 120], theirs).judged()[1] == "cannot tell"
    assert row(1.0, [110, 112, 115, 118, 120], theirs, higher=True).judged()[1] == "met"
    assert row(1.0, [90, 95, 92, 99, 98], theirs, higher=True).judged()[1] == "not met"
    assert row(1.0, [90, 95, 92, 99], theirs[:4]).judged() == (None, "cannot tell")   # 4 rounds: no interval
    assert row(1.0, [100.0] * 5, theirs, higher=True).judged()[1] == "met"       # at the bound: it may reach it
    assert row(None, [90, 95, 92, 99, 98], theirs).judged() == ((0.90, 0.99), None)  # a floor has no verdict


def test_a_zero_beside_a_zero_is_parity():
    """The stream row on a quiet machine: when the schedule floor misses no step, a stream that misses none
    meets the target and one that misses any does not (there is no finite ratio)."""
    assert bench.ratio_of(0.0, 0.0) == 1.0 and row(1.1, [0.0] * 5, [0.0] * 5).judged()[1] == "met"
    assert row(1.1, [0.2] * 5, [0.0] * 5).judged()[1] == "not met"
    assert row(1.0, [5.0] * 5, [0.0] * 5, higher=True).judged()[1] == "met"
    assert bench.ratio_of(3.0, 2.0) == 1.5 and bench.ratio_of(None, 2.0) is None


def test_rdma_table_from_the_last_test_rdma(tmp_path, monkeypatch):
    f = tmp_path / "results.json"
    monkeypatch.setattr(bench, "RDMA_RESULTS", f)
    assert bench.rdma_table() is None
    f.write_text(json.dumps({"date": "2026-11-21T07:26:08+0000", "comparison": [
        {"service": "rc", "op": "send", "fabmeter_p50_ns": 33000, "perftest_typical_us": 30.0,
         "perftest_tool": "ib_send_lat"}]}))
    date, rows = bench.rdma_table()
    assert date.startswith("2026-11-21")
    assert rows == [["verbs rc send", "ib_send_lat", 33000, 30000.0, "1.10x"]]


def test_fabmeter_side_records_the_engines_params(tmp_path, engine, monkeypatch):
    """A bench row's fabmeter run: typed options in, run.json's config is the engine's params."""
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))
    b = bench.Bench(tmp_path, None, str(engine))
    measure = b.fabmeter("lat", {"transport": "tcp", "poll": "event", "size": 64, "iters": 200},
                         lambda p: p["latency_ns"]["p50"])
    assert measure() > 0
    [run_json] = list((tmp_path / "runs").glob("*/run.json"))
    assert run_json.parent.name == "001-lat-tcp-event"
    config = json.loads(run_json.read_text())["config"]
    assert "options" not in config
    params = config["params"]
    assert (params["transport"], params["poll"], params["size"], params["iters"]) == ("tcp", "event", 64, 200)


# --- the load rows --------------------------------------------------------------

def test_load_rows_exist_with_their_targets(tmp_path, engine):
    rows = {r.name: r for r in bench.Bench(tmp_path, None, str(engine)).rows()}
    tcp, udp = (rows[f"load {t} p99 @ {bench.LOAD_RATE // 1000}k/s / sockperf ul"] for t in ("tcp", "udp"))
    assert (tcp.target, tcp.higher_is_better, udp.target) == (1.0, False, 1.0)
    assert "actual send" in tcp.figure and "--reply-every 1 --full-rtt" in tcp.versus
    high = rows["load tcp highest rate, p99 < 10x unloaded / sockperf ul"]
    assert (high.target, high.higher_is_better) == (1.0, True)
    lag = rows["load generator lag p99 @ 1M/s shm / bare schedule's"]
    assert lag.target == bench.LAG_TARGET == 1.2 and "bare 1 MHz TSC spin schedule" in lag.versus
    assert rows["load shm achieved rate at the knee / bw message rate"].target is None   # informational


def test_the_raw_loop_places_its_librarys_threads_as_fabmeter_did(tmp_path, engine, monkeypatch):
    """The zmq row's raw loop, measured before any fabmeter run of the row: fabmeter's run first (for where its
    library's threads ran, run.json's granted.io_cpus read back), then the raw loop with its threads there."""
    need_transport("zmq")
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))
    cpus = tuple(sorted(os.sched_getaffinity(0))[:2])
    b = bench.Bench(tmp_path, cpus if len(cpus) == 2 else None, str(engine))
    options = {"transport": "zmq", "poll": "busy", "size": 32, "iters": 300}
    assert b.rawpp("zmq", "busy", options)() > 0
    assert b.runs == 1 and "zmq" in b.io_cpus
    assert b.peer_points[-1]["io_cpus"] == list(b.io_cpus["zmq"])
    assert bench.io_cpu({"client": {"cpus": [3]}}, "client") == 3
    assert bench.io_cpu({"client": {"cpus": [0, 1]}}, "client") == bench.io_cpu({}, "server") == -1


def test_highest_held_follows_the_knee_rule():
    def pt(rate, p99, achieved=None, unloaded=10.0):
        return {"offered_rps": rate, "achieved_rps": achieved or rate, "latency_ns": {"p99": p99},
                "service_latency_ns": {"p99": p99}, "unloaded_ns": {"p99": unloaded}}
    # fabmeter: against its own unloaded probe; the first rate that breaks ends the sweep.
    assert bench.fabmeter_highest_held([pt(1, 50), pt(2, 99), pt(4, 101), pt(8, 20)]) == 2
    assert bench.fabmeter_highest_held([pt(1, 200)]) == 0
    assert bench.fabmeter_highest_held([pt(1, 50), pt(2, 50, achieved=1.8)]) == 1   # achieved < 95 %
    # sockperf: its lowest rate stands in for the unloaded p99.
    assert bench.sockperf_highest_held([pt(4, 1001), pt(1, 100), pt(2, 999)]) == 2
    # The knee's achieved rate; the last point's when every point held.
    sweep = [{**pt(r, p), "phase": "open loop", "achieved_rps": r * 0.99} for r, p in ((1, 20), (2, 500))]
    assert bench.achieved_at_knee(sweep) == 1.98
    assert bench.achieved_at_knee(sweep[:1]) == 0.99


def test_load_rows_measure_both_sides(tmp_path, engine, monkeypatch):
    """Each load row once, every side real and short (sockperf's shortest run is 1 s + its 2 s pause): a figure
    on both sides and a ratio with a verdict."""
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))
    for name, value in (("LOAD_SECONDS", 0.1), ("LOAD_SWEEP", (5000, 20000)), ("LAG_COUNT", 20000),
                        ("KNEE_FRACTIONS", [0.5, 1.0]), ("KNEE_SECONDS", 0.05), ("BW_MSGS", 20000)):
        monkeypatch.setattr(bench, name, value)
    b = bench.Bench(tmp_path, None, str(engine))
    sockperf = shutil.which("sockperf") is not None
    for row in b.load_rows():
        ours = row.fabmeter()
        # A lag of 0 is the generator never late at that percentile.
        assert ours >= 0 if any(w in row.name for w in ("highest", "floor", "lag")) else ours > 0, row.name
        if "sockperf" in row.name and not sockperf:
            continue
        theirs = row.other()
        assert theirs > 0, row.name
        row.ours, row.theirs = [ours] * 5, [theirs] * 5
        assert row.judged()[1] in ((None,) if row.target is None else ("met", "not met"))
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs[0] == "001-load-tcp-busy-20000-fixed-32-0.1" and any("-load-shm-busy-0.5,1.0-" in r for r in runs)
    if sockperf:
        assert {(p["transport"], p["offered_rps"]) for p in b.peer_points} >= {("tcp", 20000), ("tcp", 5000)}


def test_stream_row_measures_both_sides(tmp_path, engine, monkeypatch):
    """The stream rows once, short: stream's missed % beside the schedule floor's with the sink's CPU spinning,
    at the same rate and steps; beneath it the floor with that CPU idle."""
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))
    monkeypatch.setattr(bench, "STREAM_STEPS", 5000)
    b = bench.Bench(tmp_path, None, str(engine))
    row, floor_row = b.stream_rows()
    assert row.name == "stream 100 kHz missed % / schedule floor" and row.target == 1.1
    assert floor_row.target is None and "idle" in floor_row.name
    assert 0 <= row.fabmeter() <= 100 and 0 <= row.other() <= 100
    floor = b.limits[-1]["schedule_floor_busy_sink"]
    assert (floor["schedule_rate"], floor["schedule_steps"]) == (100_000, 5000) and "busy_cpu" in floor
    [run_json] = list((tmp_path / "runs").glob("*-stream-*/run.json"))
    point = json.loads(run_json.read_text())["points"][-1]
    assert (point["rate_hz"], point["sent"] + point["missed_steps"]) == (100_000, 5000)


def test_bench_ab_keys_every_row(tmp_path, engine):
    """make bench-ab builds the bench's rows with keys naming what each fabmeter side measures (rows that
    measure the same thing share one key, limits are named after their row): every row of today's bench."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import bench_ab
    rows = bench_ab.rows_for(str(engine), tmp_path, (0, 1))
    assert [r.name for r in rows] == [r.name for r in bench.Bench(tmp_path, (0, 1), str(engine)).rows()]
    keys = [r.fabmeter.key for r in rows]
    assert all(keys) and any(k.startswith("limits: ") for k in keys) and len(set(keys)) < len(keys)


def test_a_run_checks_its_options_with_an_engine_older_than_the_plan_line(tmp_path, engine):
    """bench-ab's base engine may check a run's options (`run --dry-run`, exit 0) without printing the plan line
    today's engine prints: the run's limits are measured all the same, and a refusal still stops it."""
    old = tmp_path / "fabmeter-engine"
    old.write_text(f'#!/bin/sh\ncase " $* " in *" --dry-run "*) "{engine}" "$@" >/dev/null; exit $?;; esac\n'
                   f'exec "{engine}" "$@"\n')
    old.chmod(0o755)
    spec = run.RunSpec("lat", {"transport": "tcp", "size": 32}, cpus=("0", "1"), engine=str(old))
    assert recorded.measure_limits(spec) is not None
    with pytest.raises(FabmeterError) as refused:
        recorded.measure_limits(dataclasses.replace(spec, options={"transport": "tcp", "size": -1}))
    assert refused.value.exit_code == 2


# --- the setup row ---------------------------------------------------------------

def test_setup_row_measures_both_sides(tmp_path, engine, monkeypatch):
    """tcp setup's connect p50 beside limits' bare connect/accept, each side real and short: a floor, no target."""
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))
    monkeypatch.setattr(bench, "SETUP_REPS", 20)
    (row,) = bench.Bench(tmp_path, None, str(engine)).setup_rows()
    assert row.target is None and "connect p50 ns" in row.figure
    assert row.fabmeter() > 0 and row.other() > 0
    [run_json] = list((tmp_path / "runs").glob("*/run.json"))
    params = json.loads(run_json.read_text())["config"]["params"]
    assert (params["experiment"], params["transport"], params["iters"]) == ("setup", "tcp", 20)


def test_hiccup_row_takes_both_sides_from_one_limits(tmp_path, engine, monkeypatch):
    """The gap count beside the longest gap, both from one `limits --hiccups`: side by side, no target."""
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))
    b = bench.Bench(tmp_path, None, str(engine))
    asked = []

    def limits(cpus, iters=None, engine=None, timeout=120.0, args=()):
        asked.append(args)
        return {"hiccups": {"count": 3, "longest_us": 250.0}}
    monkeypatch.setattr(bench.run, "run_limits", limits)
    (row,) = b.hiccup_rows()
    assert (row.fabmeter(), row.other(), row.target, row.floor) == (3, 250.0, None, False)
    assert asked == [("--hiccups",)] and "longest" in row.figure


# --- what measuring costs -----------------------------------------------------------

def test_one_run_gives_both_sides_of_a_row_from_one_point(tmp_path, engine, monkeypatch):
    """Whichever side a round measures first runs fabmeter, the other takes its figure from that same point."""
    b = bench.Bench(tmp_path, None, str(engine))
    runs = iter([{"a": 1, "b": 10}, {"a": 2, "b": 20}])
    monkeypatch.setattr(b, "fabmeter", lambda experiment, options, pick: lambda: pick(next(runs)))
    ours, theirs = b.one_run("lat", {}, lambda p: p["a"], lambda p: p["b"])
    assert (ours(), theirs(), theirs(), ours()) == (1, 10, 20, 2)


def test_tx_rows_picks_refuse_a_run_that_measured_nothing():
    """The stamped side must have waited for a buffer (else the stamps cost nothing because nothing was
    stamped); the unstamped side must report no tx at all."""
    def pts(tx):
        return [{"achieved_rps": 1000.0, "server": {"tx": tx}}]
    assert bench.tx_stamped_rps(pts({"waits": 3})) == 1000.0
    assert bench.tx_unstamped_rps(pts(None)) == 1000.0
    for bad in (None, {"waits": 0}):
        with pytest.raises(bench.Skip):
            bench.tx_stamped_rps(pts(bad))
    with pytest.raises(bench.Skip):
        bench.tx_unstamped_rps(pts({"waits": 0}))
    with pytest.raises(bench.Skip):
        bench.cpu_side({"cpu": {"client": {}, "server": None}}, "server")


def test_measuring_rows_measure_both_sides(tmp_path, engine, monkeypatch):
    """Each row once, short: the accounting reads of each end beside the same point's window (one lat run per
    row), and closed-loop req/s with the transmit-path stamps on beside off, each run.json saying which."""
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))
    monkeypatch.setattr(bench, "ITERS", 2000)
    monkeypatch.setattr(bench, "TX_SECONDS", 0.1)
    b = bench.Bench(tmp_path, None, str(engine))
    client, server, tx = b.measuring_rows()
    for row in (client, server):
        assert row.target is None and not row.floor and "read_ns" in row.figure
        reads, window = row.fabmeter(), row.other()
        assert reads > 0 and window > 0, row.name
    assert len(list((tmp_path / "runs").glob("*-lat-*"))) == 2   # one run per row, both figures from it
    assert (tx.target, tx.higher_is_better) == (bench.TX_TARGET, True) == (0.98, True)
    if "ofi" not in b.info.get("transports", []):
        return
    assert tx.fabmeter() > 0 and tx.other() > 0
    stamps = [json.loads(r.read_text())["config"]["params"]["tx_stamps"]
              for r in sorted((tmp_path / "runs").glob("*-load-*/run.json"))]
    assert stamps == ["on", "off"]
