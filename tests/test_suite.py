"""`fabmeter suite`: checking suite files, running, resuming, Ctrl-C.

Suite files are checked against the real engine's option table; the runs
are real (tiny) runs of the real engine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, free_port, one_line_error
from fabmeter.engine import engine_info
from fabmeter.options import Options
from fabmeter.suite import read as suite
from fabmeter.suite import limits, runner
from fabmeter.suite.runner import run_suite


@pytest.fixture(scope="module")
def info(engine) -> dict:
    return engine_info(str(engine))


def _not_built(info: dict) -> str | None:
    """A transport fabmeter knows of but this engine was built without, if any."""
    _, known = suite.known_names(info, Options(info))
    missing = sorted(known - set(info["transports"]))
    return missing[0] if missing else None


def _read(tmp_path: Path, info: dict, text: str) -> suite.Suite:
    f = tmp_path / "s.toml"
    f.write_text(text)
    return suite.read(f, info)


# (suite text, key named in the error, its line, words the message must contain)
BAD_SUITES = [
    ('name = "x"\n[defaults]\nexperiment = "bw"\n[[matrix]]\ntransport = ["shm",\n  "tcp"]\ntx-depth = 64\n',
     "tx-depth", 7, "did you mean 'tx_depth'"),
    ('[defaults]\nexperiment = "lat"\n[[matrix]]\ntransport = "shm"\niters = "many"\n',
     "iters", 5, "expected a non-negative integer"),
    ('[[matrix]]\nexperiment = "lat"\ntransport = "shm"\nbursts = 5\n',
     "bursts", 4, "does not apply to experiment 'lat'"),
    ('[[matrix]]\nexperiment = "oneway"\ntransport = ["shm", "tcp"]\n\nservice = "rc"\n',
     "service", 5, "does not apply to transport 'shm'"),
    ('[[matrix]]\nexperiment = "lat"\ntransport = ["shm", "tpc"]\n',
     "transport", 3, "unknown transport 'tpc'"),
    ('[defaults]\nexperiment = "lat"\n[[matrix]]\ntransport = "shm"\n[[matrix]]\ntransport = "tcp"\nall = "yes"\n',
     "all", 7, "expected true or false"),
    ('[defaults]\nexperiment = "lat"\nsize = [32, 64]\n[[matrix]]\ntransport = "shm"\n',
     "size", 3, "put lists (matrix axes) in a [[matrix]] table"),
    ('[defaults]\nexperiment = "lat"\nbidir = true\n[[matrix]]\ntransport = "shm"\n',
     "bidir", 3, "applies to none of the points"),
    ('[defaults]\nexperiment = "lat"\n[[matrix]]\ntransport = "shm"\nsize = [32, 64, 32]\n',
     "size", 5, "listed twice"),
    ('nmae = "typo"\n[[matrix]]\nexperiment = "lat"\n',
     "nmae", 1, "at the top level"),
    ('[[matrix]]\nexperiment = "latency"\n',
     "experiment", 2, "unknown experiment 'latency'"),
    # Types and choices come from the engine's export (a choice is checked here, not when the point runs).
    ('[defaults]\nexperiment = "lat"\n[[matrix]]\ntransport = "shm"\npoll = ["busy", "spin"]\n',
     "poll", 5, 'expected one of "busy", "event"'),
    ('[[matrix]]\nexperiment = "stream"\ntransport = "shm"\nduration = "2s"\n',
     "duration", 4, "expected a non-negative number (s)"),
    ('[[matrix]]\nexperiment = "lat"\ntransport = "shm"\nsize = 1.5\n',
     "size", 4, "expected a non-negative integer"),
    # Mesh points: their own keys, only on them, with the values fabmeter mesh takes.
    ('[[matrix]]\nexperiment = "bw"\ntransport = "tcp"\npattern = "all-to-one"\n',
     "pattern", 4, "applies only to mesh points"),
    ('[[matrix]]\nexperiment = "mesh"\nranks = 3\ntransport = "tcp"\npattern = "star"\n',
     "pattern", 5, "expected one of all-to-all"),
    ('[[matrix]]\nexperiment = "mesh"\nranks = 3\ntransport = "tcp"\nmesh_experiment = "bw"\nbursts = 3\n',
     "bursts", 6, "does not apply to experiment 'bw'"),
    ('[[matrix]]\nexperiment = "mesh"\ntransport = "tcp"\nranks = 3\nhostfile = "h"\n',
     "hostfile", 5, 'does not go with launch = "local"'),
    ('[[matrix]]\nexperiment = "mesh"\ntransport = "tcp"\nranks = 1\n',
     "ranks", 4, "expected a number from 2 to 64"),
    ('[[matrix]]\nexperiment = "mesh"\ntransport = "tcp"\nranks = 3\ncpus = "0,1"\n',
     "cpus", 5, "does not apply to mesh points"),
    ('repeat = 0\n[[matrix]]\nexperiment = "lat"\n', "repeat", 1, "from 1 to 100"),
    ('repeat = "3"\n[[matrix]]\nexperiment = "lat"\n', "repeat", 1, "a whole number"),
]


@pytest.mark.parametrize("text,key,line,words", BAD_SUITES, ids=[f"{b[1]}-line{b[2]}" for b in BAD_SUITES])
def test_bad_suite_names_key_and_line(tmp_path, info, text, key, line, words):
    with pytest.raises(suite.SuiteError) as e:
        _read(tmp_path, info, text)
    assert e.value.line == line, e.value.message
    assert f"'{key}'" in e.value.message and words in e.value.message, e.value.message


def test_bad_suite_cli_exit_2_before_running(fm, tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('name = "bad"\n[defaults]\nexperiment = "lat"\n\n[[matrix]]\ntransport = "shm"\nburst-size = 4\n')
    out = tmp_path / "out"
    r = fm.run("suite", f, "--out", out)
    assert r.returncode == 2
    err = one_line_error(r.stderr)
    assert f"{f}:7:" in err and "'burst-size'" in err, err
    assert not out.exists()  # nothing ran
    r = fm.run("suite", tmp_path / "missing.toml")
    assert r.returncode == 2 and "cannot read" in one_line_error(r.stderr)
    f.write_text('[[matrix]]\nexperiment = "lat"\ntransport = [shm]\n')
    r = fm.run("suite", f)
    assert r.returncode == 2 and f"{f}:3: not valid TOML" in one_line_error(r.stderr)


def test_point_ids_defaults_and_dedup(tmp_path, info):
    s = _read(tmp_path, info, """
