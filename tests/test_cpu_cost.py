"""The CPU cost of each point, both ends (docs/results.md "cpu"): checked
against the kernel's accounting read by the test itself, busy polling
against event mode, every experiment, and a server's side that lies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ENGINE, json_lines
from fabmeter import analysis
from fabmeter.report import html as report_html
from test_clock_replies import ServerFrameRewriter
from test_security_frames import CPU_COST

SIDE_KEYS = {"window", "window_s", "user_s", "system_s", "cpu_s", "utilization", "voluntary_switches",
             "involuntary_switches", "run_delay_s", "on_cpu_s", "sleeps", "read_ns", "per", "count", "per_message_ns", "service_demand_us_per_kb",
             "cpus"}
CPU_KEYS = {"cpu", "user_s", "system_s", "irq_s", "softirq_s", "idle_s", "busy"}
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def serve(env, *args) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([str(ENGINE), "serve", "--bind", "127.0.0.1", "--port", "0", *args], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, json.loads(proc.stdout.readline())["port"]


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.communicate()


def points(stdout: str) -> list[dict]:
    return [p for p in json_lines(stdout) if p.get("type") == "point"]


def check_side(side: dict, per: str) -> None:
    assert set(side) == SIDE_KEYS, side
    assert side["window"] in ("measured", "with_warmup", "point")
    assert side["per"] == per and side["window_s"] > 0 and side["count"] > 0
    assert side["cpu_s"] == pytest.approx(side["user_s"] + side["system_s"], abs=1e-6)
    assert side["utilization"] == pytest.approx(side["cpu_s"] / side["window_s"], rel=1e-3)
    assert side["per_message_ns"] == pytest.approx(side["cpu_s"] * 1e9 / side["count"], rel=1e-3)
    # The two snapshots' reads were timed (docs/performance.md shows them beside the window).
    assert isinstance(side["read_ns"], int) and side["read_ns"] > 0, side
    # The measuring thread's figures lie within the window (null with --flows: a thread each).
    if side["on_cpu_s"] is not None:
        assert 0 < side["on_cpu_s"] and side["on_cpu_s"] + side["run_delay_s"] <= side["window_s"] * (1 + 1e-6), side
        assert isinstance(side["sleeps"], int) and side["sleeps"] >= 0, side


@pytest.mark.parametrize("experiment,args,per", [
    ("lat", ["-n", "500"], "round_trip"),
    ("lat", ["-n", "500", "--flows", "2"], "round_trip"),
    ("oneway", ["--bursts", "2", "--burst-size", "100"], "message"),
    ("bw", ["-n", "2000"], "message"),
    ("stream", ["--rate", "1000", "--count", "100", "--warmup", "0"], "message"),
    ("check", [], "message"),
    ("load", ["--rate", "2000", "--count", "200"], "request"),
])
def test_every_experiment_carries_both_sides(fm, experiment, args, per):
    r = fm.run(experiment, "-t", "tcp", *args, "--json")
    assert r.returncode == 0, r.stderr
    (p,) = points(r.stdout)
    windows = p["cpu"]["client"]["window"], p["cpu"]["server"]["window"]
    # load's server cannot tell the client's unloaded probes and warm-up from its measured requests.
    assert windows == (("with_warmup", "point") if experiment == "load" else ("measured", "measured"))
    for side in ("client", "server"):
        check_side(p["cpu"][side], per)
        sd = p["cpu"][side]["service_demand_us_per_kb"]
        assert (sd is not None and sd > 0) if experiment in ("bw", "stream") else sd is None
        cpus = p["cpu"][side]["cpus"]   # fabmeter pins both ends by default where it has two CPUs
        assert cpus is None or (len(cpus) == 1 and set(cpus[0]) == CPU_KEYS), cpus
    if "--flows" in args:   # every flow's round trips, over the span of their windows, no one CPU's lines
        assert p["cpu"]["client"]["count"] == p["iterations"] == 1000 and p["cpu"]["client"]["cpus"] is None
        assert p["cpu"]["server"]["count"] == 1000


def test_pinned_cpus_and_the_kernels_own_reading(fm):
    """The client's cpu_s over its points is part of the process's utime+stime
    as /proc/PID/stat counts it from the start to the exit (read before the
    test reaps it), and most of it: the measured window is most of the run."""
    server, port = serve(fm.env, "--once", "--cpu", "1")
    try:
        client = subprocess.Popen([str(ENGINE), "run", "lat", "-t", "tcp", "--server", f"127.0.0.1:{port}",
                                   "--cpu", "0", "--duration", "1"], env=fm.env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        start = proc_cpu_s(client.pid)
        out = client.stdout.read()  # until it closes its stdout, at exit
        os.waitid(os.P_PID, client.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: /proc still has it
        end = proc_cpu_s(client.pid)
        assert client.wait() == 0, client.stderr.read()
    finally:
        stop(server)
    (p,) = points(out)
    side = p["cpu"]["client"]
    kernel = end - start
    assert side["window"] == "measured" and side["window_s"] >= 1
    assert side["cpu_s"] <= kernel + 2 * TICK_S, (side, kernel)
    assert side["cpu_s"] >= 0.5 * kernel, (side, kernel)
    (cpu,) = side["cpus"]
    assert set(cpu) == CPU_KEYS and cpu["cpu"] == 0
    assert 0 <= cpu["busy"] <= 1
    # The pinned CPU's own accounting (sampled at each tick) holds this process's time there.
    on_cpu = cpu["user_s"] + cpu["system_s"] + cpu["irq_s"] + cpu["softirq_s"]
    assert on_cpu + 3 * TICK_S >= 0.8 * side["cpu_s"], (cpu, side)
    assert p["cpu"]["server"]["cpus"][0]["cpu"] == 1


def proc_cpu_s(pid: int) -> float:
    """utime + stime of the whole process, from /proc/PID/stat."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def busy_share(side: dict) -> float:
    """CPU time over the part of the window the measuring thread could run:
    on a loaded machine other work takes the CPU from a busy loop (its
    run-queue wait), which is no CPU this side chose not to use."""
    return side["cpu_s"] / max(side["window_s"] - (side["run_delay_s"] or 0), 1e-9)


