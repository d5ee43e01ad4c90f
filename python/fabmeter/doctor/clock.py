"""The clock every timestamp is read from: the TSC, invariant, as each end's engine reports it."""

from __future__ import annotations

from fabmeter.doctor.facts import Plan, ends
from fabmeter.doctor.finding import OK, WARN, Finding


def check(plan: Plan, environment: dict) -> list[Finding]:
    out = []
    for end, env in ends(environment):
        source, invariant = env.get("clock_source"), env.get("tsc_invariant")
        evidence = (f"the {end} engine's clock_source (/sys/devices/system/clocksource/clocksource0/"
                    "current_clocksource) and tsc_invariant (CPUID)")
        if source == "tsc" and invariant:
            out.append(Finding("clock", OK, f"clock source tsc, invariant ({env.get('tsc_ghz')} GHz)", evidence,
                               end=end))
        else:
            out.append(Finding("clock", WARN, f"clock source {source}, TSC invariant: {invariant}", evidence,
                               effect="the kernel's clock reads cost a system call or an HPET access instead of "
                                      "about 10 ns (the engine's timestamp_cost_ns), added to every sample; a "
                                      "TSC that is not invariant drifts with the frequency",
                               fix="echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource "
                                   "(kernel command line: clocksource=tsc tsc=reliable)", end=end))
    return out
