#!/usr/bin/env python3
"""Checks what rdma/test-rdma-guest.sh left in OUTDIR/raw and prints the
alternated comparison of fabmeter's verbs rows with their perftest twins
(latency and message rate, medians over the rounds, each with its ratio).

    rdma/test_rdma_report.py OUTDIR      (OUTDIR = build/rdma-results)

Each fabmeter case must exit as it expects (0, or 2 for a refused
combination with a one-line error); a run that should work must end "ok"
on both ends, measure something, lose nothing on RC, and report the knobs
it was given in the transport's "granted" object. perftest pairs must exit
0 and print their result line. Fault cases (NAME.fault): after kill -9 or
SIGSTOP of one side, the client exits 3 with one error line, or the server's
session ends with one log line, within FAULT_NOTICE_S + FAULT_TCG_SLACK_S;
nothing is left and the next normal client succeeds. Writes
OUTDIR/results.json; exits 1 if any check failed. Standard library only: it runs before any venv exists.
"""
import json
import os
import platform
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python")]
from fabmeter import stats  # noqa: E402  (standard library only for what is used here)
from guest_report.cases import check_fabmeter  # noqa: E402
from guest_report.commands import (check_doctor, check_fabric, check_hop,  # noqa: E402
                                   check_mesh, check_peers_server, check_pytest, check_ramcloud_load, check_suite)
from guest_report.faults import FAULT_NOTICE_S, FAULT_TCG_SLACK_S, check_fault  # noqa: E402
from guest_report.perftest import check_perftest  # noqa: E402
from guest_report.read import nonempty_lines, read, read_kv  # noqa: E402


# A row's figure from each side: lat in microseconds as perftest prints it
# (send and write: RTT/2; read and atomics: the whole operation, which
# perftest does not halve), bw as messages per second.
def fabmeter_figure(row, r):
    if row.startswith("bw-"):
        return r.get("msg_rate")
    lat = r.get("latency_ns") or {}
    if "-ofi-" in row:  # fi_pingpong prints only a mean
        return lat["mean"] / 1000 if "mean" in lat else None
    one_sided = "-read" in row or "-atomic" in row
    p50 = lat.get("p50")
    return None if p50 is None else (p50 * 2 if one_sided else p50) / 1000


def perftest_figure(row, r):
    res = r.get("result_us") or {}
    if "usec_per_xfer" in res:  # libfabric's tools: Mxfers/sec has 2 decimals, usec/xfer 4 digits here
        return 1e6 / res["usec_per_xfer"] if row.startswith("bw-") else res["usec_per_xfer"]
    if row.startswith("bw-"):
        # A rate of 0 after every message went (ib_write_bw printed "0.00 0.00
        # 0.000000" once under rxe, exit 0) is a round perftest could not time.
        return res["msg_rate_mpps"] * 1e6 if res.get("msg_rate_mpps") else None
    return res.get("t_typical")


# What the rounds tell of a row, in this table's words (stats.verdict's, for fabmeter against its peer).
TELLS = {stats.BETTER: "ahead", stats.WORSE: "behind", stats.SAME: "level", stats.UNKNOWN: None}


