"""Reading a results folder that may be hostile: JSON documents and raw .npy samples, each refused with a
one-line reason (ValueError) instead of being trusted.

A results folder can come from anyone (a colleague's tarball, a CI
artifact), so the report reads only regular files that resolve inside the
folder it was given, and allocates nothing a file's header claims before the
file's real size agrees with it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path, PurePosixPath

import numpy as np

NPY_KINDS = "fiu"   # samples are numbers: float, signed or unsigned integers (never objects or records)


def inside(base: Path, path: Path) -> Path:
    """`path` resolved (symlinks followed), if it is a regular file inside `base`; else ValueError."""
    resolved = path.resolve()
    if not resolved.is_relative_to(base.resolve()):
        raise ValueError("resolves outside its folder (a symlink)")
    if not resolved.is_file():   # a FIFO or device would block or never end
        raise ValueError("not a regular file")
    return resolved


def read_json(root: Path, path: Path):
    """The JSON document at `path`, a file inside `root`."""
    try:
        return json.loads(inside(root, path).read_text())
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(e.strerror if isinstance(e, OSError) and e.strerror else str(e)) from None


def sample_path(folder: Path, name) -> Path:
    """The file a point's `samples` entry names: a relative path inside the run's own folder."""
    if not isinstance(name, str) or not name:
        raise ValueError("not a file name")
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError("not a path inside the run's folder")
    return inside(folder, folder / rel)


def read_npy(path: Path) -> np.ndarray:
    """A 1-D numeric .npy file as float64, its header checked against the file's size before anything is read."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f".npy version {version[0]}.{version[1]} is not read")
        if dtype.kind not in NPY_KINDS or dtype.hasobject or len(shape) != 1:
            raise ValueError(f"not a 1-D array of numbers (dtype {dtype.str}, shape {shape})")
        claimed = f.tell() + shape[0] * dtype.itemsize
        size = os.fstat(f.fileno()).st_size
        if claimed != size:
            raise ValueError(f"its header claims {shape[0]:,} values ({claimed:,} B), the file holds {size:,} B")
        a = np.fromfile(f, dtype=dtype, count=shape[0])
    return a.astype(np.float64, copy=False)


def number(value):
    """`value` if it is a finite JSON number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return value if math.isfinite(value) else None
    except OverflowError:   # an integer beyond a float's range
        return None


def obj(value) -> dict:
    """`value` if it is a JSON object, else {} (a document's object of the wrong type is as if absent)."""
    return value if isinstance(value, dict) else {}
