"""Each shipped suite against the study it reproduces (its seed).

The seeds' parameters are data, written from the studies with their
citations: data/seeds/*.toml (the form: data/seeds/thesis.toml's header).
Every point of a suite is a row of its seed, in the parameters the seed
compares (its `keys`), unless its [[matrix]] table is marked
`origin = "fabmeter"` (fabmeter's own: other transports, service types the
study left out); a marked point must not be a row of the seed; and every
row of the seed is a point of the suite (unless the seed is a selection).
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO
from fabmeter.engine import engine_info
from fabmeter.suite import read as suite

SEEDS = REPO / "data" / "seeds"
NOT_OPTIONS = ("experiment", "transport", "tool", "tests", "cpus", "mesh_experiment", "pattern", "schedule", "ranks")
ROW_TEXT = ("cite", "quote")     # a row's citation, not a parameter


@pytest.fixture(scope="module")
def info(engine) -> dict:
    return engine_info(str(engine))


@dataclass(frozen=True)
class Span:
    """A seed's {from, to, including}: a list from `lo` to `hi` that holds `including` (the steps between are
    the suite's)."""
    lo: float
    hi: float
    including: tuple

    def matches(self, value) -> bool:
        return isinstance(value, tuple) and bool(value) and (min(value), max(value)) == (self.lo, self.hi) \
            and set(self.including) <= set(value)


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value


def seeds() -> dict[str, tuple[dict, str]]:
    """suite name -> (its seed section, the seed file's name)."""
    out = {}
    for f in sorted(SEEDS.glob("*.toml")):
        doc = tomllib.loads(f.read_text())
        assert doc["study"] and doc["reference"], f
        for name, section in doc["suite"].items():
            assert name not in out, f"{name} is seeded by {out[name][1]} and {f.name}"
            out[name] = (section, f.name)
    return out


def seed_rows(section: dict, table) -> list[dict]:
    """A seed section's rows, expanded (a list is an axis) and typed as the engine types the options; a key
    a row does not give is the section's default, else the engine's (a peer tool's row: none)."""
    keys, rows = section["keys"], []
    for row in section["rows"]:
        assert row.get("cite") and row.get("quote"), row
        given = {k: v for k, v in row.items() if k not in ROW_TEXT}
        assert set(given) <= set(keys), f"{row['cite']}: keys {set(given) - set(keys)} are not compared"
        if "tool" not in given:
            given = {**section.get("defaults", {}), **given}
        axes = [[(k, x) for x in (v if isinstance(v, list) else [v])] for k, v in given.items()]
        for combo in itertools.product(*axes):
            chosen = dict(combo)
            fallback = {} if "tool" in chosen else table.defaults()
            rows.append({"cite": row["cite"], **{k: _typed(k, chosen[k], table) if k in chosen
                                                  else _hashable(fallback.get(k)) for k in keys}})
    return rows


def _typed(key: str, value, table):
    if isinstance(value, dict):
        return Span(value["from"], value["to"], tuple(value.get("including", ())))
    opt = None if key in NOT_OPTIONS else table.get(key)
    return _hashable(opt.typed(value) if opt is not None else value)


def point_row(p, table, keys: list[str]) -> dict:
    """A point in the seed's parameters: the engine's params (defaults filled in), a mesh point's keys; a peer
    point's the keys its table sets."""
    if p.tool:
        have = {**p.options, "tool": p.tool}
    else:
        have = {**p.params(table), **(p.mesh or {}), "cpus": p.cpus, "hop_transport": p.hop_transport}
    have |= {"experiment": p.experiment, "transport": p.transport}
    return {k: _hashable(have.get(k)) for k in keys}


def matches(row: dict, got: dict) -> bool:
    return all(row[k].matches(v) if isinstance(row[k], Span) else row[k] == v for k, v in got.items())


def check(path: Path, info: dict) -> list[str]:
    """What in the suite file at `path` disagrees with its seed (empty: nothing)."""
    s = suite.read(path, info)
    section, where = seeds()[s.name]
    rows = seed_rows(section, s.options)
    problems, used = [], set()
    for p in s.points:
        got = point_row(p, s.options, section["keys"])
        hits = [i for i, row in enumerate(rows) if matches(row, got)]
        if p.origin is None and not hits:
            problems.append(f"{p.id}: no row of data/seeds/{where} has {got} (a point of fabmeter's own: "
                            "origin = \"fabmeter\" in its table)")
        elif p.origin and hits:
            problems.append(f"{p.id}: marked origin = \"{p.origin}\" but it is data/seeds/{where}'s row "
                            f"({rows[hits[0]]['cite']})")
        if p.origin is None:
            used.update(hits)
    if not section.get("selection"):
        problems += [f"data/seeds/{where}: {row['cite']}: no point of the suite has {row}"
                     for i, row in enumerate(rows) if i not in used]
    return problems


SEEDED = sorted(f.stem for f in (REPO / "suites").glob("*.toml") if f.stem != "quick")


def test_every_suite_has_a_seed():
    assert sorted(seeds()) == SEEDED


@pytest.mark.parametrize("name", SEEDED)
def test_suite_matches_its_seed(name, info):
    assert check(REPO / "suites" / f"{name}.toml", info) == []


