"""A suite file: read, checked against the engine's option table, expanded into points."""

from __future__ import annotations


import itertools
import json
import os
import re
import shlex
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from fabmeter import experiment_command, hop
from fabmeter import repeat as repeat_mod
from fabmeter import slo as slo_mod
from fabmeter.errors import FabmeterError
from fabmeter.mesh import command as mesh_command
from fabmeter.mesh import patterns, tool_mpi, tool_pair
from fabmeter.options import Option, Options, _csv
from fabmeter.suite import cut, ids, peer
from fabmeter.suite.ids import PY_KEYS
from fabmeter.suggest import did_you_mean

TOP_KEYS = ("name", "description", "repeat", "defaults", "matrix")
MESH = "mesh"         # the experiment of a point that runs `fabmeter mesh`
# `origin = "fabmeter"` in a [[matrix]] table: its points are fabmeter's own, not in the study the suite
# reproduces (tests/test_suite_seeds.py holds every other point to data/seeds/); it changes nothing they run.
ORIGIN, ORIGINS = "origin", ("fabmeter",)
# A mesh point's own keys: fabmeter mesh's options (mesh/command.py) that a suite may set, in the order point ids
# name them, each under its name with '_' (--experiment's is mesh_experiment: the point's experiment is "mesh";
# --tool's mesh_tool: a table's `tool` makes peer points).
# A suite starts its ranks itself or over ssh, never through standing serves.
_MESH_OPTIONS = {o.name: o for o in mesh_command.OPTIONS}
MESH_KEYS = {("mesh_" if name in ("experiment", "tool") else "") + _MESH_OPTIONS[name].key: _MESH_OPTIONS[name]
             for name in ("experiment", "tool", "pattern", "schedule", "launch", "ranks", "hostfile", "mesh-port",
                          "ssh", "remote-fabmeter", "token-file")}
MESH_KEYS["launch"] = replace(MESH_KEYS["launch"], choices=("local", "ssh"))
# The keys of any point that are an experiment command's own options (experiment_command.py), under their names.
RUN_KEYS = {o.key: o for o in experiment_command.OPTIONS if o.key in (*PY_KEYS, "slo")}
HOP_KEYS = hop.KEYS[1:]   # a point's hop (hop.py): the points a hop forwards take them


# A suite only names things inside its results folder, and runs nothing but fabmeter (docs/security.md):
# `ssh` is the ssh command with these options only (none makes ssh run or write anything of the file's
# choosing), `remote_fabmeter` the path of a fabmeter program.
SSH_FLAGS = ("-4", "-6", "-q", "-v", "-C")
SSH_VALUE_FLAGS = {"-p": r"\d{1,5}", "-l": r"[A-Za-z0-9._][A-Za-z0-9._-]*", "-i": r"[^\x00-\x1f]+"}
SSH_CONFIG = ("Port", "User", "IdentityFile", "IdentitiesOnly", "ConnectTimeout", "ConnectionAttempts",
              "ServerAliveInterval", "ServerAliveCountMax", "StrictHostKeyChecking", "Compression", "LogLevel",
              "AddressFamily", "BatchMode")
SSH_CONFIG_LOWER = {k.lower() for k in SSH_CONFIG}   # ssh reads its keywords in any case
REMOTE_FABMETER_RE = re.compile(r"^(?:[A-Za-z0-9._~+-]*/)*fabmeter$")


class SuiteError(Exception):
    """A problem in the suite file, with the line it is on (0: the file as a whole)."""

    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.message, self.line = message, line


# --- where keys are: tomllib gives no line numbers --------------------------

