"""--io-cpu: where zmq's, nng's and nanomsg's own I/O threads run. The test
reads the threads' CPU affinity from /proc/PID/task/TID/status while the
run goes on, and holds it against what run.json's granted.io_cpus says;
and a run whose I/O threads share a busy loop's CPU says so beside its table.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ENGINE, json_lines, need_transport
from fabmeter import analysis
from fabmeter.report import context, table
from fabmeter.report.model import Entry, Run
from test_cpu_cost import serve, stop
from test_messaging import MESSAGING

NOTE = "the tail includes the library's I/O thread sharing the busy loop's CPU"


def cpu_list(text: str) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5}."""
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def with_children(pid: int) -> list[int]:
    """pid and its children (a serve's session process)."""
    kids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d.name))
        except (OSError, ValueError, IndexError):
            pass
    return [pid, *kids]


def affinities(pids: list[int]) -> dict[int, set[int]]:
    """Every thread of the processes: its allowed CPUs, as the kernel has them now."""
    seen = {}
    for pid in pids:
        try:
            tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            try:
                status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            except OSError:
                continue
            line = next(ln for ln in status.splitlines() if ln.startswith("Cpus_allowed_list:"))
            seen[tid] = cpu_list(line.split(":", 1)[1])
    return seen


def run_watched(env, transport: str, client_cpu: str, server_args: list[str], *args: str):
    """An engine client and serve; the threads' affinities sampled until the client ends.
    Returns (the client's granted transport info, client samples, server samples, client pid)."""
    server, port = serve(env, "--once", *server_args)
    client_seen: dict[int, set[int]] = {}
    server_seen: dict[int, set[int]] = {}
    try:
        client = subprocess.Popen([str(ENGINE), "run", "lat", "-t", transport, "--server", f"127.0.0.1:{port}",
                                   "--cpu", client_cpu, *args], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while client.poll() is None:
            client_seen.update(affinities([client.pid]))
            server_seen.update(affinities(with_children(server.pid)))
            time.sleep(0.05)
        out, err = client.communicate()
        assert client.returncode == 0, err
    finally:
        stop(server)
    (info,) = [line for line in json_lines(out) if line.get("type") == "transport"]
    return info["granted"], client_seen, server_seen, client.pid


def check_side(side: dict, seen: dict[int, set[int]], cpus: list[int], shares: bool) -> None:
    assert side["cpus"] == cpus and side["shares_busy_cpu"] is shares, side
    assert side["threads"] == len(side["thread_ids"]) >= 1, side
    for tid in side["thread_ids"]:
        assert tid in seen, f"thread {tid} of run.json was not a thread of the process during the run"
        assert seen[tid] == set(cpus), (tid, seen[tid], side)


@pytest.mark.parametrize("transport", MESSAGING)
def test_io_threads_run_where_run_json_says(fm, transport):
    # Event mode, the client pinned to 0, the server unpinned: their I/O
    # threads would start on {0} and on every CPU; --io-cpu 1 moves both to 1.
    g, client_seen, server_seen, pid = run_watched(fm.env, transport, "0", [], "--poll", "event",
                                                   "--io-cpu", "1", "--duration", "1", "--warmup", "100")
    io = g["io_cpus"]
    assert io["asked"] == "1"
    check_side(io["client"], client_seen, [1], False)
    check_side(io["server"], server_seen, [1], False)
    assert client_seen[pid] == {0}, "the measuring thread stays where --cpu put it"


@pytest.mark.parametrize("transport", MESSAGING)
def test_auto_keeps_clear_of_both_busy_loops(fm, transport):
    # Both busy loops on CPU 0 (they take turns: few round trips): auto gives each end's I/O threads CPU 1.
    g, client_seen, server_seen, _ = run_watched(fm.env, transport, "0", ["--cpu", "0"], "--poll", "busy",
                                                 "-n", "30", "--warmup", "5")
    io = g["io_cpus"]
    assert io["asked"] == "auto"
    check_side(io["client"], client_seen, [1], False)
    check_side(io["server"], server_seen, [1], False)
    assert io["client"]["busy_cpus"] == [0] and io["server"]["busy_cpus"] == [0]


@pytest.mark.parametrize("transport", MESSAGING)
def test_io_threads_on_a_busy_cpu_are_said(fm, transport):
    # --io-cpu 0 puts them beside the client's busy loop (as a machine with
    # no spare CPU would): the terminal table says so, for both ends.
    r = fm.run("lat", "-t", transport, "--poll", "busy", "--cpus", "0,1", "--io-cpu", "0", "-n", "200",
               "--warmup", "20")
    assert r.returncode == 0, r.stderr
    assert NOTE in r.stdout and "client on CPU 0; server on CPU 0" in r.stdout, r.stdout
    assert "--io-cpu 0 put it there" in r.stdout, r.stdout


def test_the_note_follows_the_record():
    side = {"cpus": [1], "busy_cpus": [0], "threads": 1, "thread_ids": [7], "shares_busy_cpu": False}
    shared = {**side, "cpus": [0], "shares_busy_cpu": True}
    assert analysis.io_thread_note({"io_cpus": {"asked": "auto", "client": side, "server": side}}) is None
    assert analysis.io_thread_note({}) is None, "transports without the record: no note"
    note = analysis.io_thread_note({"io_cpus": {"asked": "auto", "client": side, "server": shared}})
    assert NOTE in note and "server on CPU 0" in note and "client" not in note and "no CPU was spare" in note

    def run(granted, poll="busy"):
        doc = {"config": {"cpus": [0, 1], "params": {"transport": "nng", "poll": poll}},
               "engine_events": [{"type": "transport", "granted": granted}]}
        return Run("r", Path("r"), doc)
    both = {"io_cpus": {"asked": "auto", "client": side, "server": shared}}
    assert context.io_thread_shared(run(both))
    assert not context.io_thread_shared(run(both, "event"))
    assert not context.io_thread_shared(run({"io_cpus": {"asked": "auto", "client": side, "server": side}}))
    assert any("I/O thread sharing" in w for w in context.warnings([run(both)]))
    point = {"experiment": "lat", "latency_ns": {"p50": 1.0, "p99": 2.0, "max": 3.0}}
    _, row = table._row(Entry(run(both), point, "nng busy"), {})
    assert NOTE.replace("'", "&#x27;") in str(row), "the report's row says it"


def test_one_cpu_cpuset_has_no_spare(fm, tmp_path):
    # A process allowed one CPU (taskset): auto finds no spare and leaves the
    # I/O threads beside the busy loops, which the table says.
    need_transport("zmq")
    r = fm.run("lat", "-t", "zmq", "--poll", "busy", "--cpus", "0,0", "-n", "30", "--warmup", "5", "--json",
               "--out", tmp_path / "out", prefix=("taskset", "-c", "0"))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "out" / "run.json").read_text())
    (info,) = [e for e in doc["engine_events"] if e.get("type") == "transport"]
    io = info["granted"]["io_cpus"]
    assert io["client"]["cpus"] == [0] and io["client"]["shares_busy_cpu"] is True, io
    assert io["server"]["cpus"] == [0] and io["server"]["shares_busy_cpu"] is True, io


def test_io_cpu_refusals(fm, engine):
    need_transport("zmq")
    for bad, why in (("x", "expected a non-negative integer"), ("99999", "no CPU")):
        r = subprocess.run([str(engine), "run", "lat", "-t", "zmq", "--server", "127.0.0.1:1", "--dry-run",
                            "--io-cpu", bad], capture_output=True, text=True, timeout=10)
        assert r.returncode == 2 and why in r.stderr, (bad, r.stderr)
