"""Where a point ran, its path: the server (its address, or "local": one started for the run), a relay (--via),
a peer tool, and the two ends' hosts. run.json and each peers.json point record it (`path`); key() is what tells
points of two paths apart wherever points are grouped or matched (the report's rows, compare), label() what names
a path on a terminal or a page. A run.json from before there was a `path` gets one from its config.server.
docs/results.md describes the fields.
"""

from __future__ import annotations

import os
import socket
from typing import Optional

LOCAL = "local"


def netns() -> Optional[int]:
    """This process's network namespace (the inode of /proc/self/ns/net, as the engine records its own); None where
    /proc does not say."""
    try:
        return os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return None


def this_end() -> dict:
    """This host's end of a path: its hostname and network namespace."""
    return {"hostname": socket.gethostname(), "netns": netns()}


def end_of(env) -> dict:
    """An end as an engine's environment (its start line's `env` or `server_env`) names it; unknown: null."""
    env = env if isinstance(env, dict) else {}
    return {key: env.get(key) if isinstance(env.get(key), (str, int)) else None for key in ("hostname", "netns")}


def record(server: Optional[str], relay: Optional[str] = None, tool: Optional[str] = None,
           client: Optional[dict] = None, server_end: Optional[dict] = None, same_host: Optional[bool] = None) -> dict:
    """The `path` of a point: `server` its address (None: local), `relay` the --via serve's, `tool` the peer tool
    (None: fabmeter), the ends' hosts (end_of) and whether both share one host (the engines' host ids agree)."""
    unknown = {"hostname": None, "netns": None}
    return {"server": server or LOCAL, "relay": relay, "peer_tool": tool, "same_host": same_host,
            "hosts": {"client": client or unknown, "server": server_end or unknown}}


def with_start(path: dict, start: dict) -> dict:
    """`path` with the ends the engine's start line names (its `env`, `server_env` and `same_host`)."""
    same = start.get("same_host")
    return record(None if path["server"] == LOCAL else path["server"], path["relay"], path["peer_tool"],
                  end_of(start.get("env")), end_of(start.get("server_env")), same if isinstance(same, bool) else None)


def _text(value) -> Optional[str]:
    return str(value) if isinstance(value, (str, int)) and str(value) else None


def of_run(doc: dict) -> dict:
    """A run.json's (or a peers.json point's) path, as record() gives it, whatever the document holds: its `path`,
    else (written before there was one) its config.server, or a peer point's `server` and `tool`."""
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    given = doc.get("path")
    if not isinstance(given, dict):
        tool = doc.get("tool") if doc.get("peer") is True else None
        given = {"server": doc.get("server", config.get("server")), "peer_tool": tool}
    hosts = given.get("hosts") if isinstance(given.get("hosts"), dict) else {}
    same = given.get("same_host")
    server = _text(given.get("server"))
    return record(None if server == LOCAL else server, _text(given.get("relay")), _text(given.get("peer_tool")),
                  end_of(hosts.get("client")), end_of(hosts.get("server")), same if isinstance(same, bool) else None)


def host(address: Optional[str]) -> Optional[str]:
    """HOST of HOST[:PORT] ([V6]:PORT too): a serve's port may change from one start to the next, its host does not."""
    if address is None or address == LOCAL:
        return address
    if address.startswith("["):
        return address[1:address.index("]")] if "]" in address else address
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def key(path: dict) -> tuple:
    """What sets a path apart: the server's host (or local), the relay's host, the peer tool."""
    return host(path["server"]), host(path["relay"]), path["peer_tool"]


def label(path: dict) -> str:
    """A path in a few words: "local", "to HOST", "to HOST via RELAY" (a peer tool is named by its rows)."""
    where = LOCAL if path["server"] == LOCAL else f"to {host(path['server'])}"
    return where + (f" via {host(path['relay'])}" if path["relay"] else "")


def ends(path: dict) -> str:
    """Where the two ends ran, as the path recorded it: "on host H", "server on host S, client on host C", with
    "another network namespace" when one host's ends were in two; "" when nothing was recorded."""
    client, server = path["hosts"]["client"], path["hosts"]["server"]
    if client["hostname"] is None and server["hostname"] is None:
        return ""
    one_host = path["same_host"] is not False and client["hostname"] == server["hostname"]
    if one_host:
        apart = None not in (client["netns"], server["netns"]) and client["netns"] != server["netns"]
        return f"on host {client['hostname']}" + (", the ends in two network namespaces" if apart else "")
    return (f"server on host {server['hostname'] or 'unknown'}, client on host {client['hostname'] or 'unknown'}")


def header(path: dict) -> str:
    """The terminal's line naming a run's path: "path: local (on host H)", "path: server HOST:PORT (...)"."""
    where = LOCAL if path["server"] == LOCAL else f"server {path['server']}"
    where += f" via {path['relay']}" if path["relay"] else ""
    said = ends(path)
    return f"path: {where}" + (f" ({said})" if said else "")
