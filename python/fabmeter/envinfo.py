"""The environment a result was measured in, recorded with every run.

Latency figures are meaningless without it: CPU model, kernel, frequency
governor, idle driver, isolated CPUs and TSC properties all move the numbers.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from pathlib import Path
from typing import Optional

import numpy as np

CPU_SYS = Path("/sys/devices/system/cpu")


def _read(path: Path | str) -> Optional[str]:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_model() -> str:
    text = _read("/proc/cpuinfo") or ""
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return m.group(1).strip() if m else (platform.processor() or platform.machine())


def tsc_flags() -> list[str]:
    """TSC-related CPU flags (constant_tsc, nonstop_tsc, tsc_known_freq, ...)."""
    text = _read("/proc/cpuinfo") or ""
    m = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    flags = m.group(1).split() if m else []
    return sorted({f for f in flags if "tsc" in f})


def governors() -> dict[str, Optional[str]]:
    """scaling_governor per CPU; None where cpufreq is absent (common in VMs)."""
    out: dict[str, Optional[str]] = {}
    for d in sorted(CPU_SYS.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
        out[d.name[3:]] = _read(d / "cpufreq" / "scaling_governor")
    return out


def cpuidle() -> dict:
    """How an idle CPU waits: what every event-mode wake-up pays. In a VM,
    haltpoll's guest_halt_poll_ns says how long it polls before it halts."""
    out = {"driver": _read(CPU_SYS / "cpuidle" / "current_driver"),
           "governor": _read(CPU_SYS / "cpuidle" / "current_governor")}
    poll_ns = _read("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    if poll_ns is not None:
        out["guest_halt_poll_ns"] = int(poll_ns)
    return out


def kernel() -> dict:
    u = platform.uname()
    return {"release": u.release, "version": u.version, "machine": u.machine,
            "cmdline": _read("/proc/cmdline")}


def libraries() -> dict:
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        glibc = None
    return {"glibc": glibc, "python": platform.python_version(), "numpy": np.__version__}


def collect(engine_env: Optional[dict] = None, server_env: Optional[dict] = None) -> dict:
    """Everything run.json records under "environment"."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except OSError:
        allowed = None
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_allowed": allowed,
        "kernel": kernel(),
        "governors": governors(),
        "cpuidle": cpuidle(),
        "isolated_cpus": _read(CPU_SYS / "isolated") or "",
        "tsc_flags": tsc_flags(),
        "libraries": libraries(),
        "engine": engine_env,          # from the engine's "start" line
        "server_engine": server_env,   # the peer's, as the engine reported it
    }
