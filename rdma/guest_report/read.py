"""Reading what a case left in OUTDIR/raw: its files, JSON lines, recorded options."""
import json
import re


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def results_json(raw, name, file):
    """(the JSON document NAME.results/FILE holds, None) or (None, the problem reading it)."""
    try:
        with open(f"{raw}/{name}.results/{file}") as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, f"no {file}: {e}"


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def option(cmd, name):
    """Value of --name in a recorded command line, or None."""
    m = re.search(r"--%s[ =](\S+)" % re.escape(name), cmd)
    return m.group(1) if m else None


def read_kv(path):
    out = {}
    for line in read(path).splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def nonempty_lines(text):
    return [l for l in text.splitlines() if l.strip()]


def libfabric_as_loaded(raw, name, version) -> bool:
    """The libfabric version a case reports ("MAJOR.MINOR", any release the guest may have) is the one it
    ran on: fabtests' own where NAME.libfabric names it ("libfabric X.Y.Z (...)"), else the guest's."""
    match = re.fullmatch(r"(\d+)\.(\d+)", str(version or ""))
    loaded = re.match(r"libfabric (\d+)\.(\d+)", read(f"{raw}/{name}.libfabric"))
    return bool(match) and (loaded is None or match.groups() == loaded.groups())
