"""`fabmeter load --search 'p99<=50us'`: the highest offered rate whose
point holds latency objectives (slo.py's syntax), as mutilate's --search.

First the path's capacity: one run with `--of-capacity 1.0` (a closed-loop point
measures it, then an open-loop point offers it). If that point holds the
objectives, the capacity is the answer. Otherwise the rate is bisected on a
log scale: a point at capacity / 16 (then / 256) that holds gives the lower
end, and each step runs one open-loop point at the geometric middle of the
rates known to hold and to miss, until they are within SEARCH_TOLERANCE of
each other or SEARCH_STEPS runs were made. Every step is an engine run of
its own with the command's other options (its --duration or --count per
point); all points go into one run.json, with the search's outcome.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from fabmeter import slo
from fabmeter.analysis import fmt_num

SEARCH_STEPS = 10          # engine runs at most, the capacity run included
SEARCH_TOLERANCE = 0.05    # stop when the missing rate is within 5 % of the holding one
LOWER_TRIES = (16, 256)    # capacity / these: where a holding rate is looked for first

HELP = ("find the highest offered rate (requests/s) whose point holds these latency objectives "
        "(--slo's syntax, e.g. 'p99<=50us'), bisecting below the measured capacity; "
        "exit 4 when no rate holds them; not with --rate, --of-capacity or --slo")


def search(objectives: list[slo.Objective], run_point: Callable[[dict], Optional[dict]],
           say: Callable[[str], None]) -> dict:
    """Runs the search. `run_point(options)` makes one engine run with these
    options on top of the command's and returns its last point (None: the run
    failed; the search stops). Returns the outcome: run.json's `search`."""
    steps: list[dict] = []

    def step(options: dict) -> Optional[dict]:
        point = run_point(options)
        if point is None:
            return None
        verdict = slo.evaluate_point(objectives, point)
        steps.append({"offered_rps": point.get("offered_rps"), "met": verdict["met"],
                      "latency_ns": point.get("latency_ns"), "why": verdict["why"]})
        say(f"search step {len(steps)}: offered {fmt_num(point.get('offered_rps'), 0)}/s, "
            + ", ".join(f"{c['figure']} {fmt_num(c['measured_ns'], 0)} ns" for c in verdict["checks"])
            + f": {'holds' if verdict['met'] else 'misses'} {slo.canonical(objectives)}")
        return {**point, "met": verdict["met"]}

    def outcome(best: Optional[float], capacity: Optional[float], why: str) -> dict:
        return {"objectives": slo.canonical(objectives), "rate_rps": best, "capacity_rps": capacity,
                "steps": steps, "why": why}

    top = step({"of_capacity": [1.0]})
    if top is None:
        return outcome(None, None, "the capacity run failed")
    capacity = top.get("offered_rps") or 0
    if not capacity:
        return outcome(None, None, "the capacity run completed no request")
    if top["met"]:
        return outcome(capacity, capacity, "the capacity itself holds the objectives")
    hi, lo = capacity, None
    for divisor in LOWER_TRIES:
        rate = max(1, round(capacity / divisor))
        point = step({"rate": [rate]})
        if point is None:
            return outcome(None, capacity, "a run failed")
        if point["met"]:
            lo = rate
            break
        hi = rate
    if lo is None:
        return outcome(None, capacity, f"no rate down to {fmt_num(hi, 0)}/s holds the objectives")
    while len(steps) < SEARCH_STEPS and hi > lo * (1 + SEARCH_TOLERANCE) and hi - lo > 1:
        mid = max(lo + 1, min(hi - 1, round(math.sqrt(lo * hi))))
        point = step({"rate": [mid]})
        if point is None:
            return outcome(lo, capacity, "a run failed; the highest rate that held so far")
        if point["met"]:
            lo = mid
        else:
            hi = mid
    return outcome(lo, capacity, f"holds at {fmt_num(lo, 0)}/s, misses at {fmt_num(hi, 0)}/s")
