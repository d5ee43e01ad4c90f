"""The cluster studies: TCP congestion control set and recorded per end (--tcp-cc), and
suites/homa-cluster.toml and suites/ramcloud-cluster.toml run, cut down, over 8 network namespace
hosts: their figures drawn, a second run skipping the finished points."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from conftest import REPO, TRANSPORTS, bridged_namespaces, free_port
from mesh_helpers import remote_fabmeter

AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def _run_doc(out: Path) -> dict:
    [path] = out.rglob("run.json")
    return json.loads(path.read_text())


@pytest.mark.parametrize("cc", ["reno", "cubic"])
def test_tcp_cc_is_set_and_recorded_on_both_ends(fm, tmp_path, cc):
    """Each end's fabric block names the control its data socket was given; the client's socket says so too."""
    r = fm.run("lat", "-t", "tcp", "--tcp-cc", cc, "-n", "200", "--warmup", "10", "--out", tmp_path)
    assert r.returncode == 0, r.stderr
    doc = _run_doc(tmp_path)
    env = doc["environment"]
    assert env["engine"]["fabric"]["tcp_congestion_control"] == cc
    assert env["server_engine"]["fabric"]["tcp_congestion_control"] == cc
    text = json.dumps(doc)
    assert f'"tcp_cc": "{cc}"' in text and f'"tcp_congestion": "{cc}"' in text, "the option, the socket's reading"


def test_a_missing_tcp_cc_is_refused_with_the_kernels_list(fm):
    r = fm.run("lat", "-t", "tcp", "--tcp-cc", "nosuchcc", "-n", "100")
    assert r.returncode == 2, r.stderr
    assert f"this kernel offers: {AVAILABLE.read_text().strip()}" in r.stderr, r.stderr


def test_compare_names_a_change_of_tcp_cc(fm, tmp_path):
    for cc in ("reno", "cubic"):
        r = fm.run("lat", "-t", "tcp", "--tcp-cc", cc, "-n", "300", "--warmup", "10", "--out", tmp_path / cc)
        assert r.returncode == 0, r.stderr
    r = fm.run("compare", tmp_path / "reno", tmp_path / "cubic")
    assert "tcp_congestion_control" in r.stdout + r.stderr, r.stdout


# --- the suites over 8 namespace hosts -----------------------------------------------------------------------

HOSTS = 8


@pytest.fixture
def eight_hosts(tmp_path, fm):
    """8 bridged namespaces, and a folder for the front of PATH (a suite's ssh is `ssh`, its remote fabmeter
    `fabmeter`): its `ssh` runs the remote command in the namespace holding the host's address (as ssh would on
    that host), its `fabmeter` this checkout's. Yields (hosts, hostfile, the folder)."""
    net = f"10.{190 + os.getpid() % 3}.{os.getpid() % 250}"
    with bridged_namespaces("fmc", net, HOSTS) as hosts:
        table = tmp_path / "namespaces"
        table.write_text("".join(f"{addr} {ns}\n" for ns, addr in hosts))
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        ssh = bin_dir / "ssh"
        ssh.write_text("#!/bin/sh\n# ssh's arguments: options up to --, the host, the command\n"
                       'while [ "$1" != "--" ]; do shift; done\nshift\n'
                       f'ns=$(awk -v h="$1" \'$1 == h {{print $2}}\' {table})\n'
                       'exec ip netns exec "$ns" sh -c "$2"\n')
        fabmeter = bin_dir / "fabmeter"
        fabmeter.write_text(f'#!/bin/sh\nexec {remote_fabmeter(fm)} "$@"\n')
        for f in (ssh, fabmeter):
            f.chmod(0o755)
        hostfile = tmp_path / "hosts.txt"
        hostfile.write_text("".join(f"{addr}\n" for _, addr in hosts))
        yield hosts, hostfile, bin_dir


