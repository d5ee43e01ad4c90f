"""`fabmeter compare BASE NEW [NEW...]`: did a change make the fabric faster?

Each folder is searched as `fabmeter report` searches it (every run.json
below it: a run, a suite, the demo, a bench's runs). Points are matched by
what was measured (experiment, transport, poll, the options that set a mode
apart, size, rate), never by file name. Per matched point: each side's
figure, the ratio new / base, its interval and a verdict (stats.py): from
the raw samples when both runs kept them, else "cannot tell". Above the
table, what differs between the two recorded environments, which is often
the answer.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from fabmeter import analysis, path, stats
from fabmeter.errors import EXIT_OK, EXIT_SLO, EXIT_USAGE, FabmeterError
from fabmeter.report import model
from fabmeter.terminal import shown, shown_lines

# Params that say how long or where a run measured, not what: left out of the match.
NOT_WHAT = {"iters", "warmup", "duration", "count", "timeout_ms", "seed", "samples", "cpu", "port"}
MIN_RUNS = 3   # runs of a point a side for a verdict across runs (stats.shift_interval)
# Environment fields that are measurements of their own or change every run.
VOLATILE_ENV = ("timestamp_cost_ns", "tsc_ghz", "started_at", "boot_id", "load_average", "uptime")


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="compare result folders point by point: ratio, interval, verdict",
                       description="Match the points of NEW against BASE (experiment, transport, mode, size, "
                                   "rate) and print each side's median, the ratio new/base, its interval and "
                                   "whether the data can tell them apart (docs/cli.md#compare).",
                       allow_abbrev=False)
    p.add_argument("base", metavar="BASE", help="a results folder (searched recursively for run.json)")
    p.add_argument("new", metavar="NEW", nargs="+", help="one or more results folders to compare with BASE")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--fail-worse", metavar="PCT", type=_percent,
                   help="exit 4 when a point is worse than BASE by more than PCT, by its interval "
                        "(e.g. 5%%: the interval lies wholly beyond 1.05x)")


def _percent(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise ValueError(f"expected a percentage such as 5%, got {text!r}") from None
    if not 0 <= value < 1000:
        raise ValueError(f"expected a percentage from 0 to 1000, got {text!r}")
    return value / 100


_percent.__name__ = "percentage"   # argparse's error names the type


@dataclass
class Item:
    """One measured figure of a folder, as compare matches and judges it."""
    key: tuple                                      # equal keys: the same measurement in two folders
    label: str
    figure: str                                     # what the value is, with its unit
    value: Optional[float]
    higher_is_better: bool
    samples: Callable[[], Optional[np.ndarray]] = lambda: None   # samples of the figure's quantity, if kept


def point_key(entry: model.Entry) -> tuple:
    """What a run's point measured."""
    params = {k: v for k, v in entry.run.params.items() if k not in NOT_WHAT}
    p = entry.point
    where = tuple((k, p.get(k)) for k in ("size", "rate_hz", "values", "offered_rps", "phase", "what",
                                          "registered_bytes")
                  if p.get(k) is not None)
    return (entry.experiment, str(p.get("transport", params.get("transport"))),
            str(p.get("poll", params.get("poll"))), path.key(entry.path),
            json.dumps(params, sort_keys=True, default=str), where)


def item_of_point(entry: model.Entry) -> Item:
    p = entry.point
    label = f"{entry.experiment} {entry.mode} {entry.where()} {path.label(entry.path)}"
    if entry.experiment == "bw" and isinstance(p.get("msg_rate"), (int, float)):
        return Item(point_key(entry), label, "msg/s", float(p["msg_rate"]), True, lambda: bins_of(p))
    if entry.experiment == "setup":   # a connect's or a registration's time, on base pages
        key = "connect_ns" if p.get("what") == "connect" else "register_ns"
        value = model.stat(p, key, "p50")
        return Item(point_key(entry), label, f"{key[:-3]} p50 ns", value, False, lambda: entry.raw_samples(key))
    value = (p.get("latency_ns") if isinstance(p.get("latency_ns"), dict) else {}).get("p50")
    return Item(point_key(entry), label, f"p50 {'RTT/2' if entry.rtt_half else 'one-way'} ns",
                float(value) if isinstance(value, (int, float)) else None, False, entry.samples)


