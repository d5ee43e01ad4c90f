"""`fabmeter suite FILE.toml`: a matrix of experiments x transports x options.

A suite file (docs/suites.md) has `[defaults]` and one or more `[[matrix]]`
tables; each table is the cartesian product of its list-valued keys. Keys
are the engine's option keys (`fabmeter-engine options`, e.g. burst_size)
plus `experiment`, `cpus` and `server`. The whole file is checked against
the option table before anything runs; a mistake is reported with the key
and its line (exit 2).

Every point runs exactly as `fabmeter EXP ... --out OUT/<point-id>` would
(run.execute + RunRecord) and OUT/index.json lists the points with their
status. A point whose run.json says "ok" with the same options is finished:
running the suite again skips it, so an interrupted suite resumes where it
stopped. Points on a transport or experiment this engine was built without
are skipped with one line each, not treated as errors.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import sys
import threading
import time
import tomllib
from dataclasses import dataclass, field
from difflib import get_close_matches
from pathlib import Path
from typing import Any, Optional

from fabmeter import __version__, run
from fabmeter.results import RunRecord, now_iso, write_json

TOP_KEYS = ("name", "description", "defaults", "matrix")
PY_KEYS = ("experiment", "cpus", "server")   # orchestration keys, not engine options
ALWAYS_IN_ID = ("experiment", "transport", "poll")

# Short forms of keys in point ids (s32, r1000, v8); other numeric keys read
# key+value (tx-depth64), other text keys key-value (timer-tsc).
ID_PREFIX = {"size": "s", "max_size": "max", "iters": "n", "warmup": "w", "rate": "r", "values": "v",
             "signal_every": "sig", "inline": "inline", "count": "c", "burst_size": "burst"}
ID_BARE = {"poll", "service", "op"}          # their values name themselves: busy, rc, write
ID_FLAG = {"all": "sweep"}                   # flags appear (only when true) under this name

_SIZE_RE = re.compile(r"^\d+[KkMmGg]?$")
_NUMBER_RE = re.compile(r"^(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_LIST_RE = re.compile(r"^\d+[KkMmGg]?(,\d+[KkMmGg]?)*$")


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
        for n, line in enumerate(text.splitlines(), start=1):
            if depth > 0:                     # inside a multi-line array
                depth += _bracket_depth(line)
                continue
            m = _HEADER_RE.match(line)
            if m:
                name = m.group(2).strip().strip('"')
                index = counts.get(name, 0)
                counts[name] = index + 1 if m.group(1) == "[[" else index
                section = (name, index)
                self.headers.setdefault(section, n)
                continue
            m = _KEY_RE.match(line)
            if m:
                key = m.group(1).strip("\"'")
                self.keys.setdefault((section[0], section[1], key), n)
                depth = max(0, _bracket_depth(m.group(2)))

    def key(self, section: str, index: int, key: str) -> int:
        return self.keys.get((section, index, key)) or self.headers.get((section, index), 0)

    def header(self, section: str, index: int = 0) -> int:
        return self.headers.get((section, index), 0)


# --- the option table, as the suite checks it -------------------------------

def _csv(text: str) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


@dataclass
class Option:
    key: str
    name: str
    kind: str            # flag | list | number | text
    scope: str           # "all" or experiments
    transports: str      # "all" or transports
    default: Any         # the engine's default, typed like a suite value

    def applies(self, experiment: str, transport: str) -> bool:
        return ((self.scope == "all" or experiment in _csv(self.scope))
                and (self.transports == "all" or transport in _csv(self.transports)))

    def where(self) -> str:
        parts = ([f"experiments {self.scope}"] if self.scope != "all" else []) + \
            ([f"transports {self.transports}"] if self.transports != "all" else [])
        return " and ".join(parts)


def _typed_default(kind: str, text: str) -> Any:
    if kind == "flag":
        return text not in ("", "0", "false")
    if kind == "number" and _NUMBER_RE.match(text or ""):
        return int(text) if text.isdigit() else float(text)
    return text


def options_from(info: dict) -> dict[str, Option]:
    out = {}
    for o in info.get("options", []):
        metavar, default = o.get("metavar", ""), str(o.get("default", ""))
        if metavar == "":
            kind = "flag"
        elif "," in metavar:
            kind = "list"
        elif default == "auto" or _NUMBER_RE.match(default):
            kind = "number"
        else:
            kind = "text"
        out[o["key"]] = Option(o["key"], o["name"], kind, o.get("scope", "all"), o.get("transports", "all"),
                               _typed_default(kind, default))
    return out


def known_names(info: dict, options: dict[str, Option]) -> tuple[set[str], set[str]]:
    """Experiments and transports fabmeter knows of: those built in plus those any option is scoped to."""
    experiments, transports = set(info.get("experiments", [])), set(info.get("transports", []))
    for o in options.values():
        experiments.update(x for x in _csv(o.scope) if x != "all")
        transports.update(x for x in _csv(o.transports) if x != "all")
    return experiments, transports


# --- the suite --------------------------------------------------------------

@dataclass
class Point:
    id: str
    experiment: str
    transport: str
    options: dict                   # engine option key -> value, as the suite gave them
    cpus: Optional[str] = None
    server: Optional[str] = None
    line: int = 0                   # its [[matrix]] header
    skip: str = ""                  # why it cannot run on this engine ("" = it can)

    def engine_args(self, table: dict[str, Option]) -> list[str]:
        args = []
        for key, opt in table.items():          # the engine's table order
            if key not in self.options:
                continue
            v = self.options[key]
            if opt.kind == "flag":
                if v:
                    args.append(f"--{opt.name}")
            else:
                args += [f"--{opt.name}", _engine_value(v)]
        return args


@dataclass
class Suite:
    name: str
    description: str
    path: Path
    points: list[Point] = field(default_factory=list)
    options: dict[str, Option] = field(default_factory=dict)


def _engine_value(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _canonical(v: Any) -> Any:
    """One form per value: 32768, 32768.0 and "32K" are the same size."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and _SIZE_RE.match(v):
        shift = {"k": 10, "m": 20, "g": 30}.get(v[-1].lower(), 0)
        return float(int(v[:-1] if shift else v) << shift)
    return v


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool))


