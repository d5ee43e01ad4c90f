"""`fabmeter EXPERIMENT` (lat, oneway, bw, ... as `fabmeter-engine options` lists them): one run, --repeat N of
them, or load's --search. The engine's options come from its table (options.py); the options that concern
orchestration are OPTIONS here (slo.py's --slo where an experiment's points carry a latency, --search for load)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Callable, Optional

from fabmeter import analysis, command_options, hop, path, recorded, repeat, run, search, slo
from fabmeter.command_options import CommandOption, Found
from fabmeter.cpus import parse_cpus
from fabmeter.engine import engine_options
from fabmeter.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_SLO, EXIT_USAGE, FabmeterError
from fabmeter.options import PY_ONLY, Options
from fabmeter.results import out_folder
from fabmeter.terminal import shown_lines

EXPERIMENTS_HELP = {
    "lat": "round-trip ping-pong; reports the round-trip time (RTT) and one-way = RTT/2",
    "oneway": "one-way latency of bursts (sender and receiver share the clock)",
    "bw": "streaming bandwidth and message rate",
    "stream": "a real-time stream at a fixed rate: latency, missed steps, deadline misses",
    "check": "conformance: sizes up to the transport's maximum, content, order, event-mode wake-up",
    "load": "open-loop request/response: tail latency against offered rate (workloads W1-W5, server pools)",
    "setup": "setup costs: connection establishment, memory registration by size (with and without huge pages)",
}

OPTIONS = (
    CommandOption("cpus", "pin the client to CPU A and the local server to CPU B (default: the first two CPUs; "
                          "none: unpinned); A+A2+...,B+B2+...: with --flows, each end's flows on its CPUs in turn",
                  metavar="A,B"),
    CommandOption("json", "print one JSON object per measured point (JSON Lines for sweeps)", flag=True),
    CommandOption("out", "write DIR/run.json and the raw samples (.npy)", metavar="DIR"),
    CommandOption("repeat", repeat.HELP, metavar="N", type=repeat.count, default=1),
    CommandOption("server", "use a server started elsewhere with `fabmeter serve` (two-host mode)",
                  metavar="HOST[:PORT]"),
    CommandOption("token-file", "with --server: the server's shared secret (default: $FABMETER_TOKEN)", metavar="F"),
    CommandOption("slo", slo.HELP, metavar="OBJECTIVES"),
    CommandOption("search", search.HELP, metavar="OBJECTIVES"),
    CommandOption("via-hop", hop.HELP, metavar="HOST[:PORT]"),
    CommandOption("hop-rounds", hop.ROUNDS_HELP, metavar="N", type=hop.rounds, default=1),
    CommandOption("hop-transport", hop.TRANSPORT_HELP, metavar="T"),
)
# The experiments an option is only for (every other option is every experiment's).
ONLY = {"slo": slo.applies, "search": lambda experiment: experiment == "load",
        "via-hop": hop.applies, "hop-rounds": hop.applies, "hop-transport": hop.applies}


def options_of(experiment: str) -> tuple[CommandOption, ...]:
    """An experiment command's own options (its engine options aside)."""
    return tuple(o for o in OPTIONS if ONLY.get(o.name, lambda e: True)(experiment))


def add_parser(sub, info: Optional[dict]) -> None:
    for exp in (info or {}).get("experiments") or list(EXPERIMENTS_HELP):
        desc = EXPERIMENTS_HELP.get(exp, exp)
        full = desc + (". Engine options are unavailable (`fabmeter --help` says why)" if info is None else "")
        command = sub.add_parser(exp, help=desc, description=full, allow_abbrev=False)
        if info is not None:
            Options(info).add_arguments(command, exp, skip=PY_ONLY)
        command_options.add_arguments(command, options_of(exp))


def main(ns: argparse.Namespace, found: Found) -> int:
    """One run of the experiment, or --repeat N of them."""
    if getattr(ns, "search", None) is not None:
        return repeat.run(ns, lambda one: _search(one, found.engine))
    return repeat.run(ns, lambda one: _run(one, ns.command, found.engine))


