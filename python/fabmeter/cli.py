"""The `fabmeter` command.

The experiment subcommands (lat, oneway, bw, stream, check, load, setup) get their
options from `fabmeter-engine options` (options.py), so names, types,
choices, help and defaults live in one place, the engine's option table.
Only options that concern orchestration are defined here: --cpus, --json,
--out, --server, --token-file, --slo (slo.py); serve's, mesh's, watch's and
peers' own are data in serve.py, mesh/command.py, watch/command.py and
peers/command.py (command_options.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Optional

from fabmeter import __version__, analysis, path, recorded, repeat, run, search, serve, slo, suggest
from fabmeter.engine import engine_info, engine_options, find_engine
from fabmeter.errors import (EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_SLO, EXIT_USAGE, FabmeterError)
from fabmeter.mesh import command as mesh_command
from fabmeter.options import PY_ONLY, Options
from fabmeter.terminal import shown, shown_lines
from fabmeter.results import out_folder

EXPERIMENTS_HELP = {
    "lat": "round-trip ping-pong; reports the round-trip time (RTT) and one-way = RTT/2",
    "oneway": "one-way latency of bursts (sender and receiver share the clock)",
    "bw": "streaming bandwidth and message rate",
    "stream": "a real-time stream at a fixed rate: latency, missed steps, deadline misses",
    "check": "conformance: sizes up to the transport's maximum, content, order, event-mode wake-up",
    "load": "open-loop request/response: tail latency against offered rate (workloads W1-W5, server pools)",
    "setup": "setup costs: connection establishment, memory registration by size (with and without huge pages)",
}
EXIT_CODES = ("exit codes: 0 ok, 1 engine missing or crashed, 2 bad input, 3 the run failed, "
              "4 a --slo objective was missed, 130 interrupted (docs/cli.md).")


class _Parser(suggest.Parser):
    """Bad arguments give one line on stderr and exit 2, not the usage block."""

    def error(self, message):
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        die(f"{sub}{message}", EXIT_USAGE)


def die(message: str, code: int):
    sys.stderr.write(f"fabmeter: error: {shown_lines(message)}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def build_parser(info: Optional[dict], engine_problem: str = "") -> _Parser:
    parser = _Parser(prog="fabmeter", allow_abbrev=False,
                     description="Measure one-way/round-trip latency, bandwidth and real-time streams over real transports.",
                     epilog=(f"note: {engine_problem} " if info is None else
                             "`fabmeter COMMAND --help` lists a command's options. ") + EXIT_CODES)
    parser.add_argument("--version", action="version", version=f"fabmeter {__version__}"
                        + (f" (engine {info.get('version')}; transports: {', '.join(info.get('transports', []))}"
                           + (f"; unavailable: {', '.join(info['transports_unavailable'])}"
                              if info.get("transports_unavailable") else "") + ")" if info else ""))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    experiments = (info or {}).get("experiments") or list(EXPERIMENTS_HELP)
    for exp in experiments:
        desc = EXPERIMENTS_HELP.get(exp, exp)
        full = desc + (f". Engine options are unavailable: {engine_problem}" if info is None else "")
        command = sub.add_parser(exp, help=desc, description=full, allow_abbrev=False)
        if info is not None:
            Options(info).add_arguments(command, exp, skip=PY_ONLY)
        command.add_argument("--cpus", metavar="A,B",
                       help="pin the client to CPU A and the local server to CPU B (default: the first two CPUs; "
                            "none: unpinned); A+A2+...,B+B2+...: with --flows, each end's flows on its CPUs in turn")
        command.add_argument("--json", action="store_true",
                       help="print one JSON object per measured point (JSON Lines for sweeps)")
        command.add_argument("--out", metavar="DIR", help="write DIR/run.json and the raw samples (.npy)")
        command.add_argument("--repeat", metavar="N", type=repeat.count, default=1, help=repeat.HELP)
        command.add_argument("--server", metavar="HOST[:PORT]",
                       help="use a server started elsewhere with `fabmeter serve` (two-host mode)")
        command.add_argument("--token-file", metavar="F",
                       help="with --server: the server's shared secret (default: $FABMETER_TOKEN)")
        if slo.applies(exp):
            command.add_argument("--slo", metavar="OBJECTIVES", help=slo.HELP)
        if exp == "load":
            command.add_argument("--search", metavar="OBJECTIVES", help=search.HELP)

    mesh_command.add_parser(sub, info)

    serve.add_parser(sub)

    sub.add_parser("transports", allow_abbrev=False,
                   help="every transport: available, or unavailable and why (a plugin's library missing, ...)",
                   description="Lists every transport the engine knows of: available (built in: shm, tcp, udp; "
                               "or a plugin loaded from the engine's plugin directory, $FABMETER_PLUGIN_DIR if set), "
                               "or unavailable with the reason. A run naming an unavailable transport exits 2 "
                               "with that reason.")

    command = sub.add_parser("demo", help="compare every transport and polling mode on this machine",
                       allow_abbrev=False)
    command.add_argument("--out", metavar="DIR", default="results/demo", help="results folder (default: %(default)s)")
    command.add_argument("--cpus", metavar="A,B", help="client and server CPUs (default: the first two CPUs)")

    command = sub.add_parser("bench", help="fabmeter beside the peer tools and the machine's limits, with targets",
                       allow_abbrev=False)
    command.add_argument("--out", metavar="DIR", default="results/bench", help="results folder (default: %(default)s)")
    command.add_argument("--rounds", metavar="K", type=int, default=5, help="rounds, alternating configurations (default: 5)")
    command.add_argument("--cpus", metavar="A,B", help="the two CPUs (default: the first two CPUs)")

    command = sub.add_parser("suite", help="run a TOML suite: experiments x transports x options (docs/suites.md)",
                       allow_abbrev=False)
    command.add_argument("file", metavar="FILE.toml", help="the suite, e.g. suites/quick.toml")
    command.add_argument("--out", metavar="DIR", help="results folder (default: results/<suite name>)")
    command.add_argument("--dry-run", action="store_true", help="check the suite and list its points; run nothing")
    command.add_argument("--cpus", metavar="A,B", help="client and server CPUs for every point (overrides the suite)")
    command.add_argument("--server", metavar="HOST[:PORT]",
                         help="run every point against a server started elsewhere with `fabmeter serve` (overrides "
                              "the suite's `server`; its secret from $FABMETER_TOKEN); --cpus then pins the client only")

    command = sub.add_parser("report", help="one self-contained HTML report of a results folder", allow_abbrev=False)
    command.add_argument("results", metavar="RESULTS_DIR", help="searched recursively for run.json and peers.json")
    command.add_argument("-o", "--output", metavar="FILE", help="the HTML file (default: RESULTS_DIR/report.html)")
    command.add_argument("--compare", metavar="BASE", help="put RESULTS_DIR against the results folder BASE first, "
                                                          "as `fabmeter compare BASE RESULTS_DIR` does")

    from fabmeter.peers import command as peers_command
    peers_command.add_parser(sub)
    from fabmeter import compare
    compare.add_parser(sub)
    from fabmeter.watch import command as watch_command
    watch_command.add_parser(sub, info)
    return parser


def parse_cpus(text: Optional[str], remote: bool = False) -> Optional[tuple]:
    """--cpus A,B -> (A, B); the default is the first two CPUs we may run on; `none`: unpinned (None).
    A side may name several CPUs, A+A2+...: that end's --flows threads take them in turn (kept as the
    engine's --cpu text, "A+A2"; a side of one CPU stays an int)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except OSError:
        allowed = list(range(os.cpu_count() or 1))
    if text == "none":
        return None
    if text is None:
        if remote:
            return (allowed[0],) if allowed else None
        return (allowed[0], allowed[1]) if len(allowed) >= 2 else None
    expected = f"--cpus: expected A,B (client and server CPUs; a side may be A+A2+... for --flows), got '{text}'"
    try:
        sides = [[int(x) for x in side.split("+")] for side in text.split(",")]
    except ValueError:
        die(expected, EXIT_USAGE)
    if len(sides) != 2 and not (remote and len(sides) == 1):
        die(expected, EXIT_USAGE)
    bad = [c for side in sides for c in side if c not in allowed]
    if bad:
        die(f"--cpus: CPU {bad[0]} is not available (allowed: {','.join(map(str, allowed))})", EXIT_USAGE)
    return tuple(side[0] if len(side) == 1 else "+".join(map(str, side)) for side in sides)


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


