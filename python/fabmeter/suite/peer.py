"""A suite's peer points: one case of an established tool (`tool = "sockperf"`), as `fabmeter peers` runs it.

A `[[matrix]]` table with `tool` makes peer points: each is one of the tool's cases (its experiment,
transport and, where it has several, test), measured with the keys `fabmeter peers` takes (their
key form: size, iters, duration, rate, cpus, server, token_file, device, server_device, gid_index, service,
inline, mtu, bidir, tests),
the tool's server side here or, with `server`, started by that host's `fabmeter serve` from its
allow-list. The result is OUT/<point>/peers.json, the same document `fabmeter peers --out` writes
(the report reads it beside the suite's run.json files), with the point's status, its parameters (the
suite resumes a point whose peers.json says ok with the same parameters) and the suite it belongs to.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any, Optional

from fabmeter import __version__, envinfo
from fabmeter.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME
from fabmeter.options import parse_size
from fabmeter.peers import command as peers_command
from fabmeter.peers.base import Case, PeerError, PeerRun, Rdma, Unsupported
from fabmeter.peers.registry import PEERS
from fabmeter.results import now_iso, write_json

PEERS_FILE = "peers.json"
# A peer point's keys besides tool, experiment and transport (the case): `fabmeter peers`'s options
# (peers/command.py), in their key form; cpus and server are every point's.
PEER_KEYS = {o.key: o for o in peers_command.OPTIONS
             if o.name in ("cpus", "server", "tests", "size", "iters", "duration", "rate", "device", "server-device",
                           "gid-index", "service", "inline", "mtu", "bidir", "token-file")}
# Their defaults are `fabmeter peers`'s; size is the case's message size (peers' --size, or --bw-size for bw).
DEFAULTS = {k: None if k == "size" else o.default for k, o in PEER_KEYS.items() if k not in ("cpus", "server")}
KEYS = ("tool", "experiment", "transport", *PEER_KEYS)
_DEVICE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def tools() -> tuple[str, ...]:
    return tuple(PEERS)


def typed(key: str, value: Any) -> Any:
    """One value of a peer point's key, typed as `fabmeter peers` takes it; ValueError(what was expected)."""
    def whole(lo: int, hi: int, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"expected {what}, got {value!r}")
        return value

    if key == "size":
        if isinstance(value, str):
            value = parse_size(value)    # its ValueError says what it expected
        return whole(1, 1 << 30, "a message size of at least 1 byte (an integer or a string such as \"64K\")")
    if key == "iters":
        return whole(1, 10 ** 9, "a whole number of iterations from 1")
    if key == "rate":
        return whole(1, 10_000_000, "requests per second from 1 to 10000000")
    if key == "gid_index":
        return whole(0, 255, "a GID index from 0 to 255")
    if key == "inline":
        if isinstance(value, str):
            value = parse_size(value)
        return whole(0, 1 << 20, "bytes sent inline from 0 (an integer or a string such as \"64\")")
    if key == "bidir":
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if key in ("service", "mtu"):
        option = PEER_KEYS[key]
        if value not in option.choices:
            raise ValueError(f"expected one of {', '.join(map(str, option.choices))}, got {value!r}")
        return value
    if key == "duration":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
            raise ValueError(f"expected seconds above 0, at most 3600, got {value!r}")
        return value
    if key in ("device", "server_device"):
        if not isinstance(value, str) or not _DEVICE_RE.match(value):
            raise ValueError(f"expected an RDMA device name ([A-Za-z0-9_.-], up to 64 characters), got {value!r}")
        return value
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def case_of(tool: str, experiment: str, transport: str, test: Optional[str]) -> Case:
    """The tool's case a point names; ValueError naming the cases it has."""
    if tool not in PEERS:
        raise ValueError(f"unknown tool '{tool}' (known: {', '.join(PEERS)})")
    cases = PEERS[tool].cases
    found = [c for c in cases if (c.experiment, c.transport) == (experiment, transport)
             and (test is None or c.variant == test)]
    if len(found) == 1:
        return found[0]
    names = ", ".join(" ".join(filter(None, (c.experiment, c.transport, c.variant))) for c in cases)
    if len(found) > 1:
        raise ValueError(f"{tool} has several tests for {experiment} over {transport}: name one with 'tests' "
                         f"(its cases: {names})")
    what = f"{experiment} over {transport}" + (f" with tests = {test!r}" if test else "")
    raise ValueError(f"{tool} does not measure {what} (its cases: {names})")


