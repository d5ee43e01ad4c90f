"""Latency objectives: `--slo` (slo.py) and the suite key `slo`.

The parser and the verdict are checked as functions; the rest with the
real engine over shm, tiny runs. Objectives are chosen so no machine can
flip them: p50<=10s holds, p50<=1ns cannot (no timing is asserted).
"""

from __future__ import annotations

import json
import stat

import pytest

from conftest import json_lines, one_line_error
from fabmeter import slo
from fabmeter.engine import engine_info
from fabmeter.errors import EXIT_RUNTIME, EXIT_SLO
from fabmeter.suite import read as suite

HOLDS, CANNOT = "p50<=10s", "p50<=1ns"
TINY = {"lat": ["-n", "200", "--warmup", "10"],
        "oneway": ["--bursts", "2", "--burst-size", "50", "--warmup", "10"],
        "stream": ["--rate", "10000", "--count", "200"]}


# --- the parser -------------------------------------------------------------------

@pytest.mark.parametrize("text,canonical,limits", [
    ("p99<=20us,p999<=100us", "p99<=20us,p999<=100us", [20e3, 100e3]),
    (" p99.9 < 1.5 ms , mean<=2s", "p999<1.5ms,mean<=2s", [1.5e6, 2e9]),
    ("P90<=7ns,max<1us,p50<=3us", "p90<=7ns,max<1us,p50<=3us", [7, 1e3, 3e3]),
])
def test_parse(text, canonical, limits):
    objectives = slo.parse(text)
    assert slo.canonical(objectives) == canonical
    assert [o.limit_ns for o in objectives] == pytest.approx(limits)


@pytest.mark.parametrize("text,words", [
    ("p99<=20", "needs a unit"),
    ("p98<=1us", "unknown figure 'p98'"),
    ("p99=>1us", "expected the operator <= or <, got '=>'"),
    ("", "empty objective list"),
    ("p99<=1us,", "empty item"),
    ("p99<=1us,p99.9<=2us,p99<=3us", "p99 has an objective already"),
    ("p99<=0us", "positive number"),
    ("p99<=1sec", "unknown unit 'sec'"),
    ("min<=1us", "unknown figure 'min'"),
    ("p99<=banana", "expected a number after '<=', got 'banana'"),
    ("p99<", "expected a number after '<', got nothing"),
    ("p99<=1.2.3us", "got '1.2.3us'"),
])
def test_parse_refuses(text, words):
    with pytest.raises(slo.SloError) as e:
        slo.parse(text)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_verdict_of_a_point():
    point = {"type": "point", "iterations": 10, "partial": False, "latency_kind": "rtt/2",
             "latency_ns": {"p50": 1000.0, "p99": 2000.0, "p999": None}}
    v = slo.evaluate_point(slo.parse("p50<=1us,p99<2us"), point)   # equal to the limit: <= holds, < does not
    assert v["latency_kind"] == "rtt/2" and not v["met"] and v["why"] == ""
    assert [(c["figure"], c["measured_ns"], c["met"]) for c in v["checks"]] == [("p50", 1000.0, True),
                                                                                ("p99", 2000.0, False)]
    for bad, why in (({"partial": True}, "partial"), ({"iterations": 0}, "no measured iterations"),
                     ({"latency_ns": None}, "no latency figure")):
        v = slo.evaluate_point(slo.parse("p50<=1s"), {**point, **bad})
        assert not v["met"] and why in v["why"] and v["checks"][0]["measured_ns"] is None
    v = slo.evaluate_point(slo.parse("p999<=1s"), point)    # the engine's null (no samples)
    assert not v["met"] and v["why"] == "no measured latency"
    run = slo.evaluate(slo.parse("p50<=1s"), [])
    assert not run["met"] and run["why"] == "no point was measured"
    # The run's own failure wins over the verdict.
    assert slo.exit_code(EXIT_RUNTIME, run) == EXIT_RUNTIME and slo.exit_code(0, run) == EXIT_SLO
    assert slo.exit_code(0, slo.evaluate(slo.parse("p50<=1s"), [point])) == 0