name = "ids"
[defaults]
experiment = "oneway"
bursts = 2
tx_depth = 16          # bw only: applies where it can
[[matrix]]
transport = ["shm", "tcp"]
poll = ["busy", "event"]
[[matrix]]
transport = "shm"
size = [32, 64]
[[matrix]]
experiment = "bw"
transport = "shm"
size = "4K"
""")
    ids = [p.id for p in s.points]
    # shm busy 32 B is listed by the first two tables and runs once.
    assert ids == ["oneway-shm-busy", "oneway-shm-event", "oneway-tcp-busy", "oneway-tcp-event",
                   "oneway-shm-busy-s64", "bw-shm-busy-s4K"], ids
    by_id = {p.id: p for p in s.points}
    assert s.options.engine_argv(by_id["oneway-shm-busy"].options) == ["--transport", "shm", "--poll", "busy",
                                                                       "--bursts", "2"]
    assert by_id["bw-shm-busy-s4K"].options["size"] == 4096       # typed as the engine reports it
    assert s.options.engine_argv(by_id["bw-shm-busy-s4K"].options) == ["--transport", "shm", "--size", "4K",
                                                                       "--tx-depth", "16"]


def test_shipped_suites_are_valid(info):
    names = {}
    for f in sorted((REPO / "suites").glob("*.toml")):
        s = suite.read(f, info)
        assert s.points, f
        assert len({p.id for p in s.points}) == len(s.points)
        names[f.stem] = s
    assert {"quick", "thesis-oneway", "thesis-stream", "paper-lat-bw", "homa-load", "ramcloud-load",
            "perftest-parity", "udapl-patterns"} <= set(names)
    mpi = {p.experiment for p in names["udapl-patterns"].points if p.tool == "fabmeter-mpibench"}
    assert mpi == {"lat", "bw", "allreduce"}  # the study's MPI layer, beside its meshes
    udapl = [p for p in names["udapl-patterns"].points if not p.tool]
    assert all(p.experiment == "mesh" and p.mesh["mesh_experiment"] == "bw" for p in udapl)
    assert {p.mesh["pattern"] for p in udapl} == {"all-to-all", "fixed-target", "one-to-all", "all-to-one"}
    chaotic = {(p.transport, p.options.get("rq_depth")) for p in udapl if p.mesh["schedule"] == "chaotic"}
    assert {("shm", 11), ("shm", 20), ("shm", 100), ("verbs", 11), ("verbs", 20), ("verbs", 100)} == chaotic
    assert {p.options.get("op") for p in udapl if p.transport == "verbs"} == {None, "send", "write-imm"}
    parity = {p.id: p for p in names["perftest-parity"].points}
    assert {"lat-verbs-busy-rc-write-s32-n2000-inline64", "lat-verbs-busy-rc-read-s32-n2000",
            "lat-verbs-busy-rc-atomic-cswap-s8-n2000", "bw-verbs-busy-rc-read-s1K-n5000-bidir"} <= set(parity)
    assert all(p.options["cm"] == "raw" for p in parity.values())
    # ib_write_bw's twin: its receiver takes no part, uni- and bidirectional
    writes = [p for p in parity.values() if p.experiment == "bw" and p.options.get("op") == "write"]
    assert len(writes) == 2 and all(p.options.get("passive_rx") is True for p in writes)
    oneway = {p.id for p in names["thesis-oneway"].points}
    assert {"oneway-shm-busy", "oneway-tcp-event", "oneway-verbs-busy-ud", "oneway-verbs-event-rc-cpus-none",
            "oneway-verbs-busy-rc-inline188", "oneway-verbs-busy-rc-send-inline188-sig1",
            "oneway-verbs-busy-uc-write-imm-inline0"} <= oneway
    stamps = {p.id for p in names["thesis-timestamps"].points}
    assert {"oneway-verbs-event-ud", "oneway-verbs-busy-uc", "oneway-verbs-busy-uc-inline188-sig0",
            "oneway-verbs-busy-ud-inline0-sig1", "oneway-verbs-busy-rc-inline188-sig1"} <= stamps
    sizes = {p.options.get("size") for p in names["thesis-oneway"].points if p.transport == "tcp"}
    assert {8, 32768} <= sizes
    homa = names["homa-load"].points
    assert {p.options["workload"] for p in homa} == {"w1", "w2", "w3", "w4", "w5"}
    assert all(p.experiment == "load" and p.options["of_capacity"] == [0.2, 0.5, 0.8] for p in homa)
    pools = {(p.transport, p.options.get("rq_depth"), p.options.get("sq_depth")) for p in names["ramcloud-load"].points}
    assert {("verbs", 24, 8), ("verbs", 24, 32), ("verbs", 24, 64), ("verbs", 48, 8)} <= pools
    ramcloud = names["ramcloud-load"].points
    # through the knee to 2x
    assert all(max(p.options["of_capacity"]) == 2.0 for p in ramcloud if "of_capacity" in p.options)
    closed = {p.transport: p.options["clients"] for p in ramcloud if "clients" in p.options}
    assert set(closed) == {"verbs", "tcp"} and all(c[0] == 1 and c[-1] == 40 for c in closed.values()), closed


@pytest.mark.parametrize("name", ["homa-load", "ramcloud-load"])
def test_load_suites_run_a_point(name, info, engine, tmp_path):
    """The load suites' first shm point, shortened: a sweep whose points carry what the report draws."""
    s = suite.read(REPO / "suites" / f"{name}.toml", info)
    point = next(p for p in s.points if p.transport == "shm")
    point.options["duration"] = 0.05
    point.options.pop("count", None)            # homa-load runs by request count: shortened by time here
    s.points = [point]
    out = tmp_path / name
    assert run_suite(s, out, str(engine), None, None) == 0
    points = _run_doc(out / point.id)["points"]
    assert [p["phase"] for p in points] == ["capacity"] + ["open loop"] * len(point.options["of_capacity"])
    assert all(p["slowdown"] and p["server"]["completions_per_poll"] for p in points[1:])


