"""The report's data: every run.json and peers.json below a folder, as entries (one per point)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from fabmeter import analysis

# Options that tell runs of one transport apart in labels ("verbs busy uc write").
MODE_KEYS = ("service", "op", "inline", "signal_every", "provider", "ep", "bidir", "timer", "rq_depth", "sq_depth")
EXPERIMENT_ORDER = {"lat": 0, "oneway": 1, "bw": 2, "stream": 3, "load": 4}


@dataclass
class Run:
    """One run.json (or one peers.json) below RESULTS_DIR."""
    rel: str                  # folder relative to RESULTS_DIR, for display
    folder: Path
    doc: dict
    peer: bool = False

    @property
    def params(self) -> dict:
        """The engine's typed params of the run ({} for peers and runs that never started)."""
        params = (self.doc.get("config") or {}).get("params")
        return params if isinstance(params, dict) else {}

    @property
    def status(self) -> str:
        return str(self.doc.get("status", "ok" if self.peer else "?"))


@dataclass
class Entry:
    """One measured point of one run."""
    run: Run
    point: dict
    label: str = ""                        # transport and mode, e.g. "tcp event", "verbs busy rc inline 188"
    _samples: Optional[np.ndarray] = field(default=None, repr=False)

    @property
    def experiment(self) -> str:
        return str(self.point.get("experiment") or (self.run.doc.get("config") or {}).get("experiment") or "?")

    @property
    def rtt_half(self) -> bool:
        kind = self.point.get("latency_kind")
        return kind == "rtt/2" or (kind is None and self.experiment == "lat")

    @property
    def latency_name(self) -> str:
        return latency_name(self.point, self.experiment)

    def samples(self) -> Optional[np.ndarray]:
        """One-way latency samples in ns (RTT/2 for ping-pong runs), or None."""
        if self._samples is None:
            if "latency_ns" in (self.point.get("samples") or {}):
                self._samples = self.raw_samples("latency_ns")
            elif (rtt := self.raw_samples("rtt_ns")) is not None:
                self._samples = rtt / 2.0
        return self._samples

    def raw_samples(self, key: str) -> Optional[np.ndarray]:
        """The non-empty raw samples the point names under `key` (e.g. a
        oneway stage of analysis.ONEWAY_STAGES), in ns, or None."""
        name = (self.point.get("samples") or {}).get(key)
        try:
            a = np.load(self.run.folder / name) if name else None
        except (OSError, ValueError):
            return None
        return a if a is not None and a.size else None

    @property
    def inline(self) -> int:
        """The bytes sent inline (--inline), 0 when the message is not."""
        limit = int(self.run.params.get("inline") or 0)
        return limit if 0 < int(self.point.get("size") or 0) <= limit else 0

    def where(self) -> str:
        """The point's size, rate and values for a stream, offered rate for load."""
        p = self.point
        if p.get("offered_rps") is not None:
            if p.get("phase") == "capacity":
                return "capacity (closed loop)"
            return f"{analysis.fmt_num(p['offered_rps'], 0)} req/s offered" + (f" ({p['load']:.0%})" if p.get("load")
                                                                               else "")
        if p.get("rate_hz") is not None:
            return (f"{analysis.fmt_num(p['rate_hz'])} Hz x {p.get('values')} values "
                    f"({analysis.fmt_size(p.get('size'))})")
        return analysis.fmt_size(p.get("size"))


def latency_name(point: dict, experiment: str) -> str:
    kind = point.get("latency_kind") or ("rtt/2" if experiment == "lat" else "one-way")
    if kind == "rtt/2":
        return "one-way latency = RTT/2"
    if kind.startswith("rtt"):   # load: "rtt from the intended send time"
        return "RTT" + kind[len("rtt"):]
    return "one-way latency" + (f" {kind[len('one-way'):].strip()}" if kind.startswith("one-way ") else "")


def load(root: Path) -> tuple[list[Run], list[str]]:
    """Every run.json and peers.json below root (sorted), and what could not be read."""
    runs, problems = [], []
    for path in sorted(list(root.rglob("run.json")) + list(root.rglob("peers.json"))):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            problems.append(f"{path.relative_to(root)}: {e}")
            continue
        peer = path.name == "peers.json"
        if peer and isinstance(doc, list):
            doc = {"points": doc}
        if not isinstance(doc, dict):
            problems.append(f"{path.relative_to(root)}: not a JSON object")
            continue
        rel = str(path.parent.relative_to(root)) or "."
        runs.append(Run(rel + ("/peers.json" if peer else ""), path.parent, doc, peer))
    return runs, problems