# --- the command ------------------------------------------------------------------

@pytest.mark.parametrize("experiment", ["lat", "oneway", "stream"])
def test_objective_that_holds_exits_0(fm, experiment):
    r = fm.run(experiment, "-t", "shm", *TINY[experiment], "--slo", HOLDS)
    assert r.returncode == 0, r.stderr
    kind = {"lat": "rtt/2", "oneway": "one-way", "stream": "one-way (receive"}[experiment]
    rows = [ln for ln in r.stdout.splitlines() if ln.split()[:1] and "<= 10 s" in ln]
    assert rows and all(kind in ln and ln.split()[-1] == "met" for ln in rows), r.stdout
    assert f"slo {HOLDS}: met" in r.stdout


def test_missed_objective_exits_4_and_is_recorded(fm, tmp_path):
    out = tmp_path / "out"
    r = fm.run("lat", "-t", "shm", *TINY["lat"], "--slo", f"p99.9<=10s,{CANNOT}", "--out", out)
    assert r.returncode == EXIT_SLO, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if "<= 1 ns" in ln)
    assert row.split()[:5] == ["32", "B", "rtt/2", "p50", "<="] and row.split()[-1] == "MISSED"
    assert "slo p999<=10s,p50<=1ns: MISSED (1 of 2 checks)" in r.stdout
    assert r.stderr.startswith("fabmeter: slo missed: 1 of 2 checks") and len(r.stderr.splitlines()) == 1
    doc = json.loads((out / "run.json").read_text())
    assert (doc["status"], doc["exit_code"], doc["config"]["slo"]) == ("ok", EXIT_SLO, "p999<=10s,p50<=1ns")
    assert doc["command"][-4:-2] == ["--slo", "p99.9<=10s,p50<=1ns"]
    verdict = doc["slo"]
    assert (verdict["objectives"], verdict["met"], verdict["missed"], verdict["checks"]) == \
        ("p999<=10s,p50<=1ns", False, 1, 2)
    [point] = verdict["points"]
    assert point["point"] == 0 and point["latency_kind"] == "rtt/2" and not point["met"]
    assert [(c["objective"], c["met"]) for c in point["checks"]] == [("p999<=10s", True), ("p50<=1ns", False)]
    assert point["checks"][1]["measured_ns"] == doc["points"][0]["latency_ns"]["p50"]


def test_json_lines_carry_the_verdict(fm):
    r = fm.run("oneway", "-t", "shm", *TINY["oneway"], "--slo", f"{HOLDS},max<1ns", "--json")
    assert r.returncode == EXIT_SLO, r.stderr
    [point] = json_lines(r.stdout)             # still one line per point, the engine's point plus "slo"
    assert point["type"] == "point" and point["latency_kind"] == "one-way"
    assert [(c["objective"], c["met"]) for c in point["slo"]["checks"]] == [(HOLDS, True), ("max<1ns", False)]
    assert point["slo"]["checks"][1]["measured_ns"] == point["latency_ns"]["max"] and not point["slo"]["met"]