def test_dry_run_lists_points_and_skips(fm, tmp_path, info):
    missing = _not_built(info)
    transports = '["shm", "tcp"' + (f', "{missing}"' if missing else "") + "]"
    f = tmp_path / "dry.toml"
    f.write_text(f'name = "dry"\n[[matrix]]\nexperiment = "lat"\ntransport = {transports}\niters = 100\n')
    out = tmp_path / "out"
    r = fm.run("suite", f, "--dry-run", "--out", out)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("lat-shm-busy  [run]  fabmeter lat --transport shm --iters 100")
    assert lines[1].startswith("lat-tcp-busy  [run]")
    if missing:
        assert lines[2].startswith(f"lat-{missing}-busy  [skip: transport '{missing}' is not built")
    assert not out.exists()


def _run_suite(fm, tmp_path, text: str) -> tuple[Path, Path]:
    """Writes the suite `text` and runs it into tmp_path/out, which must succeed: (the file, out)."""
    f, out = tmp_path / "s.toml", tmp_path / "out"
    f.write_text(text)
    r = fm.run("suite", f, "--out", out)
    assert r.returncode == 0, r.stderr
    return f, out


def test_repeat_runs_rounds_in_alternation_and_compare_judges_by_them(fm, tmp_path):
    _, out = _run_suite(fm, tmp_path, 'name = "rep"\nrepeat = 3\n[[matrix]]\nexperiment = "lat"\n'
                                      'transport = ["shm", "udp"]\npoll = "event"\niters = 300\n')
    order = [e["id"] for e in json.loads((out / "index.json").read_text())["points"]]
    assert order == ["lat-shm-event.r1", "lat-udp-event.r1", "lat-udp-event.r2", "lat-shm-event.r2",
                     "lat-shm-event.r3", "lat-udp-event.r3"]
    assert all(json.loads((out / pid / "run.json").read_text())["status"] == "ok" for pid in order)
    r = fm.run("compare", out, out, "--json")
    assert r.returncode == 0, r.stderr
    points = json.loads(r.stdout)["points"]
    assert len(points) == 2 and all(p["method"] == "runs" and p["runs"] == [3, 3] for p in points), points
    assert {p["verdict"] for p in points} == {"indistinguishable"}


