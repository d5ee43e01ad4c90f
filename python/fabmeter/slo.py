"""Latency objectives: `--slo 'p99<=20us,p999<=100us'` (suite key `slo`).

An objective list is comma-separated `FIGURE OP VALUE UNIT` items: FIGURE
one of the summary keys of a point's `latency_ns` object (p50, p90, p99,
p999 -- also written p99.9 --, max, mean), OP `<=` or `<`, VALUE a number
and UNIT ns, us, ms or s (required: a bare number is refused, so nobody
takes ns for us). The list is checked before anything runs (exit 2).

After a run every measured point is checked against every objective, on
its `latency_ns` object (lat: one-way = RTT/2; the point's `latency_kind`
says which). A partial point, a point with no measured iteration and a
point without that figure miss every objective, saying why. Experiments
whose points carry no latency figure (bw, check) refuse objectives.
A missed objective ends the command with EXIT_SLO, unless the run itself
failed: its own exit code wins. docs/cli.md and docs/results.md describe
what is printed and recorded.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

from fabmeter.analysis import STAT_LABELS, fmt_size, format_table
from fabmeter.errors import EXIT_OK, EXIT_SLO

# FIGURE as written -> the key of the engine's latency_ns object (stats.cpp to_json).
FIGURES = {"p10": "p10", "p50": "p50", "p90": "p90", "p99": "p99", "p999": "p999", "p99.9": "p999", "p9999": "p9999",
           "p99.99": "p9999", "max": "max", "mean": "mean"}
UNITS_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
OPS = ("<=", "<")
# Experiments whose points carry no latency figure: objectives do not apply.
NO_LATENCY = ("bw", "check", "setup")
HELP = ("latency objectives checked on every point's one-way latency, e.g. 'p99<=20us,p999<=100us' "
        "(FIGURE: p10, p50, p90, p99, p999 or p99.9, p9999 or p99.99, max, mean; OP: <= or <; a unit is required: ns, us, ms, s); "
        "a missed one ends with exit code 4")

_ITEM_RE = re.compile(r"^\s*([A-Za-z0-9.]+)\s*(<=|<|=<|>=|=>|>|==|=)?\s*([^A-Za-z\s]*)\s*([A-Za-z]*)\s*$")


class SloError(ValueError):
    """A bad objective list or a place it does not apply; the message is one line."""


@dataclass(frozen=True)
class Objective:
    figure: str      # key of latency_ns: p50, p90, p99, p999, max, mean
    op: str          # "<=" or "<"
    value: float     # as written, in `unit`
    unit: str        # ns, us, ms, s

    @property
    def limit_ns(self) -> float:
        return self.value * UNITS_NS[self.unit]

    @property
    def text(self) -> str:
        """Canonical form: p999<=100us."""
        return f"{self.figure}{self.op}{_num(self.value)}{self.unit}"

    def holds(self, measured_ns: float) -> bool:
        return measured_ns <= self.limit_ns if self.op == "<=" else measured_ns < self.limit_ns


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def parse(text: Optional[str]) -> list[Objective]:
    """'p99<=20us, p99.9<=100us' -> objectives; SloError names the bad item."""
    if text is None or not text.strip():
        raise SloError("empty objective list (expected e.g. 'p99<=20us,p999<=100us')")
    out: list[Objective] = []
    for item in text.split(","):
        if not item.strip():
            raise SloError(f"'{text}': an empty item between commas")
        m = _ITEM_RE.match(item)
        if not m:
            raise SloError(f"'{item.strip()}': expected FIGURE OP VALUE UNIT, e.g. p99<=20us")
        figure, op, number, unit = m.groups()
        what = f"'{item.strip()}'"
        if figure.lower() not in FIGURES:
            raise SloError(f"{what}: unknown figure '{figure}' (expected p10, p50, p90, p99, p999 or p99.9, p9999 or p99.99, max, mean)")
        if op not in OPS:
            raise SloError(f"{what}: expected the operator <= or <" + (f", got '{op}'" if op else ""))
        try:
            value = float(number)
        except ValueError:
            # A word where the number goes reads as the unit: name what was given.
            got = f"'{number + unit}'" if number + unit else "nothing"
            raise SloError(f"{what}: expected a number after '{op}', got {got}") from None
        if not math.isfinite(value) or value <= 0:
            raise SloError(f"{what}: the limit must be a positive number")
        if not unit:
            raise SloError(f"{what}: the limit needs a unit: ns, us, ms or s")
        if unit not in UNITS_NS:
            raise SloError(f"{what}: unknown unit '{unit}' (expected ns, us, ms or s)")
        obj = Objective(FIGURES[figure.lower()], op, value, unit)
        if any(o.figure == obj.figure for o in out):
            raise SloError(f"{what}: {STAT_LABELS[obj.figure]} has an objective already")
        out.append(obj)
    return out


def canonical(objectives: list[Objective]) -> str:
    return ",".join(o.text for o in objectives)


def applies(experiment: str) -> bool:
    return experiment not in NO_LATENCY


def refusal(experiment: str) -> str:
    return f"--slo does not apply to {experiment} (its points carry no latency figure)"


# --- evaluation ---------------------------------------------------------------

def evaluate_point(objectives: list[Objective], point: dict) -> dict:
    """One point's verdict: {met, latency_kind, why, checks: [...]}; `why`
    says why the point misses every objective ("" when it was measured)."""
    lat = point.get("latency_ns")
    why = ""
    if point.get("partial"):
        why = "partial point: the run did not finish it"
    elif point.get("iterations") == 0:
        why = "no measured iterations"
    elif not isinstance(lat, dict):
        why = "the point has no latency figure (latency_ns)"
    checks = []
    for o in objectives:
        measured = None if why else lat.get(o.figure)
        if isinstance(measured, (int, float)) and not isinstance(measured, bool) and math.isfinite(measured):
            met = o.holds(float(measured))
        else:
            measured, met = None, False
        checks.append({"objective": o.text, "figure": o.figure, "op": o.op, "limit_ns": o.limit_ns,
                       "measured_ns": measured, "met": met})
    if not why and any(c["measured_ns"] is None for c in checks):
        why = "no measured latency"
    return {"met": all(c["met"] for c in checks), "latency_kind": point.get("latency_kind"),
            "why": why, "checks": checks}


def evaluate(objectives: list[Objective], points: list[dict]) -> dict:
    """The run's verdict (run.json's top-level `slo`): every point against every objective."""
    verdicts = [{"point": i, **evaluate_point(objectives, p)} for i, p in enumerate(points)]
    missed = sum(1 for v in verdicts for c in v["checks"] if not c["met"])
    why = "" if points else "no point was measured"
    return {"objectives": canonical(objectives), "met": bool(points) and missed == 0, "missed": missed,
            "checks": sum(len(v["checks"]) for v in verdicts), "why": why, "points": verdicts}


def exit_code(run_exit: int, verdict: Optional[dict]) -> int:
    """The run's own failure wins; otherwise a missed objective is EXIT_SLO."""
    if run_exit != EXIT_OK or verdict is None:
        return run_exit
    return EXIT_OK if verdict["met"] else EXIT_SLO


