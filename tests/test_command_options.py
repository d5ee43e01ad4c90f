"""Every command's own options are data (command_options.py): its --help, the suite keys where a suite takes them
and its table in docs/cli.md all come from the one list each command keeps; cli.py is the table of commands."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess

import pytest

from conftest import REPO, script_module
from fabmeter import cli, experiment_command
from fabmeter.mesh import command as mesh_command
from fabmeter.peers import command as peers_command
from fabmeter.suite import peer as suite_peer
from fabmeter.suite.ids import PY_KEYS
from fabmeter.suite.read import MESH_KEYS, RUN_KEYS

COMMANDS = {c.name: c for c in cli.COMMANDS}


@pytest.fixture(scope="module")
def info(engine) -> dict:
    return json.loads(subprocess.run([str(engine), "options"], capture_output=True, text=True, check=True).stdout)


def subparser(info: dict, command: str) -> argparse.ArgumentParser:
    parser = cli.build_parser(info)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def flat(text: str) -> str:
    return " ".join(text.split())


def parsers(info: dict, command: str) -> list[tuple[argparse.ArgumentParser, tuple]]:
    """The command's parsers (every experiment's for EXPERIMENT), each with the options it should have."""
    if command == "EXPERIMENT":
        return [(subparser(info, exp), experiment_command.options_of(exp)) for exp in info["experiments"]]
    return [(subparser(info, command), COMMANDS[command].module.OPTIONS)]


def test_every_command_is_one_module_of_the_one_shape(info):
    parser = cli.build_parser(info)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        entry = command.get_default("command_entry")
        assert entry in cli.COMMANDS, name
        assert all(hasattr(entry.module, a) for a in ("OPTIONS", "add_parser", "main")), name
    assert {e.name for e in cli.COMMANDS} == {c.get_default("command_entry").name for c in sub.choices.values()}
    assert set(info["experiments"]) <= set(sub.choices)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_parser_and_its_help_are_the_commands_options(info, command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")   # one line an option: the help as written
    for parser, options in parsers(info, command):
        _parser_is(parser, options)


def _parser_is(parser: argparse.ArgumentParser, options: tuple) -> None:
    # The engine's options (options.py) and --help are those whose default is SUPPRESS: absent unless given.
    own = [a for a in parser._actions if a.default is not argparse.SUPPRESS]
    assert [a.option_strings for a in own] == [
        [] if o.positional else [f"-{o.short}"] * bool(o.short) + [f"--{o.name}"] for o in options], \
        "an option not from the data"
    help_text = flat(parser.format_help())
    for o, action in zip(options, own):
        assert action.dest == o.key and action.help == o.help, o.name
        assert action.default == (False if o.flag else o.default), o.name
        assert tuple(action.choices or ()) == o.choices, o.name
        assert flat(o.help_text()) in help_text, o.name
        # A default is written once: the help states it from the data, never as a copy.
        assert ("%(default" in o.help) == (o.default is not None and not o.flag), o.name


def test_an_experiments_own_options_are_its_own():
    names = lambda exp: [o.name for o in experiment_command.options_of(exp)]
    assert "search" in names("load") and "search" not in names("lat")
    assert "slo" in names("lat") and "slo" not in names("bw")
    assert "via-hop" in names("oneway") and "via-hop" not in names("check")
    assert names("bw") == [o.name for o in experiment_command.OPTIONS
                           if o.name not in ("slo", "search", "via-hop", "hop-rounds", "hop-transport")]


def test_a_mesh_points_suite_keys_are_meshs_options():
    options = {o.name: o for o in mesh_command.OPTIONS}
    for key, o in MESH_KEYS.items():
        assert key in (o.key, f"mesh_{o.key}")
        if key == "launch":     # a suite starts its ranks itself or over ssh
            assert o == dataclasses.replace(options["launch"], choices=o.choices)
            assert set(o.choices) < set(options["launch"].choices)
        else:
            assert o is options[o.name], key


def test_a_points_run_keys_are_the_experiment_commands_options():
    options = {o.key: o for o in experiment_command.OPTIONS}
    assert list(RUN_KEYS) == ["cpus", "server", "slo", "via_hop", "hop_transport"] and \
        all(o is options[k] for k, o in RUN_KEYS.items())
    assert set(PY_KEYS) == {"experiment", "cpus", "server", "via_hop", "hop_transport"}  # experiment: the command


def test_a_peer_points_suite_keys_are_peers_options():
    options = {o.key: o for o in peers_command.OPTIONS}
    assert set(suite_peer.PEER_KEYS) < set(options) and all(o is options[k] for k, o in suite_peer.PEER_KEYS.items())
    assert set(suite_peer.KEYS) == {"tool", "experiment", "transport", *suite_peer.PEER_KEYS}
    # A point's defaults are the command's (size: the case's own, --size or --bw-size).
    assert {k: v for k, v in suite_peer.DEFAULTS.items() if k != "size"} == \
        {k: options[k].default for k in suite_peer.DEFAULTS if k != "size"}


def test_the_docs_tables_are_the_commands_options(info, monkeypatch):
    gen = script_module("gen_cli_doc", "scripts/gen-cli-doc.py")
    text = (REPO / "docs" / "cli.md").read_text()
    assert gen.generate(text, info) == text, "docs/cli.md is stale: run .venv/bin/python scripts/gen-cli-doc.py"
    for command, entry in COMMANDS.items():
        options = entry.module.OPTIONS
        if not options:
            continue
        block = text.split(gen.command_begin(command), 1)[1].split(gen.END, 1)[0]
        rows = [r for r in block.splitlines() if r.startswith("| `")]
        assert len(rows) == len(options), command
        for o, row in zip(options, rows):
            assert row.startswith(f"| {gen.fmt_usage(o)} |") and row.endswith(f" | {gen.cell(o.help_text())} |"), row
    assert re.search(r"^\| `--experiment` \| `mesh_experiment` \|", text, flags=re.M)
    # A changed or a new option changes the document.
    changed = dataclasses.replace(mesh_command.OPTIONS[0], help=mesh_command.OPTIONS[0].help + " (changed)")
    new = dataclasses.replace(mesh_command.SERVE_PORT, name="slot-knob", help="a new knob (default: %(default)s)")
    monkeypatch.setattr(mesh_command, "OPTIONS", (changed, *mesh_command.OPTIONS[1:], new))
    regenerated = gen.generate(text, info)
    assert "Slurm: its node list (changed) |" in regenerated and "| `--slot-knob N` |" in regenerated


def test_peers_short_spellings_and_sizes_parse_as_the_data_says(info):
    parser = subparser(info, "peers")
    ns = parser.parse_args(["-s", "4K", "-n", "7"])
    assert (ns.size, ns.iters, ns.bw_size) == (4096, 7, 64 * 1024)   # string defaults go through the type too
    assert "| `-s`, `--size N` | `size` | size |" in (REPO / "docs" / "cli.md").read_text()
    with pytest.raises(SystemExit):
        parser.parse_args(["--size", "0"])
