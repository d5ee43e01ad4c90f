"""`fabmeter bench`: fabmeter's 32 B latency against the machine's own limit.

The limit is a bare cache-line ping-pong between the two CPUs
(`fabmeter-engine limits`). Each round measures the limit and every
transport x poll once; the order flips every round (A B ... then ... B A) so
slow drift of the machine does not favour one configuration. Reported: the
median over rounds of each run's one-way (RTT/2) median, and its ratio to
the cache-line limit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from fabmeter import analysis, envinfo, run
from fabmeter.results import now_iso, write_json

CONFIGS = [(t, p) for t in ("shm", "tcp", "udp") for p in ("busy", "event")]
LAT_ARGS = ["-s", "32", "-n", "20000"]


def main(out: Path, rounds: int, cpus: Optional[tuple[int, ...]]) -> int:
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = now_iso()
    env = envinfo.collect()
    print(f"fabmeter bench  {started}")
    print(f"CPU: {env['cpu_model']}  kernel: {env['kernel']['release']}  CPUs: {list(cpus) if cpus else 'unpinned'}")

    limits: list[dict] = []
    medians: dict[tuple[str, str], list[float]] = {c: [] for c in CONFIGS}
    errors: dict[str, str] = {}
    status = "ok"
    try:
        for r in range(rounds):
            order = CONFIGS if r % 2 == 0 else list(reversed(CONFIGS))
            sys.stderr.write(f"bench: round {r + 1}/{rounds}\n")
            limits.append(run.run_limits(cpus))
            for transport, poll in order:
                res = run.execute(run.RunSpec("lat", ["-t", transport, "--poll", poll, *LAT_ARGS], cpus=cpus))
                if res.exit_code == run.EXIT_INTERRUPTED:
                    raise run.FabmeterError("interrupted", run.EXIT_INTERRUPTED)
                if res.exit_code != run.EXIT_OK or not res.points:
                    errors[f"{transport}/{poll}"] = res.message
                    sys.stderr.write(f"bench: {transport}/{poll} failed: {res.message}\n")
                    continue
                medians[(transport, poll)].append(res.points[-1]["latency_ns"]["p50"])
    except run.FabmeterError as e:
        if e.exit_code != run.EXIT_INTERRUPTED:
            raise
        status = "interrupted"

    limit = analysis.median(l["cacheline_oneway_ns"]["p50"] for l in limits)
    rows, doc_rows = [], []
    rows.append(["cache-line ping-pong (limit)", "-", limit, "-", "1.00x" if limit else None])
    for (transport, poll), ms in medians.items():
        m = analysis.median(ms)
        spread = f"{analysis.fmt_num(min(ms))}..{analysis.fmt_num(max(ms))}" if ms else "-"
        ratio = m / limit if (m is not None and limit) else None
        rows.append([transport, poll, m, spread, None if ratio is None else f"{ratio:.2f}x"])
        doc_rows.append({"transport": transport, "poll": poll, "oneway_rtt_half_p50_ns_per_round": ms,
                         "median_of_medians_ns": m, "ratio_to_cacheline": ratio})
    print(f"32 B ping-pong, one-way = RTT/2; {rounds} rounds, configurations alternating in order")
    print(analysis.format_table(
        ["transport", "poll", "one-way (RTT/2) p50 ns, median of rounds", "range over rounds",
         "x cache-line limit"], rows, left=2))
    write_json(out / "bench.json", {
        "started_at": started, "finished_at": now_iso(), "status": status, "rounds": rounds,
        "cpus": list(cpus) if cpus else None, "lat_options": LAT_ARGS, "environment": env,
        "cacheline_oneway_p50_ns_median": limit, "limits": limits, "rows": doc_rows, "errors": errors})
    print(f"results: {out / 'bench.json'}")
    if status == "interrupted":
        sys.stderr.write("fabmeter: interrupted\n")
        return run.EXIT_INTERRUPTED
    return run.EXIT_OK if not errors else run.EXIT_RUNTIME