def bins_of(point: dict) -> Optional[np.ndarray]:
    """A bw point's messages per bin of its throughput series (client to server), its first and last bins
    left out (a bin the measured window cuts is partial): the samples of its message rate."""
    series = ((point.get("throughput_series") or {}).get("c2s") or {}).get("msgs")
    if not isinstance(series, list) or len(series) < 3 or not all(isinstance(x, (int, float)) for x in series):
        return None
    return np.asarray(series[1:-1], dtype=np.float64)


def items_of_mesh(doc: dict) -> list[Item]:
    """A mesh.json's pairs, each matched by its hosts (not ranks, which a hostfile may reorder; ranks where
    hosts repeat, as on one machine) and what the mesh measured."""
    summary = doc["mesh"]
    hosts = [str(h) for h in summary.get("hosts") or []]
    if len(set(hosts)) < len(hosts):
        hosts = [f"{h}#{rank}" for rank, h in enumerate(hosts)]
    params = json.dumps({k: v for k, v in (doc.get("params") or {}).items() if k not in NOT_WHAT},
                        sort_keys=True, default=str)
    experiment = str(summary.get("experiment"))
    out = []
    for pair in doc.get("pairs") or []:
        if not isinstance(pair, dict) or pair.get("status") != "ok":
            continue
        src, dst = (hosts[r] if isinstance(r, int) and 0 <= r < len(hosts) else str(r)
                    for r in (pair.get("src"), pair.get("dst")))
        key = ("mesh", experiment, str(summary.get("transport")), str(summary.get("pattern")), src, dst,
               pair.get("size"), params)
        label = f"mesh {experiment} {summary.get('transport')} {src} -> {dst}"
        if experiment == "bw":   # its throughput series is its samples, as a bw run's
            value, figure, higher, samples = pair.get("gbps"), "Gbit/s", True, lambda p=pair: bins_of(p)
        else:
            value = (pair.get("latency_ns") or {}).get("p50")
            figure, higher, samples = f"p50 {pair.get('latency_kind') or 'one-way'} ns", False, lambda: None
        out.append(Item(key, label, figure, float(value) if isinstance(value, (int, float)) else None, higher,
                        samples))
    return out


def judge(base: list[Item], new: list[Item]) -> stats.Comparison:
    """One point's runs on each side: by the runs' figures when each side repeated it (MIN_RUNS), else by
    their samples (latency: the raw samples; bw: messages per bin), else the two figures with no verdict."""
    higher = base[0].higher_is_better
    figures = [[i.value for i in side if i.value is not None] for side in (base, new)]
    if min(len(f) for f in figures) >= MIN_RUNS:
        return stats.compare_runs(figures[0], figures[1], higher)
    samples = [[s for s in (i.samples() for i in side) if s is not None] for side in (base, new)]
    if all(samples):
        return stats.compare_samples(np.concatenate(samples[0]), np.concatenate(samples[1]), higher)
    return stats.compare_values(stats.median(figures[0]), stats.median(figures[1]))


def flat(doc, prefix: str = "") -> dict[str, str]:
    """A nested environment as dotted keys -> short text."""
    out: dict[str, str] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.update(flat(v, f"{prefix}{k}."))
    else:
        text = json.dumps(doc, default=str) if not isinstance(doc, str) else doc
        out[prefix.rstrip(".")] = text if len(text) <= 80 else text[:77] + "..."
    return out


def env_diff(base: list[dict], new: list[dict]) -> list[tuple[str, str, str]]:
    """(field, base, new) for every field of the first recorded environment of each side that differs."""
    b, n = flat(base[0]) if base else {}, flat(new[0]) if new else {}
    keys = sorted(set(b) | set(n))
    return [(k, b.get(k, "-"), n.get(k, "-")) for k in keys
            if b.get(k) != n.get(k) and not any(part in VOLATILE_ENV for part in k.split("."))]


def read_folder(path: Path) -> tuple[list[dict], list[Item]]:
    """A folder's recorded environments and its items: every point of every run.json below it and every
    pair of every mesh.json."""
    if not path.is_dir():
        raise FabmeterError(f"compare: {path}: not a results folder", EXIT_USAGE)
    runs, problems = model.read_runs(path)
    meshes, mesh_problems = model.read_meshes(path)
    for problem in problems + mesh_problems:
        sys.stderr.write(shown_lines(f"fabmeter: warning: compare: {path}: {problem}") + "\n")
    runs = [r for r in runs if not r.peer]
    items = [item_of_point(e) for e in model.entries_of(runs) if not e.point.get("partial")]
    for _, doc in meshes:
        items += items_of_mesh(doc)
    if not items:
        raise FabmeterError(f"compare: {path}: no measured point (no run.json or mesh.json below it)", EXIT_USAGE)
    envs = [d["environment"] for d in [r.doc for r in runs] + [doc for _, doc in meshes]
            if isinstance(d.get("environment"), dict)]
    return envs, items


