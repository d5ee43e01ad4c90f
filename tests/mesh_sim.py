"""A simulated `fabmeter mesh` of many ranks on one machine: the real coordinator (mesh/run.py `_coordinate`:
join, clock offsets, every round's plan, round barriers, the summary) in one process, and light ranks in one or
more others, many to a selector loop, each speaking the rank side of the protocol over the real
rendezvous.Channel; no engines: a pair is reported at its round's instant with made-up figures. Used by tests/test_mesh_scale.py; run by hand for docs/performance.md's figures:

    .venv/bin/python tests/mesh_sim.py --ranks 1024 --rounds 16 [--rank-procs 2] [--pattern all-to-all]

prints one JSON object: join and offset time, per round the planning time, the round's time, control frames
and bytes, and the coordinator's memory (peak RSS above what it had before the mesh).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from fabmeter.mesh import rendezvous, run as mesh_run  # noqa: E402

LEAD_S = 0.05        # the first round's lead; the real Lead grows it if ranks need longer to start their pairs


def fake_pair(spec, src: int, dst: int, server: str, start_ns: int) -> dict:
    """A pair without an engine: waits for the instant, says when it went on and made-up figures."""
    called = time.monotonic_ns()
    if spec is not None:        # rank 0's own pairs, each in a thread of the real _run_round
        time.sleep(max(0, start_ns - called) / 1e9)
    now = time.monotonic_ns()
    p50 = 10_000.0 + 7 * ((src * 31 + dst) % 13)
    return {"type": "pair", "src": src, "dst": dst, "status": "ok", "message": "", "size": 32, "lost": 0,
            "latency_ns": {"min": p50 - 500, "p50": p50, "p99": p50 * 2, "max": p50 * 3},
            "latency_kind": "one-way", "gbps": None, "throughput_series": None, "clock": None,
            "started_ns": now, "start_late_ns": now - start_ns, "start_margin_ns": start_ns - called,
            "start_ready_ns": start_ns - called}


def spec_for(rank: int, n: int, port: int, token: bytes, pattern: str, rounds: int) -> "mesh_run.MeshSpec":
    return mesh_run.MeshSpec(["127.0.0.1"] * n, rank, "oneway", pattern, "scheduled", port, {"transport": "udp"},
                             token, "none", 120.0, run_pair=fake_pair, identity=lambda: None, lead_s=LEAD_S,
                             max_rounds=rounds)


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def coordinate(n: int, port: int, token: bytes, pattern: str, rounds: int) -> dict:
    """Rank 0 as `fabmeter mesh` runs it (but no engine server, whose port it hands out as 1)."""
    before = rss_kib()
    phases = {}
    real_gather, real_offset = mesh_run._gather, mesh_run._estimate_offset

    def gather(*a):
        t = time.monotonic()
        try:
            return real_gather(*a)
        finally:
            phases["join_s"] = time.monotonic() - t
            phases["offsets_from"] = time.monotonic()

    def offset(*a):
        real_offset(*a)
        phases["offsets_s"] = time.monotonic() - phases["offsets_from"]

    mesh_run._gather, mesh_run._estimate_offset = gather, offset
    pairs = []
    summary = {}
    emit = lambda obj: pairs.append(1) if obj["type"] == "pair" else summary.update(obj)  # noqa: E731
    t0 = time.monotonic()
    code = mesh_run._coordinate(spec_for(0, n, port, token, pattern, rounds), 1, emit, lambda w: None, None)
    total = time.monotonic() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rounds_out = [{"round": r["round"], "pairs": len(r["pairs"]), **r["control"], "lead_ns": r["lead_ns"],
                   "start_late_p99_ns": (r["start_late_ns"] or {}).get("p99")} for r in summary["rounds"]]
    return {"ranks": n, "pattern": pattern, "exit": code, "pairs": len(pairs), "failed": summary["failed"],
            "total_s": round(total, 3), "join_s": round(phases.get("join_s", 0), 3),
            "offsets_s": round(phases.get("offsets_s", 0), 3),
            "rss_before_kib": before, "rss_peak_kib": peak, "rss_mesh_kib": peak - before, "rounds": rounds_out}


def ranks(first: int, count: int, n: int, port: int, token: bytes, pattern: str, rounds: int) -> int:
    """Ranks first .. first+count-1 as light ranks: one selector loop, no thread a rank. Each speaks the rank side
    of the protocol over the real rendezvous.Channel (authentication, sequence numbers) as mesh/run.py's _follow
    does: join, pong, welcome, round (its pairs reported at their instant, with made-up figures), alive once a
    second, done."""
    chans = {}
    for r in range(first, first + count):
        ch = rendezvous.connect("127.0.0.1", port, token, 120)
        ch.send({"type": "join", "rank": r, "size": n, "engine_port": 1000 + r, "env": None})
        chans[r] = ch
    sel = selectors.DefaultSelector()
    for r, ch in chans.items():
        sel.register(ch.sock, selectors.EVENT_READ, r)
    due: list = []          # (instant, rank, dsts, planned, received) of pairs to report
    done: set = set()
    welcomed: set = set()
    beat = time.monotonic() + mesh_run.HEARTBEAT_S
    while len(done) < count:
        now = time.monotonic_ns()
        wait = min([(d[0] - now) / 1e9 for d in due] + [beat - time.monotonic(), 0.5])
        for key, _ in sel.select(max(0.0, wait)):
            r = key.data
            for body in chans[r].feed():
                kind = body.get("type")
                if kind == "ping":
                    chans[r].send({"type": "pong", "mono_ns": time.monotonic_ns()})
                elif kind == "welcome":
                    welcomed.add(r)
                elif kind == "round":
                    due.append((body["start_ns"], r, body["dsts"], body["start_ns"], time.monotonic_ns()))
                elif kind == "done":
                    done.add(r)
                    sel.unregister(key.fileobj)
                else:
                    raise SystemExit(f"rank {r}: unexpected {kind}")
        now = time.monotonic_ns()
        for item in [d for d in due if d[0] <= now]:
            due.remove(item)
            _, r, dsts, planned, received = item
            for d in dsts:
                body = fake_pair(None, r, d, "", planned)
                body["start_margin_ns"] = body["start_ready_ns"] = planned - received
                chans[r].send(body)
        if time.monotonic() >= beat:
            beat = time.monotonic() + mesh_run.HEARTBEAT_S
            for r in welcomed - done:
                chans[r].send({"type": "alive"})
    for ch in chans.values():
        ch.close()
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def simulate(n: int, rounds: int, pattern: str = "all-to-all", rank_procs: int = 2, timeout: float = 600) -> dict:
    """The coordinator in this process's child, ranks 1..n-1 in `rank_procs` others; the coordinator's figures."""
    token = secrets.token_hex(16)
    port = free_port()
    env = dict(os.environ, FABMETER_SIM_TOKEN=token)
    me = [sys.executable, __file__, "--ranks", str(n), "--rounds", str(rounds), "--pattern", pattern,
          "--port", str(port)]
    coord = subprocess.Popen([*me, "--role", "coordinator"], env=env, stdout=subprocess.PIPE, text=True)
    per = -(-(n - 1) // rank_procs)
    others = [subprocess.Popen([*me, "--role", "ranks", "--first", str(f), "--count", str(min(per, n - f))], env=env)
              for f in range(1, n, per)]
    try:
        out, _ = coord.communicate(timeout=timeout)
        codes = [p.wait(timeout=60) for p in others]
    finally:
        for p in [coord, *others]:
            if p.poll() is None:
                p.kill()
                p.wait()
    result = json.loads(out)
    result["rank_exits"] = codes
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--pattern", default="all-to-all")
    ap.add_argument("--rank-procs", type=int, default=2)
    ap.add_argument("--role", choices=["coordinator", "ranks"])
    ap.add_argument("--port", type=int)
    ap.add_argument("--first", type=int)
    ap.add_argument("--count", type=int)
    a = ap.parse_args()
    if a.role is None:
        print(json.dumps(simulate(a.ranks, a.rounds, a.pattern, a.rank_procs)))
        return 0
    token = os.environ["FABMETER_SIM_TOKEN"].encode()
    if a.role == "coordinator":
        print(json.dumps(coordinate(a.ranks, a.port, token, a.pattern, a.rounds)))
        return 0
    return ranks(a.first, a.count, a.ranks, a.port, token, a.pattern, a.rounds)


if __name__ == "__main__":
    sys.exit(main())
