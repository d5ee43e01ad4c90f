"""make deb (scripts/make-deb.sh): a .deb of the engine's install tree
(prefix /usr) and the Python package, which lintian finds no error in, that
Depends only on what the core needs and Recommends the transport libraries;
unpacked into a temporary root, its `fabmeter` runs with its own engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO, json_lines

TRANSPORT_PACKAGES = ("libzmq5", "libnng1", "libnanomsg5", "libfabric1", "libibverbs1", "librdmacm1")


@pytest.fixture(scope="module")
def deb(engine) -> Path:
    for tool in ("dpkg-deb", "dpkg-shlibdeps"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (scripts/install-deps.sh installs dpkg-dev)")
    r = subprocess.run(["bash", str(REPO / "scripts" / "make-deb.sh")], capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not [ln for ln in r.stdout.splitlines() if ln.startswith("E:")], r.stdout
    debs = sorted((REPO / "build").glob("fabmeter_*.deb"))
    assert len(debs) == 1, debs
    return debs[0]


def field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_depends_on_the_core_only(deb):
    depends, recommends = field(deb, "Depends"), field(deb, "Recommends")
    for pkg in TRANSPORT_PACKAGES:
        assert pkg not in depends, depends
    assert "libssl3" in depends and "zlib1g" in depends and "python3-numpy" in depends
    built = {p.name for p in (REPO / "build" / "engine" / "plugins").glob("libfabmeter-*.so")}
    if "libfabmeter-zmq.so" in built:
        assert "libzmq5" in recommends, recommends
    assert deb.name == f"fabmeter_{field(deb, 'Version')}_{field(deb, 'Architecture')}.deb"


def test_unpacked_package_runs(deb, tmp_path):
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    assert (root / "usr" / "lib" / "fabmeter").is_dir() and (root / "usr" / "share" / "fabmeter" / "suites").is_dir()
    kit = root / "usr" / "share" / "fabmeter" / "contrib"
    assert sorted(str(f.relative_to(kit)) for f in kit.rglob("*") if f.is_file()) == sorted(
        str(f.relative_to(REPO / "contrib")) for f in (REPO / "contrib").rglob("*") if f.is_file())
    # This interpreter without its site hooks (no editable install of the
    # repository), the package's modules first, then numpy from its site-packages.
    env = {k: v for k, v in os.environ.items() if k not in ("FABMETER_ENGINE", "FABMETER_PLUGIN_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = f"{root / 'usr' / 'lib' / 'python3' / 'dist-packages'}{os.pathsep}{sysconfig.get_paths()['purelib']}"
    env["PATH"] = f"{root / 'usr' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "elsewhere"
    work.mkdir()

    def fabmeter(*args):
        return subprocess.run([sys.executable, "-S", str(root / "usr" / "bin" / "fabmeter"), *args],
                              capture_output=True, text=True, env=env, cwd=work, timeout=120,
                              stdin=subprocess.DEVNULL)

    r = fabmeter("transports")
    assert r.returncode == 0, r.stderr
    assert f"(plugin directory: {root / 'usr' / 'lib' / 'fabmeter'})" in r.stdout, r.stdout
    r = fabmeter("lat", "-t", "shm", "-n", "300", "--warmup", "10", "--json")
    assert r.returncode == 0, r.stderr
    assert [ln["transport"] for ln in json_lines(r.stdout) if ln["type"] == "point"] == ["shm"]
