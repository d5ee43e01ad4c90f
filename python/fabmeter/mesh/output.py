"""What rank 0 prints: one object per directed pair, the `mesh` summary,
and the human matrix. Pair figures cross the coordination channel, so
rank 0 takes only numbers from them (valid_pair)."""

from __future__ import annotations

import collections
from typing import Callable, Optional

from fabmeter import analysis, envinfo
from fabmeter.mesh import aggregate, lateness, outliers, slotted
from fabmeter.peers.registry import PEERS
from fabmeter.stats import spread

CLOCK_KEYS = ("offset_ns", "drift_ppm", "error_bound_ns", "probes")
CLOCK_METHODS = ("shared_tsc", "probe")
CLOCK_PATHS = (None, "udp_kernel_timestamps", "control_channel", "mixed")   # how a probe fit's probes travelled
LATENCY_KINDS = ("one-way", "rtt/2", "one-way (receive - scheduled step time)", "rtt from the intended send time",
                 "rtt", "rtt from the actual send time")    # the last two: peer tools' pairs (mesh --tool)
MAX_STAT_KEYS = 18             # a summary: 10 fixed keys and up to 8 --percentiles (stats.hpp)
MAX_SERIES_BINS = 512            # the engine's BwSeries::kMaxBins
# load's figures: a pair's histograms cross the channel in one frame (rendezvous.MAX_FRAME, 64 KiB) with the rest.
LOAD_NUMBERS = ("offered_rps", "achieved_rps", "completed", "sent", "shed", "span_s")
# The server's transmit path of the pair (the point's server.tx, load/tx_path.hpp), each as tx_<name>: null where
# the transport reports no send completions.
TX_NUMBERS = ("mean_per_poll", "wait_ns_mean", "poll_ns_mean", "waits", "polls")
HIST_SUFFIXES = ("", "_below", "_above")
BUCKET_NUMBERS = ("size_lo", "size_hi", "count", "p50", "p99", "latency_p50_ns", "latency_p99_ns", "unloaded_p50_ns",
                  "unloaded_count")
BUCKET_HISTS = ("latency_hist", "unloaded_hist")
MAX_BUCKETS = 32                 # the engine's slowdown buckets: the deciles of a workload, merged
# Each end's CPU cost of a pair (the point's `cpu`, docs/results.md), without its per-CPU lines.
CPU_NUMBERS = ("window_s", "cpu_s", "user_s", "system_s", "utilization", "voluntary_switches", "involuntary_switches",
               "per_message_ns", "count")
CPU_WINDOWS = ("measured", "with_warmup", "point", "process")   # process: a peer tool's processes
CPU_PER = ("message", "round_trip", "request")
HIST_BUDGET = 40 * 1024          # characters of a pair's histograms together; beyond: the buckets', then all dropped


def cpu_figures(point: dict) -> Optional[dict]:
    """Each end's CPU cost of the point, its totals only."""
    cpu = point.get("cpu")
    if not isinstance(cpu, dict):
        return None
    return {side: {k: s.get(k) for k in (*CPU_NUMBERS, "window", "per")} if isinstance(s, dict) else None
            for side, s in ((side, cpu.get(side)) for side in ("client", "server"))}


def valid_cpu(v) -> bool:
    return v is None or (isinstance(v, dict) and set(v) == {"client", "server"} and all(
        s is None or (isinstance(s, dict) and set(s) == {*CPU_NUMBERS, "window", "per"}
                      and all(s[k] is None or _number(s[k]) for k in CPU_NUMBERS)
                      and s["window"] in CPU_WINDOWS and s["per"] in (None, *CPU_PER))
        for s in v.values()))


def pair_figures(point: dict) -> dict:
    """The figures of a pair from the engine client's point (empty point: a failed run); for a multi-point run
    (stream's rates, load's sweep) its last point."""
    clock = point.get("clock") or {}
    shared = clock.get("method") == "shared_tsc"     # one host: the same clock on both ends, nothing to fit
    return {"latency_ns": point.get("latency_ns"), "latency_kind": point.get("latency_kind"),
            "gbps": point.get("gbps", point.get("achieved_gbps")), "lost": point.get("lost"),
            "size": point.get("size"), "throughput_series": point.get("throughput_series"),
            "load": load_figures(point), "cpu": cpu_figures(point),
            "clock": None if not clock else {"method": clock.get("method"),
                                             "path": clock.get("path"),
                                             **{k: (0 if shared else clock.get(k)) for k in CLOCK_KEYS}}}


