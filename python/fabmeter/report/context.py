"""The machine the runs were measured on and the paths they took, a line each, and warnings when the machine, not
the transport, sets the figures."""

from __future__ import annotations

from collections import Counter

from fabmeter import analysis, path
from fabmeter.report.files import number, obj
from fabmeter.report.model import Entry, Run, paths

# Transports whose library moves messages on an I/O thread of its own: run.json's granted.io_cpus says
# whether it shared a busy loop's CPU; a run recorded before there was such a record shared the client's.
IO_THREAD_LIBRARIES = ("zmq", "nng", "nanomsg")


def machine_line(runs: list[Run]) -> str:
    """CPU, CPUs, the CPUs the runs used, kernel and clock source of the most common environment, and the
    hiccups the runs' limits found."""
    envs = [obj(r.doc.get("environment")) for r in runs if not r.peer]
    envs = [e for e in envs if e]
    if not envs:
        return "machine: not recorded"
    machines = [_machine(e) for e in envs]
    env = envs[machines.index(Counter(machines).most_common(1)[0][0])]
    allowed = env.get("cpus_allowed")
    cpus = f"{or_unknown(env.get('cpu_count'))} CPUs" + (f" ({len(allowed)} allowed)" if isinstance(allowed, list)
                                                   and len(allowed) != env.get("cpu_count") else "")
    used = sorted({_cpus_used(r) for r in runs if not r.peer})
    engine = obj(env.get("engine"))
    clock = str(engine.get("clock_source") or "not recorded") + (f", TSC {engine['tsc_ghz']:.2f} GHz"
                                                                 if number(engine.get("tsc_ghz")) else "")
    words = [str(env.get("cpu_model") or "CPU unknown"), cpus, "CPUs used " + "; ".join(used),
             "kernel " + str(obj(env.get("kernel")).get("release") or "-"), "clock " + clock]
    for end, key in (("client", "engine"), ("server", "server_engine")):
        summary = fabric_summary(obj(obj(env.get(key)).get("fabric")))
        if summary:
            words.append(f"{end} fabric {summary}")
    hiccups = hiccups_summary(runs)
    if hiccups:
        words.append(hiccups)
    if len(set(machines)) > 1:
        words.append("runs from more than one machine: see Environment")
    return " \u00b7 ".join(words)


def hiccups_summary(runs: list[Run]) -> str:
    """The hiccups the runs' limits recorded, all together: gaps over the threshold, the longest, those on every
    CPU at once (analysis.all_cpus_words); "" where no run recorded them."""
    found = [obj(obj(r.doc.get("limits")).get("hiccups")) for r in runs if not r.peer]
    found = [h for h in found if number(h.get("count")) is not None]
    if not found:
        return ""
    count = sum(int(h["count"]) for h in found)
    words = (f"hiccups over {'/'.join(sorted({analysis.fmt_num(h.get('threshold_us'), 0) for h in found}))} us: "
             f"{count:,} in {len(found)} run{'s' * (len(found) > 1)}' limits")
    if count:
        words += f", longest {analysis.fmt_num(max(number(h.get('longest_us')) or 0 for h in found))} us"
    every = sum(len(h.get("all_cpus_gaps") or []) for h in found)
    return words + analysis.all_cpus_words(every, all(h.get("fifo") for h in found))


def paths_line(entries: list[Entry]) -> str:
    """Each path the points took: its label (the rows' and legends' words for it when there are several), where
    its ends ran and how many runs took it; "" when no point was measured."""
    words = []
    for label, es in paths(entries).items():
        servers = sorted({e.path["server"] for e in es if e.path["server"] != path.LOCAL})
        ends = sorted({path.ends(e.path) for e in es} - {""})
        runs = len({id(e.run) for e in es})
        detail = ", ".join(servers + ends + [f"{runs} run{'s' * (runs > 1)}"])
        words.append(f"{label} ({detail})")
    return ("path " if len(words) == 1 else "paths ") + "; ".join(words) if words else ""


def fabric_summary(fabric: dict) -> str:
    """One end's RDMA device and netdev in a few words ("rxe0 port 1 ACTIVE ethernet 10 Gb/s 1X MTU 1024, GID
    ::ffff:10.0.0.1 (RoCE v2); veth0 veth MTU 1500"); "" when none was recorded."""
    parts = []
    rdma, netdev = obj(fabric.get("rdma")), obj(fabric.get("netdev"))
    if rdma.get("device"):
        words = [str(rdma["device"]), f"port {rdma.get('port')}", rdma.get("port_state"), rdma.get("link_layer"),
                 f"{rdma['speed_gbps']:g} Gb/s" if number(rdma.get("speed_gbps")) is not None else None,
                 rdma.get("width"), f"MTU {rdma['active_mtu']}" if rdma.get("active_mtu") is not None else None,
                 f"fw {rdma['firmware']}" if rdma.get("firmware") else None]
        text = " ".join(str(w) for w in words if w)
        if rdma.get("gid"):
            text += f", GID {rdma['gid']}" + (f" ({rdma['gid_type']})" if rdma.get("gid_type") else "")
        parts.append(text)
    if netdev.get("name"):
        words = [str(netdev["name"]), netdev.get("driver"),
                 f"MTU {netdev['mtu']}" if netdev.get("mtu") is not None else None,
                 f"{netdev['speed_mbps']} Mb/s" if netdev.get("speed_mbps") is not None else None,
                 f"IPoIB {netdev['ipoib_mode']}" if netdev.get("ipoib_mode") else None]
        parts.append(" ".join(str(w) for w in words if w))
    return "; ".join(parts)


