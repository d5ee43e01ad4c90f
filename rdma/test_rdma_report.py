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
import math
import os
import platform
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from fabmeter import stats  # noqa: E402  (standard library only for what is used here)


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def results_json(raw, name, file):
    """(the JSON document NAME.results/FILE holds, None) or (None, the problem reading it)."""
    try:
        with open(f"{raw}/{name}.results/{file}") as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, f"no {file}: {e}"


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def option(cmd, name):
    """Value of --name in a recorded command line, or None."""
    m = re.search(r"--%s[ =](\S+)" % re.escape(name), cmd)
    return m.group(1) if m else None



def check_fabmeter(raw, name):
    """Returns (problems, summary) for one fabmeter case."""
    cmd = read(f"{raw}/{name}.cmd").strip()
    expect = int(read(f"{raw}/{name}.expect", "0").strip() or 0)
    rc = int(read(f"{raw}/{name}.rc", "-1").strip() or -1)
    err = read(f"{raw}/{name}.err")
    lines = json_lines(read(f"{raw}/{name}.out"))
    problems, summary = [], {"name": name, "cmd": cmd, "rc": rc, "expect": expect}
    if rc != expect:
        tail = err.strip().splitlines()[-1:] or ["(no stderr)"]
        problems.append(f"exit {rc}, expected {expect}: {tail[0]}")
        return problems, summary
    if expect == 2:
        errs = [l for l in err.strip().splitlines() if l.strip()]
        if len(errs) != 1 or not errs[0].startswith("fabmeter-engine: error: "):
            problems.append(f"a refused run should print one error line, got {errs!r}")
        summary["message"] = errs[0] if errs else ""
        return problems, summary
    server_rc = read(f"{raw}/{name}.server.rc").strip()
    if server_rc != "0":
        problems.append(f"server exit {server_rc}: {read(f'{raw}/{name}.server.err').strip()[-300:]}")
    end = [l for l in lines if l.get("type") == "end"]
    if not end or end[-1].get("status") != "ok":
        problems.append(f"end line: {end[-1] if end else 'missing'}")
    points = [l for l in lines if l.get("type") == "point"]
    if not points:
        problems.append("no point measured")
    transport = next((l for l in lines if l.get("type") == "transport"), {})
    granted = transport.get("granted", {})
    summary["granted"] = granted
    is_ofi = " -t ofi" in f" {cmd}"
    service = option(cmd, "service") or "rc"
    for p in points:
        if p.get("partial"):
            problems.append(f"point {p.get('size')} B is partial")
        if p.get("experiment") == "check":
            if p.get("passed") is not True:
                problems.append("check failed: " + ", ".join(f"{k} {p.get(k)}" for k in
                                ("lost", "order_errors", "content_errors", "size_errors", "duplicated")))
            continue
        if p.get("experiment") == "stream":
            # A guest under TCG misses most steps (its source is late): every step is sent or counted missed,
            # every sample sent arrives or is counted lost.
            count = int(option(cmd, "count") or 0)
            if count and p.get("sent", 0) + p.get("missed_steps", 0) != count:
                problems.append(f"stream {p.get('rate_hz')} Hz x {p.get('values')}: sent {p.get('sent')} + missed "
                                f"{p.get('missed_steps')} != {count} steps")
            if p.get("received", 0) + p.get("lost", 0) != p.get("sent", 0):
                problems.append(f"stream {p.get('rate_hz')} Hz x {p.get('values')}: received {p.get('received')} + "
                                f"lost {p.get('lost')} != sent {p.get('sent')}")
        elif not p.get("iterations", 0) > 0:
            problems.append(f"point {p.get('size')} B: no iterations")
        if service == "rc" and not is_ofi and p.get("lost", 0) != 0:
            problems.append(f"point {p.get('size')} B: {p['lost']} lost on RC")
        if p.get("experiment") == "bw" and not p.get("gbps", 0) > 0:
            problems.append(f"point {p.get('size')} B: no bandwidth")
        # A plain write of 16 B or more carries its writer's credit, so in
        # --bidir the client's writes carry credits. How many go alone is the
        # guest's timing (a due credit waits a few hundred polls for a write,
        # and goes at once while the client's own writes wait for credit):
        # a speed figure, not checked.
        if (p.get("experiment") == "bw" and p.get("bidir") and granted.get("op") == "write" and p.get("size", 0) >= 16
                and not p.get("size_spread") and not granted.get("passive_rx")):  # a passive receiver gives none
            if not p.get("credits_carried", 0) > 0:
                problems.append(f"bidir plain write: no credit carried by a write ({p.get('credit_writes')} credit "
                                f"writes of their own, credits_carried {p.get('credits_carried')!r})")
        if p.get("experiment") == "oneway" and not is_ofi and not p.get("completions", 0) > 0:
            problems.append("oneway: no send completion stamped t_comp")
        if p.get("experiment") == "oneway":  # the stages from t_subm: post (t_post) and completion (t_comp)
            for key in ("post_ns", "completion_ns"):
                if not (p.get(key) or {}).get("min", -1) >= 0:
                    problems.append(f"oneway: no {key} stage (or a negative one): {p.get(key)!r}")
            problems += check_t_send(raw, name, cmd, p, summary)
        flows = option(cmd, "flows")
        ops = (option(cmd, "ops") or "").split(",") if option(cmd, "ops") else []
        if (flows or len(ops) > 1) and p.get("experiment") in ("lat", "bw"):  # a QP per flow, and their counts add up
            each = p.get("flows") or []
            conns = int(flows or 1) * max(1, len(ops))
            if len(each) != conns or granted.get("connections") != conns:
                problems.append(f"--flows {flows} --ops {ops}: {len(each)} flows reported, "
                                f"{granted.get('connections')} QPs granted, expected {conns}")
            for key in ("iterations", "bytes", "lost"):
                if sum(f.get(key, 0) for f in each) != p.get(key):
                    problems.append(f"--flows {flows}: the flows' {key} do not add up to the point's {p.get(key)}")
            if not all(f.get("iterations", 0) > 0 for f in each):
                problems.append(f"--flows {flows}: a flow measured nothing")
        if len(ops) > 1:
            problems += check_ops(ops, p)
        if p.get("experiment") == "load":
            if p.get("sent", 0) != p.get("completed", 0) + p.get("lost", 0) or p.get("sent", 0) == 0:
                problems.append(f"load: sent {p.get('sent')} != completed {p.get('completed')} + lost {p.get('lost')}")
            if name.endswith("workload-w1-clamped") and not p.get("clamped", 0) > 0:
                problems.append("load: w1 over UD clamped no request to the MTU")
    if any(p.get("experiment") == "setup" for p in points):
        problems += check_setup(name, cmd, points, granted)
    if name.startswith("dup-"):  # reordered and duplicated, nothing dropped
        for p in points:
            lost = p.get("lost", 0) + p.get("warmup_lost", 0)
            if lost:
                problems.append(f"nothing was dropped, yet {lost} counted lost")
            if not p.get("duplicated", 0) > 0:
                problems.append("netem duplicated packets, yet none counted duplicated")
    if name.startswith("loss-"):  # the kernel's count of dropped packets is the truth
        dropped = read(f"{raw}/{name}.dropped").strip()
        lost = sum(p.get("lost", 0) + p.get("warmup_lost", 0) for p in points)
        summary.update(dropped=int(dropped) if dropped.isdigit() else None, lost_total=lost)
        if not dropped.isdigit() or int(dropped) == 0:
            problems.append(f"the drop rule counted nothing ({dropped!r}): was it installed?")
        elif lost != int(dropped):
            problems.append(f"the kernel dropped {dropped} packets, fabmeter reports {lost} lost")
    if points:
        p = points[0]
        summary.update(experiment=p.get("experiment"), size=p.get("size"), iterations=p.get("iterations"),
                       lost=p.get("lost"), latency_kind=p.get("latency_kind"), latency_ns=p.get("latency_ns"),
                       gbps=p.get("gbps"), msg_rate=p.get("msg_rate"), points=len(points))
    if is_ofi:  # the device behind the verbs provider is the control address's, and libfabric says its version
        rdma = ((next((l for l in lines if l.get("type") == "start"), {}).get("env") or {}).get("fabric") or {}).get("rdma") or {}
        if rdma.get("device") != granted.get("domain", "rxe0") or not libfabric_as_loaded(raw, name, rdma.get("libfabric")):
            problems.append(f"environment's fabric: device {rdma.get('device')!r}, libfabric {rdma.get('libfabric')!r}"
                            + (f" (ran on {read(f'{raw}/{name}.libfabric').strip()})"
                               if os.path.exists(f"{raw}/{name}.libfabric") else ""))
        return problems, summary
    # The knobs must show in what the transport was granted.
    want = {
        "service": service,
        "op": option(cmd, "op") or (option(cmd, "ops") or "send").split(",")[0],  # --ops: the first QP's
        "cm": option(cmd, "cm") if option(cmd, "cm") not in (None, "auto") else ("raw" if service == "uc" else "rdma_cm"),
    }
    if option(cmd, "device"):
        want["device"] = option(cmd, "device")
    if option(cmd, "signal-every"):
        want["signal_every"] = int(option(cmd, "signal-every")) or None  # 0: auto, the transport's sq_depth / 2
    if summary.get("experiment") == "bw":
        want["post_list"] = int(option(cmd, "post-list") or 1)
    if summary.get("experiment") == "lat" and (want["op"] == "read" or want["op"].startswith("atomic-")):
        want.update(send_window=1, recv_slots=1)  # one op in flight: one send WR and one answer slot
    if service == "ud":
        want["grh_bytes"] = 40
    for k, v in want.items():
        if v is not None and granted.get(k) != v:
            problems.append(f"granted {k} = {granted.get(k)!r}, expected {v!r}")
    inline = int(option(cmd, "inline") or 0)
    if granted.get("max_inline_granted", 0) < inline:
        problems.append(f"--inline {inline} but the device granted {granted.get('max_inline_granted')}")
    passive = "--passive-rx" in cmd.split()
    if want["op"] == "write" and granted.get("passive_rx", False) != passive:
        problems.append(f"granted passive_rx = {granted.get('passive_rx')!r}, expected {passive!r}")
    if want["op"] in ("write", "write-imm") and not passive and "write_credits" not in granted:
        problems.append("write mode without credits in granted")
    # --passive-rx: the writer counts its acknowledged writes; nothing goes back.
    for p in points if passive else ():
        if p.get("credit_writes") != 0 or not str(p.get("measured_at", "")).startswith("sender"):
            problems.append(f"passive receiver: credit_writes {p.get('credit_writes')!r}, measured at "
                            f"{p.get('measured_at')!r} (expected 0, the sender)")
    # lat and bw fix every message's size: a plain write's slot then holds no
    # length after the payload, only the payload rounded up to 64 B.
    if (want["op"] == "write" and summary.get("experiment") in ("lat", "bw")
            and not any(p.get("size_spread") for p in points)):
        slot = -(-max(p.get("size", 0) for p in points) // 64) * 64
        if granted.get("recv_slot_bytes") != slot:
            problems.append(f"plain write of fixed sizes: slots of {granted.get('recv_slot_bytes')} B, expected {slot}")
    if "device" not in want and granted.get("device") != "rxe0":
        problems.append(f"the client should be on rxe0 (its control address), got {granted.get('device')}")
    # Each end's environment names the device it used (the server's: --device, else its address's, rxe1).
    start = next((l for l in lines if l.get("type") == "start"), {})
    mine = ((start.get("env") or {}).get("fabric") or {}).get("rdma") or {}
    theirs = ((start.get("server_env") or {}).get("fabric") or {}).get("rdma") or {}
    for what, got, expected in (("device", mine.get("device"), granted.get("device")),
                                ("gid", mine.get("gid"), granted.get("gid")),
                                ("active_mtu", mine.get("active_mtu"), granted.get("active_mtu")),
                                ("server's device", theirs.get("device"), option(cmd, "device") or "rxe1"),
                                ("port_state", mine.get("port_state"), "ACTIVE"),
                                ("server's port_state", theirs.get("port_state"), "ACTIVE")):
        if got != expected:
            problems.append(f"environment's fabric: {what} {got!r}, expected {expected!r}")
    return problems, summary


# The steps verbs reports of its connect (phases_ns), by how it connects.
SETUP_STEPS = {"raw": ("ibv_create_qp", "to INIT", "to RTR", "to RTS"),
               "rdma_cm": ("rdma_resolve_route", "rdma_create_qp, receives posted", "rdma_connect to ESTABLISHED")}
SETUP_ORDER = ("min", "p50", "p90", "p99", "max")


def check_t_send(raw, name, cmd, p, summary):
    """oneway's t_send (the device read the payload; the time thread's stamp): for every stamped
    message t_subm <= t_send <= t_recv, so both stages' minima are >= 0; inline sends have none, with
    the reason; a -tsend case has it wherever the guest has a CPU for the thread."""
    problems = []
    send, from_send, absent = p.get("send_ns"), p.get("latency_send_ns"), p.get("t_send_absent")
    inline = int(option(cmd, "inline") or 0) >= (p.get("size") or 0)
    if inline and (send is not None or "inline" not in (absent or "")):
        problems.append(f"inline sends: t_send should be absent for inline, got {send!r} ({absent!r})")
    if send is not None:
        if not (send.get("min", -1) >= 0 and (from_send or {}).get("min", -1) >= 0):
            problems.append(f"t_send outside [t_subm, t_recv]: t_send - t_subm {send!r}, t_recv - t_send {from_send!r}")
        # Under TCG the thread's vCPU is not always running: a message read before it wrote is missed (counted).
        summary.update(t_send_missed=p.get("t_send_missed"), iterations=p.get("iterations"),
                       t_send_p50_ns=send.get("p50"), t_recv_from_send_p50_ns=from_send.get("p50"),
                       t_recv_p50_ns=(p.get("latency_ns") or {}).get("p50"))
    elif name.endswith("-tsend") and not inline:
        cpus = int(read(f"{raw}/_nproc", "0").strip() or 0)
        # Every payload read before the thread wrote to it (under TCG its vCPU often does not run in time;
        # libfabric's verbs provider may send small messages inline on its own): main() wants one case stamped.
        beaten = "no message carried a stamp" in (absent or "")
        if not beaten and (cpus >= 3 or "no CPU of its own" not in (absent or "")):
            problems.append(f"no t_send on {cpus} CPUs: {absent!r}")
    return problems


def check_ops(ops: list, p: dict) -> list:
    """bw --ops: each op measured (its count and rates), the flows each ran the op of their turn, the
    point's figures the ops' sum."""
    problems = []
    each = p.get("ops") or []
    if [o.get("op") for o in each] != ops:
        return [f"--ops {','.join(ops)}: ops reported {[o.get('op') for o in each]}"]
    for o in each:
        if not (o.get("iterations", 0) > 0 and o.get("msg_rate", 0) > 0 and o.get("gbps", 0) > 0):
            problems.append(f"--ops: {o.get('op')} measured nothing: {o}")
    if sum(o.get("iterations", 0) for o in each) != p.get("iterations"):
        problems.append(f"--ops: the ops' iterations do not add up to the point's {p.get('iterations')}")
    for key in ("msg_rate", "gbps"):
        if abs(sum(o.get(key, 0) for o in each) - p.get(key, 0)) > 1e-6 * max(1.0, p.get(key, 0)):
            problems.append(f"--ops: the ops' {key} do not add up to the point's {p.get(key)}")
    if [f.get("op") for f in p.get("flows") or []] != [ops[i % len(ops)] for i in range(len(p.get("flows") or []))]:
        problems.append(f"--ops: the flows' ops {[f.get('op') for f in p.get('flows') or []]} are not the ops in turn")
    return problems


def check_setup(cmd_name, cmd, points, granted):
    """setup: every repetition counted, percentiles in order, verbs' connect steps, and a registration figure
    per size on base pages and on huge pages (or no huge-page figure and the reason; hugetlbfs pages in the
    case named for them, which reserves them)."""
    problems = []
    m = re.search(r"(?:^|\s)(?:-n|--iters)[ =](\d+)", cmd)
    reps = int(m.group(1)) if m else 0

    def ordered(block, what):
        values = [(block or {}).get(k) for k in SETUP_ORDER]
        if None in values or values != sorted(values) or values[0] <= 0:
            problems.append(f"setup {what}: percentiles missing or out of order: {block!r}")

    registration = "fi_mr_reg" if " -t ofi" in f" {cmd}" else "ibv_reg_mr"
    for p in points:
        if reps and p.get("iterations") != reps:
            problems.append(f"setup {p.get('what')}: {p.get('iterations')} repetitions, asked {reps}")
        if p.get("what") == "connect":
            for key in ("connect_ns", "teardown_ns", "control_rtt_ns"):
                ordered(p.get(key), key)
            if not p.get("covers") or p.get("registration") != registration:
                problems.append(f"setup connect: covers {p.get('covers')!r}, registration {p.get('registration')!r}")
            steps = SETUP_STEPS.get(granted.get("cm")) if registration == "ibv_reg_mr" else ()
            for step in steps or ():
                ordered((p.get("phases_ns") or {}).get(step), f"step {step}")
        elif p.get("what") == "mr":
            ordered(p.get("register_ns"), f"register {p.get('registered_bytes')} B")
            ordered(p.get("deregister_ns"), f"deregister {p.get('registered_bytes')} B")
            if "hugetlb" in cmd_name and p.get("huge_pages") != "hugetlb":
                problems.append(f"setup mr: {p.get('registered_bytes')} B took {p.get('huge_pages')!r} with huge "
                                f"pages reserved ({p.get('huge_pages_reason')})")
            if p.get("huge_pages") in ("hugetlb", "thp"):
                ordered(p.get("huge_register_ns"), f"huge-page register {p.get('registered_bytes')} B")
            elif p.get("huge_pages") is not None or not p.get("huge_pages_reason"):
                problems.append(f"setup mr: huge pages {p.get('huge_pages')!r} without figures or reason")
        else:
            problems.append(f"setup: a point of unknown kind {p.get('what')!r}")
    sizes = [p.get("registered_bytes") for p in points if p.get("what") == "mr"]
    want = option(cmd, "max-size")
    if "--what all" in cmd and sizes and want:
        top = int(want[:-1]) << {"K": 10, "M": 20, "G": 30}[want[-1]] if want[-1] in "KMG" else int(want)
        if sizes != [4096 << i for i in range(len(sizes))] or sizes[-1] != top:
            problems.append(f"setup mr: sizes {sizes}, expected 4 KiB .. {want}")
    return problems


def libfabric_as_loaded(raw, name, version) -> bool:
    """The libfabric version a case reports ("MAJOR.MINOR", any release the guest may have) is the one it
    ran on: fabtests' own where NAME.libfabric names it ("libfabric X.Y.Z (...)"), else the guest's."""
    match = re.fullmatch(r"(\d+)\.(\d+)", str(version or ""))
    loaded = re.match(r"libfabric (\d+)\.(\d+)", read(f"{raw}/{name}.libfabric"))
    return bool(match) and (loaded is None or match.groups() == loaded.groups())


def check_suite(raw, name):
    """A shipped suite run in the guest by fabmeter's Python CLI: every point
    ran and finished ok, and the report was written."""
    problems = []
    rc = read(f"{raw}/{name}.rc").strip()
    if rc != "0":
        problems.append(f"fabmeter suite exited {rc}: {read(f'{raw}/{name}.err').strip()[-300:]}")
    index, problem = results_json(raw, name, "index.json")
    if problem:
        return problems + [problem], {"name": name, "tool": "fabmeter suite"}
    points = index.get("points", [])
    bad = [f"{p['id']}: {p.get('status')} {p.get('message', '')}".strip() for p in points if p.get("status") != "ok"]
    if not points:
        problems.append("the suite ran no point")
    problems += [f"point {b}" for b in bad]
    if read(f"{raw}/{name}.report.rc").strip() != "0":
        problems.append("fabmeter report failed: " + read(f"{raw}/{name}.err").strip()[-300:])
    elif not os.path.exists(f"{raw}/{name}.results/report.html"):
        problems.append("fabmeter report wrote no report.html")
    return problems, {"name": name, "tool": "fabmeter suite", "points": len(points), "failed_points": len(bad)}


# The report's figures a run of suites/ramcloud-load.toml must draw (their alt texts).
RAMCLOUD_FIGURES = ("load achieved vs offered", "load closed loop against clients", "load transmit path")
TX_KEYS = ("waits", "wait_ns_mean", "polls", "completions_per_poll", "mean_per_poll", "poll_ns_mean", "polls_empty",
           "empty_poll_ns_mean")


def check_ramcloud_load(raw, name):
    """suites/ramcloud-load.toml's verbs rows: as any suite, and each row's
    run.json carries its pool sizes, every point's achieved throughput, the
    closed-loop points their clients, and the server's transmit path
    (completions per send-completion poll, poll and wait times); offered
    load reaches past the capacity; the report draws achieved against
    offered rate and against clients, and the transmit path."""
    problems, summary = check_suite(raw, name)
    folder = f"{raw}/{name}.results"
    pools, clients, top_multiple = set(), [], 0.0
    for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        try:
            with open(f"{folder}/{entry}/run.json") as f:
                run = json.load(f)
        except (OSError, ValueError):
            continue
        params = run.get("config", {}).get("params", {})
        pool = (params.get("rq_depth"), params.get("sq_depth"))
        for p in run.get("points", []):
            where = f"{entry} rq {pool[0]} sq {pool[1]} {p.get('phase')}"
            # A short open-loop point over Soft-RoCE under TCG may complete nothing in its window;
            # closed loop (the capacity, the clients) always completes some.
            achieved = p.get("achieved_rps")
            if not isinstance(achieved, (int, float)) or achieved < 0 or (p.get("phase") != "open loop" and not achieved):
                problems.append(f"{where}: achieved_rps {achieved!r}")
            tx = (p.get("server") or {}).get("tx")
            if not isinstance(tx, dict) or any(k not in tx for k in TX_KEYS):
                problems.append(f"{where}: server.tx {tx!r} lacks the transmit path's figures")
            if p.get("phase") == "closed loop":
                clients.append(p.get("clients"))
            elif isinstance(p.get("of_capacity"), (int, float)):
                top_multiple = max(top_multiple, p["of_capacity"])
                pools.add(pool)
    if len(pools) < 2:
        problems.append(f"offered-rate rows of {len(pools)} pool size(s), not the suite's several: {sorted(pools)}")
    if top_multiple <= 1.0:
        problems.append(f"offered rate up to {top_multiple} x capacity, not past it")
    if len(clients) < 2 or not all(isinstance(n, int) and n > 0 for n in clients):
        problems.append(f"closed-loop points' clients {clients}")
    html = read(f"{folder}/report.html")
    problems += [f"the report draws no '{alt}' figure" for alt in RAMCLOUD_FIGURES if html and f'alt="{alt}' not in html]
    summary.update(pools=sorted(pools), clients=clients, top_multiple=top_multiple)
    return problems, summary


def check_fabric(raw, name):
    """`fabmeter lat -t verbs --out` in the guest: run.json's environment names each end's rxe device (the
    client's rxe0, the server's rxe1), its port ACTIVE, its active MTU, link layer ethernet and the GID of the
    end's address; the client's agree with what its transport line says it used."""
    problems = []
    rc = read(f"{raw}/{name}.rc").strip()
    if rc != "0":
        return [f"fabmeter lat exited {rc}: {read(f'{raw}/{name}.err').strip()[-300:]}"], {"name": name}
    doc, problem = results_json(raw, name, "run.json")
    if problem:
        return [problem], {"name": name}
    env = doc.get("environment") or {}
    granted = next((e.get("granted") or {} for e in doc.get("engine_events") or [] if e.get("type") == "transport"),
                   {})
    ends = {}
    for key, device, addr, netdev in (("engine", "rxe0", "10.77.0.1", "veth0"), ("server_engine", "rxe1", "10.77.0.2", "veth1")):
        fabric = (env.get(key) or {}).get("fabric") or {}
        rdma, nd = fabric.get("rdma") or {}, fabric.get("netdev") or {}
        ends[key] = rdma
        want = {"device": device, "port": 1, "port_state": "ACTIVE", "link_layer": "ethernet",
                "gid": f"::ffff:{addr}", "gid_netdev": netdev}
        problems += [f"{key} rdma {k} = {rdma.get(k)!r}, expected {v!r}" for k, v in want.items() if rdma.get(k) != v]
        if not (isinstance(rdma.get("active_mtu"), int) and rdma["active_mtu"] >= 256):
            problems.append(f"{key} rdma active_mtu = {rdma.get('active_mtu')!r}")
        if not rdma.get("rdma_core"):
            problems.append(f"{key} rdma rdma_core = {rdma.get('rdma_core')!r}")
        if nd.get("name") != netdev or nd.get("driver") != "veth" or not nd.get("mtu"):
            problems.append(f"{key} netdev {nd.get('name')!r} driver {nd.get('driver')!r} mtu {nd.get('mtu')!r}, "
                            f"expected {netdev}, veth")
    client = ends["engine"]
    for mine, theirs in (("device", "device"), ("active_mtu", "active_mtu"), ("gid", "gid")):
        if client.get(mine) != granted.get(theirs):
            problems.append(f"environment says {mine} {client.get(mine)!r}, the transport used {granted.get(theirs)!r}")
    return problems, {"name": name, "tool": "fabmeter fabric", "client": client, "server": ends["server_engine"]}


PEERS_SERVER_TESTS = ("ib_send_lat", "ib_send_bw", "ib_write_lat", "ib_write_bw", "ib_read_lat", "ib_read_bw",
                      "ib_atomic_lat", "ib_atomic_bw", "rc_lat", "uc_lat", "ud_lat", "rc_rdma_read_lat",
                      "rc_rdma_write_lat", "rc_bw", "ud_bw", "rc_rdma_read_bw", "rc_rdma_write_bw")


def check_hop(raw, name):
    """`fabmeter lat -t verbs --via-hop` in the guest (test-rdma-guest.sh's hop): the run and the forwarding hop
    exited 0, and run.json's "hop" holds a round whose points carry the direct and through-the-hop round trips and
    the hop's added figure (through minus direct)."""
    rc = read(f"{raw}/{name}.rc").strip()
    if rc != "0":
        return [f"fabmeter lat --via-hop exited {rc}: {read(f'{raw}/{name}.err').strip()[-300:]}"], {"name": name}
    problems, summary = [], {"name": name}
    hop_rc = read(f"{raw}/{name}.hop.rc").strip()
    if hop_rc != "0":
        problems.append(f"the hop exited {hop_rc}: {read(f'{raw}/{name}.hop.err').strip()[-300:]}")
    doc, problem = results_json(raw, name, "run.json")
    if problem:
        return problems + [problem], summary
    points = [p for r in (doc.get("hop") or {}).get("rounds") or [] for p in r]
    if not points:
        problems.append("run.json's hop block has no round")
    for p in points:
        d, t, a = (p.get(k) or {} for k in ("direct_rtt_ns", "through_rtt_ns", "hop_added_rtt_ns"))
        if not (d.get("p50") and t.get("p50")):
            problems.append(f"a round without both round trips' p50: {p}")
        elif a.get("p50") != t["p50"] - d["p50"]:
            problems.append(f"added p50 {a.get('p50')} is not through {t['p50']} minus direct {d['p50']}")
        else:
            summary.update(direct_p50_ns=d["p50"], through_p50_ns=t["p50"], added_p50_ns=a["p50"])
    return problems, summary


def check_peers_server(raw, name):
    """`fabmeter peers --server` over verbs: every test asked for (--tests, else all) measured, its server side
    run by the serve (its argv reported, its CPU counted there), perftest's bw with its own --cpu_util figure,
    and no tool process left in the guest."""
    cmd = read(f"{raw}/{name}.cmd")
    rc = read(f"{raw}/{name}.rc").strip()
    if rc != "0":
        return [f"fabmeter peers exited {rc}: {read(f'{raw}/{name}.err').strip()[-300:]}"], {"name": name}
    wanted = set((option(cmd, "tests") or ",".join(PEERS_SERVER_TESTS)).split(","))
    recs = json_lines(read(f"{raw}/{name}.out"))
    points = {p.get("variant"): p for p in recs if p.get("type") == "point"}
    # perftest's TSC rate estimate may fail under TCG (inf, nan): skipped with that reason, not fabmeter's
    # failure; each tool must still measure something.
    clock = {r.get("variant") for r in recs if r.get("type") == "skipped" and "clock estimate" in (r.get("reason") or "")}
    problems = [f"{r.get('variant')}: {r.get('type')}: {r.get('reason')}" for r in recs
                if r.get("type") != "point" and r.get("variant") not in clock]
    problems += [f"{t}: no point" for t in sorted(wanted - set(points) - clock)]
    for tool, prefix in (("perftest", "ib_"), ("qperf", "rc_")):
        if any(t.startswith(prefix) for t in wanted) and not any(t.startswith(prefix) for t in points):
            problems.append(f"{tool}: no point at all")
    for test, p in points.items():
        lat = p.get("latency_ns") or p.get("rtt_ns") or {}
        if p.get("experiment") == "lat" and not (lat and all(isinstance(v, (int, float)) and v > 0 for v in lat.values())):
            problems.append(f"{test}: latency {lat!r}")
        # perftest's bandwidth may print as 0 under TCG (its clock estimate: tool_warnings); its count may not.
        if p.get("experiment") == "bw" and not ((p.get("gbps") or 0) > 0 or (
                test.startswith("ib_") and p.get("tool_warnings") and (p.get("iterations") or 0) > 0)):
            problems.append(f"{test}: gbps {p.get('gbps')!r}, iterations {p.get('iterations')!r}")
        if not (p.get("server_command") or [""])[0].endswith("/" + (test if test.startswith("ib_") else "qperf")):
            problems.append(f"{test}: server command {p.get('server_command')!r}")
        if not ((p.get("cpu") or {}).get("server") or {}).get("window_s"):
            problems.append(f"{test}: no server CPU window")
        if test.startswith("ib_") and test.endswith("_bw") and not isinstance(
                (p.get("tool_cpu") or {}).get("cpu_util_pct"), (int, float)):
            problems.append(f"{test}: no perftest --cpu_util figure")
        if test.startswith("ib_"):   # the verbs knobs asked for, as perftest's banner says it ran
            asked = {"service": (option(cmd, "service") or "rc").upper(), "cm": option(cmd, "cm") or "raw",
                     "bidir": "--bidir" in cmd.split() and test.endswith("_bw")}
            if option(cmd, "mtu"):
                asked["mtu"] = int(option(cmd, "mtu"))
            ran = {k: p.get(k, False if k == "bidir" else None) for k in asked}
            # rxe: perftest turns -I off ("not recognized to implement inline"), says so, and its banner shows 0.
            inline_off = any("inline" in w for w in p.get("tool_warnings") or [])
            if ran != asked or (option(cmd, "inline") and not ((p.get("inline") or 0) >= int(option(cmd, "inline"))
                                                               or inline_off)):
                problems.append(f"{test}: asked {asked} inline {option(cmd, 'inline')}, perftest ran {ran} "
                                f"inline {p.get('inline')}")
    left = read(f"{raw}/{name}.left").strip()
    if left:
        problems.append(f"tool processes left: {left}")
    rows = {t: {k: p.get(k) for k in ("experiment", "latency_kind", "latency_ns", "rtt_ns", "gbps", "msg_rate",
                                      "tool_cpu")} for t, p in points.items()}
    return problems, {"name": name, "tool": "fabmeter peers --server", "points": rows}


PARITY_CHECKS = ("parity.lat.32", "parity.lat.65536", "parity.bw.32", "parity.bw.65536")
PARITY_VERDICTS = ("within", "fabmeter faster by", "fabmeter slower by", "cannot tell")


def check_doctor(raw, name):
    """`fabmeter doctor --parity --server` over verbs: no fail finding, a finding for each parity row with its
    verdict and evidence, fabmeter measured in every round (perftest's clock estimate may fail under TCG: a round
    it could not time is in the evidence, not a failure), and no tool process left in the guest."""
    cmd = read(f"{raw}/{name}.cmd")
    rc = read(f"{raw}/{name}.rc").strip()
    if rc != "0":
        return [f"fabmeter doctor exited {rc}: {read(f'{raw}/{name}.err').strip()[-300:]}"
                f"{read(f'{raw}/{name}.out').strip()[-600:]}"], {"name": name}
    findings = json.loads(read(f"{raw}/{name}.out"))["findings"]
    parity = {f["check"]: f for f in findings if f["check"].startswith("parity.")}
    problems = [] if sorted(parity) == sorted(PARITY_CHECKS) else [f"parity findings {sorted(parity)}"]
    rounds = option(cmd, "rounds")
    for check, f in parity.items():
        ran = re.search(r"over (\d+) of (\d+) rounds(?: \(fabmeter measured (\d+))?", f["summary"])
        if (not any(v in f["summary"] for v in PARITY_VERDICTS) or f["severity"] not in ("ok", "warn")
                or not f["evidence"] or not ran or ran.group(2) != rounds or (ran.group(3) or rounds) != rounds):
            problems.append(f"{check}: {f['severity']}: {f['summary']}")
    left = read(f"{raw}/{name}.left").strip()
    if left:
        problems.append(f"tool processes left: {left}")
    return problems, {"name": name, "tool": "fabmeter doctor --parity", "parity": {c: f["summary"]
                                                                                  for c, f in parity.items()}}


def check_pytest(raw, name):
    """Python tests that need the guest: they ran and passed, none skipped."""
    out = read(f"{raw}/{name}.out")
    last = (nonempty_lines(out) or [""])[-1]
    rc = read(f"{raw}/{name}.rc").strip()
    if rc != "0" or " passed" not in last or "skipped" in last:
        return [f"pytest exited {rc}: {out.strip()[-600:]}"], {"name": name}
    return [], {"name": name, "tool": "pytest", "result": last}


def check_mesh(raw, name):
    """`fabmeter mesh` of two ranks in the guest: both ranks ended 0, and rank 0
    printed both directed pairs, ok, over verbs, and a summary with none failed."""
    problems = []
    for who, rc_file in (("rank 0", f"{name}.rc"), ("rank 1", f"{name}.rank1.rc")):
        rc = read(f"{raw}/{rc_file}").strip()
        if rc != "0":
            err = read(f"{raw}/{rc_file[:-len('.rc')]}.err").strip()[-300:]
            problems.append(f"{who} exited {rc or '?'}: {err}")
    lines = []
    for line in read(f"{raw}/{name}.out").splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    pairs = [x for x in lines if x.get("type") == "pair"]
    summary = next((x for x in lines if x.get("type") == "mesh"), None)
    if sorted((p.get("src"), p.get("dst")) for p in pairs) != [(0, 1), (1, 0)]:
        problems.append(f"pairs {[(p.get('src'), p.get('dst')) for p in pairs]}, want (0, 1) and (1, 0)")
    problems += [f"pair {p.get('src')}->{p.get('dst')}: {p.get('status')} {p.get('message', '')}".strip()
                 for p in pairs if p.get("status") != "ok"]
    if summary is None or summary.get("failed") != 0 or summary.get("transport") != "verbs":
        problems.append(f"mesh summary: {summary}")
    return problems, {"name": name, "tool": "fabmeter mesh", "pairs": len(pairs)}


PERFTEST_COLS = ["bytes", "iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99", "p999"]
# ib_*_bw: MB/sec columns (perftest's MB), and the message rate in millions per second.
PERFTEST_BW_COLS = ["bytes", "iterations", "bw_peak_mb", "bw_avg_mb", "msg_rate_mpps"]


def check_perftest(raw, name):
    cmd = read(f"{raw}/{name}.cmd").strip()
    rc = int(read(f"{raw}/{name}.rc", "-1").strip() or -1)
    out = read(f"{raw}/{name}.out")
    summary = {"name": name, "cmd": cmd, "rc": rc}
    problems = []
    if rc != 0:
        problems.append(f"exit {rc}: {out.strip()[-300:]}")
    # ib_write_lat's client prints "inf" on rxe; its server measures the same
    # ping-pong (each side times its own round trips), so fall back to it.
    for side in ("out", "server.out"):
        result = perftest_result(read(f"{raw}/{name}.{side}"))
        if result:
            summary["result_us"], summary["result_from"] = result, "client" if side == "out" else "server"
            break
    else:
        if rc == 0 and name.startswith("cmp-"):
            # A comparison round the peer could not time (perftest prints
            # "inf" on both ends now and then under rxe): the round has no
            # figure on that side, which the table shows; nothing of ours failed.
            summary["note"] = "no finite result line (the round counts for nothing)"
        else:
            problems.append("no finite result line in perftest's output")
    return problems, summary


def perftest_result(text):
    lines = text.splitlines()
    for i, line in enumerate(lines):
        # libfabric's tools (fi_pingpong, fabtests' fi_msg_bw and fi_rma_bw): sizes
        # and counts as "1k", "=2k"; usec/xfer is the mean of RTT/2 in a
        # pingpong, wall time per message in a bw test.
        if "usec/xfer" in line:
            head = line.split()
            for row in lines[i + 1:]:
                cells = row.split()
                if len(cells) == len(head) and re.fullmatch(r"[\d.]+", cells[head.index("usec/xfer")]):
                    return {"usec_per_xfer": float(cells[head.index("usec/xfer")])}
            continue
        if "t_typical" in line:
            cols = PERFTEST_COLS
        elif "MsgRate" in line:
            cols = PERFTEST_BW_COLS
        else:
            continue
        for row in lines[i + 1:]:
            nums = row.split()
            if len(nums) >= 5 and all(re.fullmatch(r"[\d.]+", x) for x in nums[:5]):
                return dict(zip(cols, map(float, nums)))
    return None


# Faults (the guest's "verbs: faults" section): the bound for the
# surviving side, plus what TCG adds between the signal and the observed end.
# The bound itself covers the detection (EOF at once; a frozen peer after
# 3 s without a heartbeat, beats every 1 s); the slack covers what emulation
# stretches after that: the survivor tearing down its QPs, CQs and MRs in the
# emulated rxe driver (~0.5-1 s per process under TCG, from the cases' own
# timings) and the guest script's 50 ms polling, on 2 vCPUs the fault loop
# shares with the engines.
FAULT_NOTICE_S = 5.0
FAULT_TCG_SLACK_S = 3.0


def read_kv(path):
    out = {}
    for line in read(path).splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def nonempty_lines(text):
    return [l for l in text.splitlines() if l.strip()]


def check_fault(raw, name):
    """Returns (problems, summary) for one fault case (NAME.fault and friends)."""
    kv = read_kv(f"{raw}/{name}.fault")
    summary = {"name": name, **kv}
    problems = []
    if not kv:
        return ["no NAME.fault written (the case did not finish?)"], summary
    bound = FAULT_NOTICE_S + FAULT_TCG_SLACK_S
    if kv.get("serve_alive") != "1":
        problems.append("fabmeter serve itself died")
    if kv.get("sessions_left"):
        problems.append(f"session processes left in the server: {kv['sessions_left']}")
    if kv.get("next_rc") != "0":
        tail = nonempty_lines(read(f"{raw}/{name}.next.err"))[-1:] or ["(no stderr)"]
        problems.append(f"the next normal client failed (exit {kv.get('next_rc')}): {tail[0]}")
    if kv.get("struck") != "1":
        return problems, summary  # the run ended before the fault: only the aftermath counts
    try:
        took = float(kv.get("took_s", ""))
    except ValueError:
        took = None
    summary["took_s"] = took
    if kv.get("victim") == "server":
        rc = kv.get("client_rc")
        err = nonempty_lines(read(f"{raw}/{name}.err"))
        if rc != "3":
            problems.append(f"the client exited {rc}, expected 3: {err[-1:] or '(no stderr)'}")
        if len(err) != 1 or not err[0].startswith("fabmeter-engine: error: "):
            problems.append(f"the client should print one error line, got {err!r}")
        lines = json_lines(read(f"{raw}/{name}.out"))
        end = [l for l in lines if l.get("type") == "end"]
        if not end or end[-1].get("status") != "failed":
            problems.append(f"the client's end line should say failed: {end[-1] if end else 'missing'}")
        points = [l for l in lines if l.get("type") == "point"]
        if kv.get("phase") == "point" and not points:
            problems.append("struck in the point, yet no point line was kept")
        if points and points[-1].get("partial") is not True:
            problems.append("the point cut short is not kept as partial")
        summary["message"] = err[0] if err else ""
        summary["points_kept"] = len(points)
        what = "the client ended"
    else:
        if kv.get("session_ended") != "1":
            problems.append(f"the server's session did not end (watched {kv.get('took_s')} s)")
        ends = [l for l in nonempty_lines(read(f"{raw}/{name}.server.err"))
                if re.match(r"fabmeter-engine: session (ended|failed): ", l)]
        if len(ends) != 1:
            problems.append(f"the server should log the session's end in one line, got {ends!r}")
        summary["message"] = ends[0] if ends else ""
        what = "the server's session ended"
    if took is None:
        problems.append(f"no time recorded for the survivor ({kv.get('took_s')!r})")
    elif took >= bound:
        problems.append(f"{what} {took:.2f} s after the fault, bound {bound:.1f} s")
    return problems, summary


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
    print(f"fabmeter vs perftest in the Soft-RoCE guest (qemu TCG), client rxe0 -> server rxe1, raw QP setup,")
    print(f"alternated over {rounds} rounds (odd rounds {'the control' if control else 'fabmeter'} first, even rounds its peer); "
          "medians of the rounds.")
    print("lat: microseconds as perftest prints them: send and write one-way = RTT/2, read and atomics the whole")
    print("operation; fabmeter = lat p50 over 2000, perftest = t_typical (its median). Target: ratio <= 1.00.")
    print("bw: messages per second (perftest's MsgRate); 1 KiB (atomics 8 B), 5000 messages, 128 in flight.")
    print("Target: ratio >= 1.00. write = plain RDMA write: lat polled at the receiver (ib_write_lat), bw")
    print("--passive-rx, counted by its acknowledgements while the receiver takes no part (ib_write_bw).")
    print("lat-ofi-*: libfabric's verbs provider beside fi_pingpong, both the MEAN of RTT/2 (all fi_pingpong prints).")
    if any(r["row"].startswith("bw-ofi-") for r in rows):
        print(f"bw-ofi-*: beside fabtests' fi_msg_bw (send) and fi_rma_bw -o writedata (write-imm), messages per second")
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