def _hists(d: dict, key: str) -> dict:
    return {key + s: d.get(key + s) for s in HIST_SUFFIXES}


def load_figures(point: dict) -> Optional[dict]:
    """load's figures of a point (None for the other experiments): rates, counts, the latency histogram and the
    per-size-bucket slowdown with its histograms, within HIST_BUDGET (the buckets' dropped first, then all)."""
    if "offered_rps" not in point:
        return None
    tx = (point.get("server") or {}).get("tx") or {}
    out = {**{k: point.get(k) for k in LOAD_NUMBERS}, **{f"tx_{k}": tx.get(k) for k in TX_NUMBERS},
           **_hists(point, "latency_hist"),
           "slowdown": [{**{k: b.get(k) for k in BUCKET_NUMBERS}, **_hists(b, "latency_hist"),
                         **_hists(b, "unloaded_hist")}
                        for b in (point.get("slowdown") or [])[:MAX_BUCKETS] if isinstance(b, dict)]}
    if _hist_chars(out) > HIST_BUDGET:
        for b in out["slowdown"]:
            b.update({k + s: None for k in BUCKET_HISTS for s in HIST_SUFFIXES})
    if _hist_chars(out) > HIST_BUDGET:
        out.update({"latency_hist" + s: None for s in HIST_SUFFIXES})
    return out


def _hist_chars(load: dict) -> int:
    texts = [load["latency_hist"], *(b[k] for b in load["slowdown"] for k in BUCKET_HISTS)]
    return sum(len(t) for t in texts if isinstance(t, str))


def samples_dir(src: int, dst: int) -> str:
    """Where, under --out on its source host, a pair's engine client writes its raw samples (--samples raw)."""
    return f"pairs/{src}-{dst}"


def failed_pair(src: int, dst: int, message: str, status: str = "failed") -> dict:
    """A pair without figures: `failed`, or `interrupted` (the mesh was, before the pair finished)."""
    return {"type": "pair", "src": src, "dst": dst, "status": status, "message": message,
            "latency_ns": None, "latency_kind": None, "gbps": None, "lost": None, "size": None,
            "throughput_series": None, "load": None, "cpu": None, "samples_dir": None, "clock": None,
            "start_late_ns": None, "start_ready_ns": None,
            "start_margin_ns": None, "late_step": None, "late_reason": None, "steps": None}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _stats(v) -> bool:
    return v is None or (isinstance(v, dict) and len(v) <= MAX_STAT_KEYS and all(
        isinstance(k, str) and len(k) <= 16 and (x is None or _number(x)) for k, x in v.items()))


def _series(v) -> bool:
    """bw's throughput_series: per direction (c2s, s2c) a bin width and at most MAX_SERIES_BINS counts."""
    return v is None or (isinstance(v, dict) and set(v) <= {"c2s", "s2c"} and all(
        isinstance(d, dict) and set(d) == {"bin_ns", "msgs"} and _number(d["bin_ns"]) and d["bin_ns"] > 0
        and isinstance(d["msgs"], list) and len(d["msgs"]) <= MAX_SERIES_BINS
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in d["msgs"]) for d in v.values()))


def _count(v) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)


def _hist_fields(d: dict, key: str) -> bool:
    text = d.get(key)
    return (text is None or (isinstance(text, str) and len(text) <= HIST_BUDGET)) and all(
        _count(d.get(key + s)) for s in HIST_SUFFIXES[1:])


def valid_load(v) -> Optional[dict]:
    """load's figures as rank 0 takes them (None: not valid; {}: none); only the keys load_figures writes."""
    if v is None:
        return {}
    numbers = (*LOAD_NUMBERS, *(f"tx_{k}" for k in TX_NUMBERS))
    keys = {*numbers, *(f"latency_hist{s}" for s in HIST_SUFFIXES), "slowdown"}
    bucket_keys = {*BUCKET_NUMBERS, *(k + s for k in BUCKET_HISTS for s in HIST_SUFFIXES)}
    if not (isinstance(v, dict) and set(v) == keys and all(v[k] is None or _number(v[k]) for k in numbers)
            and _hist_fields(v, "latency_hist") and isinstance(v["slowdown"], list)
            and len(v["slowdown"]) <= MAX_BUCKETS
            and all(isinstance(b, dict) and set(b) == bucket_keys
                    and all(b[k] is None or _number(b[k]) for k in BUCKET_NUMBERS)
                    and all(_hist_fields(b, k) for k in BUCKET_HISTS) for b in v["slowdown"])
            and _hist_chars(v) <= HIST_BUDGET):
        return None
    return {**{k: v[k] for k in keys if k != "slowdown"},
            "slowdown": [{k: b[k] for k in bucket_keys} for b in v["slowdown"]]}


