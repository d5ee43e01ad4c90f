"""The messaging libraries' own minimal ping-pongs, beside fabmeter's zmq, nng
and nanomsg transports.

`rawpp_zmq`, `rawpp_nng` and `rawpp_nanomsg` (engine/tools/, built next to
the engine when the library is found) are the loop a user of each library
would write: PAIR sockets, send then receive, a non-blocking receive in a
spin (busy) or a blocking one (event), the library's own threads placed
where asked (as fabmeter's --io-cpu places them). The client times every
round trip (CLOCK_MONOTONIC), excludes the warm-up and prints one JSON line:
{"tool", "mode", "size", "iterations", "warmup", "rtt_ns_p50",
"oneway_ns_p50" (= RTT/2), "rtt_ns_mean", "library_version", "endpoint",
"io_cpu", "io_threads"}. The p50 interpolates linearly, as fabmeter's
percentiles do.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional, Sequence

from fabmeter.engine import find_engine
from fabmeter.peers.base import PeerError, Process, free_port, wait_until_bound

LIBS = ("zmq", "nng", "nanomsg")
MODES = ("busy", "event")


def binary(lib: str) -> Path:
    """rawpp_<lib> beside the engine binary; PeerError if it was not built."""
    if lib not in LIBS:
        raise ValueError(f"unknown library {lib!r} (expected one of {', '.join(LIBS)})")
    path = Path(find_engine()).parent / f"rawpp_{lib}"
    if not path.is_file():
        raise PeerError(f"{path} is missing: the engine was built without {lib}")
    return path


def run(lib: str, mode: str, size: int = 32, iters: int = 10000, cpus: Optional[Sequence[int]] = None,
        warmup: int = 1000, timeout_s: float = 60.0, io_cpus: Optional[Sequence[int]] = None) -> dict:
    """One ping-pong of `iters` round trips (after `warmup`) of `size` bytes
    over loopback tcp. `cpus` = (client CPU, server CPU) as in fabmeter's
    --cpus; None leaves both unpinned. `io_cpus` = (client's, server's) CPU
    for the library's own threads, -1 where they start; None: both where
    they start. Returns the client's JSON line plus `cpus`, `io_cpus` and
    `latency_kind` ("rtt/2", what `oneway_ns_p50` is)."""
    if mode not in MODES:
        raise ValueError(f"mode must be busy or event, got {mode!r}")
    exe = str(binary(lib))
    client_cpu, server_cpu = (str(cpus[0]), str(cpus[1])) if cpus else ("-1", "-1")
    client_io, server_io = (str(io_cpus[0]), str(io_cpus[1])) if io_cpus else ("-1", "-1")
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    server = Process([exe, "server", endpoint, mode, str(size), server_cpu, server_io])
    client = None
    try:
        wait_until_bound(server, "tcp", port)
        client = Process([exe, "client", endpoint, mode, str(size), client_cpu, client_io, str(iters), str(warmup)])
        deadline = time.monotonic() + timeout_s
        while not client.wait(0.1):
            if not server.running():
                raise PeerError(f"rawpp_{lib} server exited {server.proc.returncode}: {server.last_line()}")
            if time.monotonic() > deadline:
                raise PeerError(f"rawpp_{lib} client did not finish within {timeout_s:.0f} s")
        if client.proc.returncode != 0:
            raise PeerError(f"rawpp_{lib} client exited {client.proc.returncode}: {client.last_line()}")
        try:
            result = json.loads(client.last_line())
        except ValueError as e:
            raise PeerError(f"rawpp_{lib} printed no JSON line: {client.last_line()!r}") from e
    finally:
        for proc in (client, server):  # the server echoes until stopped
            if proc is not None:
                proc.stop()
                proc.close()
    result["cpus"] = [int(c) for c in cpus] if cpus else None
    result["io_cpus"] = [int(c) for c in io_cpus] if io_cpus else None
    result["latency_kind"] = "rtt/2"
    return result