_HEADER_RE = re.compile(r"^\s*(\[\[|\[)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY_RE = re.compile(r"""^\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*=(.*)$""")


def _bracket_depth(text: str) -> int:
    """Net [ minus ] in a TOML value, ignoring strings and comments."""
    depth, quote, i = 0, None, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            break
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        i += 1
    return depth


class KeyLines:
    """Line numbers of keys and table headers, from a scan of the file text.

    Sections: ("", 0) is the top level, ("defaults", 0), ("matrix", i) the
    i-th [[matrix]] table; other headers keep their name.
    """

    def __init__(self, text: str):
        self.keys: dict[tuple[str, int, str], int] = {}
        self.headers: dict[tuple[str, int], int] = {}
        section, counts, depth = ("", 0), {}, 0
        for number, line in enumerate(text.splitlines(), start=1):
            if depth > 0:                     # inside a multi-line array
                depth += _bracket_depth(line)
                continue
            m = _HEADER_RE.match(line)
            if m:
                name = m.group(2).strip().strip('"')
                index = counts.get(name, 0)
                counts[name] = index + 1 if m.group(1) == "[[" else index
                section = (name, index)
                self.headers.setdefault(section, number)
                continue
            m = _KEY_RE.match(line)
            if m:
                key = m.group(1).strip("\"'")
                self.keys.setdefault((section[0], section[1], key), number)
                depth = max(0, _bracket_depth(m.group(2)))

    def key(self, section: str, index: int, key: str) -> int:
        return self.keys.get((section, index, key)) or self.headers.get((section, index), 0)

    def header(self, section: str, index: int = 0) -> int:
        return self.headers.get((section, index), 0)


def known_names(info: dict, table: Options) -> tuple[set[str], set[str]]:
    """Experiments and transports fabmeter knows of: those built in plus those any option is scoped to."""
    experiments, transports = set(info.get("experiments", [])), set(info.get("transports", []))
    transports.update(info.get("transports_unavailable") or {})
    for o in table:
        experiments.update(x for x in _csv(o.scope) if x != "all")
        transports.update(x for x in _csv(o.transports) if x != "all")
    return experiments, transports


@dataclass
class Point:
    id: str
    experiment: str
    transport: str
    options: dict                   # engine option key -> typed value, as the suite sets them
    cpus: Optional[str] = None
    server: Optional[str] = None
    line: int = 0                   # its [[matrix]] header
    skip: str = ""                  # why it cannot run on this engine ("" = it can)
    slo: Optional[str] = None       # latency objectives, canonical (slo.py), as --slo takes them
    mesh: Optional[dict] = None     # a mesh point's MESH_KEYS (launch, pattern, ...), defaults filled in
    tool: Optional[str] = None      # a peer point's tool (peer.py); its keys are in options
    origin: Optional[str] = None    # "fabmeter": not a row of the suite's study (ORIGIN)
    via_hop: Optional[str] = None   # HOST[:PORT] of a forwarding hop to the server: measured beside the direct path
    hop_transport: Optional[str] = None  # with via_hop: the transport from the hop to the server (None: the run's)

    @property
    def engine_experiment(self) -> str:
        """What the engines run: the experiment, or a mesh point's mesh_experiment (its pairs')."""
        return self.mesh["mesh_experiment"] if self.mesh else self.experiment

    def options_in(self, folder: Path) -> dict:
        """The options the point runs with in its results folder: a file sink's name becomes a path there."""
        sink = self.options.get("sink", "")
        return {**self.options, "sink": f"file:{folder / sink[len('file:'):]}"} if sink.startswith("file:") \
            else self.options

    def params(self, table: Options) -> dict:
        """What the point asks for: its options over the engine's defaults (what the engine resolves them to,
        as its run.json states it, is the dry run's: limits.Plan.params); a peer point's: its tool's
        (peer.params_of)."""
        if self.tool:
            return peer.params_of(self)
        return {"experiment": self.engine_experiment, **table.defaults(), **self.options}


@dataclass
class Suite:
    name: str
    description: str
    path: Path
    points: list[Point] = field(default_factory=list)
    options: Options = None


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def _ssh_shape(value: str) -> Optional[str]:
    """Why an `ssh` value is not `ssh` with the options a suite may give it (None: it is)."""
    try:
        words = shlex.split(value)
    except ValueError as e:
        return str(e)
    if not words or words[0] != "ssh":
        return "it must start with 'ssh'"
    rest = iter(words[1:])
    for word in rest:
        if word in SSH_FLAGS:
            continue
        if word not in SSH_VALUE_FLAGS and word != "-o":
            return f"'{word}' is not an option a suite may give"
        arg = next(rest, "")
        key, _, setting = arg.partition("=")
        if not (re.fullmatch(SSH_VALUE_FLAGS[word], arg) if word in SSH_VALUE_FLAGS else
                key.lower() in SSH_CONFIG_LOWER and re.fullmatch(r"[A-Za-z0-9._/~:-]+", setting)):
            return f"'{word} {arg}' is not an option a suite may give"
    return None


