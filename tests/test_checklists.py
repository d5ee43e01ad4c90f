"""docs/architecture.md's checklists held against the code they describe: a
member added to a contract, a hook to the experiments' defaults or a tool to
the serve's allow-list fails here until its checklist (and the other lists
that must follow it) names it."""

from __future__ import annotations

import re

import pytest

from conftest import REPO
from fabmeter.peers.base import PeerRun
from fabmeter.peers.registry import PEERS

ARCHITECTURE = REPO / "docs" / "architecture.md"


def checklist(title: str) -> str:
    """The text of `### Checklist: <title>`, up to the next heading."""
    text = ARCHITECTURE.read_text()
    found = re.search(rf"^### Checklist: {re.escape(title)}\n(.*?)(?=^#)", text + "\n#", re.M | re.S)
    assert found, f"architecture.md has no checklist '{title}'"
    return found.group(1)


def named(text: str) -> set[str]:
    """What the text names as code: `word`, `word(...)`, `word<...>`."""
    return {m.group(1) for m in re.finditer(r"`(\w+)", text)}


def missing(names, text: str) -> list[str]:
    return sorted(set(names) - named(text))


def test_transport_checklist_names_the_whole_contract():
    header = (REPO / "engine" / "include" / "fabmeter" / "transport.hpp").read_text()
    concept = re.search(r"^concept Transport = (.*?)^\}  // namespace fm", header, re.M | re.S).group(1)
    members = set(re.findall(r"\bc?t\.(\w+)\(", concept))             # required and optional members
    hooks = set(re.findall(r"^//\s+static [\w:<>]+ (\w+)\(", header, re.M))  # caps and the session's hooks
    unit = (REPO / "engine" / "src" / "experiment" / "run_points_for.cpp.in").read_text()
    hooks |= set(re.findall(r"requires \{ T::(\w+)\(", unit)) | set(re.findall(r"\b(\w+)_of<Def>", unit))
    assert {"tx_idle", "register_memory", "deregister_memory", "port_facts", "server_claim"} <= members | hooks
    text = checklist("a transport")
    assert not missing(members, text), f"the transport checklist leaves out members: {missing(members, text)}"
    assert not missing(hooks, text), f"the transport checklist leaves out hooks: {missing(hooks, text)}"


def test_experiment_checklist_names_every_hook_a_struct_may_hide():
    header = (REPO / "engine" / "src" / "experiment" / "experiment.hpp").read_text()
    defaults = re.search(r"^struct ExperimentDefaults \{(.*?)^\};", header, re.M | re.S).group(1)
    hooks = set(re.findall(r"^\s+static (?:constexpr )?[\w:<>]+ (\w+)\s*[=({]", defaults, re.M))
    assert {"kRemoteClock", "validate", "kOneSided"} <= hooks
    text = checklist("an experiment")
    assert not missing(hooks, text), f"the experiment checklist leaves out hooks: {missing(hooks, text)}"
    table = (REPO / "engine" / "src" / "experiment" / "table.hpp").read_text()
    assert "using Experiments =" in table and "Experiments" in named(text)
    assert "kExperiments" in (REPO / "engine" / "include" / "fabmeter" / "params.hpp").read_text()
    assert "EXPERIMENTS_HELP = {" in (REPO / "python" / "fabmeter" / "experiment_command.py").read_text()


def test_option_checklist_names_what_exists():
    text = checklist("an option or an option group")
    assert {"make_table", "kGroup", "kGroupMembers", "Params"} <= named(text)
    assert "make_table()" in (REPO / "engine" / "src" / "core" / "params.cpp").read_text()
    params = (REPO / "engine" / "include" / "fabmeter" / "params.hpp").read_text()
    assert "kGroupMembers" in params and "kGroup =" in params


@pytest.mark.parametrize("title", ["a transport", "an option or an option group", "an experiment", "a peer tool"])
def test_checklist_paths_exist(title):
    paths = re.findall(r"`((?:engine|python|scripts|tests|rdma|docs)/[\w./-]*)`", checklist(title))
    assert paths, title
    assert not [p for p in paths if not (REPO / p).exists()], "paths a checklist names that are not there"


def allowed_tools() -> list[str]:
    """The serve's allow-list: tool_names() in engine/src/session/tool_server.cpp."""
    code = (REPO / "engine" / "src" / "session" / "tool_server.cpp").read_text()
    body = re.search(r"tool_names\(\) \{(.*?)\n\}", code, re.S).group(1)
    return re.findall(r'"(\w+)"', body)


def requested_tools() -> set[str]:
    """Every tool a peer adapter asks a remote serve for, over each of its cases."""
    out = set()
    for peer in PEERS.values():
        for case in peer.cases:
            request = peer.request(case, PeerRun())
            if request is not None:
                out.add(request["tool"])
    return out


def test_peer_tool_checklist_holds():
    text = checklist("a peer tool")
    assert {"Peer", "PEERS", "request", "tool_names", "keys_of", "tool_argv"} <= named(text)
    code = (REPO / "engine" / "src" / "session" / "tool_server.cpp").read_text()
    assert "keys_of(" in code and "tool_argv(" in code and "decode_tool_request(" in code
    allowed = allowed_tools()
    assert len(allowed) == len(set(allowed)) > 0
    # Every tool an adapter requests is allowed there, and nothing is allowed that no adapter requests.
    assert requested_tools() == set(allowed)
    # security.md lists the allow-list, each tool by name.
    security = (REPO / "docs" / "security.md").read_text()
    section = re.search(r"^## Peer tools a client may start\n(.*?)^## ", security, re.M | re.S).group(1)
    assert not missing(allowed, section), f"security.md's allow-list leaves out {missing(allowed, section)}"
    # The glossary's "peer tool" names each.
    glossary = re.search(r"^- \*\*peer tool\*\*: (.*?)\n- ", ARCHITECTURE.read_text(), re.M | re.S).group(1)
    assert not [t for t in PEERS if t not in glossary], "architecture.md's glossary leaves out a peer tool"
    # Each adapter in a module of its own, its package installed by the build's or the RDMA guest's script.
    assert len({type(p).__module__ for p in PEERS.values()}) == len(PEERS)
    installs = (REPO / "scripts" / "install-deps.sh").read_text() + (REPO / "rdma" / "guest" / "build.sh").read_text()
    assert not [p.package for p in PEERS.values() if not re.search(rf"\s{re.escape(p.package)}\s", installs)]
