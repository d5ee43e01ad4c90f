"""--via-hop HOST[:PORT]: an experiment's run through a forwarding hop (`fabmeter-engine forward` on a gateway host)
beside the direct path to the same server, alternated round by round, and the hop's added latency per percentile
(the thesis' t_villas: through minus direct; lat's round trip, oneway's and stream's one-way latency). The direct
runs are the run's own points; run.json's "hop" holds the through-the-hop figures and the difference, the terminal
prints them under the run's table."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from fabmeter import analysis, run

HELP = ("with --server: measure through the forwarding hop at HOST[:PORT] (`fabmeter-engine forward --to SERVER` "
        "there, or a `fabmeter serve --hop-to SERVER`) beside the direct path, alternated --hop-rounds times, and "
        "report the hop's added latency per percentile (through minus direct: lat's round trip passes the hop "
        "twice, oneway's and stream's one-way latency once)")
TRANSPORT_HELP = ("with --via-hop: the transport from the hop to the server (default: the run's; a hop that "
                  "`fabmeter-engine forward` runs takes only its own --to-transport)")
ROUNDS_HELP = ("with --via-hop: direct and through-the-hop runs, alternated, each this many times "
               "(default: %(default)s)")
# A hop's settings under a command line's names and a suite's keys: one rule (unpaired) for both.
FLAGS = ("--server", "--via-hop", "--hop-transport")
KEYS = ("server", "via_hop", "hop_transport")


@dataclasses.dataclass(frozen=True)
class Figure:
    """What a hop's run compares: the point's field, its name in run.json's keys, and what it is."""
    field: str
    name: str
    what: str
    passes: str


ROUND_TRIP = Figure("rtt_ns", "rtt", "round trip", "two passes through the hop")
ONE_WAY = Figure("latency_ns", "oneway", "one-way latency", "one pass through the hop")
# The experiments a hop forwards (session/forward.cpp's check_forwardable): one message in flight, or messages
# one way whose receiver waits for what is still in the hop.
FIGURES = {"lat": ROUND_TRIP, "oneway": ONE_WAY, "stream": ONE_WAY}
FORWARDED = ", ".join(FIGURES)   # in messages


def applies(experiment: str) -> bool:
    return experiment in FIGURES


def figure_of(doc: dict) -> Figure:
    """run.json's "hop": the figure it compares (a record without "latency" compared round trips)."""
    return ONE_WAY if doc.get("latency") == ONE_WAY.name else ROUND_TRIP


def keys(fig: Figure) -> tuple[str, str, str]:
    """A round's point's keys: direct, through the hop, and the hop's added latency."""
    return f"direct_{fig.name}_ns", f"through_{fig.name}_ns", f"hop_added_{fig.name}_ns"


def unpaired(server: Optional[str], via: Optional[str], onward: Optional[str],
             names: tuple[str, str, str] = FLAGS) -> Optional[str]:
    """Why a run's hop settings do not go together (None: they do): a hop forwards to a server, and the transport
    onward is the hop's. `names`: FLAGS or KEYS."""
    server_name, via_name, onward_name = names
    if via is not None and server is None:
        return f"{via_name} goes with {server_name} (the hop forwards to that server)"
    if onward is not None and via is None:
        return f"{onward_name} goes with {via_name} (the transport onward from the hop)"
    return None


def rounds(text: str) -> int:
    n = int(text)
    if not 1 <= n <= 100:
        raise ValueError("1 .. 100")
    return n


def added(direct: dict, through: dict) -> dict:
    """Through minus direct, per percentile both have (mean too; not stdev, which does not subtract)."""
    return {k: through[k] - direct[k] for k in direct
            if k != "stdev" and isinstance(direct.get(k), (int, float)) and isinstance(through.get(k), (int, float))}


def read_write(ib: dict, shmem: dict, hca: dict) -> dict:
    """The thesis' t_r/w = t_IB - t_shmem - t_HCA (its node-type's read and write functions), per percentile all
    three have: `ib` one-way latency through the hop onto the fabric transport, `shmem` through the hop onto shm,
    `hca` the fabric transport's direct one-way latency."""
    return {k: ib[k] - shmem[k] - hca[k] for k in ib
            if k != "stdev" and all(isinstance(x.get(k), (int, float)) for x in (ib, shmem, hca))}


def measure(spec: run.RunSpec, hop: str, n_rounds: int,
            direct_run: Callable[[run.RunSpec], run.RunResult]) -> tuple[run.RunResult, dict]:
    """`n_rounds` of (direct, through the hop); `direct_run` makes (and records) a direct run. Returns the last
    direct run's result and run.json's "hop": per round and point, both figures and the difference."""
    fig = FIGURES[spec.experiment]
    direct_key, through_key, added_key = keys(fig)
    per_round = []
    res: Optional[run.RunResult] = None
    for _ in range(n_rounds):
        res = direct_run(spec)
        if res.exit_code != 0:
            break
        through = run.execute(dataclasses.replace(spec, via_hop=hop, out=None))
        if through.exit_code != 0:
            res = dataclasses.replace(res, status=through.status, exit_code=through.exit_code,
                                      message=f"through the hop {hop}: {through.message}")
            break
        per_round.append([{"size": d.get("size"), direct_key: d[fig.field], through_key: t[fig.field],
                           added_key: added(d[fig.field], t[fig.field])}
                          for d, t in zip(res.points, through.points)
                          if isinstance(d.get(fig.field), dict) and isinstance(t.get(fig.field), dict)])
    # The onward transport as the client chose it (a serve's hop); a `fabmeter-engine forward` keeps its own.
    return res, {"via": hop, "hop_transport": spec.hop_transport,
                 "latency": fig.name, "rounds": per_round,
                 "figure": f"{fig.what} (ns): through the hop minus direct ({fig.passes})"}


def table(doc: dict) -> str:
    """The terminal's lines: per round and size, the p50 / p99 figures and the hop's added p50 / p99."""
    fig = figure_of(doc)
    rows = [f"hop {doc['via']}: {fig.what} in us, direct vs through the hop ({fig.passes})"]
    rows.append(f"{'round':>5} {'size':>8} {'direct p50':>11} {'via p50':>11} {'added p50':>11} "
                f"{'direct p99':>11} {'via p99':>11} {'added p99':>11}")
    for i, points in enumerate(doc["rounds"], 1):
        for p in points:
            d, t, a = (p[k] for k in keys(fig))
            cells = [_us(x.get(k)) for k in ("p50", "p99") for x in (d, t, a)]
            rows.append(f"{i:>5} {analysis.fmt_size(p['size']):>8} " + " ".join(f"{c:>11}" for c in cells))
    return "\n".join(rows)


def _us(ns) -> str:
    return analysis.fmt_num(ns / 1000, 2) if isinstance(ns, (int, float)) else "-"
