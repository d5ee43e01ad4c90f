"""The shape of every fabmeter command: its options as data, an `add_parser`, a `main`.

Each command's module keeps one list of `CommandOption`s (`OPTIONS`). From it
come its argparse options (so its --help), a suite's keys where a suite takes
the command's options (suite/read.py, suite/peer.py) and the command's table in
docs/cli.md (scripts/gen-cli-doc.py): a knob is written once. The experiments'
engine options are the engine's table (options.py); cli.py holds the table of
commands and hands each `main` the engine it found (`Found`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence


@dataclass(frozen=True)
class Found:
    """What every command's main is handed: the engine (its path and what it reports), or why there is none."""
    engine: Optional[str]
    info: Optional[dict]
    problem: str = ""


@dataclass(frozen=True)
class CommandOption:
    name: str                                   # --name on the command line
    help: str                                   # as --help shows it; %(default)s (or %(default)g) is the default
    metavar: str | tuple[str, ...] = ""         # a tuple: the option takes that many words (--pair SRC DST)
    type: Optional[Callable[[str], Any]] = None  # int, float or a parser; None: the text as given
    default: Any = None
    choices: tuple[str, ...] = ()
    flag: bool = False                          # takes no value: True when given
    repeat: bool = False                        # may be given again: ns.<key> is the list of them
    dest: str = ""                              # ns.<dest>; default: the name with '_'
    short: str = ""                             # a one-letter spelling as well (-s), as the experiments' -s, -n
    positional: bool = False                    # a word in its place (FILE.toml), not --name: the name is its key
    many: bool = False                          # positional: one or more words (ns.<key> is their list)

    @property
    def key(self) -> str:
        return self.dest or self.name.replace("-", "_")

    def help_text(self) -> str:
        """The help as --help prints it (the default filled in)."""
        return self.help % {"default": self.default}


def add_arguments(parser: argparse.ArgumentParser, options: Sequence[CommandOption]) -> None:
    """The options, in their order, onto an argparse (sub)parser."""
    for o in options:
        if o.positional:
            parser.add_argument(o.key, metavar=o.metavar, nargs="+" if o.many else None, help=o.help)
            continue
        spellings = (f"-{o.short}", f"--{o.name}") if o.short else (f"--{o.name}",)
        if o.flag:
            parser.add_argument(*spellings, action="store_true", dest=o.key, help=o.help)
            continue
        words = len(o.metavar) if isinstance(o.metavar, tuple) else None
        parser.add_argument(*spellings, action="append" if o.repeat else "store", dest=o.key, help=o.help,
                            metavar=o.metavar or None, nargs=words, type=o.type, default=o.default,
                            choices=o.choices or None)
