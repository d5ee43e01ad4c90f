"""A fixed packet delay on chosen links between network namespaces.

The kernel here has no netem. `fabmeter-delay-line` (engine/tools/
delay_line.cpp) binds a netfilter queue in a namespace and holds every packet
queued to it for a fixed delay, in order; an iptables rule on that
namespace's OUTPUT hook sends the packets of one direction of one link (say,
udp to C's address) to the queue. The rule is iptables', not nftables':
nftables' own `queue` statement needs CONFIG_NFT_QUEUE, which this kernel
lacks, while iptables' NFQUEUE target works through nft_compat. Queue
numbers are per network namespace: tests running side by side do not meet.

`delay_line()` starts the program, installs the rule only once the queue is
bound and, whatever happens, deletes the rule before it stops the program
(SIGTERM), so no packet is queued to nobody and nothing is left behind.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from contextlib import contextmanager

import pytest

from conftest import ENGINE

DELAY_LINE = ENGINE.parent / "fabmeter-delay-line"


def _netns(ns: str, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], check=True, capture_output=True, text=True,
                          timeout=30)


class DelayLine:
    """A running delay line: `rule_packets()` while it runs, `counters` (its
    end line) once the `with` block is over."""

    def __init__(self, ns: str, comment: str):
        self.ns, self.comment = ns, comment
        self.counters: dict | None = None

    def rule_packets(self) -> int:
        """Packets the rule has sent to the queue so far."""
        saved = _netns(self.ns, "iptables-save", "-c", "-t", "filter").stdout
        (line,) = [ln for ln in saved.splitlines() if self.comment in ln]
        return int(line[1:line.index(":")])  # "[packets:bytes] -A OUTPUT ..."


@contextmanager
def delay_line(ns: str, delay_us: int, match: list[str], queue: int = 0, limit: int = 10_000):
    """Delays by `delay_us` the packets leaving namespace `ns` that match the
    iptables arguments `match` (e.g. ["-p", "udp", "-d", "10.0.0.3"])."""
    if not DELAY_LINE.is_file():
        pytest.skip(f"{DELAY_LINE} missing (needs libnetfilter-queue-dev at build time)")
    if not shutil.which("iptables"):
        pytest.skip("needs iptables (scripts/install-deps.sh installs it)")
    proc = subprocess.Popen(["ip", "netns", "exec", ns, str(DELAY_LINE), "--delay-us", str(delay_us),
                             "--queue", str(queue), "--limit", str(limit)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = DelayLine(ns, f"fabmeter-delay-line-{queue}")
    # --queue-bypass: should the program die, packets pass instead of being dropped.
    rule = ["OUTPUT", *match, "-m", "comment", "--comment", line.comment,
            "-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass"]
    installed = False
    try:
        ready = proc.stdout.readline()
        if not ready:
            proc.wait(timeout=10)
            raise AssertionError(f"the delay line did not start: {proc.stderr.read().strip()}")
        assert json.loads(ready)["event"] == "ready", ready
        _netns(ns, "iptables", "-w", "-A", *rule)
        installed = True
        yield line
    finally:
        if installed:
            subprocess.run(["ip", "netns", "exec", ns, "iptables", "-w", "-D", *rule], capture_output=True,
                           timeout=30)
        if proc.poll() is None:
            proc.terminate()
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 0, f"the delay line exited {proc.returncode}: {err.strip()}"
    line.counters = json.loads(out.splitlines()[-1])