def _checked_text(key: str, value: str, line: int) -> str:
    """Text keys that would reach outside the suite's results or run commands, held to a safe shape."""
    if key == "sink" and value.startswith("file:"):
        name = value[len("file:"):]
        if not name or "/" in name or name in (".", ".."):
            raise SuiteError(f"key 'sink': a suite's file sink is a file name in the point's folder (\"file:NAME\", "
                             f"no '/', not '.' or '..'), got {value!r}", line)
    elif key == "ssh" and _ssh_shape(value):
        raise SuiteError(f"key 'ssh': {_ssh_shape(value)}: a suite's ssh is \"ssh\" with {' '.join(SSH_FLAGS)}, "
                         f"-p PORT, -l USER, -i KEYFILE or -o KEY=VALUE for KEY one of {', '.join(SSH_CONFIG)} "
                         "(other ssh commands: fabmeter mesh --ssh)", line)
    elif key == "remote_fabmeter" and not REMOTE_FABMETER_RE.match(value):
        raise SuiteError(f"key 'remote_fabmeter': expected the path of a program named fabmeter (e.g. "
                         f"\"/opt/fabmeter/bin/fabmeter\"; other commands: fabmeter mesh --remote-fabmeter), "
                         f"got {value!r}", line)
    return value


def _typed(key: str, value: Any, opt: Optional[Option], line: int) -> Any:
    """One scalar value, typed by the engine's table; the engine checks ranges when it runs."""
    def bad(expected: str):
        raise SuiteError(f"key '{key}': expected {expected}, got {_type_name(value)} ({value!r})", line)

    if key in MESH_KEYS:
        choices = MESH_KEYS[key].choices
        if MESH_KEYS[key].type is int:
            if isinstance(value, bool) or not isinstance(value, int) or not (
                    2 <= value <= 64 if key == "ranks" else 0 < value < 65536):
                bad("a number from 2 to 64" if key == "ranks" else "a port number")
        elif not isinstance(value, str) or not value or (choices and value not in choices):
            bad("one of " + ", ".join(choices) if choices else "a non-empty string")
        return _checked_text(key, value, line) if MESH_KEYS[key].type is None and not choices else value
    if opt is None or key == "transport":   # python-side keys; transports are checked by name
        if key == "cpus":
            if value == "none":             # unpinned: the scheduler places both ends
                return value
            if isinstance(value, bool) or not isinstance(value, (str, int)) or not re.match(r"^\d+(\+\d+)*(,\d+(\+\d+)*)?$", str(value)):
                bad('a CPU list "A,B" (client, server; a side may be A+A2+... for --flows) or "none" (unpinned)')
            allowed = os.sched_getaffinity(0)
            missing = [c for c in map(int, re.split(r"[,+]", str(value))) if c not in allowed]
            if missing:
                raise SuiteError(f"key 'cpus': CPU {missing[0]} is not available here "
                                 f"(allowed: {','.join(map(str, sorted(allowed)))})", line)
            return str(value)
        if not isinstance(value, str) or not value:
            bad("a non-empty string")
        return value
    try:
        typed = opt.typed(value)
    except ValueError as e:
        bad(str(e))
    return _checked_text(key, typed, line) if isinstance(typed, str) else typed


def _unknown_key(key: str, line: int, candidates: list[str]) -> SuiteError:
    hint = did_you_mean(key.replace("-", "_"), candidates)
    why = " (options use the key form with '_', as in run.json)" if hint and "-" in key else ""
    return SuiteError(f"unknown key '{key}'{hint}{why}", line)


def _check_mesh_point(t: dict, defaults: dict, lines: KeyLines, index: int) -> None:
    """A mesh point runs its ranks here (launch = "local", ranks = N) or on a cluster (launch = "ssh",
    hostfile = F)."""
    def given(key):
        return t.get(key, defaults.get(key))

    def where(key):
        return lines.key("matrix", index, key) if key in t else lines.key("defaults", 0, key)

    launches = given("launch") or "local"
    for launch in (launches if isinstance(launches, list) else [launches]):
        need, refuse = ("ranks", "hostfile") if launch == "local" else ("hostfile", "ranks")
        if given(need) is None:
            raise SuiteError(f"a mesh point with launch = \"{launch}\" needs '{need}'", lines.header("matrix", index))
        if given(refuse) is not None:
            raise SuiteError(f"key '{refuse}' does not go with launch = \"{launch}\" (it takes '{need}')",
                             where(refuse))
        for key in ("ssh", "remote_fabmeter"):
            if launch == "local" and given(key) is not None:
                raise SuiteError(f"key '{key}' is for launch = \"ssh\"", where(key))