def _type_name(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a table"
    return type(v).__name__


def _check_value(key: str, v: Any, opt: Optional[Option], line: int) -> None:
    """Type of one scalar value; the engine checks ranges and choices when it runs."""
    def bad(expected: str):
        raise SuiteError(f"key '{key}': expected {expected}, got {_type_name(v)} ({v!r})", line)

    if opt is None:  # python-side keys
        if key == "cpus":
            if isinstance(v, bool) or not isinstance(v, (str, int)) or not re.match(r"^\d+(,\d+)?$", str(v)):
                bad('a CPU list "A,B" (client, server)')
            allowed = os.sched_getaffinity(0)
            missing = [c for c in map(int, str(v).split(",")) if c not in allowed]
            if missing:
                raise SuiteError(f"key 'cpus': CPU {missing[0]} is not available here "
                                 f"(allowed: {','.join(map(str, sorted(allowed)))})", line)
        elif not isinstance(v, str) or not v:
            bad("a non-empty string")
        return
    if opt.kind == "flag":
        if not isinstance(v, bool):
            bad("true or false")
    elif opt.kind == "list":
        if isinstance(v, bool) or not (isinstance(v, int) and v >= 0 or isinstance(v, str) and _LIST_RE.match(v)):
            bad('a non-negative integer, or a string "A,B,..." for one run that sweeps them')
    elif opt.kind == "number":
        auto = ' or "auto"' if opt.default == "auto" else ""
        if isinstance(v, bool):
            bad(f"a non-negative number{auto}")
        if isinstance(v, (int, float)):
            if v < 0 or v != v:
                bad(f"a non-negative number{auto}")
        elif not (isinstance(v, str) and (_SIZE_RE.match(v) or _NUMBER_RE.match(v) or (auto and v == "auto"))):
            bad(f"a non-negative number (K/M/G suffixes allowed in a string){auto}")
    elif not isinstance(v, str):
        bad("a string")


def _unknown_key(key: str, line: int, candidates: list[str]) -> SuiteError:
    hint = get_close_matches(key.replace("-", "_"), candidates, n=1)
    why = " (options use the key form with '_', as in run.json)" if hint and "-" in key else ""
    return SuiteError(f"unknown key '{key}'" + (f" (did you mean '{hint[0]}'?){why}" if hint else ""), line)


def _id_token(key: str, v: Any, opt: Optional[Option]) -> str:
    if opt is not None and opt.kind == "flag":
        return ID_FLAG.get(key, key.replace("_", "-")) if v else ""
    if isinstance(v, int) and not isinstance(v, bool) and key in ("size", "max_size") and v >= 1024:
        for unit, shift in (("M", 20), ("K", 10)):
            if v % (1 << shift) == 0:
                v = f"{v >> shift}{unit}"
                break
    text = _engine_value(v).replace(",", "+")
    text = re.sub(r"[^A-Za-z0-9.+_-]", "_", text)
    if key in ALWAYS_IN_ID or key in ID_BARE:
        return text
    if key in ID_PREFIX:
        return ID_PREFIX[key] + text
    name = key.replace("_", "-")
    return f"{name}{text}" if isinstance(v, (int, float)) or _NUMBER_RE.match(text) else f"{name}-{text}"


def load(path: Path, info: dict) -> Suite:
    """Parses and checks a suite file against the engine's option table."""
    try:
        text = path.read_text()
    except OSError as e:
        raise SuiteError(f"cannot read the suite file: {e.strerror or e}")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column \d+\)", str(e))
        raise SuiteError(f"not valid TOML: {e}", int(m.group(1)) if m else 0)
    lines = KeyLines(text)
    table = options_from(info)
    experiments, transports = known_names(info, table)
    allowed_keys = list(PY_KEYS) + list(table)

    for key in doc:
        if key not in TOP_KEYS:
            line = lines.key("", 0, key) or lines.header(key)
            raise SuiteError(f"unknown key '{key}' at the top level (expected: {', '.join(TOP_KEYS)})", line)
    name = doc.get("name", re.sub(r"[^A-Za-z0-9._-]", "_", path.stem))
    if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9._-]+$", name):
        raise SuiteError("key 'name': expected a string of letters, digits, '.', '_' or '-' "
                         "(it names the results folder)", lines.key("", 0, "name"))
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise SuiteError("key 'description': expected a string", lines.key("", 0, "description"))
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SuiteError("key 'defaults': expected a table: [defaults]", lines.key("", 0, "defaults"))
    matrix = doc.get("matrix")
    if matrix is None:
        raise SuiteError("no [[matrix]] table: a suite needs at least one")
    if not isinstance(matrix, list) or not all(isinstance(t, dict) for t in matrix) or not matrix:
        raise SuiteError("key 'matrix': expected one or more [[matrix]] tables", lines.key("", 0, "matrix"))

    def check_key(section: str, index: int, key: str, v: Any, allow_list: bool) -> list:
        line = lines.key(section, index, key)
        if key not in allowed_keys:
            raise _unknown_key(key, line, allowed_keys)
        values = v if isinstance(v, list) else [v]
        if isinstance(v, list):
            if not allow_list:
                raise SuiteError(f"key '{key}': [defaults] take one value each; "
                                 "put lists (matrix axes) in a [[matrix]] table", line)
            if not v:
                raise SuiteError(f"key '{key}': empty list", line)
            dup = [x for i, x in enumerate(v) if x in v[:i]]
            if dup:
                raise SuiteError(f"key '{key}': {dup[0]!r} is listed twice", line)
        for x in values:
            if not _is_scalar(x):
                raise SuiteError(f"key '{key}': expected a value or a list of values, got {_type_name(x)}", line)
            _check_value(key, x, table.get(key), line)
            if key == "experiment" and x not in experiments:
                raise SuiteError(f"key 'experiment': unknown experiment '{x}' "
                                 f"(known: {', '.join(sorted(experiments))})", line)
            if key == "transport" and x not in transports:
                raise SuiteError(f"key 'transport': unknown transport '{x}' "
                                 f"(known: {', '.join(sorted(transports))})", line)
        return values

    for key, v in defaults.items():
        check_key("defaults", 0, key, v, allow_list=False)

    default_transport = table["transport"].default if "transport" in table else "shm"
    built_experiments, built_transports = set(info.get("experiments", [])), set(info.get("transports", []))
    used_defaults: set[str] = set()
    expanded: list[tuple[Point, list[str]]] = []   # each point with the keys its own table sets

    for i, t in enumerate(matrix):
        header = lines.header("matrix", i)
        axes = {key: check_key("matrix", i, key, v, allow_list=True) for key, v in t.items()}
        if "experiment" not in axes and "experiment" not in defaults:
            raise SuiteError("[[matrix]] has no 'experiment' (set it here or in [defaults])", header)
        axes.setdefault("experiment", [defaults.get("experiment")])
        axes.setdefault("transport", [defaults.get("transport", default_transport)])
        # Every key of a [[matrix]] table must apply to every point it makes.
        for exp, tr in itertools.product(axes["experiment"], axes["transport"]):
            for key in t:
                opt = table.get(key)
                if opt is not None and not opt.applies(exp, tr):
                    if opt.scope == "all" or exp in _csv(opt.scope):
                        bad, only = f"transport '{tr}'", f"transports {opt.transports}"
                    else:
                        bad, only = f"experiment '{exp}'", f"experiments {opt.scope}"
                    raise SuiteError(f"key '{key}' does not apply to {bad} (only to {only}); "
                                     "put it in a [[matrix]] table of its own", lines.key("matrix", i, key))
        keys = list(axes)
        for combo in itertools.product(*(axes[k] for k in keys)):
            chosen = dict(zip(keys, combo))
            exp, tr = chosen["experiment"], chosen["transport"]
            opts: dict[str, Any] = {}
            for key, v in defaults.items():      # defaults apply where they can
                opt = table.get(key)
                if opt is not None and opt.applies(exp, tr):
                    opts[key] = v
                    used_defaults.add(key)
            opts.update({k: v for k, v in chosen.items() if k in table})
            opts["transport"] = tr
            cpus, server = (chosen.get(k, defaults.get(k)) for k in ("cpus", "server"))
            skip = ""
            if exp not in built_experiments:
                skip = f"experiment '{exp}' is not built into this engine"
            elif tr not in built_transports:
                skip = f"transport '{tr}' is not built into this engine (built: {', '.join(sorted(built_transports))})"
            expanded.append((Point("", exp, tr, opts, None if cpus is None else str(cpus), server, header, skip),
                             list(t)))
    unused = [k for k in defaults if k in table and k not in used_defaults]
    if unused:
        opt = table[unused[0]]
        raise SuiteError(f"key '{unused[0]}' in [defaults] applies to none of the points "
                         f"(only to {opt.where()})", lines.key("defaults", 0, unused[0]))

    # Ids name a point by what sets it apart: experiment, transport, poll,
    # and each key its table sets whose value varies across the suite.
    def value_of(p: Point, key: str) -> Any:
        if key == "cpus":
            return p.cpus
        if key == "server":
            return p.server
        return p.options.get(key, table[key].default)

    def applies(p: Point, key: str) -> bool:
        return key in PY_KEYS or table[key].applies(p.experiment, p.transport)

    varying = {k for k in PY_KEYS + tuple(table) if k not in ALWAYS_IN_ID
               and len({_id_token(k, value_of(p, k), table.get(k)) for p, _ in expanded if applies(p, k)}) > 1}
    points: dict[tuple, Point] = {}   # one point per distinct configuration, the first id wins
    ids: dict[str, Point] = {}
    for p, own in expanded:
        tokens = [p.experiment, p.transport]
        if "poll" in table:
            tokens.append(_id_token("poll", value_of(p, "poll"), table["poll"]))
        order = [k for k in table if k in ID_BARE] + [k for k in table if k not in ID_BARE] + ["cpus", "server"]
        tokens += [_id_token(k, value_of(p, k), table.get(k))
                   for k in order if k in own and k in varying and value_of(p, k) is not None]
        p.id = "-".join(x for x in tokens if x)
        # Compared with the engine's defaults filled in: poll = "busy" and no poll are one point.
        config = (p.experiment, p.cpus, p.server,
                  tuple((k, _canonical(value_of(p, k))) for k in table if applies(p, k)))
        if config in points:
            continue
        if p.id in ids:
            raise SuiteError(f"two different points get the id '{p.id}' ([[matrix]] at lines "
                             f"{ids[p.id].line} and {p.line}); make them differ in a matrix key", p.line)
        points[config] = ids[p.id] = p
    return Suite(name, description, path, list(points.values()), table)


