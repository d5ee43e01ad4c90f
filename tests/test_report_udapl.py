"""The report's uDAPL section: data rate at a receiver against message size, slotted bw meshes beside chaotic and
scheduled ones, assembled across a folder's mesh.json files (a suite's mesh points)."""

from __future__ import annotations

import json

import pytest

from fabmeter.mesh import output, patterns, slotted
from fabmeter.report import udapl

N = 4


def _pair(src: int, dst: int, gbps: float, sl=None) -> dict:
    return {"type": "pair", "src": src, "dst": dst, "status": "ok", "message": "", "gbps": gbps, "slotted": sl}


def _doc(schedule: str, size: int, gbps: float, options: dict = {}) -> dict:
    """A 4-host bw mesh.json as mesh --out writes it (output.record): every pair at `gbps`; slotted, its plan's
    arrivals (every message of 10)."""
    hosts = [f"10.0.0.{i + 1}" for i in range(N)]
    summary = {"type": "mesh", "experiment": "bw", "tool": None, "transport": "tcp", "pattern": "all-to-all",
               "schedule": schedule, "hosts": hosts, "failed": 0, "interrupted": 0}
    params = {"transport": "tcp", "size": size, **options}
    pairs = []
    if schedule == "slotted":
        the = slotted.plan(N, "bw", params, 1000)
        steps = {"first": 0, "late_ns": [0] * 10, "latency_ns": [100] * 10}
        pairs = [_pair(s, d, 0, slotted.pair_slots(the, s, d, steps)) for s, d in patterns.pairs("all-to-all", N)]
        for p in pairs:
            p["gbps"] = p["slotted"]["gbps"]
        summary["slotted"] = slotted.receivers(the, pairs)
    else:
        pairs = [_pair(s, d, gbps) for s, d in patterns.pairs("all-to-all", N)]
    return output.record(summary, pairs, "t0", "t1", ["fabmeter", "mesh"], params, {})


def test_rates_per_receiver_by_schedule():
    """Slotted: the plan's receiver rates (3 senders' arrivals); chaotic: a receiver's pairs summed; scheduled
    rounds: their mean."""
    slot = _doc("slotted", 1024, 0)
    per_receiver = 3 * 1024 * 8 / slot["mesh"]["slotted"]["period_ns"]
    assert udapl.receiver_gbps(slot) == pytest.approx(per_receiver)
    assert udapl.receiver_gbps(_doc("chaotic", 1024, 2.0)) == pytest.approx(6.0)
    assert udapl.receiver_gbps(_doc("scheduled", 1024, 2.0)) == pytest.approx(2.0)
    lines = udapl.rates([("a", slot), ("b", _doc("chaotic", 1024, 2.0, {"rq_depth": 11})),
                         ("c", _doc("chaotic", 4096, 3.0, {"rq_depth": 11})), ("d", _doc("slotted", 4096, 0))])
    assert sorted(lines) == ["chaotic tcp all-to-all rq 11", "slotted tcp all-to-all"]
    assert lines["chaotic tcp all-to-all rq 11"] == {1024: pytest.approx(6.0), 4096: pytest.approx(9.0)}
    assert sorted(lines["slotted tcp all-to-all"]) == [1024, 4096]


def test_report_assembles_the_table_across_mesh_points(fm, tmp_path):
    """Four mesh.json files in a suite's folders: one table, sizes in rows, slotted and chaotic in columns, Mbit/s,
    and its figure."""
    for i, (schedule, size, gbps) in enumerate((("slotted", 1024, 0), ("slotted", 8192, 0), ("chaotic", 1024, 2.0),
                                                ("chaotic", 8192, 4.0))):
        (tmp_path / f"p{i}").mkdir()
        (tmp_path / f"p{i}" / output.MESH_FILE).write_text(json.dumps(_doc(schedule, size, gbps)))
    r = fm.run("report", str(tmp_path), "--output", str(tmp_path / "report.html"))
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "report.html").read_text()
    assert "Data rate against buffer size: scheduled and chaotic transfers" in html
    assert "<th>slotted tcp all-to-all</th>" in html and "<th>chaotic tcp all-to-all</th>" in html
    assert "<td>6,000.0</td>" in html and "<td>12,000.0</td>" in html       # chaotic: 3 pairs x 2 and x 4 Gbit/s
    assert 'alt="data rate against buffer size"' in html
