"""`fabmeter serve`: its options, handed as they are to `fabmeter-engine serve`, which checks them and
holds their defaults (docs/cli.md#fabmeter-serve)."""

from __future__ import annotations

import argparse
from typing import Optional

from fabmeter import command_options, run
from fabmeter.command_options import CommandOption, Found
from fabmeter.errors import EXIT_INTERNAL

OPTIONS = (
    CommandOption("bind", "address to listen on", metavar="ADDR"),
    CommandOption("port", "port to listen on (0: any free port)", metavar="N"),
    CommandOption("cpu", "pin the server to this CPU", metavar="N"),
    CommandOption("once", "exit after one session, with its exit code (a connection that never authenticated is "
                          "none; others are answered busy meanwhile)", flag=True),
    CommandOption("data-dir", "server-side outputs (a stream's file sink, sent back to the client) go to one fresh "
                              "0700 subdirectory per session here (default: a private temporary directory, removed "
                              "at exit if empty)", metavar="DIR"),
    CommandOption("max-memory", "refuse a session whose plan needs more memory here (K/M/G/T suffixes; default: a "
                                "quarter of RAM)", metavar="BYTES"),
    CommandOption("max-duration", "refuse a plan stating a longer run, and end a session running longer (default: "
                                  "3600; 0: no limit)", metavar="SEC"),
    CommandOption("max-sessions", "sessions at once (1 .. 1024), one process each, taken only by clients that have "
                                  "authenticated; more are refused with 'busy' (default: 4)", metavar="N"),
    CommandOption("handshake-timeout-ms", "how long a connection has for its first word, then its hello, then its "
                                          "proof (100 .. 60000); one that stalls longer is dropped (default: 2000)",
                  metavar="MS"),
    CommandOption("token-file", "admit only clients that know the secret in F (default: $FABMETER_TOKEN)",
                  metavar="F"),
    CommandOption("relay-to", "the servers (hosts as clients name them) this one may run a client against for an "
                              "authenticated client (`fabmeter mesh --launch serve`); needs a token (default: none)",
                  metavar="HOST,..."),
    CommandOption("hop-to", "the servers (hosts as clients name them) to which this one forwards an authenticated "
                            "client's session as a hop (`fabmeter lat --server S --via-hop THIS`); needs a token "
                            "(default: none)", metavar="HOST,..."),
    CommandOption("log-format", "each session's line on stderr when it ends (client address, experiment, transport, "
                                "outcome, duration): text or json, one object a line (default: text)",
                  metavar="FORMAT", choices=("text", "json")),
)


def add_parser(sub, info: Optional[dict]) -> None:
    command = sub.add_parser("serve", help="serve sessions for clients on other hosts", allow_abbrev=False,
                             description="Serve sessions for `fabmeter EXP --server HOST`, each in a process of its "
                                         "own. Nothing a client sends names a path on this host; docs/security.md "
                                         "lists what a client can make the server do.")
    command_options.add_arguments(command, OPTIONS)


def main(ns: argparse.Namespace, found: Found) -> int:
    """Becomes `fabmeter-engine serve` with the options given (the engine's defaults for the others)."""
    args = []
    for o in OPTIONS:
        value = getattr(ns, o.key)
        if o.flag and value:
            args.append(f"--{o.name}")
        elif not o.flag and value is not None:
            args += [f"--{o.name}", str(value)]
    run.exec_server(args)  # does not return
    return EXIT_INTERNAL