def test_transport_not_built_is_skipped(tmp_path, info, engine, capsys):
    # As on a machine without libfabric: an engine whose table lacks "ofi".
    without = dict(info, transports=[t for t in info["transports"] if t != "ofi"])
    s = _read(tmp_path, without, '[[matrix]]\nexperiment = ["lat", "bw"]\ntransport = "ofi"\n')
    assert [p.skip for p in s.points] == [f"transport 'ofi' is not built into this engine (built: "
                                          f"{', '.join(sorted(without['transports']))})"] * 2
    out = tmp_path / "out"
    assert run_suite(s, out, str(engine), None, None) == 0       # nothing to run is not an error
    assert "suite: skipping 2 points: transport 'ofi' is not built" in capsys.readouterr().err
    index = _index(out)
    assert [(e["id"], e["status"]) for e in index["points"]] == [("lat-ofi-busy", "skipped"),
                                                                 ("bw-ofi-busy", "skipped")]
    assert index["status"] == "ok" and not (out / "lat-ofi-busy").exists()


def _index(out: Path) -> dict:
    return json.loads((out / "index.json").read_text())


def _run_doc(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())


def test_a_poll_event_point_is_finished_as_the_engine_resolves_it(tmp_path, info, engine):
    """A point given poll = "event" is finished after its run: what it asks for is compared with run.json's
    params as the engine resolves them (its dry run's: --poll sets poll_recv and poll_send), not by a copy of
    that rule, so an engine that resolved it otherwise would run the point again."""
    s = _read(tmp_path, info, '[[matrix]]\nexperiment = "lat"\ntransport = "udp"\npoll = "event"\niters = 200\n')
    out = tmp_path / "out"
    assert run_suite(s, out, str(engine), None, None) == 0
    [p] = s.points
    plan = limits.plan_of(str(engine), p, s.options)
    params = _run_doc(out / p.id)["config"]["params"]
    assert (params["poll"], params["poll_recv"], params["poll_send"]) == ("event", "event", "event")
    assert plan.params == params and runner.is_finished(out / p.id, p, plan)
    other_rule = dataclasses.replace(plan, params={**plan.params, "poll_send": "busy"})
    assert not runner.is_finished(out / p.id, p, other_rule)