def comparison(results):
    """The alternated rounds, a row each: every round's figure on both sides,
    their medians and the ratio fabmeter/perftest."""
    by_row = {}
    for r in results:
        # control (test-rdma.sh --control): the peer again, in fabmeter's column.
        m = re.fullmatch(r"cmp-r(\d+)-(fabmeter|control|perftest|fi_[a-z_]+)-(.+)", r["name"])
        if m:
            side = "fabmeter" if m.group(2) in ("fabmeter", "control") else "perftest"  # (the peer's column)
            entry = by_row.setdefault(m.group(3), {"fabmeter": {}, "perftest": {}, "peer": "perftest", "control": False})
            entry[side][int(m.group(1))] = r
            if side == "perftest":
                entry["peer"] = m.group(2)
            entry["control"] |= m.group(2) == "control"
    rows = []
    for row, sides in by_row.items():
        mine = perftest_figure if sides["control"] else fabmeter_figure
        fm = {k: mine(row, v) for k, v in sorted(sides["fabmeter"].items())}
        pt = {k: perftest_figure(row, v) for k, v in sorted(sides["perftest"].items())}
        fm_med, pt_med = stats.median(list(fm.values())), stats.median(list(pt.values()))
        bw = row.startswith("bw-")
        ratio = fm_med / pt_med if fm_med and pt_med else None
        # Each round's own ratio (its two runs ran back to back): their spread
        # says how far apart the tools' rounds fall, which the ratio of the
        # medians alone does not.
        per_round = [fm[k] / pt[k] for k in fm if fm[k] and pt.get(k)]
        interval = stats.median_interval(per_round)
        rows.append({"row": row, "kind": "bw" if bw else "lat", "peer": sides["peer"], "control": sides["control"],
                     "unit": "messages/s" if bw else "us (perftest's convention: RTT/2 for send and write, "
                                                     "the whole operation for read and atomics)",
                     "rounds": len(fm), "fabmeter": list(fm.values()), "perftest": list(pt.values()),
                     "fabmeter_median": fm_med, "perftest_median": pt_med, "ratio": ratio,
                     "round_ratios": per_round,
                     "round_ratio_interval": None if interval is None else list(interval),
                     "tells": TELLS[stats.verdict(interval, bw)],
                     "at_target": None if ratio is None else (ratio >= 1.0 if bw else ratio <= 1.0)})
    order = {"lat": 0, "bw": 1}
    return sorted(rows, key=lambda r: (order[r["kind"]], r["row"]))


def print_comparison(rows, fabtests):
    if not rows:
        return
    rounds = max(r["rounds"] for r in rows)
    control = any(r["control"] for r in rows)
    print()
    if control:
        print("CONTROL (test-rdma.sh --control): each peer ran in fabmeter's place as well, an A/A run; the 'fabmeter'")
        print("column is that peer's second run. Its ratios are what this table makes of two equal tools.")
    print("fabmeter vs perftest in the Soft-RoCE guest (qemu TCG), client rxe0 -> server rxe1, raw QP setup,")
    print(f"alternated over {rounds} rounds (odd rounds {'the control' if control else 'fabmeter'} first, even rounds its peer); "
          "medians of the rounds.")
    print("lat: microseconds as perftest prints them: send and write one-way = RTT/2, read and atomics the whole")
    print("operation; fabmeter = lat p50 over 2000, perftest = t_typical (its median). Target: ratio <= 1.00.")
    print("bw: messages per second (perftest's MsgRate); 1 KiB (atomics 8 B), 5000 messages, 128 in flight.")
    print("Target: ratio >= 1.00. write = plain RDMA write: lat polled at the receiver (ib_write_lat), bw")
    print("--passive-rx, counted by its acknowledgements while the receiver takes no part (ib_write_bw).")
    print("lat-ofi-*: libfabric's verbs provider beside fi_pingpong, both the MEAN of RTT/2 (all fi_pingpong prints).")
    if any(r["row"].startswith("bw-ofi-") for r in rows):
        print("bw-ofi-*: beside fabtests' fi_msg_bw (send) and fi_rma_bw -o writedata (write-imm), messages per second")
        print(f"(theirs: 1e6 / usec/xfer), both tools on {fabtests or 'fabtests libfabric'}.")
    print("per round: the lowest and highest of the rounds' own ratios (each round's two runs back to back).")
    print("tells: ahead or behind when a distribution-free interval (>= 90 %) of the median round ratio lies on one")
    print("side of 1.00, level when it spans it (the rounds cannot tell the tools apart); '-' below 5 rounds.")
    print(f"{'row':<26}{'fabmeter':>12}{'peer':>12}{'ratio':>8}  target  {'per round':<11}  {'tells':<6}  "
          f"rounds (fabmeter / peer)")
    for r in rows:
        fmt = (lambda v: f"{v:,.0f}") if r["kind"] == "bw" else (lambda v: f"{v:.1f}")
        show = lambda v: fmt(v) if isinstance(v, (int, float)) else "-"
        verdict = "-" if r["at_target"] is None else "yes" if r["at_target"] else "BEHIND"
        ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"  # 3 places: 0.999 is behind, which 1.00 would hide
        spread = f"{min(r['round_ratios']):.2f}-{max(r['round_ratios']):.2f}" if r["round_ratios"] else "-"
        print(f"{r['row']:<26}{show(r['fabmeter_median']):>12}{show(r['perftest_median']):>12}{ratio:>8}  {verdict:<6}  "
              f"{spread:<11}  {r['tells'] or '-':<6}  "
              f"{' '.join(show(v) for v in r['fabmeter'])} / {' '.join(show(v) for v in r['perftest'])}")
    judged = [r for r in rows if r["at_target"] is not None]
    behind = [r for r in judged if not r["at_target"]]
    told = {t: sum(r["tells"] == t for r in judged) for t in ("ahead", "level", "behind")}
    told_any = any(told.values())
    print(f"{len(judged) - len(behind)} of {len(judged)} rows at target; {len(behind)} behind"
          + (f", of which {sum(r['tells'] == 'level' for r in behind)} level by their rounds" if behind and told_any
             else "")
          + (f". By the rounds: {told['ahead']} ahead, {told['level']} level, {told['behind']} behind." if told_any
             else "."))


