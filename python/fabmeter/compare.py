"""`fabmeter compare BASE NEW [NEW...]`: did a change make the fabric faster?

Each folder is searched as `fabmeter report` searches it (every run.json
below it: a run, a suite, the demo, a bench's runs). Points are matched by
what was measured (experiment, transport, poll, the options that set a mode
apart, size, rate, server host: `point_key`), never by file name; the runs of a point
(`--repeat`'s r1..rN, a suite's repeats, folders side by side) are its runs.
Per matched point: each side's figure, the ratio new / base, its interval
and a verdict (stats.py): by the runs when each side has MIN_RUNS of them;
with fewer, only a shift beyond the run-to-run spread measured for that
kind of point (run_spread.py) gets one, else "cannot tell". Above the table,
what differs between the two recorded environments, which is often the
answer. Every line printed goes through `say`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from fabmeter import analysis, command_options, path, stats
from fabmeter.command_options import CommandOption, Found
from fabmeter.errors import EXIT_OK, EXIT_SLO, EXIT_USAGE, FabmeterError
from fabmeter.terminal import shown_lines
from fabmeter.run_spread import kind_of, spread

if TYPE_CHECKING:       # numpy and the report's reader are imported where compare runs, not by every command
    import numpy as np

    from fabmeter.report import model

# Params that say how long or where a run measured, not what: left out of the match.
NOT_WHAT = {"iters", "warmup", "duration", "count", "timeout_ms", "seed", "samples", "cpu", "port"}
MIN_RUNS = 3   # runs of a point a side for a verdict across runs (stats.shift_interval: 90 % needs 3 + 3)
# Environment fields that are measurements of their own or change every run.
VOLATILE_ENV = ("timestamp_cost_ns", "tsc_ghz", "started_at", "boot_id", "load_average", "uptime")


def _percent(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise ValueError(f"expected a percentage such as 5%, got {text!r}") from None
    if not 0 <= value < 1000:
        raise ValueError(f"expected a percentage from 0 to 1000, got {text!r}")
    return value / 100


_percent.__name__ = "percentage"   # argparse's error names the type

OPTIONS = (
    CommandOption("base", "a results folder (searched recursively for run.json)", metavar="BASE", positional=True),
    CommandOption("new", "one or more results folders to compare with BASE", metavar="NEW", positional=True,
                  many=True),
    CommandOption("json", "print one JSON object instead of the table", flag=True),
    CommandOption("fail-worse", "exit 4 when a point's verdict is worse than BASE by more than PCT, by its interval "
                                "(e.g. 5%%: the interval lies wholly beyond 1.05x); cannot tell never fails; exit 2 "
                                "when no point matched (a gate that compared nothing does not pass)",
                  metavar="PCT", type=_percent),
)


def add_parser(sub, info: Optional[dict]) -> None:
    command = sub.add_parser("compare", help="compare result folders point by point: ratio, interval, verdict",
                             description="Match the points of NEW against BASE (experiment, transport, mode, size, "
                                         "rate) and print each side's median, the ratio new/base, its interval and "
                                         "whether the data can tell them apart (docs/cli.md#compare).",
                             allow_abbrev=False)
    command_options.add_arguments(command, OPTIONS)


@dataclass
class Item:
    """One measured figure of a folder, as compare matches and judges it."""
    key: tuple                                      # equal keys: the same measurement in two folders
    label: str
    figure: str                                     # what the value is, with its unit
    value: Optional[float]
    higher_is_better: bool
    samples: Callable[[], Optional[np.ndarray]] = lambda: None   # samples of the figure's quantity, if kept
    kind: tuple = ()                                # run_spread's kind of point: its run-to-run spread


def point_key(entry: model.Entry) -> tuple:
    """What a run's point measured: the one place that says which points of two folders are one measurement."""
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
        return Item(point_key(entry), label, "msg/s", float(p["msg_rate"]), True, lambda: bins_of(p),
                    spread_kind(entry, "msg_rate"))
    if entry.experiment == "setup":   # a connect's or a registration's time, on base pages
        from fabmeter.report import model
        key = "connect_ns" if p.get("what") == "connect" else "register_ns"
        value = model.stat(p, key, "p50")
        return Item(point_key(entry), label, f"{key[:-3]} p50 ns", value, False, lambda: entry.raw_samples(key),
                    spread_kind(entry, f"{key[:-3]} p50"))
    value = (p.get("latency_ns") if isinstance(p.get("latency_ns"), dict) else {}).get("p50")
    return Item(point_key(entry), label, f"p50 {analysis.latency_kind_word(p, entry.experiment)} ns",
                float(value) if isinstance(value, (int, float)) else None, False, entry.samples,
                spread_kind(entry, "p50"))


