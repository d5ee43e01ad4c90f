"""Cases run through fabmeter's Python CLI in the guest: suites, fabric, hop,
peers --server, doctor, pytest, mesh."""
import json
import os
import re

from .read import json_lines, nonempty_lines, option, read, results_json


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
