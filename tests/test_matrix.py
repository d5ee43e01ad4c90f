"""Every built-in transport x poll x experiment, end to end at small counts
(the plugins' transports: test_messaging.py, test_ofi.py).

Checks the shape of what comes out (JSON keys, counts, monotone
percentiles) and that the raw samples in --out reproduce the summary.
Timing values are never asserted.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import POLLS, built_in_transports, json_lines

STATS = ["min", "p50", "p90", "p99", "p999", "max", "mean", "stdev"]
ORDERED = ["min", "p50", "p90", "p99", "p999", "max"]
PCT = {"p50": 50, "p90": 90, "p99": 99, "p999": 99.9}

LAT_N = 2000
BW_N = 5000
BURSTS, BURST_SIZE = 2, 200
ARGS = {
    "lat": ["-n", str(LAT_N)],
    "oneway": ["--bursts", str(BURSTS), "--burst-size", str(BURST_SIZE), "--pause-us", "0"],
    "bw": ["-n", str(BW_N)],
}
EXPECTED_ITERS = {"lat": LAT_N, "oneway": BURSTS * BURST_SIZE, "bw": BW_N}


def check_stats(block: dict, what: str) -> None:
    assert set(STATS) <= set(block), f"{what}: missing keys {set(STATS) - set(block)}"
    for k in STATS:
        assert isinstance(block[k], (int, float)) and math.isfinite(block[k]), f"{what}.{k} = {block[k]!r}"
    values = [block[k] for k in ORDERED]
    assert values == sorted(values), f"{what}: percentiles not monotone: {dict(zip(ORDERED, values))}"
    assert block["min"] <= block["mean"] <= block["max"]
    assert block["stdev"] >= 0


def check_point(p: dict, experiment: str, transport: str, poll: str, size: int) -> None:
    assert p["type"] == "point"
    assert (p["experiment"], p["transport"], p["poll"], p["size"]) == (experiment, transport, poll, size)
    assert p["iterations"] == EXPECTED_ITERS[experiment]
    assert isinstance(p["warmup"], int) and p["warmup"] >= 0
    assert p["partial"] is False
    assert isinstance(p["lost"], int) and p["lost"] >= 0
    if transport in ("shm", "tcp"):
        assert p["lost"] == 0, "a reliable transport lost messages"
    if experiment in ("lat", "oneway"):
        check_stats(p["latency_ns"], "latency_ns")
    if experiment == "lat":
        assert p["latency_kind"] == "rtt/2"
        check_stats(p["rtt_ns"], "rtt_ns")
        for k in ORDERED + ["mean"]:  # one-way is exactly half the RTT, statistic by statistic
            assert p["latency_ns"][k] == pytest.approx(p["rtt_ns"][k] / 2, rel=1e-6)
    if experiment == "oneway":
        assert p["latency_kind"] == "one-way"
        assert "threshold_us" in p and "above_threshold_pct" in p
        assert 0 <= p["above_threshold_pct"] <= 100
    if experiment == "bw":
        for k in ("gbps", "msg_rate"):
            assert isinstance(p[k], (int, float)) and math.isfinite(p[k]) and p[k] > 0, f"{k} = {p[k]!r}"


def check_stages(p: dict, out, send_completions: bool) -> None:
    """oneway's stages from t_subm: post (t_post) for every measured send,
    completion (t_comp) exactly where the transport reports send completions.
    Nothing orders post against receive: a socket's message may arrive before
    its send call returns. t_send (the device's read of the payload) is
    measured or absent with a reason, never a number without its thread."""
    if p.get("send_ns") is None:
        assert p["latency_send_ns"] is None and p["t_send_absent"], p.get("t_send_absent")
        assert "send_ns" not in p["samples"] and "time_thread" not in p
    else:
        assert p["send_ns"]["min"] >= 0 and p["latency_send_ns"]["min"] >= 0, "t_send outside [t_subm, t_recv]"
        assert "t_send_absent" not in p and p["time_thread"]["pass_ns"] > 0
    check_stats(p["post_ns"], "post_ns")
    assert ("completion_ns" in p) == send_completions == ("completion_ns" in p["samples"])
    post = np.load(out / p["samples"]["post_ns"])
    assert post.dtype == np.float64 and post.size == p["sent"], "one post stage per measured send, arrived or not"
    assert post.min() >= 0, "t_post before t_subm: one thread's reads of one clock"
    assert p["post_ns"]["p50"] == pytest.approx(np.percentile(post, 50), rel=1e-6)
    if send_completions:
        check_stats(p["completion_ns"], "completion_ns")
        comp = np.load(out / p["samples"]["completion_ns"])
        assert comp.size == p["completions"] <= post.size
        assert comp.min() >= post.min(), "a send completes after its post returned"


@pytest.mark.parametrize("experiment", ["lat", "oneway", "bw"])
@pytest.mark.parametrize("poll", POLLS)
@pytest.mark.parametrize("transport", built_in_transports())
def test_run(fm, tmp_path, transport, poll, experiment):
    out = tmp_path / "out"
    r = fm.run(experiment, "-t", transport, "--poll", poll, *ARGS[experiment], "--json", "--out", out)
    assert r.returncode == 0, r.stderr
    points = json_lines(r.stdout)
    assert len(points) == 1, r.stdout
    p = points[0]
    check_point(p, experiment, transport, poll, 32)

    doc = json.loads((out / "run.json").read_text())
    for key in ("fabmeter_version", "command", "started_at", "config", "environment", "points", "status"):
        assert key in doc, key
    assert doc["status"] == "ok"
    assert doc["points"] == points
    assert doc["config"]["experiment"] == experiment
    assert doc["config"]["params"], "params from the engine's start line"
    env = doc["environment"]
    for key in ("cpu_model", "kernel", "governors", "isolated_cpus", "tsc_flags", "libraries", "engine"):
        assert key in env, key
    assert env["engine"], "engine env from the start line"
    assert {"glibc", "python", "numpy"} <= set(env["libraries"])

    if experiment == "oneway":
        check_stages(p, out, send_completions=False)
        if transport in ("shm", "tcp"):   # nothing lost: every stage's raw array as long
            assert p["sent"] == p["iterations"]

    kinds = {"lat": ["rtt_ns"], "oneway": ["latency_ns"], "bw": []}[experiment]
    for kind in kinds:
        name = p["samples"][kind]
        assert "/" not in name, "sample files are named relative to the results folder"
        a = np.load(out / name)
        assert a.dtype == np.float64 and a.ndim == 1
        assert a.size == p["iterations"] - p["lost"]
        summary = p[kind]
        assert summary["min"] == pytest.approx(a.min(), rel=1e-6)
        assert summary["max"] == pytest.approx(a.max(), rel=1e-6)
        for k, q in PCT.items():
            assert summary[k] == pytest.approx(np.percentile(a, q), rel=1e-6), k


def test_human_table_labels(fm):
    r = fm.run("lat", "-t", "shm", "-n", "1000")
    assert r.returncode == 0, r.stderr
    for label in ("one-way (RTT/2) ns", "RTT ns", "p50", "p99", "warm-up"):
        assert label in r.stdout, label


def test_human_table_stage_rows(fm):
    r = fm.run("oneway", "-t", "shm", *ARGS["oneway"], "--warmup", "100")
    assert r.returncode == 0, r.stderr
    for label in ("one-way ns", "one-way stage post ns (t_post - t_subm)", "p50", "p99.9", "t_send (the device's read)",
                  "absent: the post call copies the payload"):
        assert label in r.stdout, label
    assert "completion" not in r.stdout, "shm reports no send completions"