def test_busy_polling_reads_a_cpu_event_mode_far_less(fm, tmp_path):
    r = fm.run("lat", "-t", "tcp", "--poll", "busy", "--duration", "0.5", "--json", "--out", str(tmp_path / "busy"))
    assert r.returncode == 0, r.stderr
    (busy,) = points(r.stdout)
    for side in ("client", "server"):
        assert busy_share(busy["cpu"][side]) >= 0.7, busy["cpu"][side]
    r = fm.run("stream", "-t", "tcp", "--poll", "event", "--timer", "timerfd", "--rate", "1000", "--count", "500",
               "--json", "--out", str(tmp_path / "event"))
    assert r.returncode == 0, r.stderr
    (event,) = points(r.stdout)
    for side in ("client", "server"):
        assert event["cpu"][side]["utilization"] <= 0.3, event["cpu"][side]
    # The terminal table's column and the report's figure.
    assert "CPU per round trip ns (process user+system; client | server)" in analysis.run_report([busy])
    assert "CPU ns/msg client | server" in analysis.stream_table([event, event])
    assert 'alt="CPU per message beside latency"' in report_html.write(tmp_path).read_text()


GOOD = {"window": "measured", "window_s": 1.0, "user_s": 0.5, "system_s": 0.5, "cpu_s": 1.0, "utilization": 1.0,
        "voluntary_switches": 1, "involuntary_switches": 1, "run_delay_s": 0.0, "on_cpu_s": 0.9, "sleeps": 0,
        "read_ns": 30000, "per": "round_trip",
        "count": 10, "per_message_ns": 1e8, "service_demand_us_per_kb": None, "cpus": None}
FORGED = {
    "not JSON": b"cpu=1",
    "extra key": json.dumps({**GOOD, "note": "injected"}).encode(),
    "missing key": json.dumps({k: v for k, v in GOOD.items() if k != "cpu_s"}).encode(),
    "negative": json.dumps({**GOOD, "cpu_s": -1}).encode(),
    "unknown window": json.dumps({**GOOD, "window": "}\n{\"type\": \"point\""}).encode(),
    "too many cpus": json.dumps({**GOOD, "cpus": [dict.fromkeys(CPU_KEYS, 0)] * 1025}).encode(),
    "oversized": json.dumps({**GOOD, "per": "x" * 40000}).encode(),
    # Each field in range, the side as a whole impossible:
    "more cpu than the window holds": json.dumps({**GOOD, "window_s": 0.05, "cpu_s": 1e9, "user_s": 1e9,
                                                   "system_s": 0}).encode(),
    "utilization not cpu_s / window_s": json.dumps({**GOOD, "utilization": 0.5}).encode(),
    "cpu_s not user_s + system_s": json.dumps({**GOOD, "user_s": 0.1}).encode(),
    "count over the point's": json.dumps({**GOOD, "count": 10**9, "per_message_ns": 1.0}).encode(),
    "per_message_ns not cpu_s / count": json.dumps({**GOOD, "per_message_ns": 5.0}).encode(),
    "a thread on and waiting for its CPU longer than the window": json.dumps({**GOOD, "run_delay_s": 0.2}).encode(),
}


