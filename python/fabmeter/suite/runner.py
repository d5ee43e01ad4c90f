"""Running a suite's points, each into OUT/<point id>, with OUT/index.json."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from fabmeter import __version__, analysis, hop, run, slo
from fabmeter.command_options import Found
from fabmeter.engine import engine_info
from fabmeter.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME, EXIT_SLO, EXIT_USAGE, FabmeterError
from fabmeter.mesh import command as mesh_command
from fabmeter.mesh.output import MESH_FILE
from fabmeter.options import Options
from fabmeter.recorded import run_recorded
from fabmeter.results import now_iso, out_folder, write_json
from fabmeter.suite import cut, limits, peer
from fabmeter.suite.read import MESH_KEYS, Point, Suite, SuiteError, read
from fabmeter.terminal import shown_lines


def _fmt_duration(seconds: float) -> str:
    whole = int(round(seconds))
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    if whole >= 60:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole}s"


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
        sys.stderr.write(shown_lines(text) + "\n")
        sys.stderr.flush()

    def result(self, text: str) -> None:
        """A finished point's line, on stdout (the progress line, on stderr, cleared first)."""
        if self.tty and self._width:
            sys.stderr.write("\r" + " " * self._width + "\r")
            sys.stderr.flush()
            self._width = 0
        print(shown_lines(text), flush=True)

    def close(self) -> None:
        if self.tty and self._width:
            sys.stderr.write("\n")
            self._width = 0


def headline(folder: Path) -> str:
    """The point's headline figure as compare judges it (its representative point's), e.g. "p50 RTT/2 ns 4,210.5";
    "" when its folder holds no figure."""
    from fabmeter import compare      # numpy: loaded once a point has run
    from fabmeter.report import model
    runs, _ = model.read_runs(folder)
    entries = model.entries_of(runs)
    if not entries:
        return ""
    item = compare.item_of_point(model.representative(entries))
    return f"{item.figure} {analysis.fmt_num(item.value)}" if item.value is not None else ""


def _point_line(pid: str, state: str, seconds: float, folder: Path) -> str:
    figure = headline(folder) if state == "ok" else ""
    return f"{pid}: {state} in {_fmt_duration(seconds)}" + (f", {figure}" if figure else "")


def _read_run(folder: Path) -> Optional[dict]:
    try:
        return json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return None


def _read_mesh(folder: Path) -> Optional[dict]:
    try:
        return json.loads((folder / MESH_FILE).read_text())
    except (OSError, ValueError):
        return None


def mesh_argv(point: Point, table: Options, out: Optional[Path] = None) -> list[str]:
    """The `fabmeter mesh` arguments of a mesh point (OUT/mesh.json with `out`)."""
    m = point.mesh
    argv = ["mesh"]
    for key in sorted(MESH_KEYS, key=lambda k: k not in ("launch", "ranks", "hostfile")):   # how it starts first
        if m.get(key) is not None:
            argv += ["--" + MESH_KEYS[key].name, str(m[key])]
    return argv + table.engine_argv(point.options_in(out) if out else point.options) + (["--out", str(out)] if out else [])


def _run_mesh(point: Point, folder: Path, table: Options, engine: str) -> tuple[str, str, int]:
    """Runs a mesh point here, as `fabmeter mesh` would run it, quietly (its mesh.json is the result):
    (status, message, exit code)."""
    argv = mesh_argv(point, table, folder)
    try:
        info = engine_info(engine)
        code = mesh_command.main(mesh_command.parse(argv[1:], info), Found(engine, info),
                                 command=["fabmeter", *argv], quiet=True)
    except FabmeterError as e:
        if e.exit_code == EXIT_INTERRUPTED:
            return "interrupted", "interrupted", EXIT_INTERRUPTED
        return "failed", e.message, e.exit_code
    except KeyboardInterrupt:     # Ctrl-C, or SIGTERM (run_suite makes it one)
        return "interrupted", "interrupted", EXIT_INTERRUPTED
    except Exception as e:      # noqa: BLE001 -- a mesh point that breaks (its port taken, ...) fails alone
        return "failed", f"{type(e).__name__}: {e}", EXIT_INTERNAL
    if code == EXIT_INTERRUPTED:  # its mesh.json keeps the pairs that ended
        return "interrupted", "interrupted", code
    return ("ok", "", code) if code == EXIT_OK else ("failed", f"exit {code}", code)


