"""`fabmeter mesh --launch ssh|local`: rank 0 starts every other rank, over
ssh or (local) as processes on this machine.

Each rank r > 0 is `fabmeter mesh --hosts ... --rank r` with rank 0's
experiment, pattern, schedule, port and options, run on hosts[r] by the
user's ssh (BatchMode: it never asks; ConnectTimeout: the control
timeout). The token goes down ssh's standard input into the remote
shell's FABMETER_TOKEN, never onto a command line another user could read
in ps. ssh's standard input then stays open: the remote shell ends its rank
when it closes, so a rank never outlives rank 0 or its ssh (without a
terminal nothing else would tell it). A rank whose ssh ends before it
joined fails the mesh at once with what ssh said. --launch local runs the
same remote command under `sh -c` here instead of ssh: the same token
handling, the same watcher, the same checks.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Optional

from fabmeter import procs
from fabmeter.errors import EXIT_RUNTIME, EXIT_USAGE, FabmeterError

STDERR_KEPT = 20                 # lines of a rank's stderr kept for its error message


@dataclass
class Remote:
    rank: int
    host: str
    proc: subprocess.Popen
    stderr: list[str] = field(default_factory=list)

    def last_words(self) -> str:
        lines = [ln.strip() for ln in self.stderr if ln.strip()]
        return lines[-1] if lines else f"exited with {self.proc.returncode}"


def remote_command(remote_fabmeter: str, mesh_args: list[str], with_token: bool) -> str:
    """The POSIX shell command line run on the remote host (ssh hands it to the user's shell there): the token
    from the first line of standard input, the rank in the background, and a watcher that ends it when
    standard input closes; the rank's exit status is the command's."""
    words = " ".join(shlex.quote(a) for a in ["mesh", *mesh_args])
    token = "IFS= read -r FABMETER_TOKEN && export FABMETER_TOKEN && " if with_token else ""
    # A background list's standard input is /dev/null unless redirected: the watcher reads ssh's through fd 3.
    return (f"{token}exec 3<&0; {{ {remote_fabmeter} {words} </dev/null 3<&- & p=$!; "
            "(cat <&3 >/dev/null; kill -TERM $p) >/dev/null 2>&1 & wait $p; }")


def ssh_argv(ssh: str, host: str, timeout_s: float, command: str) -> list[str]:
    try:
        base = shlex.split(ssh)
    except ValueError as e:
        raise FabmeterError(f"--ssh: {e}", EXIT_USAGE) from None
    if not base:
        raise FabmeterError("--ssh: empty command", EXIT_USAGE)
    # "--": a host is never read as an option (a hostfile line "-oProxyCommand=..." would run it).
    return [*base, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, round(timeout_s))}", "--", host, command]


class Launched:
    """The ssh (or local sh) processes of ranks 1..n-1."""

    def __init__(self, remotes: list[Remote], how: str = "ssh"):
        self.remotes, self.how = remotes, how

    def check(self, joined) -> None:
        """Raises (exit 3) if a rank that has not joined has already lost its ssh."""
        for r in self.remotes:
            if r.rank not in joined and r.proc.poll() is not None:
                raise FabmeterError(f"rank {r.rank} ({r.host}): {self.how} ended before the rank joined: "
                                    f"{r.last_words()}", EXIT_RUNTIME)

    def stop(self, wait_s: float) -> None:
        """Waits up to wait_s for each rank to end by itself (it does once rank 0 says done; 0: not at all),
        then closes its standard input (the remote shell ends the rank) and ends its ssh."""
        for r in self.remotes:
            try:
                r.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
        for r in self.remotes:
            _close(r.proc.stdin)
        for r in self.remotes:
            procs.reap(r.proc, 2.0)


def start(hosts: list[str], mesh_args, ssh: Optional[str], remote_fabmeter: str, token: bytes,
          timeout_s: float) -> Launched:
    """ssh to hosts[1:] (ssh None: a local shell here), each running its rank; `mesh_args(rank)` is that rank's
    argument list."""
    how = "ssh" if ssh is not None else "local"
    if b"\n" in token or b"\r" in token:
        raise FabmeterError(f"--launch {how}: the token must be one line (it goes down the rank's standard input)",
                            EXIT_USAGE)
    remotes = []
    try:
        for rank, host in enumerate(hosts[1:], start=1):
            command = remote_command(remote_fabmeter, mesh_args(rank), bool(token))
            argv = ssh_argv(ssh, host, timeout_s, command) if ssh is not None else ["sh", "-c", command]
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            remote = Remote(rank, host, proc)
            remotes.append(remote)
            try:
                proc.stdin.write(token + b"\n")
                proc.stdin.flush()
            except OSError:
                pass        # ssh already gone: check() reports it
            threading.Thread(target=_keep_stderr, args=(remote,), daemon=True).start()
    except OSError as e:
        Launched(remotes, how).stop(0)
        what = (ssh.split() or [ssh])[0] if ssh is not None else "sh"
        raise FabmeterError(f"--launch {how}: cannot run {what!r}: {e.strerror}", EXIT_USAGE) from e
    return Launched(remotes, how)


def _close(stream) -> None:
    try:
        stream.close()
    except OSError:
        pass


def _keep_stderr(remote: Remote) -> None:
    for raw in remote.proc.stderr:
        remote.stderr.append(raw.decode(errors="replace").rstrip("\n"))
        del remote.stderr[:-STDERR_KEPT]
