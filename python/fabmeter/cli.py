"""The `fabmeter` command: the table of its commands, each one module of the same shape (command_options.py):
its options as data (OPTIONS), `add_parser(sub, info)` and `main(ns, found)`. The experiments (as the engine
lists them) are experiment_command.py's; their engine options come from `fabmeter-engine options` (options.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Optional

from fabmeter import __version__, slo, suggest
from fabmeter.command_options import Found
from fabmeter.engine import engine_info, find_engine
from fabmeter.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, FabmeterError
from fabmeter.options import Options
from fabmeter.terminal import shown_lines

EXIT_CODES = ("exit codes: 0 ok, 1 engine missing or crashed, 2 bad input, 3 the run failed, "
              "4 a --slo objective was missed (doctor: a fail finding), 130 interrupted (docs/cli.md).")


@dataclass(frozen=True)
class Command:
    name: str                           # docs/cli.md's: the command, or EXPERIMENT for the experiments
    module_name: str                    # its module: OPTIONS, add_parser(sub, info), main(ns, found)
    engine: bool                        # needs the engine: refused without one, with the reason (exit 1)

    @property
    def module(self) -> ModuleType:
        """Imported on first use: a run imports its own command's code only (every CLI call pays the imports)."""
        return importlib.import_module(self.module_name)


# In --help's order. A module may add several commands (the experiments).
COMMANDS = (
    Command("EXPERIMENT", "fabmeter.experiment_command", engine=True),
    Command("mesh", "fabmeter.mesh.command", engine=True),
    Command("serve", "fabmeter.serve", engine=False),
    Command("transports", "fabmeter.transports_command", engine=True),
    Command("demo", "fabmeter.demo", engine=False),
    Command("bench", "fabmeter.bench", engine=False),
    Command("suite", "fabmeter.suite.command", engine=True),
    Command("report", "fabmeter.report.command", engine=False),
    Command("peers", "fabmeter.peers.command", engine=False),
    Command("compare", "fabmeter.compare", engine=False),
    Command("doctor", "fabmeter.doctor.command", engine=True),
    Command("watch", "fabmeter.watch.command", engine=True),
)


def named(word: Optional[str], info: Optional[dict]) -> Optional[Command]:
    """The command `word` names (an experiment the engine lists: EXPERIMENT), or None."""
    experiments = (info or {}).get("experiments") or ()
    return next((c for c in COMMANDS if c.name == word or (c.name == "EXPERIMENT" and word in experiments)), None)


class _Parser(suggest.Parser):
    """Bad arguments give one line on stderr and exit 2, not the usage block."""

    def error(self, message):
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        die(f"{sub}{message}", EXIT_USAGE)


def die(message: str, code: int):
    sys.stderr.write(f"fabmeter: error: {shown_lines(message)}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def build_parser(info: Optional[dict], engine_problem: str = "", only: Optional[Command] = None) -> _Parser:
    """Every command's parser, or `only` that command's (the rest are then neither imported nor listed)."""
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
    for command in (only,) if only else COMMANDS:
        before = set(sub.choices)
        command.module.add_parser(sub, info)
        for name in set(sub.choices) - before:     # the commands this module added run its main
            sub.choices[name].set_defaults(command_entry=command)
    return parser


def main(argv: Optional[list[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        engine = find_engine()
        found = Found(engine, engine_info(engine))
    except FabmeterError as e:
        found = Found(None, None, e.message)

    # The command word comes first (the only options before it are --help and --version): a call that names
    # a command builds its parser alone; any other (help, a typo: its suggestion) builds them all.
    parser = build_parser(found.info, found.problem, named(argv[0] if argv else None, found.info))
    ns, extras = parser.parse_known_args(argv)
    command: Command = ns.command_entry
    if command.engine and found.info is None:
        die(found.problem, EXIT_INTERNAL)
    if extras:
        # Say why an engine option is refused here rather than just "unrecognized".
        for word in extras:
            if word.split("=", 1)[0] == "--slo" and not slo.applies(ns.command):
                die(slo.refusal(ns.command), EXIT_USAGE)
            opt = Options(found.info).find(word) if found.info and word.startswith("-") else None
            if opt is not None:
                die(f"{word.split('=', 1)[0]} does not apply to '{ns.command}' (only to {opt.scope})", EXIT_USAGE)
        die(suggest.unrecognized(ns, extras), EXIT_USAGE)

    try:
        code = command.module.main(ns, found)
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
