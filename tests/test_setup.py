"""`fabmeter setup`: connection establishment for every transport built in
here, memory registration where a transport registers memory (ofi's tcp
provider on the host; verbs in the Soft-RoCE guest, rdma/test-rdma-guest.sh),
what is refused, and the report's figures. Small counts; no time is asserted
beyond the percentiles' order."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import TRANSPORTS, json_lines, need_transport, one_line_error

REPS, WARMUP = 8, 2
ORDER = ("min", "p50", "p90", "p99", "max")


def ordered(summary: dict) -> bool:
    values = [summary[k] for k in ORDER]
    return 0 < values[0] and values == sorted(values)


def run_setup(fm, out, *args) -> list[dict]:
    """The run's points; with `out`, also its run.json and samples there."""
    r = fm.run("setup", *args, "-n", str(REPS), "--warmup", str(WARMUP), "--json", *(["--out", out] if out else []))
    assert r.returncode == 0, r.stderr
    return json_lines(r.stdout)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_connect_every_transport(fm, tmp_path, transport):
    keep = transport == "tcp"   # one run.json and its samples suffice
    (p,) = run_setup(fm.measuring_limits() if keep else fm, tmp_path if keep else None, "-t", transport)
    assert (p["experiment"], p["what"], p["transport"]) == ("setup", "connect", transport)
    assert p["iterations"] == REPS and p["warmup"] == WARMUP and p["partial"] is False
    for key in ("connect_ns", "teardown_ns", "control_rtt_ns"):
        assert ordered(p[key]), (key, p[key])
        if keep:
            assert len(np.load(tmp_path / p["samples"][key])) == REPS
    assert "control-channel" in p["covers"] and p["latency_kind"].startswith("connect")
    assert p["registration"] == ("fi_mr_reg" if transport == "ofi" else "not applicable")
    if transport == "tcp":
        # Every step of the client's connect named and timed, in order; together no more than the whole connect
        # (p50s do not add, so the least of each: the steps of one connect are at least their minimums).
        phases = p["phases_ns"]
        assert list(phases) == ["port_exchange", "socket_connect", "options_buffers", "barrier"], phases
        assert all(ordered(v) for v in phases.values()), phases
        assert sum(v["min"] for v in phases.values()) <= p["connect_ns"]["max"]
    if keep:
        run = json.loads((tmp_path / "run.json").read_text())
        assert run["status"] == "ok" and run["config"]["params"]["what"] == "connect"
        assert run["limits"]["connect_floor_ns"]["p50"] > 0   # the floor beside it


def test_registration_by_size_with_and_without_huge_pages(fm, engine, tmp_path):
    need_transport("ofi")
    points = run_setup(fm, tmp_path / "mr", "-t", "ofi", "--provider", "tcp", "--ep", "msg", "--what", "all",
                       "-a", "--max-size", "32K")
    assert [p["what"] for p in points] == ["connect", "mr", "mr", "mr", "mr"]
    mr = points[1:]
    assert [p["registered_bytes"] for p in mr] == [4096, 8192, 16384, 32768]
    for p in mr:
        assert p["registration"] == "fi_mr_reg" and p["iterations"] == REPS
        assert ordered(p["register_ns"]) and ordered(p["deregister_ns"])
        assert len(np.load(tmp_path / "mr" / p["samples"]["register_ns"])) == REPS
        if p["huge_pages"] is None:   # never faked: no figure, and why
            assert p["huge_register_ns"] is None and p["huge_pages_reason"]
        else:
            assert p["huge_pages"] in ("hugetlb", "thp") and p["huge_backed_bytes"] >= p["registered_bytes"]
            assert ordered(p["huge_register_ns"]) and ordered(p["huge_deregister_ns"])
    # The terminal table puts the machine's bare connect/accept beside the connect (limits, recorded with --out).
    r = fm.measuring_limits().run("setup", "-t", "tcp", "-n", str(REPS), "--warmup", str(WARMUP), "--out",
                                  tmp_path / "tcp")
    assert r.returncode == 0, r.stderr
    assert "\nconnect ns " in r.stdout and "\nfloor: bare loopback connect/accept ns (limits) " in r.stdout
    # The report draws connect time per transport and registration against size.
    r = fm.run("report", tmp_path, "-o", tmp_path / "report.html")
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "report.html").read_text()
    assert 'id="setup"' in page
    assert 'alt="setup connect time per transport"' in page and 'alt="setup registration against size"' in page


def test_refusals(fm, engine, tmp_path):
    # tcp registers no memory: --what mr is not applicable; --what all leaves the registration out.
    r = fm.run("setup", "-t", "tcp", "--what", "mr")
    assert r.returncode == 2 and "not applicable" in one_line_error(r.stderr)
    (p,) = run_setup(fm, None, "-t", "tcp", "--what", "all")
    assert p["what"] == "connect" and p["registration"] == "not applicable"
    for args, says in ((["-n", "0"], "--iters"), (["--what", "mr", "-s", "2G"], "1 GiB"),
                       (["--what", "mr", "-a", "--max-size", "2G"], "1 GiB"),
                       (["-s", "4K"], "not with --what connect"), (["--what", "sometimes"], "--what")):
        transport = "ofi" if "mr" in args and "ofi" in TRANSPORTS else "tcp"
        r = fm.run("setup", "-t", transport, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert says in one_line_error(r.stderr), (args, r.stderr)