def cmd_experiment(ns: argparse.Namespace, experiment: str, engine: str) -> int:
    """One run of the experiment, or --repeat N of them."""
    if getattr(ns, "search", None) is not None:
        return repeat.run(ns, lambda one: cmd_search(one, engine))
    return repeat.run(ns, lambda one: cmd_run(one, experiment, engine))


def cmd_run(ns: argparse.Namespace, experiment: str, engine: str) -> int:
    try:
        objectives = slo.parse(ns.slo) if getattr(ns, "slo", None) is not None else None
    except slo.SloError as e:
        die(f"--slo: {e}", EXIT_USAGE)
    given = engine_options(engine).given(ns)
    remote = ns.server is not None
    if ns.token_file is not None and not remote:
        die("--token-file goes with --server (a local run makes its own secret)", EXIT_USAGE)
    cpus = parse_cpus(ns.cpus, remote)
    out = out_folder(ns.out) if ns.out else None
    progress = _Progress(enabled=sys.stderr.isatty() and bool(given.get("all")))

    def on_point(point):
        progress.point(point)
        if ns.json:
            print(json.dumps({**point, "slo": slo.evaluate_point(objectives, point)} if objectives else point),
                  flush=True)

    spec = run.RunSpec(experiment, given, cpus=cpus, server=ns.server, out=out, engine=engine,
                       token_file=ns.token_file)
    ran = recorded.run_recorded(spec, objectives, limits=out is not None, command=sys.argv, record_refusal=False,
                                on_start=progress.start, on_point=on_point)
    progress.done()
    res, verdict, code = ran.result, ran.verdict, ran.exit_code
    if not ns.json and res.points:
        chosen = ((res.start or {}).get("params") or {}).get("percentiles") or ()
        print(path.header(ran.doc["path"]), flush=True)
        print(analysis.run_report(res.points, chosen, ran.doc.get("limits"), analysis.granted(res.events)),
              flush=True)
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