def run_through_forger(fm, frame: bytes) -> subprocess.CompletedProcess:
    """A lat run whose server's cpu_cost frame the forger replaces with `frame`."""
    server, port = serve(fm.env)
    forger = ServerFrameRewriter(port, lambda ftype, body: frame if ftype == CPU_COST else body)
    try:
        return subprocess.run([str(ENGINE), "run", "lat", "-t", "tcp", "--server", f"127.0.0.1:{forger.port}",
                               "-n", "100"], env=fm.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60)
    finally:
        forger.close()
        stop(server)


@pytest.mark.parametrize("case", FORGED)
def test_a_forged_server_side_is_refused(fm, case):
    r = run_through_forger(fm, FORGED[case])
    assert r.returncode == 3, r.stderr
    assert not points(r.stdout), "no point line from a refused side"
    assert "cpu_cost" in r.stderr, r.stderr


def test_the_checked_server_side_is_printed(fm):
    r = run_through_forger(fm, json.dumps(GOOD).encode())
    assert r.returncode == 0, r.stderr
    (p,) = points(r.stdout)
    assert p["cpu"]["server"] == GOOD


def side_of(window_s, on_cpu_s, run_delay_s, sleeps):
    return {"window_s": window_s, "on_cpu_s": on_cpu_s, "run_delay_s": run_delay_s, "sleeps": sleeps}


def test_the_rule_on_an_end_kept_off_its_cpu():
    """analysis.off_cpu: a thread that never slept in its window and was not on its CPU all of it was kept off:
    another task's time (run_delay_s), the rest its CPU gone (the hypervisor's steal); a thread that slept cannot be
    told (a run-queue wait where it would have slept delays nothing); off_cpu_words names the ends beyond
    OFF_CPU_SHARE of their window."""
    gone = side_of(0.010, 0.006, 0.001, 0)
    assert analysis.off_cpu(gone) == pytest.approx((0.004, 0.001, 0.003))
    assert analysis.off_cpu(side_of(0.010, 0.006, 0.001, 3)) is None   # it slept
    assert analysis.off_cpu(side_of(0.010, None, None, None)) is None     # a peer tool's side, or --flows
    quiet = side_of(0.010, 0.00998, 0.00001, 0)
    share = analysis.OFF_CPU_SHARE
    edge = side_of(0.010, 0.010 * (1 - share) - 1e-6, 0.0, 0)
    assert analysis.off_cpu_words({"cpu": {"client": quiet, "server": quiet}}) is None
    words = analysis.off_cpu_words({"cpu": {"client": quiet, "server": edge}})
    assert words and words.startswith("the server was off its CPU 0.50 ms of its 10.00 ms window") \
        and "client" not in words, words
    words = analysis.off_cpu_words({"cpu": {"client": gone, "server": quiet}})
    assert "the client was off its CPU 4.00 ms" in words and "the CPU itself was gone 3.00 ms" in words, words


def test_a_task_that_takes_the_servers_cpu_is_said(fm, tmp_path):
    """A real-time task on the server's CPU, spinning half of every 4 ms, takes it from the busy server: its
    run-queue wait holds it, the point says the server was off its CPU, the run warns and the report lists it."""
    if len(os.sched_getaffinity(0)) < 2 or not shutil.which("chrt"):
        pytest.skip("needs two CPUs and chrt")
    cpu = sorted(os.sched_getaffinity(0))[:2]
    hog = subprocess.Popen(["chrt", "-f", "10", sys.executable, "-c", HOG, str(cpu[1])], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline() == "spinning\n", hog.stderr.read()
        r = fm.run("lat", "-t", "udp", "--poll", "busy", "--cpus", f"{cpu[0]},{cpu[1]}", "--duration", "1",
                   "--out", str(tmp_path / "run"))
    finally:
        hog.kill()
        hog.communicate()
    assert r.returncode == 0, r.stderr
    (p,) = json.loads((tmp_path / "run" / "run.json").read_text())["points"]
    server = p["cpu"]["server"]
    assert server["run_delay_s"] > 0.2 * server["window_s"], server
    assert analysis.off_cpu(server)[0] > 0.2 * server["window_s"], server
    said = [ln for ln in r.stdout.splitlines() if ln.startswith("warning: 32 B: ")]
    assert len(said) == 1 and "the server was off its CPU" in said[0], r.stdout
    page = report_html.write(tmp_path).read_text()
    assert "1 point measured while an end was kept off its CPU, e.g. udp 32 B: the server was off its CPU" in page


# Pinned to the CPU it is given, real-time: spin 2 ms, sleep 2 ms, for 20 s at most.
HOG = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
print("spinning", flush=True)
end = time.monotonic() + 20
while time.monotonic() < end:
    t = time.monotonic() + 0.002
    while time.monotonic() < t:
        pass
    time.sleep(0.002)
"""