def test_suite_runs_resumes_and_reruns_changed_points(fm, tmp_path, info):
    missing = _not_built(info)
    extra = f'\n[[matrix]]\nexperiment = "lat"\ntransport = "{missing}"\n' if missing else ""
    text = ('name = "tiny"\n[defaults]\nwarmup = 50\niters = 300   # lat only: defaults apply where they can\n'
            '[[matrix]]\nexperiment = "lat"\ntransport = ["shm", "tcp"]\n'
            '[[matrix]]\nexperiment = "oneway"\ntransport = "shm"\nbursts = 2\nburst_size = 100\n' + extra)
    f = tmp_path / "tiny.toml"
    f.write_text(text)
    out = tmp_path / "out"
    cpus = sorted(os.sched_getaffinity(0))[:2]
    r = fm.run("suite", f, "--out", out, *(["--cpus", f"{cpus[1]},{cpus[0]}"] if len(cpus) == 2 else []))
    assert r.returncode == 0, r.stderr
    ids = ["lat-shm-busy", "lat-tcp-busy", "oneway-shm-busy"]
    # stderr is not a terminal: one progress line per point.
    assert [ln.split()[:2] for ln in r.stderr.splitlines() if ln.startswith("[")] == \
        [["[1/3]", ids[0]], ["[2/3]", ids[1]], ["[3/3]", ids[2]]]
    if missing:
        assert f"skipping 1 point: transport '{missing}' is not built" in r.stderr
    index = _index(out)
    assert index["suite"] == "tiny" and index["status"] == "ok"
    statuses = {e["id"]: e["status"] for e in index["points"]}
    assert {i: statuses[i] for i in ids} == {i: "ok" for i in ids}
    if missing:
        assert statuses[f"lat-{missing}-busy"] == "skipped"
    for i in ids:
        doc = _run_doc(out / i)
        assert doc["status"] == "ok" and doc["config"]["suite"]["point"] == i
        # The configuration is the engine's typed params, as for every other run.
        params = doc["config"]["params"]
        assert "options" not in doc["config"] and params["experiment"] == i.split("-")[0]
        assert params["transport"] == i.split("-")[1] and params["warmup"] == 50 and params["poll"] == "busy"
        if len(cpus) == 2:
            assert doc["config"]["cpus"] == [cpus[1], cpus[0]]   # --cpus overrides the default
        assert doc["command"][:2] == ["fabmeter", i.split("-")[0]] and doc["command"][-2:] == ["--out", str(out / i)]
        assert len(doc["points"]) == 1 and doc["points"][0]["iterations"] == (300 if i.startswith("lat") else 200)
        for name in doc["points"][0]["samples"].values():
            assert (out / i / name).stat().st_size > 0
    mtimes = {i: (out / i / "run.json").stat().st_mtime_ns for i in ids}

    # Again: every point is finished, nothing runs.
    r = fm.run("suite", f, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "3 of 3 points already finished" in r.stderr and not any(ln.startswith("[") for ln in r.stderr.splitlines())
    assert {i: (out / i / "run.json").stat().st_mtime_ns for i in ids} == mtimes

    # An edited suite reruns exactly the points whose options changed.
    f.write_text(text.replace("burst_size = 100", "burst_size = 150"))
    r = fm.run("suite", f, "--out", out)
    assert r.returncode == 0, r.stderr
    assert [ln.split()[1] for ln in r.stderr.splitlines() if ln.startswith("[")] == ["oneway-shm-busy"]
    assert _run_doc(out / "oneway-shm-busy")["points"][0]["iterations"] == 300
    assert (out / "lat-shm-busy" / "run.json").stat().st_mtime_ns == mtimes["lat-shm-busy"]


def test_interrupt_keeps_finished_points_and_resumes(fm, tmp_path):
    f = tmp_path / "long.toml"
    f.write_text('name = "long"\n[defaults]\nexperiment = "lat"\nduration = 1\n'
                 '[[matrix]]\ntransport = ["shm", "tcp", "udp"]\n')
    out = tmp_path / "out"
    proc = fm.popen("suite", str(f), "--out", str(out), start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:   # wait until point 1 is done and point 2 is measuring
            try:
                st = [e["status"] for e in _index(out)["points"]]
            except (OSError, ValueError):
                st = []
            if st[:2] == ["ok", "running"] and (out / "lat-tcp-busy" / "run.json").exists():
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the suite did not reach its second point: {st}")
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)    # Ctrl-C at a terminal: the whole foreground group
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    index = _index(out)
    assert index["status"] == "interrupted"
    assert [e["status"] for e in index["points"]] == ["ok", "interrupted", "pending"]
    assert _run_doc(out / "lat-shm-busy")["status"] == "ok"
    assert _run_doc(out / "lat-tcp-busy")["status"] == "interrupted"
    assert not (out / "lat-udp-busy").exists()
    finished = (out / "lat-shm-busy" / "run.json").stat().st_mtime_ns

    r = fm.run("suite", f, "--out", out)   # resume: the finished point is kept, the rest run
    assert r.returncode == 0, r.stderr
    assert "1 of 3 points already finished" in r.stderr
    assert [ln.split()[1] for ln in r.stderr.splitlines() if ln.startswith("[")] == ["lat-tcp-busy", "lat-udp-busy"]
    assert [e["status"] for e in _index(out)["points"]] == ["ok", "ok", "ok"]
    assert (out / "lat-shm-busy" / "run.json").stat().st_mtime_ns == finished


def test_suite_against_a_running_server(fm, tmp_path):
    """--server: every point runs as a session of one `fabmeter serve` (as the
    Soft-RoCE guest runs the verbs suites), the client pinned by --cpus A."""
    server = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0")
    try:
        listening = json.loads(server.stdout.readline())
        address = f"127.0.0.1:{listening['port']}"
        f = tmp_path / "remote.toml"
        f.write_text('name = "remote"\n[defaults]\ntransport = "tcp"\nwarmup = 20\n'
                     '[[matrix]]\nexperiment = "lat"\niters = 200\n'
                     '[[matrix]]\nexperiment = "oneway"\nbursts = 1\nburst_size = 100\n')
        out = tmp_path / "out"
        cpu = sorted(os.sched_getaffinity(0))[0]
        r = fm.run("suite", f, "--out", out, "--server", address, "--cpus", str(cpu), timeout=120)
        assert r.returncode == 0, r.stderr
        for i in ("lat-tcp-busy", "oneway-tcp-busy"):
            doc = _run_doc(out / i)
            assert doc["status"] == "ok" and doc["config"]["server"] == address, doc["config"]
            assert doc["config"]["cpus"] == [cpu] and "--server" in doc["command"]
            assert doc["environment"]["server_engine"], doc["environment"]
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=20)
    assert server.returncode is not None