def cmd_search(ns: argparse.Namespace, engine: str) -> int:
    """`load --search`: one engine run per step (search.py), every point into one run.json."""
    try:
        objectives = slo.parse(ns.search)
    except slo.SloError as e:
        die(f"--search: {e}", EXIT_USAGE)
    given = engine_options(engine).given(ns)
    clash = [f"--{k.replace('_', '-')}" for k in ("rate", "of_capacity") if given.get(k) is not None]
    clash += ["--slo"] if ns.slo else []
    if clash:
        die(f"--search finds the rate itself: not with {', '.join(clash)}", EXIT_USAGE)
    if ns.token_file is not None and ns.server is None:
        die("--token-file goes with --server (a local run makes its own secret)", EXIT_USAGE)
    cpus = parse_cpus(ns.cpus, ns.server is not None)
    out = out_folder(ns.out) if ns.out else None
    spec = run.RunSpec("load", given, cpus=cpus, server=ns.server, out=out, engine=engine, token_file=ns.token_file)
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


def cmd_transports(info: dict) -> int:
    """One line a transport, as `fabmeter-engine transports` says it."""
    unavailable = info.get("transports_unavailable") or {}
    devices = info.get("transport_devices") or {}
    plugins = info.get("plugin_dir", "")
    for name in [*info.get("transports", []), *unavailable]:
        if name in unavailable:
            print(f"{name}: unavailable: {shown(unavailable[name])}")
        elif name in devices:
            print(f"{name}: available; devices: {shown(', '.join(devices[name]))}" if devices[name] else
                  f"{name}: library present, no RDMA device (/sys/class/infiniband lists none)")
        else:
            print(f"{name}: available")
    if plugins:
        print(f"(plugin directory: {plugins})")
    return EXIT_OK


