"""--flows N: N connections at once, a thread each, reported per flow and in aggregate.

The flows' counts add up to the point's, the raw samples hold every flow's
round trips, each flow's thread runs on the CPU --cpus gives it (read back
from the kernel), a transport fixed to one listening socket refuses with
the reason (in --dry-run too), and bad values are exit 2. Rates are never
asserted, only their arithmetic (sums, Jain's index within its bounds).
A flow that fails is named with its own error, on whichever end it failed.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from conftest import json_lines, need_transport, one_line_error, refusal, veth_namespaces


def _check_sums(p: dict, n: int):
    flows = p["flows"]
    assert [f["flow"] for f in flows] == list(range(n)), p
    for key in ("iterations", "bytes", "lost"):
        assert sum(f[key] for f in flows) == p[key], (key, p)
    assert 1 / n - 1e-9 <= p["jain_index"] <= 1 + 1e-9, p
    assert 0 <= p["overlap"] <= 1, p


def test_bw_four_tcp_flows_add_up(fm):
    r = fm.run("bw", "-t", "tcp", "--flows", "4", "-n", "20000", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    _check_sums(p, 4)
    assert all(f["iterations"] == 20000 and f["bytes"] == 20000 * 32 and f["gbps"] > 0 for f in p["flows"]), p
    assert p["iterations"] == 80000 and p["bytes"] == 80000 * 32
    assert p["gbps"] == pytest.approx(sum(f["gbps"] for f in p["flows"]), rel=1e-6)
    assert p["msg_rate"] == pytest.approx(sum(f["msg_rate"] for f in p["flows"]), rel=1e-6)
    assert not fm.leftovers()


def test_lat_two_flows_merge_every_round_trip(fm, tmp_path):
    r = fm.run("lat", "-t", "udp", "--poll", "event", "--flows", "2", "-n", "3000", "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    _check_sums(p, 2)
    assert p["latency_kind"] == "rtt/2" and p["samples_kind"] == "raw"
    # The saved round trips are every flow's, and the summary is theirs.
    rtt = np.load(tmp_path / p["samples"]["rtt_ns"])
    assert len(rtt) == p["iterations"] == 6000
    assert rtt.min() == pytest.approx(p["rtt_ns"]["min"]) and rtt.max() == pytest.approx(p["rtt_ns"]["max"])
    assert min(f["rtt_ns"]["min"] for f in p["flows"]) == pytest.approx(p["rtt_ns"]["min"])
    assert p["latency_ns"]["p50"] == pytest.approx(np.percentile(rtt, 50) / 2)
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["config"]["params"]["flows"] == 2


def test_flows_on_the_cpus_given(fm):
    r = fm.run("lat", "-t", "tcp", "--poll", "event", "--flows", "2", "-n", "500", "--cpus", "1+0,0+1", "--json")
    if r.returncode == 2 and "not available" in r.stderr:
        pytest.skip("needs CPUs 0 and 1")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert [f["cpu"] for f in p["flows"]] == [1, 0], p
    r = fm.run("lat", "-t", "tcp", "--poll", "event", "--flows", "2", "-n", "500", "--cpus", "none", "--json")
    assert r.returncode == 0, r.stderr
    assert [f["cpu"] for f in json_lines(r.stdout)[0]["flows"]] == [None, None]


def test_flows_table_in_the_terminal(fm):
    r = fm.run("bw", "-t", "shm", "--flows", "2", "-n", "2000")
    assert r.returncode == 0, r.stderr
    assert "fairness over 2 flows (Jain's index" in r.stdout and "Gbit/s" in r.stdout, r.stdout


def test_ops_table_in_the_terminal():
    # bw --ops (verbs; the datapath runs in the Soft-RoCE guest): each flow's op, each op's rate and their sum.
    from fabmeter.analysis import point_block
    ops = [{"op": "send", "flows": 1, "iterations": 3000, "gbps": 0.25, "msg_rate": 30000, "measured_at": "receiver"},
           {"op": "read", "flows": 1, "iterations": 1000, "gbps": 0.125, "msg_rate": 15000,
            "measured_at": "sender (one-sided: where the answers arrive)"}]
    flows = [{"flow": i, "op": o["op"], "cpu": None, "iterations": o["iterations"], "bytes": o["iterations"] * 1024,
              "gbps": o["gbps"], "msg_rate": o["msg_rate"]} for i, o in enumerate(ops)]
    text = point_block({"experiment": "bw", "size": 1024, "iterations": 4000, "gbps": 0.375, "msg_rate": 45000,
                        "flows": flows, "ops": ops, "jain_index": 0.9, "overlap": 1.0})
    lines = text.splitlines()
    ops_at = next(i for i, line in enumerate(lines) if line.startswith("op ") and "measured at" in line)
    assert lines[ops_at + 2].split()[:5] == ["send", "1", "3,000", "0.250", "30,000"], text
    assert lines[ops_at + 3].split()[:5] == ["read", "1", "1,000", "0.125", "15,000"], text
    assert lines[ops_at + 4].split() == ["sum", "2", "4,000", "0.375", "45,000"], text
    flows_at = next(i for i, line in enumerate(lines) if line.split()[:2] == ["flow", "op"])
    assert [line.split()[1] for line in lines[flows_at + 2:flows_at + 4]] == ["send", "read"], text


@pytest.mark.parametrize("dry_run", [False, True])
def test_one_listening_socket_refuses_several(fm, engine, dry_run):
    need_transport("zmq")
    args = ["bw", "-t", "zmq", "--flows", "2", "--endpoint", "ipc://"]
    said = refusal(fm, engine, args, dry_run)
    assert "zmq: 2 connections asked" in said and "ipc://" in said, said


@pytest.mark.parametrize("args, message", [
    (["bw", "-t", "tcp", "--flows", "0"], "--flows must be between 1 and 64"),
    (["bw", "-t", "tcp", "--flows", "65"], "--flows must be between 1 and 64"),
    (["bw", "-t", "tcp", "--flows", "99999999999"], "flows"),
    (["oneway", "-t", "tcp", "--flows", "2"], "does not apply to 'oneway'"),
    (["lat", "-t", "tcp", "--flows", "2", "--samples", "hist"], "raw samples"),
    (["lat", "-t", "tcp", "--flows", "2", "--cpus", "0+x,1"], "--cpus"),
])
def test_bad_flows_are_usage_errors(fm, args, message):
    r = fm.run(*args)
    assert r.returncode == 2, r.stderr
    assert message in one_line_error(r.stderr), r.stderr


def test_report_names_the_flows_and_their_fairness(fm, tmp_path):
    r = fm.run("bw", "-t", "shm", "--flows", "2", "-n", "2000", "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    r = fm.run("report", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "run" / "report.html").read_text()
    assert "2 flows (sum), Jain&#x27;s index" in html


# Resets every tcp connection of a namespace once its client has sent more
# than 2 MB (the control channel carries far less): the packets of one
# direction only are refused, so the reset lands on that end's sockets alone.
RESET_AFTER_2MB = """
table inet fmreset {{
  chain out {{
    type filter hook output priority 0;
    meta l4proto tcp ct direction {direction} ct original bytes > 2000000 counter reject with tcp reset
  }}
}}
"""


@pytest.mark.parametrize("failing", ["client", "server"])
def test_a_failed_flow_is_named_on_the_end_it_failed(fm, tmp_path, failing):
    """bw --flows 2 over tcp whose sockets on one end are reset: the error names that end's flow and its own
    error first; the other end's word, a consequence (its flows ended by ours) or the cause, follows or stands."""
    if not shutil.which("nft"):
        pytest.skip("needs nft (nftables; scripts/install-deps.sh installs it)")
    with veth_namespaces("fmfr", "10.75.4") as (ns, _, _, _):
        direction = "original" if failing == "client" else "reply"  # the packets the client sends, or its server
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=RESET_AFTER_2MB.format(direction=direction),
                       check=True, capture_output=True, text=True, timeout=30)
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.netfilter.nf_conntrack_acct=1"],
                       check=True, capture_output=True, text=True, timeout=30)
        r = fm.run("bw", "-t", "tcp", "--flows", "2", "-s", "64K", "-n", "20000", "--out", str(tmp_path),
                   prefix=("ip", "netns", "exec", ns), timeout=60)
    assert r.returncode == 3, (r.stdout, r.stderr)
    line = one_line_error(r.stderr)
    message = json.loads((tmp_path / "run.json").read_text())["message"]
    assert message in line, (message, line)
    if failing == "client":
        own, then = message.split("; then ", 1)
        assert own.startswith("flow ") and ": tcp: " in own, message
        assert then.startswith("the server's session ended: peer_lost: the other end's flows ended the point early"), message
    else:
        assert message.startswith("the server's session ended: failed: flow "), message
        assert ": tcp: " in message and "ended the point early" not in message, message