def _origin(t: dict, lines: KeyLines, index: int) -> Optional[str]:
    """A [[matrix]] table's `origin` (None: its points are the study's)."""
    value = t.get(ORIGIN)
    if value is not None and value not in ORIGINS:
        raise SuiteError(f"key '{ORIGIN}': expected {' or '.join(map(repr, ORIGINS))} (the table's points are "
                         f"fabmeter's own, not the study's), got {value!r}", lines.key("matrix", index, ORIGIN))
    return value


def read(path: Path, info: dict, sets: Optional[dict[str, Any]] = None) -> Suite:
    """Parses and checks a suite file against the engine's option table (`fabmeter-engine options`), and expands
    its [[matrix]] tables into points; `sets` (--set) over the file's keys (cut.py)."""
    doc, lines = _parse(path)
    keys = _Keys(info, lines)
    for key, value in (sets or {}).items():
        _check_set(keys, key, value)
    cut.apply_sets(doc, sets or {})
    name, description, repeat, raw_defaults, matrix = _top(doc, lines, path)
    defaults = keys.defaults(raw_defaults)
    used_defaults: set[str] = set()
    expanded: list[tuple[Point, list[str]]] = []   # each point with the keys its own table sets
    for index, t in enumerate(matrix):
        origin = _origin(t, lines, index)
        t = {k: v for k, v in t.items() if k != ORIGIN}
        if "tool" in t:
            expanded += [(replace(p, origin=origin), own)
                         for p, own in _peer_points(t, raw_defaults, lines, index, used_defaults, keys.allowed)]
            continue
        axes = keys.axes(t, index, defaults)
        expanded += [(replace(p, origin=origin), list(t))
                     for p in _expand(axes, defaults, keys, index, used_defaults)]
    _check_defaults_used(raw_defaults, used_defaults, keys.table, lines, set(sets or {}))
    ids.assign(expanded, keys.table)
    return Suite(name, description, path, rounds(_distinct([p for p, _ in expanded], keys.table), repeat),
                 keys.table)


def _check_set(keys: "_Keys", key: str, value: Any) -> None:
    """A --set key checked as the file's keys are (it has no line: its errors name it instead)."""
    if key in (ORIGIN, "tool"):
        raise SuiteError(f"--set {key}: not a key --set can change (it makes or marks a [[matrix]] table's points)")
    if key not in keys.allowed:
        raise SuiteError(f"--set {key}: {_unknown_key(key, 0, keys.allowed).message}")
    try:
        keys.check("--set", 0, key, value, allow_list=False)
    except SuiteError as e:
        raise SuiteError(f"--set {key}={value}: {e.message}") from None


def _parse(path: Path) -> tuple[dict, KeyLines]:
    """The file as TOML, and where each of its keys is."""
    try:
        text = path.read_text()
    except OSError as e:
        raise SuiteError(f"cannot read the suite file: {e.strerror or e}")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column \d+\)", str(e))
        raise SuiteError(f"not valid TOML: {e}", int(m.group(1)) if m else 0)
    return doc, KeyLines(text)