def spread_kind(entry: model.Entry, figure: str) -> tuple:
    """The kind of point whose run-to-run spread (run_spread.py) judges this figure of `entry`."""
    p, params = entry.point, entry.run.params
    return kind_of(experiment=entry.experiment, transport=p.get("transport", params.get("transport")),
                   poll=p.get("poll", params.get("poll")), figure=figure)


def bins_of(point: dict) -> Optional[np.ndarray]:
    """A bw point's messages per bin of its throughput series (client to server), its first and last bins
    left out (a bin the measured window cuts is partial): the samples of its message rate."""
    series = ((point.get("throughput_series") or {}).get("c2s") or {}).get("msgs")
    if not isinstance(series, list) or len(series) < 3 or not all(isinstance(x, (int, float)) for x in series):
        return None
    import numpy as np
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
    """One point's runs on each side. MIN_RUNS or more a side: the interval of the ratio over the runs (the
    runs are what is resampled, not their samples). Fewer: a verdict only where the shift lies beyond the
    run-to-run spread measured for this kind of point, the ratio's interval being the bootstrap of the two
    runs' samples (latency: the raw samples; bw: messages per bin) where there is one run a side with them."""
    higher = base[0].higher_is_better
    figures = [[i.value for i in side if i.value is not None] for side in (base, new)]
    nb, nn = len(figures[0]), len(figures[1])
    if min(nb, nn) >= MIN_RUNS:
        c = stats.compare_runs(figures[0], figures[1], higher)
        c.reason = f"{nb} + {nn} runs: the ratio's interval over the runs"
        return c
    samples = [[s for s in (i.samples() for i in side) if s is not None] for side in (base, new)]
    within = (stats.bootstrap_interval(samples[0][0], samples[1][0])
              if nb == nn == len(samples[0]) == len(samples[1]) == 1 else None)
    c = stats.compare_beyond_spread(figures[0], figures[1], higher, spread(base[0].kind), within)
    few = f"{nb} run{'s' if nb != 1 else ''} a side" if nb == nn else f"{nb} + {nn} runs"
    c.reason = (f"{few}: no figure on one side" if c.ratio is None else
                f"{few}: rerun with --repeat {MIN_RUNS}" if c.verdict == stats.UNKNOWN else
                f"{few}: a shift beyond the run-to-run spread measured for this kind of point")
    return c


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
    from fabmeter.report import model
    runs, problems = model.read_runs(path)
    meshes, mesh_problems = model.read_meshes(path)
    for problem in problems + mesh_problems:
        say(f"fabmeter: warning: compare: {path}: {problem}", err=True)
    runs = [r for r in runs if not r.peer]
    items = [item_of_point(e) for e in model.entries_of(runs) if not e.point.get("partial")]
    for _, doc in meshes:
        items += items_of_mesh(doc)
    if not items:
        raise FabmeterError(f"compare: {path}: no measured point (no run.json or mesh.json below it)", EXIT_USAGE)
    envs = [d["environment"] for d in [r.doc for r in runs] + [doc for _, doc in meshes]
            if isinstance(d.get("environment"), dict)]
    return envs, items


