"""Transports as plugins: the engine itself needs no transport library; each
library transport is a plugin (libfabmeter-<name>.so) loaded from the plugin
directory at first use. A plugin that cannot be used (its library missing, a
corrupt file, another ABI, no descriptor) makes that transport unavailable
with the reason, and nothing else: the other transports, serve and the CLI
keep working, and a run naming it exits 2 with that reason."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import ENGINE, REPO, json_lines, stop_serve

TRANSPORT_LIBS = ("libzmq", "libnng", "libnanomsg", "libfabric", "libibverbs", "librdmacm")
PLUGINS = ENGINE.parent / "plugins"


def engine_json(*args: str, env: dict | None = None, cwd=None) -> dict:
    r = subprocess.run([str(ENGINE), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def with_plugin_dir(path) -> dict:
    return {**os.environ, "FABMETER_PLUGIN_DIR": str(path)}


def test_engine_links_no_transport_library(engine):
    libs = subprocess.run(["ldd", str(engine)], capture_output=True, text=True, check=True).stdout
    for lib in TRANSPORT_LIBS:
        assert lib not in libs, libs
    info = engine_json("options")
    assert {"shm", "tcp", "udp"} <= set(info["transports"])
    assert info["plugin_dir"] == str(PLUGINS)
    # The transport option takes every transport known, so an unavailable one reaches the engine's reason.
    choices = next(o for o in info["options"] if o["name"] == "transport")["values"]
    assert set(choices) == set(info["transports"]) | set(info["transports_unavailable"])


def test_transports_lists_each_with_its_state(fm):
    r = fm.run("transports")
    assert r.returncode == 0, r.stderr
    assert "shm: available" in r.stdout and "tcp: available" in r.stdout and "udp: available" in r.stdout
    info = engine_json("options")
    for name, why in info["transports_unavailable"].items():
        assert f"{name}: unavailable: {why}" in r.stdout
    version = fm.run("--version").stdout
    assert "transports: shm, tcp, udp" in version, version


# --- a library truly absent: a private mount namespace hides it ---------------------------------

def library_path(soname: str) -> Path:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    m = re.search(rf"^\s*{re.escape(soname)} \(libc6,x86-64\) => (\S+)$", out, re.M)
    if not m:
        pytest.skip(f"{soname} is not installed")
    return Path(m.group(1))


@pytest.fixture
def without_libnng(tmp_path):
    """A command prefix that runs its command in a private mount namespace
    where libnng.so.1 does not exist: an overlay on its directory whose upper
    layer holds a whiteout for it (the loader then says "cannot open shared
    object file"). Nothing outside the namespace sees it."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    if not (PLUGINS / "libfabmeter-nng.so").exists():
        pytest.skip("the nng plugin is not built")
    lib = library_path("libnng.so.1")
    libdir = lib.parent.resolve()
    upper, work = tmp_path / "upper", tmp_path / "work"
    upper.mkdir()
    work.mkdir()
    os.mknod(upper / lib.name, 0o600 | 0o020000, os.makedev(0, 0))  # an overlay whiteout
    script = (f"mount -t overlay overlay -o lowerdir={libdir},upperdir={upper},workdir={work} {libdir} "
              f"&& exec \"$@\"")
    prefix = ("unshare", "--mount", "sh", "-c", script, "sh")
    probe = subprocess.run([*prefix, "sh", "-c", f"test ! -e {libdir / lib.name}"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot hide {lib} in a mount namespace: {probe.stderr.strip()}")
    return prefix


def test_a_missing_library_takes_only_its_transport(fm, without_libnng):
    reason = "nng: unavailable: libnng.so.1: cannot open shared object file"
    r = fm.run("transports", prefix=without_libnng)
    assert r.returncode == 0, r.stderr
    assert reason in r.stdout, r.stdout
    assert "shm: available" in r.stdout and "zmq: available" in r.stdout
    assert "unavailable: nng" in fm.run("--version", prefix=without_libnng).stdout
    for transport in ("shm", "tcp", "udp"):
        r = fm.run("lat", "-t", transport, "-n", "300", "--warmup", "10", "--json", prefix=without_libnng)
        assert r.returncode == 0, (transport, r.stderr)
        assert [ln["type"] for ln in json_lines(r.stdout)].count("point") == 1
    r = fm.run("lat", "-t", "nng", "-n", "300", prefix=without_libnng)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().startswith(f"fabmeter: error: {reason}"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_server_without_the_library_serves_others_and_refuses_it_with_its_reason(fm, without_libnng):
    serve = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0", prefix=without_libnng)
    try:
        event = json.loads(serve.stdout.readline())
        assert event["event"] == "listening", event
        server = f"127.0.0.1:{event['port']}"
        r = fm.run("lat", "-t", "tcp", "--server", server, "-n", "300", "--warmup", "10", "--json")
        assert r.returncode == 0, r.stderr
        # This side has libnng; the server has not, and says so at the hello.
        r = fm.run("lat", "-t", "nng", "--server", server, "-n", "300")
        assert r.returncode == 2, r.stderr
        assert "nng: unavailable: libnng.so.1: cannot open shared object file" in r.stderr, r.stderr
        r = fm.run("lat", "-t", "tcp", "--server", server, "-n", "300", "--warmup", "10", "--json")
        assert r.returncode == 0, r.stderr
    finally:
        stop_serve(serve)


# --- plugins that cannot be used ------------------------------------------------------------------

@pytest.fixture
def trusted_tmp():
    """A folder a plugin may be loaded from: in the build tree, whose folders are trusted (a plugin under /tmp,
    writable by everyone, is refused)."""
    d = Path(tempfile.mkdtemp(prefix="test-plugins-", dir=REPO / "build"))
    yield d
    shutil.rmtree(d)


def plugin_copy(trusted: Path) -> Path:
    """A plugin directory holding the built plugins, to spoil one of."""
    if not (PLUGINS / "libfabmeter-zmq.so").exists():
        pytest.skip("the zmq plugin is not built")
    d = trusted / "plugins"
    shutil.copytree(PLUGINS, d)
    return d


def build_fake_plugin(tmp_path, path: Path, body: str) -> None:
    src = tmp_path / "fake.cpp"
    src.write_text(body)
    cxx = shutil.which("c++") or shutil.which("g++")
    if not cxx:
        pytest.skip("no C++ compiler")
    subprocess.run([cxx, "-shared", "-fPIC", "-o", str(path), str(src)], check=True, capture_output=True)


def copy_tag(tmp_path, plugin: Path, to: Path) -> None:
    """The built plugin's .fabmeter_plugin section added to `to` (as anyone can, with objcopy)."""
    if not plugin.exists() or not shutil.which("objcopy"):
        pytest.skip(f"needs objcopy and {plugin.name}")
    tag = tmp_path / "tag"
    subprocess.run(["objcopy", "--dump-section", f".fabmeter_plugin={tag}", str(plugin), str(tmp_path / "scratch")],
                   check=True)
    subprocess.run(["objcopy", "--add-section", f".fabmeter_plugin={tag}", str(to)], check=True)


def test_a_corrupt_plugin_takes_only_its_transport(fm, trusted_tmp):
    d = plugin_copy(trusted_tmp)
    (d / "libfabmeter-zmq.so").write_bytes(os.urandom(4096))
    env = with_plugin_dir(d)
    info = engine_json("options", env=env)
    assert "zmq" not in info["transports"] and {"shm", "tcp", "udp"} <= set(info["transports"])
    assert info["transports_unavailable"]["zmq"].startswith("invalid ELF header"), info["transports_unavailable"]
    fm.env["FABMETER_PLUGIN_DIR"] = str(d)
    r = fm.run("lat", "-t", "zmq", "-n", "100")
    assert r.returncode == 2 and "fabmeter: error: zmq: unavailable: invalid ELF header" in r.stderr, r.stderr
    r = fm.run("lat", "-t", "tcp", "-n", "300", "--warmup", "10", "--json")
    assert r.returncode == 0, r.stderr
    if "nanomsg" in engine_json("options")["transports"]:
        r = fm.run("lat", "-t", "nanomsg", "-n", "300", "--warmup", "10", "--json")
        assert r.returncode == 0, r.stderr


def test_a_plugin_of_another_abi_or_without_the_symbol_is_refused(tmp_path, trusted_tmp):
    """`options` and a run read a plugin's tag section without loading it; a
    run loads it then and checks the descriptor its one export returns."""
    d = plugin_copy(trusted_tmp)
    build_fake_plugin(tmp_path, d / "libfabmeter-zmq.so", """
        #include <cstdint>
        struct Tag { char magic[16]; uint32_t abi, sizes[5]; char version[16], name[16]; };
        extern "C" __attribute__((used, section(".fabmeter_plugin"))) const Tag tag{"fabmeter-plugin", 999, {}, {}, {}};
        struct D { uint32_t abi; };
        static const D d{999};
        extern "C" const D* fabmeter_transport_plugin() { return &d; }""")
    build_fake_plugin(tmp_path, d / "libfabmeter-nanomsg.so", "extern \"C\" int something_else() { return 1; }")
    info = engine_json("options", env=with_plugin_dir(d))
    why = info["transports_unavailable"]
    abi = re.search(r"kPluginAbi = (\d+);", (REPO / "engine/src/session/plugin.hpp").read_text()).group(1)
    assert why["zmq"] == f"{d}/libfabmeter-zmq.so: refused: plugin ABI 999, this engine's is {abi}", why
    assert why["nanomsg"] == f"{d}/libfabmeter-nanomsg.so: not a fabmeter plugin (no .fabmeter_plugin section)"
    assert {"shm", "tcp", "udp"} <= set(info["transports"])

    def dry_run(transport):
        return subprocess.run([str(ENGINE), "run", "lat", "-t", transport, "--server", "127.0.0.1", "--dry-run"],
                              capture_output=True, text=True, env=with_plugin_dir(d))

    r = dry_run("zmq")
    assert r.returncode == 2
    assert r.stderr.strip() == f"fabmeter-engine: error: zmq: unavailable: {why['zmq']}"
    r = dry_run("nanomsg")
    assert r.returncode == 2
    assert r.stderr.strip() == f"fabmeter-engine: error: nanomsg: unavailable: {why['nanomsg']}"
    # With the tag of a real plugin but no descriptor: loaded, and refused then.
    tagged = d / "libfabmeter-nanomsg.so"
    copy_tag(tmp_path, PLUGINS / tagged.name, tagged)
    r = dry_run("nanomsg")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"fabmeter-engine: error: nanomsg: unavailable: {tagged}: "
                                "not a fabmeter plugin (no symbol fabmeter_transport_plugin)")


def test_options_loads_no_plugin(engine):
    """Which plugins can run is checked without loading them into the engine:
    no library's constructors run (libfabric's PSM providers cost 0.2 s)."""
    if not shutil.which("strace"):
        pytest.skip("no strace")
    # Without -f: the engine's own system calls, not those of the `ld.so --list` it starts.
    r = subprocess.run(["strace", "-e", "trace=openat", str(engine), "options"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    opened = [ln for ln in r.stderr.splitlines() if ln.startswith("openat(")]
    assert not [ln for ln in opened if re.search(r"lib(fabric|zmq|nng|nanomsg|ibverbs|rdmacm)\.so", ln)], opened


def test_plugins_come_only_from_the_plugin_directory(tmp_path):
    """Never from the current directory; the variable must be absolute."""
    cwd = plugin_copy(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    info = engine_json("options", env=with_plugin_dir(empty), cwd=cwd)
    assert info["transports"] == ["shm", "tcp", "udp"]
    assert info["transports_unavailable"]["zmq"] == f"no plugin {empty}/libfabmeter-zmq.so"
    info = engine_json("options", env=with_plugin_dir("plugins"), cwd=cwd.parent)
    assert info["transports"] == ["shm", "tcp", "udp"]
    assert info["transports_unavailable"]["zmq"] == "FABMETER_PLUGIN_DIR must be an absolute path, got 'plugins'"


# --- a plugin is loaded only from where nobody else could have written it ------------------------

def marker_plugin(tmp_path, path: Path) -> None:
    """A .so whose constructor creates $FM_PLUGIN_MARKER, tagged as the zmq plugin: loading it runs that."""
    build_fake_plugin(tmp_path, path, """
        #include <cstdio>
        #include <cstdlib>
        __attribute__((constructor)) static void ran() {
          if (const char* m = std::getenv("FM_PLUGIN_MARKER")) std::fclose(std::fopen(m, "w"));
        }""")
    copy_tag(tmp_path, PLUGINS / "libfabmeter-zmq.so", path)


@pytest.mark.parametrize("place", ["folder-0777", "file-0666-of-nobody", "symlink-into-tmp"])
def test_an_untrusted_plugin_never_runs(fm, tmp_path, trusted_tmp, place):
    """The plugin file, resolved, and every folder up to / must be owned by root or the engine's user and
    writable by nobody else, checked before the file is opened for loading: otherwise its transport is
    unavailable with that reason (listed by `transports`, exit 2 for a run or a server's client) and the
    plugin's constructor never runs."""
    if place == "file-0666-of-nobody" and os.geteuid() != 0:
        pytest.skip("needs root to give a file to nobody")
    d = plugin_copy(trusted_tmp)
    plugin = d / "libfabmeter-zmq.so"
    if place == "folder-0777":
        marker_plugin(tmp_path, plugin)
        d.chmod(0o777)
        reason = f"directory {d} is writable by others (mode 0777)"
    elif place == "file-0666-of-nobody":
        marker_plugin(tmp_path, plugin)
        plugin.chmod(0o666)
        os.chown(plugin, 65534, 65534)
        reason = f"{plugin} is owned by uid 65534, neither root nor this user"
    else:
        wide = tmp_path / "wide"
        wide.mkdir()
        wide.chmod(0o777)
        marker_plugin(tmp_path, wide / "x.so")
        plugin.unlink()
        plugin.symlink_to(wide / "x.so")
        reason = f"directory {wide} is writable by others (mode 0777)"
    marker = tmp_path / "constructor-ran"
    fm.env.update(FABMETER_PLUGIN_DIR=str(d), FM_PLUGIN_MARKER=str(marker))
    why = engine_json("options", env=fm.env)["transports_unavailable"]["zmq"]
    assert why.startswith(f"{plugin}: refused: ") and why.endswith(reason), why
    assert "writable by others" in why or "owned by uid" in why, why
    r = fm.run("transports")
    assert r.returncode == 0 and f"zmq: unavailable: {why}" in r.stdout, r.stdout
    r = fm.run("lat", "-t", "zmq", "-n", "100")
    assert r.returncode == 2 and r.stderr.strip() == f"fabmeter: error: zmq: unavailable: {why}", r.stderr
    serve = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0")
    try:
        event = json.loads(serve.stdout.readline())
        fm.env["FABMETER_PLUGIN_DIR"] = str(PLUGINS)       # this side's zmq is the built one
        r = fm.run("lat", "-t", "zmq", "--server", f"127.0.0.1:{event['port']}", "-n", "100")
        assert r.returncode == 2 and why in r.stderr, r.stderr
    finally:
        stop_serve(serve)
    assert not marker.exists(), "the plugin's constructor ran"


def test_a_trusted_plugin_loads_through_a_symlink(fm, tmp_path, trusted_tmp):
    """The same checks pass a plugin in trusted folders, reached through a symbolic link; and the marker
    plugin above, once trusted, is loaded (its constructor runs), so the refusals are the checks'."""
    d = plugin_copy(trusted_tmp)
    links = trusted_tmp / "links"
    links.mkdir()
    (links / "libfabmeter-zmq.so").symlink_to(d / "libfabmeter-zmq.so")
    fm.env["FABMETER_PLUGIN_DIR"] = str(links)
    r = fm.run("lat", "-t", "zmq", "-n", "300", "--warmup", "10", "--json")
    assert r.returncode == 0, r.stderr
    marker = tmp_path / "constructor-ran"
    marker_plugin(tmp_path, d / "libfabmeter-zmq.so")
    fm.env.update(FABMETER_PLUGIN_DIR=str(d), FM_PLUGIN_MARKER=str(marker))
    r = fm.run("lat", "-t", "zmq", "-n", "100")
    assert r.returncode == 2 and "not a fabmeter plugin (no symbol fabmeter_transport_plugin)" in r.stderr, r.stderr
    assert marker.exists()


def test_a_plugin_in_a_folder_of_ours_under_sticky_tmp_loads(fm):
    """/tmp (1777, sticky, root's) lets others add names but not remove or rename ours: a plugin in a folder of
    ours under it loads; the same folder made writable by others is refused."""
    if not (PLUGINS / "libfabmeter-zmq.so").exists():
        pytest.skip("the zmq plugin is not built")
    if not os.stat("/tmp").st_mode & stat.S_ISVTX:
        pytest.skip("/tmp is not sticky here")
    d = Path(tempfile.mkdtemp(prefix="fm-plugins-", dir="/tmp"))
    try:
        d.chmod(0o755)
        shutil.copy2(PLUGINS / "libfabmeter-zmq.so", d / "libfabmeter-zmq.so")
        fm.env["FABMETER_PLUGIN_DIR"] = str(d)
        r = fm.run("lat", "-t", "zmq", "-n", "300", "--warmup", "10", "--json")
        assert r.returncode == 0, r.stderr
        d.chmod(0o777)
        r = fm.run("lat", "-t", "zmq", "-n", "100")
        assert r.returncode == 2 and f"refused: directory {d} is writable by others (mode 0777)" in r.stderr, r.stderr
    finally:
        shutil.rmtree(d)