def valid_pair(body: dict, rank: int, pending: set) -> Optional[dict]:
    """A pair result from `rank` if it is one rank 0 waits for and holds only what it may; else None."""
    src, dst, clock, tool = body.get("src"), body.get("dst"), body.get("clock"), body.get("tool")
    load = valid_load(body.get("load"))
    ok = (load is not None and body.get("type") == "pair" and src == rank and (src, dst) in pending
          and (tool is None or (isinstance(tool, str) and tool in PEERS))
          and body.get("status") in ("ok", "failed") and isinstance(body.get("message"), str)
          and body.get("latency_kind") in (None, *LATENCY_KINDS)
          and body.get("samples_dir") in (None, samples_dir(src, dst))
          and all(body.get(k) is None or (isinstance(body.get(k), int) and not isinstance(body.get(k), bool))
                  for k in ("started_ns", "start_late_ns", "start_ready_ns", "start_margin_ns", "engine_run",
                            "relay_run"))
          and _stats(body.get("latency_ns")) and all(body.get(k) is None or _number(body.get(k)) for k in ("gbps", "lost", "size"))
          and body.get("late_step") in (None, *lateness.LATE_STEPS)
          and (body.get("late_reason") is None or isinstance(body.get("late_reason"), str))
          and _series(body.get("throughput_series")) and valid_cpu(body.get("cpu"))
          and (clock is None or (isinstance(clock, dict) and clock.get("method") in CLOCK_METHODS
                                 and clock.get("path") in CLOCK_PATHS
                                 and all(clock.get(k) is None or _number(clock.get(k)) for k in CLOCK_KEYS))))
    if not ok:
        return None
    return {"type": "pair", "src": src, "dst": dst, "status": body["status"], "message": body["message"][:300],
            "latency_ns": body.get("latency_ns"), "latency_kind": body.get("latency_kind"),
            "gbps": body.get("gbps"), "lost": body.get("lost"), "size": body.get("size"),
            "throughput_series": body.get("throughput_series"), "load": load or None, "cpu": body.get("cpu"),
            "samples_dir": body.get("samples_dir"),
            "clock": None if clock is None else {k: clock.get(k) for k in ("method", "path", *CLOCK_KEYS)},
            "start_late_ns": body.get("start_late_ns"), "start_ready_ns": body.get("start_ready_ns"),
            "start_margin_ns": body.get("start_margin_ns"),
            "late_step": body.get("late_step"), "late_reason": (body.get("late_reason") or "")[:300] or None,
            "started_ns": body.get("started_ns"), "steps": slotted.valid_steps(body.get("steps")),
            "engine_run": body.get("engine_run"), "relay_run": body.get("relay_run"),
            **({"tool": tool} if tool else {})}


