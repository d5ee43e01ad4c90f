"""The transport registry: one fm_transport line per transport in
engine/CMakeLists.txt decides what is compiled in, the transport table and
which transports each option applies to; transports see only their own
option groups."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from conftest import REPO
from fabmeter import demo

CMAKE = REPO / "engine" / "CMakeLists.txt"


def transport_lines() -> dict[str, str]:
    """Transport -> the rest of its fm_transport line (GROUPS, SOURCES, ...)."""
    return dict(re.findall(r"^fm_transport\((\w+) \w+ \S+(.*?)\)$", CMAKE.read_text(), re.M | re.S))


def declared() -> dict[str, list[str]]:
    """Transport -> the option groups its fm_transport line lists."""
    out = {}
    for name, rest in transport_lines().items():
        groups = re.search(r"GROUPS ((?:[a-z]+ ?)+)", rest)
        out[name] = groups.group(1).split() if groups else []
    return out


def options(engine) -> dict:
    return json.loads(subprocess.run([str(engine), "options"], capture_output=True, text=True, check=True).stdout)


def test_option_transports_follow_the_groups_transports_declare(engine):
    decl = declared()
    assert {"shm", "tcp", "udp", "ofi", "verbs", "zmq"} <= decl.keys()
    info = options(engine)
    assert set(info["transports"]) <= decl.keys()
    for o in info["options"]:
        readers = sorted(t for t, groups in decl.items() if o["group"] in groups)
        want = readers or ["all"]
        assert sorted(o["transports"].split(",")) == want, o["name"]
    by_name = {o["name"]: o for o in info["options"]}
    assert by_name["tx-depth"]["transports"] == "all" and by_name["tx-depth"]["scope"] == "bw"


def test_transports_never_see_the_whole_params_nor_the_experiment():
    for f in (REPO / "engine" / "src" / "transport").rglob("*.[ch]pp"):
        text = f.read_text()
        assert not re.search(r"\bParams\b", text), f"{f} takes the whole Params"
        assert "experiment" not in text, f"{f} reads the experiment"


def test_demo_runs_every_transport_the_engine_lists():
    got = [label for label, _, _ in demo.configs(["shm", "pipe", "ofi", "verbs"])]
    assert got == ["shm", "pipe", "ofi tcp msg", "ofi shm rdm"]


def test_nanomsg_calls_go_to_libnanomsg(engine):
    """libnng exports nanomsg's nn_* API too (its compat layer): the nanomsg
    plugin links libnanomsg alone, so nothing else can take its calls."""
    if "nanomsg" not in options(engine)["transports"]:
        pytest.skip("the engine was built without nanomsg")
    plugin = engine.parent / "plugins" / "libfabmeter-nanomsg.so"
    libs = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, check=True).stdout
    assert "libnanomsg.so" in libs and "libnng" not in libs, libs


def sources() -> dict[str, list[str]]:
    """Transport -> the sources its fm_transport line compiles."""
    return {name: re.search(r"SOURCES ((?:\S+\.cpp\s*)+)", rest).group(1).split()
            for name, rest in transport_lines().items()}


def symbols(objects: list) -> tuple[set[str], set[str]]:
    """(defined, undefined) symbols of the object files; weak ones (inline
    functions, emitted wherever used) count as neither."""
    defined, undefined = set(), set()
    if objects:
        out = subprocess.run(["nm", *map(str, objects)], capture_output=True, text=True, check=True).stdout
        for kind, name in re.findall(r"^(?:[0-9a-f]+)?\s+([A-Za-z]) (\S+)$", out, re.M):
            if kind == "U":
                undefined.add(name)
            elif kind in "TDBR":
                defined.add(name)
    return defined, undefined


def test_each_transport_links_alone(engine):
    """FM_TRANSPORTS may name any one transport: what a transport's objects
    call must be its own or the core's, never another transport's (verbs'
    rdma_cm once called the socket helpers compiled only with tcp and udp)."""
    build = engine.parent
    objects = {}
    for name, srcs in sources().items():
        # Built in: the engine's libraries; a plugin: its own target.
        found = [build / "CMakeFiles" / "fmcore.dir" / f"{src}.o" for src in srcs]
        found.append(build / "CMakeFiles" / "fmsession.dir" / "generated" / f"run_points_{name}.cpp.o")
        plugin = build / "CMakeFiles" / f"fabmeter-{name}.dir"
        if not all(o.exists() for o in found) and plugin.is_dir():
            found = [plugin / f"{src}.o" for src in srcs] + [plugin / "generated" / f"run_points_{name}.cpp.o"]
        if all(o.exists() for o in found):
            objects[name] = found
    assert {"shm", "tcp", "udp"} <= objects.keys(), "the engine's transport objects are not where expected"
    every_transport = {o for objs in objects.values() for o in objs}
    core = [o for d in ("fmcore.dir", "fmsession.dir") for o in (build / "CMakeFiles" / d).rglob("*.o")
            if o not in every_transport]
    core_defined, _ = symbols(core)
    syms = {name: symbols(objs) for name, objs in objects.items()}
    for name, (own, needs) in syms.items():
        elsewhere = set().union(*(defined for other, (defined, _) in syms.items() if other != name))
        missing = sorted(needs & (elsewhere - core_defined - own))
        assert not missing, f"{name} calls what only other transports compile: {missing[:5]}"


def configure(build, *defs: str) -> subprocess.CompletedProcess:
    return subprocess.run(["cmake", "-S", str(REPO / "engine"), "-B", str(build), "-G", "Ninja",
                           "-DBUILD_TESTING=OFF", *defs], capture_output=True, text=True)


def test_fm_transports_builds_only_the_transports_named(tmp_path):
    r = configure(tmp_path / "b", "-DFM_TRANSPORTS=shm;tcp")
    assert r.returncode == 0, r.stderr
    registry = (tmp_path / "b" / "generated" / "fabmeter" / "transports.def").read_text()
    built = re.findall(r"^FM_TRANSPORT\((\w+),", registry, re.M)
    absent = re.findall(r"^FM_TRANSPORT_ABSENT\((\w+),", registry, re.M)
    assert built == ["shm", "tcp"] and sorted(built + absent) == sorted(declared())
    units = sorted(p.name for p in (tmp_path / "b" / "generated").glob("run_points_*.cpp"))
    assert units == ["run_points_shm.cpp", "run_points_tcp.cpp"]  # one unit of loops per transport built
    assert "transport udp: not in FM_TRANSPORTS, left out" in r.stdout


def test_fm_transports_refuses_an_unknown_name(tmp_path):
    r = configure(tmp_path / "b", "-DFM_TRANSPORTS=shm;tpc")
    assert r.returncode != 0
    assert "FM_TRANSPORTS: no transport 'tpc' (one of shm, tcp, udp" in " ".join(r.stderr.split())