# --- running ----------------------------------------------------------------

def _fmt_duration(seconds: float) -> str:
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Progress:
    """`[12/84] oneway-tcp-event-s512  ETA 3m20s` on stderr: one line rewritten
    on a terminal, one line per point otherwise (logs, CI)."""

    def __init__(self, total: int):
        self.total = total
        self.tty = sys.stderr.isatty()
        self.times: list[float] = []
        self._width = 0

    def start(self, number: int, pid: str) -> None:
        left = self.total - number + 1
        eta = f"  ETA {_fmt_duration(sum(self.times) / len(self.times) * left)}" if self.times else ""
        line = f"[{number}/{self.total}] {pid}{eta}"
        if self.tty:
            sys.stderr.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def done(self, seconds: float) -> None:
        self.times.append(seconds)

    def say(self, text: str) -> None:
        """A line of its own (a failure, a skip) without breaking the progress line."""
        if self.tty and self._width:
            sys.stderr.write("\r" + " " * self._width + "\r")
            self._width = 0
        sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty and self._width:
            sys.stderr.write("\n")
            self._width = 0


def _read_run(folder: Path) -> Optional[dict]:
    try:
        return json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return None


def _options_json(options: dict) -> dict:
    return json.loads(json.dumps(options))


def is_finished(folder: Path, point: Point) -> bool:
    """run.json says ok, for these very options (an edited suite reruns the point)."""
    doc = _read_run(folder)
    if not doc or doc.get("status") != "ok":
        return False
    cfg = doc.get("config") or {}
    return cfg.get("options") == _options_json(point.options) and (cfg.get("suite") or {}).get("point") == point.id