def main():
    out_dir = sys.argv[1]
    raw = os.path.join(out_dir, "raw")
    # A case's exit code is NAME.rc; its server's, a suite's report's, a mesh's rank 1's and a hop's are beside it.
    names = sorted({f[: -len(".rc")] for f in os.listdir(raw)
                    if f.endswith(".rc") and not f.endswith((".server.rc", ".report.rc", ".rank1.rc", ".hop.rc"))})
    results, failed = [], []
    for name in names:
        cmd = read(f"{raw}/{name}.cmd")
        check = (check_perftest if cmd.startswith(("ib_", "fi_"))
                 else check_ramcloud_load if cmd.startswith("fabmeter suite") and "ramcloud-load" in cmd
                 else check_suite if cmd.startswith("fabmeter suite")
                 else check_fabric if cmd.startswith("fabmeter fabric")
                 else check_hop if cmd.startswith("fabmeter hop")
                 else check_mesh if cmd.startswith("fabmeter mesh")
                 else check_peers_server if cmd.startswith("fabmeter peers --server")
                 else check_doctor if cmd.startswith("fabmeter doctor")
                 else check_pytest if cmd.startswith("pytest ") else check_fabmeter)
        problems, summary = check(raw, name)
        summary["passed"] = not problems
        summary["problems"] = problems
        results.append(summary)
        if problems:
            failed.append(name)
            print(f"FAIL {name}: {'; '.join(problems)}")
        if summary.get("t_send_p50_ns") is not None:
            print(f"t_send {name}: p50 t_recv - t_subm {summary['t_recv_p50_ns']:.0f} ns (all arrivals); over the "
                  f"{summary['iterations'] - summary['t_send_missed']} of {summary['iterations']} messages stamped "
                  f"after their post: p50 t_send - t_subm {summary['t_send_p50_ns']:.0f} ns, p50 t_recv - t_send "
                  f"{summary['t_recv_from_send_p50_ns']:.0f} ns")
    faults = []
    for name in sorted(f[: -len(".fault")] for f in os.listdir(raw) if f.endswith(".fault")):
        problems, summary = check_fault(raw, name)
        summary["passed"] = not problems
        summary["problems"] = problems
        faults.append(summary)
        if problems:
            failed.append(name)
            print(f"FAIL {name}: {'; '.join(problems)}")
    # t_send: at least one verbs case measured it (t_subm <= t_send <= t_recv), where the guest had a CPU for it.
    tsend = [r for r in results if r.get("name", "").endswith("-tsend") and not r["name"].startswith("ofi-")
             and "inline" not in r["name"]]
    if tsend and int(read(f"{raw}/_nproc", "0").strip() or 0) >= 3 and not any(r.get("t_send_p50_ns") is not None
                                                                              for r in tsend):
        failed.append("_t_send")
        print(f"FAIL t_send: none of {[r['name'] for r in tsend]} carried a stamp written after its post")
    # thesis-stream's verbs rows, read from the suite in the guest: one per service.
    if os.path.exists(f"{raw}/_stream_rows"):
        rows = nonempty_lines(read(f"{raw}/_stream_rows"))
        if len(rows) != 3:
            failed.append("_stream_rows")
            print(f"FAIL thesis-stream: {len(rows)} verbs rows read from the suite, not 3 (RC, UC, UD): "
                  f"{read(f'{raw}/_stream_rows.err').strip()[-300:]}")
    fault_run = read_kv(f"{raw}/_faults")
    selected = read(f"{raw}/_selected").strip()
    if fault_run:
        struck = sum(1 for f in faults if f.get("struck") == "1")
        # A fault drawn for the run's last moments may find it over; most must strike.
        if struck < max(1, len(faults) // 2):
            failed.append("_faults")
            print(f"FAIL faults: only {struck} of {len(faults)} struck (seed {fault_run.get('seed')})")
        if fault_run.get("cases") and len(faults) != int(fault_run["cases"]):
            failed.append("_faults_missing")
            print(f"FAIL faults: {len(faults)} of {fault_run['cases']} cases left a result")
        if fault_run.get("engines_left"):
            failed.append("_faults_left")
            print(f"FAIL faults: engines left running in the guest: {fault_run['engines_left']}")
    elif os.path.exists(f"{raw}/_finished") and not os.path.exists(f"{raw}/_compare_only") and not selected:
        failed.append("_faults")
        print("FAIL faults: the guest ran no fault section (no _faults)")
    if selected:
        print(f"FM_RDMA_CASES: only the cases matching {selected!r} ran")
    if os.path.exists(f"{raw}/_setup_failed"):
        failed.append("_setup")
        print("FAIL the guest's Soft-RoCE setup failed")
    if not os.path.exists(f"{raw}/_finished"):
        failed.append("_driver")
        print("FAIL the in-guest driver did not finish (timeout or crash: see console.log)")
    python_skipped = read(f"{raw}/_python_skipped").strip()
    if python_skipped:
        failed.append("_python")
        print(f"FAIL {python_skipped}")
    ofi_skipped = read(f"{raw}/_ofi_skipped").strip()
    if ofi_skipped:
        print(f"ofi verbs provider: {ofi_skipped}")
    fabtests_skipped = read(f"{raw}/_fabtests_skipped").strip()
    if fabtests_skipped:
        print(f"fabtests: {fabtests_skipped}")
    fabtests = read(f"{raw}/_fabtests").strip()

    rows = comparison(results)
    print_comparison(rows, fabtests)

    loss = [r for r in results if r["name"].startswith("loss-")]
    if loss:
        print("\nLoss: packets the kernel dropped at random (nftables counter) vs messages fabmeter reports lost")
        print(f"{'case':<28}{'dropped':>9}{'lost':>7}")
        for r in loss:
            print(f"{r['name']:<28}{r.get('dropped') or '-':>9}{r.get('lost_total', '-'):>7}")

    if faults:
        print(f"\nFaults (seed {fault_run.get('seed')}): the survivor's end after kill -9 / SIGSTOP, "
              f"bound {FAULT_NOTICE_S + FAULT_TCG_SLACK_S:.0f} s")
        print(f"{'case':<28}{'exp':>4}{'cm':>8}{'phase':>8}{'delay':>7}{'struck':>7}{'rc':>4}{'took s':>8}{'next':>5}  message")
        for f in faults:
            print(f"{f['name']:<28}{f.get('experiment', '-'):>4}{f.get('cm', '-'):>8}{f.get('phase', '-'):>8}"
                  f"{f.get('delay_ms', '-'):>7}{f.get('struck', '-'):>7}{f.get('client_rc') if f.get('victim') == 'server' else '-':>4}"
                  f"{f.get('took_s') if f.get('took_s') is not None else '-':>8}{f.get('next_rc', '-'):>5}"
                  f"  {f.get('message', '')[:90]}")

    started = float(read(f"{raw}/_started", "0").strip() or 0)
    finished = float(read(f"{raw}/_finished", "0").strip() or 0)
    doc = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                    "cpu_model": next((l.split(":", 1)[1].strip() for l in read("/proc/cpuinfo").splitlines()
                                       if l.startswith("model name")), "?")},
        "guest": read(f"{raw}/_guest").split(),
        "guest_seconds": round(finished - started, 1) if started and finished else None,
        "comparison": rows,
        "cases": results,
        "ofi_skipped": ofi_skipped or None,
        "fabtests": fabtests or None,
        "fabtests_skipped": fabtests_skipped or None,
        "faults": faults,
        "fault_run": fault_run or None,
        "passed": len(results) + len(faults) - len([n for n in failed if not n.startswith("_")]),
        "failed": len(failed),
    }
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(f"\ntest-rdma: {doc['passed']} passed, {doc['failed']} failed"
          f" ({len(results)} cases, {len(faults)} faults, {doc['guest_seconds']} s in the guest); results: {out_dir}/results.json")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