def _logging_engine(tmp_path, engine):
    """An engine that notes each command it is asked to run: did anything start?"""
    log = tmp_path / "engine.log"
    wrapper = tmp_path / "engine"
    wrapper.write_text(f"#!/bin/sh\necho \"$1\" >> {log}\nexec {engine} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, log


@pytest.mark.parametrize("text", ["p99<=20", "p98<=1us", "p99=>1us", ""])
def test_bad_objectives_exit_2_before_anything_runs(fm, tmp_path, engine, text):
    wrapper, log = _logging_engine(tmp_path, engine)
    fm.env["FABMETER_ENGINE"] = str(wrapper)
    out = tmp_path / "out"
    r = fm.run("lat", "-t", "shm", "--slo", text, "--out", out)
    assert r.returncode == 2 and r.stdout == ""
    assert one_line_error(r.stderr).startswith("fabmeter: error: --slo: ")
    assert set(log.read_text().split()) <= {"options"} and not out.exists()


@pytest.mark.parametrize("experiment", ["bw", "check"])
def test_slo_refused_where_points_have_no_latency(fm, experiment):
    r = fm.run(experiment, "-t", "shm", "--slo", "p99<=1us")
    assert r.returncode == 2
    assert one_line_error(r.stderr) == f"fabmeter: error: --slo does not apply to {experiment} " \
                                       "(its points carry no latency figure)"
    assert "--slo" not in fm.run(experiment, "--help").stdout
    assert "4 a --slo objective was missed" in " ".join(fm.run("--help").stdout.split())


# --- suites -------------------------------------------------------------------------

@pytest.mark.parametrize("text,line,words", [
    ('[[matrix]]\nexperiment = "lat"\nslo = ["p99<=1us", "p99<=2us"]\n', 3, "not a matrix axis"),
    ('[[matrix]]\nexperiment = "lat"\nslo = "p99<=20"\n', 3, "key 'slo': 'p99<=20': the limit needs a unit"),
    ('[[matrix]]\nexperiment = ["lat", "bw"]\n\nslo = "p99<=1us"\n', 4, "does not apply to experiment 'bw'"),
    ('[defaults]\nslo = "p99<=1us"\n[[matrix]]\nexperiment = "check"\n', 2, "applies to none of the points"),
    ('[[matrix]]\nexperiment = "lat"\nslo = "p99<=1us"\n[[matrix]]\nexperiment = "lat"\nslo = "p99<=2us"\n',
     4, "with different slo"),
])
def test_bad_suite_slo(tmp_path, engine, text, line, words):
    f = tmp_path / "s.toml"
    f.write_text(text)
    with pytest.raises(suite.SuiteError) as e:
        suite.read(f, engine_info(str(engine)))
    assert e.value.line == line and words in e.value.message


def test_suite_runs_everything_then_exits_4(fm, tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(f'name = "slo"\n[defaults]\nwarmup = 10\niters = 300\nslo = "{HOLDS}"\n'
                 f'[[matrix]]\nexperiment = "lat"\nslo = "{CANNOT}"\n'
                 '[[matrix]]\nexperiment = "oneway"\nbursts = 2\nburst_size = 50\n'
                 '[[matrix]]\nexperiment = "bw"\n')   # [defaults] apply where they can: slo not to bw
    out = tmp_path / "out"
    r = fm.run("suite", f, "--out", out)
    assert r.returncode == EXIT_SLO, r.stderr
    index = json.loads((out / "index.json").read_text())
    entries = {e["id"]: e for e in index["points"]}
    assert {i: e["status"] for i, e in entries.items()} == {"lat-shm-busy": "ok", "oneway-shm-busy": "ok",
                                                           "bw-shm-busy": "ok"}      # nothing lost
    assert {i: e["slo"] for i, e in entries.items()} == {
        "lat-shm-busy": {"objectives": CANNOT, "met": False},
        "oneway-shm-busy": {"objectives": HOLDS, "met": True}, "bw-shm-busy": None}
    assert index["slo"] == {"met": False, "missed": ["lat-shm-busy"]}
    assert "lat-shm-busy: slo missed" in r.stdout
    lat = json.loads((out / "lat-shm-busy" / "run.json").read_text())
    assert (lat["status"], lat["exit_code"], lat["config"]["slo"], lat["slo"]["met"]) == ("ok", 4, CANNOT, False)
    assert "slo" not in json.loads((out / "bw-shm-busy" / "run.json").read_text())["config"]

    # Objectives edited: judged again on the recorded points, nothing is measured again.
    f.write_text(f.read_text().replace(CANNOT, HOLDS))
    r = fm.run("suite", f, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "3 of 3 points already finished" in r.stderr and not any(ln.startswith("[") for ln in r.stderr.splitlines())
    lat = json.loads((out / "lat-shm-busy" / "run.json").read_text())
    assert (lat["exit_code"], lat["config"]["slo"], lat["slo"]["met"]) == (0, HOLDS, True)
    assert lat["command"][lat["command"].index("--slo") + 1] == HOLDS
    assert json.loads((out / "index.json").read_text())["slo"] == {"met": True, "missed": []}