def _top(doc: dict, lines: KeyLines, path: Path) -> tuple[str, str, int, dict, list]:
    """The top level checked: name, description, repeat, [defaults] and the [[matrix]] tables."""
    for key in doc:
        if key not in TOP_KEYS:
            line = lines.key("", 0, key) or lines.header(key)
            raise SuiteError(f"unknown key '{key}' at the top level (expected: {', '.join(TOP_KEYS)})", line)
    name = doc.get("name", re.sub(r"[^A-Za-z0-9._-]", "_", path.stem))
    if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9._-]+$", name) or name in (".", ".."):
        raise SuiteError("key 'name': expected a string of letters, digits, '.', '_' or '-', not '.' or '..' "
                         f"(it names the results folder), got {name!r}", lines.key("", 0, "name"))
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise SuiteError("key 'description': expected a string", lines.key("", 0, "description"))
    repeat = doc.get("repeat", 1)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= repeat_mod.MAX:
        raise SuiteError(f"key 'repeat': expected a whole number of runs per point from 1 to {repeat_mod.MAX}, "
                         f"got {repeat!r}", lines.key("", 0, "repeat"))
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SuiteError("key 'defaults': expected a table: [defaults]", lines.key("", 0, "defaults"))
    matrix = doc.get("matrix")
    if matrix is None:
        raise SuiteError("no [[matrix]] table: a suite needs at least one")
    if not isinstance(matrix, list) or not all(isinstance(t, dict) for t in matrix) or not matrix:
        raise SuiteError("key 'matrix': expected one or more [[matrix]] tables", lines.key("", 0, "matrix"))
    return name, description, repeat, defaults, matrix


class _Keys:
    """A table's keys checked against the engine's option table: each known, typed, and applying to every point
    its table makes."""

    def __init__(self, info: dict, lines: KeyLines):
        self.info, self.lines, self.table = info, lines, Options(info)
        self.experiments, self.transports = known_names(info, self.table)
        self.experiments.add(MESH)
        self.allowed = list(dict.fromkeys(["experiment", *RUN_KEYS] + list(MESH_KEYS) + [o.key for o in self.table]
                                          + list(peer.KEYS)))

    def check(self, section: str, index: int, key: str, given: Any, allow_list: bool) -> list:
        """A key's value(s), typed; a list is a matrix axis."""
        line = self.lines.key(section, index, key)
        if key not in self.allowed:
            raise _unknown_key(key, line, self.allowed)
        if key == "slo":   # one objective list per table, as --slo takes it; not a matrix axis
            if not isinstance(given, str):
                raise SuiteError(f"key 'slo': expected a string such as \"p99<=20us,p999<=100us\" (one per table, "
                                 f"not a matrix axis), got {_type_name(given)}", line)
            try:
                return [slo_mod.canonical(slo_mod.parse(given))]
            except slo_mod.SloError as e:
                raise SuiteError(f"key 'slo': {e}", line) from None
        values = given if isinstance(given, list) else [given]
        if isinstance(given, list):
            if not allow_list:
                raise SuiteError(f"key '{key}': [defaults] take one value each; "
                                 "put lists (matrix axes) in a [[matrix]] table", line)
            if not given:
                raise SuiteError(f"key '{key}': empty list", line)
            dup = [x for pos, x in enumerate(given) if x in given[:pos]]
            if dup:
                raise SuiteError(f"key '{key}': {dup[0]!r} is listed twice", line)
        typed = []
        for x in values:
            if not isinstance(x, (str, int, float, bool)):
                raise SuiteError(f"key '{key}': expected a value or a list of values, got {_type_name(x)}", line)
            typed.append(_typed(key, x, self.table.get(key), line))
            if key == "experiment" and x not in self.experiments:
                raise SuiteError(f"key 'experiment': unknown experiment '{x}' "
                                 f"(known: {', '.join(sorted(self.experiments))})", line)
            if key in ("transport", "hop_transport") and x not in self.transports:
                raise SuiteError(f"key '{key}': unknown transport '{x}' "
                                 f"(known: {', '.join(sorted(self.transports))})", line)
        return typed

    def defaults(self, raw: dict) -> dict:
        """[defaults], checked (a peer point's own defaults are checked with its table)."""
        for key, where in ((ORIGIN, "it marks that table's points"), ("tool", "its points are that tool's")):
            if key in raw:
                raise SuiteError(f"key '{key}' goes in a [[matrix]] table ({where})",
                                 self.lines.key("defaults", 0, key))
        return {key: self.check("defaults", 0, key, v, allow_list=False)[0] for key, v in raw.items()
                if key not in peer.DEFAULTS or key in self.table or key in MESH_KEYS}

    def axes(self, t: dict, index: int, defaults: dict) -> dict[str, list]:
        """A [[matrix]] table's axes (experiment and transport always), each key checked to apply to every point."""
        axes = {key: self.check("matrix", index, key, v, allow_list=True) for key, v in t.items()}
        if "experiment" not in axes and "experiment" not in defaults:
            raise SuiteError("[[matrix]] has no 'experiment' (set it here or in [defaults])",
                             self.lines.header("matrix", index))
        axes.setdefault("experiment", [defaults.get("experiment")])
        default_transport = self.table["transport"].default if "transport" in self.table else "shm"
        axes.setdefault("transport", [defaults.get("transport", default_transport)])
        for exp, tr in itertools.product(axes["experiment"], axes["transport"]):
            self._applies(t, axes, defaults, index, exp, tr)
        return axes

    def _applies(self, t: dict, axes: dict, defaults: dict, index: int, exp: str, tr: str) -> None:
        """Every key of a [[matrix]] table must apply to every point it makes."""
        lines = self.lines
        for key in t:
            if key in MESH_KEYS and exp != MESH:
                raise SuiteError(f"key '{key}' applies only to mesh points (experiment = \"{MESH}\"), not to "
                                 f"'{exp}'", lines.key("matrix", index, key))
        if exp == MESH:
            _check_mesh_point(t, defaults, lines, index)
            for key in ("cpus", "server", "slo"):
                if key in t:
                    raise SuiteError(f"key '{key}' does not apply to mesh points (each rank runs its own "
                                     "engines)", lines.key("matrix", index, key))
        for key in HOP_KEYS:
            if key in t and not hop.applies(exp):
                raise SuiteError(f"key '{key}' does not apply to experiment '{exp}' (a hop forwards "
                                 f"{hop.FORWARDED} only); put it in a [[matrix]] table of its own",
                                 lines.key("matrix", index, key))
        if "slo" in t and not slo_mod.applies(exp):
            raise SuiteError(f"key 'slo' does not apply to experiment '{exp}' (its points carry no latency "
                             "figure); put it in a [[matrix]] table of its own", lines.key("matrix", index, "slo"))
        pair_exps = axes.get("mesh_experiment") or [defaults.get("mesh_experiment", "oneway")]
        for key, exp in itertools.product(t, pair_exps if exp == MESH else [exp]):
            opt = self.table.get(key)
            if opt is not None and not opt.applies(exp, tr):
                if opt.scope == "all" or exp in _csv(opt.scope):
                    bad, only = f"transport '{tr}'", f"transports {opt.transports}"
                else:
                    bad, only = f"experiment '{exp}'", f"experiments {opt.scope}"
                raise SuiteError(f"key '{key}' does not apply to {bad} (only to {only}); "
                                 "put it in a [[matrix]] table of its own", lines.key("matrix", index, key))