def holds(items: list[list[Item]]) -> str:
    """What one side holds, briefly: each point once, with its number of runs."""
    names = [f"{side[0].label} ({len(side)} run{'s' if len(side) != 1 else ''})" for side in items]
    return "; ".join(names[:8]) + (f"; and {len(names) - 8} more" if len(names) > 8 else "")


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
        fails = (c.verdict == stats.WORSE and limit is not None   # only a verdict fails the gate
                 and stats.verdict(c.interval, higher, limit) == stats.WORSE)
        failing += fails
        added = None if c.interval is None or c.base is None else [(c.interval[0] - 1) * c.base,
                                                                   (c.interval[1] - 1) * c.base]
        rows.append({"point": n[0].label, "figure": b[0].figure, "runs": [len(b), len(n)], **c.json(),
                     "difference_interval": added, "fails": fails})
    only = [[b for b, n in groups.values() if not n], [n for b, n in groups.values() if not b]]
    message = None if rows else (
        f"nothing matched: base holds {holds(only[0])}; new holds {holds(only[1])}. compare matches one "
        "measurement (experiment, transport, poll, options, size, rate and path) across two folders; "
        "`fabmeter report` puts different modes side by side")
    return {"base": str(base), "new": str(new), "environment_diff": [
                {"field": f, "base": bv, "new": nv} for f, bv, nv in env_diff(base_envs[:1], new_envs[:1])],
            "points": rows, "unmatched_base": [b[0].label for b in only[0]],
            "unmatched_new": [n[0].label for n in only[1]], "message": message,
            "fail_worse": fail_worse, "failing": failing}


SYMBOL = {stats.BETTER: "better", stats.WORSE: "WORSE", stats.SAME: "~", stats.UNKNOWN: "cannot tell"}
METHOD = {"runs": "by the runs", "spread": "against the run-to-run spread", "none": "no interval"}


def say(text: str, err: bool = False) -> None:
    """Every line compare prints, on stdout or (err) stderr, control characters shown escaped (strings come
    from results files)."""
    (sys.stderr if err else sys.stdout).write(shown_lines(text) + "\n")


def verdict_text(r: dict) -> str:
    """A point's verdict as the table shows it: cannot tell says why."""
    text = SYMBOL[r["verdict"]] + (f" ({r['reason']})" if r["verdict"] == stats.UNKNOWN and r["reason"] else "")
    return text + (" (fails --fail-worse)" if r["fails"] else "")


def evidence_text(r: dict) -> str:
    factor = "" if r["method"] != "spread" else f" x{r['spread']:.3f}"
    return f"{METHOD[r['method']]}{factor} ({r['runs'][0]}+{r['runs'][1]})"


def print_comparison(doc: dict) -> None:
    say(f"base: {doc['base']}\nnew:  {doc['new']}")
    if doc["environment_diff"]:
        say("environment differences:")
        say(analysis.format_table(["field", "base", "new"],
                                  [[d["field"], d["base"], d["new"]] for d in doc["environment_diff"]], left=3))
    else:
        say("environment: no recorded difference")
    if doc["message"]:
        say(doc["message"])
        return
    table = []
    for r in doc["points"]:
        interval = "-" if r["interval"] is None else f"{r['interval'][0]:.3f}..{r['interval'][1]:.3f}"
        table.append([r["point"], r["figure"], r["base"], r["new"],
                      "-" if r["ratio"] is None else f"{r['ratio']:.3f}", interval, verdict_text(r),
                      evidence_text(r)])
    say(analysis.format_table(["point", "figure", "base", "new", "new/base", f"{stats.CONFIDENCE:.0%} interval",
                               "verdict", "evidence"], table, left=2))
    say(f"new/base: ratio of the medians; ~: the runs cannot tell the two apart. By the runs: {MIN_RUNS} or more "
        "runs of the point a side (--repeat), the ratio's interval over the runs. With fewer, a verdict only for a "
        "shift beyond the run-to-run spread measured for that kind of point (the ratio's interval, the bootstrap "
        "of one run's samples a side, widened by it), else cannot tell")
    for side in ("base", "new"):
        for name in doc[f"unmatched_{side}"]:
            say(f"only in {side}: {name}")


def main(ns, found: Found) -> int:
    docs = [compare(Path(ns.base), Path(new), ns.fail_worse) for new in ns.new]
    if ns.json:
        say(json.dumps(docs[0] if len(docs) == 1 else docs, indent=1))
    else:
        for i, doc in enumerate(docs):
            if i:
                say("")
            print_comparison(doc)
    if ns.fail_worse is not None and any(d["message"] for d in docs):
        say("fabmeter: compare: --fail-worse: nothing matched, so nothing was judged", err=True)
        return EXIT_USAGE
    failing = sum(d["failing"] for d in docs)
    if failing:
        say(f"fabmeter: compare: {failing} point(s) worse than base by more than {ns.fail_worse:.0%}", err=True)
        return EXIT_SLO
    return EXIT_OK
