"""Why a pair started late: the step of its engine's start that took the time (mesh/lateness.py), carried to rank
0 and counted in the summary; a real lost SYN in two namespaces named as such."""

from __future__ import annotations

import os
import subprocess

from conftest import bridged_namespaces
from fabmeter.mesh import lateness, output
from mesh_helpers import SMALL, check_pairs, run_ranks

MS = 1_000_000


def point(late_ns: int, ready_before_ns: int, **steps_before_ns) -> dict:
    """A first point whose instant is 10 s on its clock; each step's stamp given as how long before the instant."""
    instant = 10_000 * MS
    stamps = {"begun": instant - 500 * MS, "control_connected": instant - 499 * MS, "welcomed": instant - 450 * MS,
              "transport_connected": instant - 400 * MS, "probed": instant - 399 * MS,
              "control_syn_retransmits": 0}
    stamps.update({k: instant - v if k != "control_syn_retransmits" else v for k, v in steps_before_ns.items()})
    return {"started_mono_ns": instant + late_ns, "start_late_ns": late_ns, "ready_mono_ns": instant - ready_before_ns,
            "start_steps_mono_ns": stamps}


def test_a_pair_on_time_has_no_reason():
    assert lateness.late_reason(point(lateness.LATE_NS, 300 * MS)) == (None, None)
    assert lateness.late_reason({}) == (None, None)
    assert lateness.late_reason({"start_late_ns": 5 * MS, "started_mono_ns": 9, "ready_mono_ns": 1}) == (None, None)


def test_ready_in_time_but_late_is_its_wake_up():
    step, why = lateness.late_reason(point(4 * MS, 300 * MS))
    assert step == "wake_up" and "ready 300.0 ms before the instant, went on 4.0 ms after it" in why


def test_ready_after_the_instant_names_the_longest_step():
    # The control connection took 3 s, its SYN sent three times.
    step, why = lateness.late_reason(point(2_600 * MS, -2_550 * MS, control_connected=-2_500 * MS,
                                           welcomed=-2_520 * MS, transport_connected=-2_540 * MS,
                                           probed=-2_545 * MS, control_syn_retransmits=2))
    assert step == "control_connect", why
    assert why.startswith("ready 2550.0 ms after the instant: the control connection's connect took 3000.0 ms")
    assert "SYN sent 3 times" in why
    # The server's end slow to its barrier.
    step, why = lateness.late_reason(point(900 * MS, -800 * MS))
    assert step == "barrier" and "took 1199.0 ms" in why and "SYN" not in why
    # A plan that reached the engine after the instant.
    step, why = lateness.late_reason(point(700 * MS, -650 * MS, begun=-200 * MS, control_connected=-210 * MS,
                                           welcomed=-220 * MS, transport_connected=-230 * MS, probed=-240 * MS))
    assert step == "plan" and "began 200.0 ms after the instant" in why


def test_rank_0_takes_the_reason_bounded_and_counts_the_late_pairs():
    body = {**output.failed_pair(1, 2, ""), "status": "ok", "late_step": "handshake", "late_reason": "x" * 1000}
    taken = output.valid_pair(body, 1, {(1, 2)})
    assert taken["late_step"] == "handshake" and len(taken["late_reason"]) == 300
    assert output.valid_pair({**body, "late_step": "reboot"}, 1, {(1, 2)}) is None
    assert output.valid_pair({**body, "late_reason": 5}, 1, {(1, 2)}) is None
    pairs = [{"src": 0, "dst": 1, "late_step": None, "start_late_ns": 1},
             {"src": 1, "dst": 0, "late_step": "wake_up", "start_late_ns": 2 * MS, "late_reason": "w"},
             {"src": 2, "dst": 3, "late_step": "control_connect", "start_late_ns": 9 * MS, "late_reason": "c"},
             {"src": 3, "dst": 2, "late_step": "control_connect", "start_late_ns": 3 * MS, "late_reason": "c2"}]
    late = output.late_pairs(pairs)
    assert late == {"n": 3, "by_step": {"control_connect": 2, "wake_up": 1},
                    "latest": {"src": 2, "dst": 3, "start_late_ns": 9 * MS, "late_reason": "c"}}
    assert output.late_pairs(pairs[:1]) is None
    summary = {"rounds": [], "start_clock_error_ns": 0, "start_skew_ns": None, "late_pairs": late}
    assert output.start_lines(summary)[-1] == ("pairs later than 1 ms: 3 (control connect 2, wake up 1); each one's "
                                               "late_reason is in mesh.json; the latest, 2 -> 3: c")


def test_a_lost_syn_is_named_the_reason(fm, token_file):
    """Two namespace hosts; rank 1's host drops the first two SYNs that reach it (an iptables quota: its counter
    is the truth), which are pair 0 -> 1's control connection's: the kernel resends a SYN after 1 s (and 1 or 2 s
    more), so that engine is ready only 2-3 s after its plan, past the 1.2 s lead. The pair says so: its control connect, its SYN
    sent three times; the other pair is not blamed on it."""
    net = f"10.194.{os.getpid() % 250}"
    with bridged_namespaces("fml", net, 2) as hosts:
        ns1 = hosts[1][0]
        drop = ["-p", "tcp", "--syn", "-m", "quota", "--quota", "120", "-j", "DROP"]
        subprocess.run(["ip", "netns", "exec", ns1, "iptables", "-A", "INPUT", *drop], check=True)
        rc, out, err, others = run_ranks(fm, [a for _, a in hosts], ["-t", "tcp", "--poll", "event", "--token-file",
                                                                    token_file, "--json", *SMALL],
                                         [("ip", "netns", "exec", ns) for ns, _ in hosts])
        counters = subprocess.run(["ip", "netns", "exec", ns1, "iptables", "-L", "INPUT", "-v", "-n", "-x"],
                                  check=True, capture_output=True, text=True).stdout
    assert rc == 0 and others == {1: 0}, err
    dropped = [line.split()[0] for line in counters.splitlines() if "quota" in line]
    assert dropped == ["2"], counters
    pairs, summary = check_pairs(out, "all-to-all", 2)
    slow = pairs[0, 1]
    assert slow["late_step"] == "control_connect", slow
    assert "SYN sent 3 times" in slow["late_reason"] and slow["start_ready_ns"] < 0, slow
    assert pairs[1, 0]["late_step"] != "control_connect", pairs[1, 0]
    late = summary["late_pairs"]
    assert late["by_step"]["control_connect"] == 1 and late["latest"]["src"] == 0, late
    assert "its SYN sent 3 times" in output.start_lines(summary)[-1]
