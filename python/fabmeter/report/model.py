"""The report's data: every run.json and peers.json below a folder, as entries (one per point).

Nothing read is trusted (files.py): a document that is not what fabmeter
writes is a one-line problem, a point's value of the wrong type is dropped
as if absent, and a sample file that cannot be read safely is a note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from fabmeter import analysis, path
from fabmeter.report.files import number, obj, read_json, read_npy, sample_path

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
    notes: list[str] = field(default_factory=list)   # what of the run was not read, for the page

    @property
    def params(self) -> dict:
        """The engine's typed params of the run ({} for peers and runs that never started)."""
        return obj(obj(self.doc.get("config")).get("params"))

    @property
    def status(self) -> str:
        return str(self.doc.get("status") or ("ok" if self.peer else "?"))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


@dataclass
class Entry:
    """One measured point of one run."""
    run: Run
    point: dict
    label: str = ""                        # mode, and the path where the runs shown together took several
    mode: str = ""                         # transport and mode, e.g. "tcp event", "verbs busy rc inline 188"
    path: dict = field(default_factory=lambda: path.record(None))   # where it ran (path.py)
    _samples: Optional[np.ndarray] = field(default=None, repr=False)

    @property
    def experiment(self) -> str:
        return str(self.point.get("experiment") or obj(self.run.doc.get("config")).get("experiment") or "?")

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
        oneway stage of analysis.ONEWAY_STAGES), in ns, or None; the finite
        values only. A file that cannot be read safely is a note of the run."""
        name = (self.point.get("samples") or {}).get(key)
        if name is None:
            return None
        try:
            a = read_npy(sample_path(self.run.folder, name))
        except (OSError, ValueError) as e:
            self.run.note(f"{self.run.rel}: samples {key} {json.dumps(name)} not read: {e}")
            return None
        a = a[np.isfinite(a)]
        return a if a.size else None

    @property
    def inline(self) -> int:
        """The bytes sent inline (--inline), 0 when the message is not."""
        limit = number(self.run.params.get("inline")) or 0
        return int(limit) if 0 < (self.point.get("size") or 0) <= limit else 0

    def where(self) -> str:
        """The point's size, rate and values for a stream, offered rate for load, setup's kind of cost."""
        p = self.point
        if p.get("offered_rps") is not None:
            if p.get("phase") == "capacity":
                return "capacity (closed loop)"
            share = f" ({p['of_capacity']:.0%} of capacity)" if p.get("of_capacity") else ""
            return f"{analysis.fmt_num(p['offered_rps'], 0)} req/s offered" + share
        if p.get("rate_hz") is not None:
            return (f"{analysis.fmt_num(p['rate_hz'])} Hz x {p.get('values')} values "
                    f"({analysis.fmt_size(p.get('size'))})")
        if p.get("what") == "mr":   # setup: the region registered, not a message
            return f"registering {analysis.fmt_size(number(p.get('registered_bytes')))}"
        if p.get("what") == "connect":
            return "connect"
        return analysis.fmt_size(p.get("size"))


def latency_name(point: dict, experiment: str) -> str:
    kind = point.get("latency_kind") or ("rtt/2" if experiment == "lat" else "one-way")
    if kind == "rtt/2":
        return "one-way latency = RTT/2"
    if kind.startswith("rtt"):   # load: "rtt from the intended send time"
        return "RTT" + kind[len("rtt"):]
    return "one-way latency" + (f" {kind[len('one-way'):].strip()}" if kind.startswith("one-way ") else "")


def _documents(root: Path, pattern: str) -> tuple[list[tuple[Path, object]], list[str]]:
    """Every file named `pattern` below root (sorted) as (path, parsed JSON), and the ones that could not be read."""
    docs, problems = [], []
    for path in sorted(root.rglob(pattern)):
        try:
            docs.append((path, read_json(root, path)))
        except ValueError as e:
            problems.append(f"{path.relative_to(root)}: {e}")
    return docs, problems


def read_runs(root: Path) -> tuple[list[Run], list[str]]:
    """Every run.json and peers.json below root (sorted), and what could not be read."""
    runs = []
    found, problems = _documents(root, "run.json")
    peers, more = _documents(root, "peers.json")
    problems += more
    for path, doc in sorted(found + peers, key=lambda d: d[0]):
        peer = path.name == "peers.json"
        if peer and isinstance(doc, list):
            doc = {"points": doc}
        if not isinstance(doc, dict):
            problems.append(f"{path.relative_to(root)}: not a JSON object")
            continue
        rel = str(path.parent.relative_to(root)) or "."
        run = Run(rel + ("/peers.json" if peer else ""), path.parent, doc, peer)
        if not isinstance(doc.get("points", []), list):
            run.note(f"{run.rel}: points is not a list")
        runs.append(run)
    return runs, problems


def read_suites(root: Path) -> tuple[list[dict], list[str]]:
    """Every suite's index.json below root (its name, description and status as text), and what could not be
    read."""
    suites = []
    docs, problems = _documents(root, "index.json")
    for path, doc in docs:
        if not isinstance(doc, dict):
            problems.append(f"{path.relative_to(root)}: not a JSON object")
            continue
        suites.append({k: str(doc.get(k) or "") for k in ("suite", "description", "status")})
    return suites, problems


def read_benches(root: Path) -> tuple[list[dict], list[str]]:
    """Every bench.json below root (`fabmeter bench`), and what could not be read."""
    docs, problems = _documents(root, "bench.json")
    benches = []
    for path, doc in docs:
        if isinstance(doc, dict) and isinstance(doc.get("rows", []), list):
            benches.append(doc)
        else:
            problems.append(f"{path.relative_to(root)}: not a bench record")
    return benches, problems


def read_meshes(root: Path) -> tuple[list[tuple[str, dict]], list[str]]:
    """Every mesh.json below root (`fabmeter mesh --out`), as (folder relative to root, document), sorted, and
    what could not be read."""
    meshes = []
    docs, problems = _documents(root, "mesh.json")
    for path, doc in docs:
        reason = mesh_problem(doc)
        if reason:
            problems.append(f"{path.relative_to(root)}: {reason}")
            continue
        meshes.append((str(path.parent.relative_to(root)) or ".", doc))
    return meshes, problems


def mesh_problem(doc) -> Optional[str]:
    """Why a mesh.json cannot be drawn (None: it can): the report reads its hosts, its N x N matrices of numbers
    or nulls, and lists of objects for pairs and hosts."""
    if not (isinstance(doc, dict) and isinstance(doc.get("mesh"), dict) and isinstance(doc.get("matrix"), dict)):
        return "not a mesh record"
    hosts = doc["mesh"].get("hosts")
    if not isinstance(hosts, list):
        return "its hosts are not a list"
    keys = ("gbps",) if doc["mesh"].get("experiment") == "bw" else ("latency_p50_ns", "latency_p99_ns")
    for key in keys:
        grid = doc["matrix"].get(key)
        if not (isinstance(grid, list) and len(grid) == len(hosts)
                and all(isinstance(row, list) and len(row) == len(hosts) for row in grid)
                and all(v is None or number(v) is not None for row in grid for v in row)):
            return f"its matrix {key} is not {len(hosts)} x {len(hosts)} numbers"
    for key in ("pairs", "per_host"):
        items = doc.get(key) or []
        if not (isinstance(items, list) and all(isinstance(x, dict) for x in items)):
            return f"its {key} are not a list of objects"
    return None


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


# The point keys the report reads, by the type it reads them as: a value of another type is dropped, as if absent.
NUMBER_KEYS = ("size", "rate_hz", "values", "offered_rps", "of_capacity", "iterations", "warmup", "gbps", "msg_rate",
               "missed_pct", "lost", "achieved_rps", "threshold_us", "above_threshold_pct", "deadline_us",
               "deadline_miss_pct", "jain_index")
OBJECT_KEYS = ("latency_ns", "rtt_ns", "samples", "server", "knee", "throughput_series")
TEXT_KEYS = ("experiment", "transport", "poll", "latency_kind", "phase", "tool", "type", "statistic_note", "reason")


def clean_point(p: dict) -> dict:
    """A point as the report reads it: numbers finite, objects objects, words text, latency blocks numbers only."""
    out = dict(p)
    for key in NUMBER_KEYS:
        if key in out and number(out[key]) is None:
            del out[key]
    for key in OBJECT_KEYS:
        if key in out and not isinstance(out[key], dict):
            del out[key]
    for key in TEXT_KEYS:
        if out.get(key) is not None:
            out[key] = str(out[key])
    for block in ("latency_ns", "rtt_ns"):
        if block in out:
            out[block] = {k: v for k, v in out[block].items() if number(v) is not None}
    if not isinstance(out.get("slowdown"), list):
        out.pop("slowdown", None)
    return out


def entries_of(runs: list[Run]) -> list[Entry]:
    """Every point of `runs`; labelled by transport and mode, and by path where they took several, so that
    points of two paths are never one row, line or colour."""
    varying = varying_mode_keys(runs)
    out = []
    for r in runs:
        params = r.params
        extras = mode_words(params, varying.get(str(params.get("transport")), []))
        points = r.doc.get("points")
        for p in points if isinstance(points, list) else []:
            if not isinstance(p, dict):
                continue
            where = path.of_run({**p, "peer": True} if r.peer else r.doc)
            p = clean_point(p)
            if r.peer:
                mode = f"{p.get('tool') or 'peer'} {p.get('transport') or ''}".strip()
            else:
                mode = " ".join([str(p.get("transport", params.get("transport", "?"))),
                                 str(p.get("poll", params.get("poll", "")))] + extras).strip()
            out.append(Entry(r, p, label=mode, mode=mode, path=where))
    if len(paths(out)) > 1:
        for e in out:
            e.label = f"{e.mode} ({path.label(e.path)})"
    return out


def paths(entries: list[Entry]) -> dict[str, list[Entry]]:
    """The entries by the label of their path, in order of appearance."""
    out: dict[str, list[Entry]] = {}
    for e in entries:
        out.setdefault(path.label(e.path), []).append(e)
    return out


def inline_pair_key(e: Entry) -> tuple:
    """Everything that sets a point apart but its inline option: points equal
    in it are drawn side by side, inline off and on (the thesis' figure)."""
    words = mode_words(e.run.params, [k for k in MODE_KEYS if k != "inline"])
    return (str(e.point.get("transport")), str(e.point.get("poll")), int(e.point.get("size") or 0), tuple(words),
            path.key(e.path))


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
    """Each load run's open-loop points by offered rate (a --of-capacity sweep's capacity point left out); runs that
    would share a label get their folder added."""
    runs: dict[int, tuple[Run, LoadSweep]] = {}
    for e in entries:
        p = e.point
        if e.run.peer or e.experiment != "load" or p.get("phase") != "open loop" or not p.get("offered_rps"):
            continue
        if id(e.run) not in runs:
            workload = str(e.run.params.get("workload") or "") or None
            runs[id(e.run)] = (e.run, LoadSweep(e.label + (f" {workload}" if workload else ""), workload, []))
        runs[id(e.run)][1].points.append(p)
    labels = [sweep.label for _, sweep in runs.values()]
    for run, sweep in runs.values():
        sweep.points.sort(key=lambda p: p["offered_rps"])
        if labels.count(sweep.label) > 1:
            sweep.label += f" ({run.rel})"
    return [sweep for _, sweep in runs.values()]


def load_client_sweeps(entries: list[Entry]) -> list[LoadSweep]:
    """Each load run's closed-loop points (--clients), by client count."""
    runs: dict[int, LoadSweep] = {}
    for e in entries:
        p = e.point
        if e.run.peer or e.experiment != "load" or p.get("phase") != "closed loop" or not number(p.get("clients")):
            continue
        workload = str(e.run.params.get("workload") or "") or None
        runs.setdefault(id(e.run), LoadSweep(e.label + (f" {workload}" if workload else "") + f" ({e.run.rel})",
                                             workload, [])).points.append(p)
    for sweep in runs.values():
        sweep.points.sort(key=lambda p: p["clients"])
    return list(runs.values())


def stat(point: dict, block: str, key: str) -> Optional[float]:
    value = number(obj(point.get(block)).get(key))
    return None if value is None else float(value)


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
