"""--cpus A,B: the client's and the server's CPUs, as every command that starts engines takes it."""

from __future__ import annotations

import os
from typing import Optional

from fabmeter.errors import EXIT_USAGE, FabmeterError


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
        raise FabmeterError(expected, EXIT_USAGE) from None
    if len(sides) != 2 and not (remote and len(sides) == 1):
        raise FabmeterError(expected, EXIT_USAGE)
    bad = [c for side in sides for c in side if c not in allowed]
    if bad:
        raise FabmeterError(f"--cpus: CPU {bad[0]} is not available (allowed: {','.join(map(str, allowed))})",
                            EXIT_USAGE)
    return tuple(side[0] if len(side) == 1 else "+".join(map(str, side)) for side in sides)