class Summary:
    """The pairs as they come and the rounds' start skew, for the `mesh` object and the matrix."""

    def __init__(self, hosts: list[str], pattern: str, schedule: str, experiment: str, options: dict,
                 start_clock_error_ns: int):
        self.hosts, self.pattern, self.schedule = hosts, pattern, schedule
        self.experiment, self.options = experiment, options
        self.start_clock_error_ns = start_clock_error_ns
        self.pairs: list[dict] = []
        self.rounds: list[dict] = []
        self.environments: list[Optional[dict]] = [None] * len(hosts)   # per rank: envinfo.identity, if known
        self.outlier_rule = (outliers.K_MADS, outliers.MIN_RELATIVE)    # --outlier-mads, --outlier-floor / 100
        self._late: list[int] = []                                      # every pair's start_late_ns
        self._ready: list[int] = []                                     # every pair's start_ready_ns
        self.load = aggregate.LoadTotals(hosts) if experiment == "load" else None
        self.slots: Optional[slotted.Plan] = None                      # --schedule slotted: its plan
        self._rounds: Optional[slotted.Rounds] = None                   # ... and each pair's rounds joined
        self.tool: Optional[str] = None                                 # --tool: the peer tool every pair ran
        self.mpi: Optional[dict] = None                                 # --tool fabmeter-mpibench: its tests

    def add(self, emit: Callable[[dict], None], pair: dict) -> None:
        """Slotted: the pair's steps, over all its rounds, become its messages against the plan
        (slotted.pair_slots), the pair added at its last round; bulk, its data rate is its Gbit/s."""
        steps = pair.pop("steps", None)
        if self.slots is not None:
            self._rounds = self._rounds or slotted.Rounds(self.slots)
            pair, steps = self._rounds.add(pair, steps)
            if pair is None:
                return
            pair["slotted"] = slotted.pair_slots(self.slots, pair["src"], pair["dst"], steps)
            if self.slots.bulk:
                pair["gbps"] = pair["slotted"] and pair["slotted"]["gbps"]
        self.pairs.append(pair)
        if self.load is not None:
            self.load.add(pair)
        emit(pair)

    def add_round(self, index: int, pairs: list, started_ns: list[int], late_ns: Optional[list[int]] = None,
                  lead_ns: Optional[int] = None, margins_ns: Optional[list[int]] = None,
                  ready_ns: Optional[list[int]] = None) -> None:
        """`started_ns`: the instants the round's engine clients went on (their first point's started_mono_ns: out of
        the wait, the first message next), on the coordinator's clock; `late_ns`: each one's start_late_ns, after
        the planned instant on its own host's clock; `lead_ns`: how far ahead of that instant the plan was sent;
        `margins_ns`: how long before it each engine's start line came (session open); `ready_ns`: how long
        before it each engine was ready (its ready_mono_ns: connected, first clock probes done, at the barrier)."""
        skew = max(started_ns) - min(started_ns) if len(started_ns) > 1 else 0 if started_ns else None
        self.rounds.append({"round": index, "pairs": [list(p) for p in pairs], "start_skew_ns": skew,
                            "start_late_ns": spread(late_ns or []), "lead_ns": lead_ns,
                            "start_margin_min_ns": min(margins_ns) if margins_ns else None,
                            "start_ready_min_ns": min(ready_ns) if ready_ns else None})
        self._late += late_ns or []
        self._ready += ready_ns or []

    def all_ok(self) -> bool:
        return all(p["status"] == "ok" for p in self.pairs)

    def sessions(self) -> dict:
        """How many engine clients (and with --launch serve, relay sessions) the pairs opened: a pair that was its
        engine's or its relay session's first run opened one; the others reused one (mesh/series.py)."""
        relayed = [p for p in self.pairs if p.get("relay_run") is not None]
        return {"pairs": len(self.pairs),
                "client_engines": sum(p.get("engine_run") == 1 for p in self.pairs),
                "relay_sessions": sum(p["relay_run"] == 1 for p in relayed) if relayed else None}

    def as_json(self) -> dict:
        skews = [r["start_skew_ns"] for r in self.rounds if r["start_skew_ns"] is not None]
        return {"type": "mesh", "experiment": self.experiment, "tool": self.tool,
                "transport": self.options.get("transport"),
                "pattern": self.pattern, "schedule": self.schedule, "hosts": self.hosts,
                "pairs": len(self.pairs), "failed": sum(p["status"] == "failed" for p in self.pairs),
                "interrupted": sum(p["status"] == "interrupted" for p in self.pairs),
                "rounds": self.rounds, "round_start_skew_ns": max(skews) if skews else None,
                "start_skew_ns": spread(skews), "start_late_ns": spread(self._late),
                "start_ready_ns": spread(self._ready), "late_pairs": late_pairs(self.pairs),
                "start_clock_error_ns": self.start_clock_error_ns,
                "outliers": outliers.find(self.experiment, self.pairs, self.hosts, *self.outlier_rule),
                "drift": outliers.drift(self.hosts, self.environments, envinfo.IDENTITY_FIELDS),
                "load": self.load.as_json(self.rounds) if self.load is not None else None,
                "slotted": slotted.receivers(self.slots, self.pairs) if self.slots is not None else None,
                "mpi": self.mpi,
                "sessions": self.sessions(),
                "environments": self.environments}


