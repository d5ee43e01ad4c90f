"""--via-hop HOST[:PORT]: an experiment's run through a forwarding hop (`fabmeter-engine forward` on a gateway host)
beside the direct path to the same server, alternated round by round, and the hop's added latency per percentile
(the thesis' t_villas: through minus direct). The direct runs are the run's own points; run.json's "hop" holds the
through-the-hop figures and the difference, the terminal prints them under the run's table."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from fabmeter import analysis, run

HELP = ("with --server: measure through the forwarding hop at HOST[:PORT] (`fabmeter-engine forward --to SERVER` "
        "there) beside the direct path, alternated --hop-rounds times, and report the hop's added latency per "
        "percentile (through minus direct round trip: two passes through the hop)")
ROUNDS_HELP = ("with --via-hop: direct and through-the-hop runs, alternated, each this many times "
               "(default: %(default)s)")
# The figures compared: round trips (a hop forwards only experiments with one message in flight).
FIGURE = "rtt_ns"


def applies(experiment: str) -> bool:
    """The experiments a hop forwards: one message in flight, no clock of the other end."""
    return experiment == "lat"


def rounds(text: str) -> int:
    n = int(text)
    if not 1 <= n <= 100:
        raise ValueError("1 .. 100")
    return n


def added(direct: dict, through: dict) -> dict:
    """Through minus direct, per percentile both have (mean too; not stdev, which does not subtract)."""
    return {k: through[k] - direct[k] for k in direct
            if k != "stdev" and isinstance(direct.get(k), (int, float)) and isinstance(through.get(k), (int, float))}


def measure(spec: run.RunSpec, hop: str, n_rounds: int,
            direct_run: Callable[[run.RunSpec], run.RunResult]) -> tuple[run.RunResult, dict]:
    """`n_rounds` of (direct, through the hop); `direct_run` makes (and records) a direct run. Returns the last
    direct run's result and run.json's "hop": per round and point, both figures and the difference."""
    per_round = []
    res: Optional[run.RunResult] = None
    for _ in range(n_rounds):
        res = direct_run(spec)
        if res.exit_code != 0:
            break
        through = run.execute(dataclasses.replace(spec, server=hop, out=None))
        if through.exit_code != 0:
            res = dataclasses.replace(res, status=through.status, exit_code=through.exit_code,
                                      message=f"through the hop {hop}: {through.message}")
            break
        per_round.append([{"size": d.get("size"), "direct_rtt_ns": d[FIGURE], "through_rtt_ns": t[FIGURE],
                           "hop_added_rtt_ns": added(d[FIGURE], t[FIGURE])}
                          for d, t in zip(res.points, through.points) if FIGURE in d and FIGURE in t])
    return res, {"via": hop, "rounds": per_round, "figure": "round trip (ns): through the hop minus direct"}


def table(doc: dict) -> str:
    """The terminal's lines: per round and size, the p50 / p99 round trips and the hop's added p50 / p99."""
    rows = [f"hop {doc['via']}: round trip in us, direct vs through the hop (two passes through it)"]
    rows.append(f"{'round':>5} {'size':>8} {'direct p50':>11} {'via p50':>11} {'added p50':>11} "
                f"{'direct p99':>11} {'via p99':>11} {'added p99':>11}")
    for i, points in enumerate(doc["rounds"], 1):
        for p in points:
            d, t, a = p["direct_rtt_ns"], p["through_rtt_ns"], p["hop_added_rtt_ns"]
            cells = [_us(x.get(k)) for k in ("p50", "p99") for x in (d, t, a)]
            rows.append(f"{i:>5} {analysis.fmt_size(p['size']):>8} " + " ".join(f"{c:>11}" for c in cells))
    return "\n".join(rows)


def _us(ns) -> str:
    return analysis.fmt_num(ns / 1000, 2) if isinstance(ns, (int, float)) else "-"
