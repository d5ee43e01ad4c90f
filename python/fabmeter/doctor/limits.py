"""Locked memory: a verbs or ofi run registers its buffer rings, and registration fails (or a run dies mid-sweep)
where RLIMIT_MEMLOCK is below what the run registers and the process lacks CAP_IPC_LOCK."""

from __future__ import annotations

import resource
from pathlib import Path

from fabmeter.doctor.facts import Plan
from fabmeter.doctor.finding import FAIL, OK, Finding
from fabmeter.options import size_text

REGISTERING = ("verbs", "ofi")
RING_BUDGET = 64 << 20      # bytes per buffer ring (verbs.hpp: kRingBudget); deeper rings for big messages are cut
SLOT_ALIGN = 64
CAP_IPC_LOCK = 14           # linux/capability.h


def registered_bytes(plan: Plan) -> int:
    """What one end registers for the plan's largest message: its receive ring and its send ring, slots of the
    message rounded up to 64 B, each ring as deep as its queue and at most RING_BUDGET (verbs.cpp's rule)."""
    slot = -(-max(plan.size, 1) // SLOT_ALIGN) * SLOT_ALIGN
    rx = min(plan.rq_depth, max(2, RING_BUDGET // slot)) * slot
    tx = min(plan.sq_depth, max(1, RING_BUDGET // slot)) * slot
    return rx + tx


def has_ipc_lock(status: Path = Path("/proc/self/status")) -> bool:
    """CAP_IPC_LOCK in this process's effective set: the memlock limit then does not apply."""
    try:
        for line in status.read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_IPC_LOCK & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def check(plan: Plan, environment: dict) -> list[Finding]:
    if plan.transport not in REGISTERING:
        return []
    need = registered_bytes(plan)
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} B ({size_text(soft)})"
    evidence = "getrlimit(RLIMIT_MEMLOCK); CapEff in /proc/self/status"
    run = f"a {plan.transport} run of {size_text(plan.size)} messages"
    need_text = f"{need} B ({size_text(need)}) an end (--rq-depth {plan.rq_depth}, --sq-depth {plan.sq_depth})"
    if soft == resource.RLIM_INFINITY or soft >= need:
        return [Finding("memlock", OK, f"locked-memory limit {limit}; {run} registers {need_text}", evidence)]
    if has_ipc_lock():
        return [Finding("memlock", OK, f"locked-memory limit {limit}, below the {need_text} {run} registers, does "
                                       "not apply: the process has CAP_IPC_LOCK", evidence)]
    return [Finding("memlock", FAIL, f"locked-memory limit {limit} is below the {need_text} {run} registers",
                    evidence,
                    effect="ibv_reg_mr fails (ENOMEM) and the run exits 3 before or during its sweep; perftest "
                           "fails the same way",
                    fix="ulimit -l unlimited (a login: `* - memlock unlimited` in /etc/security/limits.conf; a "
                        "service: LimitMEMLOCK=infinity)")]
