"""A suite row planned beyond serve's --max-duration is refused before
anything runs: `suite --dry-run` prints each point's planned time beside a
default serve's limit and exits 2 where one is over; a run starts nothing."""

from __future__ import annotations

import re

from conftest import REPO, engine_info

DEFAULT_LIMIT = "serve's --max-duration 3600 s"


def _lines(stdout: str, pattern: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if re.search(pattern, ln)]


def test_dry_run_prints_each_points_plan_beside_the_limit(fm, tmp_path):
    f = tmp_path / "short.toml"
    f.write_text('name = "short"\n[[matrix]]\nexperiment = "oneway"\ntransport = "tcp"\nbursts = 2\n'
                 'burst_size = 100\ngap_us = 1000\n')
    r = fm.run("suite", f, "--dry-run", "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    (line,) = _lines(r.stdout, r"^oneway-tcp")
    # 1000 warm-up and 200 measured messages 1 ms apart: at least 1.2 s, as serve computes it.
    planned = float(re.search(r"planned >= ([0-9.e+]+) s", line).group(1))
    assert 1.2 <= planned < 2 and DEFAULT_LIMIT in line and "[run]" in line, line


def test_a_one_second_gap_oneway_row_is_refused_with_both_numbers(fm, tmp_path):
    """The thesis' intermediate-pause rows (thesis-oneway.toml: 8000 messages, 1 s apart) over tcp."""
    f = tmp_path / "gap.toml"
    f.write_text('name = "gap"\n[[matrix]]\nexperiment = "oneway"\ntransport = "tcp"\nbursts = 1\n'
                 'burst_size = 8000\ngap_us = 1000000\nwarmup = 10\n')
    r = fm.run("suite", f, "--dry-run", "--out", tmp_path / "out")
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = _lines(r.stdout, r"^oneway-tcp")
    assert "[refused: planned at least 80" in line and "over a default serve's --max-duration of 3600 s" in line, line
    assert DEFAULT_LIMIT in line and "the suite would refuse to start" in r.stdout
    # A run refuses before it starts anything.
    r = fm.run("suite", f, "--out", tmp_path / "run")
    assert r.returncode == 2 and "oneway-tcp" in r.stderr and "3600 s" in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()


def test_the_thesis_stream_rows_are_refused_by_dry_run(fm, tmp_path):
    """suites/thesis-stream.toml as shipped: a row's 250 000 samples at each of six rates and seven sample
    sizes plan far beyond an hour (shm is always built)."""
    r = fm.run("suite", REPO / "suites" / "thesis-stream.toml", "--dry-run", "--out", tmp_path / "out")
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = _lines(r.stdout, r"^stream-shm-busy-v1\+2\+4")
    planned = float(re.search(r"planned at least ([0-9.e+]+) s", line).group(1))
    assert planned > 3600 and DEFAULT_LIMIT in line, line


def test_the_thesis_oneway_gap_rows_are_refused_by_dry_run(fm, tmp_path):
    r = fm.run("suite", REPO / "suites" / "thesis-oneway.toml", "--dry-run", "--out", tmp_path / "out")
    gap = _lines(r.stdout, r"gap-us1000000")
    if "verbs" not in engine_info().get("transports", []):
        assert gap and all("[skip:" in ln for ln in gap), r.stdout
        return
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(gap) == 6 and all("[refused: planned at least 80" in ln for ln in gap), gap
