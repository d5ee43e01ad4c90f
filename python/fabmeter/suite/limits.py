"""Each engine point's planned run time against serve's --max-duration,
checked before anything runs: the engine states the time as a server
checks it (`fabmeter-engine run --dry-run`), beside a default serve's limit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fabmeter.engine import dry_run
from fabmeter.errors import EXIT_USAGE, FabmeterError
from fabmeter.options import Options
from fabmeter.suite.read import Point


@dataclass
class Plan:
    planned_s: Optional[float]  # at least this long, as serve computes it (None: the engine refuses it)
    limit_s: float              # a default serve's --max-duration (0: none)
    refused: str = ""           # why a default serve would refuse it ("": it runs)
    unrunnable: str = ""        # the engine's refusal of its options on this host: the point fails at its turn
    params: Optional[dict] = None  # the params the engine resolves the options to, as its run.json states them


def plan_of(engine: str, p: Point, table: Options) -> Optional[Plan]:
    """The point's plan, or None for what the engine does not run alone
    (a peer tool's point, a mesh, one the suite skips)."""
    if p.skip or p.tool or p.mesh:
        return None
    try:
        doc = dry_run(engine, p.experiment, table.engine_argv(p.options))
    except FabmeterError as e:
        if e.exit_code != EXIT_USAGE:  # no engine to ask: nothing can be planned
            raise FabmeterError(f"{p.id}: {e.message}", e.exit_code) from e
        # Refused here (e.g. a provider's smaller inject size), perhaps not on the
        # host the suite was written for: the other points still run.
        return Plan(None, 0, unrunnable=e.message)
    plan = Plan(doc["planned_s"], doc["serve_max_duration_s"], params=doc["params"])
    # A point with a server of its own: that serve's limit decides, which only it knows.
    if not p.server and plan.limit_s > 0 and plan.planned_s > plan.limit_s:
        plan.refused = (f"planned at least {plan.planned_s:g} s, over a default serve's --max-duration of "
                        f"{plan.limit_s:g} s (split the row, or run it against a serve with a larger --max-duration)")
    return plan


def plans(engine: str, points: list[Point], table: Options) -> dict[str, Optional[Plan]]:
    return {p.id: plan_of(engine, p, table) for p in points}


def refusals(by_id: dict[str, Optional[Plan]]) -> list[str]:
    """`point id: why` for every point a default serve would refuse."""
    return [f"{pid}: {plan.refused}" for pid, plan in by_id.items() if plan and plan.refused]