def fabric_detail(fabric: dict) -> str:
    """The rest of one end's fabric for the Environment table: offloads, coalescing, queues and IRQs, NUMA
    locality and the host's latency settings; "" when none was recorded."""
    netdev, numa = obj(fabric.get("netdev")), obj(fabric.get("numa"))
    words = []
    if netdev:
        def on(key):
            return "?" if netdev.get(key) is None else ("on" if netdev.get(key) else "off")
        words.append(f"GRO {on('gro')}, GSO {on('gso')}, TSO {on('tso')}")
        co = obj(netdev.get("coalesce"))
        if co:
            words.append(f"coalescing rx {co.get('rx_usecs')} us/{co.get('rx_frames')} frames, tx {co.get('tx_usecs')} "
                         f"us/{co.get('tx_frames')} frames" + (", adaptive" if co.get("adaptive_rx") else ""))
        words.append(f"{or_unknown(netdev.get('rx_queues'))} rx / {or_unknown(netdev.get('tx_queues'))} tx queues, "
                     f"{or_unknown(netdev.get('irq_count'))} IRQs")
    if numa:
        words.append(f"NUMA: {or_unknown(numa.get('device'))} node {or_unknown(numa.get('device_node'))}, CPU "
                     f"{or_unknown(numa.get('cpu'))} node {or_unknown(numa.get('cpu_node'))}")
    if "thp_enabled" in fabric:
        latency = fabric.get("cpu_dma_latency_us")
        words.append(f"tuned {fabric.get('tuned_profile') or 'none'}, cpu_dma_latency "
                     f"{or_unknown(latency)}{' us' if number(latency) is not None else ''}, "
                     f"THP {fabric.get('thp_enabled') or '?'} (defrag {fabric.get('thp_defrag') or '?'})")
    return "; ".join(words)


def or_unknown(value) -> str:
    """A recorded value as page text: "unknown" for null, never Python's None."""
    return "unknown" if value is None else str(value)


def _machine(env: dict) -> str:
    """What tells machines apart (not what varies between runs on one: load, the engine's clock estimate)."""
    return repr([env.get("hostname"), env.get("cpu_model"), env.get("cpu_count"),
                 obj(env.get("kernel")).get("release")])


def _cpus_used(run: Run) -> str:
    cpus = obj(run.doc.get("config")).get("cpus")
    if isinstance(cpus, list) and cpus:
        return "client " + ", server ".join(str(c) for c in cpus[:2])
    return "unpinned"


def warnings(runs: list[Run]) -> list[str]:
    """Where the machine dominates the figures: busy-polling pairs on two CPUs or fewer, a library's I/O thread on
    a busy loop's CPU, and points whose ends were kept off their CPU (analysis.off_cpu_words)."""
    out = []
    busy = [r for r in runs if not r.peer and r.params.get("poll") == "busy"]
    # client and server; a run with findings has it there (doctor's cpus.crowded)
    crowded = [w for w in (analysis.crowded_cpus(2, _usable_cpus(r)) for r in busy if "findings" not in r.doc) if w]
    if crowded:
        out.append(f"{len(crowded)} busy-polling run{'s' * (len(crowded) > 1)}: {crowded[0]}.")
    shared = sorted({str(r.params.get("transport")) for r in busy if io_thread_shared(r)})
    if shared:
        out.append(f"{', '.join(shared)} busy: the tail includes the library's I/O thread sharing the busy loop's "
                   "CPU (no spare CPU for it, or --io-cpu put it there): the latency measures the two taking turns "
                   "on one CPU, not the library alone.")
    absent = [(r, p, w) for r in runs if not r.peer for p in r.doc.get("points") or []
              if isinstance(p, dict) and (w := analysis.off_cpu_words(p))]
    if absent:
        run, point, words = absent[0]
        out.append(f"{len(absent)} point{'s' * (len(absent) > 1)} measured while an end was kept off its CPU, e.g. "
                   f"{run.params.get('transport')} {analysis.fmt_size(point.get('size'))}: {words}.")
    for end, key in (("client", "engine"), ("server", "server_engine")):
        lists = [obj(obj(obj(r.doc.get("environment")).get(key)).get("fabric")).get("warnings") for r in runs
                 if not r.peer]
        said = sorted({w for ws in lists if isinstance(ws, list) for w in ws if isinstance(w, str)})
        out += [f"{end}: {w}" for w in said]
    return out


def io_thread_shared(run: Run) -> bool:
    """A busy zmq, nng or nanomsg run whose library's I/O threads shared a busy loop's CPU."""
    if run.params.get("poll") != "busy" or run.params.get("transport") not in IO_THREAD_LIBRARIES:
        return False
    events = run.doc.get("engine_events")
    granted = analysis.granted(events if isinstance(events, list) else [])
    if isinstance(granted.get("io_cpus"), dict):
        return analysis.io_thread_note(granted) is not None
    return bool(obj(run.doc.get("config")).get("cpus"))


def _usable_cpus(run: Run):
    env = obj(run.doc.get("environment"))
    allowed = env.get("cpus_allowed")
    return len(allowed) if isinstance(allowed, list) and allowed else number(env.get("cpu_count"))
