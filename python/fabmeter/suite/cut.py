"""A suite cut down from the command line: `--set KEY=VALUE` over every point, `--only PATTERN` for which points.

A set key is a suite key (the same names, values and checks as in the file); it replaces the key in every
[[matrix]] table and applies as [defaults] do: to every point it applies to. A pattern without a wildcard
keeps the points whose id has it as whole '-'-separated words (`tcp`, `lat-tcp`); with `*`, `?` or `[...]`
it is a shell pattern over the whole id (`lat-*-s32`).
"""

from __future__ import annotations

import fnmatch
import tomllib

SET_HELP = ("set a suite key for every point it applies to, over the file's own value (repeatable), "
            "e.g. --set iters=1000")
ONLY_HELP = ("run only the points whose id has PATTERN as whole '-'-separated words (tcp, lat-tcp), or, with "
             "* ? [...], matches it as a shell pattern (lat-*-s32); repeatable: a point any of them keeps")


class CutError(ValueError):
    """A --set or --only that cannot apply; its text says which and why."""


def parse_set(text: str) -> tuple[str, object]:
    """`KEY=VALUE` as a key and a TOML value (100, 2.5, true); a value TOML does not read is a string (64K)."""
    key, eq, value = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise CutError(f"--set {text}: expected KEY=VALUE, e.g. iters=1000")
    try:
        return key, tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value.strip()


def apply_sets(doc: dict, sets: dict[str, object]) -> None:
    """The parsed suite with each set key in [defaults] and out of every [[matrix]] table."""
    if not sets:
        return
    defaults = doc.setdefault("defaults", {})
    if isinstance(defaults, dict):
        defaults.update(sets)
    for table in doc.get("matrix") or []:
        if isinstance(table, dict):
            for key in sets:
                table.pop(key, None)


def matches(pattern: str, pid: str) -> bool:
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(pid, pattern)
    return f"-{pattern}-" in f"-{pid}-"


def only(points: list, patterns: list[str]) -> list:
    """The points any pattern keeps; a pattern that keeps none is a mistake, said with the ids there are."""
    for pattern in patterns:
        if not any(matches(pattern, p.id) for p in points):
            raise CutError(f"--only {pattern}: no point matches (the points: {', '.join(p.id for p in points)})")
    return [p for p in points if any(matches(pattern, p.id) for pattern in patterns)] if patterns else points
