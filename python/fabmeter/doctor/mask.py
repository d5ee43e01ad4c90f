"""--mask: hostnames and IPv4, IPv6 and MAC (and InfiniBand hardware) addresses replaced in a bundle's text;
candidates found by pattern, addresses confirmed by the ipaddress module."""

from __future__ import annotations

import ipaddress
import re
from typing import Iterable

HW_ADDRESS = re.compile(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{2}:){5,19}[0-9A-Fa-f]{2}(?![0-9A-Fa-f:])")
IP_CANDIDATE = re.compile(r"(?<![\w:.])[0-9A-Fa-f:.]*[:.][0-9A-Fa-f:.]*(?:%[\w.-]+)?(?![\w:])")


def _ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%", 1)[0].rstrip("."))
    except ValueError:
        return False
    return True


def addresses(text: str) -> list[str]:
    """The IP and hardware addresses in the text, as written."""
    return HW_ADDRESS.findall(text) + [m for m in IP_CANDIDATE.findall(text) if _ip(m)]


class Masker:
    """Replaces each hostname and address with a stable placeholder (host-1, ip-1, mac-1), the same one wherever
    the same value appears in the bundle."""

    def __init__(self, hostnames: Iterable[str]):
        self.names = sorted({h for h in hostnames if h and h not in ("localhost",)}, key=len, reverse=True)
        self.seen: dict[str, str] = {}

    def _placeholder(self, kind: str, value: str) -> str:
        if value not in self.seen:
            self.seen[value] = f"{kind}-{sum(1 for v in self.seen.values() if v.startswith(kind + '-')) + 1}"
        return self.seen[value]

    def __call__(self, text: str) -> str:
        text = HW_ADDRESS.sub(lambda m: self._placeholder("mac", m.group(0).lower()), text)
        text = IP_CANDIDATE.sub(lambda m: self._placeholder("ip", m.group(0)) if _ip(m.group(0)) else m.group(0),
                                text)
        for name in self.names:
            text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", self._placeholder("host", name), text)
        return text
