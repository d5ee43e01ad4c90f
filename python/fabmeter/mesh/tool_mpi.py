"""`fabmeter mesh --tool fabmeter-mpibench`: the MPI program (peers/mpibench.py) over the mesh's hosts, one rank a
host in their order, under mpirun started here, instead of a mesh of pairs.

--experiment lat runs its ping-pong (ranks 0 and 1: the first two hosts) and its allreduce over every host; bw its
windowed bandwidth from rank 0 to rank 1; over -t tcp or shm (Open MPI's tcp or shared-memory transport), with
--size and --iters as `fabmeter peers` takes them. mpirun starts the ranks itself: --launch local, all here;
--launch ssh, one on each host over --ssh (Open MPI's remote shell agent), or through the resource manager's own
launcher where mpirun finds one (Slurm). The ping-pong (bw: the bandwidth) is the mesh's one pair, 0 -> 1, in the
shape of mesh --tool's pairs (tool_pair.pair): the matrix shows it. Every test's figures, labelled as `fabmeter
peers` labels them, make the summary's `mpi` block (mesh.json's mesh.mpi), listed under the matrix.
"""

from __future__ import annotations

import shutil
from typing import Callable, Optional

from fabmeter.errors import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, FabmeterError
from fabmeter.mesh import output, tool_pair
from fabmeter.peers import mpibench
from fabmeter.peers.base import PeerError, PeerRun

TOOL = mpibench.PEER.tool
TESTS = {"lat": ("lat", "allreduce"), "bw": ("bw",)}     # the first: the pair 0 -> 1
KEYS = ("transport", "size", "iters")


def check(launch: Optional[str], experiment: str, options: dict) -> None:
    """What mpirun needs to run here, else exit 2 saying what is missing."""
    if not shutil.which("mpirun"):
        raise FabmeterError(f"mesh --tool {TOOL}: no mpirun here (apt-get install openmpi-bin)", EXIT_USAGE)
    if not mpibench.binary().is_file():
        raise FabmeterError(f"mesh --tool {TOOL}: the engine was built without Open MPI (apt-get install "
                            "libopenmpi-dev, then make build)", EXIT_USAGE)
    if launch not in ("local", "ssh"):
        raise FabmeterError(f"mesh --tool {TOOL} runs once, here: mpirun starts a rank on every host (--launch "
                            "local, or --launch ssh: over --ssh)", EXIT_USAGE)
    if experiment not in TESTS:
        raise FabmeterError(f"mesh --tool {TOOL}: --experiment lat (its ping-pong and allreduce) or bw (its "
                            "bandwidth)", EXIT_USAGE)
    extra = [k for k in options if k not in KEYS]
    if extra or options.get("transport") not in mpibench.BTL:
        raise FabmeterError(f"mesh --tool {TOOL}: takes -t {' or '.join(mpibench.BTL)}, --size and --iters"
                            + (f", not --{extra[0].replace('_', '-')}" if extra else ""), EXIT_USAGE)


def run(hosts: list[str], experiment: str, options: dict, agent: Optional[str]) -> tuple[dict, dict]:
    """(the pair 0 -> 1, the mpi block): each test of `experiment` under mpirun, all here where `agent` is None,
    else on the hosts over that remote shell."""
    size = options.get("size") or (PeerRun.bw_size if experiment == "bw" else PeerRun.size)
    iters = options.get("iters") or PeerRun.iters
    tests = {}
    for test in TESTS[experiment]:
        on = hosts if test == "allreduce" else hosts[:2]
        try:
            doc = mpibench.run(test, size, iters, options["transport"], ranks=len(on),
                               hosts=None if agent is None else on, agent=agent)
        except PeerError as e:
            tests[test] = {"status": "failed", "message": str(e)}
            continue
        tests[test] = {"status": "ok", "ranks": doc["ranks"], "hosts": on, "size": doc["size"],
                       "iterations": doc["iterations"], **mpibench.figures(doc),
                       "library_version": doc["library_version"], "command": doc["command"]}
    first = tests[TESTS[experiment][0]]
    pair = tool_pair.pair(TOOL, 0, 1, first if first["status"] == "ok" else None, first.get("message", ""))
    return pair, {"tool": TOOL, "tests": tests}


def main(hosts: list[str], experiment: str, pattern: str, schedule: str, options: dict, agent: Optional[str],
         emit: Callable[[dict], None]) -> int:
    """Runs the tests and emits the pair and the summary, as a mesh does; exit 0, or 3 if a test failed."""
    summary = output.Summary(hosts, pattern, schedule, experiment, options, 0)
    summary.tool = TOOL
    pair, summary.mpi = run(hosts, experiment, options, agent)
    summary.add(emit, pair)
    emit(summary.as_json())
    ok = summary.all_ok() and all(t["status"] == "ok" for t in summary.mpi["tests"].values())
    return EXIT_OK if ok else EXIT_RUNTIME
