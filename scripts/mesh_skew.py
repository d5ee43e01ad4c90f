#!/usr/bin/env python3
"""Round start skew of `fabmeter mesh` with N network namespaces on one bridge (docs/performance.md).

    sudo .venv/bin/python scripts/mesh_skew.py --hosts 16 [--arp] [--hog N] [--out DIR] [-- MESH OPTIONS]

Makes N namespaces fmsk<pid>h0.. joined by veth pairs to a bridge in fmsk<pid>sw (10.197.X.1/16 ..), each told
every other's MAC address up front (permanent neighbour entries; --arp: left to ARP), runs `fabmeter mesh --rank
i` in each (scheduled all-to-all by default, oneway udp, 2 bursts of 200 x 32 B), with --hog N processes spinning
meanwhile, prints the summary's start figures per round and overall (round start skew p50/p99/max, pair
lateness, how long before the instant the engines were ready, the late pairs' reasons), the packets the kernel's
per-CPU input queues dropped meanwhile, the wall time and the load average, and removes the namespaces whatever
happened.

Why the neighbours are given: on one machine the bridge floods each ARP request to every other port, and every
copy enters the sending CPU's input queue (net.core.netdev_max_backlog, 1,000): a round's pairs resolving their
new partners at once (64 hosts: ~32 requests, ~2,000 copies) overflow it, the requests are lost, and the kernel
asks again after 1 s, all of them in step, so the storm repeats; rounds then started 2-19 s late (the late pairs'
reason: the control connection's SYN sent several times). Separate hosts on a switch do not funnel every host's
broadcasts through one CPU's queue; --arp shows it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60)


def namespaces(n: int, tag: str) -> tuple[list[str], list[str]]:
    switch, br = f"{tag}sw", f"{tag}br"
    nss = [f"{tag}h{i}" for i in range(n)]
    for ns in [switch, *nss]:
        sh("ip", "netns", "add", ns)
    sh("ip", "-n", switch, "link", "add", br, "type", "bridge")
    sh("ip", "-n", switch, "link", "set", br, "up")
    addrs = []
    for i, ns in enumerate(nss):
        dev, port, addr = f"{tag}v{i}", f"{tag}p{i}", f"10.197.{i // 250}.{i % 250 + 1}"
        sh("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", port, "netns", switch)
        sh("ip", "-n", switch, "link", "set", port, "master", br, "up")
        sh("ip", "-n", ns, "addr", "add", f"{addr}/16", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        addrs.append(addr)
    return [switch, *nss], addrs


def known_neighbours(made: list[str], addrs: list[str], tag: str) -> None:
    """Every namespace host gets a permanent neighbour entry for every other (no ARP: the module's docstring)."""
    macs = []
    for i, ns in enumerate(made[1:]):
        link = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "dev", f"{tag}v{i}"], check=True,
                              capture_output=True, text=True, timeout=60).stdout
        macs.append(json.loads(link)[0]["address"])
    for i, ns in enumerate(made[1:]):
        batch = "".join(f"neigh replace {addr} lladdr {mac} dev {tag}v{i} nud permanent\n"
                        for k, (addr, mac) in enumerate(zip(addrs, macs)) if k != i)
        subprocess.run(["ip", "-n", ns, "-batch", "-"], input=batch, check=True, capture_output=True, text=True,
                       timeout=60)


def backlog_drops() -> int:
    """Packets the per-CPU input queues dropped since boot, all CPUs (/proc/net/softnet_stat's second column)."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f if line.strip())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--arp", action="store_true", help="leave the neighbours to ARP (the module's docstring)")
    ap.add_argument("--hog", type=int, default=0, metavar="N", help="N processes spinning during the mesh")
    ap.add_argument("--out", help="keep mesh.json here")
    ap.add_argument("rest", nargs="*", help="mesh options (after --)")
    a = ap.parse_args()
    tag = f"fmsk{os.getpid() % 100000}"
    made: list[str] = []
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        token = Path(tmp) / "token"
        token.write_text(secrets.token_hex(16) + "\n")
        token.chmod(0o600)
        try:
            made, addrs = namespaces(a.hosts, tag)
            if not a.arp:
                known_neighbours(made, addrs, tag)
            hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(a.hog)]
            procs += hogs
            drops0 = backlog_drops()
            args = a.rest or ["-t", "udp", "--bursts", "2", "--burst-size", "200", "--warmup", "50", "-s", "32"]
            env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
            env.setdefault("FABMETER_ENGINE", str(ROOT / "build/engine/fabmeter-engine"))
            load0 = " ".join(f"{x:.1f}" for x in os.getloadavg())
            t0 = time.monotonic()
            for r in range(a.hosts):
                cmd = ["ip", "netns", "exec", made[1 + r], sys.executable, "-m", "fabmeter", "mesh",
                       "--hosts", ",".join(addrs), "--rank", str(r), "--token-file", str(token), "--json",
                       "--timeout-ms", "20000", *(["--out", a.out] if a.out and r == 0 else []), *args]
                procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                              stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                                              stderr=subprocess.PIPE if r == 0 else subprocess.DEVNULL, text=True))
            ranks = procs[a.hog:]
            out, err = ranks[0].communicate(timeout=3600)
            took = time.monotonic() - t0
            drops = backlog_drops() - drops0
            for p in ranks[1:]:
                p.wait(timeout=60)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for ns in made:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=60)
    lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    summary = next((x for x in lines if x.get("type") == "mesh"), None)
    if summary is None:
        print(err, file=sys.stderr)
        return 1
    ms = lambda v: "n/a" if v is None else f"{v / 1e6:.2f}"
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{a.hosts} hosts, {summary['pairs']} pairs ({summary['failed']} failed), {len(summary['rounds'])} rounds, "
          f"wall {took:.1f} s, load average at the end {load} (before {load0}); {' '.join(a.rest)}")
    for r in summary["rounds"]:
        late = r.get("start_late_ns") or {}
        print(f"  round {r['round']:3d}: skew {ms(r['start_skew_ns'])} ms, late p50 {ms(late.get('p50'))} "
              f"p99 {ms(late.get('p99'))} max {ms(late.get('max'))} ms, lead {ms(r.get('lead_ns'))} ms, "
              f"ready min {ms(r.get('start_ready_min_ns'))} ms before the instant")
    skew, late, ready = (summary.get(k) or {} for k in ("start_skew_ns", "start_late_ns", "start_ready_ns"))
    least = min((r["start_ready_min_ns"] for r in summary["rounds"] if r.get("start_ready_min_ns") is not None),
                default=None)
    print(f"round start skew over {skew.get('n')} rounds: p50 {ms(skew.get('p50'))} ms, "
          f"p99 {ms(skew.get('p99'))} ms, max {ms(skew.get('max'))} ms")
    print(f"pair start lateness over {late.get('n')} pairs: p50 {ms(late.get('p50'))} ms, "
          f"p99 {ms(late.get('p99'))} ms, max {ms(late.get('max'))} ms; ready before the instant: "
          f"p50 {ms(ready.get('p50'))} ms, least {ms(least)} ms")
    late_pairs = summary.get("late_pairs")
    if late_pairs:
        print(f"late pairs (> 1 ms): {late_pairs['n']}, by step {late_pairs['by_step']}; the latest "
              f"{late_pairs['latest']['src']} -> {late_pairs['latest']['dst']}: {late_pairs['latest']['late_reason']}")
    print(f"input queue drops meanwhile (softnet_stat): {drops}; neighbours {'by ARP' if a.arp else 'given'}; "
          f"{a.hog} hog(s)")
    print(f"wall {took:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