def _clear(folder: Path) -> None:
    """An unfinished point starts from an empty folder: no stale samples."""
    if folder.is_dir():
        for f in folder.iterdir():
            if f.is_file() and (f.suffix == ".npy" or f.name.startswith("run.json")):
                f.unlink()


def _cpus_of(point: Point, override: Optional[tuple[int, ...]],
             default: Optional[tuple[int, ...]]) -> Optional[tuple[int, ...]]:
    if override is not None:
        return override
    if point.cpus:
        return tuple(int(x) for x in point.cpus.split(","))
    return default


class Index:
    """OUT/index.json: every point with its status, rewritten after each point."""

    def __init__(self, out: Path, suite: Suite):
        self.path = out / "index.json"
        self.doc = {"suite": suite.name, "description": suite.description, "file": str(suite.path),
                    "fabmeter_version": __version__, "started_at": now_iso(), "updated_at": None,
                    "status": "running", "points": []}
        self.by_id: dict[str, dict] = {}
        for p in suite.points:
            doc = _read_run(out / p.id)
            status = "skipped" if p.skip else (doc or {}).get("status", "pending")
            entry = {"id": p.id, "folder": p.id, "experiment": p.experiment, "transport": p.transport,
                     "options": _options_json(p.options), "status": status,
                     "message": p.skip or (doc or {}).get("message", ""), "seconds": None}
            self.doc["points"].append(entry)
            self.by_id[p.id] = entry

    def set(self, pid: str, **fields) -> None:
        self.by_id[pid].update(fields)
        self.write()

    def write(self, status: Optional[str] = None) -> None:
        if status:
            self.doc["status"] = status
        self.doc["updated_at"] = now_iso()
        write_json(self.path, self.doc)


