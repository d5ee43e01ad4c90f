"""`fabmeter doctor`: checks this node (and with --server the other end, through its serve) for what would make a
measurement wrong or slow; exit 4 when a fail finding would make it wrong."""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

from fabmeter.command_options import CommandOption, Found, add_arguments
from fabmeter.cpus import parse_cpus
from fabmeter.doctor import bundle, checks, parity
from fabmeter.doctor.facts import Plan, probe
from fabmeter.doctor.finding import OK, SKIP, Finding, exit_code
from fabmeter.errors import EXIT_USAGE, FabmeterError
from fabmeter.options import parse_size
from fabmeter.peers import command as peers_command
from fabmeter.terminal import shown

DEFAULT_SIZE = "64K"
PARITY_PEER_OPTIONS = ("device", "server-device", "gid-index")   # as fabmeter peers takes them, for --parity

OPTIONS = (
    CommandOption("transport", "the transport to check for (default: verbs where the engine lists an RDMA device, "
                               "else tcp)", metavar="NAME", short="t"),
    CommandOption("size", "the largest message the planned run sends: what it registers (default: %(default)s)",
                  metavar="BYTES", short="s", default=DEFAULT_SIZE),
    CommandOption("cpus", "the client's and the server's CPUs the planned run pins (default: the first two CPUs)",
                  metavar="A,B"),
    CommandOption("server", "check the other end too, through its `fabmeter serve`", metavar="HOST[:PORT]"),
    CommandOption("token-file", "with --server: the serve's shared secret (default: $FABMETER_TOKEN)", metavar="F"),
    CommandOption("json", "print the findings as one JSON object", flag=True),
    CommandOption("bundle", "also write what a bug report needs into FILE.tar.gz (docs/cluster.md)",
                  metavar="FILE.tar.gz"),
    CommandOption("mask", "with --bundle: replace hostnames and IPv4, IPv6 and MAC addresses in every member",
                  flag=True),
    CommandOption("run", "with --bundle: the results folder whose run.json goes in (default: the newest run.json "
                         "under ./results)", metavar="DIR"),
    CommandOption("parity", "also run fabmeter against perftest on the verbs device: send over RC, lat and bw at "
                            "32 B and 64 KiB, in alternated rounds (about 30 s on an HCA), a finding per row: within "
                            "the rounds' interval of perftest, faster or slower by X, or cannot tell", flag=True),
    CommandOption("rounds", f"with --parity: alternated rounds, {parity.ROUNDS} the fewest with an interval (default: "
                            f"{parity.ROUNDS})", metavar="N", type=peers_command.count),
    *(o for o in peers_command.OPTIONS if o.name in PARITY_PEER_OPTIONS),
)


def add_parser(sub, info: Optional[dict]) -> None:
    p = sub.add_parser("doctor", allow_abbrev=False,
                       help="check this node (and the other end) before trusting its figures",
                       description="Checks what makes a measurement wrong or slow: locked memory against what "
                                   "the run registers, the pinned CPUs (one CPU or SMT siblings, governor, deep "
                                   "C-states, device IRQs, isolation, NUMA), the clock source, transparent huge "
                                   "pages, the link and the MTU of both ends, the RDMA port (state, GID, RoCE "
                                   "version, active MTU against the netdev's). The facts come from a short lat "
                                   "run (200 round trips) and the readers run.json's environment uses. Each "
                                   "finding: ok, warn, fail or skipped, what it read, its expected effect and "
                                   "the command that fixes it. Exit 0, or 4 when a fail finding would make a "
                                   "measurement wrong.")
    add_arguments(p, OPTIONS)


def plan_of(ns, info: dict) -> Plan:
    devices = (info.get("transport_devices") or {}).get("verbs")
    transport = ns.transport or ("verbs" if devices else "tcp")
    if transport not in info.get("transports", []):
        raise FabmeterError(f"-t {transport}: not an available transport (fabmeter transports)", EXIT_USAGE)
    try:
        size = parse_size(ns.size)
    except ValueError as e:
        raise FabmeterError(f"--size: {e}", EXIT_USAGE) from None
    defaults = {o["key"]: o.get("default") for o in info.get("options", [])}
    return Plan(transport, size, parse_cpus(ns.cpus, remote=ns.server is not None), int(defaults["rq_depth"]),
                int(defaults["sq_depth"]), ns.server, provider=defaults.get("provider"))


def show(findings: list[Finding]) -> None:
    for f in findings:
        print(f"{f.severity.upper():7} {f.check} ({f.end}): {shown(f.summary)}")
        if f.severity not in (OK, SKIP):
            for label, text in (("read", f.evidence), ("effect", f.effect), ("fix", f.fix)):
                if text:
                    print(f"        {label}: {shown(text)}")


def main(ns, found: Found) -> int:
    if ns.token_file is not None and ns.server is None:
        raise FabmeterError("--token-file goes with --server", EXIT_USAGE)
    if (ns.mask or ns.run) and not ns.bundle:
        raise FabmeterError("--mask and --run go with --bundle", EXIT_USAGE)
    if not ns.parity and any(getattr(ns, o.replace("-", "_")) is not None for o in ("rounds", *PARITY_PEER_OPTIONS)):
        raise FabmeterError("--rounds, --device, --server-device and --gid-index go with --parity", EXIT_USAGE)
    if ns.parity:
        parity.check_runnable(found.info)
    plan = plan_of(ns, found.info)
    facts = probe(plan, found.engine, ns.token_file)
    findings = checks.findings(plan, facts.environment, facts.probe_error)
    if ns.parity:
        findings += parity.findings(parity.Setup(plan, found.engine, ns.token_file, ns.device, ns.server_device,
                                                 ns.gid_index, ns.rounds or parity.ROUNDS))
    code = exit_code(findings)
    if ns.json:
        print(json.dumps({"plan": dataclasses.asdict(plan), "findings": [f.as_json() for f in findings],
                          "exit_code": code}))
    else:
        show(findings)
    if ns.bundle:
        bundle.write(ns.bundle, findings, ns.run, ns.mask)
    return code