def _expand(axes: dict[str, list], defaults: dict, keys: _Keys, index: int, used_defaults: set) -> list[Point]:
    """A [[matrix]] table's points: the product of its axes, [defaults] applied where they can; a point this
    engine cannot run carries why it is skipped. `used_defaults` gains the defaults a point took."""
    table, lines, info = keys.table, keys.lines, keys.info
    built_experiments, built_transports = set(info.get("experiments", [])), set(info.get("transports", []))
    header = lines.header("matrix", index)
    names = list(axes)
    points = []
    for combo in itertools.product(*(axes[k] for k in names)):
        chosen = dict(zip(names, combo))
        exp, tr = chosen["experiment"], chosen["transport"]
        mesh = None
        if exp == MESH:
            mesh = {k: chosen.get(k, defaults.get(k)) for k in MESH_KEYS}
            mesh["mesh_experiment"] = mesh["mesh_experiment"] or MESH_KEYS["mesh_experiment"].default
            mesh["launch"] = mesh["launch"] or "local"
            used_defaults.update(k for k in MESH_KEYS if k in defaults)
        opts: dict[str, Any] = {}
        for key, v in defaults.items():      # defaults apply where they can
            opt = table.get(key)
            if opt is not None and opt.applies(mesh["mesh_experiment"] if mesh else exp, tr):
                opts[key] = v
                used_defaults.add(key)
        opts.update({k: v for k, v in chosen.items() if k in table})
        opts["transport"] = tr
        cpus, server = (chosen.get(k, defaults.get(k)) for k in ("cpus", "server"))
        hop_settings = {k: chosen.get(k, defaults.get(k) if hop.applies(exp) else None) for k in HOP_KEYS}
        used_defaults.update(k for k, v in hop_settings.items() if v and k not in chosen)
        objectives = chosen.get("slo", defaults.get("slo") if slo_mod.applies(exp) else None)
        if objectives and "slo" not in chosen:
            used_defaults.add("slo")
        skip = _check_mesh_tool(mesh, opts, lines.key("matrix", index, "mesh_tool")
                                or lines.key("defaults", 0, "mesh_tool")) if mesh and mesh["mesh_tool"] else ""
        if skip:
            pass        # the tool's reason
        elif (mesh["mesh_experiment"] if mesh else exp) not in built_experiments:
            skip = f"experiment '{exp}' is not built into this engine"
        elif tr in (info.get("transports_unavailable") or {}):
            skip = f"transport '{tr}' is unavailable here: {info['transports_unavailable'][tr]}"
        elif tr not in built_transports:
            skip = f"transport '{tr}' is not built into this engine (built: {', '.join(sorted(built_transports))})"
        points.append(Point("", exp, tr, opts, None if cpus is None else str(cpus), server, header, skip,
                            objectives, mesh, **hop_settings))
    return points


