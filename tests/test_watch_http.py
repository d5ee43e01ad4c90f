"""`fabmeter watch`'s metrics endpoint under a flood: a thousand idle
connections cost it no thread and little memory, scrapes keep being answered,
a request head over the limit is refused, an idle connection is closed after
the timeout, and the watch runs on to its --for (also when its interval is
longer)."""

from __future__ import annotations

import resource
import socket
import time
import urllib.request

import pytest

from conftest import free_port, proc_status, start_serves, stop_serves, wait_until

pytest.importorskip("prometheus_client", reason="scripts/install-deps.sh installs it (pyproject)")
from fabmeter.watch import metrics  # noqa: E402

FLOOD = 1000
MAX_THREADS = 16                # the watch's own: main, metrics, a sweep's pair and check threads
MAX_RSS_GROWTH_KB = 10 * 1024   # a thread per connection costs ~25 MiB for the flood
FOR_S = 30


def scrape_s(port: int) -> float:
    """Seconds a whole scrape of /metrics took."""
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert b"fabmeter_sweeps_total" in r.read()
    return time.monotonic() - t0


def test_a_flood_of_idle_connections(fm, token_file):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FLOOD + 200:      # this process' own (the watch keeps its default)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, FLOOD + 200), hard))
    hosts = ["127.0.0.1", "127.0.0.2"]
    port = free_port()
    serves = start_serves(fm, hosts, port, token_file)
    metrics_port = free_port()
    watch = fm.popen("watch", "--pair", hosts[0], hosts[1], "--serve-port", port, "-t", "tcp", "--experiment",
                     "lat", "-n", "100", "--warmup", "10", "--token-file", token_file, "--interval", "0.5",
                     "--round-lead", "0", "--metrics-port", metrics_port, "--for", FOR_S)
    began = time.monotonic()
    flood: list[socket.socket] = []
    try:
        assert wait_until(lambda: _answers(metrics_port), 30), "no metrics"
        before = proc_status(watch.pid, "Threads", "VmRSS")
        for _ in range(FLOOD):            # a burst: every connect started at once, none sends a byte
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", metrics_port))
            flood.append(s)
        time.sleep(2)                       # the handshakes done, the accepted ones held
        took = scrape_s(metrics_port)
        during = proc_status(watch.pid, "Threads", "VmRSS")
        print(f"watch under a burst of {FLOOD} idle connections: Threads {before['Threads']} -> "
              f"{during['Threads']}, VmRSS {before['VmRSS']} -> {during['VmRSS']} kB, a scrape in {took:.3f} s")
        assert took < 1.0, took
        assert during["Threads"] <= MAX_THREADS, (before, during)
        assert during["VmRSS"] - before["VmRSS"] <= MAX_RSS_GROWTH_KB, (before, during)
        # A request head over the limit: 431, and the connection closed.
        with socket.create_connection(("127.0.0.1", metrics_port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * metrics.MAX_HEAD_BYTES + b"\r\n\r\n")
            assert s.recv(64).startswith(b"HTTP/1.1 431 "), "no 431"
        # A connection that sends nothing is closed after the idle timeout.
        with socket.create_connection(("127.0.0.1", metrics_port), timeout=metrics.IDLE_TIMEOUT_S + 10) as s:
            t0 = time.monotonic()
            assert s.recv(1) == b""
            idle = time.monotonic() - t0
        assert metrics.IDLE_TIMEOUT_S - 0.5 <= idle <= metrics.IDLE_TIMEOUT_S + 5, idle
        assert scrape_s(metrics_port) < 1.0
        assert watch.poll() is None, watch.communicate()
        _, err = watch.communicate(timeout=FOR_S + 60)
        ran = time.monotonic() - began
    finally:
        for s in flood:
            s.close()
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
        stop_serves(serves)
    assert watch.returncode == 0, err
    assert ran >= FOR_S - 1, f"ended after {ran:.1f} s of --for {FOR_S}: {err}"


def test_for_runs_its_whole_time_with_a_longer_interval(fm, token_file):
    """--for 8 under the default --interval (60 s): one sweep, then the metrics are served until the 8 s
    have passed, then exit 0."""
    hosts = ["127.0.0.1", "127.0.0.2"]
    port = free_port()
    serves = start_serves(fm, hosts, port, token_file)
    metrics_port = free_port()
    began = time.monotonic()
    watch = fm.popen("watch", "--pair", hosts[0], hosts[1], "--serve-port", port, "-t", "tcp", "--experiment",
                     "lat", "-n", "100", "--warmup", "10", "--token-file", token_file, "--round-lead", "0",
                     "--metrics-port", metrics_port, "--for", "8")
    try:
        _, err = watch.communicate(timeout=60)
        ran = time.monotonic() - began
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
        stop_serves(serves)
    assert watch.returncode == 0, err
    assert "sweep 1: 1 of 1 pairs ok" in err, err
    assert ran >= 8, f"ended after {ran:.1f} s of --for 8: {err}"


def _answers(port: int) -> bool:
    try:
        scrape_s(port)
        return True
    except OSError:
        return False
