"""The MPI layer beside the meshes: each `fabmeter mesh --tool fabmeter-mpibench` run's tests (its mesh.json's
mesh.mpi, mesh/tool_mpi.py), one table row a test: its ranks and hosts, and its figure as the program labels it."""

from __future__ import annotations

from fabmeter import analysis
from fabmeter.report.figures import fmt_ns
from fabmeter.report.files import number, obj
from fabmeter.report.markup import Html, el

HEAD = ("mesh", "test", "ranks", "hosts", "size", "iterations", "figure", "p50", "mean / Gbit/s")


def _row(rel: str, test: str, t: dict) -> list:
    if t.get("status") != "ok":
        return [rel, test, "", "", "", "", "failed", str(t.get("message", "")), ""]
    latency = obj(t.get("latency_ns"))
    hosts = t.get("hosts") if isinstance(t.get("hosts"), list) else []
    figure, p50, other = ((str(t.get("latency_kind")), fmt_ns(latency.get("p50")), fmt_ns(latency.get("mean"))) if latency
                          else ("bandwidth", "", analysis.fmt_num(number(t.get("gbps")) or 0.0, 2)))
    return [rel, test, t.get("ranks", ""), ", ".join(map(str, hosts)), t.get("size", ""), t.get("iterations", ""),
            figure, p50, other]


def section(meshes: list[tuple[str, dict]]) -> list[Html]:
    rows = [_row(rel, str(test), obj(t)) for rel, doc in meshes
            for test, t in obj(obj(obj(doc.get("mesh")).get("mpi")).get("tests")).items()]
    if not rows:
        return []
    return [el("table", el("tr", [el("th", h) for h in HEAD]), [el("tr", [el("td", c) for c in r]) for r in rows],
               class_="mesh")]


def entry(drawn, meshes: list[tuple[str, dict]]) -> tuple:
    """The report's section (html.py's list of top sections)."""
    return ("mpi", "MPI layer over a mesh's hosts", drawn(section, meshes),
            "fabmeter mesh --tool fabmeter-mpibench: the MPI program under mpirun, a rank on each host: lat, the "
            "ping-pong of ranks 0 and 1 (p50 and mean of RTT/2); allreduce over every rank (p50 and mean of each "
            "call's time at rank 0); bw, rank 0 to rank 1.")
