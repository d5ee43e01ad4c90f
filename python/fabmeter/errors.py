"""Errors and exit codes, shared by the engine and every command.

One line on stderr; exit 2 for bad input, 3 for runtime failures (the other end unreachable or lost),
4 when a run went well but missed a latency objective (--slo, slo.py),
130 when interrupted, 1 when the engine is missing or crashed (or a bug).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1   # engine missing or crashed, or our own bug
EXIT_USAGE = 2
EXIT_RUNTIME = 3    # the other end unreachable or lost mid-run
EXIT_SLO = 4        # the run went well and missed a latency objective (--slo); never the engine's
EXIT_INTERRUPTED = 130


class FabmeterError(Exception):
    """An error that ends a command with a given exit code and one line."""

    def __init__(self, message: str, exit_code: int = EXIT_INTERNAL):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def exit_code_of(returncode: int | None) -> int:
    """An engine's exit status as ours: its usage, runtime and interrupt codes pass through."""
    if returncode in (EXIT_USAGE, EXIT_RUNTIME, EXIT_INTERRUPTED):
        return returncode
    return EXIT_INTERNAL
