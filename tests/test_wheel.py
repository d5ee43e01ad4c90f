"""`pip wheel .` (scikit-build-core) builds the engine and its transport
plugins into the package; installed into a fresh virtual environment, the
`fabmeter` command finds that engine (fabmeter/_engine/bin/) and its plugins
(fabmeter/_engine/lib/fabmeter/) from any working directory, with nothing
of this repository on its paths, and its `serve` serves another host.

The wheel is built once per source state: it is kept under
build/wheel-dist/<hash of the sources>/, and scikit-build-core's own build
directory (build/wheel) makes a rebuild after a change incremental."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO, json_lines, veth_namespaces

SOURCES = ("engine", "python/fabmeter", "data", "pyproject.toml", "README.md")


def source_hash() -> str:
    h = hashlib.sha256()
    for top in SOURCES:
        root = REPO / top
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*")
                                                      if p.is_file() and "__pycache__" not in p.parts)
        for f in files:
            h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def engine_build_compilers() -> dict:
    """CXX and CC as build/engine found them: with the Makefile's compiler cache (scripts/compile-cached) the
    wheel's build then takes every object build/engine compiled (the cache keys on the compiler's name)."""
    cache = REPO / "build" / "engine" / "CMakeCache.txt"
    found = dict(re.findall(r"^CMAKE_(CXX|C)_COMPILER:FILEPATH=(.+)$", cache.read_text(), re.M)) if cache.exists() else {}
    return {("CXX" if lang == "CXX" else "CC"): path for lang, path in found.items()}


@pytest.fixture(scope="module")
def wheel() -> Path:
    cache = REPO / "build" / "wheel-dist" / source_hash()
    found = sorted(cache.glob("fabmeter-*.whl"))
    if found:
        return found[0]
    if shutil.which("cmake") is None:
        pytest.skip("no cmake to build the wheel's engine")
    tmp = cache.with_name(cache.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                        "-w", str(tmp), str(REPO)], capture_output=True, text=True, timeout=1800,
                       stdin=subprocess.DEVNULL, env={**os.environ, **engine_build_compilers()})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    shutil.rmtree(cache, ignore_errors=True)
    tmp.rename(cache)
    for old in cache.parent.iterdir():  # keep only this state's wheel
        if old != cache:
            shutil.rmtree(old, ignore_errors=True)
    return sorted(cache.glob("fabmeter-*.whl"))[0]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; returns its bin/."""
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        str(wheel)], capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    return venv / "bin"


def clean_env() -> dict:
    """Nothing of the repository: no FABMETER_ENGINE, no PYTHONPATH, no plugin dir."""
    return {k: v for k, v in os.environ.items()
            if k not in ("FABMETER_ENGINE", "FABMETER_PLUGIN_DIR", "PYTHONPATH", "VIRTUAL_ENV")}


def fabmeter(bindir: Path, *args, cwd, prefix=(), timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, str(bindir / "fabmeter"), *map(str, args)], capture_output=True, text=True,
                          env=clean_env(), cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)


def test_wheel_holds_the_engine_and_plugins_only(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "fabmeter/_engine/bin/fabmeter-engine" in names
    libs = [n for n in names if ".so" in n]
    assert libs and all(n.startswith("fabmeter/_engine/lib/fabmeter/libfabmeter-") for n in libs), libs
    assert "-py3-none-linux_" in wheel.name
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    assert "Provides-Extra: report" in meta and "matplotlib" in meta and "Requires-Dist: numpy" in meta


def test_installed_wheel_runs_from_anywhere(installed, tmp_path):
    r = fabmeter(installed, "--version", cwd=tmp_path)
    assert r.returncode == 0 and "transports: shm, tcp, udp" in r.stdout, r.stdout + r.stderr
    r = fabmeter(installed, "transports", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    pkg = Path(subprocess.run([str(installed / "python"), "-c", "import fabmeter, os; print(os.path.dirname("
                               "fabmeter.__file__))"], capture_output=True, text=True, cwd=tmp_path,
                              env=clean_env(), check=True).stdout.strip())
    assert f"(plugin directory: {pkg / '_engine' / 'lib' / 'fabmeter'})" in r.stdout, r.stdout
    assert str(REPO) not in str(pkg)
    r = fabmeter(installed, "lat", "-t", "shm", "-n", "300", "--warmup", "10", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [ln["transport"] for ln in json_lines(r.stdout) if ln["type"] == "point"] == ["shm"]
    if (REPO / "build" / "engine" / "plugins" / "libfabmeter-zmq.so").exists():
        assert "zmq: available" in fabmeter(installed, "transports", cwd=tmp_path).stdout
        r = fabmeter(installed, "lat", "-t", "zmq", "-n", "300", "--warmup", "10", "--json", cwd=tmp_path)
        assert r.returncode == 0, r.stderr


def test_installed_serve_serves_another_host(installed, tmp_path):
    with veth_namespaces("fmwhl", "10.231.7") as (ns_a, ns_b, _, _):
        serve = subprocess.Popen(["ip", "netns", "exec", ns_a, str(installed / "fabmeter"), "serve",
                                  "--bind", "10.231.7.1", "--port", "0", "--once"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
                                 cwd=tmp_path, stdin=subprocess.DEVNULL)
        try:
            event = json.loads(serve.stdout.readline())
            assert event["event"] == "listening", event
            exe = os.readlink(f"/proc/{serve.pid}/exe")  # fabmeter serve execs its engine
            assert exe.startswith(str(installed.parent)) and exe.endswith("_engine/bin/fabmeter-engine"), exe
            r = fabmeter(installed, "lat", "-t", "tcp", "--server", f"10.231.7.1:{event['port']}", "-n", "300",
                         "--warmup", "10", "--json", cwd=tmp_path, prefix=("ip", "netns", "exec", ns_b))
            assert r.returncode == 0, r.stderr
            points = [ln for ln in json_lines(r.stdout) if ln["type"] == "point"]
            assert len(points) == 1 and points[0]["transport"] == "tcp"
            assert serve.wait(timeout=30) == 0
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()
