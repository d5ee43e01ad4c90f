"""The environment a result was measured in, recorded with every run.

Latency figures are meaningless without it: CPU model, kernel, frequency
governor, idle driver, isolated CPUs and TSC properties all move the numbers.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional

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
    from importlib import metadata      # numpy's version without importing numpy (twice the cost): a run only
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        glibc = None
    return {"glibc": glibc, "python": platform.python_version(), "numpy": metadata.version("numpy")}


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
        "server_engine": server_env,   # the other end's, as the engine reported it
    }


# --- a mesh host's identity: what may differ between the hosts of one mesh ---------

NET_SYS = Path("/sys/class/net")
MAX_ROUTED = 16          # other hosts' addresses whose route is looked up (the first ones: rank 0's first)
IDENTITY_FIELDS = ("kernel_release", "kernel_version", "cpu_model", "cpu_count", "governor", "idle_driver",
                   "idle_governor", "guest_halt_poll_ns", "isolated_cpus", "tsc_flags", "glibc", "python",
                   "fabmeter", "system", "bios_version", "mtu", "link_speed_mbps", "nic_driver", "numa_node",
                   "clock_source")
IDENTITY_KEYS = ("hostname", "interface", "collected_by", *IDENTITY_FIELDS)  # hostname, interface: not compared


ROUTE_BUDGET_S = 3.0     # for all the look-ups together: a rank must join within the control timeout


def route_interface(address: str, timeout: float = ROUTE_BUDGET_S) -> Optional[str]:
    """The interface the kernel routes `address` through (`ip route get`), None if it cannot tell."""
    try:
        addr = socket.getaddrinfo(address, None, type=socket.SOCK_DGRAM)[0][4][0]
        out = subprocess.run(["ip", "-o", "route", "get", addr], capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except (OSError, socket.gaierror, subprocess.SubprocessError, IndexError):
        return None
    m = re.search(r"\bdev (\S+)", out.stdout) if out.returncode == 0 else None
    return m.group(1) if m else None


def _sys_int(path: Path) -> Optional[int]:
    """An integer sysfs value; None where absent, unreadable or negative (the kernel's "unknown": speed -1,
    numa_node -1)."""
    text = _read(path)
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def interface_facts(names: list[str]) -> dict:
    """MTU, link speed (Mbit/s), driver and NUMA node of the interfaces carrying the mesh, from sysfs; one value
    when every interface agrees, "IF value, IF value" when they do not, None where unknown."""
    per = {}
    for name in names:
        dev = NET_SYS / name / "device"
        try:
            driver = os.path.basename(os.readlink(dev / "driver"))
        except OSError:         # no device (a bridge, a veth, lo) or no driver bound
            driver = None
        numa = _sys_int(dev / "numa_node")
        if numa is None and (dev / "..").is_dir():     # a virtio NIC: its PCI function is the parent
            numa = _sys_int(dev / ".." / "numa_node")
        per[name] = {"mtu": _sys_int(NET_SYS / name / "mtu"), "link_speed_mbps": _sys_int(NET_SYS / name / "speed"),
                     "nic_driver": driver, "numa_node": numa}
    out = {}
    for key in ("mtu", "link_speed_mbps", "nic_driver", "numa_node"):
        values = {f[key] for f in per.values()}
        if len(values) == 1:
            out[key] = values.pop()
        elif values:
            out[key] = ", ".join(f"{n} {'unknown' if per[n][key] is None else per[n][key]}" for n in sorted(per))
        else:
            out[key] = None
    return out


def identity(others: list[str]) -> dict:
    """This host's identity fields for a mesh's drift list (flat, small: it crosses the mesh channel): the
    kernel, CPU, frequency governor(s), idle driver, libraries, firmware (DMI) and the interface the kernel
    routes the other hosts' addresses through, with its MTU, link speed, driver and NUMA node (sysfs). Unknown: None,
    never guessed."""
    names = []
    deadline = time.monotonic() + ROUTE_BUDGET_S
    for host in list(dict.fromkeys(others))[:MAX_ROUTED]:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        name = route_interface(host, left)
        if name and name not in names:
            names.append(name)
    govs = sorted({g for g in governors().values() if g})
    idle = cpuidle()
    u = platform.uname()
    from fabmeter import __version__
    return {"collected_by": "rank", "hostname": socket.gethostname(), "kernel_release": u.release,
            "kernel_version": u.version, "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "governor": ",".join(govs) or None, "idle_driver": idle["driver"], "idle_governor": idle["governor"],
            "guest_halt_poll_ns": idle.get("guest_halt_poll_ns"), "isolated_cpus": _read(CPU_SYS / "isolated"),
            "tsc_flags": " ".join(tsc_flags()) or None, "glibc": libraries()["glibc"],
            "python": platform.python_version(), "fabmeter": __version__,
            "system": _read("/sys/class/dmi/id/product_name"), "bios_version": _read("/sys/class/dmi/id/bios_version"),
            "interface": ",".join(names) or None, **interface_facts(names), "clock_source": None}


def identity_from_engine(env: dict) -> dict:
    """The identity fields an engine's start line carries (`env`, `server_env`), for hosts fabmeter itself does
    not run on (`fabmeter mesh --launch serve`): with the netdev of the engine's fabric (the one carrying its
    control connection); the rest unknown."""
    kernel = str(env.get("kernel") or "")
    release, _, version = kernel.partition(" ")
    fabric = env.get("fabric") if isinstance(env.get("fabric"), dict) else {}
    netdev = fabric.get("netdev") if isinstance(fabric.get("netdev"), dict) else {}
    out = {key: None for key in IDENTITY_KEYS}
    out.update(collected_by="engine", hostname=env.get("hostname"), kernel_release=release or None,
               kernel_version=version or None, cpu_model=env.get("cpu_model"), glibc=env.get("glibc"),
               clock_source=env.get("clock_source"), interface=netdev.get("name"), mtu=netdev.get("mtu"),
               link_speed_mbps=netdev.get("speed_mbps"), nic_driver=netdev.get("driver"),
               numa_node=netdev.get("numa_node"))
    return valid_identity(out)


def valid_identity(value) -> Optional[dict]:
    """An identity as another host sent it, if it has the shape identity() gives: the known keys only, each a
    short string, a number, a boolean or null; else None."""
    if not isinstance(value, dict):
        return None
    out = {}
    for key in IDENTITY_KEYS:
        v = value.get(key)
        if isinstance(v, str):
            v = v[:256]
        elif not (v is None or isinstance(v, (bool, int, float))):
            return None
        out[key] = v
    return out
