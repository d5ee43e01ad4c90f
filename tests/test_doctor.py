"""fabmeter doctor: each condition made real (a memlock limit, an MTU, the CPUs given, an IRQ's CPU), found, then
cleared; the bundle and its masking."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import state, veth_namespaces, wait_until
from fabmeter.doctor import cpus, limits, rdma
from fabmeter.doctor.facts import Plan
from fabmeter.doctor.mask import addresses

EXIT_FINDING = 4
# Without CAP_IPC_LOCK (root has it) the memlock limit applies, as to a user on a cluster node.
NO_IPC_LOCK = ("setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock")


def doctor(fm, *args, prefix: tuple = ()) -> tuple[int, dict]:
    r = fm.run("doctor", "--json", *args, prefix=prefix, timeout=120)
    assert r.returncode in (0, EXIT_FINDING), r.stderr
    return r.returncode, json.loads(r.stdout)


def finding(doc: dict, check: str, end: str = "") -> dict:
    (f,) = [f for f in doc["findings"] if f["check"] == check and end in f["end"]]
    return f


def test_memlock_below_what_the_run_registers_fails_with_the_numbers(fm):
    plan = Plan("verbs", 16 << 10, (0, 1), 256, 128)
    need = limits.registered_bytes(plan)
    assert need == (256 + 128) * (16 << 10)
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"the hard memlock limit {hard} B is below {need} B: the condition cannot be cleared here")
    code, doc = doctor(fm, "-t", "verbs", "-s", "16K", prefix=("prlimit", f"--memlock={1 << 20}", *NO_IPC_LOCK))
    f = finding(doc, "memlock")
    assert code == EXIT_FINDING and f["severity"] == "fail", f
    assert f"limit {1 << 20} B" in f["summary"] and f"{need} B" in f["summary"], f
    assert "ulimit -l" in f["fix"]
    _, doc = doctor(fm, "-t", "verbs", "-s", "16K", prefix=("prlimit", f"--memlock={need}", *NO_IPC_LOCK))
    assert finding(doc, "memlock")["severity"] == "ok"


def test_the_servers_memlock_below_what_the_run_registers_fails_with_its_numbers(fm, token_file):
    # The serve's own limit, as it reports it in its welcome: low, then enough, a fresh serve each time.
    need = limits.registered_bytes(Plan("verbs", 16 << 10, None, 256, 128))
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"the hard memlock limit {hard} B is below {need} B: the condition cannot be cleared here")
    net = f"10.197.{os.getpid() % 250}"
    with veth_namespaces("fmdl", net) as (ns_a, ns_b, _, _):
        for limit, severity in ((1 << 20, "fail"), (need, "ok")):
            serve = fm.popen("serve", "--bind", f"{net}.1", "--port", "0", "--token-file", str(token_file),
                             prefix=("ip", "netns", "exec", ns_a, "prlimit", f"--memlock={limit}", *NO_IPC_LOCK))
            try:
                port = json.loads(serve.stdout.readline())["port"]
                code, doc = doctor(fm, "-t", "verbs", "-s", "16K", "--server", f"{net}.1:{port}", "--token-file",
                                   str(token_file), prefix=("ip", "netns", "exec", ns_b))
            finally:
                serve.terminate()
                serve.communicate(timeout=30)
            f = finding(doc, "memlock", "server")
            assert f["severity"] == severity and f"limit {limit} B" in f["summary"], f
            assert f"{need} B" in f["summary"] and "welcome" in f["evidence"], f
            if severity == "fail":
                assert code == EXIT_FINDING and "ulimit -l" in f["fix"] and f["effect"], f


def test_a_forged_or_missing_memlock_report_is_skipped():
    plan = Plan("verbs", 16 << 10, None, 256, 128, server="10.0.0.1")
    for said in ({"limit_bytes": "1", "cap_ipc_lock": False}, {"limit_bytes": -1, "cap_ipc_lock": False},
                 {"limit_bytes": True, "cap_ipc_lock": False}, {"limit_bytes": 1, "cap_ipc_lock": 0}, [1], None):
        (f,) = [f for f in limits.check(plan, {"server_engine": {"memlock": said}}) if f.end == "server"]
        assert f.severity == "skipped" and "reports none" in f.summary, (said, f)
    (f,) = [f for f in limits.check(plan, {"server_engine": None}) if f.end == "server"]
    assert f.severity == "skipped" and "no run reached it" in f.summary
    unlimited = {"server_engine": {"memlock": {"limit_bytes": None, "cap_ipc_lock": False}}}
    assert [f.severity for f in limits.check(plan, unlimited) if f.end == "server"] == ["ok"]


def _set_mtu(ns: str, dev: str, mtu: int, peer_ns: str, peer_dev: str) -> None:
    """Sets a veth end's MTU and waits until both ends are up again: the change takes the pair's carrier down for
    a moment, and doctor's net.link would rightly fail a link it finds down."""
    subprocess.run(["ip", "-n", ns, "link", "set", dev, "mtu", str(mtu)], check=True, timeout=30)

    def up(n: str, d: str) -> bool:
        shown = subprocess.run(["ip", "-n", n, "-j", "link", "show", "dev", d], check=True, timeout=30,
                               capture_output=True, text=True).stdout
        return json.loads(shown)[0]["operstate"] == "UP"
    assert wait_until(lambda: up(ns, dev) and up(peer_ns, peer_dev), 10), f"{dev} or {peer_dev} still down"


