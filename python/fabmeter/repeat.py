"""`--repeat N`: a command's whole run N times, one after another, each a full run of its own.

Run 1 of every point, then run 2 of every point, ...: a run is all its
points, so a point's repeats lie apart in time with the others between them.
With --out OUT they go to OUT/r1 .. OUT/rN, each what one run writes to
OUT; compare, report and suites read the runs of a point below a folder as
its repeats (a suite's own `repeat` key does the same for its points).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from fabmeter.errors import EXIT_OK, EXIT_SLO

MAX = 100   # repeats of a run, as of a suite's points
HELP = ("run it N times, whole runs one after another, into OUT/r1 .. OUT/rN (each a full run); compare reads "
        "them as N runs, which a verdict across runs needs (3 or more a side; default: %(default)s)")


def count(text: str) -> int:
    """--repeat's value: a whole number from 1 to MAX."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX:
        raise argparse.ArgumentTypeError(f"expected a whole number of runs from 1 to {MAX}, got '{text}'")
    return n


count.__name__ = "count"   # argparse's error names the type


def folder(out: str, i: int) -> str:
    """Repeat i's results folder below OUT."""
    return str(Path(out) / f"r{i}")


def run(ns: argparse.Namespace, once: Callable[[argparse.Namespace], int]) -> int:
    """`once(ns)` ns.repeat times, each with its own --out below ns.out. Stops at a run that failed (exit
    codes but 0 and 4, a missed objective), with its code; else 4 if any run missed an objective, else 0."""
    if ns.repeat == 1:
        return once(ns)
    code = EXIT_OK
    for i in range(1, ns.repeat + 1):
        sys.stderr.write(f"fabmeter: repeat {i}/{ns.repeat}\n")
        sys.stderr.flush()
        this = once(argparse.Namespace(**{**vars(ns), "out": None if ns.out is None else folder(ns.out, i)}))
        if this not in (EXIT_OK, EXIT_SLO):
            return this
        code = max(code, this)
    return code