def _toml(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return json.dumps(value)      # strings, numbers and booleans as TOML writes them


def _cut_down(name: str, tmp_path: Path, eight_hosts, token_file: str, defaults: dict, keep: dict) -> Path:
    """The shipped suite run over the namespaces (launch = "ssh", their hostfile) with `defaults` changed, only
    the matrix tables whose keys hold `keep`'s single values, each with `keep`'s values (None: the key left
    out), in a file of its own."""
    _, hostfile, _ = eight_hosts
    doc = tomllib.loads((REPO / "suites" / f"{name}.toml").read_text())
    d = {k: v for k, v in doc["defaults"].items() if k != "ranks"}
    # A control timeout for a loaded machine: 8 ranks' Python starting on a few shared CPUs.
    d |= {"launch": "ssh", "hostfile": str(hostfile), "token_file": token_file, "mesh_port": free_port(),
          "timeout_ms": 30000, **defaults}
    def holds(have, v) -> bool:
        return v is None or isinstance(v, list) or have == v or isinstance(have, list) and v in have
    tables = [{k: v for k, v in {**t, **keep}.items() if v is not None} for t in doc["matrix"]
              if all(holds(t.get(k, d.get(k)), v) for k, v in keep.items())]
    lines = [f"name = {_toml(doc['name'])}", f"description = {_toml(doc['description'])}", "[defaults]"]
    lines += [f"{k} = {_toml(v)}" for k, v in d.items()]
    for t in tables:
        lines += ["[[matrix]]", *(f"{k} = {_toml(v)}" for k, v in t.items())]
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _suite_twice(fm, eight_hosts, path: Path, out: Path) -> list[dict]:
    """The suite run from the first namespace (rank 0 is the first host), then again: nothing left to run."""
    [(ns0, _), *_], _, bin_dir = eight_hosts
    prefix = ("ip", "netns", "exec", ns0, "env", f"PATH={bin_dir}:{os.environ['PATH']}")
    r = fm.run("suite", path, "--out", out, prefix=prefix, timeout=500)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    index = json.loads((out / "index.json").read_text())
    meshes = {p["id"]: (out / p["id"] / "mesh.json").stat().st_mtime_ns for p in index["points"]}
    again = fm.run("suite", path, "--out", out, prefix=prefix, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {i: (out / i / "mesh.json").stat().st_mtime_ns for i in meshes} == meshes, "a finished point ran again"
    return [json.loads((out / i / "mesh.json").read_text()) for i in meshes]


def _figures(fm, out: Path) -> str:
    r = fm.run("report", out, timeout=300)
    assert r.returncode == 0, r.stderr
    return next(out.rglob("*.html")).read_text()


def test_homa_cluster_over_8_namespace_hosts(fm, tmp_path, eight_hosts, token_file):
    """W2 under reno and cubic, many-to-many over 8 hosts: every pair merged into the slowdown per size, each
    server's requests/s; the report's Homa figure names the 8 hosts and their MTU."""
    path = _cut_down("homa-cluster", tmp_path, eight_hosts, token_file, {"count": 1400, "rate": 700, "warmup": 20},
                     {"workload": "w2", "tcp_cc": ["reno", "cubic"], "of_capacity": None})  # a fixed rate: no capacity phase
    docs = _suite_twice(fm, eight_hosts, path, tmp_path / "out")
    assert sorted(d["params"]["tcp_cc"] for d in docs) == ["cubic", "reno"]
    for d in docs:
        load = d["load"]
        assert d["status"] == "ok" and len(d["mesh"]["hosts"]) == HOSTS
        assert load["overall"]["pairs_merged"] == HOSTS * (HOSTS - 1), load["unmerged"]
        assert len(load["servers"]) == HOSTS and all(s["achieved_rps"] for s in load["servers"])
        assert len(load["overall"]["slowdown"]) >= 2
    page = _figures(fm, tmp_path / "out")
    assert 'alt="cluster slowdown w2 8"' in page and "w2, 8 hosts many-to-many, MTU 1500" in page


@pytest.mark.skipif("ofi" not in TRANSPORTS, reason="ofi not built (libfabric)")
def test_ramcloud_cluster_over_8_namespace_hosts(fm, tmp_path, eight_hosts, token_file):
    """7 client hosts against one server over libfabric's tcp provider (send completions: a transmit path),
    two client counts: each point's transmit path comes back per pair, and the report reads every point (its
    transmit path figure is drawn where a reply waited for a send buffer: none does at these rates)."""
    path = _cut_down("ramcloud-cluster", tmp_path, eight_hosts, token_file,
                     {"duration": 0.3, "warmup": 20},
                     {"transport": "ofi", "rq_depth": 24, "sq_depth": 8, "clients": [1, 2]})
    docs = _suite_twice(fm, eight_hosts, path, tmp_path / "out")
    assert len(docs) >= 2
    for d in docs:
        assert d["status"] == "ok" and len(d["pairs"]) == HOSTS - 1 and all(p["dst"] == 0 for p in d["pairs"])
        assert all(p["load"]["tx_polls"] is not None for p in d["pairs"]), d["pairs"][0]["load"]
    page = _figures(fm, tmp_path / "out")
    assert "not drawn" not in page and "2 mesh runs" in page
