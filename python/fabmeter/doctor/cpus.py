"""The measuring CPUs: both ends on one CPU or on SMT siblings, the frequency governor, deep C-states, device
IRQs on them, whether they are isolated, and the NUMA node of the device against them. This node's CPUs only:
with --server, the client's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from fabmeter import analysis, envinfo
from fabmeter.doctor.facts import Plan, ends, fabric
from fabmeter.doctor.finding import OK, SKIP, WARN, Finding

SYS_CPU = Path("/sys/devices/system/cpu")
PROC = Path("/proc")
DEEP_STATE_US = 10          # an idle state with a longer exit latency than this is a deep C-state
IRQS_SHOWN = 4
WAKEUP_EFFECT = ("an event-mode wake-up pays the idle state's exit latency on top of the wake-up floor "
                 "(`fabmeter-engine limits`: timer and cross-CPU wake-up rows)")


def measuring_cpus(plan: Plan) -> list[int]:
    """The CPUs of this node a run pins: both ends' where the server is local, else the client's."""
    if plan.cpus is None:
        return []
    sides = plan.cpus if plan.server is None else plan.cpus[:1]
    return list(dict.fromkeys(int(c) for side in sides for c in str(side).split("+")))


def cpu_list(text: Optional[str]) -> set[int]:
    """'0-3,8' -> {0, 1, 2, 3, 8}; '' or None -> set()."""
    out: set[int] = set()
    for part in (text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit():
            out.update(range(int(lo), int(hi if hi.isdigit() else lo) + 1))
    return out


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def pairing(plan: Plan, sys_cpu: Path = SYS_CPU) -> list[Finding]:
    """Client and server on one CPU, or on two hardware threads of one core."""
    if plan.cpus is None or plan.server is not None or len(plan.cpus) != 2:
        return []
    a, b = (int(str(side).split("+")[0]) for side in plan.cpus)
    evidence = f"--cpus; {sys_cpu}/cpu{a}/topology/thread_siblings_list"
    if a == b:
        return [Finding("cpus.pair", WARN, f"client and server both on CPU {a}", "--cpus",
                        effect="busy-polling ends take turns in the scheduler's time slices: p50 in milliseconds, "
                               "the figures measure the scheduler",
                        fix="give two CPUs of different cores: --cpus A,B", end="both")]
    siblings = cpu_list(_read(sys_cpu / f"cpu{a}" / "topology" / "thread_siblings_list"))
    if b in siblings:
        return [Finding("cpus.pair", WARN, f"CPUs {a} and {b} are SMT siblings (one core)", evidence,
                        effect="the two ends share one core's pipeline and caches: a shorter cache-line transfer "
                               "than two cores have (`fabmeter-engine limits`: cache-line floor) and each end "
                               "slows the other",
                        fix="pick CPUs of different cores (lscpu -e: the CORE column), or turn SMT off: "
                            "echo off > /sys/devices/system/cpu/smt/control", end="both")]
    return [Finding("cpus.pair", OK, f"client on CPU {a}, server on CPU {b}: different cores", evidence, end="both")]


def crowded(plan: Plan, environment: dict) -> list[Finding]:
    """A busy-polling client and server with no CPU to spare on this machine (analysis.crowded_cpus)."""
    allowed = environment.get("cpus_allowed")
    said = analysis.crowded_cpus(2, len(allowed) if isinstance(allowed, list) else None)
    if plan.poll != "busy" or plan.server is not None or said is None:
        return []
    return [Finding("cpus.crowded", WARN, said, "os.sched_getaffinity (run.json's environment.cpus_allowed)",
                    effect="the tail and the max measure the scheduler: the busy loops take turns with every "
                           "other task", fix="a machine (or cpuset) with a CPU to spare, or --poll event",
                    end="both")]


def governor(cpus: list[int]) -> list[Finding]:
    govs = envinfo.governors()
    evidence = f"{SYS_CPU}/cpuN/cpufreq/scaling_governor"
    if all(govs.get(str(c)) is None for c in cpus):
        return [Finding("cpus.governor", SKIP, "no cpufreq on the measuring CPUs (a VM, or frequency fixed by "
                                               "the firmware): nothing to check", evidence)]
    slow = {c: govs[str(c)] for c in cpus if govs.get(str(c)) not in (None, "performance")}
    if slow:
        return [Finding("cpus.governor", WARN, "governor " + ", ".join(f"CPU {c} {g}" for c, g in slow.items()),
                        evidence,
                        effect="the clock ramps with load: the first iterations and every event-mode wake-up run "
                               "at a lower frequency, and the figures drift with the governor's decisions",
                        fix="cpupower frequency-set -g performance")]
    return [Finding("cpus.governor", OK, "governor performance on " + ", ".join(map(str, cpus)), evidence)]


def cstates(cpus: list[int], environment: dict, sys_cpu: Path = SYS_CPU) -> list[Finding]:
    """Enabled idle states with an exit latency above DEEP_STATE_US, unless /dev/cpu_dma_latency holds them off."""
    deep = {}
    for c in cpus:
        for state in sorted((sys_cpu / f"cpu{c}" / "cpuidle").glob("state[0-9]*")):
            latency = _read(state / "latency")
            if latency and latency.isdigit() and int(latency) > DEEP_STATE_US and _read(state / "disable") == "0":
                deep.setdefault(c, []).append(f"{_read(state / 'name')} ({latency} us)")
    evidence = f"{sys_cpu}/cpuN/cpuidle/stateK/{{name,latency,disable}}; the engine's cpu_dma_latency_us"
    held = [(e.get("fabric") or {}).get("cpu_dma_latency_us") for _, e in ends(environment)[:1]]
    if held and isinstance(held[0], int) and held[0] <= DEEP_STATE_US:
        return [Finding("cpus.cstates", OK, f"/dev/cpu_dma_latency holds {held[0]} us: no deep C-state", evidence)]
    if not deep:
        idle = environment.get("cpuidle") or {}
        return [Finding("cpus.cstates", OK, f"no enabled idle state deeper than {DEEP_STATE_US} us (idle driver "
                                            f"{idle.get('driver')})", evidence)]
    return [Finding("cpus.cstates", WARN, "deep C-states enabled: " + "; ".join(
                        f"CPU {c} {', '.join(s)}" for c, s in deep.items()), evidence, effect=WAKEUP_EFFECT,
                    fix="kernel command line intel_idle.max_cstate=1 processor.max_cstate=1 (or tuned-adm profile "
                        "latency-performance, or cpupower idle-set -D 10)")]


def irqs(cpus: list[int], proc: Path = PROC) -> list[Finding]:
    """Device interrupts (numbered lines of /proc/interrupts) delivered on a measuring CPU."""
    text = _read(proc / "interrupts")
    evidence = f"{proc}/interrupts"
    if text is None or not cpus:
        return [Finding("cpus.irqs", SKIP, f"{evidence} unreadable or no pinned CPU", evidence)]
    lines = text.splitlines()
    columns = [int(c[3:]) for c in lines[0].split()]
    hit = {}
    for line in lines[1:]:
        m = re.match(r"\s*(\d+):\s+(.*)$", line)
        if not m:
            continue
        words = m.group(2).split()
        counts = [int(w) for w in words[:len(columns)] if w.isdigit()]
        name = " ".join(words[len(columns):][-1:])
        for cpu, count in zip(columns, counts):
            if cpu in cpus and count:
                hit.setdefault(cpu, []).append((count, f"IRQ {m.group(1)} {name}"))
    if not hit:
        return [Finding("cpus.irqs", OK, "no device interrupt on CPU " + ", ".join(map(str, cpus)), evidence)]
    said = "; ".join(f"CPU {c}: " + ", ".join(f"{n} ({k})" for k, n in sorted(h, reverse=True)[:IRQS_SHOWN])
                     + (f" and {len(h) - IRQS_SHOWN} more" if len(h) > IRQS_SHOWN else "")
                     for c, h in sorted(hit.items()))
    return [Finding("cpus.irqs", WARN, f"device interrupts on measuring CPUs: {said}", evidence,
                    effect="an interrupt and its softirq preempt the measuring thread: single outliers of "
                           "microseconds in the tail (`fabmeter-engine limits --hiccups` counts them)",
                    fix="echo MASK > /proc/irq/N/smp_affinity for each (a mask without the measuring CPUs), "
                        "and stop irqbalance or give it IRQBALANCE_BANNED_CPULIST")]


def isolated(cpus: list[int], environment: dict) -> list[Finding]:
    iso = cpu_list(environment.get("isolated_cpus"))
    evidence = f"{SYS_CPU}/isolated; /proc/cmdline"
    shared = [c for c in cpus if c not in iso]
    if not shared:
        return [Finding("cpus.isolated", OK, "measuring CPUs isolated: " + ", ".join(map(str, cpus)), evidence)]
    return [Finding("cpus.isolated", WARN, "measuring CPUs not isolated: " + ", ".join(map(str, shared)), evidence,
                    effect="other threads and kernel work share them: scheduler preemption in the tail",
                    fix="kernel command line isolcpus=LIST nohz_full=LIST rcu_nocbs=LIST (the measuring CPUs)")]


def numa(environment: dict) -> list[Finding]:
    """The engine's own NUMA judgement (fabric.numa, its warning): device and pinned CPU on one node."""
    out = []
    for end, env in ends(environment):
        n = fabric(env, "numa")
        evidence = f"the {end} engine's fabric.numa (sysfs numa_node, node*/cpulist)"
        if n.get("device_node") is None or n.get("cpu_node") is None:
            continue
        if n["device_node"] != n["cpu_node"]:
            out.append(Finding("cpus.numa", WARN, f"{n.get('device')} on NUMA node {n['device_node']}, CPU "
                                                  f"{n.get('cpu')} on node {n['cpu_node']}", evidence, end=end,
                               effect="every DMA and doorbell crosses the interconnect: a higher floor and more "
                                      "jitter than the device's own node gives",
                               fix=f"pin to a CPU of node {n['device_node']}: lscpu -e, then --cpus"))
        else:
            out.append(Finding("cpus.numa", OK, f"{n.get('device')} and CPU {n.get('cpu')} on NUMA node "
                                                f"{n['cpu_node']}", evidence, end=end))
    return out


def check(plan: Plan, environment: dict) -> list[Finding]:
    cpus = measuring_cpus(plan)
    out = pairing(plan) + crowded(plan, environment)
    if cpus:
        out += governor(cpus) + cstates(cpus, environment) + irqs(cpus) + isolated(cpus, environment)
    return out + numa(environment)
