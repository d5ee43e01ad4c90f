"""Transparent huge pages, as each end's engine reads them: "always" lets khugepaged and defragmentation stall a
measuring thread."""

from __future__ import annotations

from fabmeter.doctor.facts import Plan, ends
from fabmeter.doctor.finding import OK, WARN, Finding


def check(plan: Plan, environment: dict) -> list[Finding]:
    out = []
    for end, env in ends(environment):
        fab = env.get("fabric") if isinstance(env.get("fabric"), dict) else {}
        enabled, defrag = fab.get("thp_enabled"), fab.get("thp_defrag")
        evidence = f"the {end} engine's fabric (/sys/kernel/mm/transparent_hugepage/enabled, defrag)"
        if "always" in (enabled, defrag):
            out.append(Finding("memory.thp", WARN, f"transparent huge pages: enabled {enabled}, defrag {defrag}",
                               evidence, end=end,
                               effect="page faults may compact memory synchronously and khugepaged collapses "
                                      "pages under a running thread: millisecond stalls in the tail",
                               fix="echo madvise > /sys/kernel/mm/transparent_hugepage/enabled; "
                                   "echo madvise > /sys/kernel/mm/transparent_hugepage/defrag"))
        else:
            out.append(Finding("memory.thp", OK, f"transparent huge pages: enabled {enabled}, defrag {defrag}",
                               evidence, end=end))
    return out
