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
from pathlib import Path
from typing import Optional

from fabmeter import analysis, stats
from fabmeter.errors import EXIT_OK, EXIT_SLO, EXIT_USAGE, FabmeterError
from fabmeter.report import model

import numpy as np

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


def point_key(entry: model.Entry) -> tuple:
    """What a point measured: equal keys are the same measurement in two folders."""
    params = {k: v for k, v in entry.run.params.items() if k not in NOT_WHAT}
    p = entry.point
    where = tuple((k, p.get(k)) for k in ("size", "rate_hz", "values", "offered_rps", "phase", "src", "dst")
                  if p.get(k) is not None)
    server = (entry.run.doc.get("config") or {}).get("server")   # HOST:PORT; the port is new every serve
    host = str(server).rsplit(":", 1)[0] if server else None
    return (entry.experiment, str(p.get("transport", params.get("transport"))),
            str(p.get("poll", params.get("poll"))), host, json.dumps(params, sort_keys=True, default=str), where)


def figure_of(entry: model.Entry) -> tuple[str, Optional[float], bool]:
    """(name, value, higher_is_better) of the point's headline figure."""
    p = entry.point
    if entry.experiment == "bw" and isinstance(p.get("msg_rate"), (int, float)):
        return "msg/s", float(p["msg_rate"]), True
    lat = p.get("latency_ns") if isinstance(p.get("latency_ns"), dict) else {}
    value = lat.get("p50")
    kind = "RTT/2" if entry.rtt_half else "one-way"
    return f"p50 {kind} ns", float(value) if isinstance(value, (int, float)) else None, False


def judge(base: list[model.Entry], new: list[model.Entry]) -> tuple[str, stats.Comparison]:
    """One point's runs on each side: by the runs' figures when each side repeated it (MIN_RUNS), else by
    the raw latency samples, else the two figures with no verdict."""
    name, _, higher = figure_of(base[0])
    figures = [[v for v in (figure_of(e)[1] for e in side) if v is not None] for side in (base, new)]
    if min(len(f) for f in figures) >= MIN_RUNS:
        return name, stats.compare_runs(figures[0], figures[1], higher)
    if not higher:
        samples = [[s for s in (e.samples() for e in side) if s is not None] for side in (base, new)]
        if all(samples):
            return name, stats.compare_samples(np.concatenate(samples[0]), np.concatenate(samples[1]))
    return name, stats.compare_values(stats.median(figures[0]), stats.median(figures[1]))


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


def env_diff(base_runs: list[model.Run], new_runs: list[model.Run]) -> list[tuple[str, str, str]]:
    """(field, base, new) for every recorded environment field whose value differs (first run of each side)."""
    def first_env(runs):
        for r in runs:
            if not r.peer and isinstance(r.doc.get("environment"), dict):
                return flat(r.doc["environment"])
        return {}
    b, n = first_env(base_runs), first_env(new_runs)
    keys = sorted(set(b) | set(n))
    return [(k, b.get(k, "-"), n.get(k, "-")) for k in keys
            if b.get(k) != n.get(k) and not any(part in VOLATILE_ENV for part in k.split("."))]


def load_folder(path: Path) -> tuple[list[model.Run], list[model.Entry]]:
    if not path.is_dir():
        raise FabmeterError(f"compare: {path}: not a results folder", EXIT_USAGE)
    runs, problems = model.load(path)
    for problem in problems:
        sys.stderr.write(f"fabmeter: warning: compare: {path}: {problem}\n")
    runs = [r for r in runs if not r.peer]
    entries = [e for e in model.entries_of(runs) if not e.point.get("partial")]
    if not entries:
        raise FabmeterError(f"compare: {path}: no measured point (no run.json below it)", EXIT_USAGE)
    return runs, entries


def label(entry: model.Entry) -> str:
    server = (entry.run.doc.get("config") or {}).get("server")
    return f"{entry.experiment} {entry.label} {entry.where()}" + (f" to {server.rsplit(':', 1)[0]}" if server else "")


def compare(base: Path, new: Path, fail_worse: Optional[float]) -> dict:
    base_runs, base_entries = load_folder(base)
    new_runs, new_entries = load_folder(new)
    groups: dict[tuple, tuple[list, list]] = {}
    for side, entries in enumerate((base_entries, new_entries)):
        for e in entries:
            groups.setdefault(point_key(e), ([], []))[side].append(e)
    rows, failing = [], 0
    for b, n in groups.values():
        if not (b and n):
            continue
        figure, c = judge(b, n)
        fails = (fail_worse is not None and c.interval is not None and
                 stats.verdict(c.interval, figure == "msg/s", 1 + fail_worse if figure != "msg/s"
                               else 1 / (1 + fail_worse)) == stats.WORSE)
        failing += fails
        added = None if c.interval is None or c.base is None else [(c.interval[0] - 1) * c.base,
                                                                   (c.interval[1] - 1) * c.base]
        rows.append({"point": label(n[0]), "figure": figure, "runs": [len(b), len(n)], **c.json(),
                     "difference_interval": added, "fails": fails})
    return {"base": str(base), "new": str(new), "environment_diff": [
                {"field": f, "base": bv, "new": nv} for f, bv, nv in env_diff(base_runs, new_runs)],
            "points": rows, "unmatched_base": [label(b[0]) for b, n in groups.values() if not n],
            "unmatched_new": [label(n[0]) for b, n in groups.values() if not b],
            "fail_worse": fail_worse, "failing": failing}


SYMBOL = {stats.BETTER: "better", stats.WORSE: "WORSE", stats.SAME: "~", stats.UNKNOWN: "cannot tell"}
METHOD = {"runs": "by the runs", "samples": "one run a side", "none": "no interval"}


def print_comparison(doc: dict) -> None:
    print(f"base: {doc['base']}\nnew:  {doc['new']}")
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
            print(f"only in {side}: {name}")


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
