"""`fabmeter report` of results folders made to attack it: markup in every
string field, mathtext in labels, a .npy header that claims 2^34 values,
sample paths that leave the run's folder, documents of the wrong shape.
The report holds no markup it did not write, reads no file outside the
folder, allocates nothing a header claims, and never ends in a traceback."""

from __future__ import annotations

import base64
import html
import json
import os
import re
import struct
import subprocess
import sys
import time
import zlib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

import report_fixture
from conftest import Fabmeter, cli_env

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
MATH = "$\\undefinedmacro{$"
HOSTILE = [SCRIPT, IMG]
# An HdrHistogram header before 8 MiB of zeros compressed to ~8 KiB: decoded without a bound it would allocate them.
_ZEROS = zlib.compress(bytes(8 << 20))
BOMB = base64.b64encode(struct.pack(">II", 0x1C849304, len(_ZEROS)) + _ZEROS).decode()


def _poison(i: int) -> str:
    return HOSTILE[i % len(HOSTILE)]


class _Tags(HTMLParser):
    """Every element of the page as the browser parses it, and the text of its scripts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


def _assert_no_foreign_markup(text: str) -> None:
    parser = _Tags()
    parser.feed(text)
    for tag, attrs in parser.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)      # no event handler attribute
        if tag == "img":
            assert attrs.get("src", "").startswith("data:image/png;base64,"), attrs
    assert not any("alert(" in s for s in parser.scripts), parser.scripts
    # Every poisoned string is on the page, as text.
    for bad in HOSTILE:
        assert bad.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in text, bad


def _report(root: Path, *extra) -> tuple[subprocess.CompletedProcess, str]:
    r = Fabmeter("report-hostile").run("report", root, *extra, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, r.stderr
    return r, (root / "report.html").read_text()


def _samples(folder: Path, name: str, n: int = 300) -> str:
    np.save(folder / name, np.random.default_rng(1).lognormal(7, 0.3, n))
    return name


def _point(transport: str, poll: str, samples: dict | None = None, **extra) -> dict:
    p = {"type": "point", "experiment": "lat", "transport": transport, "poll": poll, "size": 32, "warmup": 10,
         "partial": False, "iterations": 300, "lost": 0, "latency_kind": "rtt/2",
         "latency_ns": {"p50": 1000.0, "p99": 2000.0, "max": 3000.0}}
    if samples is not None:
        p["samples"] = samples
    p.update(extra)
    return p


def _run(folder: Path, points: list, **doc) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    full = report_fixture._run_doc("lat", {"transport": "tcp", "poll": "busy"}, points)
    full.update(doc)
    (folder / "run.json").write_text(json.dumps(full))


def test_markup_in_every_field_stays_text(tmp_path):
    """run.json, index.json, mesh.json and peers.json with markup in each string the report shows."""
    env = report_fixture.envinfo.collect()
    env.update(hostname=SCRIPT, cpu_model=IMG, kernel={"release": SCRIPT, "version": IMG},
               libraries={SCRIPT: IMG}, governors={"0": SCRIPT}, isolated_cpus=IMG, tsc_flags=[SCRIPT],
               cpuidle={"driver": IMG, "governor": SCRIPT}, engine={"clock_source": SCRIPT, "compiler": IMG})
    folder = tmp_path / IMG   # a folder name is shown too
    folder.mkdir()
    pts = [_point(_poison(i), _poison(i + 1), {"rtt_ns": _samples(folder, f"s{i}.npy")},
                  latency_kind=_poison(i)) for i in range(2)]
    _run(folder, pts, status=SCRIPT, message=IMG, environment=env,
         config={"experiment": SCRIPT, "params": {"transport": IMG, "poll": SCRIPT, "service": IMG, "op": SCRIPT}})
    _run(tmp_path / "failed", [], status=IMG, message=SCRIPT, config={"experiment": IMG})
    # A sample entry that names markup: refused, and the note says so as text.
    _run(tmp_path / "bad-name", [_point("tcp", "busy", {"rtt_ns": SCRIPT})])
    (tmp_path / "index.json").write_text(json.dumps({"suite": SCRIPT, "description": IMG, "status": SCRIPT}))
    peers = tmp_path / "peers"
    peers.mkdir()
    (peers / "peers.json").write_text(json.dumps({"points": [
        {"peer": True, "tool": SCRIPT, "experiment": IMG, "transport": SCRIPT, "size": 32, "latency_kind": IMG,
         "latency_ns": {"p50": 1.0}, "statistic_note": SCRIPT},
        {"type": IMG, "peer": True, "tool": IMG, "reason": SCRIPT}]}))
    mesh = tmp_path / "mesh"
    report_fixture._mesh(mesh, np.random.default_rng(2))
    doc = json.loads((mesh / "mesh.json").read_text())
    doc["mesh"].update(hosts=[SCRIPT, IMG, "h3", "h4"], transport=IMG, pattern=SCRIPT, schedule=IMG)
    for h in doc["per_host"]:
        h["host"] = SCRIPT
    doc["outliers"]["links"][0].update(direction=SCRIPT, figure=IMG)
    doc["outliers"]["rule"]["text"] = IMG
    doc["drift"]["fields"][0].update(field=SCRIPT, values=[{"value": IMG, "ranks": [SCRIPT, 1]}])
    (mesh / "mesh.json").write_text(json.dumps(doc))

    _, text = _report(tmp_path)
    _assert_no_foreign_markup(text)


def test_mathtext_in_a_label_is_plain_text(tmp_path):
    """A transport, poll mode and folder name that matplotlib would parse as (broken) mathtext: drawn as is."""
    for name in ("a", "b"):   # two runs: a histogram each and a CDF of both
        folder = tmp_path / f"{name}{MATH.replace('/', '')}"
        folder.mkdir()
        _run(folder, [_point(MATH, "$x^$", {"rtt_ns": _samples(folder, "s.npy")})])
    _, text = _report(tmp_path)
    assert len(re.findall(r'<img alt="histogram ', text)) == 2 and 'alt="CDF lat 32 B"' in text


def _npy_claiming(path: Path, values: int, body: bytes) -> None:
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': ({values},), }}"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + body)


def test_npy_header_claiming_2_34_values_is_refused_with_flat_memory(tmp_path):
    folder = tmp_path / "bomb"
    folder.mkdir()
    _npy_claiming(folder / "s.npy", 1 << 34, np.arange(100, dtype="<f8").tobytes())
    _run(folder, [_point("tcp", "busy", {"rtt_ns": "s.npy"})])
    # The report in-process in a child that prints its own peak memory (KiB).
    code = ("import resource, sys; from pathlib import Path; from fabmeter.report import html; "
            "html.write(Path(sys.argv[1])); print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env=cli_env("report-hostile"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert time.monotonic() - start < 30
    assert int(r.stdout.split()[-1]) < 600 * 1024, f"peak RSS {r.stdout.split()[-1]} KiB"
    text = (tmp_path / "report.html").read_text()
    assert "its header claims 17,179,869,184 values" in text and "<img " not in text


def test_samples_outside_the_run_folder_are_not_read(tmp_path):
    """Absolute paths, .. and a symlink out of the folder: each refused with a note, nothing drawn from them."""
    outside = tmp_path / "outside"
    outside.mkdir()
    _samples(outside, "real.npy")
    root = tmp_path / "results"
    cases = {"etc-passwd": "/etc/passwd", "absolute": str(outside / "real.npy"), "dotdot": "../x.npy",
             "symlink": "link.npy"}
    for name, entry in cases.items():
        folder = root / name
        folder.mkdir(parents=True)
        _run(folder, [_point(name, "busy", {"rtt_ns": entry})])
    _samples(root, "x.npy")                                                 # what ../x.npy names
    os.symlink(outside / "real.npy", root / "symlink" / "link.npy")
    _, text = _report(root)
    assert 'alt="histogram ' not in text   # no sample was read
    for name, entry in cases.items():
        why = "resolves outside its folder" if name == "symlink" else "not a path inside the run's folder"
        assert html.escape(f"{name}: samples rtt_ns {json.dumps(entry)} not read: {why}") in text, name


def test_malformed_documents_are_notes_not_tracebacks(tmp_path):
    """Documents of the wrong shape: each a note on the page (or left out), the rest of the report drawn."""
    good = tmp_path / "good"
    good.mkdir()
    _run(good, [_point("tcp", "busy", {"rtt_ns": _samples(good, "s.npy")})])
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "binary").mkdir()
    (tmp_path / "binary" / "run.json").write_bytes(b"\xff\xfe{")
    # Values of the wrong type in every place the report reads.
    odd = tmp_path / "odd"
    _run(odd, [{"experiment": "lat", "transport": ["x"], "size": "big", "latency_ns": [1, 2], "samples": "x.npy",
                "rate_hz": {"a": 1}, "values": "many", "gbps": "fast", "offered_rps": True, "phase": "open loop"},
               {"experiment": "load", "phase": "open loop", "offered_rps": 1e300, "server": [], "knee": 5,
                "slowdown": [{"size_hi": "x"}], "latency_ns": {"p50": "1"}}, 7, None],
         config=[], environment={"cpuidle": {"driver": "x", "guest_halt_poll_ns": "x"}, "kernel": "k",
                                 "libraries": ["a"], "governors": 3, "engine": "e"})
    (tmp_path / "points-not-list").mkdir()
    (tmp_path / "points-not-list" / "run.json").write_text(json.dumps({"status": "ok", "points": "abc"}))
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "index.json").write_text("[1, 2]")
    (tmp_path / "peer").mkdir()
    (tmp_path / "peer" / "peers.json").write_text('"just a string"')
    for name, doc in (("mesh-a", {"mesh": {}, "matrix": {}}),
                      ("mesh-b", {"mesh": {"hosts": ["a", "b"], "experiment": "oneway"},
                                  "matrix": {"latency_p50_ns": [[1, "x"], [None, 2]], "latency_p99_ns": 3}}),
                      ("mesh-c", {"mesh": {"hosts": "ab", "experiment": "bw"}, "matrix": {"gbps": [[1]]}}),
                      ("mesh-d", {"mesh": {"hosts": ["a", "b"], "experiment": "bw"},
                                  "matrix": {"gbps": [[None, 1], [2, None]]},
                                  "outliers": {"links": [{"src": "0", "dst": [1]}, 5, {"src": 9, "dst": 0}],
                                               "hosts": "x", "rule": 3, "median": "m"},
                                  "drift": {"fields": [{"values": [{"value": {}, "ranks": 7}], "unknown_ranks": 1}, 2],
                                            "hosts_reporting": 9}}),
                      # load's merged figures: an inflation bomb for a histogram, values of the wrong types
                      ("mesh-e", {"mesh": {"hosts": ["a", "b"], "experiment": "load"},
                                  "matrix": {"latency_p50_ns": [[None, 1], [2, None]],
                                             "latency_p99_ns": [[None, 1], [2, None]]},
                                  "load": {"servers": [{"rank": 0, "host": SCRIPT, "latency_hist": BOMB,
                                                        "latency_ns": {"count": [], "p50": "x"}, "by_round": 3,
                                                        "slowdown": [{"size_hi": "x", "p50": 1}, 4]}, 7],
                                           "overall": {"latency_hist": "not base64!", "latency_hist_below": -5,
                                                       "slowdown": "x"}}})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mesh.json").write_text(json.dumps(doc))
    _, text = _report(tmp_path)
    for problem in ("deep/run.json: nested too deeply", "binary/run.json: ", "points-not-list: points is not a list",
                    "suite/index.json: not a JSON object", "peer/peers.json: not a JSON object",
                    "mesh-a/mesh.json: its hosts are not a list",
                    "mesh-b/mesh.json: its matrix latency_p50_ns is not 2 x 2 numbers",
                    "mesh-c/mesh.json: its hosts are not a list"):
        assert problem in text, problem
    assert "mesh-d: 2 hosts" in text        # outliers and drift of the wrong shapes: drawn without them
    assert "mesh-e: 2 hosts" in text and "merged cdf" not in text and "mesh: not drawn" not in text
    assert 'alt="histogram good"' in text and "<td>odd</td>" in text


def test_nothing_readable_is_one_line_error(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "run.json").write_text("{not json")
    r = Fabmeter("report-hostile").run("report", tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("fabmeter: error: no run.json"), r.stderr
    assert "a/run.json: " in lines[0]
