"""The engine's option table, typed: one model for the CLI, suites and runs.

`fabmeter-engine options` exports every option with its type (size, count,
duration, choice, list, flag, text), unit, choices, whether it takes
the word auto, and a typed default. From that one table come the argparse
options of each experiment, the suite's value checks, and the engine's
command line. A value is held typed everywhere (an int of bytes, a float
of seconds, a list of ints, a bool, a string, or "auto"), as the engine's
"start" line reports it in `params` and run.json records it.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from typing import Any, Optional

_SUFFIXED_RE = re.compile(r"^(\d+)([KkMmGgTt]?)$")
_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}
# The engine's rule (parse_count, parse_size): a count's suffixes are decimal, a size's binary.
SUFFIXES = {"count": (1000, "k/M/G/T suffixes: 10k = 10,000"), "size": (1024, "K/M/G/T suffixes: 64K = 65,536")}
NUMBER_TYPES = ("size", "count", "duration")
# Options fabmeter's commands define themselves: an engine option of one of these names is not added to them.
PY_ONLY = frozenset({"cpus", "json", "out", "server", "help", "slo", "search", "repeat"})


def _parse_suffixed(kind: str, text: str) -> int:
    base, rule = SUFFIXES[kind]
    match = _SUFFIXED_RE.match(str(text).strip())
    if not match:
        raise ValueError(f"expected a non-negative integer ({rule}), got '{text}'")
    return int(match.group(1)) * base ** _POWER[match.group(2).lower()]


def parse_size(text: str) -> int:
    """'32', '64K', '1M' -> bytes (binary suffixes: 64K = 65,536)."""
    return _parse_suffixed("size", text)


def parse_count(text: str) -> int:
    """'100', '10k', '1M' -> a count (decimal suffixes: 10k = 10,000)."""
    return _parse_suffixed("count", text)


def _csv(text: str) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def _number(text: str) -> float | int:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a non-negative number, got '{text}'") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a non-negative number, got '{text}'")
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


def _parse_scalar(kind: str, text: str) -> Any:
    """One command-line word of type `kind`, typed."""
    if kind in SUFFIXES:
        return _parse_suffixed(kind, text)
    if kind == "duration":
        return _number(text)
    return text


@dataclass(frozen=True)
class Option:
    """One row of the engine's table."""
    name: str               # --name on the command line
    key: str                # the same with '_': suite keys, run.json params
    short: str
    metavar: str
    group: str              # its option group (params.hpp's kGroupMembers)
    type: str               # size | count | duration | choice | list | flag | text
    unit: str               # B | s | ms | us | Hz | ""
    choices: tuple[str, ...]
    item: str               # a list's item type
    auto: bool              # takes the word auto
    scope: str              # experiments it applies to: "all" or a csv
    transports: str         # transports it applies to: "all" or a csv
    help: str
    default: Any            # typed

    @classmethod
    def from_export(cls, row: dict) -> "Option":
        return cls(row["name"], row["key"], row.get("short", ""), row.get("metavar", ""), row.get("group", "common"),
                   row["type"], row.get("unit", ""), tuple(row.get("values") or ()), row.get("item", ""),
                   bool(row.get("auto")), row.get("scope", "all"), row.get("transports", "all"),
                   row.get("help", ""), row.get("default"))

    def for_experiment(self, experiment: str) -> bool:
        return self.scope == "all" or experiment in _csv(self.scope)

    def applies(self, experiment: str, transport: str) -> bool:
        return self.for_experiment(experiment) and (self.transports == "all" or transport in _csv(self.transports))

    def where(self) -> str:
        parts = ([f"experiments {self.scope}"] if self.scope != "all" else []) + \
            ([f"transports {self.transports}"] if self.transports != "all" else [])
        return " and ".join(parts)

    # --- from text (the command line) -------------------------------------------

    def parse(self, text: str) -> Any:
        """A command-line value, typed; ValueError says what was expected."""
        if self.auto and text == "auto":
            return "auto"
        if self.type == "choice":
            if text not in self.choices:
                raise ValueError(f"expected {'|'.join(self.choices)}, got '{text}'")
            return text
        if self.type == "list":   # counts (k/M/G allowed), or numbers (item "number")
            return [self._item(x) for x in text.split(",")]
        return _parse_scalar(self.type, text)

    def _item(self, text: str) -> Any:
        return _number(text) if self.item == "number" else parse_count(text)

    # --- from a suite (TOML values) --------------------------------------------

    def expected(self) -> str:
        auto = ' or "auto"' if self.auto else ""
        if self.type == "flag":
            return "true or false"
        if self.type == "choice":
            return "one of " + ", ".join(f'"{c}"' for c in self.choices)
        if self.type == "list":
            kind = "number" if self.item == "number" else "integer"
            return f'a non-negative {kind}, or a string "A,B,..." for one run that sweeps them'
        if self.type in ("size", "count"):
            return f'a non-negative integer (or a string with {SUFFIXES[self.type][1]}){auto}'
        if self.type in NUMBER_TYPES:
            return f"a non-negative number{f' ({self.unit})' if self.unit else ''}{auto}"
        return "a string"

    def typed(self, value: Any) -> Any:
        """A TOML value, typed as the engine reports it; ValueError(what was expected) for a wrong type."""
        bad = ValueError(self.expected())
        if self.auto and value == "auto":
            return "auto"
        if self.type == "flag":
            if isinstance(value, bool):
                return value
            raise bad
        if isinstance(value, bool):
            raise bad
        if self.type in ("choice", "text"):
            if isinstance(value, str) and (self.type == "text" or value in self.choices):
                return value
            raise bad
        if isinstance(value, str):
            if self.type not in ("list", "size", "count"):
                raise bad
            try:
                return self.parse(value)
            except ValueError:
                raise bad from None
        if isinstance(value, (int, float)):
            whole = float(value).is_integer()
            whole_only = self.type in ("size", "count") or (self.type == "list" and self.item != "number")
            if value < 0 or value != value or (whole_only and not whole):
                raise bad
            if self.type == "list":
                return [value if self.item == "number" else int(value)]
            return int(value) if self.type in ("size", "count") else value
        raise bad

    # --- to the engine -----------------------------------------------------------

    def argv(self, value: Any) -> list[str]:
        if self.type == "flag":
            return [f"--{self.name}"] if value else []
        return [f"--{self.name}", self.text(value)]

    def text(self, value: Any) -> str:
        """A typed value as the engine reads it (sizes with K/M/G where exact: 64K, not 65536)."""
        if isinstance(value, list):
            return ",".join(engine_text(x) for x in value)
        if self.type == "size" and isinstance(value, int):
            return size_text(value)
        return engine_text(value)


