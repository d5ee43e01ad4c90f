"""fabmeter doctor --parity: refused where it cannot run, the rounds alternated, and each row's verdict from recorded
rounds (within, faster or slower by X, cannot tell). The real run is the Soft-RoCE guest's case (make test-rdma)."""

from __future__ import annotations

from fabmeter.doctor import parity
from fabmeter.doctor.facts import Plan
from fabmeter.doctor.parity import Round, Row, Setup, judge as judge_rounds, measure, refusal

VERBS = {"transports": ["tcp", "verbs"], "transport_devices": {"verbs": ["mlx5_0"]}}
LAT, BW = Row("lat", 32), Row("bw", 64 << 10)


def judge(row, fabmeter, perftest, evidence):
    return judge_rounds(row, [Round(x) for x in fabmeter], [Round(x) for x in perftest], evidence)


def test_refused_without_verbs_a_device_or_perftest():
    assert "without the verbs transport" in refusal({"transports": ["tcp"]}, "/usr/bin/ib_send_lat")
    assert "no verbs device" in refusal({"transports": ["verbs"], "transport_devices": {"verbs": []}},
                                        "/usr/bin/ib_send_lat")
    assert "perftest is not installed" in refusal(VERBS, None)
    assert refusal(VERBS, "/usr/bin/ib_send_lat") == ""


def test_the_command_refuses_with_the_reason(fm):
    # This VM has no RDMA device (or, where it has, no perftest on this PATH): refused before anything runs.
    fm.env = dict(fm.env, PATH="/nonexistent")
    r = fm.run("doctor", "--parity", "-t", "tcp")
    assert r.returncode == 2 and "--parity: " in r.stderr, r.stderr
    assert any(why in r.stderr for why in ("no verbs device", "without the verbs", "perftest is not installed"))
    r = fm.run("doctor", "-t", "tcp", "--rounds", "7")
    assert r.returncode == 2 and "go with --parity" in r.stderr, r.stderr


def test_rounds_alternate_which_tool_goes_first():
    calls = []
    setup = Setup(Plan("verbs", 64 << 10, (0, 1), 256, 128), "engine", rounds=4)
    got = measure(setup, (LAT,), fabmeter=lambda s, r: calls.append("fabmeter") or Round(1.0),
                  perftest=lambda s, r: calls.append("perftest") or Round(2.0))
    assert calls == ["fabmeter", "perftest", "perftest", "fabmeter"] * 2
    assert got == {LAT: ([Round(1.0)] * 4, [Round(2.0)] * 4)}


def test_within_the_rounds_interval():
    # ns p50 per round, fabmeter and perftest back to back.
    f = judge(LAT, [5010, 4990, 5100, 4950, 5030], [5000, 5050, 5020, 5000, 4980], "rounds")
    assert f.severity == "ok" and "within" in f.summary and "over 5 of 5 rounds" in f.summary, f
    assert f.check == "parity.lat.32" and f.evidence == "rounds"


def test_faster_or_slower_by_x_with_its_interval():
    f = judge(LAT, [4500, 4480, 4550, 4510, 4490], [5000, 5010, 4990, 5020, 5000], "rounds")
    assert f.severity == "warn" and "fabmeter faster by 10 %" in f.summary and "interval 0.8" in f.summary, f
    assert f.effect and f.fix
    # bw: a higher message rate is faster; fabmeter's lower here.
    f = judge(BW, [80_000, 81_000, 79_500, 80_500, 80_200], [100_000, 99_000, 101_000, 100_500, 99_800], "rounds")
    assert f.severity == "warn" and "fabmeter slower by 20 %" in f.summary and "doubted" not in f.summary, f
    # perftest's own doubt of its clock (its figures divide by its estimate of the CPU's) goes with the verdict.
    doubt = Round(5000, "Correlation coefficient r^2: 0.886873 < 0.9")
    f = judge_rounds(LAT, [Round(4500)] * 5, [doubt, doubt] + [Round(5000)] * 3, "rounds")
    assert f.summary.endswith("over 5 of 5 rounds; perftest doubted its clock in 2 of 5 rounds"), f


def test_cannot_tell_from_too_few_rounds_or_too_wide_an_interval():
    f = judge(LAT, [5000, 5000, 5000, 5000], [5000, 5000, 5000, 5000], "rounds")
    assert f.severity == "warn" and "cannot tell, fewer than 5 rounds" in f.summary, f
    assert "over 4 of 4 rounds" in f.summary and "measured" not in f.summary.split("rounds")[-1], f
    f = judge(LAT, [5000, None, 5000, 5000, 5000], [5000, 5000, 5000, 5000, 5000], "rounds")  # a run failed
    assert "cannot tell" in f.summary and "over 4 of 5 rounds (fabmeter measured 4, perftest 5)" in f.summary, f
    f = judge(LAT, [3500, 6500, 5000, 4000, 6000], [5000] * 5, "rounds")
    assert f.severity == "warn" and "cannot tell, the rounds' interval is wider" in f.summary, f


def test_rows_are_send_rc_lat_and_bw_at_32_b_and_64_kib():
    assert [(r.experiment, r.size, r.tool) for r in parity.ROWS] == [
        ("lat", 32, "ib_send_lat"), ("lat", 65536, "ib_send_lat"), ("bw", 32, "ib_send_bw"),
        ("bw", 65536, "ib_send_bw")]


def test_what_the_tools_said_joins_the_evidence():
    # perftest's rate 0 (a run it could not time) is no figure; its warnings and a failure are evidence, once each.
    warned = "Conflicting CPU frequency values detected: 2400.000000 != 3000.000000"
    assert parity.figure(BW, {"msg_rate": 0.0}) is None and parity.figure(LAT, {"latency_ns": {"p50": 5e3}}) == 5e3
    perftest = [Round(100_000, warned), Round(None, warned), Round(None, "client exited 1: Couldn't connect")] * 2
    f = judge_rounds(BW, [Round(99_000)] * 5 + [Round(None, "exit 3: lost the server")], perftest[:6], "rounds")
    assert "over 2 of 6 rounds (fabmeter measured 5, perftest 2)" in f.summary and "cannot tell" in f.summary, f
    assert f.evidence == (f"rounds; fabmeter said: exit 3: lost the server; perftest said: {warned} | "
                          "client exited 1: Couldn't connect"), f.evidence
