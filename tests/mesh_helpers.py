"""What the mesh tests share: the options of a small run, ranks started one per host, the checks of a mesh's
pairs and of a bw pair's series, how a remote shell runs this checkout's fabmeter."""

from __future__ import annotations

import sys

from conftest import json_lines
from fabmeter.mesh import patterns


SMALL = ["--bursts", "2", "--burst-size", "200", "--warmup", "50", "-s", "32"]
DELAY_US = 1000     # well above this machine's scheduling noise under load (a pair's minimum reached 1 ms)
LOOPBACK4 = ",".join(["127.0.0.1"] * 4)


def run_ranks(fm, hosts: list[str], args: list, prefixes: list[tuple], ranks=None, timeout: float = 120):
    """`fabmeter mesh --rank i` for each rank (in its namespace); rank 0's (rc, stdout, stderr) and the others' rcs."""
    ranks = range(len(hosts)) if ranks is None else ranks
    procs = {r: fm.popen("mesh", "--hosts", ",".join(hosts), "--rank", r, *args, prefix=prefixes[r]) for r in ranks}
    try:
        out, err = procs[0].communicate(timeout=timeout)
        others = {r: p.wait(timeout=30) for r, p in procs.items() if r}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return procs[0].returncode, out, err, others


def check_pairs(out: str, pattern: str, n: int = 4) -> tuple[dict, dict]:
    lines = json_lines(out)
    pairs = {(p["src"], p["dst"]): p for p in lines if p["type"] == "pair"}
    (summary,) = [p for p in lines if p["type"] == "mesh"]
    assert sorted(pairs) == patterns.pairs(pattern, n)
    for p in pairs.values():
        assert p["status"] == "ok", p
        assert set(p["clock"]) >= {"offset_ns", "drift_ppm", "error_bound_ns", "probes"}
        # On synchronised clocks a latency is known within the fit's bound (0 on a shared clock).
        assert p["latency_ns"]["p50"] > -p["clock"]["error_bound_ns"], p
        assert p["gbps"] is None and p["lost"] is not None
        for side in ("client", "server"):   # each end's CPU cost, measured where it ran
            assert p["cpu"][side]["cpu_s"] > 0 and p["cpu"][side]["window"] in ("measured", "point"), p["cpu"]
    assert summary["pairs"] == len(pairs) and summary["failed"] == 0 and len(summary["hosts"]) == n
    return pairs, summary


def check_series(pair: dict, measured: int, bin_ns: float) -> None:
    """A bw pair's receiver's throughput_series: every measured arrival in a bin of --series-ms (wider only past
    512 bins; the clock's tick rate is known within a few per cent), from the end of the warm-up to the last
    arrival. The first bins are empty for as long as nothing arrives after the warm-up's last message: while the
    receiver, or the sender with nothing queued, is off its CPU. Busy engines of two pairs on a loaded 2-CPU
    machine run 20-30 % of their window, each preempted once or twice for 10-20 ms of a 25-90 ms run: one such
    wait right after the mark left 37 of 111 bins empty. So the empty start may last as long as both ends were
    off their CPUs (their cpu windows, which open at the mark) and a bin of stamping more; a series that began
    long before the warm-up's end would open with more."""
    series = pair["throughput_series"]["c2s"]
    msgs = series["msgs"]
    assert sum(msgs) == measured, series
    assert 1 <= len(msgs) <= 512 and series["bin_ns"] >= 0.95 * bin_ns, series
    assert all(n >= 0 for n in msgs) and msgs[-1] > 0, series
    off_cpu_ns = sum(side["window_s"] - side["cpu_s"] for side in pair["cpu"].values()) * 1e9
    leading_empty = next(i for i, n in enumerate(msgs) if n)
    assert (leading_empty - 1) * series["bin_ns"] <= off_cpu_ns, (series, pair["cpu"])


def remote_fabmeter(fm) -> str:
    """How the ranks' shells run this checkout's fabmeter (ssh passes no environment)."""
    return " ".join(["env", f"PYTHONPATH={fm.env['PYTHONPATH']}", f"FABMETER_ENGINE={fm.env['FABMETER_ENGINE']}",
                     f"FABMETER_TEST_TAG={fm.env['FABMETER_TEST_TAG']}", sys.executable, "-m", "fabmeter"])