def is_finished(folder: Path, point: Point, plan: Optional[limits.Plan]) -> bool:
    """run.json says ok, and the engine ran with the very params this point
    asks for, as the engine resolves them (`plan`: its dry run; an edited suite reruns the point); for a
    mesh point its mesh.json, for a peer point its peers.json."""
    if point.tool:
        return peer.is_finished(folder, point)
    if point.mesh:
        doc = _read_mesh(folder) or {}
        summary = doc.get("mesh") or {}
        return (doc.get("status") == "ok" and doc.get("params") == point.options_in(folder)
                and [summary.get(k) for k in ("experiment", "tool", "pattern", "schedule")]
                == [point.mesh[k] or MESH_KEYS[k].default
                    for k in ("mesh_experiment", "mesh_tool", "pattern", "schedule")])
    doc = _read_run(folder)
    if not doc or doc.get("status") != "ok":
        return False
    cfg = doc.get("config") or {}
    if plan is None or plan.params is None:    # the engine refuses the point here: it never finished
        return False
    asked = {**plan.params, **({"sink": point.options_in(folder)["sink"]} if "sink" in point.options else {})}
    ran_hop = doc.get("hop") or {}
    return (cfg.get("params") == asked and (cfg.get("suite") or {}).get("point") == point.id
            and ran_hop.get("via") == point.via_hop and ran_hop.get("hop_transport") == point.hop_transport)


def _open_point_folder(folder: Path) -> int:
    """A descriptor of the point's folder, OUT/<id>, made if missing. It must be a folder of OUT itself:
    a symlink (or a file) in its place is refused (exit 2), or the point's writes and deletions would
    land wherever it points."""
    try:
        os.mkdir(folder)
    except FileExistsError:
        pass
    except OSError as e:
        raise FabmeterError(f"cannot create {folder}: {e.strerror or e}", EXIT_RUNTIME) from None
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise FabmeterError(f"{folder} is not a folder (a symlink or a file is in the place of the point's "
                            "folder): remove it", EXIT_USAGE) from None


def _clear(folder: Path) -> None:
    """An unfinished point starts from an empty folder: no stale samples. Deleted by name within the
    folder's descriptor (no path is followed), and only entries that are not folders: a symlink named
    like a sample goes, not what it points to."""
    fd = _open_point_folder(folder)
    try:
        for name in os.listdir(fd):
            if ((name.endswith(".npy") or name.startswith("run.json") or name in (MESH_FILE, peer.PEERS_FILE))
                    and not stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode)):
                os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def _recorded_verdict(folder: Path, point: Point) -> Optional[dict]:
    """A finished point's verdict on its objectives as the suite now states them: the one its
    run.json holds, or, when the objectives were edited, a new one from its recorded points
    (written back: an objective is analysis, not a reason to measure again)."""
    doc = _read_run(folder) or {}
    if (doc.get("config") or {}).get("slo") == point.slo:
        return doc.get("slo")
    verdict = slo.evaluate(slo.parse(point.slo), doc.get("points") or []) if point.slo else None
    doc["config"].pop("slo", None)
    doc.pop("slo", None)
    command = list(doc.get("command") or [])
    if "--slo" in command:
        del command[command.index("--slo"):command.index("--slo") + 2]
    if point.slo:
        doc["config"]["slo"], doc["slo"] = point.slo, verdict
        at = min([command.index(o) for o in ("--cpus", "--server", "--out") if o in command] or [len(command)])
        command[at:at] = ["--slo", point.slo]
    doc["command"] = command
    doc["exit_code"] = slo.exit_code(EXIT_OK, verdict)
    write_json(folder / "run.json", doc)
    return verdict