# --- output ---------------------------------------------------------------------

def fmt_ns(x: Optional[float]) -> str:
    """510.0 ns, 7.91 us, 14.0 ms: three significant digits in a readable unit."""
    if x is None:
        return "-"
    for unit in ("s", "ms", "us"):
        if abs(x) >= UNITS_NS[unit]:
            v = x / UNITS_NS[unit]
            break
    else:
        unit, v = "ns", x
    return f"{v:,.0f} {unit}" if abs(v) >= 100 else f"{v:.3g} {unit}"


def point_label(point: dict) -> str:
    parts = [fmt_size(point["size"])] if point.get("size") is not None else []
    if point.get("rate_hz") is not None:
        parts.append(f"{point['rate_hz']:g} Hz")
    if point.get("values") is not None:
        parts.append(f"{point['values']} values")
    return " ".join(parts) or "-"


def table(verdict: dict, points: list[dict]) -> str:
    """One line per objective per point: what was checked, the limit, the measure, met/missed."""
    head = f"slo {verdict['objectives']}: " + (
        "met" if verdict["met"] else
        f"MISSED ({verdict['missed']} of {verdict['checks']} checks)" if verdict["checks"] else
        f"MISSED ({verdict['why']})")
    rows = []
    for v in verdict["points"]:
        p = points[v["point"]]
        for c in v["checks"]:
            state = "met" if c["met"] else "MISSED" + (f": {v['why']}" if v["why"] else "")
            o = parse(c["objective"])[0]
            rows.append([point_label(p), v["latency_kind"] or "-", STAT_LABELS[o.figure],
                         f"{o.op} {_num(o.value)} {o.unit}", fmt_ns(c["measured_ns"]), state])
    if not rows:
        return head
    return head + "\n" + format_table(["point", "latency (latency_kind)", "figure", "objective", "measured",
                                       "verdict"], rows, left=6)


def summary(verdict: dict) -> str:
    """One line for stderr when an objective was missed."""
    if not verdict["checks"]:
        return f"slo {verdict['objectives']} missed: {verdict['why']}"
    first = next(c for v in verdict["points"] for c in v["checks"] if not c["met"])
    return (f"slo missed: {verdict['missed']} of {verdict['checks']} checks of {verdict['objectives']} "
            f"(first: {first['objective']}, measured {fmt_ns(first['measured_ns'])})")
