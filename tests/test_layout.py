"""The house's size rules (docs/architecture.md, Where each file is): no
source file over 800 lines, and no function of an experiment over 120 lines.
A unit that grows past them fails here until it is split by job."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import REPO

MAX_FILE_LINES = 800
MAX_EXPERIMENT_FUNCTION_LINES = 120
SOURCE_SUFFIXES = {".c", ".cpp", ".h", ".hpp", ".in", ".py", ".sh"}


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / f for f in out.split("\0") if f]


def is_source(path: Path) -> bool:
    if path.suffix in SOURCE_SUFFIXES:
        return True
    try:
        with path.open("rb") as f:
            return f.read(2) == b"#!"  # a script without a suffix (.ci/run, scripts/compile-cached)
    except OSError:
        return False


def test_no_source_file_over_the_limit():
    sources = [p for p in tracked() if p.is_file() and is_source(p)]
    assert len(sources) > 300, "git ls-files found too few sources: is this a checkout?"
    long = {str(p.relative_to(REPO)): n for p in sources
            if (n := p.read_bytes().count(b"\n")) > MAX_FILE_LINES}
    assert not long, f"over {MAX_FILE_LINES} lines (split by job): {long}"


def functions(where: Path) -> dict[str, int]:
    """Each C++ function under WHERE (path:name:line) and its length in lines, where universal-ctags reads its end."""
    ctags = shutil.which("ctags")
    assert ctags, "universal-ctags is missing (scripts/install-deps.sh --test installs it)"
    out = subprocess.run([ctags, "-x", "--_xformat=%N\t%n\t%e\t%F", "--languages=C++", "--langmap=C++:+.in",
                          "--kinds-C++=f", "--fields=+ne", "-R", str(where)],
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        name, start, end, path = line.split("\t")
        if end.isdigit():
            found[f"{path}:{name}:{start}"] = int(end) - int(start) + 1
    return found


def test_no_experiment_function_over_the_limit():
    found = functions(REPO / "engine" / "src" / "experiment")
    # The reader must see the experiments' loops, or the limit holds nothing.
    assert any(":lat_client:" in k for k in found) and any(":bw_loop:" in k for k in found), sorted(found)[:20]
    long = {k: n for k, n in found.items() if n > MAX_EXPERIMENT_FUNCTION_LINES}
    assert not long, f"experiment functions over {MAX_EXPERIMENT_FUNCTION_LINES} lines: {long}"


def test_the_reader_sees_a_long_function(tmp_path):
    """The function reader counts a function's whole body (a 130-line one reads as 130)."""
    body = "\n".join(f"  x += {i};" for i in range(127))
    (tmp_path / "long.hpp").write_text(f"int long_one(int x) {{\n{body}\n  return x;\n}}\n")
    assert functions(tmp_path) == {f"{tmp_path / 'long.hpp'}:long_one:1": 130}
