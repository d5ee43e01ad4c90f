"""The engine command lines of a suite's points over one transport, for the
guest's driver (rdma/test-rdma-guest.sh), which runs them as its own cases.

    python3 rdma/suite_rows.py SUITE.toml TRANSPORT [COUNT]

One line per point: its id, the seconds its messages take at their rates
(stream: count x values per rate, warm-up left out; 0 where no rate sets
it), and the experiment and its options as shell words (the transport left
out: the driver names it), separated by tabs. COUNT replaces the point's
count (samples or requests per point), for runs shorter than the suite's
own.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from fabmeter.engine import engine_info, engine_options, find_engine
from fabmeter.suite import read as suite


def planned_seconds(options: dict) -> float:
    """How long a stream point's counted messages take: each rate sends `count` samples of every values."""
    rates, count = options.get("rate"), options.get("count")
    if not rates or not isinstance(count, int):
        return 0.0
    rates = rates if isinstance(rates, list) else [rates]
    values = options.get("values", [1])
    return sum(count / r for r in rates) * len(values if isinstance(values, list) else [values])


def main(path: str, transport: str, count: str = "") -> int:
    engine = find_engine()
    s = suite.read(Path(path), engine_info(engine))
    for p in s.points:
        if p.transport != transport or p.mesh:
            continue
        options = {k: v for k, v in p.options.items() if k != "transport"}
        if count:
            options["count"] = int(count)
        print(f"{p.id}\t{planned_seconds(options):.0f}\t{shlex.join([p.experiment, *engine_options(engine).engine_argv(options)])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