def _check_defaults_used(raw_defaults: dict, used_defaults: set, table: Options, lines: KeyLines,
                         sets: set) -> None:
    """A key of [defaults] (or of --set) that no point took is a mistake."""
    unused = [k for k in raw_defaults if (k in table or k in ("slo", *HOP_KEYS) or k in MESH_KEYS
                                          or k in peer.DEFAULTS) and k not in used_defaults]
    if unused:
        where = table[unused[0]].where() if unused[0] in table else "mesh points" if unused[0] in MESH_KEYS else \
            "peer points (tool = ...)" if unused[0] in peer.DEFAULTS else \
            f"{hop.FORWARDED} points (those a hop forwards)" if unused[0] in HOP_KEYS else \
            "experiments whose points carry a latency figure: not " + ", ".join(slo_mod.NO_LATENCY)
        if unused[0] in sets:
            raise SuiteError(f"--set {unused[0]}: applies to none of the points (only to {where})")
        raise SuiteError(f"key '{unused[0]}' in [defaults] applies to none of the points "
                         f"(only to {where})", lines.key("defaults", 0, unused[0]))


def _distinct(expanded: list[Point], table: Options) -> list[Point]:
    """One point per distinct configuration, the first id wins; two different points with one id are refused."""
    points: dict[str, Point] = {}
    by_id: dict[str, Point] = {}
    for p in expanded:
        # Compared with the engine's defaults filled in: poll = "busy" and no poll are one point.
        config = json.dumps([p.experiment, p.cpus, p.server, p.via_hop, p.hop_transport, p.params(table), p.mesh])
        if config in points:
            first = points[config]
            if first.slo != p.slo:
                raise SuiteError(f"the point '{first.id}' is made by the [[matrix]] tables at lines {first.line} "
                                 f"and {p.line} with different slo ({first.slo!r}, {p.slo!r}); give it one", p.line)
            first.origin = first.origin if p.origin else None    # the study's when any of its tables is
            continue
        if p.id in by_id:
            raise SuiteError(f"two different points get the id '{p.id}' ([[matrix]] at lines "
                             f"{by_id[p.id].line} and {p.line}); make them differ in a matrix key", p.line)
        points[config] = by_id[p.id] = p
    return list(points.values())


def _check_mesh_tool(mesh: dict, options: dict, line: int) -> str:
    """A mesh point whose pairs run a peer tool (mesh_tool): a case the tool has and options it takes, else the
    error with its line; why it is skipped ("": it is not) when the tool is not installed here."""
    tool = peer.PEERS[mesh["mesh_tool"]]
    if not tool.available():
        return f"{tool.tool} is not installed here (apt-get install {tool.package})"
    try:
        if tool.tool == tool_mpi.TOOL:
            tool_mpi.check(mesh.get("launch"), mesh["mesh_experiment"], options)
        else:
            tool_pair.case_of(tool.tool, mesh["mesh_experiment"], options)
    except FabmeterError as e:
        raise SuiteError(e.message.replace("mesh --tool", "mesh_tool"), line) from None
    if mesh.get("schedule") == "slotted" or mesh.get("pattern") in patterns.SPLIT_PATTERNS:
        raise SuiteError(f"mesh_tool does not run schedule = \"slotted\" or pattern = \"{patterns.SPLIT_PATTERNS[0]}\"",
                         line)
    return ""


