"""--spin-us: event mode polls that long before it sleeps (Homa's spin, then
sleep). A point in event mode counts its client's `sleeps`, the waits handed
to the transport; spinning longer than any wait hands none over, so a mode
that silently fell back to sleeping at once would show them."""

from __future__ import annotations

import pytest

from conftest import TRANSPORTS, json_lines, one_line_error

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_spinning_event_mode_never_sleeps(fm, transport):
    args = ["-t", transport, "--poll", "event", "-n", "300", "--warmup", "20", "--json"]
    r = fm.run("lat", *args)
    assert r.returncode == 0, r.stderr
    (plain,) = json_lines(r.stdout)
    assert plain["sleeps"] > 0, plain
    r = fm.run("lat", *args, "--spin-us", "1000000")
    assert r.returncode == 0, r.stderr
    (spun,) = json_lines(r.stdout)
    assert spun["sleeps"] == 0 and spun["iterations"] == 300, spun


def test_load_spins_too(fm):
    args = ["-t", "tcp", "--poll", "event", "--rate", "20000", "--count", "1000", "--warmup", "50", "--json"]
    r = fm.run("load", *args, "--spin-us", "1000000")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    # A send that falls due while spinning goes out on time: the spin ends there, without a sleep.
    assert p["sleeps"] == 0 and p["requests"] == 1000 and p["completed"] + p["lost"] == p["sent"] > 0, p
    r = fm.run("load", *args)
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["sleeps"] > 0


def test_busy_mode_has_no_sleeps_and_refuses_spin(fm):
    r = fm.run("lat", "-t", "shm", "-n", "100", "--json")
    assert r.returncode == 0 and "sleeps" not in json_lines(r.stdout)[0]
    for args, says in ((["--spin-us", "5"], "applies to --poll event"),
                       (["--poll", "event", "--spin-us", "2000000"], "--spin-us must be between")):
        r = fm.run("lat", "-t", "shm", *args)
        assert r.returncode == 2 and says in one_line_error(r.stderr), r.stderr
