"""The RDMA device of a verbs run (or ofi over its verbs provider), as each engine reports it (fabric.rdma: sysfs under
/sys/class/infiniband and the port's attributes): port active, a GID for the address, the same RoCE version at
both ends, the port's active MTU against its netdev's, the link width."""

from __future__ import annotations

from fabmeter.doctor.facts import Plan, ends, fabric
from fabmeter.doctor.finding import FAIL, OK, WARN, Finding

IB_MTUS = (256, 512, 1024, 2048, 4096)
ROCE_HEADERS = 96      # GRH, UDP, BTH, the largest extended header and ICRC: what RoCE takes off the netdev MTU


def roce_mtu(netdev_mtu: int) -> int:
    """The largest IB MTU a RoCE port over a netdev of this MTU carries (the kernel's iboe_get_mtu)."""
    fits = [m for m in IB_MTUS if m <= netdev_mtu - ROCE_HEADERS]
    return fits[-1] if fits else IB_MTUS[0]


def uses_rdma_device(plan: Plan) -> bool:
    """verbs always; ofi over its verbs provider only: tcp, udp and shm move bytes through sockets or shared
    memory, and other providers' devices (efa, psm3, cxi) are not what these checks read."""
    return plan.transport == "verbs" or (plan.transport == "ofi" and (plan.provider or "").split(";")[0] == "verbs")


def _end(end: str, r: dict, netdev: dict) -> list[Finding]:
    dev, port = r.get("device"), r.get("port")
    where = f"/sys/class/infiniband/{dev}/ports/{port}/{{state,rate,link_layer,gids,gid_attrs}}" if dev else \
        "/sys/class/infiniband"
    evidence = f"the {end} engine's fabric.rdma ({where}; ibv_query_port)"
    if not dev:
        return [Finding("rdma.device", FAIL, "no RDMA device (/sys/class/infiniband lists none for this address)",
                        evidence, end=end, effect="a verbs run (or ofi over its verbs provider) cannot start",
                        fix="modprobe the HCA's driver (mlx5_ib, ...) or add a Soft-RoCE device: "
                            "rdma link add rxe0 type rxe netdev IF")]
    out = []
    name = f"{dev} port {port}"
    if r.get("port_state") != "ACTIVE":
        out.append(Finding("rdma.port", FAIL, f"{name} is {r.get('port_state')} (physical {r.get('phys_state')})",
                           evidence, end=end, effect="no queue pair reaches RTS: the run fails",
                           fix="check the cable and the subnet manager (InfiniBand: systemctl start opensm)"))
    else:
        out.append(Finding("rdma.port", OK, f"{name} ACTIVE, {r.get('rate')}, {r.get('link_layer')}", evidence,
                           end=end))
    if r.get("width") == "1" and r.get("link_layer") == "infiniband":
        out.append(Finding("rdma.width", WARN, f"{name} runs at width 1X ({r.get('rate')})", evidence, end=end,
                           effect="a quarter of a 4X link's bandwidth; latency of large messages grows with it",
                           fix="reseat the cable or replace it; ibstat shows the enabled widths"))
    if r.get("gid") is None:
        out.append(Finding("rdma.gid", FAIL, f"{name}: no GID for the run's address (index {r.get('gid_index')})",
                           evidence, end=end, effect="RoCE needs the GID of the address: the connection fails",
                           fix="give --gid-index N from `show_gids` (or ibv_devinfo -v), the GID of the interface "
                               "carrying the address"))
    else:
        out.append(Finding("rdma.gid", OK, f"{name}: GID index {r.get('gid_index')} {r.get('gid')} "
                                           f"({r.get('gid_type') or r.get('link_layer')}, {r.get('gid_netdev')})",
                           evidence, end=end))
    active, mtu = r.get("active_mtu"), netdev.get("mtu") if netdev.get("name") == r.get("gid_netdev") else None
    if r.get("link_layer") == "ethernet" and isinstance(active, int) and isinstance(mtu, int):
        best = roce_mtu(mtu)
        said = f"{name} active MTU {active}, netdev {netdev.get('name')} MTU {mtu} (carries {best})"
        if active > best:
            out.append(Finding("rdma.mtu", FAIL, said, evidence, end=end,
                               effect="RoCE packets larger than the netdev carries are dropped: large messages "
                                      "stall", fix=f"ip link set {netdev.get('name')} mtu {active + ROCE_HEADERS}"))
        elif active < best:
            out.append(Finding("rdma.mtu", WARN, said, evidence, end=end,
                               effect="more packets a message than the netdev allows: lower bandwidth",
                               fix="the port follows its netdev's MTU: ip link set DEV mtu N on both ends"))
        else:
            out.append(Finding("rdma.mtu", OK, said, evidence, end=end))
    return out


def check(plan: Plan, environment: dict) -> list[Finding]:
    if not uses_rdma_device(plan):
        return []
    out = []
    blocks = [(end, fabric(env, "rdma"), fabric(env, "netdev")) for end, env in ends(environment)]
    for end, r, netdev in blocks:
        if r:       # absent where the run over the transport failed: the probe's finding says why
            out += _end(end, r, netdev)
    types = {end: r.get("gid_type") for end, r, _ in blocks if r.get("gid_type")}
    if len(types) == 2 and len(set(types.values())) == 2:
        out.append(Finding("rdma.roce", FAIL, "the ends' RoCE versions differ: " + ", ".join(
                               f"{end} {t}" for end, t in types.items()),
                           "both engines' fabric.rdma.gid_type (gid_attrs/types/N)", end="both",
                           effect="RoCE v1 and v2 packets do not reach the other's queue pair: the connection "
                                  "fails or times out",
                           fix="--gid-index N at both ends naming GIDs of one type (show_gids)"))
    return out
