"""Text from a results file reaches the terminal with its control characters
shown escaped (python/fabmeter/terminal.py): run.json strings holding ESC
sequences (clear the screen, set the window title), CR and BEL, read by
`compare` and printed in the peers' table, arrive as `\\x1b`, `\\x0d`,
`\\x07`; printable text of any script stays as is."""

from __future__ import annotations

import json
import re

from fabmeter import terminal

HOSTILE = "\x1b[2J\x1b]0;owned\x07\r\x9b31m"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")     # every control character but newline and tab


def test_shown_escapes_controls_and_keeps_text():
    assert terminal.shown("a" + HOSTILE + "b") == "a\\x1b[2J\\x1b]0;owned\\x07\\x0d\\x9b31mb"
    assert terminal.shown("p50 µs, 日本, café\u202e") == "p50 µs, 日本, café\\u202e"
    assert terminal.shown("two\nlines\t") == "two\\x0alines\\x09"
    assert terminal.shown_lines("two\nlines\t\x1b") == "two\nlines\t\\x1b"


def hostile(doc):
    """Every string of `doc` with HOSTILE inside it (keys kept)."""
    if isinstance(doc, dict):
        return {k: hostile(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [hostile(v) for v in doc]
    return doc[:1] + HOSTILE + doc[1:] if isinstance(doc, str) else doc


def test_compare_prints_no_raw_control_character(fm, tmp_path):
    for side in ("base", "new"):
        for i in range(3):
            r = fm.run("lat", "-t", "udp", "-n", "300", "--warmup", "10", "--out", tmp_path / side / f"r{i}")
            assert r.returncode == 0, r.stderr
            path = tmp_path / side / f"r{i}" / "run.json"
            doc = json.loads(path.read_text())
            # Every string but the fields points are matched and read by, which must stay what they are.
            for point in doc["points"]:
                for key, value in point.items():
                    if isinstance(value, str) and key not in ("experiment",):
                        point[key] = hostile(value)
            doc["environment"] = hostile(doc.get("environment"))
            doc["command"] = hostile(doc.get("command"))
            path.write_text(json.dumps(doc))
    (tmp_path / "new" / "broken").mkdir()
    (tmp_path / "new" / "broken" / "run.json").write_text("{\"x" + HOSTILE + "\": ")     # its error names it
    r = fm.run("compare", tmp_path / "base", tmp_path / "new")
    assert r.returncode == 0, r.stderr
    assert "\\x1b[2J" in r.stdout + r.stderr, (r.stdout, r.stderr)      # the hostile strings were printed...
    assert not RAW.search(r.stdout) and not RAW.search(r.stderr), (r.stdout, r.stderr)     # ...escaped
    j = fm.run("compare", tmp_path / "base", tmp_path / "new", "--json")
    assert j.returncode == 0 and not RAW.search(j.stdout), j.stdout


def test_the_peers_table_prints_no_raw_control_character():
    from types import SimpleNamespace

    from fabmeter.peers import command

    point = {"type": "point", "tool": "sockperf" + HOSTILE, "variant": "v" + HOSTILE, "experiment": "lat",
             "transport": "udp" + HOSTILE, "poll": "busy" + HOSTILE, "size": 32, "latency_figure": "RTT/2" + HOSTILE,
             "latency_ns": {"p50": 1000.0, "p99": 2000.0, "mean": 1100.0}, "statistic_note": "a note" + HOSTILE}
    text = command.table([point], SimpleNamespace(server="a" + HOSTILE, cpus=None))
    assert "\\x1b" in text and not RAW.search(text), text
