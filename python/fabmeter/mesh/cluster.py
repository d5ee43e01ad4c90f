"""What a cluster's launcher says: the hosts (a Slurm host list) and this process's rank.

`expand_hostlist("a[1-3,7],b5")` is what `scontrol show hostnames` prints
for it, one per entry: top-level commas separate entries, a bracket holds
comma-separated numbers and LO-HI ranges, each number printed as wide as
its range's LO ("node[01-64]": node01 .. node64; "n[8-10]": n8, n9, n10),
several brackets in one entry multiply, the first varying slowest
("r[1-2]n[1-2]": r1n1, r1n2, r2n1, r2n2). Pure functions, no Slurm needed.
"""

from __future__ import annotations

import itertools
import re
from typing import Optional

MAX_HOSTS = 65536                # a list expanding beyond this is a typo ("node[0-999999999]")
# Where a launcher puts the rank, first found wins (mpirun inside a Slurm allocation also inherits
# SLURM_PROCID from the batch step: Open MPI's own variable comes first); each with the variables that
# may hold the number of ranks, first found wins (None: none says, the size is not checked).
RANK_ENV = (("OMPI_COMM_WORLD_RANK", ("OMPI_COMM_WORLD_SIZE",)),
            ("PMIX_RANK", ("OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_NTASKS", "SLURM_NPROCS")),
            ("PMI_RANK", ("PMI_SIZE",)),
            ("SLURM_PROCID", ("SLURM_NTASKS", "SLURM_NPROCS")))
# Slurm's node list of the step (srun), else of the job (sbatch, salloc).
NODELIST_ENV = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostListError(ValueError):
    pass


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            if depth:
                raise HostListError(f"nested '[' in '{text}'")
            depth = 1
        elif c == "]":
            if not depth:
                raise HostListError(f"']' without '[' in '{text}'")
            depth = 0
        elif c == "," and not depth:
            out.append(text[start:i])
            start = i + 1
    if depth:
        raise HostListError(f"'[' without ']' in '{text}'")
    out.append(text[start:])
    return out


def _numbers(inside: str, entry: str) -> list[str]:
    """The numbers a bracket's content stands for, each as wide as its range's LO."""
    out: list[str] = []
    for part in inside.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise HostListError(f"'[{inside}]' in '{entry}': expected numbers and LO-HI ranges")
        lo, hi = m.group(1), m.group(2) if m.group(2) is not None else m.group(1)
        if int(hi) < int(lo):
            raise HostListError(f"'{part}' in '{entry}': the range runs backwards")
        if len(out) + int(hi) - int(lo) + 1 > MAX_HOSTS:
            raise HostListError(f"'{entry}' expands to more than {MAX_HOSTS} hosts")
        out += [str(v).zfill(len(lo)) for v in range(int(lo), int(hi) + 1)]
    return out


def _expand_entry(entry: str) -> list[str]:
    pieces = re.split(r"\[([^\]]*)\]", entry)      # literal, bracket, literal, bracket, ..., literal
    choices = [[p] if i % 2 == 0 else _numbers(p, entry) for i, p in enumerate(pieces)]
    total = 1
    for c in choices:
        total *= len(c)
    if total > MAX_HOSTS:
        raise HostListError(f"'{entry}' expands to more than {MAX_HOSTS} hosts")
    return ["".join(combo) for combo in itertools.product(*choices)]


def expand_hostlist(text: str) -> list[str]:
    """The hosts of a Slurm host list expression (also a plain A,B,C list, IPv4 or IPv6 addresses), in order,
    as `scontrol show hostnames` gives them. Raises HostListError for an empty entry or a malformed bracket."""
    hosts: list[str] = []
    for entry in _split_top(text.strip()):
        entry = entry.strip()
        if not entry:
            raise HostListError(f"an empty host in '{text}'")
        hosts += _expand_entry(entry) if "[" in entry else [entry]
        if len(hosts) > MAX_HOSTS:
            raise HostListError(f"'{text[:80]}' expands to more than {MAX_HOSTS} hosts")
    return hosts


def slurm_hosts(environ: dict) -> Optional[tuple[list[str], str]]:
    """(hosts, variable) from Slurm's node list in the environment, None outside Slurm."""
    for var in NODELIST_ENV:
        if environ.get(var):
            return expand_hostlist(environ[var]), var
    return None


def launcher_rank(environ: dict) -> Optional[tuple[int, Optional[int], str]]:
    """(rank, size or None, rank variable) from Open MPI's, PMIx's, PMI's or Slurm's environment; None if no
    launcher's rank variable is set. Raises ValueError naming the variable that is not a number."""
    for rank_var, size_vars in RANK_ENV:
        if rank_var not in environ:
            continue
        size_var = next((v for v in size_vars if v in environ), None)
        try:
            rank = int(environ[rank_var])
            size = int(environ[size_var]) if size_var else None
        except ValueError:
            raise ValueError(f"${rank_var}" + (f"/${size_var}" if size_var else "") + " are not numbers") from None
        return rank, size, rank_var
    return None
