"""recorded.run_recorded: one real run into run.json, its objectives checked, the machine's limits
measured only when asked."""

from __future__ import annotations

import json
import os

import pytest

from fabmeter import recorded, run, slo
from fabmeter.errors import EXIT_OK, EXIT_SLO, EXIT_USAGE

LAT = {"transport": "tcp", "size": 32, "iters": 300, "warmup": 20}


@pytest.fixture
def two_cpus() -> tuple[int, int]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("the limits are measured between two CPUs; this process may use one")
    return cpus[0], cpus[1]


@pytest.fixture
def limits_probes(monkeypatch) -> list:
    """Every `fabmeter-engine limits` run (the real one) is counted."""
    calls: list = []
    real = run.run_limits

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(run, "run_limits", counted)
    return calls


def _doc(folder) -> dict:
    return json.loads((folder / "run.json").read_text())


def test_a_run_is_recorded_with_its_verdict_and_no_limits_unasked(engine, tmp_path, two_cpus, limits_probes):
    spec = run.RunSpec("lat", LAT, cpus=two_cpus, out=tmp_path / "a" / "b", engine=str(engine))
    objectives = slo.parse("p50<=10s,p99<1ns")      # one every run holds, one none does
    ran = recorded.run_recorded(spec, objectives, suite={"point": "x"})
    assert ran.result.exit_code == EXIT_OK and ran.exit_code == EXIT_SLO, ran.result.message
    assert [c["met"] for c in ran.verdict["points"][0]["checks"]] == [True, False] and not ran.verdict["met"]
    doc = _doc(tmp_path / "a" / "b")       # its parents made
    assert doc == ran.doc
    assert doc["status"] == "ok" and doc["exit_code"] == EXIT_SLO and doc["slo"] == ran.verdict
    assert doc["config"]["slo"] == "p50<=10s,p99<1ns" and doc["config"]["suite"] == {"point": "x"}
    assert doc["config"]["params"]["iters"] == 300 and len(doc["points"]) == 1
    assert doc["command"] == recorded.equivalent_command(spec, "p50<=10s,p99<1ns")
    assert doc["command"][:2] == ["fabmeter", "lat"] and "--slo" in doc["command"]
    assert "limits" not in doc and not limits_probes


def test_limits_are_measured_first_when_asked(engine, tmp_path, two_cpus, limits_probes):
    spec = run.RunSpec("lat", LAT, cpus=two_cpus, out=tmp_path, engine=str(engine))
    ran = recorded.run_recorded(spec, limits=True)
    assert ran.exit_code == EXIT_OK and ran.verdict is None, ran.result.message
    doc = _doc(tmp_path)
    assert doc["limits"]["type"] == "limits" and doc["limits"]["cpus"] == list(two_cpus), doc["limits"]
    assert len(limits_probes) == 1 and "slo" not in doc and "slo" not in doc["config"]


def test_a_refused_run_measures_no_limits_and_is_recorded_only_if_wanted(engine, tmp_path, two_cpus,
                                                                        limits_probes):
    for wanted in (True, False):
        folder = tmp_path / str(wanted)
        spec = run.RunSpec("lat", {"transport": "shm", "size": 8 << 30}, cpus=two_cpus, out=folder,
                           engine=str(engine))
        ran = recorded.run_recorded(spec, limits=True, record_refusal=wanted)
        assert ran.exit_code == EXIT_USAGE and "exceeds the transport's maximum" in ran.result.message
        assert (folder / "run.json").exists() == wanted
        if wanted:
            assert _doc(folder)["status"] == "failed" and _doc(folder)["exit_code"] == EXIT_USAGE
    assert not limits_probes


def test_runs_into_one_record(engine, tmp_path):
    """A search's steps: several runs into one record, which its caller finishes."""
    spec = run.RunSpec("lat", LAT, out=tmp_path, engine=str(engine))
    record = recorded.new_record(spec, command=["fabmeter", "mine"], search="p99<=1ms")
    for iters in (200, 300):
        res = recorded.execute_into(record, run.RunSpec("lat", {**LAT, "iters": iters}, out=tmp_path,
                                                        engine=str(engine)))
        assert res.exit_code == EXIT_OK, res.message
    assert _doc(tmp_path)["status"] == "running"
    record.finish("ok")
    doc = _doc(tmp_path)
    assert [p["iterations"] for p in doc["points"]] == [200, 300]
    assert doc["command"] == ["fabmeter", "mine"] and doc["config"]["search"] == "p99<=1ms"
    assert doc["status"] == "ok" and "limits" not in doc
