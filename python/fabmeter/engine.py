"""Finding the `fabmeter-engine` binary and reading what it describes of itself."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

from fabmeter.errors import FabmeterError
from fabmeter.options import Options

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE_IN_REPO = REPO_ROOT / "build" / "engine" / "fabmeter-engine"
# The engine installed with the package (a wheel): bin/ and lib/fabmeter/ (its plugins) under _engine/.
ENGINE_IN_PACKAGE = Path(__file__).resolve().parent / "_engine" / "bin" / "fabmeter-engine"
ENGINE_ERROR_PREFIX = "fabmeter-engine: error: "


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_engine() -> str:
    """$FABMETER_ENGINE, else the engine installed with this package, else the
    repository's build output, else fabmeter-engine on PATH."""
    env = os.environ.get("FABMETER_ENGINE")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise FabmeterError(f"FABMETER_ENGINE={env} is not an executable file")
    for candidate in (ENGINE_IN_PACKAGE, ENGINE_IN_REPO):
        if _executable(candidate):
            return str(candidate)
    found = shutil.which("fabmeter-engine")
    if found:
        return found
    raise FabmeterError(
        f"fabmeter-engine not found (looked at $FABMETER_ENGINE, {ENGINE_IN_PACKAGE}, {ENGINE_IN_REPO}, PATH): "
        "run `make build`"
    )


@functools.lru_cache(maxsize=None)
def engine_info(engine: str) -> dict:
    """`fabmeter-engine options`: version, experiments, transports, option table."""
    try:
        res = subprocess.run([engine, "options"], stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FabmeterError(f"cannot run `{engine} options`: {e}") from e
    if res.returncode != 0:
        raise FabmeterError(f"`{engine} options` exited {res.returncode}: {last_error_line(res.stderr)}")
    try:
        return json.loads(res.stdout)
    except json.JSONDecodeError as e:
        raise FabmeterError(f"`{engine} options` printed no valid JSON: {e}") from e


@functools.lru_cache(maxsize=None)
def engine_options(engine: str) -> Options:
    return Options(engine_info(engine))


def last_error_line(stderr: str) -> str:
    """The engine's one-line error, without its prefix (else its last line)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith(ENGINE_ERROR_PREFIX):
            return ln[len(ENGINE_ERROR_PREFIX):]
    last = lines[-1] if lines else ""
    return last[len("fabmeter-engine: "):] if last.startswith("fabmeter-engine: ") else last


def dry_run(engine: str, experiment: str, argv: list[str]) -> dict:
    """The engine's own check of a run's options (`run --dry-run`): its plan
    (planned_s, serve_max_duration_s, params), or its one-line refusal raised;
    {} from an engine that checks without printing a plan (one older than the
    plan line: make bench-ab's base)."""
    cmd = [engine, "run", experiment, "--server", "127.0.0.1", "--dry-run", *argv]
    try:
        res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FabmeterError(f"cannot run `fabmeter-engine run --dry-run`: {e}") from e
    if res.returncode != 0:
        raise FabmeterError(last_error_line(res.stderr), res.returncode)
    lines = res.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}