def test_udapl_suite_dry_run_and_a_shortened_run(fm, tmp_path, info, engine):
    """suites/udapl-patterns.toml: --dry-run lists its mesh commands; two of its points (a scheduled tcp
    all-to-one, a chaotic shm all-to-all into an 11-entry receive queue), on 3 local ranks and shortened, run
    and keep each pair's throughput over time."""
    f = REPO / "suites" / "udapl-patterns.toml"
    r = fm.run("suite", f, "--dry-run", "--out", tmp_path / "dry")
    assert r.returncode == 0, r.stderr
    assert "mesh-bw-tcp-busy-all-to-one-scheduled-s1K  [run]  fabmeter mesh --launch local --ranks 4 " in r.stdout
    s = suite.read(f, info)
    wanted = ("mesh-bw-tcp-busy-all-to-one-scheduled-s1K", "mesh-bw-shm-busy-all-to-all-chaotic-s1K-tx-depth10-rq-depth11")
    s.points = [p for p in s.points if p.id in wanted]
    assert len(s.points) == 2
    for p in s.points:
        p.mesh["ranks"] = 3
        p.options.update(iters=2000, warmup=50)
    out = tmp_path / "run"
    assert run_suite(s, out, str(engine), None, None) == 0
    index = json.loads((out / "index.json").read_text())
    assert [e["status"] for e in index["points"]] == ["ok", "ok"]
    for p in s.points:
        doc = json.loads((out / p.id / "mesh.json").read_text())
        assert doc["mesh"]["pattern"] == p.mesh["pattern"] and doc["params"]["rq_depth" if p.transport == "shm"
                                                                                else "iters"]
        for pair in doc["pairs"]:
            assert sum(pair["throughput_series"]["c2s"]["msgs"]) == 2000, pair
    # Finished mesh points are not run again.
    assert run_suite(s, out, str(engine), None, None) == 0


