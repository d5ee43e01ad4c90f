"""A mesh whose ranks fail: a host that never starts, one that dies or hangs mid-run, Ctrl-C on rank 0, and
a signal to a local mesh, which keeps what it measured."""

from __future__ import annotations

import json
import signal
import tempfile
from pathlib import Path

import pytest

from conftest import free_port, json_lines, one_line_error, wait_until
from fabmeter.mesh import patterns
from mesh_helpers import LOOPBACK4, SMALL, run_ranks


def test_a_host_that_never_starts(fm, token_file):
    """Ranks 0-2 of 4: rank 0 names rank 3 in one line and exits 3 within
    the control timeout; the others are told and exit 3."""
    args = ["-t", "udp", "--mesh-port", free_port(), "--token-file", token_file, "--timeout-ms", "2000", *SMALL]
    rc, out, err, others = run_ranks(fm, LOOPBACK4.split(","), args, [()] * 4, ranks=[0, 1, 2], timeout=30)
    assert rc == 3 and out == ""
    assert "rank 3 (127.0.0.1) did not join within 2 s" in one_line_error(err)
    assert others == {1: 3, 2: 3}


def signal_mid_run(fm, args: list, clients: int, rank: int, sig: int, **popen) -> tuple[int, str, str, dict]:
    """Four ranks on loopback, `sig` to `rank` once `clients` engine clients began their point (their
    FABMETER_TRACE_PHASES marks: a rank starts its first round's engines before the round, so that they run says
    nothing): rank 0's (rc, stdout, stderr) and the others' exit codes (a stopped rank is continued once rank 0 is
    done)."""
    trace = Path(tempfile.mkdtemp()) / "phases"
    fm.env = dict(fm.env, FABMETER_TRACE_PHASES=str(trace))
    procs = {r: fm.popen("mesh", "--hosts", LOOPBACK4, "--rank", r, *args, **popen) for r in range(4)}
    try:
        assert wait_until(lambda: trace.exists() and trace.read_text().count("client point ") >= clients, 60)
        procs[rank].send_signal(sig)
        out, err = procs[0].communicate(timeout=90)
        procs[rank].send_signal(signal.SIGCONT)
        others = {r: p.wait(timeout=30) for r, p in procs.items() if r}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()
    return procs[0].returncode, out, err, others


MID_RUN = ["-t", "tcp", "--schedule", "chaotic", "--json", "--bursts", "8", "--burst-size", "50",
           "--pause-us", "200000", "--warmup", "10", "--timeout-ms", "2000"]


def test_a_host_that_dies_mid_run(fm, token_file):
    """Rank 3 killed while the chaotic all-to-all runs: the pairs without it
    are kept, the six with it marked failed, exit 3."""
    rc, out, err, others = signal_mid_run(fm, [*MID_RUN, "--mesh-port", free_port(), "--token-file", token_file],
                                          12, 3, signal.SIGKILL)
    assert rc == 3, err
    lines = json_lines(out)
    pairs = {(p["src"], p["dst"]): p for p in lines if p["type"] == "pair"}
    assert sorted(pairs) == patterns.pairs("all-to-all", 4)
    failed = sorted(k for k, p in pairs.items() if p["status"] != "ok")
    assert failed == sorted(k for k in pairs if 3 in k), {k: pairs[k]["message"] for k in failed}
    assert all(pairs[k]["message"] for k in failed)
    assert lines[-1]["type"] == "mesh" and lines[-1]["failed"] == 6
    assert others == {1: 0, 2: 0, 3: -signal.SIGKILL}


def test_a_host_that_hangs_mid_run(fm, token_file):
    """Rank 3's fabmeter stopped (SIGSTOP) while the chaotic all-to-all runs:
    rank 0 hears nothing from it for the control timeout and marks its three
    outgoing pairs lost; the pairs to it (its engine server still runs) and
    the others are kept; exit 3."""
    rc, out, err, others = signal_mid_run(fm, [*MID_RUN, "--mesh-port", free_port(), "--token-file", token_file],
                                          12, 3, signal.SIGSTOP)
    assert rc == 3, err
    assert others == {1: 0, 2: 0, 3: 3}     # continued, rank 3 finds rank 0 gone
    pairs = {(p["src"], p["dst"]): p for p in json_lines(out) if p["type"] == "pair"}
    assert sorted(pairs) == patterns.pairs("all-to-all", 4)
    failed = sorted(k for k, p in pairs.items() if p["status"] != "ok")
    assert failed == [(3, 0), (3, 1), (3, 2)], {k: pairs[k]["message"] for k in failed}
    assert all("silent" in pairs[k]["message"] for k in failed)


def test_ctrl_c_on_rank_0(fm, token_file):
    """SIGINT to rank 0 mid-run: it exits 130 at once, the others see it gone
    (exit 3), and no engine is left (the fm fixture checks). The ranks start
    with SIGINT ignored, as a shell's background job does (and CI's may):
    mesh must take Ctrl-C all the same, as every other command does."""
    args = ["-t", "tcp", "--mesh-port", free_port(), "--token-file", token_file, "--bursts", "40",
            "--pause-us", "250000", "--warmup", "10"]
    rc, _, err, others = signal_mid_run(fm, args, 4, 0, signal.SIGINT,
                                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert rc == 130, err
    assert others == {1: 3, 2: 3, 3: 3}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_an_interrupted_mesh_keeps_what_it_measured(fm, token_file, tmp_path, sig):
    """--launch local, 4 ranks, 3 scheduled rounds of about a second each: `sig` to rank 0 once a pair has
    ended. Every rank and engine ends, exit 130, one line, and mesh.json holds the pairs that ended, the
    others of the 12 marked interrupted."""
    out = tmp_path / "mesh"
    proc = fm.popen("mesh", "--launch", "local", "--ranks", "4", "-t", "tcp", "--json", "--mesh-port", free_port(),
                    "--token-file", token_file, "--bursts", "5", "--burst-size", "20", "--pause-us", "200000",
                    "--warmup", "5", "--out", out)
    try:
        ended = []
        while not ended:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            ended = [p for p in json_lines(line) if p["type"] == "pair" and p["status"] == "ok"]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    (line,) = [ln for ln in err.splitlines() if ln.strip()]
    assert line.startswith("fabmeter: interrupted: ") and f"results: {out / 'mesh.json'}" in line, line
    doc = json.loads((out / "mesh.json").read_text())
    pairs = {(p["src"], p["dst"]): p["status"] for p in doc["pairs"]}
    assert sorted(pairs) == patterns.pairs("all-to-all", 4) and len(doc["pairs"]) == 12
    done = sorted(k for k, status in pairs.items() if status == "ok")
    assert (ended[0]["src"], ended[0]["dst"]) in done and len(done) < 12, pairs
    assert all(status in ("ok", "interrupted") for status in pairs.values()), pairs
    assert doc["status"] == "interrupted" and doc["mesh"]["interrupted"] == 12 - len(done), doc["mesh"]
    assert f"{len(done)} of 12 pairs ended" in line
    assert fm.leftovers(10) == []
