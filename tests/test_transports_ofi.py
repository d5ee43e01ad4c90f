"""`fabmeter transports` names the libfabric providers fi_info finds, as it names verbs' devices."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def _ofi_line(fm, **env) -> str:
    fm.env.update(env)
    r = fm.run("transports")
    assert r.returncode == 0, r.stderr
    return next(ln for ln in r.stdout.splitlines() if ln.startswith("ofi: "))


def test_ofi_names_the_providers_fi_info_finds(fm, engine):
    engine_line = next(ln for ln in subprocess.run([str(engine), "transports"], capture_output=True, text=True,
                                                   check=True).stdout.splitlines() if ln.startswith("ofi: "))
    if "unavailable" in engine_line:
        pytest.skip(f"no ofi plugin here: {engine_line}")
    if shutil.which("fi_info") is None:
        assert _ofi_line(fm) == "ofi: available (fi_info not installed: its providers not listed)"
        return
    line = _ofi_line(fm, FI_PROVIDER="tcp")
    assert line.startswith("ofi: available; providers (fi_info): "), line
    providers = line.split(": ", 2)[2].split(", ")
    assert "tcp" in providers and all(p.split(";")[0] == "tcp" for p in providers), line
    line = _ofi_line(fm, FI_PROVIDER="no-such-provider")
    assert line == "ofi: library present, no provider found (fi_info lists none)", line