def _slo_entry(point: Point, verdict: Optional[dict]) -> Optional[dict]:
    """index.json's `slo` of a point: its objectives and whether they were met."""
    return {"objectives": point.slo, "met": bool(verdict and verdict["met"])} if point.slo else None


def _cpus_of(point: Point, override: Optional[tuple[int, ...]],
             default: Optional[tuple[int, ...]]) -> Optional[tuple[int, ...]]:
    if override is not None:
        return override
    if point.cpus == "none":
        return None
    if point.cpus:
        return tuple(side if "+" in side else int(side) for side in point.cpus.split(","))
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
            if p.tool:
                status, message = peer.status_of(out / p.id)
            else:
                doc = (_read_mesh(out / p.id) if p.mesh else _read_run(out / p.id)) or {}
                status, message = doc.get("status", "pending"), doc.get("message", "")
            entry = {"id": p.id, "folder": p.id, "experiment": p.experiment, "transport": p.transport,
                     **({"tool": p.tool} if p.tool else {}), **({"via_hop": p.via_hop} if p.via_hop else {}),
                     **({"hop_transport": p.hop_transport} if p.hop_transport else {}),
                     "options": p.options,
                     "status": "skipped" if p.skip else status, "message": p.skip or message, "seconds": None,
                     "slo": {"objectives": p.slo, "met": None} if p.slo else None}
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


def print_plan(suite: Suite, out: Path, engine: str) -> int:
    """--dry-run: every point, what would happen to it, its planned time
    beside serve's limit, and its command; EXIT_USAGE where a default serve
    would refuse a point."""
    by_id = limits.plans(engine, suite.points, suite.options)
    for p in suite.points:
        plan = by_id[p.id]
        state = (f"skip: {p.skip}" if p.skip else f"refused: {plan.refused}" if plan and plan.refused else
                 f"fails here: {plan.unrunnable}" if plan and plan.unrunnable else
                 "done" if is_finished(out / p.id, p, plan) else "run")
        if p.tool:
            cmd = peer.command_text(p)
        else:
            cmd = shlex.join(["fabmeter", *mesh_argv(p, suite.options)] if p.mesh else
                             ["fabmeter", p.experiment, *suite.options.engine_argv(p.options)]
                             + (["--slo", p.slo] if p.slo else [])
                             + (["--cpus", p.cpus] if p.cpus else []) + (["--server", p.server] if p.server else [])
                             + (["--via-hop", p.via_hop] if p.via_hop else [])
                             + (["--hop-transport", p.hop_transport] if p.hop_transport else []))
        twice = ", twice: direct and through the hop" if p.via_hop else ""
        timing = (f"  (planned >= {plan.planned_s:g} s{twice}; serve's --max-duration {plan.limit_s:g} s)"
                  if plan and plan.planned_s is not None else "")
        print(f"{p.id}  [{state}]  {cmd}{timing}")
    runnable = [p for p in suite.points if not p.skip]
    print(f"{len(suite.points)} points: {len(runnable)} runnable, {len(suite.points) - len(runnable)} skipped "
          f"(not built into this engine, or their tool not installed); results would go to {out}")
    refused = limits.refusals(by_id)
    if refused:
        print(f"{len(refused)} point{'s' * (len(refused) != 1)} over a default serve's --max-duration: "
              "the suite would refuse to start")
    return EXIT_USAGE if refused else EXIT_OK


