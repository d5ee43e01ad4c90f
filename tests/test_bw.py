"""bw specifics beyond the matrix: the end-of-run protocol."""

from __future__ import annotations

import pytest

from conftest import json_lines


@pytest.mark.parametrize("bidir", [False, True])
@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_send_phase_longer_than_timeout_is_not_a_failure(fm, transport, bidir):
    # The drain deadline (--timeout-ms) starts when both ends are done
    # sending; a send phase many times longer must still end cleanly.
    args = ["bw", "-t", transport, "-s", "64K", "-n", "20000", "--timeout-ms", "500", "--json"]
    r = fm.run(*args, *(["--bidir"] if bidir else []), timeout=120)
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["lost"] == 0 and not p["partial"] and p["gbps"] > 0
    if bidir:
        assert p["gbps"] == pytest.approx(p["gbps_c2s"] + p["gbps_s2c"])


@pytest.mark.parametrize("experiment, args", [
    ("bw", ["-n", "10", "--warmup", "2"]),
    ("bw", ["-n", "10", "--warmup", "2", "--bidir"]),
    ("oneway", ["--bursts", "1", "--burst-size", "6", "--warmup", "0", "--pause-us", "0"]),
])
def test_tail_of_a_partial_tcp_send_is_flushed_before_the_end(fm, experiment, args):
    # 4 MiB messages do not fit a socket buffer: tcp keeps the tail of the
    # last send itself, and the sender must push it out before it announces
    # its count (otherwise the receiver waits for a message that never comes).
    r = fm.run(experiment, "-t", "tcp", "-s", "4M", *args, "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["lost"] == 0 and not p["partial"]