MATRIX_FIGURE = {"oneway": "one-way p50 us (synchronised clocks)", "lat": "one-way (RTT/2) p50 us",
                 "bw": "Gbit/s", "stream": "one-way p50 us (receive - scheduled step, synchronised clocks)",
                 "load": "RTT p50 us from the intended send"}


def _cell(experiment: str, pair: dict) -> str:
    if pair["status"] != "ok":
        return "failed"
    value = pair["gbps"] if experiment == "bw" else (pair.get("latency_ns") or {}).get("p50")
    if value is None:
        return "n/a"
    return analysis.fmt_num(value, 2) if experiment == "bw" else analysis.fmt_num(value / 1000.0, 1)


def matrix(summary: dict, pairs: list[dict]) -> str:
    """The p50 latency (bw: Gbit/s), source rows by destination columns; '-' not in the pattern."""
    n = len(summary["hosts"])
    cells = [["-"] * n for _ in range(n)]
    for p in pairs:
        cells[p["src"]][p["dst"]] = _cell(summary["experiment"], p)
    head = ["src \\ dst"] + [f"{d} {h}" for d, h in enumerate(summary["hosts"])]
    rows = [[f"{s} {summary['hosts'][s]}"] + cells[s] for s in range(n)]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(n + 1)]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    tool = f"{summary['tool']}'s " if summary.get("tool") else ""
    figure = MATRIX_FIGURE[summary["experiment"]] if not tool else "p50 us as the tool reports it" \
        if summary["experiment"] != "bw" else "Gbit/s"
    out = [f"mesh {tool}{summary['experiment']}  {summary['transport'] or ''}  {summary['pattern']}, "
           f"{summary['schedule']}  {figure}",
           line(head), line(["-" * w for w in widths]), *map(line, rows), *start_lines(summary)]
    out += [f"failed {p['src']}->{p['dst']}: {p['message']}" for p in pairs if p["status"] != "ok"]
    if summary.get("outliers"):
        out += outlier_lines(summary, summary["outliers"])
    if summary.get("drift"):
        out += drift_lines(summary["hosts"], summary["drift"])
    if summary.get("load"):
        out += load_lines(summary["load"])
    out += slotted.lines(summary, pairs)
    out += mpi_lines(summary.get("mpi"))
    return "\n".join(out)


def mpi_lines(mpi: Optional[dict]) -> list[str]:
    """mesh --tool fabmeter-mpibench: each test's figures over its ranks (tool_mpi.py)."""
    out = []
    for test, t in (mpi or {}).get("tests", {}).items():
        if t["status"] != "ok":
            out.append(f"mpi {test}: failed: {t['message']}")
            continue
        latency = t.get("latency_ns")
        figure = (f"{t['latency_kind']} p50 {_us(latency['p50'])}, mean {_us(latency['mean'])}" if latency
                  else f"{analysis.fmt_num(t['gbps'], 2)} Gbit/s")
        out.append(f"mpi {test}: {figure} over {t['ranks']} ranks ({', '.join(t['hosts'])}), {t['size']} B, "
                   f"{t['iterations']} iterations; {t['library_version'].splitlines()[0]}")
    return out


def _us(ns) -> str:
    return "n/a" if ns is None else analysis.fmt_num(ns / 1000.0, 1) + " us"


def _spread_text(d: Optional[dict]) -> str:
    return "n/a" if not d else f"p50 {_us(d['p50'])}, p99 {_us(d['p99'])}, max {_us(d['max'])}"


def late_pairs(pairs: list[dict]) -> Optional[dict]:
    """The pairs that went on more than lateness.LATE_NS after their instant: how many, by the step that took the
    time, and the latest with its reason (None: none was)."""
    late = [p for p in pairs if p.get("late_step")]
    if not late:
        return None
    latest = max(late, key=lambda p: p.get("start_late_ns") or 0)
    return {"n": len(late), "by_step": dict(collections.Counter(p["late_step"] for p in late).most_common()),
            "latest": {k: latest.get(k) for k in ("src", "dst", "start_late_ns", "late_reason")}}


