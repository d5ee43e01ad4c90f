"""--bundle FILE.tar.gz: what a bug report needs: the findings, the RDMA and fabric tools' view of the devices
(where installed), lscpu, the kernel command line and the last run.json; --mask: hostnames and addresses
replaced in every member (mask.py)."""

from __future__ import annotations

import io
import json
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Optional

from fabmeter.doctor.finding import Finding
from fabmeter.doctor.mask import Masker
from fabmeter.errors import EXIT_USAGE, FabmeterError

TOOL_TIMEOUT_S = 20
DEFAULT_RESULTS = Path("results")
TOOLS = (("ibv_devinfo-v.txt", ["ibv_devinfo", "-v"]), ("fi_info.txt", ["fi_info"]),
         ("ucx_info-d.txt", ["ucx_info", "-d"]), ("lscpu.txt", ["lscpu"]))


def _tool(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return f"{argv[0]}: not installed\n"
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{' '.join(argv)}: {e}\n"
    return f"$ {' '.join(argv)}  (exit {out.returncode})\n{out.stdout}{out.stderr}"


def last_run(folder: Optional[str]) -> Optional[Path]:
    """DIR/run.json (--run), else the newest run.json under ./results; None where there is none."""
    if folder is not None:
        path = Path(folder) / "run.json"
        if not path.is_file():
            raise FabmeterError(f"--run {folder}: no run.json there", EXIT_USAGE)
        return path
    found = sorted(DEFAULT_RESULTS.glob("**/run.json"), key=lambda p: p.stat().st_mtime) \
        if DEFAULT_RESULTS.is_dir() else []
    return found[-1] if found else None


def _hostnames(run_text: str) -> set[str]:
    """This host's names and every hostname a run.json records (both ends)."""
    names = {socket.gethostname(), socket.getfqdn()}
    names |= {n.split(".")[0] for n in names}

    def walk(value):
        if isinstance(value, dict):
            for k, v in value.items():
                if k == "hostname" and isinstance(v, str):
                    names.add(v)
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
    try:
        walk(json.loads(run_text))
    except ValueError:
        pass
    return names


def members(findings: list[Finding], run_folder: Optional[str]) -> dict[str, str]:
    run = last_run(run_folder)
    out = {"findings.json": json.dumps([f.as_json() for f in findings], indent=1) + "\n"}
    out.update((name, _tool(argv)) for name, argv in TOOLS)
    out["cmdline.txt"] = Path("/proc/cmdline").read_text()
    out["run.json"] = run.read_text() if run else "no run.json (give --run DIR)\n"
    return out


def write(file: str, findings: list[Finding], run_folder: Optional[str], mask: bool) -> None:
    texts = members(findings, run_folder)
    if mask:
        masker = Masker(_hostnames(texts["run.json"]))
        texts = {name: masker(text) for name, text in texts.items()}
    try:
        with tarfile.open(file, "w:gz") as tar:
            for name, text in texts.items():
                data = text.encode()
                info = tarfile.TarInfo(f"fabmeter-doctor/{name}")
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))
    except OSError as e:
        raise FabmeterError(f"--bundle {file}: {e.strerror or e}", EXIT_USAGE) from None
