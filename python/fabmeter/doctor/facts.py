"""What the checks read: run.json's environment block (envinfo.py and both engines' start lines, with their
fabric), got for `fabmeter doctor` by a short probe run, and the plan a measurement would follow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fabmeter import envinfo, run
from fabmeter.errors import EXIT_OK

PROBE_ITERATIONS = 200      # a round trip each: enough to connect and report both ends, far too few to measure
FALLBACK_TRANSPORT = "tcp"  # where the planned transport cannot run, the host's facts still come over tcp


@dataclass(frozen=True)
class Plan:
    """The measurement the checks judge against."""
    transport: str
    size: int                       # the largest message
    cpus: Optional[tuple]           # (client, server) as --cpus gives them; None: unpinned
    rq_depth: int
    sq_depth: int
    server: Optional[str] = None    # HOST[:PORT] of the other end's serve; None: both ends here
    poll: str = "busy"
    provider: Optional[str] = None  # ofi: the libfabric provider (tcp, verbs;ofi_rxm, ...)


@dataclass(frozen=True)
class Facts:
    environment: dict               # as run.json's "environment": engine, server_engine from the probe
    probe_error: str = ""           # why a run over the planned transport failed ("" where it ran)


def probe(plan: Plan, engine: str, token_file: Optional[str]) -> Facts:
    """A short lat run over the planned transport (over tcp where that fails) for both ends' engine facts."""
    error = ""
    start = None
    for transport in dict.fromkeys((plan.transport, FALLBACK_TRANSPORT)):
        spec = run.RunSpec("lat", {"transport": transport, "iters": PROBE_ITERATIONS, "warmup": 0,
                                   "size": 32},
                           cpus=plan.cpus, server=plan.server, engine=engine, token_file=token_file)
        res = run.execute(spec)
        if res.exit_code == EXIT_OK and res.start is not None:
            start = res.start
            break
        error = error or f"a {PROBE_ITERATIONS}-round-trip lat over {transport} failed: {res.message}"
    env = envinfo.collect((start or {}).get("env"), (start or {}).get("server_env"))
    return Facts(env, error)


def ends(environment: dict) -> list[tuple[str, dict]]:
    """(end, the engine's environment with its fabric) for each end that reported: client, server."""
    out = []
    for end, key in (("client", "engine"), ("server", "server_engine")):
        value = environment.get(key)
        if isinstance(value, dict):
            out.append((end, value))
    return out


def fabric(engine_env: dict, key: str) -> dict:
    """One block of an engine's fabric (netdev, rdma, numa), {} where it is absent."""
    block = (engine_env.get("fabric") or {}).get(key) if isinstance(engine_env.get("fabric"), dict) else None
    return block if isinstance(block, dict) else {}
