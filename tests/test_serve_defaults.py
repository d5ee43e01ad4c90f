"""serve's defaults and bounds live in the engine (ServerOptions and its
constants), which exports them (`fabmeter-engine options`'s "serve") and
writes them into its --help; `fabmeter serve --help` (so docs/cli.md's
table, generated from it) and docs/cli.md say the same numbers."""

from __future__ import annotations

import subprocess

from conftest import REPO, engine_info
from fabmeter import serve


def expected(limits: dict) -> dict[str, list[str]]:
    """Each serve option -> what its help must say, from the engine's numbers."""
    return {
        "max-sessions": [f"(1 .. {limits['max_sessions_max']})",
                         f"(default: {limits['max_sessions']})"],
        "handshake-timeout-ms": [f"({limits['handshake_timeout_ms_min']} .. {limits['handshake_timeout_ms_max']})",
                                 f"(default: {limits['handshake_timeout_ms']})"],
        "max-duration": [f"(default: {limits['max_duration']};"],
    }


def test_serve_help_says_the_engines_defaults(engine):
    limits = engine_info()["serve"]
    helps = {o.name: o.help_text() for o in serve.OPTIONS}
    wrong = {name: says for name, says in expected(limits).items() if not all(s in helps[name] for s in says)}
    assert not wrong, f"fabmeter serve's help differs from the engine's ServerOptions: {wrong} vs {limits}"


def test_engine_help_fills_in_its_own_numbers(engine):
    text = " ".join(subprocess.run([str(engine), "--help"], capture_output=True, text=True, check=True).stdout.split())
    limits = engine_info()["serve"]
    assert "{" not in text.split("serve runs each session")[1].split("--token-file")[0]
    assert (f"(at most --max-sessions, 1 .. {limits['max_sessions_max']}, default {limits['max_sessions']};"
            in text)
    assert (f"--handshake-timeout-ms MS ({limits['handshake_timeout_ms_min']} .. "
            f"{limits['handshake_timeout_ms_max']}, default {limits['handshake_timeout_ms']})" in text)
    assert f"--max-duration (default {limits['max_duration']} s;" in text


def test_cli_md_states_the_engines_port(engine):
    text = " ".join((REPO / "docs" / "cli.md").read_text().split())
    port = engine_info()["default_port"]
    assert f"port {port}" in text and "bind 127.0.0.1" in text