def compare(base: Path, new: Path, fail_worse: Optional[float]) -> dict:
    base_envs, base_items = read_folder(base)
    new_envs, new_items = read_folder(new)
    groups: dict[tuple, tuple[list, list]] = {}
    for side, items in enumerate((base_items, new_items)):
        for i in items:
            groups.setdefault(i.key, ([], []))[side].append(i)
    rows, failing = [], 0
    for b, n in groups.values():
        if not (b and n):
            continue
        c = judge(b, n)
        higher = b[0].higher_is_better
        limit = None if fail_worse is None else 1 / (1 + fail_worse) if higher else 1 + fail_worse
        fails = limit is not None and stats.verdict(c.interval, higher, limit) == stats.WORSE
        failing += fails
        added = None if c.interval is None or c.base is None else [(c.interval[0] - 1) * c.base,
                                                                   (c.interval[1] - 1) * c.base]
        rows.append({"point": n[0].label, "figure": b[0].figure, "runs": [len(b), len(n)], **c.json(),
                     "difference_interval": added, "fails": fails})
    return {"base": str(base), "new": str(new), "environment_diff": [
                {"field": f, "base": bv, "new": nv} for f, bv, nv in env_diff(base_envs[:1], new_envs[:1])],
            "points": rows, "unmatched_base": [b[0].label for b, n in groups.values() if not n],
            "unmatched_new": [n[0].label for b, n in groups.values() if not b],
            "fail_worse": fail_worse, "failing": failing}


SYMBOL = {stats.BETTER: "better", stats.WORSE: "WORSE", stats.SAME: "~", stats.UNKNOWN: "cannot tell"}
METHOD = {"runs": "by the runs", "samples": "one run a side", "none": "no interval"}


def print_comparison(doc: dict) -> None:
    print(f"base: {shown(doc['base'])}\nnew:  {shown(doc['new'])}")
    if doc["environment_diff"]:
        print("environment differences:")
        print(analysis.format_table(["field", "base", "new"],
                                    [[d["field"], d["base"], d["new"]] for d in doc["environment_diff"]], left=3))
    else:
        print("environment: no recorded difference")
    table = []
    for r in doc["points"]:
        interval = "-" if r["interval"] is None else f"{r['interval'][0]:.3f}..{r['interval'][1]:.3f}"
        table.append([r["point"], r["figure"], r["base"], r["new"],
                      "-" if r["ratio"] is None else f"{r['ratio']:.3f}", interval,
                      SYMBOL[r["verdict"]] + (" (fails --fail-worse)" if r["fails"] else ""),
                      f"{METHOD[r['method']]} ({r['runs'][0]}+{r['runs'][1]})"])
    print(analysis.format_table(["point", "figure", "base", "new", "new/base", f"{stats.CONFIDENCE:.0%} interval",
                                 "verdict", "evidence"], table, left=2))
    print("new/base: ratio of the medians; ~: the data cannot tell the two apart. By the runs: three or more runs "
          "of the point a side; one run a side: a bootstrap of its raw samples, which knows the noise within a "
          "run but not how far a second run would land (repeat the runs for a verdict that holds across runs)")
    for side in ("base", "new"):
        for name in doc[f"unmatched_{side}"]:
            print(f"only in {side}: {shown(name)}")


def main(ns) -> int:
    docs = [compare(Path(ns.base), Path(new), ns.fail_worse) for new in ns.new]
    if ns.json:
        print(json.dumps(docs[0] if len(docs) == 1 else docs, indent=1))
    else:
        for i, doc in enumerate(docs):
            if i:
                print()
            print_comparison(doc)
    failing = sum(d["failing"] for d in docs)
    if failing:
        sys.stderr.write(f"fabmeter: compare: {failing} point(s) worse than base by more than "
                         f"{ns.fail_worse:.0%}\n")
        return EXIT_SLO
    return EXIT_OK