def _edited(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = (REPO / "suites" / f"{name}.toml").read_text()
    assert old in text, old
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("name,old,new", [
    ("thesis-oneway", "burst_size = 2730", "burst_size = 2000"),
    ("thesis-oneway", "gap_us = 1000000", "gap_us = 100000"),
    ("thesis-timestamps", "inline = 188\nsignal_every = 0", "inline = 128\nsignal_every = 0"),
    ("thesis-stream", "count = 250000", "count = 25000"),
    ("thesis-gateway", "iters = 250000", "iters = 25000"),
    ("thesis-gateway", "inline = 188\nsignal_every = 0\ngap_us = [10000", "inline = 128\nsignal_every = 0\ngap_us = [10000"),
    ("thesis-gateway", 'hop_transport = ["verbs", "shm"]', 'hop_transport = ["verbs", "tcp"]'),
    ("paper-lat-bw", "inline = 236", "inline = 200"),
    ("paper-lat-bw", "duration = 2", "duration = 1"),
    ("paper-lat-bw", 'tool = "qperf"\nexperiment = "bw"\ntransport = "udp"', 'tool = "qperf"\nexperiment = "bw"\ntransport = "tcp"'),
    ("udapl-patterns", "sq_depth = 10", "sq_depth = 16"),
    ("ramcloud-load", "resp_size = 100", "resp_size = 1000"),
    ("homa-load", 'arrivals = "poisson"', 'arrivals = "uniform"'),
    ("perftest-parity", 'service = ["rc", "uc", "ud"]\nop = "send"', 'service = ["rc", "uc", "ud"]\nop = "write"'),
])
def test_a_changed_seed_parameter_fails(name, old, new, tmp_path, info):
    assert check(REPO / "suites" / f"{name}.toml", info) == []
    problems = check(_edited(tmp_path, name, old, new), info)
    assert problems and all("no row of" in p or "no point of the suite" in p for p in problems), problems


@pytest.mark.parametrize("name,table", [
    ("thesis-stream", '[[matrix]]\ntransport = "tcp"\nvalues = "1,64"\n'),
    ("thesis-gateway", '[[matrix]]\ntransport = "shm"\ngap_us = 1000\n'),
    ("thesis-gateway", '[[matrix]]\nexperiment = "oneway"\ntransport = "udp"\nhop_transport = "shm"\n'),
    ("thesis-oneway", '[[matrix]]\ntransport = "verbs"\nservice = "rc"\ninline = 188\n'),
    ("udapl-patterns", '[[matrix]]\ntransport = "shm"\npattern = "one-to-all"\nschedule = "scheduled"\nsize = "1K"\n'),
    ("paper-lat-bw", '[[matrix]]\ntool = "qperf"\nexperiment = "lat"\ntransport = "tcp"\nsize = "64K"\n'),
])
def test_an_unmarked_extra_row_fails(name, table, tmp_path, info):
    text = (REPO / "suites" / f"{name}.toml").read_text()
    unmarked, marked = tmp_path / "unmarked.toml", tmp_path / "marked.toml"
    unmarked.write_text(text + "\n" + table)
    marked.write_text(text + "\n" + table.replace("[[matrix]]\n", '[[matrix]]\norigin = "fabmeter"\n'))
    problems = check(unmarked, info)
    assert len(problems) == 1 and 'origin = "fabmeter" in its table' in problems[0], problems
    assert check(marked, info) == []


def test_a_marker_on_a_study_row_fails(tmp_path, info):
    path = _edited(tmp_path, "homa-load", '[[matrix]]\ntransport = "tcp"',
                   '[[matrix]]\norigin = "fabmeter"\ntransport = "tcp"')
    problems = check(path, info)
    assert any("marked origin" in p for p in problems) and any("no point of the suite" in p for p in problems)


def test_origin_is_a_table_marker(tmp_path, info):
    """The reader takes origin = "fabmeter" on a [[matrix]] table (peer tables too), records it on the
    points, and leaves their ids and options alone; a point that an unmarked table also makes is the study's."""
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n[defaults]\nexperiment = "lat"\n'
                    '[[matrix]]\ntransport = ["shm", "tcp"]\n'
                    '[[matrix]]\norigin = "fabmeter"\ntransport = ["tcp", "udp"]\n'
                    '[[matrix]]\norigin = "fabmeter"\ntool = "qperf"\nexperiment = "lat"\n')
    s = suite.read(path, info)
    assert {p.id: p.origin for p in s.points} == {"lat-shm-busy": None, "lat-tcp-busy": None,
                                                  "lat-udp-busy": "fabmeter", "qperf-lat-tcp": "fabmeter"}
    assert "origin" not in s.points[2].options
    for bad, line in (('[defaults]\norigin = "fabmeter"\n[[matrix]]\nexperiment = "lat"\n', 2),
                      ('[[matrix]]\nexperiment = "lat"\norigin = "thesis"\n', 3)):
        path.write_text(bad)
        with pytest.raises(suite.SuiteError, match="origin") as e:
            suite.read(path, info)
        assert e.value.line == line


def test_homa_load_runs_the_workloads_whole(info):
    for p in suite.read(REPO / "suites" / "homa-load.toml", info).points:
        # Poisson arrivals at fractions of the capacity, by request count; no max_size: never clamped
        assert p.options["of_capacity"] == [0.2, 0.5, 0.8] and p.options["count"] >= 10000, p.id
        assert "max_size" not in p.options, p.id
