"""Point ids: a point is named by what sets it apart from the suite's other points."""

from __future__ import annotations

import re
from typing import Any, Optional

from fabmeter.options import Option, Options
from fabmeter.suite.peer import params_of

ALWAYS_IN_ID = ("experiment", "transport", "poll")
PY_KEYS = ("experiment", "cpus", "server", "via_hop", "hop_transport")   # orchestration keys, not engine options
POINT_KEYS = ("cpus", "server", "via_hop", "hop_transport")               # those a Point holds apart from its options

# Short forms of keys in point ids (s32, r1000, v8); other numeric keys read
# key+value (tx-depth64), other text keys key-value (timer-tsc).
ID_PREFIX = {"size": "s", "max_size": "max", "iters": "n", "warmup": "w", "rate": "r", "values": "v",
             "signal_every": "sig", "inline": "inline", "count": "c", "burst_size": "burst"}
ID_BARE = {"poll", "service", "op", "pattern", "schedule", "mesh_experiment"}          # their values name themselves: busy, rc, write
ID_FLAG = {"all": "sweep"}                   # flags appear (only when true) under this name


def token(key: str, value: Any, opt: Optional[Option]) -> str:
    """One key's part of an id: s32K, r1000+10000, timer-tsc, sweep."""
    if opt is not None and opt.type == "flag":
        return ID_FLAG.get(key, key.replace("_", "-")) if value else ""
    text = opt.text(value) if opt is not None else str(value)   # sizes read 32K
    text = re.sub(r"[^A-Za-z0-9.+_-]", "_", text.replace(",", "+"))
    if key in ALWAYS_IN_ID or key in ID_BARE:
        return text
    if key in ID_PREFIX:
        return ID_PREFIX[key] + text
    name = key.replace("_", "-")
    numeric = opt is not None and (opt.type in ("size", "count", "duration", "rate", "list")) and value != "auto"
    return f"{name}{text}" if numeric else f"{name}-{text}"


def assign(points: list, table: Options) -> None:
    """Sets each point's id: experiment, transport, poll, and each key its
    own [[matrix]] table sets whose value varies across the suite.
    `points`: (Point, keys of its table) pairs."""
    _assign_peers([(p, own) for p, own in points if p.tool], table)
    points = [(p, own) for p, own in points if not p.tool]
    # A mesh point's own keys; its mesh_experiment (and mesh_tool) is always in its id, after "mesh".
    mesh_keys = tuple(k for k in next((p.mesh for p, _ in points if p.mesh), {})
                      if k not in ("mesh_experiment", "mesh_tool"))

    def value_of(p, key: str) -> Any:
        if key in POINT_KEYS:
            return getattr(p, key)
        if key in mesh_keys:
            return p.mesh[key] if p.mesh else None
        return p.options.get(key, table[key].default)

    def applies(p, key: str) -> bool:
        if key in mesh_keys:
            return p.mesh is not None
        return key in PY_KEYS or table[key].applies(p.engine_experiment, p.transport)

    keys = [o.key for o in table]
    varying = {k for k in PY_KEYS + mesh_keys + tuple(keys) if k not in ALWAYS_IN_ID
               and len({token(k, value_of(p, k), table.get(k)) for p, _ in points if applies(p, k)}) > 1}
    order = ([k for k in mesh_keys] + [k for k in keys if k in ID_BARE] + [k for k in keys if k not in ID_BARE]
             + list(POINT_KEYS))
    for p, own in points:
        tokens = [p.experiment, *([p.mesh["mesh_experiment"], p.mesh["mesh_tool"] or ""] if p.mesh else []),
                  p.transport]
        if "poll" in table:
            tokens.append(token("poll", value_of(p, "poll"), table["poll"]))
        tokens += [token(k, value_of(p, k), table.get(k))
                   for k in order if k in own and k in varying and value_of(p, k) is not None]
        p.id = "-".join(x for x in tokens if x)


def _assign_peers(points: list, table: Options) -> None:
    """A peer point's id: tool, experiment, transport, its test (where the tool has several), then each key its
    table sets whose value varies among the suite's peer points: sockperf-lat-tcp-s64, perftest-lat-verbs-
    ib_send_lat-uc-s4K, perftest-bw-verbs-ib_send_bw-rc-bidir-s1K."""
    def value_of(p, key: str) -> Any:
        return getattr(p, key) if key in ("cpus", "server") else params_of(p)[key]

    keys = ("service", "bidir", "mtu", "inline", "size", "iters", "duration", "rate", "device", "server_device",
            "gid_index", "cpus", "server")
    varying = {k for k in keys if len({value_of(p, k) for p, _ in points}) > 1}
    for p, own in points:
        tokens = [p.tool, p.experiment, p.transport, p.options.get("tests") or ""]
        tokens += [token(k, value_of(p, k), table.get(k) if k in ("size", "bidir") else None)
                   for k in keys if k in own and k in varying and value_of(p, k) is not None]
        p.id = "-".join(re.sub(r"[^A-Za-z0-9.+_-]", "_", x) for x in tokens if x)
