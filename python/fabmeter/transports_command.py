"""`fabmeter transports`: every transport the engine knows of, available or unavailable and why."""

from __future__ import annotations

import shutil
import subprocess
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
                               "or unavailable with the reason; verbs names the RDMA devices found, ofi the "
                               "libfabric providers fi_info finds. A run naming an unavailable transport exits 2 "
                               "with that reason.")


def ofi_providers() -> Optional[list[str]]:
    """libfabric's providers that found an interface here, as `fi_info` (libfabric's own tool, honouring
    FI_PROVIDER) names them, layered ones as "tcp;ofi_rxm"; None where fi_info is not installed or fails."""
    exe = shutil.which("fi_info")
    if exe is None:
        return None
    try:
        r = subprocess.run([exe], capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = {line.split(":", 1)[1].strip() for line in r.stdout.splitlines() if line.strip().startswith("provider:")}
    return sorted(found)


def _ofi_line() -> str:
    providers = ofi_providers()
    if providers is None:
        return "ofi: available (fi_info not installed: its providers not listed)"
    return (f"ofi: available; providers (fi_info): {shown(', '.join(providers))}" if providers else
            "ofi: library present, no provider found (fi_info lists none)")


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
        elif name == "ofi":
            print(_ofi_line())
        else:
            print(f"{name}: available")
    if plugins:
        print(f"(plugin directory: {plugins})")
    return EXIT_OK
