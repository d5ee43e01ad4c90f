"""One finding of `fabmeter doctor`: its severity, what it read, what it does to a figure and how to fix it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from fabmeter.errors import EXIT_OK, EXIT_SLO

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skipped"
SEVERITIES = (FAIL, WARN, SKIP, OK)     # the order they are shown in
EXIT_FINDING = EXIT_SLO                 # a fail finding: a measurement here would be wrong (exit 4, as a missed --slo)


@dataclass(frozen=True)
class Finding:
    check: str            # the check's name: memlock, cpus.smt, net.mtu, ...
    severity: str         # ok | warn | fail | skipped (the reason in summary)
    summary: str          # one line, with the numbers
    evidence: str         # the file or call it read
    effect: str = ""      # what it does to a figure: a study or a measured floor
    fix: str = ""         # the command that fixes it
    end: str = "client"   # client | server | both

    def as_json(self) -> dict:
        return asdict(self)


def exit_code(findings: list[Finding]) -> int:
    return EXIT_FINDING if any(f.severity == FAIL for f in findings) else EXIT_OK


def of_json(value) -> Optional[Finding]:
    """A finding as run.json or a report reads it back; None where it is not one."""
    if not isinstance(value, dict):
        return None
    try:
        return Finding(**{k: str(value[k]) for k in Finding.__dataclass_fields__})
    except KeyError:
        return None
