"""What the report's summary figure shows: per experiment the few numbers a reader compares first.

latency: a row per transport/mode and size, p50, p99 and max, one panel per
latency kind (RTT/2 and measured one-way are never on one axis);
bandwidth: Gbit/s and msg/s per size; load: p99 against offered rate;
stream: missed steps and median latency against rate.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional

from fabmeter import analysis
from fabmeter.report.files import number, obj
from fabmeter.report.model import Entry, LoadSweep, load_sweeps, representative, stat


@dataclass
class LatencyRow:
    name: str        # "tcp busy, 32 B"
    label: str       # the colour's key
    p50: float
    p99: Optional[float]
    max: Optional[float]
    p50s: list[float] = field(default_factory=list)   # every run's p50, lowest first: repeats (--repeat, rounds)


@dataclass
class Summary:
    latency: dict[str, list[LatencyRow]] = field(default_factory=dict)   # latency kind -> rows, fastest first
    # label -> size -> (Gbit/s, msg/s)
    bandwidth: dict[str, dict[int, tuple[float, float]]] = field(default_factory=dict)
    load: list[LoadSweep] = field(default_factory=list)
    stream: dict[str, list[tuple[float, float, Optional[float]]]] = field(default_factory=dict)  # (rate, p50, missed %)

    def __bool__(self) -> bool:
        return bool(self.latency or self.bandwidth or self.load or self.stream)


def summarize(entries: list[Entry]) -> Summary:
    """The summary of every point: the peer tools' latency and bandwidth rows beside fabmeter's (their label
    names the tool); load and stream are fabmeter's alone."""
    own = [e for e in entries if not e.run.peer]
    return Summary(_latency(entries), _bandwidth(entries), [s for s in load_sweeps(own) if len(s.points) >= 2],
                   _stream(own))


def _latency(entries: list[Entry]) -> dict[str, list[LatencyRow]]:
    """Each lat and oneway run's representative point; runs of one label and size (repeats, a bench's rounds)
    give one row: the run with their median p50, and every run's p50."""
    runs: dict[int, list[Entry]] = {}
    for e in entries:
        if e.experiment in ("lat", "oneway") and stat(e.point, "latency_ns", "p50") is not None:
            runs.setdefault(id(e.run), []).append(e)
    by_key: dict[tuple[str, str, str], list[Entry]] = {}
    for run_entries in runs.values():
        e = representative(run_entries)
        by_key.setdefault((e.latency_name, e.label, e.where()), []).append(e)
    out: dict[str, list[LatencyRow]] = {}
    for (kind, label, where), es in by_key.items():
        es.sort(key=lambda e: stat(e.point, "latency_ns", "p50"))
        p = es[len(es) // 2].point
        runs = f" ({len(es)} runs)" if len(es) > 1 else ""
        out.setdefault(kind, []).append(LatencyRow(f"{label}, {where}{runs}", label, stat(p, "latency_ns", "p50"),
                                                   stat(p, "latency_ns", "p99"), stat(p, "latency_ns", "max"),
                                                   [stat(e.point, "latency_ns", "p50") for e in es]))
    for rows in out.values():
        rows.sort(key=lambda r: r.p50)
    return dict(sorted(out.items()))


def _bandwidth(entries: list[Entry]) -> dict[str, dict[int, tuple[float, float]]]:
    """Per label and size, the median over runs of Gbit/s and msg/s."""
    seen: dict[str, dict[int, list[tuple[float, float]]]] = {}
    for e in entries:
        p = e.point
        if e.experiment == "bw" and p.get("gbps") is not None and p.get("size"):
            seen.setdefault(e.label, {}).setdefault(int(p["size"]), []).append((p["gbps"], p.get("msg_rate") or 0.0))
    return {label: {size: (statistics.median(g for g, _ in v), statistics.median(m for _, m in v))
                    for size, v in sorted(by_size.items())} for label, by_size in sorted(seen.items())}


def _stream(entries: list[Entry]) -> dict[str, list[tuple[float, float, Optional[float]]]]:
    """A line per label and values per sample: (rate, p50 one-way latency, missed %) by rate."""
    lines: dict[str, dict[float, tuple]] = {}
    for e in entries:
        p = e.point
        p50 = stat(p, "latency_ns", "p50")
        if e.experiment == "stream" and p.get("rate_hz") and p50 is not None:
            name = f"{e.label}, {analysis.fmt_num(p.get('values'), 0)} values"
            lines.setdefault(name, {})[p["rate_hz"]] = (p["rate_hz"], p50, p.get("missed_pct"))
    return {name: [pts[r] for r in sorted(pts)] for name, pts in sorted(lines.items()) if len(pts) >= 2}


@dataclass
class BenchRow:
    name: str
    ratio: Optional[float]       # fabmeter / the other side; None: not measured
    target: Optional[float]      # the ratio the row must stay under (or over, `higher`); None: a floor
    higher: bool
    met: Optional[bool]
    skipped: str


def bench_rows(doc: dict) -> list[BenchRow]:
    """bench.json's rows: the ratio of fabmeter's figure to its peer's or floor's, and its target ("<= 1.10x")."""
    rows = []
    for r in doc.get("rows") or []:
        r = obj(r)
        goal = str(r.get("target") or "-").split()
        target = number(_float(goal[-1].rstrip("x"))) if len(goal) == 2 else None
        met = r.get("met") if isinstance(r.get("met"), bool) else None
        rows.append(BenchRow(str(r.get("row", "?")), number(r.get("ratio")), target, goal[:1] == [">="], met,
                             str(r.get("skipped") or "")))
    return rows


def _float(word: str) -> Optional[float]:
    try:
        return float(word)
    except ValueError:
        return None