def params_of(point) -> dict:
    """A peer point's parameters, defaults filled in: what its peers.json records and resuming compares."""
    return {"tool": point.tool, "experiment": point.experiment, "transport": point.transport,
            **{k: point.options.get(k, v) for k, v in DEFAULTS.items()}}


def argv_of(point) -> list[str]:
    """The `fabmeter peers` command that measures this point's case (among the tool's others)."""
    q = params_of(point)
    size_flag = "--bw-size" if point.experiment == "bw" else "-s"
    argv = ["peers", "--tools", point.tool, "--transports", point.transport]
    if q["tests"]:
        argv += ["--tests", q["tests"]]
    if q["size"] is not None:
        argv += [size_flag, str(q["size"])]
    argv += ["-n", str(q["iters"]), "--duration", f"{q['duration']:g}", "--rate", str(q["rate"])]
    for key in ("device", "server_device", "gid_index", "service", "inline", "mtu"):
        if q[key] is not None and q[key] != PEER_KEYS[key].default:
            argv += ["--" + key.replace("_", "-"), str(q[key])]
    if q["bidir"]:
        argv.append("--bidir")
    if point.cpus:
        argv += ["--cpus", point.cpus]
    if point.server:
        argv += ["--server", point.server]
    if q["token_file"]:
        argv += ["--token-file", q["token_file"]]
    return argv


def _read(folder: Path) -> Optional[dict]:
    try:
        doc = json.loads((folder / PEERS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def is_finished(folder: Path, point) -> bool:
    doc = _read(folder) or {}
    return (doc.get("status") == "ok" and doc.get("params") == params_of(point)
            and (doc.get("suite") or {}).get("point") == point.id)


def status_of(folder: Path) -> tuple[str, str]:
    doc = _read(folder) or {}
    return doc.get("status", "pending"), doc.get("message", "")


def run_point(point, folder: Path, engine: Optional[str], cpus: Optional[tuple], suite: dict) -> tuple[str, str, int]:
    """Measures the point's case into folder/peers.json: (status, message, exit code). A tool not installed
    here, or a case it cannot run (a size below its minimum, no RDMA device) is `skipped`, not a failure."""
    q = params_of(point)
    peer = PEERS[point.tool]
    case = case_of(point.tool, point.experiment, point.transport, q["tests"])
    if point.server is not None and cpus:
        cpus = (cpus[0], None)    # the server's CPU is its serve's --cpu
    size = q["size"]
    params = PeerRun(size=size if size is not None and case.experiment != "bw" else PeerRun.size,
                     bw_size=size if size is not None and case.experiment == "bw" else PeerRun.bw_size,
                     iters=q["iters"], duration=q["duration"], rate=q["rate"],
                     cpus=tuple(cpus) if cpus else None, transports=(point.transport,),
                     raw_dir=folder / "peers-raw", server=point.server, token_file=q["token_file"], engine=engine,
                     rdma=Rdma(client_device=q["device"], server_device=q["server_device"] or q["device"],
                               gid_index=q["gid_index"], service=q["service"], inline=q["inline"], mtu=q["mtu"] or 0),
                     tests=(case.variant,) if case.variant else None, bidir=bool(q["bidir"]))
    started = now_iso()
    records: list[dict] = []
    status, message, code = "ok", "", EXIT_OK
    try:
        if not peer.available():
            records.append(peer.not_installed())
        else:
            records += peer.run_case(case, params)
    except Unsupported as e:
        records.append(peer.skipped(str(e), case))
    except PeerError as e:
        status, message, code = "failed", str(e), EXIT_RUNTIME
        records.append({"type": "failed", "peer": True, "tool": point.tool, "experiment": case.experiment,
                        "transport": case.transport, **({"variant": case.variant} if case.variant else {}),
                        "reason": message})
    except KeyboardInterrupt:
        status, message, code = "interrupted", "interrupted", EXIT_INTERRUPTED
    points = [r for r in records if r.get("type") == "point"]
    if code == EXIT_OK and not points:
        status, message = "skipped", records[0]["reason"] if records else "nothing measured"
    write_json(folder / PEERS_FILE, {
        "fabmeter_version": __version__, "command": ["fabmeter", *argv_of(point)], "suite": suite,
        "status": status, "message": message, "started_at": started, "finished_at": now_iso(),
        "params": q, "environment": envinfo.collect(), "points": points,
        "skipped": [r for r in records if r.get("type") != "point"]})
    return status, message, code


def command_text(point) -> str:
    return shlex.join(["fabmeter", *argv_of(point)])
