"""docs/quickstart.md runs as written: every ```sh block in order, in one working folder, `fabmeter` on PATH; a
block marked host=a or host=b runs in the first or second of two network namespaces (192.0.2.1, 192.0.2.2), one
marked background stays up (a serve: its first line says it listens) until the end."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from conftest import REPO, stop_serves, veth_namespaces

PAGE = REPO / "docs" / "quickstart.md"
BLOCK = re.compile(r"^```sh([^\n]*)\n(.*?)^```", re.M | re.S)


def blocks() -> list[tuple[list[str], str]]:
    return [(info.split(), body) for info, body in BLOCK.findall(PAGE.read_text())]


def test_readme_links_the_quickstart_first():
    readme = (REPO / "README.md").read_text()
    first = re.search(r"\]\((docs/[^)#]+)", readme)
    assert first and first.group(1) == "docs/quickstart.md", first


def test_quickstart_runs_as_written(fm, tmp_path):
    assert len(blocks()) >= 9
    bin_dir, work = tmp_path / "bin", tmp_path / "work"
    bin_dir.mkdir()
    work.mkdir()
    (bin_dir / "fabmeter").write_text(f"#!/bin/sh\nexec {sys.executable} -m fabmeter \"$@\"\n")
    (bin_dir / "fabmeter").chmod(0o755)
    (work / "suites").symlink_to(REPO / "suites")     # the page runs in a checkout
    env = {**fm.env, "PATH": f"{bin_dir}:{fm.env['PATH']}"}
    out = []
    with veth_namespaces("qs", "192.0.2") as (ns_a, ns_b, _, _):
        hosts = {"host=a": ns_a, "host=b": ns_b}
        serves = []
        try:
            for words, body in blocks():
                host = next((hosts[w] for w in words if w in hosts), None)
                cmd = [*(["ip", "netns", "exec", host] if host else []), "bash", "-euo", "pipefail", "-c", body]
                if "background" in words:
                    serve = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, text=True,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                    serves.append(serve)
                    line = serve.stdout.readline()
                    assert line and json.loads(line)["event"] == "listening", (body, line, serve.stderr.read())
                    continue
                r = subprocess.run(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                   timeout=300)
                assert r.returncode == 0, f"{body}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
                out.append(r.stdout)
        finally:
            stop_serves(serves)
            for serve in serves:
                serve.communicate(timeout=30)
    text = "\n".join(out)
    assert "iterations 10,000" in text and "path: server 192.0.2.1 " in text, text
    assert (work / "results" / "report.html").is_file()
    assert int(out[-2].split()[-1]) > 0, out[-2]       # the watch: its series in the textfile
    assert re.search(r"^load-tcp-busy-workload-w1: ok in ", out[-1], re.M), out[-1]