def _peer_points(t: dict, defaults: dict, lines: KeyLines, index: int, used_defaults: set,
                 known: list[str]) -> list:
    """A [[matrix]] table with `tool`: one peer point per combination of its list-valued keys, each one case of
    its tool (peer.py), with the [defaults] that peer points take. (Point, keys of its table) pairs."""
    header = lines.header("matrix", index)
    axes: dict[str, list] = {}
    for key, given in t.items():
        line = lines.key("matrix", index, key)
        if key not in known:
            raise _unknown_key(key, line, list(peer.KEYS))
        if key not in peer.KEYS:
            raise SuiteError(f"key '{key}' does not apply to peer points (tool = ...): they take "
                             f"{', '.join(peer.KEYS)}", line)
        values = given if isinstance(given, list) else [given]
        if not values:
            raise SuiteError(f"key '{key}': empty list", line)
        if any(x in values[:pos] for pos, x in enumerate(values)):
            raise SuiteError(f"key '{key}': a value is listed twice", line)
        axes[key] = [_peer_value(key, x, line) for x in values]
    for key, value in defaults.items():
        if key in peer.KEYS and key not in axes:
            axes[key] = [_peer_value(key, value, lines.key("defaults", 0, key))]
            used_defaults.add(key)
    if "experiment" not in axes:
        raise SuiteError("[[matrix]] with 'tool' has no 'experiment' (the tool's case: lat, bw or load)", header)
    axes.setdefault("transport", ["tcp"])
    made = []
    keys = list(axes)
    for combo in itertools.product(*(axes[k] for k in keys)):
        chosen = dict(zip(keys, combo))
        tool, exp, tr = chosen.pop("tool"), chosen.pop("experiment"), chosen.pop("transport")
        try:
            peer.case_of(tool, exp, tr, chosen.get("tests"))
        except ValueError as e:
            raise SuiteError(str(e), lines.key("matrix", index, "tool")) from None
        server = chosen.pop("server", None)
        cpus = chosen.pop("cpus", None)
        if server is not None and tr == "shm":
            raise SuiteError("a peer point over shm runs both ends on this host: no 'server'",
                             lines.key("matrix", index, "server"))
        if chosen.get("token_file") is not None and server is None:
            if "token_file" in t:
                raise SuiteError("key 'token_file' goes with 'server' on peer points",
                                 lines.key("matrix", index, "token_file"))
            del chosen["token_file"]      # [defaults]' secret is for the points with a server
        tool_peer = peer.PEERS[tool]
        skip = "" if tool_peer.available() else \
            f"{tool} is not installed here (apt-get install {tool_peer.package})"
        made.append((Point("", exp, tr, chosen, None if cpus is None else str(cpus), server, header, skip,
                           tool=tool), list(t)))
    return made


def _peer_value(key: str, value: Any, line: int) -> Any:
    if key == "cpus":
        if "+" in str(value):
            raise SuiteError("key 'cpus': a peer point runs one client and one server: \"A,B\" or \"none\"", line)
        return _typed(key, value, None, line)
    if key == "tool" and value not in peer.tools():
        raise SuiteError(f"key 'tool': unknown tool {value!r} (known: {', '.join(peer.tools())})"
                         + did_you_mean(str(value), peer.tools()), line)
    try:
        return peer.typed(key, value)
    except ValueError as e:
        raise SuiteError(f"key '{key}': {e}", line) from None


def rounds(points: list[Point], repeat: int) -> list[Point]:
    """`repeat = K`: every point K times, as K rounds of the whole list (the odd rounds in order, the even
    ones reversed, as the bench alternates), so a point's runs lie apart in time with its neighbours'
    between them and slow drift favours none; round k of a point is the point `<id>.r<k>`."""
    if repeat == 1:
        return points
    out = []
    for k in range(1, repeat + 1):
        for p in points if k % 2 else reversed(points):
            out.append(replace(p, id=f"{p.id}.r{k}"))
    return out
