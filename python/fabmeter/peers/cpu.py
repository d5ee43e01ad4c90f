"""The CPU a peer tool's processes used, read from the kernel as fabmeter's
own engines read theirs (docs/results.md "cpu"), so both sides of a
comparison are counted alike: /proc/PID/stat (utime + stime) of every
process in the tool's process group, plus the children they reaped, and
/proc/stat of the CPUs it was pinned to. Read when the tool starts and when
its client exits (before it is reaped), so the window is the tool's whole
run: its own warm-up and pauses included ("window": "process")."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
WINDOW_NOTE = ("the tool's processes from their start to the client's exit, as /proc/PID/stat counts them: the "
               "tool's own warm-up, pauses and setup included")


@dataclass
class Reading:
    mono_s: float
    user_s: float = 0.0
    system_s: float = 0.0
    cpus: dict[int, list[int]] = field(default_factory=dict)   # /proc/stat ticks per pinned CPU


def _stat_fields(pid: str) -> Optional[list[str]]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def read(pgid: int, cpus: tuple[int, ...] = ()) -> Reading:
    """utime + stime (and reaped children's) of every process whose group is `pgid`; the pinned CPUs' lines."""
    r = Reading(time.monotonic())
    for d in os.listdir("/proc"):
        f = _stat_fields(d) if d.isdigit() else None
        if f is None or len(f) < 15 or int(f[2]) != pgid:
            continue
        r.user_s += (int(f[11]) + int(f[13])) * TICK_S
        r.system_s += (int(f[12]) + int(f[14])) * TICK_S
    if cpus:
        for line in Path("/proc/stat").read_text().splitlines():
            name, *ticks = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                r.cpus[int(name[3:])] = [int(t) for t in ticks[:8]]
    return r


def side(a: Reading, b: Reading, count: Optional[float], per: str, nbytes: Optional[float] = None) -> dict:
    """fabmeter's cpu side (docs/results.md) between two readings; the kernel's tick is its resolution."""
    window = max(b.mono_s - a.mono_s, 0.0)
    user, system = max(b.user_s - a.user_s, 0.0), max(b.system_s - a.system_s, 0.0)
    cpu = user + system
    out = {"window": "process", "window_note": WINDOW_NOTE, "window_s": window, "user_s": user, "system_s": system,
           "cpu_s": cpu, "utilization": cpu / window if window > 0 else None, "voluntary_switches": None,
           "involuntary_switches": None, "run_delay_s": None, "on_cpu_s": None, "sleeps": None, "per": per,
           "count": count,
           "per_message_ns": cpu * 1e9 / count if count else None,
           "service_demand_us_per_kb": cpu * 1e6 / (nbytes / 1024) if nbytes else None,
           "resolution_s": TICK_S, "cpus": None}
    if a.cpus and b.cpus:
        out["cpus"] = []
        for c in sorted(set(a.cpus) & set(b.cpus)):
            d = [max(y - x, 0) * TICK_S for x, y in zip(a.cpus[c], b.cpus[c])]
            user_c, nice, sys_c, idle, iowait, irq, soft, steal = (d + [0.0] * 8)[:8]
            total = sum(d)
            out["cpus"].append({"cpu": c, "user_s": user_c + nice, "system_s": sys_c, "irq_s": irq, "softirq_s": soft,
                                "idle_s": idle, "busy": (total - idle - iowait) / total if total else None})
    return out


def exited(pid: int, timeout: float) -> bool:
    """Waits up to `timeout` s for child `pid` to exit, without reaping it (its /proc entry stays readable)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:   # already reaped: it exited
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)


REMOTE_NOTE = ("the tool's server side on the other host, as its `fabmeter serve` counted it: the user and system "
               "time of every process of its group (wait4), from its start until it ended or was stopped")


def remote_side(end: dict, count: Optional[float], per: str, nbytes: Optional[float] = None) -> dict:
    """fabmeter's cpu side from a remote serve's "end" line (its tool's processes, whole run)."""
    window, user, system = end.get("window_s"), end.get("user_s") or 0.0, end.get("system_s") or 0.0
    cpu = user + system
    return {"window": "process", "window_note": REMOTE_NOTE, "window_s": window, "user_s": user, "system_s": system,
            "cpu_s": cpu, "utilization": cpu / window if window else None, "voluntary_switches": None,
            "involuntary_switches": None, "run_delay_s": None, "on_cpu_s": None, "sleeps": None, "per": per,
            "count": count,
            "per_message_ns": cpu * 1e9 / count if count else None,
            "service_demand_us_per_kb": cpu * 1e6 / (nbytes / 1024) if nbytes else None,
            "resolution_s": 1e-6, "cpus": None}