def start_lines(summary: dict) -> list[str]:
    """How together the rounds started: the skew of each round (its pairs' start instants, max - min, on the
    coordinator's clock) over the rounds, and how late the pairs went on after their planned instant."""
    skew = summary.get("start_skew_ns")
    if skew is None and "start_skew_ns" not in summary:       # a summary from before the distributions
        skew = None if summary["round_start_skew_ns"] is None else {"p50": None, "p99": None,
                                                                    "max": summary["round_start_skew_ns"]}
    return [f"rounds {len(summary['rounds'])}; round start skew {_spread_text(skew)} over the rounds "
            f"(rank clocks known within {_us(summary['start_clock_error_ns'])}); "
            f"pairs started after the planned instant: {_spread_text(summary.get('start_late_ns'))}"] + _late_lines(
                summary.get("late_pairs"))


def _late_lines(late: Optional[dict]) -> list[str]:
    if not late:
        return []
    latest = late["latest"]
    steps = ", ".join(f"{step.replace('_', ' ')} {n}" for step, n in late["by_step"].items())
    return [f"pairs later than {lateness.LATE_NS / 1e6:g} ms: {late['n']} ({steps}); each one's late_reason is "
            f"in mesh.json; the latest, {latest['src']} -> {latest['dst']}: {latest['late_reason']}"]