def run_suite(suite: Suite, out: Path, engine: str, cpus_override: Optional[tuple[int, ...]],
              default_cpus: Optional[tuple[int, ...]], token_file: Optional[str] = None) -> int:
    """Runs every point not finished yet; returns the exit code."""
    by_id = limits.plans(engine, suite.points, suite.options)
    refused = limits.refusals(by_id)
    if refused:  # before anything runs: not after hours of the points before it
        raise FabmeterError("suite: " + "; ".join(refused), EXIT_USAGE)
    out = out_folder(out)
    for p in suite.points:   # before anything reads or rewrites a point's folder
        if os.path.lexists(out / p.id):
            os.close(_open_point_folder(out / p.id))
    index = Index(out, suite)
    index.write()
    runnable = [p for p in suite.points if not p.skip]
    progress = Progress(len(runnable))
    skipped_why: dict[str, int] = {}
    for p in suite.points:
        if p.skip:
            skipped_why[p.skip] = skipped_why.get(p.skip, 0) + 1
    for why, count in skipped_why.items():
        progress.say(f"suite: skipping {count} point{'s' * (count != 1)}: {why}")
    done = [p for p in runnable if is_finished(out / p.id, p, by_id[p.id])]
    if done:
        progress.say(f"suite: {len(done)} of {len(runnable)} points already finished in {out}, skipping them")
    done_ids = {p.id for p in done}
    missed: list[tuple[str, str]] = []    # points that missed their objectives (slo)
    for p in done:
        verdict = _recorded_verdict(out / p.id, p)
        index.by_id[p.id]["slo"] = _slo_entry(p, verdict)
        if p.slo and not (verdict and verdict["met"]):
            missed.append((p.id, slo.summary(verdict) if verdict else "no verdict recorded"))

    failed: list[tuple[str, str]] = []
    ran = 0
    status = "ok"
    current: Optional[Point] = None
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
            if p.mesh or p.tool:
                index.set(p.id, status="running", message="")
                t0 = time.monotonic()
                if p.tool:
                    state, message, code = peer.run_point(
                        p, folder, engine, _cpus_of(p, cpus_override, default_cpus),
                        {"name": suite.name, "file": str(suite.path), "point": p.id})
                    if state == "skipped":
                        progress.say(f"suite: {p.id} skipped: {message}")
                else:
                    state, message, code = _run_mesh(p, folder, suite.options, engine)
                seconds = time.monotonic() - t0
                index.set(p.id, status=state, message=message, seconds=round(seconds, 3))
                progress.result(_point_line(p.id, state, seconds, folder))
                ran += 1
                if code == EXIT_INTERRUPTED:
                    status = "interrupted"
                    break
                progress.done(seconds)
                if code != EXIT_OK:
                    failed.append((p.id, message))
                    progress.say(f"suite: {p.id} failed: {message}")
                continue
            cpus = _cpus_of(p, cpus_override, default_cpus if p.server is None or not default_cpus
                            else default_cpus[:1])
            spec = run.RunSpec(p.experiment, p.options_in(folder), cpus=cpus, server=p.server, out=folder, engine=engine,
                               token_file=token_file if p.server else None, hop_transport=p.hop_transport)
            current = p
            index.set(p.id, status="running", message="")
            t0 = time.monotonic()
            rec = run_recorded(spec, slo.parse(p.slo) if p.slo else None, limits=True,
                               via_hop=(p.via_hop, 1) if p.via_hop else None,
                               suite={"name": suite.name, "file": str(suite.path), "point": p.id})
            seconds = time.monotonic() - t0
            current = None
            res, verdict, code = rec.result, rec.verdict, rec.exit_code
            index.set(p.id, status=res.status, message=res.message, seconds=round(seconds, 3),
                      slo=_slo_entry(p, verdict))
            progress.result(_point_line(p.id, res.status, seconds, folder))
            if code == EXIT_SLO:
                missed.append((p.id, slo.summary(verdict)))
                progress.say(f"suite: {p.id}: {slo.summary(verdict)}")
            ran += 1
            if res.exit_code == EXIT_INTERRUPTED:
                status = "interrupted"
                break
            progress.done(seconds)
            if res.exit_code != EXIT_OK:
                failed.append((p.id, res.message or res.status))
                progress.say(f"suite: {p.id} failed: {res.message or res.status}")
    except KeyboardInterrupt:
        status = "interrupted"
        if current is not None:   # stopped outside the engines' run (run_recorded finished its record)
            index.set(current.id, status="interrupted", message="interrupted")
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        progress.close()

    if status != "interrupted" and failed:
        status = "failed"
    if any(p.slo for p in runnable):
        index.doc["slo"] = {"met": not missed, "missed": [pid for pid, _ in missed]}
    index.write(status)
    counts: dict[str, int] = {}
    for p in runnable:      # a peer point the tool could not run here is counted as skipped among them
        state = index.by_id[p.id]["status"]
        counts[state] = counts.get(state, 0) + 1
    skipped = len(suite.points) - len(runnable)
    print(f"suite {suite.name}: {len(runnable)} points: " + ", ".join(f"{count} {state}" for state, count in sorted(counts.items()))
          + f" ({len(done)} finished before, {ran} run now)"
          + (f"; {skipped} more skipped: not built into this engine, or their tool not installed" if skipped else "")
          + (f"; {len(missed)} missed their latency objectives (slo)" if missed else ""))
    for pid, why in failed:
        print(f"  failed: {pid}: {shown_lines(why)}")
    for pid, why in missed:
        print(f"  {pid}: {shown_lines(why)}")
    print(f"results: {out}/<point>/run.json, index: {index.path}\n"
          f"report:  fabmeter report {out}")
    if status == "interrupted":
        sys.stderr.write("fabmeter: interrupted; finished points are kept: run the suite again to resume\n")
        return EXIT_INTERRUPTED
    return EXIT_RUNTIME if failed else EXIT_SLO if missed else EXIT_OK


