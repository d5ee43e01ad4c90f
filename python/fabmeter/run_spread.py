"""The run-to-run spread: how far apart two runs of one configuration measured, per kind of point.

compare judges a point with fewer runs a side than a verdict across runs
needs (stats.compare_beyond_spread) against this. The measurements and how
they were made are data, python/fabmeter/data/run_spread.json, written by
scripts/measure-run-spread.py (docs/cli.md#fabmeter-compare): A/A pairs,
two single runs of one configuration back to back, and each run's figure.
A kind of point is (experiment, transport, poll, figure); one that was not
measured has no spread, and compare cannot tell with fewer runs.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Optional

PATH = Path(__file__).parent / "data" / "run_spread.json"
KIND = ("experiment", "transport", "poll", "figure")
# A shift counts as beyond the spread when it is beyond the largest A/A ratio measured, three times over (in
# log terms: that ratio cubed): ten pairs see only part of a heavy tail (a pair on this 2-CPU VM measured 1.61x
# where ten pairs' largest was 1.24x), and a busier hour moves runs further.
MARGIN = 3.0


def kind_of(**fields) -> tuple:
    """The key of a kind of point: its values of KIND, as text."""
    return tuple(str(fields.get(k)) for k in KIND)


def largest_ratio(pairs: list) -> Optional[float]:
    """The largest of each A/A pair's ratio, either way round (>= 1); None without a usable pair."""
    ratios = [max(a / b, b / a) for a, b in (p for p in pairs if isinstance(p, list) and len(p) == 2)
              if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0
              and math.isfinite(a / b)]
    return max(ratios) if ratios else None


@functools.cache
def _table(path: Path = PATH) -> dict[tuple, float]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for row in doc.get("kinds") or [] if isinstance(doc, dict) else []:
        found = largest_ratio(row.get("pairs") or []) if isinstance(row, dict) else None
        if found is not None:
            out[kind_of(**row)] = found
    return out


def spread(kind: tuple) -> Optional[float]:
    """The factor (>= 1) a shift of this kind of point must exceed to be told from run-to-run noise, or None
    where none was measured."""
    found = _table().get(kind)
    return None if found is None else found ** MARGIN
