"""One recorded run: the engines' run (run.py) into run.json (results.py), its latency objectives checked
(slo.py). The CLI, `load --search`, suites, the bench, the demo and `fabmeter peers` make their runs so.

The machine's limits between the run's two CPUs are measured before the run only when the caller asks
(`limits`) and the environment does not say FABMETER_LIMITS=off (a test hook, docs/cli.md): they take about
0.7 s and are worth it only where run.json is kept.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from fabmeter import hop, run, slo
from fabmeter.engine import dry_run, engine_options, find_engine
from fabmeter.errors import EXIT_INTERRUPTED, EXIT_USAGE, FabmeterError
from fabmeter.results import RunRecord, out_folder, run_config

# The limits recorded beside a run: about 0.7 s, 0.2 s of it the hiccup detector on every allowed CPU.
LIMITS_ITERS = 20000
LIMITS_ARGS = ["--timer-wakeups", "50", "--wakeup-round-trips", "100", "--schedule-steps", "10000",
               "--connects", "100", "--hiccups", "--hiccup-seconds", "0.2"]

LIMITS_HOOK = "FABMETER_LIMITS"   # "off": no limits beside a run (docs/cli.md, test hooks)


@dataclass
class Recorded:
    result: run.RunResult
    exit_code: int                # the run's own, else EXIT_SLO when it missed an objective
    verdict: Optional[dict]       # slo.evaluate's (None: no objectives, or the run never started)
    doc: dict                     # run.json as written (only in memory without spec.out)


def equivalent_command(spec: run.RunSpec, objectives: Optional[str] = None) -> list[str]:
    """The `fabmeter` command line that makes the same run (`objectives`: its --slo)."""
    engine = spec.engine or find_engine()
    return (["fabmeter", spec.experiment, *engine_options(engine).engine_argv(spec.options)]
            + (["--slo", objectives] if objectives else [])
            + (["--cpus", ",".join(map(str, spec.cpus))] if spec.cpus else [])
            + (["--server", spec.server] if spec.server else [])
            + (["--out", str(spec.out)] if spec.out else []))


def measure_limits(spec: run.RunSpec) -> Optional[dict]:
    """The machine's limits between the run's two CPUs (each side's first: where its session thread runs),
    sized for its message. None where they cannot be measured (a remote server's CPU is on another host;
    unpinned, or both ends on one CPU) or the probe failed. Measured before the engines start, so neither
    disturbs the other; the engine checks the run's options first, so the probe never copies a message the
    run would refuse: raises that refusal, and Ctrl-C."""
    if spec.server is not None or not spec.cpus:
        return None
    cpus = tuple(int(str(c).split("+")[0]) for c in spec.cpus)
    if len(set(cpus)) < 2:
        return None
    engine = spec.engine or find_engine()
    dry_run(engine, spec.experiment, engine_options(engine).engine_argv(spec.options))
    args = list(LIMITS_ARGS) + (["--sizes", str(spec.options["size"])] if "size" in spec.options else [])
    try:
        return run.run_limits(cpus, LIMITS_ITERS, engine, timeout=30, args=args)
    except FabmeterError as e:
        if e.exit_code == EXIT_INTERRUPTED:
            raise
        return None


def new_record(spec: run.RunSpec, objectives: Optional[list[slo.Objective]] = None,
               command: Optional[list[str]] = None, **config_more) -> RunRecord:
    """The run.json of a run set up as `spec` (`objectives`: its --slo; `command`: the command line it records,
    by default the `fabmeter` command that makes the same run; `config_more`: more keys of its "config")."""
    text = slo.canonical(objectives) if objectives else None
    config = run_config(spec.experiment, spec.cpus, spec.server, spec.engine or find_engine(), slo=text,
                        **config_more)
    return RunRecord(spec.out, config, command=command if command is not None else equivalent_command(spec, text),
                     relay=spec.via)


def execute_into(record: RunRecord, spec: run.RunSpec, limits: bool = False,
                 on_start: Optional[Callable[[dict], None]] = None,
                 on_point: Optional[Callable[[dict], None]] = None) -> run.RunResult:
    """One engine run whose lines go into `record` as they come, then to `on_start` / `on_point`.
    `limits`: measure_limits first and record them. The record is left unfinished: a search puts
    several runs into one."""
    if spec.out is not None:
        out_folder(spec.out)   # the engine makes only the last level
    if limits and os.environ.get(LIMITS_HOOK) != "off":
        try:
            measured = measure_limits(spec)
        except FabmeterError as e:
            return run.RunResult(status="interrupted" if e.exit_code == EXIT_INTERRUPTED else "failed",
                                 exit_code=e.exit_code, message=e.message)
        if measured:
            record.on_event(measured)

    def started(start: dict) -> None:
        record.on_start(start)
        if on_start is not None:
            on_start(start)

    def point(p: dict) -> None:
        record.on_point(p)
        if on_point is not None:
            on_point(p)
    return run.execute(spec, on_start=started, on_point=point, on_event=record.on_event)


def run_recorded(spec: run.RunSpec, objectives: Optional[list[slo.Objective]] = None, limits: bool = False,
                 command: Optional[list[str]] = None, record_refusal: bool = True,
                 on_start: Optional[Callable[[dict], None]] = None,
                 on_point: Optional[Callable[[dict], None]] = None, via_hop: Optional[tuple[str, int]] = None,
                 **config_more) -> Recorded:
    """One run into spec.out/run.json, which follows every engine line and ends with the run's status, exit
    code and the verdict on `objectives` (checked over every point). `limits`, `on_start`, `on_point`: as
    execute_into's; `command`, `config_more`: as new_record's. `record_refusal` False (a command line of the
    user's): a run the engine refused before it started (bad arguments, exit 2) leaves run.json unwritten.
    `via_hop` (HOST[:PORT], rounds): the direct runs alternated with runs through that hop (hop.py), run.json's
    "hop" their comparison."""
    record = new_record(spec, objectives, command, **config_more)
    try:
        if via_hop is None:
            res = execute_into(record, spec, limits, on_start, on_point)
        else:
            res, record.doc["hop"] = hop.measure(spec, *via_hop,
                                                 lambda s: execute_into(record, s, limits, on_start, on_point))
    except KeyboardInterrupt:     # between the engines' signal forwarding: the record says so too
        record.finish("interrupted", "interrupted", EXIT_INTERRUPTED)
        raise
    verdict = slo.evaluate(objectives, res.points) if objectives and res.start is not None else None
    code = slo.exit_code(res.exit_code, verdict)
    if record_refusal or not (res.exit_code == EXIT_USAGE and res.start is None):
        record.finish(res.status, res.message, code, slo=verdict)
    return Recorded(res, code, verdict, record.doc)
