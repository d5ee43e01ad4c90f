"""`fabmeter report`: its options, and the HTML written (html.py) where it draws (matplotlib, imported only here)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from fabmeter import command_options
from fabmeter.command_options import CommandOption, Found
from fabmeter.errors import EXIT_INTERNAL, EXIT_OK, FabmeterError
from fabmeter.results import out_folder

OPTIONS = (
    CommandOption("results", "searched recursively for run.json and peers.json", metavar="RESULTS_DIR",
                  positional=True),
    CommandOption("output", "the HTML file (default: RESULTS_DIR/report.html)", metavar="FILE", short="o"),
    CommandOption("compare", "put RESULTS_DIR against the results folder BASE first, as `fabmeter compare BASE "
                             "RESULTS_DIR` does", metavar="BASE"),
)


def add_parser(sub, info: Optional[dict]) -> None:
    command = sub.add_parser("report", help="one self-contained HTML report of a results folder", allow_abbrev=False)
    command_options.add_arguments(command, OPTIONS)


def main(ns, found: Found) -> int:
    try:
        from fabmeter.report import html
    except ModuleNotFoundError as e:
        if e.name != "matplotlib":
            raise
        raise FabmeterError("fabmeter report draws with matplotlib, which is not installed: "
                            "pip install 'fabmeter[report]'", EXIT_INTERNAL) from None
    output = out_folder(Path(ns.output).parent, "-o") / Path(ns.output).name if ns.output else None
    print(html.write(Path(ns.results), output, Path(ns.compare) if ns.compare else None))
    sys.stdout.flush()
    return EXIT_OK
