"""Shared fixtures: the real engine binary and a way to run the real CLI.

Nothing here builds anything (the Makefile builds first); tests that need
the engine are skipped, with a clear reason, when the binary is missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENGINE = Path(os.environ.get("FABMETER_ENGINE") or REPO / "build" / "engine" / "fabmeter-engine")
TRANSPORTS = ["shm", "tcp", "udp"]
sys.path.insert(0, str(REPO / "python"))  # this checkout's package, installed or not
POLLS = ["busy", "event"]

# Every process a test starts carries this tag in its environment (children
# inherit it), so a test can tell whether engines it started were left behind
# without being confused by anyone else's engines on the machine.
TAG_VAR = "FABMETER_TEST_TAG"


@pytest.fixture(scope="session")
def engine() -> Path:
    if not (ENGINE.is_file() and os.access(ENGINE, os.X_OK)):
        pytest.skip(f"engine binary missing: {ENGINE} (run `make build` first; the tests build nothing)")
    return ENGINE


def cli_env(tag: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["FABMETER_ENGINE"] = str(ENGINE)
    env[TAG_VAR] = tag
    return env


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fabmeter", *map(str, args)]


class Fabmeter:
    """Runs `fabmeter ...` (this checkout's code, the real engine) as a subprocess."""

    def __init__(self, tag: str):
        self.tag = tag
        self.env = cli_env(tag)

    def run(self, *args, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(cli_cmd(*args), env=self.env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout, **kw)

    def popen(self, *args, prefix: tuple = (), **kw) -> subprocess.Popen:
        return subprocess.Popen([*prefix, *cli_cmd(*args)], env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def leftovers(self, wait: float = 3.0) -> list[str]:
        """Engine processes started by this test still alive after `wait` seconds."""
        deadline = time.monotonic() + wait
        while True:
            found = tagged_engine_procs(self.tag)
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.1)


def tagged_engine_procs(tag: str) -> list[str]:
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle not in (d / "environ").read_bytes().split(b"\0"):
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if "fabmeter-engine" in cmd and ") Z " not in stat:  # zombies are already dead
            found.append(f"{d.name}: {cmd}")
    return found


@pytest.fixture
def fm(engine, request):
    runner = Fabmeter(uuid.uuid4().hex)
    yield runner
    # Whatever the test did, it must not leave engines running; kill them
    # so one failing test does not spoil the next, then report.
    left = runner.leftovers(wait=5.0)
    for entry in left:
        try:
            os.kill(int(entry.split(":")[0]), signal.SIGKILL)
        except OSError:
            pass
    assert not left, f"engine processes left behind: {left}"


def json_lines(text: str) -> list[dict]:
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def one_line_error(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected exactly one stderr line, got {lines!r}"
    assert lines[0].startswith("fabmeter: error: "), lines[0]
    return lines[0]