class _Progress:
    """'point i/N: size' on stderr for sweeps, only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.total: Optional[int] = None
        self.count = 0

    def start(self, start: dict) -> None:
        self.total = start.get("points")

    def point(self, point: dict) -> None:
        self.count += 1
        if self.enabled:
            of = f"/{self.total}" if self.total else ""
            sys.stderr.write(f"\rpoint {self.count}{of}: {analysis.fmt_size(point.get('size'))}      ")
            sys.stderr.flush()

    def done(self) -> None:
        if self.enabled and self.count:
            sys.stderr.write("\n")


def _start(ns: argparse.Namespace, experiment: str, engine: str, flag: str,
           refuse: Callable[[dict], Optional[str]] = lambda given: None) -> tuple[Optional[list], run.RunSpec]:
    """What a run and a search begin with: the objectives given to `flag` (--slo, --search; None if not given) and
    the run's spec; a usage mistake (`refuse`'s, given the engine options) raises before any folder is made."""
    text = getattr(ns, flag[2:], None)
    try:
        objectives = slo.parse(text) if text is not None else None
    except slo.SloError as e:
        raise FabmeterError(f"{flag}: {e}", EXIT_USAGE) from None
    given = engine_options(engine).given(ns)
    mistake = refuse(given)
    if mistake:
        raise FabmeterError(mistake, EXIT_USAGE)
    remote = ns.server is not None
    if ns.token_file is not None and not remote:
        raise FabmeterError("--token-file goes with --server (a local run makes its own secret)", EXIT_USAGE)
    cpus = parse_cpus(ns.cpus, remote)
    out = out_folder(ns.out) if ns.out else None
    return objectives, run.RunSpec(experiment, given, cpus=cpus, server=ns.server, out=out, engine=engine,
                                   token_file=ns.token_file)


def _run(ns: argparse.Namespace, experiment: str, engine: str) -> int:
    objectives, spec = _start(ns, experiment, engine, "--slo")
    given, out = spec.options, spec.out
    progress = _Progress(enabled=sys.stderr.isatty() and bool(given.get("all")))

    def on_point(point):
        progress.point(point)
        if ns.json:
            print(json.dumps({**point, "slo": slo.evaluate_point(objectives, point)} if objectives else point),
                  flush=True)

    via_hop = getattr(ns, "via_hop", None)
    mistake = hop.unpaired(spec.server, via_hop, getattr(ns, "hop_transport", None))
    if mistake:
        raise FabmeterError(mistake, EXIT_USAGE)
    spec = dataclasses.replace(spec, hop_transport=getattr(ns, "hop_transport", None))
    ran = recorded.run_recorded(spec, objectives, limits=out is not None, command=sys.argv, record_refusal=False,
                                on_start=progress.start, on_point=on_point,
                                via_hop=(via_hop, ns.hop_rounds) if via_hop is not None else None)
    progress.done()
    res, verdict, code = ran.result, ran.verdict, ran.exit_code
    if not ns.json and res.points:
        chosen = ((res.start or {}).get("params") or {}).get("percentiles") or ()
        print(path.header(ran.doc["path"]), flush=True)
        print(analysis.run_report(res.points, chosen, ran.doc.get("limits"), analysis.granted(res.events)),
              flush=True)
        if "hop" in ran.doc:
            print(hop.table(ran.doc["hop"]), flush=True)
        for point in res.points:
            words = analysis.off_cpu_words(point)
            if words:
                print(f"warning: {analysis.fmt_size(point.get('size'))}: {words}", flush=True)
        if (res.start or {}).get("control_channel") == "unauthenticated":
            print("note: no token: the figures are as the server reported them (an unauthenticated control channel; "
                  "docs/security.md)", flush=True)
    if verdict is not None and not ns.json:
        print(shown_lines(slo.table(verdict, res.points)), flush=True)
    if res.exit_code == EXIT_INTERRUPTED:
        where = f"; partial results in {out / 'run.json'}" if out else ""
        sys.stderr.write(f"fabmeter: interrupted{where}\n")
    elif res.exit_code != EXIT_OK:
        where = f" (partial results in {out / 'run.json'})" if out and res.points else ""
        sys.stderr.write(f"fabmeter: error: {shown_lines(res.message)}{where}\n")
    elif code == EXIT_SLO:
        sys.stderr.write(f"fabmeter: {slo.summary(verdict)}\n")
    return code


def _search(ns: argparse.Namespace, engine: str) -> int:
    """`load --search`: one engine run per step (search.py), every point into one run.json."""
    def refuse(given: dict) -> Optional[str]:
        clash = [f"--{k.replace('_', '-')}" for k in ("rate", "of_capacity") if given.get(k) is not None]
        clash += ["--slo"] if ns.slo else []
        return f"--search finds the rate itself: not with {', '.join(clash)}" if clash else None

    objectives, spec = _start(ns, "load", engine, "--search", refuse)
    given, out = spec.options, spec.out
    record = recorded.new_record(spec, command=sys.argv, search=slo.canonical(objectives))
    failed: list = []

    def on_point(point):
        if ns.json:
            print(json.dumps({**point, "slo": slo.evaluate_point(objectives, point)}), flush=True)

    def run_point(options: dict) -> Optional[dict]:
        res = recorded.execute_into(record, dataclasses.replace(spec, options={**given, **options}),
                                    limits=out is not None, on_point=on_point)
        if res.exit_code != EXIT_OK or not res.points:
            failed.append(res)
            return None
        return res.points[-1]

    def say(line: str) -> None:
        (sys.stderr if ns.json else sys.stdout).write(line + "\n")
        (sys.stderr if ns.json else sys.stdout).flush()

    outcome = search.search(objectives, run_point, say)
    record.doc["search"] = outcome
    res = failed[0] if failed else None
    code = res.exit_code if res else (EXIT_OK if outcome["rate_rps"] else EXIT_SLO)
    record.finish(res.status if res else "ok", res.message if res else "", code)
    if ns.json:
        print(json.dumps({"type": "search", **{k: v for k, v in outcome.items() if k != "steps"}}), flush=True)
    found = (f"{analysis.fmt_num(outcome['rate_rps'], 0)} requests/s" if outcome["rate_rps"] else "none")
    say(path.header(record.doc["path"]))
    say(f"search: the highest offered rate holding {outcome['objectives']}: {found} "
        f"(capacity {analysis.fmt_num(outcome['capacity_rps'], 0)}/s; {len(outcome['steps'])} runs; {outcome['why']})")
    if res:
        sys.stderr.write(f"fabmeter: error: {shown_lines(res.message)}\n")
    return code
