"""Every check, in the order they are shown: what a node's facts mean for a planned measurement."""

from __future__ import annotations

from fabmeter.doctor import clock, cpus, limits, memory, net, rdma
from fabmeter.doctor.facts import Plan
from fabmeter.doctor.finding import FAIL, SEVERITIES, Finding

GROUPS = (limits, cpus, clock, memory, net, rdma)


def findings(plan: Plan, environment: dict, probe_error: str = "") -> list[Finding]:
    """All findings for the plan on the environment (run.json's shape), the most severe first."""
    out = []
    if probe_error:
        out.append(Finding("probe", FAIL, probe_error, "the probe run's exit and message",
                           effect=f"a {plan.transport} run fails here the same way",
                           fix="the message says what is missing; the other findings name the usual causes"))
    for group in GROUPS:
        out += group.check(plan, environment)
    return sorted(out, key=lambda f: SEVERITIES.index(f.severity))
