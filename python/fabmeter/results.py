"""Results folders: `run.json` beside the engine's raw .npy samples.

run.json is rewritten after every point (status "running"), so a run that
is killed outright still leaves what it had measured; the final write
carries the run's status: ok, failed or interrupted. Its configuration is
the engine's own typed `params` (from the "start" line), whoever started
the run: the CLI, a suite, the demo, the bench or `fabmeter peers`, each
through recorded.py.
docs/results.md describes every field.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from pathlib import Path
from typing import Optional

from fabmeter import __version__, analysis, envinfo, path
from fabmeter.doctor import record as doctor_record
from fabmeter.engine import engine_info
from fabmeter.errors import EXIT_RUNTIME, EXIT_USAGE, FabmeterError


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def out_folder(path: Path, option: str = "--out") -> Path:
    """The folder a command writes into (`option` names it), made with its parents if missing, resolved.
    A path that cannot be one (a file in its place or above it, a place that takes no folders, a name too
    long, no permission) ends the command with one line, exit 2: the argument is wrong, not the run."""
    try:
        path = Path(path).resolve()
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        why = "exists and is not a folder" if isinstance(e, FileExistsError) else e.strerror or str(e)
        raise FabmeterError(f"{option} {path}: {why}", EXIT_USAGE) from None
    return path


# The top-level status line of a document write_json wrote (indent=2: nested keys are indented further,
# and a string's own newlines are escaped), and what replaces it in place: as long, so it needs no room.
_RUNNING = b'\n  "status": "running"'
_FAILED = b'\n  "status": "failed" '


def _mark_failed_in_place(path: Path) -> bool:
    """Turns the file's "running" into "failed" by rewriting those bytes where they are: a full disk
    has no room for a new copy, but an overwrite needs none. False when it could not."""
    try:
        with open(path, "r+b") as f:
            at = f.read().rfind(_RUNNING)
            if at < 0:
                return False
            f.seek(at)
            f.write(_FAILED)
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        return False


def write_json(path: Path, obj) -> None:
    """Atomic write: a reader never sees half a file (a temporary file of our own, never one planted
    there, synced and renamed over `path`). A write that fails (a full disk) leaves no temporary file
    and ends the command with one line; the previous file stays, except that one claiming "running"
    says "failed" when this document is no longer running (its run ended, but not on disk)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
            with open(fd, "w") as f:
                json.dump(obj, f, indent=2, sort_keys=False)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as e:
        said = ""
        if obj.get("status", "running") != "running" and _mark_failed_in_place(path):
            said = ' (it now says "failed": its final write was lost)'
        raise FabmeterError(f"cannot write {path}: {e.strerror or e}{said}", EXIT_RUNTIME) from None


def run_config(experiment: str, cpus: Optional[tuple[int, ...]], server: Optional[str], engine: str,
               slo: Optional[str] = None, **more) -> dict:
    """run.json's "config": how the run was set up; `params` comes with the engine's start line;
    `slo` (only when there are latency objectives) is slo.py's canonical text of them."""
    return {"experiment": experiment, "mode": "remote" if server else "local", "server": server,
            "cpus": list(cpus) if cpus else None, "engine_version": engine_info(engine).get("version"),
            "params": None, **({"slo": slo} if slo else {}), **more}


class RunRecord:
    """Accumulates one run's run.json."""

    def __init__(self, out: Optional[Path], config: dict, command: Optional[list[str]] = None,
                 relay: Optional[str] = None):
        self.out = out
        self.planned: Optional[int] = None   # points the engine's start line announced
        self.doc = {
            "fabmeter_version": __version__,
            "command": list(command if command is not None else sys.argv),
            "started_at": now_iso(),
            "config": config,
            "path": path.record(config.get("server"), relay),   # its ends come with the engine's start line
            "environment": envinfo.collect(),
            "points": [],
            "engine_events": [],   # other engine lines, e.g. what the transport was granted
            "status": "running",
        }

    def on_start(self, start: dict) -> None:
        self.planned = start.get("points")
        self.doc["config"]["params"] = start.get("params")
        self.doc["path"] = path.with_start(self.doc["path"], start)
        self.doc["environment"]["engine"] = start.get("env")
        self.doc["environment"]["server_engine"] = start.get("server_env")
        self.doc["control_channel"] = start.get("control_channel")
        self.flush()

    def on_point(self, point: dict) -> None:
        """Records a point; a load sweep's last one also gets the sweep's `knee` (analysis.load_knee)."""
        self.doc["points"].append(point)
        if point.get("experiment") == "load" and self.planned and len(self.doc["points"]) >= self.planned:
            ours = self.doc["points"][-self.planned:]  # a search records several runs: this run's points
            point["knee"] = analysis.load_knee(ours)
        self.flush()

    def on_event(self, event: dict) -> None:
        if event.get("type") == "limits":
            self.doc["limits"] = event   # machine limits between the run's two CPUs
        elif event.get("type") == "clock":
            self.doc["clock"] = event.get("clock")   # the other end's clock fitted over the whole run
        elif event.get("type") == "warning":
            self.doc.setdefault("warnings", []).append(event["message"])   # what fabmeter warned of on stderr
        else:
            self.doc["engine_events"].append(event)
        self.flush()

    def finish(self, status: str, message: str = "", exit_code: int = 0, slo: Optional[dict] = None) -> None:
        if slo is not None:
            self.doc["slo"] = slo   # the verdict on config.slo's objectives (slo.evaluate)
        if self.doc["config"].get("params") is not None:
            # fabmeter doctor's cheap checks of the plan the engine started: made here, after the engines exited,
            # as their reads of /proc and /sys would take a measuring CPU on a small machine; every ending (ok,
            # failed, interrupted) comes here, and both engines' facts from their start line are in by now.
            self.doc["findings"] = doctor_record.findings(self.doc)
        self.doc["status"] = status
        self.doc["message"] = message
        self.doc["exit_code"] = exit_code
        self.doc["finished_at"] = now_iso()
        self.flush()

    def flush(self) -> None:
        if self.out is not None:
            write_json(self.out / "run.json", self.doc)
