"""`fabmeter suite FILE.toml`: its options; the suite is read (read.py) and run (runner.py) only when it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from fabmeter import command_options
from fabmeter.command_options import CommandOption, Found
from fabmeter.cpus import parse_cpus
from fabmeter.errors import EXIT_USAGE, FabmeterError
from fabmeter.suite import cut

OPTIONS = (
    CommandOption("file", "the suite, e.g. suites/quick.toml", metavar="FILE.toml", positional=True),
    CommandOption("out", "results folder (default: results/<suite name>)", metavar="DIR"),
    CommandOption("dry-run", "check the suite and list its points; run nothing", flag=True),
    CommandOption("cpus", "client and server CPUs for every point (overrides the suite)", metavar="A,B"),
    CommandOption("server", "run every point against a server started elsewhere with `fabmeter serve` (overrides "
                            "the suite's `server`; its secret from $FABMETER_TOKEN); --cpus then pins the client only",
                  metavar="HOST[:PORT]"),
    CommandOption("via-hop", "with --server: every lat, oneway and stream point also through the forwarding hop at "
                             "HOST[:PORT] (`fabmeter-engine forward --to SERVER` there, or a `fabmeter serve --hop-to SERVER`), "
                             "as `fabmeter lat --via-hop` "
                             "(overrides the suite's `via_hop`)", metavar="HOST[:PORT]"),
    CommandOption("token-file", "the serves' shared secret, for every point that runs against one (default: "
                                "$FABMETER_TOKEN)", metavar="F"),
    CommandOption("set", cut.SET_HELP, metavar="KEY=VALUE", repeat=True),
    CommandOption("only", cut.ONLY_HELP, metavar="PATTERN", repeat=True),
)


def add_parser(sub, info: Optional[dict]) -> None:
    command = sub.add_parser("suite", help="run a TOML suite: experiments x transports x options (docs/suites.md)",
                             allow_abbrev=False)
    command_options.add_arguments(command, OPTIONS)


def main(ns, found: Found) -> int:
    from fabmeter.suite import runner
    try:
        sets = dict(cut.parse_set(text) for text in ns.set or [])
    except cut.CutError as e:
        raise FabmeterError(str(e), EXIT_USAGE) from None
    return runner.main(Path(ns.file), Path(ns.out) if ns.out else None, ns.dry_run, found.engine,
                       parse_cpus(ns.cpus, remote=bool(ns.server)) if ns.cpus else None, parse_cpus(None),
                       server=ns.server, token_file=ns.token_file, sets=sets, only=ns.only or [],
                       via_hop=ns.via_hop)
