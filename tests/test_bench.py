"""The bench's own logic (its figures are measured by `make bench`, never
asserted): verdicts against targets, and the Soft-RoCE table it reads."""

from __future__ import annotations

import json

from fabmeter import bench


def row(target, higher=False):
    return bench.Row("r", lambda: 0.0, "v", lambda: 0.0, "f", target, higher_is_better=higher)


def test_verdicts_follow_the_direction_of_the_target():
    assert row(1.25).met(1.2) and not row(1.25).met(1.3)
    assert row(1.0, higher=True).met(1.1) and not row(1.0, higher=True).met(0.9)
    assert row(1.0).met(None) is None
    assert row(None).met(0.5) is None  # a floor row explains, it has no verdict


def test_rdma_table_from_the_last_test_rdma(tmp_path, monkeypatch):
    f = tmp_path / "results.json"
    monkeypatch.setattr(bench, "RDMA_RESULTS", f)
    assert bench.rdma_table() is None
    f.write_text(json.dumps({"date": "2026-11-21T07:26:08+0000", "comparison": [
        {"service": "rc", "op": "send", "fabmeter_p50_ns": 33000, "perftest_typical_us": 30.0,
         "perftest_tool": "ib_send_lat"}]}))
    date, rows = bench.rdma_table()
    assert date.startswith("2026-11-21")
    assert rows == [["verbs rc send", "ib_send_lat", 33000, 30000.0, "1.10x"]]


def test_fabmeter_side_records_the_engines_params(tmp_path, engine, monkeypatch):
    """A bench row's fabmeter run: typed options in, run.json's config is the engine's params."""
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))
    b = bench.Bench(tmp_path, None, str(engine))
    measure = b.fabmeter("lat", {"transport": "tcp", "poll": "event", "size": 64, "iters": 200},
                         lambda p: p["latency_ns"]["p50"])
    assert measure() > 0
    [run_json] = list((tmp_path / "runs").glob("*/run.json"))
    assert run_json.parent.name == "001-lat-tcp-event"
    config = json.loads(run_json.read_text())["config"]
    assert "options" not in config
    params = config["params"]
    assert (params["transport"], params["poll"], params["size"], params["iters"]) == ("tcp", "event", 64, 200)
