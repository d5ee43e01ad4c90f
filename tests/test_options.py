"""The typed option model (options.py): argparse, suite values and the
engine command line all come from `fabmeter-engine options`.

Checked against the real engine's export, and against a copy of it with an
option of a kind the engine does not have yet: what the CLI and suites
accept must follow the export, not a list kept in Python.
"""

from __future__ import annotations

import argparse
import json
import subprocess

import pytest

from conftest import one_line_error
from fabmeter import cli
from fabmeter.cpus import parse_cpus
from fabmeter.options import Options, parse_count, parse_size


@pytest.fixture(scope="module")
def info(engine) -> dict:
    return json.loads(subprocess.run([str(engine), "options"], capture_output=True, text=True, check=True).stdout)


def test_parse_size_follows_the_engine():
    assert parse_size("32") == 32 and parse_size("64K") == 65536 and parse_size("1M") == 1 << 20
    assert parse_size("2g") == 2 << 30 and parse_size("0") == 0
    for bad in ("-1", "x", "1.5K", "64KiB", ""):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_the_serve_port_is_the_engines(info):
    from fabmeter.mesh import run as mesh_run
    assert mesh_run.DEFAULT_SERVE_PORT == info["default_port"]


def test_every_exported_type_is_typed(info):
    table = Options(info)
    kinds = {o.type for o in table}
    assert {"size", "count", "duration", "choice", "list", "flag", "text"} <= kinds, kinds
    assert table["size"].parse("64K") == 65536
    assert table["iters"].parse("auto") == "auto" and table["iters"].parse("1K") == 1000
    assert table["duration"].parse("1.5") == 1.5
    assert table["rate"].parse("1000,10K") == [1000, 10000]
    assert table["all"].typed(True) is True
    with pytest.raises(ValueError):
        table["poll"].parse("spin")
    # The engine command line from typed values, in the table's order.
    assert table.engine_argv({"size": 32768, "transport": "tcp", "all": True, "rate": [100, 1000]}) == \
        ["--transport", "tcp", "--size", "32K", "--all", "--rate", "100,1000"]
    assert table["size"].text(1000) == "1000" and table["max_size"].text(8 << 30) == "8G"
    # Defaults are typed as the engine reports them in params.
    assert isinstance(table["size"].default, int) and table["all"].default is False
    assert table["transport"].choices == tuple(info["transports"])


def _with_new_option(info: dict) -> dict:
    """The export plus an option of a new kind of choice, as a future engine might add."""
    row = {"name": "pacing", "key": "pacing", "short": "", "metavar": "HOW", "group": "bw", "type": "choice",
           "unit": "", "values": ["none", "token-bucket", "spin"], "auto": False, "scope": "bw",
           "transports": "all", "help": "how to pace sends", "default": "none"}
    return dict(info, options=[*info["options"], row])


def test_argparse_types_and_choices_come_from_the_export(info, capsys):
    parser = cli.build_parser(_with_new_option(info))
    with pytest.raises(SystemExit):
        parser.parse_args(["bw", "--help"])
    text = capsys.readouterr().out
    assert "--pacing HOW" in text and "one of: none, token-bucket, spin" in text, text
    ns = parser.parse_args(["bw", "--pacing", "spin", "-s", "64K", "--duration", "0.5"])
    assert (ns.pacing, ns.size, ns.duration) == ("spin", 65536, 0.5)   # typed, not strings
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["bw", "--pacing", "fast"])
    assert e.value.code == 2
    assert "expected none|token-bucket|spin, got 'fast'" in capsys.readouterr().err
    with pytest.raises(SystemExit):                 # scoped to bw: lat does not have it
        parser.parse_args(["lat", "--pacing", "spin"])


def test_cli_refuses_a_wrongly_typed_value_before_the_engine(fm):
    r = fm.run("lat", "-s", "12X")
    assert r.returncode == 2
    assert "-s/--size" in one_line_error(r.stderr) and "'12X'" in one_line_error(r.stderr)
    r = fm.run("lat", "--poll", "spin")
    assert r.returncode == 2 and "expected busy|event" in one_line_error(r.stderr)


def test_from_argv_is_the_cli_parser(info):
    table = Options(info)
    assert table.from_argv("lat", ["-t", "ofi", "--provider", "tcp", "-s", "1K"]) == \
        {"transport": "ofi", "provider": "tcp", "size": 1024}
    with pytest.raises(ValueError):
        table.from_argv("lat", ["--bursts", "3"])     # oneway only
    assert isinstance(cli.build_parser(info), argparse.ArgumentParser)


def _expected_params(info: dict, experiment: str, given: dict) -> dict:
    return {"experiment": experiment, **Options(info).defaults(), **given}


def test_cli_run_json_config_is_the_engines_params(fm, tmp_path, info):
    out = tmp_path / "out"
    r = fm.run("lat", "-t", "shm", "-s", "1K", "-n", "200", "--warmup", "10", "--out", out)
    assert r.returncode == 0, r.stderr
    config = json.loads((out / "run.json").read_text())["config"]
    assert set(config) == {"experiment", "mode", "server", "cpus", "engine_version", "params"}, config
    assert config["params"] == _expected_params(info, "lat", {"transport": "shm", "size": 1024, "iters": 200,
                                                              "warmup": 10})


def test_demo_run_json_config_is_the_engines_params(tmp_path, info, engine, monkeypatch):
    from fabmeter import demo
    monkeypatch.setenv("FABMETER_ENGINE", str(engine))
    res = demo._one(tmp_path, "tcp", ["-t", "tcp"], "event", "lat", "lat", {"size": 32, "iters": 200},
                    parse_cpus(None))
    assert res.exit_code == 0, res.message
    doc = json.loads((tmp_path / "tcp-event-lat" / "run.json").read_text())
    assert "options" not in doc["config"]
    # --poll sets both queues' sides, recorded as the engine resolved them
    assert doc["config"]["params"] == _expected_params(info, "lat", {"transport": "tcp", "poll": "event",
                                                                     "poll_recv": "event", "poll_send": "event",
                                                                     "size": 32, "iters": 200})
    assert doc["command"][:2] == ["fabmeter", "lat"] and "--poll" in doc["command"]