def load_meshes(root: Path) -> tuple[list[tuple[str, dict]], list[str]]:
    """Every mesh.json below root (`fabmeter mesh --out`), as (folder relative to root, document), sorted, and
    what could not be read."""
    meshes, problems = [], []
    for path in sorted(root.rglob("mesh.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            problems.append(f"{path.relative_to(root)}: {e}")
            continue
        if not (isinstance(doc, dict) and isinstance(doc.get("mesh"), dict) and isinstance(doc.get("matrix"), dict)):
            problems.append(f"{path.relative_to(root)}: not a mesh record")
            continue
        meshes.append((str(path.parent.relative_to(root)) or ".", doc))
    return meshes, problems


def mode_words(params: dict, keys: list[str]) -> list[str]:
    """A run's values of `keys`, as label words: rc, write, inline 188, sig 1, bidir, rq 24."""
    words = []
    for key in keys:
        value = params.get(key)
        if value is None or value is False or value == "":
            continue
        if value is True:
            words.append(key)
        elif key == "inline":
            words.append(f"inline {value}")
        elif key == "signal_every":
            words.append(f"sig {value}")
        elif key in ("rq_depth", "sq_depth"):   # the pools of the RAMCloud study: "rq 24 sq 8"
            words.append(f"{key[:2]} {value}")
        else:
            words.append(str(value))
    return words


def varying_mode_keys(runs: list[Run]) -> dict[str, list[str]]:
    """Per transport, the MODE_KEYS whose value differs between its runs here:
    what a label needs to tell them apart (params hold every option, most at
    their defaults, so a key that never varies says nothing)."""
    seen: dict[str, dict[str, set]] = {}
    for r in runs:
        if r.peer or not r.params:
            continue
        by_key = seen.setdefault(str(r.params.get("transport")), {})
        for key in MODE_KEYS:
            by_key.setdefault(key, set()).add(json.dumps(r.params.get(key)))
    return {t: [k for k in MODE_KEYS if len(values.get(k, ())) > 1] for t, values in seen.items()}


def entries_of(runs: list[Run]) -> list[Entry]:
    varying = varying_mode_keys(runs)
    out = []
    for r in runs:
        params = r.params
        extras = mode_words(params, varying.get(str(params.get("transport")), []))
        for p in r.doc.get("points") or []:
            if not isinstance(p, dict):
                continue
            if r.peer:
                label = f"{p.get('tool', 'peer')} {p.get('transport', '')}".strip()
            else:
                label = " ".join([str(p.get("transport", params.get("transport", "?"))),
                                  str(p.get("poll", params.get("poll", "")))] + extras).strip()
            out.append(Entry(r, p, label))
    return out


def inline_pair_key(e: Entry) -> tuple:
    """Everything that sets a point apart but its inline option: points equal
    in it are drawn side by side, inline off and on (the thesis' figure)."""
    words = mode_words(e.run.params, [k for k in MODE_KEYS if k != "inline"])
    return str(e.point.get("transport")), str(e.point.get("poll")), int(e.point.get("size") or 0), tuple(words)


def representative(entries: list[Entry]) -> Entry:
    """The point of a multi-point run that stands for it: 32 B if measured,
    for a stream the highest rate with the fewest values, else the first."""
    streams = [e for e in entries if e.point.get("rate_hz") is not None]
    if streams:
        return max(streams, key=lambda e: (e.point["rate_hz"], -(e.point.get("values") or 0)))
    for e in entries:
        if e.point.get("size") == 32:
            return e
    return entries[0]


@dataclass
class LoadSweep:
    """One load run's open-loop points, by offered rate."""
    label: str                 # transport, mode and workload: "tcp busy w2"
    workload: Optional[str]    # None: fixed sizes
    points: list[dict]


def load_sweeps(entries: list[Entry]) -> list[LoadSweep]:
    """Each load run's open-loop points by offered rate (a --load sweep's capacity point left out); runs that
    would share a label get their folder added."""
    runs: dict[int, tuple[Run, LoadSweep]] = {}
    for e in entries:
        p = e.point
        if e.run.peer or e.experiment != "load" or p.get("phase") != "open loop" or not p.get("offered_rps"):
            continue
        if id(e.run) not in runs:
            workload = e.run.params.get("workload") or None
            runs[id(e.run)] = (e.run, LoadSweep(e.label + (f" {workload}" if workload else ""), workload, []))
        runs[id(e.run)][1].points.append(p)
    labels = [sweep.label for _, sweep in runs.values()]
    for run, sweep in runs.values():
        sweep.points.sort(key=lambda p: p["offered_rps"])
        if labels.count(sweep.label) > 1:
            sweep.label += f" ({run.rel})"
    return [sweep for _, sweep in runs.values()]


def stat(point: dict, block: str, key: str) -> Optional[float]:
    value = (point.get(block) or {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def percentiles(entry: Entry) -> Optional[tuple[float, float, float]]:
    """p10, p50, p90 of the one-way latency, from the raw samples (summary if none)."""
    samples = entry.samples()
    if samples is not None:
        p10, p50, p90 = np.percentile(samples, [10, 50, 90])
        return float(p10), float(p50), float(p90)
    p50, p90 = stat(entry.point, "latency_ns", "p50"), stat(entry.point, "latency_ns", "p90")
    return (p50, p50, p90) if p50 is not None and p90 is not None else None


def throughput_over_time(series, size) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """One direction of a bw point's `throughput_series` ({bin_ns, msgs}) as (bin start ms, Gbit/s): the full bins
    only (the last one ends with the run, part-way through its width); None if there is nothing to draw."""
    if not isinstance(series, dict) or not isinstance(size, (int, float)):
        return None
    bin_ns, msgs = series.get("bin_ns"), series.get("msgs")
    if not isinstance(bin_ns, (int, float)) or bin_ns <= 0 or not isinstance(msgs, list) or len(msgs) < 3:
        return None
    counts = np.array(msgs[:-1], dtype=float)
    return np.arange(len(counts)) * bin_ns / 1e6, counts * float(size) * 8 / bin_ns
