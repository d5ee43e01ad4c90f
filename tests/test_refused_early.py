"""A run the engine would refuse costs nothing first: no buffer of its size,
no limits measured for it."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import cli_cmd, json_lines, one_line_error

# Runs a command and prints its peak RSS (KiB, the kernel's accounting of its
# process tree) on the last stderr line.
PEAK_RSS = ("import resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:])\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
            "sys.exit(r.returncode)\n")


def test_oversized_message_with_out_is_refused_at_once(fm, tmp_path):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", PEAK_RSS, *cli_cmd("lat", "-t", "shm", "-s", "8G",
                                                                  "--out", str(tmp_path / "d"))],
                       env=fm.measuring_limits().env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    elapsed = time.monotonic() - t0
    *err, peak_kib = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr
    assert "exceeds the transport's maximum" in one_line_error("\n".join(err))
    assert int(peak_kib) < 300 * 1024, f"peak RSS {int(peak_kib) // 1024} MiB before the refusal"
    assert elapsed < 10, f"refused after {elapsed:.1f} s"  # 0.5 s idle; 13 GB were touched before


def test_engine_dry_run_connects_to_nothing(engine):
    ok = subprocess.run([str(engine), "run", "lat", "-t", "tcp", "--server", "127.0.0.1:1", "--dry-run", "-s", "64"],
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and ok.stderr == "", ok
    # Its one line: the run time the plan states, beside a default serve's limit (suite --dry-run prints both).
    (plan,) = json_lines(ok.stdout)
    assert plan["serve_max_duration_s"] == 3600 and 0 < plan["planned_s"] < 1, plan
    bad = subprocess.run([str(engine), "run", "lat", "-t", "shm", "--server", "127.0.0.1:1", "--dry-run", "-s", "8G"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "exceeds the transport's maximum" in bad.stderr, bad
