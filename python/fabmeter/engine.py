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
ENGINE_ERROR_PREFIX = "fabmeter-engine: error: "


def find_engine() -> str:
    """FABMETER_ENGINE, else the repo's build output, else PATH."""
    env = os.environ.get("FABMETER_ENGINE")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise FabmeterError(f"FABMETER_ENGINE={env} is not an executable file")
    if ENGINE_IN_REPO.is_file() and os.access(ENGINE_IN_REPO, os.X_OK):
        return str(ENGINE_IN_REPO)
    found = shutil.which("fabmeter-engine")
    if found:
        return found
    raise FabmeterError(
        f"fabmeter-engine not found (looked at $FABMETER_ENGINE, {ENGINE_IN_REPO}, PATH): run `make build`"
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
