"""Locked memory: a verbs or ofi run registers its buffer rings at each end, and registration fails (or a run dies
mid-sweep) where that end's RLIMIT_MEMLOCK is below what the run registers and the process lacks CAP_IPC_LOCK."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Optional

from fabmeter.doctor.facts import Plan
from fabmeter.doctor.finding import FAIL, OK, SKIP, Finding
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


def reported(engine_env: dict) -> Optional[tuple[Optional[int], bool]]:
    """The limit and CAP_IPC_LOCK a serve reports in its welcome (`memlock`: limit_bytes, null for unlimited, and
    cap_ipc_lock), None where it reports none or not in that shape: it comes from the other end."""
    said = engine_env.get("memlock")
    if not isinstance(said, dict):
        return None
    limit, ipc_lock = said.get("limit_bytes"), said.get("cap_ipc_lock")
    if not isinstance(ipc_lock, bool) or not (limit is None or (type(limit) is int and limit >= 0)):
        return None
    return limit, ipc_lock


def judge(plan: Plan, end: str, limit: Optional[int], ipc_lock: bool, evidence: str) -> Finding:
    """One end's locked-memory limit (None: unlimited) against what the plan registers an end."""
    need = registered_bytes(plan)
    shown = "unlimited" if limit is None else f"{limit} B ({size_text(limit)})"
    run = f"a {plan.transport} run of {size_text(plan.size)} messages"
    need_text = f"{need} B ({size_text(need)}) an end (--rq-depth {plan.rq_depth}, --sq-depth {plan.sq_depth})"
    if limit is None or limit >= need:
        return Finding("memlock", OK, f"locked-memory limit {shown}; {run} registers {need_text}", evidence, end=end)
    if ipc_lock:
        return Finding("memlock", OK, f"locked-memory limit {shown}, below the {need_text} {run} registers, does "
                                      "not apply: the process has CAP_IPC_LOCK", evidence, end=end)
    return Finding("memlock", FAIL, f"locked-memory limit {shown} is below the {need_text} {run} registers",
                   evidence, end=end,
                   effect="ibv_reg_mr fails (ENOMEM) and the run exits 3 before or during its sweep; perftest "
                          "fails the same way",
                   fix="ulimit -l unlimited where the process starts (a login: `* - memlock unlimited` in "
                       "/etc/security/limits.conf; a service, the serve's too: LimitMEMLOCK=infinity)")


def check(plan: Plan, environment: dict) -> list[Finding]:
    """This process's limit (the client engine's: its child inherits it); with --server, the serve's own, as its
    engine reports it."""
    if plan.transport not in REGISTERING:
        return []
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    out = [judge(plan, "client", None if soft == resource.RLIM_INFINITY else soft, has_ipc_lock(),
                 "getrlimit(RLIMIT_MEMLOCK); CapEff in /proc/self/status")]
    if plan.server is None:
        return out      # the local server engine is this process's child too: the same limit
    server = environment.get("server_engine")
    said = reported(server) if isinstance(server, dict) else None
    evidence = "the server engine's memlock (its getrlimit(RLIMIT_MEMLOCK) and CAP_IPC_LOCK, in its welcome)"
    if said is None:
        why = "no run reached it" if not isinstance(server, dict) else "its engine reports none"
        return out + [Finding("memlock", SKIP, f"the server's locked-memory limit is not known: {why}", evidence,
                              end="server")]
    return out + [judge(plan, "server", *said, evidence)]