def test_mtu_mismatch_between_the_ends_fails_naming_both(fm, token_file):
    net = f"10.196.{os.getpid() % 250}"
    with veth_namespaces("fmdr", net) as (ns_a, ns_b, dev_a, dev_b):
        serve = fm.popen("serve", "--bind", f"{net}.1", "--port", "0", "--token-file", str(token_file),
                         prefix=("ip", "netns", "exec", ns_a))
        try:
            port = json.loads(serve.stdout.readline())["port"]
            args = ("-t", "tcp", "--server", f"{net}.1:{port}", "--token-file", str(token_file))
            inside_b = ("ip", "netns", "exec", ns_b)
            _set_mtu(ns_a, dev_a, 1400, ns_b, dev_b)
            code, doc = doctor(fm, *args, prefix=inside_b)
            f = finding(doc, "net.mtu")
            assert code == EXIT_FINDING and f["severity"] == "fail", f
            assert f"client {dev_b} MTU 1500" in f["summary"] and f"server {dev_a} MTU 1400" in f["summary"], f
            _set_mtu(ns_a, dev_a, 1500, ns_b, dev_b)
            code, doc = doctor(fm, *args, prefix=inside_b)
            assert finding(doc, "net.mtu")["severity"] == "ok" and code == 0, doc
        finally:
            serve.terminate()
            serve.communicate(timeout=30)


def test_one_cpu_for_both_ends_is_a_finding_and_two_are_not(fm):
    _, doc = doctor(fm, "-t", "tcp", "--cpus", "0,0")
    f = finding(doc, "cpus.pair")
    assert f["severity"] == "warn" and "both on CPU 0" in f["summary"], f
    if len(os.sched_getaffinity(0)) >= 2:
        a, b = sorted(os.sched_getaffinity(0))[:2]
        siblings = cpus.cpu_list(open(f"/sys/devices/system/cpu/cpu{a}/topology/thread_siblings_list").read())
        _, doc = doctor(fm, "-t", "tcp", "--cpus", f"{a},{b}")
        assert finding(doc, "cpus.pair")["severity"] == ("warn" if b in siblings else "ok")


