#!/usr/bin/env python3
"""Remeasure compare's run-to-run spread: python/fabmeter/data/run_spread.json.

For each kind of point (experiment lat; transports tcp, shm, udp; poll busy and event; figure p50) it makes
--pairs A/A pairs, two single runs of one configuration back to back, the kinds taken in turn within each
round so that a busy minute falls on all of them, and writes each run's p50 with how it was measured.

    .venv/bin/python scripts/measure-run-spread.py [--pairs 10] [-n 2000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from fabmeter import __version__, envinfo, run_spread

KINDS = [("lat", t, poll) for t in ("tcp", "shm", "udp") for poll in ("busy", "event")]
FIGURE = "p50"


def p50(experiment: str, transport: str, poll: str, iters: int) -> float:
    """One run's p50 (ns)."""
    cmd = [sys.executable, "-m", "fabmeter", experiment, "-t", transport, "--poll", poll, "-n", str(iters), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    return float(json.loads(done.stdout.splitlines()[-1])["latency_ns"][FIGURE])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=10, help="A/A pairs per kind (default: %(default)s)")
    parser.add_argument("-n", "--iters", type=int, default=2000, help="iterations per run (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=run_spread.PATH, help="the file (default: %(default)s)")
    ns = parser.parse_args()
    env = envinfo.collect()
    started, load = datetime.now(timezone.utc).isoformat(timespec="seconds"), os.getloadavg()
    pairs: dict[tuple, list] = {k: [] for k in KINDS}
    for i in range(ns.pairs):
        for kind in KINDS:
            pairs[kind].append([p50(*kind, ns.iters), p50(*kind, ns.iters)])
        print(f"round {i + 1}/{ns.pairs}", file=sys.stderr)
    doc = {"provenance": {
               "what": "A/A pairs: two single runs of one configuration back to back, each run's figure (ns); "
                       "compare's spread of a kind is its largest pair ratio either way round",
               "command": f"fabmeter EXPERIMENT -t TRANSPORT --poll POLL -n {ns.iters} (32 B, the default CPUs)",
               "remeasure": "scripts/measure-run-spread.py", "fabmeter_version": __version__,
               "started_at": started, "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "load_average_at_start": list(load), "load_average_at_end": list(os.getloadavg()),
               "machine": {k: env.get(k) for k in ("cpu_model", "cpu_count", "cpus_allowed", "kernel")}},
           "kinds": [{"experiment": e, "transport": t, "poll": p, "figure": FIGURE, "size": 32, "iters": ns.iters,
                      "pairs": pairs[(e, t, p)]} for e, t, p in KINDS]}
    ns.out.write_text(json.dumps(doc, indent=1) + "\n")
    for row in doc["kinds"]:
        print(f"{row['experiment']} {row['transport']} {row['poll']}: largest A/A ratio "
              f"{run_spread.largest_ratio(row['pairs']):.3f}")


if __name__ == "__main__":
    main()
