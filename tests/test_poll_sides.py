"""--poll-recv and --poll-send: the receive side and the send side each busy
or event, recorded in run.json, and refused with one line where a transport
has no event channel of its own on its send side (Caps::one_poll_mode) or
an experiment polls both sides in one loop."""

from __future__ import annotations

import json

import pytest

from conftest import json_lines, one_line_error

SIDES = [("busy", "event"), ("event", "busy")]


@pytest.mark.parametrize("transport", ["tcp", "udp"])
@pytest.mark.parametrize("recv,send", SIDES)
def test_each_side_polls_as_asked_and_is_recorded(fm, tmp_path, transport, recv, send):
    out = tmp_path / "d"
    r = fm.run("lat", "-t", transport, "--poll-recv", recv, "--poll-send", send, "-n", "200", "--warmup", "20",
               "--json", "--out", out)
    assert r.returncode == 0, r.stderr
    params = json.loads((out / "run.json").read_text())["config"]["params"]
    assert (params["poll_recv"], params["poll_send"], params["poll"]) == (recv, send, recv), params
    (point,) = json_lines(r.stdout)
    # The loop follows the receive side: only an event-driven receiver counts its sleeps.
    assert ("sleeps" in point) == (recv == "event"), point
    assert point["iterations"] == 200, point


def test_poll_sets_both_sides_and_either_overrides_in_any_order(fm, tmp_path):
    for args, want in ((["--poll", "event"], ("event", "event")),
                       (["--poll-send", "busy", "--poll", "event"], ("event", "busy")),
                       (["--poll", "event", "--poll-recv", "busy"], ("busy", "event"))):
        out = tmp_path / "-".join(args)
        r = fm.run("lat", "-t", "tcp", *args, "-n", "50", "--warmup", "5", "--out", out)
        assert r.returncode == 0, r.stderr
        params = json.loads((out / "run.json").read_text())["config"]["params"]
        assert (params["poll_recv"], params["poll_send"]) == want, (args, params)


def test_a_transport_with_one_wakeup_for_both_sides_refuses_mixed_modes(fm):
    r = fm.run("lat", "-t", "shm", "--poll-recv", "busy", "--poll-send", "event", "-n", "50")
    assert r.returncode == 2
    assert ("shm: --poll-recv busy with --poll-send event: each end sleeps on one futex bell, rung for its messages "
            "and its credits alike") in one_line_error(r.stderr), r.stderr
    # The same mode on both sides is fine.
    r = fm.run("lat", "-t", "shm", "--poll-recv", "event", "--poll-send", "event", "-n", "50")
    assert r.returncode == 0, r.stderr


def test_experiments_polling_both_sides_in_one_loop_refuse_mixed_modes(fm):
    r = fm.run("bw", "-t", "tcp", "--poll-recv", "busy", "--poll-send", "event", "-n", "50")
    assert r.returncode == 2
    assert "only lat and oneway poll the two sides apart (bw follows --poll)" in one_line_error(r.stderr), r.stderr
