"""Suites narrowed for the guest driver (rdma/test-rdma-guest.sh), written
as suite files beside its results.

    python3 rdma/narrow_suite.py first SUITE.toml OUT.toml
    python3 rdma/narrow_suite.py verbs SUITE.toml OUT.toml CI

first: the suite's first point alone (its [defaults] and first [[matrix]]
table, each list at its first value): CI's one point of a suite, so that
the suite step runs there too. verbs: the suite's tables over verbs, named
NAME-verbs; with CI = 1 fewer load points and client counts (still past
1.0x capacity and up to 40 clients) at 0.2 s each, the smallest and largest
of a table's send queues, 20 warm-up requests and 16 in flight per client
thread (Soft-RoCE under TCG serves tens to hundreds of requests a second).
"""

from __future__ import annotations

import sys
import tomllib

CI_DEFAULTS = {"duration": 0.2, "warmup": 20, "max_outstanding": 16}


def toml(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return "[" + ", ".join(toml(x) for x in v) + "]"
    return f'"{v}"' if isinstance(v, str) else repr(v)


def text(name: str, defaults: dict, tables: list[dict]) -> str:
    lines = [f"name = {toml(name)}", "[defaults]"] + [f"{k} = {toml(v)}" for k, v in defaults.items()]
    for t in tables:
        lines += ["[[matrix]]"] + [f"{k} = {toml(v)}" for k, v in t.items()]
    return "\n".join(lines) + "\n"


def first(suite: dict) -> str:
    table = {k: v[0] if isinstance(v, list) else v for k, v in suite["matrix"][0].items()}
    return text(suite["name"], suite.get("defaults", {}), [table])


def verbs(suite: dict, ci: bool) -> str:
    tables = [dict(t, transport="verbs") for t in suite["matrix"] if "verbs" in t["transport"]]
    for t in tables if ci else ():
        if "of_capacity" in t:
            t["of_capacity"] = "0.5,1.0,2.0"
        if "clients" in t:
            t["clients"] = "1,8,40"
        if isinstance(t.get("sq_depth"), list):
            t["sq_depth"] = [min(t["sq_depth"]), max(t["sq_depth"])]
    return text(f"{suite['name']}-verbs", dict(suite.get("defaults", {}), **(CI_DEFAULTS if ci else {})), tables)


def main(how: str, path: str, out: str, ci: str = "0") -> int:
    with open(path, "rb") as f:
        suite = tomllib.load(f)
    with open(out, "w") as f:
        f.write(first(suite) if how == "first" else verbs(suite, ci == "1"))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
