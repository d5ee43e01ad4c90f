"""`cmake --install` lays out a movable tree: bin/fabmeter-engine, the
transport plugins in lib/fabmeter/ (found from the engine's own location),
the suites in share/fabmeter/suites/. Installed, moved, it still runs a
built-in transport and a plugin's. And the Python side finds its engine in
the documented order."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import ENGINE, REPO, json_lines


@pytest.fixture(scope="module")
def moved_tree(engine) -> Path:
    # In the build tree, not under /tmp: plugins load only from folders nobody else may write.
    base = Path(tempfile.mkdtemp(prefix="test-install-", dir=REPO / "build"))
    r = subprocess.run(["cmake", "--install", str(engine.parent), "--prefix", str(base / "prefix")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    shutil.move(str(base / "prefix"), str(base / "moved"))  # relative paths only: the tree moves
    yield base / "moved"
    shutil.rmtree(base)


def test_installed_tree_layout(moved_tree):
    assert os.access(moved_tree / "bin" / "fabmeter-engine", os.X_OK)
    built = sorted(p.name for p in (ENGINE.parent / "plugins").glob("libfabmeter-*.so"))
    assert sorted(p.name for p in (moved_tree / "lib" / "fabmeter").iterdir()) == built
    suites = sorted(p.name for p in (moved_tree / "share" / "fabmeter" / "suites").iterdir())
    assert suites == sorted(p.name for p in (REPO / "suites").glob("*.toml"))


def test_moved_tree_runs_builtin_and_plugin_transports(fm, moved_tree, tmp_path):
    engine = moved_tree / "bin" / "fabmeter-engine"
    info = json.loads(subprocess.run([str(engine), "options"], capture_output=True, text=True, check=True).stdout)
    assert info["plugin_dir"] == str(moved_tree / "lib" / "fabmeter")
    fm.env["FABMETER_ENGINE"] = str(engine)
    built = (ENGINE.parent / "plugins" / "libfabmeter-zmq.so").exists()
    assert "zmq" in info["transports"] or not built, info["transports_unavailable"]
    transports = ["shm"] + (["zmq"] if built else [])
    for transport in transports:
        r = fm.run("lat", "-t", transport, "-n", "300", "--warmup", "10", "--json", cwd=tmp_path)
        assert r.returncode == 0, (transport, r.stderr)
        points = [ln for ln in json_lines(r.stdout) if ln["type"] == "point"]
        assert [p["transport"] for p in points] == [transport], r.stdout
    # The installed engine's own serve and client, as on two hosts.
    serve = subprocess.Popen([str(engine), "serve", "--bind", "127.0.0.1", "--port", "0", "--once"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        port = json.loads(serve.stdout.readline())["port"]
        r = subprocess.run([str(engine), "run", "lat", "-t", transports[-1], "-n", "300",
                            "--server", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert [ln["type"] for ln in json_lines(r.stdout)][-1] == "end"
        assert serve.wait(timeout=30) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def test_python_finds_its_engine_in_order(tmp_path, monkeypatch):
    from fabmeter import engine as eng
    pkg_engine = tmp_path / "pkg" / "_engine" / "bin" / "fabmeter-engine"
    pkg_engine.parent.mkdir(parents=True)
    pkg_engine.write_text("#!/bin/sh\n")
    pkg_engine.chmod(0o755)
    monkeypatch.delenv("FABMETER_ENGINE", raising=False)
    monkeypatch.setattr(eng, "ENGINE_IN_PACKAGE", pkg_engine)
    assert eng.find_engine() == str(pkg_engine)           # installed with the package: before the repository's
    monkeypatch.setenv("FABMETER_ENGINE", str(ENGINE))
    assert eng.find_engine() == str(ENGINE)               # the variable first
    monkeypatch.delenv("FABMETER_ENGINE")
    monkeypatch.setattr(eng, "ENGINE_IN_PACKAGE", tmp_path / "none")
    assert eng.find_engine() == str(eng.ENGINE_IN_REPO)   # then the repository's build
