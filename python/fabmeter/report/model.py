"""The report's data: every run.json and peers.json below a folder, as entries (one per point)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from fabmeter import analysis

# Options that tell runs of one transport apart in labels ("verbs busy uc write").
MODE_KEYS = ("service", "op", "inline", "signal_every", "provider", "ep", "bidir", "timer")
EXPERIMENT_ORDER = {"lat": 0, "oneway": 1, "bw": 2, "stream": 3}


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
            names = self.point.get("samples") or {}
            try:
                if "latency_ns" in names:
                    self._samples = np.load(self.run.folder / names["latency_ns"])
                elif "rtt_ns" in names:
                    self._samples = np.load(self.run.folder / names["rtt_ns"]) / 2.0
            except (OSError, ValueError):
                return None
        if self._samples is None or self._samples.size == 0:
            return None
        return self._samples

    def where(self) -> str:
        """The point's size, or rate and values for a stream."""
        p = self.point
        if p.get("rate_hz") is not None:
            return (f"{analysis.fmt_num(p['rate_hz'])} Hz x {p.get('values')} values "
                    f"({analysis.fmt_size(p.get('size'))})")
        return analysis.fmt_size(p.get("size"))


def latency_name(point: dict, experiment: str) -> str:
    kind = point.get("latency_kind") or ("rtt/2" if experiment == "lat" else "one-way")
    if kind == "rtt/2":
        return "one-way latency = RTT/2"
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


def mode_words(params: dict, keys: list[str]) -> list[str]:
    """A run's values of `keys`, as label words: rc, write, inline 188, sig 1, bidir."""
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
