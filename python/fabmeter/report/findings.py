"""The machine summary's findings: what `fabmeter doctor`'s cheap checks found for each run, once it ended (run.json's
`findings`), warn and fail only, each check and end once with the number of runs it was found in."""

from __future__ import annotations

from fabmeter.doctor.finding import FAIL, WARN, of_json
from fabmeter.report.model import Run


def lines(runs: list[Run]) -> list[str]:
    seen: dict[tuple, list] = {}     # (check, end) -> [the first finding, runs]
    for r in runs:
        recorded = r.doc.get("findings") if not r.peer else None
        for f in filter(None, map(of_json, recorded if isinstance(recorded, list) else ())):
            if f.severity in (FAIL, WARN):
                seen.setdefault((f.check, f.end), [f, 0])[1] += 1
    return [f"{f.severity}: {f.check} ({f.end}{f', {n} runs' if n > 1 else ''}): {f.summary}"
            + (f" (fix: {f.fix})" if f.fix else "") for f, n in seen.values()]