def main(argv: Optional[list[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    info, engine, problem = None, None, ""
    try:
        engine = find_engine()
        info = engine_info(engine)
    except FabmeterError as e:
        problem = e.message

    parser = build_parser(info, problem)
    ns, extras = parser.parse_known_args(argv)
    if ns.command in EXPERIMENTS_HELP and info is None:
        die(problem, EXIT_INTERNAL)
    if extras:
        # Say why an engine option is refused here rather than just "unrecognized".
        for word in extras:
            if word.split("=", 1)[0] == "--slo" and not slo.applies(ns.command):
                die(slo.refusal(ns.command), EXIT_USAGE)
            opt = Options(info).find(word) if info and word.startswith("-") else None
            if opt is not None:
                die(f"{word.split('=', 1)[0]} does not apply to '{ns.command}' (only to {opt.scope})", EXIT_USAGE)
        die(suggest.unrecognized(ns, extras), EXIT_USAGE)

    try:
        if ns.command in EXPERIMENTS_HELP or (info and ns.command in info.get("experiments", [])):
            code = cmd_experiment(ns, ns.command, engine)
        elif ns.command == "mesh":
            if info is None:
                die(problem, EXIT_INTERNAL)
            code = mesh_command.main(ns, engine)
        elif ns.command == "serve":
            code = serve.main(ns)
        elif ns.command == "transports":
            if info is None:
                die(problem, EXIT_INTERNAL)
            code = cmd_transports(info)
        elif ns.command == "demo":
            from fabmeter import demo
            code = demo.main(out_folder(ns.out), parse_cpus(ns.cpus))
        elif ns.command == "bench":
            from fabmeter import bench
            if ns.rounds < 1:
                die("--rounds must be at least 1", EXIT_USAGE)
            code = bench.main(out_folder(ns.out), ns.rounds, parse_cpus(ns.cpus))
        elif ns.command == "suite":
            from fabmeter.suite import runner
            if info is None:
                die(problem, EXIT_INTERNAL)
            code = runner.main(Path(ns.file), Path(ns.out) if ns.out else None, ns.dry_run, engine,
                               parse_cpus(ns.cpus, remote=bool(ns.server)) if ns.cpus else None, parse_cpus(None),
                               server=ns.server)
        elif ns.command == "report":
            try:
                from fabmeter.report import html as report_html
            except ModuleNotFoundError as e:
                if e.name != "matplotlib":
                    raise
                die("fabmeter report draws with matplotlib, which is not installed: "
                    "pip install 'fabmeter[report]'", EXIT_INTERNAL)
            output = out_folder(Path(ns.output).parent, "-o") / Path(ns.output).name if ns.output else None
            code = report_html.main(Path(ns.results), output, Path(ns.compare) if ns.compare else None)
        elif ns.command == "peers":
            from fabmeter.peers import command as peers_command
            code = repeat.run(ns, lambda one: peers_command.main(one, parse_cpus(one.cpus), engine, problem))
        elif ns.command == "compare":
            from fabmeter import compare
            code = compare.main(ns)
        elif ns.command == "watch":
            from fabmeter.watch import command as watch_command
            if info is None:
                die(problem, EXIT_INTERNAL)
            code = watch_command.main(ns, engine, engine_options(engine))
        else:
            parser.error(f"unknown command {ns.command}")
    except FabmeterError as e:
        if e.exit_code == EXIT_INTERRUPTED:
            sys.stderr.write("fabmeter: interrupted\n")
            code = e.exit_code
        else:
            die(e.message, e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("fabmeter: interrupted\n")
        code = EXIT_INTERRUPTED
    sys.exit(code)


if __name__ == "__main__":
    main()
