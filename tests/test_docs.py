"""The README and docs/ against the code: docs/cli.md's option tables are
what scripts/gen-cli-doc.py makes from the built engine, every make target,
file path and option the docs name exists, and no doc speaks of work
sessions, stops or issue numbers."""

from __future__ import annotations

import glob
import json
import re
import subprocess

import pytest

from conftest import REPO, cli_cmd, cli_env, script_module
from test_registry import transport_lines

# The files this test holds to the code. (docs/suites.md names example files
# in its error messages, e.g. suites/x.toml.)
DOCS = [REPO / "README.md"] + [REPO / "docs" / f for f in
                               ("cli.md", "transports.md", "architecture.md", "performance.md", "security.md",
                                "testing.md", "results.md", "monitoring.md")] + \
    sorted((REPO / "docs" / "measurements").glob("*.md"))
TOP = ("engine/", "python/", "tests/", "scripts/", "suites/", "rdma/", "docs/", ".ci/", "contrib/")


def gen_module():
    return script_module("gen_cli_doc", "scripts/gen-cli-doc.py")


def code_texts(text: str) -> list[str]:
    """Inline code spans and the lines of fenced code blocks."""
    out = []
    for i, block in enumerate(re.split(r"^```.*$", text, flags=re.M)):
        if i % 2:
            out += [line for line in block.splitlines() if line.strip()]
        else:
            out += re.findall(r"`([^`\n]+)`", block)
    return out


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, flags=re.M))


def test_cli_doc_tables_are_generated_from_the_engine(engine):
    gen = gen_module()
    info = json.loads(subprocess.run([str(engine), "options"], capture_output=True, text=True, check=True).stdout)
    text = (REPO / "docs" / "cli.md").read_text()
    assert gen.generate(text, info) == text, \
        "docs/cli.md's option tables are stale: run .venv/bin/python scripts/gen-cli-doc.py"
    for o in info["options"]:  # every option has its row, under its group
        assert f"| `{o['key']}` |" in text, o["name"]
        assert f"### Group `{o['group']}`" in text, o["group"]


def test_generated_tables_follow_the_engine(engine):
    # A changed help text or a new option must change the document.
    gen = gen_module()
    info = json.loads(subprocess.run([str(engine), "options"], capture_output=True, text=True, check=True).stdout)
    text = (REPO / "docs" / "cli.md").read_text()
    info["options"][0]["help"] += " (changed)"
    info["options"].append({**info["options"][1], "name": "new-knob", "key": "new_knob", "group": "load"})
    new = gen.generate(text, info)
    assert "(changed)" in new and "`--new-knob" in new and "### Group `load`" in new


def test_make_targets_named_exist_and_all_are_in_the_readme():
    targets = makefile_targets()
    assert {"demo", "test", "build"} <= targets
    for doc in DOCS:
        for code in code_texts(doc.read_text()):
            for t in re.findall(r"(?:^|[\s(])make ([a-z][\w-]*)", code):
                assert t in targets, f"{doc.name}: `make {t}` is not a Makefile target"
    readme = (REPO / "README.md").read_text()
    for t in targets:
        assert f"make {t}" in readme, f"README.md does not list `make {t}`"
    # The two commands come first.
    first = code_texts(readme)[:2]
    assert first[0].startswith("make demo") and first[1].startswith("make test"), first


