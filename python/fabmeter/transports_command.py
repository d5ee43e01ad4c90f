"""`fabmeter transports`: every transport the engine knows of, available or unavailable and why."""

from __future__ import annotations

from typing import Optional

from fabmeter.command_options import CommandOption, Found
from fabmeter.errors import EXIT_OK
from fabmeter.terminal import shown

OPTIONS: tuple[CommandOption, ...] = ()


def add_parser(sub, info: Optional[dict]) -> None:
    sub.add_parser("transports", allow_abbrev=False,
                   help="every transport: available, or unavailable and why (a plugin's library missing, ...)",
                   description="Lists every transport the engine knows of: available (built in: shm, tcp, udp; "
                               "or a plugin loaded from the engine's plugin directory, $FABMETER_PLUGIN_DIR if set), "
                               "or unavailable with the reason. A run naming an unavailable transport exits 2 "
                               "with that reason.")


def main(ns, found: Found) -> int:
    """One line a transport, as `fabmeter-engine transports` says it."""
    unavailable = found.info.get("transports_unavailable") or {}
    devices = found.info.get("transport_devices") or {}
    plugins = found.info.get("plugin_dir", "")
    for name in [*found.info.get("transports", []), *unavailable]:
        if name in unavailable:
            print(f"{name}: unavailable: {shown(unavailable[name])}")
        elif name in devices:
            print(f"{name}: available; devices: {shown(', '.join(devices[name]))}" if devices[name] else
                  f"{name}: library present, no RDMA device (/sys/class/infiniband lists none)")
        else:
            print(f"{name}: available")
    if plugins:
        print(f"(plugin directory: {plugins})")
    return EXIT_OK
