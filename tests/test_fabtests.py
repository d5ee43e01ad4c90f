"""rdma/fabtests.sh: libfabric's fabtests (fi_msg_bw, fi_rma_bw), built with
their libfabric from Debian's source package, are the peers of make
test-rdma's ofi bw rows. Here they run for real over the tcp provider on
loopback, their output goes through the guest report's parser, and
fabmeter's engine runs on the same library, as the rows run them in the
guest. The first build takes about a minute (cached in build/fabtests).

Skipped when the engine was built without libfabric. No timing is asserted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from conftest import REPO, guest_report, json_lines, script_module, stop_serve
from conftest import free_port

FT = REPO / "build" / "fabtests"
BUILD = ["bash", str(REPO / "rdma" / "fabtests.sh"), str(FT)]


@pytest.fixture(scope="module")
def fabtests(engine):
    res = subprocess.run([str(engine), "options"], capture_output=True, text=True, timeout=10, check=True)
    if "ofi" not in json.loads(res.stdout)["transports"]:
        pytest.skip("the engine was built without libfabric")
    r = subprocess.run(BUILD, capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    return FT


def test_build_is_named_cached_and_self_contained(fabtests):
    assert re.fullmatch(r"libfabric \d+\.\d+\.\d+ \(Debian [a-z]+ source \S+\)\n", (FT / "version").read_text())
    t0 = time.monotonic()
    r = subprocess.run(BUILD, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and "up to date" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 120, "the second run rebuilt instead of using the cache"
    for tool in ("fi_msg_bw", "fi_rma_bw"):
        path = FT / "bin" / tool
        assert os.access(path, os.X_OK), path
        # Each tool loads the libfabric it was built with, not the system's.
        ldd = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout
        assert f"libfabric.so.1 => {FT}/lib/libfabric.so.1" in ldd, ldd


def run_pair(argv: list[str]) -> str:
    """Server and client of one fabtests tool on loopback; the client's output."""
    port = str(free_port())
    server = subprocess.Popen([*argv, "-s", "127.0.0.1", "-B", port], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(50):  # the server needs a moment to listen
            time.sleep(0.2)
            client = subprocess.run([*argv, "-P", port, "127.0.0.1"], capture_output=True, text=True, timeout=60)
            if client.returncode == 0:
                break
        assert client.returncode == 0, client.stdout + client.stderr
        assert server.wait(timeout=30) == 0, server.stdout.read()
        return client.stdout
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("tool,op", [("fi_msg_bw", []), ("fi_rma_bw", ["-o", "writedata"])])
def test_tool_runs_and_the_report_reads_its_rate(fabtests, tool, op):
    out = run_pair([str(FT / "bin" / tool), "-p", "tcp", "-e", "msg", *op, "-S", "1024", "-I", "2000", "-W", "64"])
    report = script_module("test_rdma_report_mod", "rdma/test_rdma_report.py")
    res = guest_report("perftest").perftest_result(out)
    assert res and res["usec_per_xfer"] > 0, out
    row = f"bw-ofi-tcp-{'send' if not op else 'write-imm'}"
    figure = report.perftest_figure(row, {"result_us": res})
    assert figure == pytest.approx(1e6 / res["usec_per_xfer"])


def test_engine_runs_on_the_fabtests_libfabric(fabtests, engine):
    """The guest's rows run fabmeter's engine (built against Debian's
    libfabric 1.17 headers) on this library: it loads and says so."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(FT / "lib")}
    serve = subprocess.Popen([str(engine), "serve", "--bind", "127.0.0.1", "--port", "0", "--once"], env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = json.loads(serve.stdout.readline())["port"]
        r = subprocess.run([str(engine), "run", "bw", "--server", f"127.0.0.1:{port}", "-t", "ofi", "--provider", "tcp",
                            "--ep", "msg", "--op", "write-imm", "-s", "1K", "-n", "2000", "--warmup", "100"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        lines = json_lines(r.stdout)
        (transport,) = [x for x in lines if x.get("type") == "transport"]
        version = (FT / "version").read_text().split()[1]  # "2.1.0"
        assert transport["granted"]["fi_version"] == ".".join(version.split(".")[:2]), transport["granted"]
        (point,) = [x for x in lines if x.get("type") == "point"]
        assert not point["partial"] and point["lost"] == 0 and point["msg_rate"] > 0
        assert lines[-1] == {"type": "end", "status": "ok"}
    finally:
        stop_serve(serve)
