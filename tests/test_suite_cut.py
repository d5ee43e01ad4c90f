"""A shipped suite cut down from the command line (--set, --only), --token-file for its serve, and a line per
point with its headline figure."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from conftest import REPO
from fabmeter.suite import cut


def _plan(r) -> list[str]:
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if "  [" in line]


def test_set_and_only_cut_a_shipped_suite(fm, tmp_path):
    r = fm.run("suite", REPO / "suites" / "homa-load.toml", "--set", "count=100", "--only", "tcp", "--dry-run",
               "--out", tmp_path / "out")
    plan = _plan(r)
    assert len(plan) == 5, r.stdout
    for line in plan:
        pid, _, command = line.split("  ", 2)
        assert "-tcp-" in pid and "--transport tcp" in command and "--count 100 " in command, line
    assert "--count 20000" not in r.stdout and "shm" not in r.stdout


def test_set_replaces_a_matrix_tables_own_value_and_only_takes_shell_patterns(fm, tmp_path):
    r = fm.run("suite", REPO / "suites" / "quick.toml", "--set", "iters=100", "--set", "poll=event",
               "--only", "lat-*", "--only", "bw", "--dry-run", "--out", tmp_path / "out")
    ids = [line.split()[0] for line in _plan(r)]
    assert ids[:2] == ["lat-shm-event", "lat-tcp-event"] and ids[2].startswith("bw-shm-event"), ids
    assert len(ids) == 3 and all("--iters 100 " in line for line in _plan(r)), r.stdout


@pytest.mark.parametrize("args, words", [
    (("--set", "cout=100"), "--set cout: unknown key 'cout' (did you mean 'count'?)"),
    (("--set", "iters=lots"), "--set iters=lots: "),
    (("--set", "iters"), "--set iters: expected KEY=VALUE"),
    (("--set", "tool=sockperf"), "--set tool: not a key --set can change"),
    (("--set", "workload=w1"), "--set workload: applies to none of the points (only to experiments"),
    (("--only", "rdma"), "--only rdma: no point matches (the points: lat-shm-busy"),
])
def test_a_bad_cut_is_a_usage_error_naming_it(fm, tmp_path, args, words):
    r = fm.run("suite", REPO / "suites" / "quick.toml", *args, "--dry-run", "--out", tmp_path / "out")
    assert r.returncode == 2 and words in r.stderr, r.stderr


def test_only_matches_whole_words():
    assert cut.matches("tcp", "lat-tcp-busy") and cut.matches("lat-tcp", "lat-tcp-busy")
    assert not cut.matches("tc", "lat-tcp-busy") and not cut.matches("tcp", "lat-mptcp-busy")
    assert cut.matches("lat-*-s32", "lat-shm-busy-s32") and not cut.matches("lat-*", "bw-shm-busy")


def test_token_file_reaches_every_point_and_each_point_prints_its_figure(fm, tmp_path):
    token = tmp_path / "token"
    token.write_text("a-shared-secret-of-the-serves\n")
    os.chmod(token, 0o600)
    fm.env.pop("FABMETER_TOKEN", None)     # the secret only from the file
    server = fm.popen("serve", "--bind", "127.0.0.1", "--port", "0", "--token-file", token)
    try:
        port = json.loads(server.stdout.readline())["port"]
        f = tmp_path / "s.toml"
        f.write_text('name = "tok"\n[defaults]\ntransport = "tcp"\nwarmup = 20\n'
                     '[[matrix]]\nexperiment = "lat"\niters = 200\n')
        r = fm.run("suite", f, "--out", tmp_path / "out", "--server", f"127.0.0.1:{port}", "--token-file", token,
                   timeout=120)
        assert r.returncode == 0, r.stderr
        assert re.search(r"^lat-tcp-busy: ok in \d+s, p50 RTT/2 ns [\d,.]+$", r.stdout, re.M), r.stdout
        no_token = fm.run("suite", f, "--out", tmp_path / "out2", "--server", f"127.0.0.1:{port}", timeout=120)
        assert no_token.returncode != 0
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=20)


def test_token_file_without_a_server_is_refused(fm, tmp_path):
    r = fm.run("suite", REPO / "suites" / "quick.toml", "--token-file", tmp_path / "t", "--dry-run")
    assert r.returncode == 2 and "--token-file goes with --server" in r.stderr, r.stderr
