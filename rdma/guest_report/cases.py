"""fabmeter's own cases in the guest (verbs and ofi experiments): exit, both ends
ok, something measured, the knobs granted, t_send stamps, --ops rates, setup's steps."""
import os
import re

from .read import json_lines, libfabric_as_loaded, option, read


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