def _figure_text(experiment: str, value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    return f"{analysis.fmt_num(value, 2)} Gbit/s" if experiment == "bw" else f"{analysis.fmt_num(value / 1000.0, 1)} us"


def outlier_lines(summary: dict, found: dict) -> list[str]:
    """The outliers section under the matrix: the rule in one line, then each flagged host and link."""
    rule, experiment, hosts = found["rule"], summary["experiment"], summary["hosts"]
    what = "p50" if rule["figure"] != "gbps" else "Gbit/s"
    if found["median"] is None:
        return [f"outliers: not judged ({found['links_judged']} links with a figure, {rule['min_links']} needed)"]
    head = (f"outliers: {what} beyond {rule['k_mads']:g} scaled MADs ({_figure_text(experiment, found['scaled_mad'])}) "
            f"of the median {_figure_text(experiment, found['median'])} of {found['links_judged']} links and "
            f">= {rule['min_relative_difference'] * 100:g} % from it; a host: most of its links out or in")
    lines = [head]
    for h in found["hosts"]:
        sides = "; ".join(f"{s['direction']} as {'source' if s['side'] == 'out' else 'destination'} "
                          f"({s['flagged']} of {s['links']} links)" for s in h["sides"])
        lines.append(f"  host {h['rank']} {h['host']}: {sides}")
    for link in found["links"]:
        score = "n/a" if link["score"] is None else f"{link['score']:+.1f}"
        lines.append(f"  link {link['src']}->{link['dst']} ({hosts[link['src']]} -> {hosts[link['dst']]}): "
                     f"{_figure_text(experiment, link['figure'])} {link['direction']}, score {score}, "
                     f"{link['relative'] * 100:+.0f} %")
    if not found["links"]:
        lines.append("  none")
    return lines


def _rps(v) -> str:
    return "n/a" if v is None else analysis.fmt_num(v, 0)


def _load_line(name: str, side: dict) -> str:
    lat = side["latency_ns"]
    rates = (f"offered {_rps(side['offered_rps'])} req/s, achieved {_rps(side['achieved_rps'])} req/s"
             if len(side["by_round"]) <= 1 else
             "req/s by round (offered/achieved): " + ", ".join(f"{r['round']}: {_rps(r['offered_rps'])}/"
                                                                f"{_rps(r['achieved_rps'])}" for r in side["by_round"]))
    return (f"  {name}: {side['pairs_merged']} of {side['pairs']} pairs merged, {lat['count']} requests; "
            f"RTT p50 {_us(lat['p50'])}, p99 {_us(lat['p99'])}, p99.9 {_us(lat['p999'])}; {rates}")


def load_lines(load: dict) -> list[str]:
    """The load section: per server (the pairs' destination) and overall, the merged histogram's percentiles
    (RTT from the intended send) and the summed requests/s."""
    lines = ["load, every pair's histogram merged (its last point):"]
    lines += [_load_line(f"server {s['rank']} {s['host']}", s) for s in load["servers"]]
    lines.append(_load_line("all", load["overall"]))
    lines += [f"  not merged {u['src']}->{u['dst']}: {u['reason']}" for u in load["unmerged"]]
    return lines


def drift_lines(hosts: list[str], drift: dict) -> list[str]:
    """The drift section: each identity field whose value differs between hosts, which ranks hold which."""
    if not drift["hosts_reporting"]:
        return ["drift: no host reported its environment"]
    lines = [f"drift: identity fields that differ between the {len(drift['hosts_reporting'])} hosts that reported "
             f"them (of {len(hosts)})"]
    for f in drift["fields"]:
        values = "; ".join(f"{v['value']!s:.60} on {' '.join(map(str, v['ranks']))}" for v in f["values"])
        unknown = f"; unknown on {' '.join(map(str, f['unknown_ranks']))}" if f["unknown_ranks"] else ""
        lines.append(f"  {f['field']}: {values}{unknown}")
    if not drift["fields"]:
        lines.append("  none")
    return lines


# --- mesh.json: what `fabmeter mesh --out DIR` writes (docs/results.md) ---------

MESH_FILE = "mesh.json"
MATRIX_KEYS = ("latency_p50_ns", "latency_p99_ns", "gbps", "lost")


def matrices(summary: dict, pairs: list[dict]) -> dict:
    """N x N matrices, source rows by destination columns: a pair's p50 and p99 latency (ns, of the kind its
    `latency_kind` says), Gbit/s and lost messages; null where the pattern has no pair or the pair failed."""
    n = len(summary["hosts"])
    out = {k: [[None] * n for _ in range(n)] for k in MATRIX_KEYS}
    for p in pairs:
        if p["status"] != "ok":
            continue
        latency = p.get("latency_ns") or {}
        for key, value in zip(MATRIX_KEYS, (latency.get("p50"), latency.get("p99"), p.get("gbps"), p.get("lost"))):
            out[key][p["src"]][p["dst"]] = value
    return out


def _side(pairs: list[dict]) -> dict:
    ok = [p for p in pairs if p["status"] == "ok"]
    p50s = [p["latency_ns"]["p50"] for p in ok if (p.get("latency_ns") or {}).get("p50") is not None]
    p99s = [p["latency_ns"]["p99"] for p in ok if (p.get("latency_ns") or {}).get("p99") is not None]
    gbps = [p["gbps"] for p in ok if p.get("gbps") is not None]
    return {"pairs": len(pairs), "failed": len(pairs) - len(ok),
            "p50_ns_median_of_pairs": float(sorted(p50s)[len(p50s) // 2]) if p50s else None,
            "p99_ns_max_of_pairs": max(p99s) if p99s else None,
            "gbps_sum": sum(gbps) if gbps else None,
            "lost_sum": sum(p["lost"] for p in ok if p.get("lost") is not None) if ok else None}


def per_host(summary: dict, pairs: list[dict]) -> list[dict]:
    """Per host, its pairs as the source (`out`) and as the destination (`in`): counts, the median of the pairs'
    p50 and the largest p99 (pair figures are not re-sampled), summed Gbit/s and lost messages."""
    return [{"rank": r, "host": h, "out": _side([p for p in pairs if p["src"] == r]),
             "in": _side([p for p in pairs if p["dst"] == r])} for r, h in enumerate(summary["hosts"])]


LIFTED = ("outliers", "drift", "environments", "load")     # the summary's keys mesh.json keeps elsewhere


def record(summary: dict, pairs: list[dict], started_at: str, finished_at: str, command: list[str],
           options: dict, environment: dict) -> dict:
    """The whole mesh run as one document: the summary, every pair, the matrices, the per-host figures (each
    with its host's identity fields), the outliers and the drift."""
    hosts = per_host(summary, pairs)
    environments = summary.get("environments") or []
    for h in hosts:
        h["environment"] = environments[h["rank"]] if h["rank"] < len(environments) else None
    return {"type": "mesh", "command": command, "started_at": started_at, "finished_at": finished_at,
            "status": "interrupted" if summary.get("interrupted") else "ok" if summary["failed"] == 0 else "failed",
            "params": options, "environment": environment,
            "mesh": {k: v for k, v in summary.items() if k not in LIFTED}, "pairs": pairs,
            "matrix": matrices(summary, pairs), "per_host": hosts,
            "outliers": summary.get("outliers"), "drift": summary.get("drift"), "load": summary.get("load")}
