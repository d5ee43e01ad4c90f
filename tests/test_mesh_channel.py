"""The coordination channel between ranks (python/fabmeter/mesh/rendezvous.py): frames authenticated by the
token and bounded in size, a rank with the wrong token refused, no mesh without a rank or (beyond loopback)
a token, and only numbers and known words taken from the CPU figures a rank sends."""

from __future__ import annotations

import os
import socket
import subprocess
import threading

import pytest

from conftest import cli_cmd, free_port, one_line_error
from fabmeter.mesh import output, rendezvous
from mesh_helpers import LOOPBACK4, SMALL, check_pairs


def channel_pair(token_rank: bytes, token_coord: bytes):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted = []
    t = threading.Thread(target=lambda: accepted.append(rendezvous.accept(listener, token_coord, 5)))
    t.start()
    rank = rendezvous.connect("127.0.0.1", port, token_rank, 5)
    t.join()
    listener.close()
    return rank, accepted[0]


def test_channel_authenticates_frames():
    rank, coord = channel_pair(b"secret", b"secret")
    rank.send({"type": "join", "rank": 1})
    assert coord.recv(5) == {"type": "join", "rank": 1}
    coord.send({"type": "ping"})
    assert rank.recv(5) == {"type": "ping"}
    rank.close(), coord.close()

    rank, coord = channel_pair(b"wrong", b"secret")
    rank.send({"type": "join", "rank": 1})
    with pytest.raises(rendezvous.ChannelError, match="authentication failed"):
        coord.recv(5)
    rank.close(), coord.close()


def test_channel_refuses_an_oversized_frame():
    rank, coord = channel_pair(b"secret", b"secret")
    rank.sock.sendall(b"x" * (rendezvous.MAX_FRAME + 10))
    with pytest.raises(rendezvous.ChannelError, match="limit"):
        coord.recv(5)
    rank.close(), coord.close()


def test_a_rank_with_the_wrong_token_is_refused(fm, token_file, tmp_path):
    """A `--rank 1` with another token is refused (one warning at rank 0, exit
    3 for it); the real rank 1 joins after it and the mesh completes."""
    wrong = tmp_path / "wrong"
    wrong.write_text(os.urandom(16).hex())
    wrong.chmod(0o600)
    args = ["-t", "udp", "--mesh-port", free_port(), "--json", *SMALL]
    rank0 = fm.popen("mesh", "--hosts", LOOPBACK4, "--rank", 0, "--token-file", token_file, *args)
    rogue = fm.popen("mesh", "--hosts", LOOPBACK4, "--rank", 1, "--token-file", wrong, *args)
    ranks = []
    try:
        assert rogue.wait(timeout=30) == 3
        ranks += [fm.popen("mesh", "--hosts", LOOPBACK4, "--rank", r, "--token-file", token_file, *args)
                 for r in (1, 2, 3)]
        out, err = rank0.communicate(timeout=90)
        assert [p.wait(timeout=30) for p in ranks] == [0, 0, 0]
    finally:
        for p in [rank0, rogue, *ranks]:
            if p.poll() is None:
                p.kill()
            p.wait()
    assert rank0.returncode == 0, err
    assert "refused a connection: authentication failed" in err
    check_pairs(out, "all-to-all")


def test_mesh_refuses_without_a_rank_or_a_token_beyond_loopback(fm):
    env_free = {k: v for k, v in fm.env.items() if k != "FABMETER_TOKEN"}
    r = subprocess.run(cli_cmd("mesh", "--hosts", "10.0.0.1,10.0.0.2", "--rank", "0", "-t", "udp"), env=env_free,
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "need a shared token" in one_line_error(r.stderr)
    r = fm.run("mesh", "--hosts", LOOPBACK4, "-t", "udp")
    assert r.returncode == 2 and "no rank" in one_line_error(r.stderr)
    r = fm.run("mesh", "--hosts", LOOPBACK4, "--rank", "0", "-t", "udp", "--experiment", "bw", "--bursts", "3")
    assert r.returncode == 2 and "--bursts does not apply to 'bw'" in one_line_error(r.stderr)
    r = fm.run("mesh", "--hosts", LOOPBACK4, "--rank", "0", "-t", "udp", "--outlier-mads", "0")
    assert r.returncode == 2 and "--outlier-mads must be above 0" in one_line_error(r.stderr)


def test_pair_cpu_figures_are_numbers_only():
    """Each end's CPU totals cross the channel; rank 0 keeps them only when they are numbers and known words."""
    side = {k: 1.0 for k in output.CPU_NUMBERS} | {"window": "measured", "per": "message"}
    assert output.valid_cpu({"client": side, "server": None}) and output.valid_cpu(None)
    for bad in ({"client": side}, {"client": side | {"cpu_s": "1"}, "server": side},
                {"client": side | {"window": "<b>"}, "server": side}, {"client": side | {"extra": 1}, "server": side}):
        assert not output.valid_cpu(bad), bad
    point = {"cpu": {"client": {**side, "cpus": [{"cpu": 0}]}, "server": side}}
    assert output.valid_cpu(output.cpu_figures(point))
