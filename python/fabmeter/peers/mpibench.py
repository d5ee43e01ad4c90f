"""The MPI layer: fabmeter-mpibench (engine/tools/mpibench.cpp, built beside the engine where Open MPI's development
files are found) under mpirun, as the uDAPL study ran its MPI tests (osu lt and bw, presta allred).

Cases: lat (ranks 0 and 1 ping-pong, RTT/2 p50 and mean), bw (rank 0 streams windows of MPI_Isend to rank 1) and
allreduce (MPI_Allreduce of the size over ALLREDUCE_RANKS ranks, each timed at rank 0), over Open MPI's tcp
(OMPI_MCA_btl=self,tcp) or shared memory (self,vader). Every rank runs on this host (`--oversubscribe`: more ranks
than CPUs are fine for a test). The MPI library's progress engine busy-polls.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from fabmeter.engine import find_engine
from fabmeter.peers.base import Case, Peer, PeerError, PeerRun, point, probe_version, with_env

ALLREDUCE_RANKS = 4         # presta allred's 4 processes
BTL = {"tcp": "self,tcp", "shm": "self,vader"}
WINDOW = 64                 # bw: sends in flight a batch, as osu bw's window
NOTES = {"lat": "fabmeter-mpibench lat: MPI_Send/MPI_Recv ping-pong, p50 and mean of RTT/2 over every round trip",
         "bw": "fabmeter-mpibench bw: windows of 64 MPI_Isend, each answered, payload bits over the measured windows",
         "allreduce": "fabmeter-mpibench allreduce: MPI_Allreduce (MPI_SUM of doubles) over {ranks} ranks, p50 and "
                      "mean of each call's time at rank 0"}


def binary() -> Path:
    return Path(find_engine()).parent / "fabmeter-mpibench"


def command(test: str, size: int, iters: int, transport: str, ranks: Optional[int] = None,
            hosts: Optional[list[str]] = None, agent: Optional[str] = None) -> list[str]:
    """mpirun's command line for one test: `ranks` (default: 2, allreduce ALLREDUCE_RANKS), all on this host, or
    one on each of `hosts` in order (mpirun --host; the binary at the same path there), started by mpirun's own
    launcher: over `agent`, the remote shell (ssh) command, or the resource manager's where it finds one."""
    n = len(hosts) if hosts else ranks or (ALLREDUCE_RANKS if test == "allreduce" else 2)
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    where = ["--host", ",".join(hosts)] if hosts else []
    argv = ["mpirun", *root, "-np", str(n), *where, "--oversubscribe", str(binary()), test, str(size), str(iters),
            str(max(1, iters // 10)), *([str(WINDOW)] if test == "bw" else [])]
    return with_env(argv, {"OMPI_MCA_btl": BTL[transport], **({"OMPI_MCA_plm_rsh_agent": agent} if agent else {})})


def parse(text: str, test: str) -> dict:
    """The JSON line rank 0 prints; PeerError if there is none."""
    for line in reversed(text.splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("tool") == "fabmeter-mpibench" and doc.get("test") == test:
            return doc
    raise PeerError(f"fabmeter-mpibench {test} printed no result: {text.strip()[-300:]!r}")


def run(test: str, size: int, iters: int, transport: str, ranks: Optional[int] = None,
        timeout_s: float = 120.0, hosts: Optional[list[str]] = None, agent: Optional[str] = None) -> dict:
    argv = command(test, size, iters, transport, ranks, hosts, agent)
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise PeerError(f"mpirun did not finish within {timeout_s:.0f} s") from None
    if r.returncode != 0:
        raise PeerError(f"mpirun exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
    return {**parse(r.stdout, test), "command": argv}


def figures(doc: dict) -> dict:
    """A test's figures as fabmeter's points carry them: bw its Gbit/s and message rate; lat the p50 and mean of
    RTT/2, allreduce of each call's time at rank 0 (latency_kind says which), with the statistic's note."""
    test = doc["test"]
    if test == "bw":
        found = {"gbps": doc["gbps"], "msg_rate": doc["msg_rate"]}
    else:
        figure = "oneway" if test == "lat" else "allreduce"
        found = {"latency_ns": {"p50": doc[f"{figure}_ns_p50"], "mean": doc[f"{figure}_ns_mean"]},
                 "latency_kind": "rtt/2" if test == "lat" else "allreduce"}
    return {**found, "statistic_note": NOTES[test].format(ranks=doc["ranks"])}


class MpiBench(Peer):
    def __init__(self):
        super().__init__(tool="fabmeter-mpibench", package="libopenmpi-dev", poll="busy",
                         cases=tuple(Case(e, t) for e in ("lat", "bw", "allreduce") for t in ("tcp", "shm")))

    def available(self) -> bool:
        return shutil.which("mpirun") is not None and binary().is_file()

    def not_installed(self) -> dict:
        return self.skipped("not built: the engine's build found no Open MPI (apt-get install libopenmpi-dev "
                            "openmpi-bin, then make build)")

    def version(self) -> Optional[str]:
        return probe_version(("mpirun", "--version"), r"\(Open MPI\) (\S+)")

    def measure(self, case: Case, params: PeerRun) -> list[dict]:
        if params.server is not None:
            raise PeerError("fabmeter-mpibench runs under mpirun, which starts every rank itself: no --server")
        doc = run(case.experiment, case.size(params), params.iters, case.transport,
                  timeout_s=params.duration + params.timeout_s)
        self._keep_raw(params, case, json.dumps(doc))
        p = point(self.tool, case, iterations=doc["iterations"], ranks=doc["ranks"], size=doc["size"],
                  **figures(doc))
        return self._label([p], case, params, lambda *_: None, command=doc["command"],
                           library_version=doc["library_version"])


PEER = MpiBench()