def test_a_mesh_point_runs_in_the_suites_own_process(tmp_path, info, engine, token_file, monkeypatch):
    """A mesh point is a call, not `python -m fabmeter mesh` (its other ranks, `... mesh --rank R`, are
    processes); its token reaches its engines and the suite's own FABMETER_TOKEN is as it was afterwards
    (a later point against a serve still needs it)."""
    real_popen = subprocess.Popen

    class NoMeshCommand(real_popen):
        def __init__(self, args, *more, **kw):
            words = args if isinstance(args, str) else " ".join(map(str, args))
            if re.search(r"-m fabmeter mesh\b", words) and not re.search(r"--rank(?![\w-])", words):
                raise AssertionError(f"the suite started a mesh command: {words}")
            super().__init__(args, *more, **kw)
    monkeypatch.setattr(subprocess, "Popen", NoMeshCommand)
    monkeypatch.setenv("FABMETER_TOKEN", "the-suites-own-secret-" + "x" * 16)
    port = free_port()
    s = _read(tmp_path, info, f'name = "m"\n[[matrix]]\nexperiment = "mesh"\nranks = 2\ntransport = "tcp"\n'
                              f'bursts = 2\nburst_size = 50\nmesh_port = {port}\ntoken_file = "{token_file}"\n')
    out = tmp_path / "out"
    assert run_suite(s, out, str(engine), None, None) == 0
    assert os.environ["FABMETER_TOKEN"] == "the-suites-own-secret-" + "x" * 16
    [p] = s.points
    assert [e["status"] for e in _index(out)["points"]] == ["ok"]
    doc = json.loads((out / p.id / "mesh.json").read_text())
    assert doc["status"] == "ok" and all(q["status"] == "ok" for q in doc["pairs"]), doc["pairs"]
    assert sorted((q["src"], q["dst"]) for q in doc["pairs"]) == [(0, 1), (1, 0)]
    assert doc["command"][:4] == ["fabmeter", "mesh", "--launch", "local"] and "--token-file" in doc["command"]
    # Its pattern and schedule not given, the mesh ran mesh's defaults: the point is finished, not run again.
    assert runner.is_finished(out / p.id, p, None)


