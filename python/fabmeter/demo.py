"""`fabmeter demo`: every transport built in and usable here, both polling
modes, side by side.

For each configuration: a 32 B ping-pong (lat) and two short bandwidth
runs (32 B for message rate, 32 KiB for throughput; 32 KiB rather than
64 KiB so that one UDP datagram holds it and the column compares like with
like). Each run writes its own
results folder; summary.json collects the comparison. A run that fails is
reported in one line and skipped, the others go on.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from fabmeter import analysis, command_options, envinfo, run
from fabmeter.command_options import CommandOption, Found
from fabmeter.cpus import parse_cpus
from fabmeter.engine import engine_info, engine_options, find_engine
from fabmeter.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME
from fabmeter.recorded import run_recorded
from fabmeter.results import now_iso, out_folder, write_json

OPTIONS = (
    CommandOption("out", "results folder (default: %(default)s)", metavar="DIR", default="results/demo"),
    CommandOption("cpus", "client and server CPUs (default: the first two CPUs)", metavar="A,B"),
)
POLLS = ("busy", "event")
# (label, transport options, polls) of the transports the demo runs in a
# particular way; every other transport the engine has built in runs as
# ("NAME", ["-t", "NAME"], POLLS). ofi shows two providers; its shm provider
# has no event mode. verbs needs an RDMA device (the Soft-RoCE guest: make test-rdma).
SPECIAL = {
    "ofi": (("ofi tcp msg", ["-t", "ofi", "--provider", "tcp", "--ep", "msg"], POLLS),
            ("ofi shm rdm", ["-t", "ofi", "--provider", "shm", "--ep", "rdm"], ("busy",))),
    "verbs": (),
}


def configs(built: list[str]) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """What the demo runs, for the transports of `fabmeter-engine options`."""
    return [c for t in built for c in SPECIAL.get(t, ((t, ["-t", t], POLLS),))]


# (folder suffix, experiment, engine options): short enough for < 3 minutes in all.
RUNS = (
    ("lat", "lat", {"size": 32, "iters": 20000}),
    ("bw", "bw", {"size": 32, "iters": 200000}),
    ("bw-32K", "bw", {"size": 32 << 10, "iters": 10000}),
)


def _one(out: Path, label: str, targs: list[str], poll: str, name: str, experiment: str, opts: dict,
         cpus: Optional[tuple[int, ...]]) -> run.RunResult:
    folder = out / f"{label.replace(' ', '-')}-{poll}-{name}"
    options = {**engine_options(find_engine()).from_argv(experiment, targs), "poll": poll, **opts}
    return run_recorded(run.RunSpec(experiment, options, cpus=cpus, out=folder), limits=True).result


def add_parser(sub, info: Optional[dict]) -> None:
    command = sub.add_parser("demo", help="compare every transport and polling mode on this machine",
                             allow_abbrev=False)
    command_options.add_arguments(command, OPTIONS)


def main(ns, found: Found) -> int:
    out, cpus = out_folder(ns.out), parse_cpus(ns.cpus)
    started = now_iso()
    rows, summary_rows, failures, total = [], [], 0, 0
    notes: dict[str, str] = {}   # transport/poll -> its I/O thread note (analysis.io_thread_note)
    status = "ok"
    info = engine_info(find_engine())
    for name, why in (info.get("transports_unavailable") or {}).items():
        sys.stderr.write(f"demo: {name} skipped: unavailable: {why}\n")
    for transport, targs, polls in configs(info["transports"]):
        for poll in polls:
            got: dict[str, dict] = {}
            errors: dict[str, str] = {}
            for name, experiment, opts in RUNS:
                total += 1
                sys.stderr.write(f"demo: {transport}/{poll} {name} ...\n")
                res = _one(out, transport, targs, poll, name, experiment, opts, cpus)
                if res.exit_code == EXIT_INTERRUPTED:
                    status = "interrupted"
                    break
                if res.exit_code != EXIT_OK or not res.points:
                    failures += 1
                    errors[name] = res.message or res.status
                    sys.stderr.write(f"demo: {transport}/{poll} {name} failed, skipped: {errors[name]}\n")
                    continue
                got[name] = res.points[-1]
                if name == "lat" and (note := analysis.io_thread_note(analysis.granted(res.events))):
                    notes[f"{transport}/{poll}"] = note
            lat = (got.get("lat") or {})
            one_way = lat.get("latency_ns") or {}
            rtt = lat.get("rtt_ns") or {}
            bw32, bw32k = got.get("bw") or {}, got.get("bw-32K") or {}
            p99 = one_way.get("p99")
            if f"{transport}/{poll}" in notes:
                p99 = f"{analysis.fmt_num(p99)} *"
            rows.append([transport, poll, one_way.get("p50"), p99, rtt.get("p50"),
                         analysis.fmt_num(bw32.get("gbps"), 3), analysis.fmt_num(bw32.get("msg_rate"), 0),
                         analysis.fmt_num(bw32k.get("gbps"), 3)])
            summary_rows.append({"transport": transport, "poll": poll,
                                 "oneway_rtt_half_p50_ns": one_way.get("p50"),
                                 "oneway_rtt_half_p99_ns": one_way.get("p99"),
                                 "note": notes.get(f"{transport}/{poll}"),
                                 "rtt_p50_ns": rtt.get("p50"),
                                 "bw_32B_gbps": bw32.get("gbps"), "bw_32B_msg_rate": bw32.get("msg_rate"),
                                 "bw_32KiB_gbps": bw32k.get("gbps"),
                                 "folders": {n: f"{transport.replace(' ', '-')}-{poll}-{n}" for n, _, _ in RUNS},
                                 "errors": errors})
            if status == "interrupted":
                break
        if status == "interrupted":
            break

    env = envinfo.collect()
    print(f"fabmeter demo  {started}  {env['cpu_model']}  kernel {env['kernel']['release']}")
    print("lat: 32 B ping-pong; one-way = RTT/2 (half the measured round trip). bw: 32 B and 32 KiB streams.")
    print(analysis.format_table(
        ["transport", "poll", "one-way (RTT/2) p50 ns", "one-way (RTT/2) p99 ns", "RTT p50 ns",
         "bw 32 B Gbit/s", "32 B msg/s", "bw 32 KiB Gbit/s"], rows, left=2))
    for row, note in notes.items():
        print(f"* {row}: {note}")
    if failures:
        print(f"{failures} of {total} runs failed (see above); '-' marks a figure not measured")
    if failures == total and status != "interrupted":
        status = "failed"
    write_json(out / "summary.json", {"started_at": started, "finished_at": now_iso(), "status": status,
                                      "runs": total, "failures": failures, "environment": env, "rows": summary_rows})
    print(f"results: {out}/<transport>-<poll>-<run>/run.json, summary: {out / 'summary.json'}")
    if status != "interrupted":
        try:
            from fabmeter.report.html import write as write_report  # matplotlib: loaded only when needed
        except ModuleNotFoundError as e:
            if e.name != "matplotlib":
                raise
            print("report: none (matplotlib is not installed: pip install 'fabmeter[report]')")
        else:
            print(f"report: {write_report(out)}")
    if status == "interrupted":
        sys.stderr.write("fabmeter: interrupted\n")
        return EXIT_INTERRUPTED
    return EXIT_OK if status == "ok" else EXIT_RUNTIME