def print_plan(suite: Suite, out: Path) -> None:
    """--dry-run: every point, what would happen to it and its command."""
    for p in suite.points:
        state = f"skip: {p.skip}" if p.skip else ("done" if is_finished(out / p.id, p) else "run")
        cmd = " ".join(["fabmeter", p.experiment, *p.engine_args(suite.options)]
                       + (["--cpus", p.cpus] if p.cpus else []) + (["--server", p.server] if p.server else []))
        print(f"{p.id}  [{state}]  {cmd}")
    runnable = [p for p in suite.points if not p.skip]
    print(f"{len(suite.points)} points: {len(runnable)} runnable, {len(suite.points) - len(runnable)} skipped "
          f"(not built into this engine); results would go to {out}")


def execute(suite: Suite, out: Path, engine: str, cpus_override: Optional[tuple[int, ...]],
            default_cpus: Optional[tuple[int, ...]], engine_version: Optional[str] = None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    index = Index(out, suite)
    index.write()
    runnable = [p for p in suite.points if not p.skip]
    progress = Progress(len(runnable))
    skipped_why: dict[str, int] = {}
    for p in suite.points:
        if p.skip:
            skipped_why[p.skip] = skipped_why.get(p.skip, 0) + 1
    for why, n in skipped_why.items():
        progress.say(f"suite: skipping {n} point{'s' * (n != 1)}: {why}")
    done = [p for p in runnable if is_finished(out / p.id, p)]
    if done:
        progress.say(f"suite: {len(done)} of {len(runnable)} points already finished in {out}, skipping them")
    done_ids = {p.id for p in done}

    failed: list[tuple[str, str]] = []
    ran = 0
    status = "ok"
    current: Optional[tuple[Point, RunRecord]] = None
    # SIGTERM between points stops the suite like Ctrl-C (during a point,
    # run.execute forwards it to the engines).
    main_thread = threading.current_thread() is threading.main_thread()
    old_term = signal.signal(signal.SIGTERM, signal.default_int_handler) if main_thread else None
    try:
        for number, p in enumerate(runnable, start=1):
            if p.id in done_ids:
                continue
            progress.start(number, p.id)
            folder = out / p.id
            _clear(folder)
            folder.mkdir(parents=True, exist_ok=True)
            cpus = _cpus_of(p, cpus_override, default_cpus if p.server is None or not default_cpus
                            else default_cpus[:1])
            args = p.engine_args(suite.options)
            command = ["fabmeter", p.experiment, *args] + (["--cpus", ",".join(map(str, cpus))] if cpus else []) \
                + (["--server", p.server] if p.server else []) + ["--out", str(folder)]
            config = {"experiment": p.experiment, "mode": "remote" if p.server else "local", "server": p.server,
                      "cpus": list(cpus) if cpus else None, "options": _options_json(p.options), "params": None,
                      "engine_version": engine_version,
                      "suite": {"name": suite.name, "file": str(suite.path), "point": p.id}}
            record = RunRecord(folder, config, command=command)
            record.flush()
            current = (p, record)
            index.set(p.id, status="running", message="")
            t0 = time.monotonic()
            res = run.execute(run.RunSpec(p.experiment, args, cpus=cpus, server=p.server, out=folder, engine=engine),
                              on_start=record.on_start, on_point=record.on_point, on_event=record.on_event)
            seconds = time.monotonic() - t0
            record.finish(res.status, res.message, res.exit_code)
            current = None
            index.set(p.id, status=res.status, message=res.message, seconds=round(seconds, 3))
            ran += 1
            if res.exit_code == run.EXIT_INTERRUPTED:
                status = "interrupted"
                break
            progress.done(seconds)
            if res.exit_code != run.EXIT_OK:
                failed.append((p.id, res.message or res.status))
                progress.say(f"suite: {p.id} failed: {res.message or res.status}")
    except KeyboardInterrupt:
        status = "interrupted"
        if current is not None:   # stopped between starting the record and the engines
            p, record = current
            record.finish("interrupted", "interrupted", run.EXIT_INTERRUPTED)
            index.set(p.id, status="interrupted", message="interrupted")
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        progress.close()

    if status != "interrupted" and failed:
        status = "failed"
    index.write(status)
    counts: dict[str, int] = {}
    for e in index.doc["points"]:
        if e["status"] != "skipped":
            counts[e["status"]] = counts.get(e["status"], 0) + 1
    skipped = len(suite.points) - len(runnable)
    print(f"suite {suite.name}: {len(runnable)} points: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
          + f" ({len(done)} finished before, {ran} run now)"
          + (f"; {skipped} more skipped: not built into this engine" if skipped else ""))
    for pid, why in failed:
        print(f"  failed: {pid}: {why}")
    print(f"results: {out}/<point>/run.json, index: {index.path}\n"
          f"report:  fabmeter report {out}")
    if status == "interrupted":
        sys.stderr.write("fabmeter: interrupted; finished points are kept: run the suite again to resume\n")
        return run.EXIT_INTERRUPTED
    return run.EXIT_RUNTIME if failed else run.EXIT_OK


def main(path: Path, out: Optional[Path], dry_run: bool, info: dict, engine: str,
         cpus_override: Optional[tuple[int, ...]], default_cpus: Optional[tuple[int, ...]]) -> int:
    try:
        suite = load(path, info)
    except SuiteError as e:
        where = f"{path}:{e.line}: " if e.line else f"{path}: "
        raise run.FabmeterError(where + e.message, run.EXIT_USAGE)
    out = (out or Path("results") / suite.name).resolve()
    if dry_run:
        print_plan(suite, out)
        return run.EXIT_OK
    return execute(suite, out, engine, cpus_override, default_cpus, info.get("version"))