def test_a_mesh_point_that_breaks_fails_alone(tmp_path, info, engine):
    """Its coordination port taken: that point fails with the reason, the suite goes on to the next."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        s = _read(tmp_path, info, f'name = "b"\n[[matrix]]\nexperiment = "mesh"\nranks = 2\ntransport = "tcp"\n'
                                  f'bursts = 2\nmesh_port = {taken.getsockname()[1]}\n'
                                  '[[matrix]]\nexperiment = "lat"\ntransport = "tcp"\niters = 200\n')
        assert run_suite(s, tmp_path / "out", str(engine), None, None) == 3
    mesh, lat = _index(tmp_path / "out")["points"]
    assert mesh["status"] == "failed" and "Address already in use" in mesh["message"], mesh
    assert lat["status"] == "ok", lat


# --- a suite stays inside its results folder (docs/security.md) -------------

OUTSIDE = [
    ('name = ".."\n[[matrix]]\nexperiment = "lat"\n', "name", 1, "not '.' or '..'"),
    ('[[matrix]]\nexperiment = "stream"\ntransport = "shm"\nsink = "file:/tmp/abs.csv"\n', "sink", 4,
     "a file name in the point's folder"),
    ('[[matrix]]\nexperiment = "stream"\ntransport = "shm"\nsink = ["memory", "file:../up.csv"]\n', "sink", 4,
     "a file name in the point's folder"),
    ('[defaults]\nexperiment = "mesh"\ntransport = "tcp"\nlaunch = "ssh"\nhostfile = "h"\n'
     '[[matrix]]\nssh = "sh -c \'touch /tmp/x\'"\n', "ssh", 7, "it must start with 'ssh'"),
    ('[defaults]\nexperiment = "mesh"\ntransport = "tcp"\nlaunch = "ssh"\nhostfile = "h"\n'
     '[[matrix]]\nssh = "ssh -o ProxyCommand=touch"\n', "ssh", 7, "'-o ProxyCommand=touch' is not an option"),
    ('[defaults]\nexperiment = "mesh"\ntransport = "tcp"\nlaunch = "ssh"\nhostfile = "h"\n'
     '[[matrix]]\nremote_fabmeter = "rm -rf ~; fabmeter"\n', "remote_fabmeter", 7, "a program named fabmeter"),
]


@pytest.mark.parametrize("text,key,line,words", OUTSIDE, ids=[f"{o[1]}-line{o[2]}" for o in OUTSIDE])
def test_suite_names_nothing_outside_its_folder(tmp_path, info, text, key, line, words):
    with pytest.raises(suite.SuiteError) as e:
        _read(tmp_path, info, text)
    assert e.value.line == line and f"'{key}'" in e.value.message and words in e.value.message, e.value.message


def test_suite_ssh_of_a_safe_shape_is_taken(tmp_path, info):
    s = _read(tmp_path, info, '[[matrix]]\nexperiment = "mesh"\ntransport = "tcp"\nlaunch = "ssh"\nhostfile = "h"\n'
                              'ssh = "ssh -p 2222 -l bob -i ~/.ssh/id -o StrictHostKeyChecking=no"\n'
                              'remote_fabmeter = "/opt/venv/bin/fabmeter"\n')
    assert s.points[0].mesh["ssh"].startswith("ssh -p 2222")


def test_suite_never_follows_a_planted_symlink(fm, tmp_path):
    """A symlink in place of a point's folder: refused before anything runs, and nothing in its
    target is deleted or written. A link named like a sample inside a real point folder goes, and
    the engine does not write through it."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.npy").write_bytes(b"precious")
    (victim / "run.json").write_text("{}")
    f = tmp_path / "s.toml"
    f.write_text('name = "s"\n[[matrix]]\nexperiment = "lat"\ntransport = "shm"\niters = 200\nwarmup = 10\n')
    out = tmp_path / "out"
    out.mkdir()
    (out / "lat-shm-busy").symlink_to(victim)
    r = fm.run("suite", f, "--out", out)
    assert r.returncode == 2, r.stderr
    assert "lat-shm-busy is not a folder" in one_line_error(r.stderr)
    assert sorted(p.name for p in victim.iterdir()) == ["keep.npy", "run.json"]
    assert (victim / "keep.npy").read_bytes() == b"precious" and (victim / "run.json").read_text() == "{}"

    (out / "lat-shm-busy").unlink()
    (out / "lat-shm-busy").mkdir()
    (out / "lat-shm-busy" / "lat-shm-busy-32B.rtt_ns.npy").symlink_to(victim / "new.npy")   # dangling
    r = fm.run("suite", f, "--out", out)
    assert r.returncode == 0, r.stderr
    assert not (victim / "new.npy").exists()
    assert not (out / "lat-shm-busy" / "lat-shm-busy-32B.rtt_ns.npy").is_symlink()
    assert _run_doc(out / "lat-shm-busy")["status"] == "ok"


def test_suite_file_sink_lands_in_the_point_folder(fm, tmp_path):
    f, out = _run_suite(fm, tmp_path, 'name = "s"\n[[matrix]]\nexperiment = "stream"\ntransport = "shm"\n'
                                      'rate = 2000\ncount = 200\nsink = "file:samples.csv"\n')
    point = out / "stream-shm-busy"
    assert (point / "samples.csv").stat().st_size > 0 and not (tmp_path / "samples.csv").exists()
    r = fm.run("suite", f, "--out", out)   # the path it ran with is the point's: finished, not run again
    assert r.returncode == 0 and "1 of 1 points already finished" in r.stderr, r.stderr