def test_make_knobs_default_to_what_the_readme_says():
    """Each `VAR` the README's make table gives a default (`FUZZ_SECONDS`
    each (default 300)) has that value in make's own database, read without
    running a recipe: a Makefile line run into the one before it fails here."""
    db = subprocess.run(["make", "-pnq", "-f", "Makefile", "__no_such_target__"], cwd=REPO,
                        capture_output=True, text=True).stdout
    values = dict(re.findall(r"^([A-Z_]+) :?= (.*)$", db, flags=re.M))
    rows = [line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `make ")]
    named = [(var, default) for row in rows for var, default in re.findall(r"`([A-Z_]+)`[^|]*?\(default (\d+)", row)]
    assert {v for v, _ in named} >= {"FUZZ_SECONDS", "FAULT_ROUNDS", "WATCH_SECONDS"}, named
    for var, default in named:
        assert values.get(var) == default, f"make's {var} is {values.get(var)!r}, the README says {default}"
    assert values.get("CCACHE_NOHASHDIR") == "true"


def test_scripts_are_listed_in_the_readme():
    readme = (REPO / "README.md").read_text()
    for f in sorted(p for p in (REPO / "scripts").iterdir() if p.name != "__pycache__"):   # Python's bytecode
        assert f.name in readme, f"README.md does not list scripts/{f.name}"


def candidate_paths(doc) -> set[str]:
    text = doc.read_text()
    found = set()
    for code in code_texts(text):
        for tok in re.findall(r"[^\s;:()]+", code):
            tok = tok.rstrip(",.")
            if tok.startswith(TOP):
                found.add(tok)
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):  # links, relative to the document
        if "://" not in target:
            found.add(str((doc.parent / target).resolve().relative_to(REPO)))
    return found


def expand(path: str) -> list[str]:
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    return [q for alt in m.group(1).split(",") for q in expand(path[:m.start()] + alt + path[m.end():])]


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_paths_named_exist(doc):
    missing = []
    for path in sorted(candidate_paths(doc)):
        path = path.rstrip(".")
        if "<" in path or re.search(r"[A-Z]{3,}", path):  # a placeholder: fuzz_<name>.cpp, rawpp_LIB
            continue
        for p in expand(path):
            if not (glob.glob(str(REPO / p)) if "*" in p else (REPO / p).exists()):
                missing.append(p)
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def test_readme_layout_names_existing_paths():
    text = (REPO / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```")[1]
    base, missing = "", []
    for line in block.splitlines():
        if not line.strip():
            continue
        names = re.split(r"\s{2,}", line.strip())[0].split()
        if not line.startswith(" "):
            base = names[0] if names[0].endswith("/") else ""
            paths = names
        else:
            paths = [base + n for n in names]
        missing += [p for p in paths if not (REPO / p).exists()]
    assert not missing, f"README.md's layout names paths that do not exist: {missing}"


def help_texts(engine) -> list[str]:
    """`fabmeter --help`, every command's --help and `fabmeter-engine --help`."""
    env = cli_env("docs")
    env["FABMETER_ENGINE"] = str(engine)
    top = subprocess.run(cli_cmd("--help"), env=env, capture_output=True, text=True, check=True).stdout
    commands = re.search(r"\{([^}]*)\}", top)
    commands = commands.group(1).split(",") if commands else re.findall(r"^    (\w+)\s", top, flags=re.M)
    texts = [top]
    for c in commands:
        texts.append(subprocess.run(cli_cmd(c, "--help"), env=env, capture_output=True, text=True, check=True).stdout)
    texts.append(subprocess.run([str(engine), "--help"], capture_output=True, text=True, check=True).stdout)
    return texts


def known_options(engine) -> set[str]:
    info = json.loads(subprocess.run([str(engine), "options"], capture_output=True, text=True, check=True).stdout)
    opts = {"--" + o["name"] for o in info["options"]}
    for t in help_texts(engine):
        opts |= set(re.findall(r"--[a-z][a-z0-9-]*", t))
    return opts


def test_options_named_exist(engine):
    known = known_options(engine)
    assert {"--cpus", "--out", "--server", "--token-file", "--rounds", "--bw-size", "--max-sessions"} <= known
    ours = re.compile(r"^(\$ )?(--|(\.venv/bin/|\./build/engine/)?fabmeter(-engine)?\b)")
    bad = []
    for doc in DOCS:
        for code in code_texts(doc.read_text()):
            code = code.strip()
            if not ours.match(code):  # another tool's command line (taskset, env, openssl, ...)
                continue
            bad += [f"{doc.name}: {o}" for o in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", code) if o not in known]
    assert not bad, f"options the docs name that no command takes: {bad}"


def test_transport_table_lists_each_transports_own_options(engine):
    info = json.loads(subprocess.run([str(engine), "options"], capture_output=True, text=True, check=True).stdout)
    text = (REPO / "docs" / "transports.md").read_text()
    rows = [r for r in text.splitlines() if r.startswith("| `") and "engine/src/transport/" in r]
    named = set()
    for row in rows:
        cells = row.split(" | ")
        transports = re.findall(r"`(\w+)`", cells[0])
        named |= set(transports)
        listed = set(re.findall(r"--[a-z][a-z0-9-]*", cells[-1]))
        for tr in transports:
            own = {"--" + o["name"] for o in info["options"]
                   if o["transports"] != "all" and tr in o["transports"].split(",")}
            assert listed == own, f"transports.md, {tr}: lists {sorted(listed)}, the engine says {sorted(own)}"
    assert named == set(transport_lines()), "one row per fm_transport line of engine/CMakeLists.txt, built or not"


def test_docs_are_references_not_diaries():
    # Say what was meant, not which work session, stop or issue it came from.
    diary = re.compile(r"\b(stop|session) [0-9]+\b|\bissue #?[0-9]+\b", re.I)
    docs = [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md"))
    bad = [f"{d.relative_to(REPO)}:{n}: {line.strip()}" for d in docs
           for n, line in enumerate(d.read_text().splitlines(), 1) if diary.search(line)]
    assert not bad, "docs that speak of sessions, stops or issue numbers:\n" + "\n".join(bad)


# "peer" names a peer tool (`fabmeter peers`, its adapters, peers.json) and nothing else: a session's other end
# is "the other end", a serve's relay targets its --relay-to, a mesh host's round mate its partner.
OTHER_PEER = re.compile(r"\b(?:the|a|an|its|lost|frozen|killed|busy|unauthenticated) peers?\b"
                        r"(?![ -](?:tools?|adapters?|points?|results?|rows?|figures?|comparisons?)\b|\.json|-raw)",
                        re.I)


def test_peer_means_a_peer_tool(engine):
    # The dated measurement files record what was said then.
    texts = {d.relative_to(REPO): d.read_text() for d in DOCS if "measurements" not in d.parts}
    texts.update({f"--help {i}": t for i, t in enumerate(help_texts(engine))})
    bad = [f"{where}: {line.strip()}" for where, text in texts.items() for line in text.splitlines()
           if OTHER_PEER.search(line)]
    assert not bad, "'peer' for something other than a peer tool:\n" + "\n".join(bad)
    assert "--peers" not in "\n".join(texts.values()), "serve's relay list is --relay-to"


# In the engine's source the other end is "remote" or "the other end"; "peer" stays only for a peer tool (and
# `peers`, its command and package), in `getpeername`, and in the status whose name the engine prints
# (`peer_lost`: its error lines, a flow's "status").
ENGINE_PEER = re.compile(r"\w*peer\w*(?! tools?\b)", re.I)
ENGINE_PEER_KEPT = {"getpeername", "peer_lost", "peers"}


def engine_peer_words(engine_dir=REPO / "engine") -> list[str]:
    files = [p for p in sorted(engine_dir.rglob("*"))
             if p.is_file() and p.suffix in {".cpp", ".hpp", ".h", ".in", ".txt"}]
    return [f"{p.relative_to(engine_dir)}:{n}: {line.strip()}" for p in files
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
            if any(m.group(0) not in ENGINE_PEER_KEPT for m in ENGINE_PEER.finditer(line))]


def test_engine_says_remote_for_the_other_end():
    bad = engine_peer_words()
    assert not bad, "'peer' in the engine for something other than a peer tool:\n" + "\n".join(bad)


def test_readmes_first_run_looks_as_the_command_prints_it(engine):
    """README's `fabmeter lat -t shm` sample has today's shape: the same lines in the same order, each table's
    column heads and row labels as a real run prints them (the figures are the machine's)."""
    readme = (REPO / "README.md").read_text()
    sample = re.search(r"^\$ \.venv/bin/fabmeter lat -t shm\n(.*?)^```", readme, re.S | re.M)
    assert sample, "README has no first-run sample"
    env = cli_env("docs")
    env["FABMETER_ENGINE"] = str(engine)
    r = subprocess.run(cli_cmd("lat", "-t", "shm", "-n", "2000"), env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr

    def shape(text: str) -> list[str]:
        """Each line without its figures: numbers (and the host's name) blanked, runs of spaces made one."""
        text = re.sub(r"\(on host [^)]*\)", "(on host H)", text)
        text = re.sub(r"(?<![\w.])[-+]?\d[\d,]*(\.\d+)?(?![\w.])", "N", text)
        return [re.sub(r"[ -]{2,}", " ", line).strip() for line in text.splitlines() if line.strip()]

    # Only the iterations differ by design: the sample runs the default, the test -n 2000.
    # A warning that an end was kept off its CPU is the machine's, as the figures are.
    printed = "\n".join(ln for ln in r.stdout.splitlines() if not ln.startswith("warning: "))
    assert shape(sample.group(1)) == shape(printed), r.stdout