def main(path: Path, out: Optional[Path], dry_run: bool, engine: str,
         cpus_override: Optional[tuple[int, ...]], default_cpus: Optional[tuple[int, ...]],
         server: Optional[str] = None, token_file: Optional[str] = None, sets: Optional[dict] = None,
         only: tuple[str, ...] = (), via_hop: Optional[str] = None) -> int:
    try:
        suite = read(path, engine_info(engine), sets)
        suite.points = cut.only(suite.points, list(only))
    except SuiteError as e:
        where = f"{path}:{e.line}: " if e.line else f"{path}: "
        raise FabmeterError(where + e.message, EXIT_USAGE)
    except cut.CutError as e:
        raise FabmeterError(str(e), EXIT_USAGE) from None
    if server:  # --server: one serve for every point (the point ids stay the suite's)
        suite.points = [dataclasses.replace(p, server=server) for p in suite.points]
    if via_hop:  # --via-hop: every point a hop forwards goes through that one too (a peer tool's: not)
        forwarded = [p.id for p in suite.points if hop.applies(p.experiment) and not p.tool]
        if not forwarded:
            raise FabmeterError(f"--via-hop: no point of the suite is one a hop forwards ({hop.FORWARDED})",
                                EXIT_USAGE)
        suite.points = [dataclasses.replace(p, via_hop=via_hop) if p.id in forwarded else p for p in suite.points]
    for p in suite.points:
        mistake = hop.unpaired(p.server, p.via_hop, p.hop_transport, hop.KEYS)
        if mistake:
            raise FabmeterError(f"{p.id}: {mistake}: the suite's keys, or fabmeter suite {' and '.join(hop.FLAGS[:2])}"
                                " (or --only the points without a hop)", EXIT_USAGE)
    if token_file is not None:
        if not any(p.server for p in suite.points):
            raise FabmeterError("--token-file goes with --server or a suite's `server` (a local point makes its "
                                "own secret)", EXIT_USAGE)
        suite.points = [dataclasses.replace(p, options={**p.options, "token_file": token_file})
                        if p.tool and p.server and not p.options.get("token_file") else p for p in suite.points]
    out = (out or Path("results") / suite.name).resolve()
    if dry_run:
        return print_plan(suite, out, engine)
    return run_suite(suite, out, engine, cpus_override, default_cpus, token_file)
