"""`fabmeter doctor --parity`: a first contact with a verbs device. fabmeter against perftest, send over RC, lat
and bw at 32 B and 64 KiB, in alternated rounds (odd rounds fabmeter first, even rounds perftest), and per row
whether fabmeter reads within the rounds' interval of perftest on this hardware (stats.compare_rounds: the
distribution-free interval of the median round ratio, fabmeter / perftest)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Optional

from fabmeter import run, stats
from fabmeter.doctor.facts import Plan
from fabmeter.doctor.finding import OK, WARN, Finding
from fabmeter.errors import EXIT_OK, EXIT_USAGE, FabmeterError
from fabmeter.peers.base import Case, PeerError, PeerRun, Rdma, Unsupported
from fabmeter.peers.perftest import PEER as PERFTEST

INLINE = 64          # the 32 B rows send inline at both tools (perftest -I 64), as make test-rdma's comparison
LAT_ITERS = 1000     # round trips a lat round (perftest -n): a few ms on an HCA
LAT_WARMUP = 100     # fabmeter's warm-up round trips a lat round (perftest's lat tools time from the first)
BW_SECONDS = 1       # a bw round (perftest -D, fabmeter --duration)
PERFTEST_TIMEOUT_S = 300   # a perftest client's time beyond -D (an emulated device takes minutes where an HCA ms)
WIDEST = 1.25        # an interval spanning 1 but reaching below 1/WIDEST or above WIDEST cannot tell the tools apart
# What perftest says when its estimate of the CPU's clock, which its figures divide by, is shaky (a virtual machine,
# a loaded host) or failed (its figures inf): a verdict against such rounds says so.
CLOCK_DOUBTS = ("Correlation coefficient", "Conflicting CPU frequency", "clock estimate failed")
ROUNDS = stats.MIN_ROUNDS


@dataclass(frozen=True)
class Row:
    experiment: str      # lat | bw
    size: int
    iters: int = LAT_ITERS
    warmup: int = LAT_WARMUP

    @property
    def name(self) -> str:
        return f"send {self.experiment} {self.size} B"

    @property
    def tool(self) -> str:
        return f"ib_send_{self.experiment}"


ROWS = (Row("lat", 32), Row("lat", 64 << 10), Row("bw", 32), Row("bw", 64 << 10))


@dataclass(frozen=True)
class Setup:
    """Where both tools run: the devices of each end (None: each tool's own choice), the GID index, the plan's
    CPUs and server."""
    plan: Plan
    engine: str
    token_file: Optional[str] = None
    device: Optional[str] = None
    server_device: Optional[str] = None
    gid_index: Optional[int] = None
    rounds: int = ROUNDS


def refusal(info: dict, perftest: Optional[str]) -> str:
    """Why --parity cannot run here ("" where it can): a verbs device the engine lists, perftest's ib_send_lat."""
    if "verbs" not in info.get("transports", []):
        return "this engine was built without the verbs transport (libibverbs-dev, librdmacm-dev)"
    if not (info.get("transport_devices") or {}).get("verbs"):
        return "no verbs device here (/sys/class/infiniband lists none; fabmeter transports)"
    if perftest is None:
        return "perftest is not installed (ib_send_lat not on PATH; apt-get install perftest)"
    return ""


def check_runnable(info: dict) -> None:
    why = refusal(info, shutil.which("ib_send_lat"))
    if why:
        raise FabmeterError(f"--parity: {why}", EXIT_USAGE)


def _inline(row: Row) -> int:
    return INLINE if row.size <= INLINE else 0


@dataclass(frozen=True)
class Round:
    """One tool's run of a row: its figure (None where it measured none) and what it said beside it: why it failed,
    or perftest's warnings (its clock estimate on a virtual machine, inline turned off)."""
    figure: Optional[float]
    note: str = ""


def fabmeter_round(setup: Setup, row: Row) -> Round:
    """One fabmeter run of the row: lat's p50 (ns, half the round trip, as perftest's t_typical), bw's msg/s."""
    options = {"transport": "verbs", "size": row.size, "service": "rc", "cm": "raw", "op": "send",
               "inline": _inline(row)}
    options.update({"iters": row.iters, "warmup": row.warmup} if row.experiment == "lat"
                   else {"duration": float(BW_SECONDS)})
    options.update({k: v for k, v in (("device", setup.device), ("gid_index", setup.gid_index)) if v is not None})
    res = run.execute(run.RunSpec(row.experiment, options, cpus=setup.plan.cpus, server=setup.plan.server,
                                  engine=setup.engine, token_file=setup.token_file))
    if res.exit_code != EXIT_OK or not res.points:
        return Round(None, f"exit {res.exit_code}: {res.message or 'no point measured'}")
    return Round(figure(row, res.points[0]))


def perftest_round(setup: Setup, row: Row) -> Round:
    """One perftest run of the row (the server side through the serve where there is one)."""
    cpus = setup.plan.cpus
    params = PeerRun(size=row.size, bw_size=row.size, iters=row.iters, duration=BW_SECONDS,
                     timeout_s=PERFTEST_TIMEOUT_S,
                     cpus=None if cpus is None else (cpus[0], cpus[1] if len(cpus) > 1 else None),
                     transports=("verbs",), server=setup.plan.server, token_file=setup.token_file,
                     engine=setup.engine, rdma=Rdma(client_device=setup.device,
                                                    server_device=setup.server_device or setup.device,
                                                    gid_index=setup.gid_index, inline=_inline(row)))
    try:
        points = PERFTEST.run_case(Case(row.experiment, "verbs", row.tool), params)
    except (PeerError, Unsupported) as e:
        return Round(None, str(e))
    if not points:
        return Round(None, "no result in its output")
    return Round(figure(row, points[0]), "; ".join(points[0].get("tool_warnings") or ()))


def figure(row: Row, point: dict) -> Optional[float]:
    """A figure, or None where the tool printed none or 0 (perftest's rate when it could not time a run)."""
    value = point.get("msg_rate") if row.experiment == "bw" else (point.get("latency_ns") or {}).get("p50")
    return value or None


def measure(setup: Setup, rows=ROWS, fabmeter=fabmeter_round, perftest=perftest_round) -> dict[Row, tuple]:
    """Every row's rounds: (fabmeter's, perftest's), a Round each."""
    out = {row: ([], []) for row in rows}
    for i in range(setup.rounds):
        for row in rows:
            if i % 2 == 0:
                mine = fabmeter(setup, row)
                theirs = perftest(setup, row)
            else:
                theirs = perftest(setup, row)
                mine = fabmeter(setup, row)
            out[row][0].append(mine)
            out[row][1].append(theirs)
    return out


def _percent(ratio: float) -> str:
    return f"{abs(ratio - 1) * 100:.0f} %"


def judge(row: Row, fabmeter: list[Round], perftest: list[Round], evidence: str) -> Finding:
    """The row's finding: within, fabmeter faster or slower by X (interval), or cannot tell. What either tool said
    beside its figures (a failure, perftest's warnings) joins the evidence."""
    bw = row.experiment == "bw"
    mine, theirs = [r.figure for r in fabmeter], [r.figure for r in perftest]
    c = stats.compare_rounds(theirs, mine, higher_is_better=bw)
    both = sum(1 for a, b in zip(mine, theirs) if a and b)
    unit = "msg/s" if bw else "ns p50 (RTT/2)"
    lost = "" if both == len(mine) else (f" (fabmeter measured {sum(1 for a in mine if a)}, perftest "
                                         f"{sum(1 for b in theirs if b)})")
    said = (f"fabmeter {_num(c.new)} vs perftest {_num(c.base)} {unit}, ratio {_num(c.ratio, 3)}"
            + (f", interval {c.interval[0]:.3f}-{c.interval[1]:.3f}" if c.interval else "")
            + f" over {both} of {len(mine)} rounds{lost}")
    for tool, rounds in (("fabmeter", fabmeter), ("perftest", perftest)):
        notes = list(dict.fromkeys(r.note for r in rounds if r.note))
        evidence += f"; {tool} said: {' | '.join(notes)}" if notes else ""
    check = f"parity.{row.experiment}.{row.size}"
    effect = ("fabmeter's figures here are not perftest's: compare them with other tools' only after finding why "
              "(the effect is the ratio)")
    fix = "rerun on a quiet node with more rounds (--rounds N); fabmeter peers shows both tools' full figures"
    if c.interval is None:
        return Finding(check, WARN, f"{row.name}: cannot tell, fewer than {stats.MIN_ROUNDS} rounds both measured: "
                                    + said, evidence, effect="nothing yet says fabmeter reads as perftest here",
                       fix=fix)
    if c.verdict == stats.SAME:
        if c.interval[0] < 1 / WIDEST or c.interval[1] > WIDEST:
            return Finding(check, WARN, f"{row.name}: cannot tell, the rounds' interval is wider than "
                                        f"{1 / WIDEST:.2f}-{WIDEST:.2f}: " + said, evidence,
                           effect="the rounds differ too much to say fabmeter reads as perftest here", fix=fix)
        return Finding(check, OK, f"{row.name}: within: " + said, evidence)
    faster = c.verdict == stats.BETTER
    doubted = sum(1 for r in perftest if any(d in r.note for d in CLOCK_DOUBTS))
    doubt = f"; perftest doubted its clock in {doubted} of {len(perftest)} rounds" if doubted else ""
    return Finding(check, WARN, f"{row.name}: fabmeter {'faster' if faster else 'slower'} by {_percent(c.ratio)}: "
                                + said + doubt, evidence, effect=effect, fix=fix)


def _num(x: Optional[float], places: int = 0) -> str:
    return "-" if x is None else f"{x:,.{places}f}"


def evidence(setup: Setup, row: Row) -> str:
    where = f"the server side through {setup.plan.server}'s serve" if setup.plan.server else "both ends here"
    given = [f"{k} {v}" for k, v in (("device", setup.device), ("server device", setup.server_device),
                                     ("GID index", setup.gid_index)) if v is not None]
    where += f" ({', '.join(given)})" if given else ""
    count = f"-n {row.iters}" if row.experiment == "lat" else f"-D {BW_SECONDS}"
    fm_count = f"-n {row.iters} --warmup {row.warmup}" if row.experiment == "lat" else f"--duration {BW_SECONDS}"
    inline = _inline(row)
    return (f"{setup.rounds} alternated rounds of fabmeter {row.experiment} -t verbs --service rc --op send --cm raw "
            f"-s {row.size} {fm_count}{f' --inline {inline}' if inline else ''} and perftest {row.tool} -c RC "
            f"-s {row.size} {count}{f' -I {inline}' if inline else ''}, {where}; "
            + ("each round's message rate" if row.experiment == "bw" else "each round's median (perftest's "
                                                                          "t_typical), half the round trip"))


def findings(setup: Setup, rows=ROWS) -> list[Finding]:
    return [judge(row, fm, pt, evidence(setup, row)) for row, (fm, pt) in measure(setup, rows).items()]
