""""Did you mean": the nearest known word to a mistyped one.

One rule for every command's options, subcommands and choices (`Parser`)
and for the suite checker's keys and tools (`did_you_mean`).
"""

from __future__ import annotations

import argparse
from difflib import get_close_matches
from typing import Iterable

_HINT = "_suggest_hint"   # the innermost parser's hint, carried up in the namespace


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """" (did you mean 'X'?)" for the known word nearest to `word`, or ""."""
    hits = get_close_matches(word, list(known), n=1)
    return f" (did you mean '{hits[0]}'?)" if hits else ""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose unknown options, subcommands and choices name the nearest known one."""

    def _check_value(self, action, value):
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            raise argparse.ArgumentError(action, e.message + did_you_mean(str(value), map(str, action.choices)))

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        if extras and not getattr(ns, _HINT, ""):
            setattr(ns, _HINT, self._hint(extras))
        return ns, extras

    def _hint(self, extras: list[str]) -> str:
        for word in extras:
            if word.startswith("-"):
                name = word.split("=", 1)[0]
                hint = did_you_mean(name, (s for s in self._option_string_actions if s.startswith("--")))
                if hint:
                    return hint
                continue
            for action in self._actions:   # a value without its option: `lat tcp` for `lat -t tcp`
                choices = action.choices or getattr(action.type, "choices", None) or ()
                if action.option_strings and word in choices:
                    return f" (did you mean '{action.option_strings[0]} {word}'?)"
        return ""


def unrecognized(ns: argparse.Namespace, extras: list[str]) -> str:
    """The error for words no parser took, with the nearest option or the option a bare value belongs to."""
    return f"unrecognized arguments: {' '.join(extras)}{getattr(ns, _HINT, '')}"
