"""The netdev carrying the run (the control connection's, as each engine reports it): its link state, and the
MTU of the two ends, which must agree."""

from __future__ import annotations

from fabmeter.doctor.facts import Plan, ends, fabric
from fabmeter.doctor.finding import FAIL, OK, WARN, Finding

DOWN = ("down", "lowerlayerdown", "notpresent")


def check(plan: Plan, environment: dict) -> list[Finding]:
    out = []
    netdevs = [(end, fabric(env, "netdev")) for end, env in ends(environment)]
    for end, nd in netdevs:
        evidence = f"the {end} engine's fabric.netdev (/sys/class/net/{nd.get('name')}/operstate, speed, mtu)"
        state = nd.get("operstate")
        if state in DOWN:
            out.append(Finding("net.link", FAIL, f"{nd.get('name')} is {state}", evidence, end=end,
                               effect="nothing crosses it: the run fails or goes over another path",
                               fix=f"ip link set {nd.get('name')} up; check the cable and the switch port"))
        elif nd.get("name"):
            speed = nd.get("speed_mbps")
            out.append(Finding("net.link", OK, f"{nd.get('name')} {state}, MTU {nd.get('mtu')}"
                                               + (f", {speed} Mbit/s" if speed else ""), evidence, end=end))
    if len(netdevs) == 2 and plan.server is not None:
        (_, a), (_, b) = netdevs
        said = f"client {a.get('name')} MTU {a.get('mtu')}, server {b.get('name')} MTU {b.get('mtu')}"
        evidence = "both engines' fabric.netdev.mtu (/sys/class/net/IF/mtu)"
        if a.get("mtu") is None or b.get("mtu") is None:
            out.append(Finding("net.mtu", WARN, f"an end's MTU is unknown: {said}", evidence, end="both"))
        elif a["mtu"] != b["mtu"]:
            out.append(Finding("net.mtu", FAIL, f"the ends' MTUs differ: {said}", evidence, end="both",
                               effect="frames larger than the smaller MTU are dropped or fragmented: large "
                                      "messages stall on retransmission, RoCE paths settle on the smaller MTU",
                               fix=f"ip link set DEV mtu N on both hosts (the same N; the switch ports too)"))
        else:
            out.append(Finding("net.mtu", OK, f"the ends' MTUs agree: {said}", evidence, end="both"))
    return out