def size_text(size: int) -> str:
    """32768 -> '32K': the largest of K/M/G that divides it exactly."""
    for suffix, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{suffix}"
    return str(size)


def engine_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class Options:
    """The whole table, in the engine's order (that of --help, run.json and suite ids)."""

    def __init__(self, info: dict):
        self.rows = [Option.from_export(o) for o in info.get("options", [])]
        self.by_key = {o.key: o for o in self.rows}

    def __iter__(self):
        return iter(self.rows)

    def __contains__(self, key: str) -> bool:
        return key in self.by_key

    def __getitem__(self, key: str) -> Option:
        return self.by_key[key]

    def get(self, key: str) -> Optional[Option]:
        return self.by_key.get(key)

    def find(self, word: str) -> Optional[Option]:
        """--name, -s or the key."""
        name = word.lstrip("-").split("=", 1)[0]
        for o in self.rows:
            if name in (o.name, o.key) or (word.startswith("-") and not word.startswith("--") and name == o.short):
                return o
        return None

    def defaults(self) -> dict:
        return {o.key: o.default for o in self.rows}

    def engine_argv(self, values: dict) -> list[str]:
        """Typed values -> the engine's options, in table order."""
        unknown = [k for k in values if k not in self.by_key]
        if unknown:
            raise KeyError(f"not an engine option: {unknown[0]}")
        return [a for o in self.rows if o.key in values for a in o.argv(values[o.key])]

    # --- argparse ------------------------------------------------------------------

    def add_arguments(self, parser: argparse.ArgumentParser, experiment: str | tuple[str, ...],
                      skip: set[str] = frozenset()) -> None:
        """The experiment's options (or those of any of several); each lands typed in ns.<key> only when given."""
        experiments = (experiment,) if isinstance(experiment, str) else experiment
        for o in self.rows:
            if not any(o.for_experiment(e) for e in experiments) or o.name in skip:
                continue
            flags = ([f"-{o.short}"] if o.short else []) + [f"--{o.name}"]
            help_text = o.help
            if o.type == "choice":
                help_text += f" (one of: {', '.join(o.choices)})"
            if o.type in SUFFIXES:
                help_text += f" ({SUFFIXES[o.type][1]})"
            if o.type != "flag" and o.default not in (None, "", []):
                help_text += f" (default: {o.text(o.default)}{' ' + o.unit if o.unit and o.default != 'auto' else ''})"
            kw: dict[str, Any] = dict(dest=o.key, default=argparse.SUPPRESS, help=help_text.replace("%", "%%"))
            if o.type == "flag":
                kw["action"] = "store_true"
            else:
                kw["metavar"] = o.metavar or o.key.upper()
                kw["type"] = _argparse_type(o)
            parser.add_argument(*flags, **kw)

    def given(self, ns: argparse.Namespace) -> dict:
        """The engine options on the command line, typed (absent ones are left to the engine's defaults)."""
        return {o.key: getattr(ns, o.key) for o in self.rows if hasattr(ns, o.key)}

    def from_argv(self, experiment: str, argv: list[str]) -> dict:
        """Engine options written as on the command line (`-t tcp -s 32K`), typed."""
        parser = _StrictParser(add_help=False, allow_abbrev=False)
        self.add_arguments(parser, experiment)
        return self.given(parser.parse_args(argv))


class _StrictParser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def _argparse_type(o: Option):
    def convert(text: str) -> Any:
        try:
            return o.parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = o.type   # argparse names it in "invalid <type> value"
    convert.choices = o.choices   # suggest.py: a bare `tcp` hints at `-t tcp`
    return convert
