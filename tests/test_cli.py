"""The CLI's own behaviour: options built from the engine's table, help,
and the analysis helpers' agreement with numpy."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ENGINE, one_line_error
from fabmeter import analysis, cli, envinfo


def test_engine_options_contract(engine):
    info = json.loads(subprocess.run([engine, "options"], capture_output=True, text=True, check=True).stdout)
    assert {"lat", "oneway", "bw"} <= set(info["experiments"])
    assert set(info["transports"]) >= {"shm", "tcp", "udp"}
    names = {o["name"] for o in info["options"]}
    for n in ("transport", "poll", "size", "all", "max-size", "iters", "duration", "warmup", "bursts",
              "burst-size", "pause-us", "threshold-us", "bidir", "tx-depth", "rq-depth", "loss-timeout-ms",
              "clock", "timeout-ms"):
        assert n in names, n
    for o in info["options"]:
        assert {"name", "key", "short", "metavar", "scope", "help", "default"} <= set(o), o
        assert o["key"] == o["name"].replace("-", "_")


def test_subcommand_options_come_from_engine(fm):
    lat = fm.run("lat", "--help")
    bw = fm.run("bw", "--help")
    oneway = fm.run("oneway", "--help")
    assert lat.returncode == bw.returncode == oneway.returncode == 0
    assert "--tx-depth" in bw.stdout and "--tx-depth" not in lat.stdout
    assert "--bursts" in oneway.stdout and "--bursts" not in lat.stdout
    for text in (lat.stdout, bw.stdout, oneway.stdout):
        for opt in ("--transport", "--poll", "--cpus", "--json", "--out", "--server"):
            assert opt in text, opt


def test_version(fm):
    r = fm.run("--version")
    assert r.returncode == 0 and "fabmeter 0.1.0" in r.stdout


# `fabmeter ARGS` in-process, then the modules of HEAVY it imported, as its last line: the heavy libraries and
# the commands' own modules (cli.COMMANDS).
HEAVY = ("numpy", "matplotlib", "hdrh", *(c.module_name for c in cli.COMMANDS))
IMPORTS_OF = ("import atexit, runpy, sys\n"
              f"atexit.register(lambda: print('imported:', *[m for m in {HEAVY!r} if m in sys.modules]))\n"
              "sys.argv = ['fabmeter', *sys.argv[1:]]\n"
              "runpy.run_module('fabmeter', run_name='__main__')\n")


def test_start_up_and_a_run_import_only_what_they_use(fm, tmp_path):
    """Every command and every run starts the CLI (make test starts it thousands of times): numpy, matplotlib
    and hdrhistogram are imported by what computes, draws or reads with them, never to start or to run an
    experiment; a command imports its own module, not the other commands'; compare still imports what it
    judges with; --help imports every command's to list them."""
    every = [c.module_name for c in cli.COMMANDS]
    for args, want in ((["--version"], every), (["lat", "-t", "shm", "-n", "200", "--out", tmp_path / "a"],
                                                ["fabmeter.experiment_command"]),
                       (["compare", tmp_path / "a", tmp_path / "a"], ["numpy", "fabmeter.compare"])):
        r = subprocess.run([sys.executable, "-c", IMPORTS_OF, *map(str, args)], env=fm.env, capture_output=True,
                           text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[-1].split()[1:] == want, (args, r.stdout)


def test_summarize_matches_numpy():
    rng = np.random.default_rng(7)
    a = rng.lognormal(5, 1, 10001)
    s = analysis.summarize(a)
    assert s["p50"] == np.percentile(a, 50) and s["p999"] == np.percentile(a, 99.9)
    assert s["min"] <= s["p50"] <= s["p90"] <= s["p99"] <= s["p999"] <= s["max"]
    assert analysis.median([3.0, 1.0, 2.0]) == 2.0


def test_format_table_aligns():
    t = analysis.format_table(["name", "value ns"], [["a", 1.5], ["long name", 12345.0]])
    lines = t.splitlines()
    assert len(lines) == 4 and len({len(ln) for ln in lines}) == 1
    assert "12,345" in t and "1.5" in t


def test_point_block_names_warmup_losses():
    point = {"experiment": "oneway", "transport": "udp", "size": 32, "iterations": 990,
             "latency_ns": {"p50": 1000.0}, "lost": 10, "warmup_lost": 3}
    text = analysis.point_block(point)
    assert "lost messages" in text and "lost during warm-up (not in the figures)" in text
    assert "lost during warm-up" not in analysis.point_block({**point, "warmup_lost": 0})


def test_envinfo_collects():
    env = envinfo.collect()
    for key in ("cpu_model", "kernel", "governors", "cpuidle", "isolated_cpus", "tsc_flags", "libraries"):
        assert key in env
    if Path("/sys/devices/system/cpu/cpuidle/current_driver").exists():
        assert env["cpuidle"]["driver"]
    assert env["libraries"]["numpy"] == np.__version__


def test_sweep_progress_counts_the_points_the_engine_plans(capsys):
    """'point i/N': N is the start line's `points`, not a count recomputed from max_size."""
    from fabmeter import experiment_command
    progress = experiment_command._Progress(enabled=True)
    progress.start({"type": "start", "points": 3, "params": {"transport": "tcp", "max_size": 4 << 20}})
    progress.point({"size": 1})
    assert "point 1/3: 1 B" in capsys.readouterr().err


def _out_mistakes(tmp_path: Path) -> dict[str, Path]:
    """--out values no folder can be made at: each is the user's mistake (exit 2), not a crash."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return {"a file": a_file, "under a file": a_file / "sub", "in /proc": Path("/proc/x"),
            "a 300-character name": tmp_path / ("n" * 300)}


@pytest.mark.parametrize("mistake", ["a file", "under a file", "in /proc", "a 300-character name"])
def test_out_mistake_is_one_line_exit_2(fm, tmp_path, mistake):
    out = _out_mistakes(tmp_path)[mistake]
    r = fm.run("lat", "-t", "shm", "-n", "100", "--out", out)
    assert r.returncode == 2, r.stderr
    assert one_line_error(r.stderr).startswith(f"fabmeter: error: --out {out}: ")


def test_every_command_prepares_its_out_folder_alike(fm, tmp_path):
    out = _out_mistakes(tmp_path)["under a file"]
    suite = tmp_path / "s.toml"
    suite.write_text('[[matrix]]\nexperiment = "lat"\ntransport = "shm"\n')
    (tmp_path / "results" / "r").mkdir(parents=True)
    (tmp_path / "results" / "r" / "peers.json").write_text('{"points": []}')
    commands = {"suite": ["suite", suite, "--out", out], "demo": ["demo", "--out", out],
                "bench": ["bench", "--out", out], "mesh": ["mesh", "--launch", "local", "--ranks", "2", "-t", "udp",
                                                          "--out", out],
                "peers": ["peers", "--tools", "fabmeter", "--out", out],
                "report": ["report", tmp_path / "results", "-o", out / "report.html"],
                "oneway": ["oneway", "-t", "shm", "--out", out]}
    for name, argv in commands.items():
        r = fm.run(*argv)
        assert r.returncode == 2, (name, r.stderr)
        assert f"{out}: Not a directory" in one_line_error(r.stderr), name
    r = fm.run("report", tmp_path / "results", "-o", tmp_path)   # a folder where the HTML file should go
    assert r.returncode == 2 and "is a folder" in one_line_error(r.stderr), r.stderr


def test_gap_between_messages_and_unpinned_runs(fm, tmp_path):
    """--gap-us spaces consecutive messages (lat and oneway); --cpus none runs unpinned; run.json says both."""
    for exp, count in (("oneway", ["--bursts", "1", "--burst-size", "20"]), ("lat", ["-n", "20"])):
        out = tmp_path / exp
        t0 = time.monotonic()
        r = fm.run(exp, "-t", "shm", *count, "--warmup", "0", "--gap-us", "10000", "--cpus", "none", "--out", out)
        assert r.returncode == 0, r.stderr
        assert time.monotonic() - t0 >= 0.19                 # 19 gaps of 10 ms
        doc = json.loads((out / "run.json").read_text())
        assert doc["config"]["params"]["gap_us"] == 10000 and doc["config"]["cpus"] is None