def test_smt_siblings_are_a_finding(tmp_path):
    # This VM has no SMT: its topology as a machine with two threads a core has it.
    for cpu, siblings in ((0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")):
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(siblings + "\n")
    (f,) = cpus.pairing(Plan("tcp", 32, (0, 2), 256, 128), sys_cpu=tmp_path)
    assert f.severity == "warn" and "SMT siblings" in f.summary
    (f,) = cpus.pairing(Plan("tcp", 32, (0, 1), 256, 128), sys_cpu=tmp_path)
    assert f.severity == "ok"


def test_governor_is_skipped_with_the_reason_without_cpufreq(fm):
    _, doc = doctor(fm, "-t", "tcp")
    f = finding(doc, "cpus.governor")
    if os.path.exists("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"):
        assert f["severity"] in ("ok", "warn")
    else:
        assert f["severity"] == "skipped" and "no cpufreq" in f["summary"]


def test_device_irqs_on_a_measuring_cpu(tmp_path):
    text = open("/proc/interrupts").read()
    columns = [int(c[3:]) for c in text.splitlines()[0].split()]
    hits = [(int(n), m.group(1), cpu) for line in text.splitlines()[1:] if (m := re.match(r"\s*(\d+):", line))
            for cpu, n in zip(columns, line.split()[1:]) if n.isdigit() and int(n)]
    if not hits:
        pytest.skip("no device interrupt counted on any CPU")
    _, irq, cpu = max(hits)     # the busiest: the finding names a CPU's busiest IRQs first
    (f,) = cpus.irqs([cpu])
    assert f.severity == "warn" and f"IRQ {irq} " in f.summary and f"CPU {cpu}:" in f.summary, f
    # The same machine with that CPU's interrupts moved away: cleared.
    lines = text.splitlines()
    col = columns.index(cpu)
    moved = [lines[0]] + [re.sub(r"^(\s*\d+:)((?:\s+\d+){%d})(\s+)\d+" % col, r"\g<1>\g<2>\g<3>0", ln)
                          for ln in lines[1:]]
    (tmp_path / "interrupts").write_text("\n".join(moved) + "\n")
    (f,) = cpus.irqs([cpu], proc=tmp_path)
    assert f.severity == "ok", f


def test_bundle_holds_what_it_lists_and_mask_leaves_no_address(fm, tmp_path):
    run = tmp_path / "run"
    r = fm.run("lat", "-t", "tcp", "-n", "200", "--out", str(run))
    assert r.returncode == 0, r.stderr
    expected = {"findings.json", "ibv_devinfo-v.txt", "fi_info.txt", "ucx_info-d.txt", "lscpu.txt", "cmdline.txt",
                "run.json"}
    for masked in (False, True):
        file = tmp_path / f"b{masked}.tar.gz"
        doctor(fm, "-t", "tcp", "--bundle", str(file), "--run", str(run), *(["--mask"] if masked else []))
        with tarfile.open(file) as tar:
            texts = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()}
        assert set(texts) == expected
        assert json.loads(texts["run.json"])["config"] and json.loads(texts["findings.json"])
        found = [a for text in texts.values() for a in addresses(text)]
        hostname = json.loads((run / "run.json").read_text())["environment"]["hostname"]
        named = any(re.search(rf"(?<![\w-]){re.escape(hostname)}(?![\w-])", t) for t in texts.values())
        if masked:
            assert not found and not named, found[:5]
        else:
            assert "127.0.0.1" in found and named


def test_a_run_records_the_cheap_checks_and_its_report_shows_them(fm, tmp_path):
    out = tmp_path / "run"
    r = fm.run("lat", "-t", "tcp", "-n", "200", "--cpus", "0,0", "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "run.json").read_text())
    pair = finding(doc, "cpus.pair")
    assert pair["severity"] == "warn" and pair["evidence"] and pair["effect"] and pair["fix"]
    if len(doc["environment"]["cpus_allowed"]) <= 2:      # the 2-CPU warning is one of them
        assert finding(doc, "cpus.crowded")["severity"] == "warn"
    r = fm.run("report", str(out), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    assert "warn: cpus.pair (both): client and server both on CPU 0" in (tmp_path / "r.html").read_text()


def test_a_runs_findings_are_made_once_its_engines_exited(fm, tmp_path):
    # The client engine stops itself right after its start line (FABMETER_STOP_AT, at its connect mark): run.json
    # then holds the start line's params but no findings, for the checks must not read /proc and /sys while the
    # engines measure. Killed there, the run fails; its run.json has them, made from both ends' facts.
    trace, out = tmp_path / "phases", tmp_path / "run"
    fm.env = dict(fm.env, FABMETER_TRACE_PHASES=str(trace), FABMETER_STOP_AT="client connect")
    run = fm.popen("lat", "-t", "tcp", "-n", "200", "--out", str(out))

    def stopped_client() -> int:
        marks = [m.split() for m in (trace.read_text().splitlines() if trace.exists() else [])]
        pid = next((int(m[2]) for m in marks if m[:2] == ["client", "connect"]), 0)
        return pid if pid and state(pid) == "T" else 0

    def started(doc_file: Path) -> bool:
        return doc_file.exists() and json.loads(doc_file.read_text())["config"]["params"] is not None
    try:
        assert wait_until(lambda: stopped_client() and started(out / "run.json"), 60), "no start line recorded"
        doc = json.loads((out / "run.json").read_text())
        assert doc["status"] == "running" and "findings" not in doc, doc.get("findings")
        os.kill(stopped_client(), signal.SIGKILL)
        run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    doc = json.loads((out / "run.json").read_text())
    assert doc["status"] == "failed" and run.returncode != 0, doc["message"]
    for end in ("client", "server"):
        assert finding(doc, "clock", end)["evidence"], doc["findings"]


@pytest.mark.skipif(os.environ.get("FM_RDMA_OK") != "1", reason="needs the Soft-RoCE guest (rdma/guest/README.md)")
def test_rxe_port_gid_roce_version_and_mtus_in_the_guest(fm, token_file):
    # Both rxe ends: the server's serve on rxe1's address, the client reaching it through rxe0.
    addr, netdev = os.environ["FM_RDMA_ADDR1"], os.environ["FM_RDMA_NETDEV1"]
    serve = fm.popen("serve", "--bind", addr, "--port", "0", "--token-file", str(token_file))
    try:
        port = json.loads(serve.stdout.readline())["port"]
        args = ("-t", "verbs", "-s", "4K", "--server", f"{addr}:{port}", "--token-file", str(token_file))
        code, doc = doctor(fm, *args)
        for end in ("client", "server"):
            assert finding(doc, "rdma.port", end)["severity"] == "ok"
            gid = finding(doc, "rdma.gid", end)
            assert gid["severity"] == "ok" and "10.77." in gid["summary"] and "RoCE v2" in gid["summary"], gid
            assert finding(doc, "rdma.mtu", end)["severity"] == "ok"
        assert not [f for f in doc["findings"] if f["check"] == "rdma.roce"]
        assert finding(doc, "net.mtu")["severity"] == "ok" and code == 0, doc
        subprocess.run(["ip", "link", "set", netdev, "mtu", "1000"], check=True, timeout=30)
        try:
            code, doc = doctor(fm, *args)
        finally:
            subprocess.run(["ip", "link", "set", netdev, "mtu", "1500"], check=True, timeout=30)
        f = finding(doc, "net.mtu")
        assert code == EXIT_FINDING and f["severity"] == "fail" and f"server {netdev} MTU 1000" in f["summary"], f
        server_mtu = finding(doc, "rdma.mtu", "server")
        assert "active MTU 512" in server_mtu["summary"] and server_mtu["severity"] == "ok", server_mtu
        code, doc = doctor(fm, *args)
        assert finding(doc, "net.mtu")["severity"] == "ok" and code == 0, doc
    finally:
        serve.terminate()
        serve.communicate(timeout=30)


@pytest.mark.parametrize("transport,provider,judged", [("verbs", None, True), ("ofi", "verbs;ofi_rxm", True),
                                                       ("ofi", "tcp", False), ("ofi", "shm", False)])
def test_no_rdma_device_fails_only_a_run_that_uses_one(transport, provider, judged):
    # What an engine reports where no RDMA device holds the address (an ofi tcp run on this VM).
    environment = {"engine": {"fabric": {"rdma": {"device": None, "port": None}}}}
    found = rdma.check(Plan(transport, 32, None, 256, 128, provider=provider), environment)
    if not judged:
        assert found == []
        return
    (f,) = found
    assert (f.check, f.severity, f.end) == ("rdma.device", "fail", "client")
    assert "None" not in f.evidence and "/sys/class/infiniband" in f.evidence
