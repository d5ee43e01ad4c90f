"""contrib/: the monitoring kit. Prometheus' own promtool checks the scrape
config, the alert rules and the Grafana panels' queries, and fires each
alert on the series of its unit test file; every metric that a rule or a
panel names is one that a real `fabmeter watch` publishes (four serves on
127.0.0.x with a token, scraped over its --metrics-port); systemd-analyze
verifies the units, and fabmeter serve runs with no more than the
capabilities its unit leaves it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import free_port, start_serves, stop_serves

REPO = Path(__file__).resolve().parent.parent
PROMETHEUS = REPO / "contrib" / "prometheus"
RULES = PROMETHEUS / "fabmeter.rules.yml"
DASHBOARD = REPO / "contrib" / "grafana" / "fabmeter-watch.json"
UNITS = sorted((REPO / "contrib" / "systemd").glob("*.service"))
# Prometheus' own series (up, scrape_*) are not watch's: only these families are checked against its scrape.
OURS = re.compile(r"\b(?:fabmeter|process)_[a-z0-9_]+\b")


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess:
    if not shutil.which("promtool"):
        pytest.skip("promtool missing (scripts/install-deps.sh --test installs Debian's prometheus)")
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_promtool_checks_the_scrape_config_and_the_rules():
    r = promtool("check", "config", "prometheus.yml")
    assert r.returncode == 0 and "1 rule files found" in r.stdout, r.stdout + r.stderr
    r = promtool("check", "rules", RULES.name)
    assert r.returncode == 0, r.stdout + r.stderr


def test_each_alert_fires_on_its_series():
    r = promtool("test", "rules", "fabmeter.rules.test.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    tested = set(re.findall(r"alertname: (\w+)", (PROMETHEUS / "fabmeter.rules.test.yml").read_text()))
    assert tested == set(re.findall(r"- alert: (\w+)", RULES.read_text()))


def dashboard_queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    panels = [p for top in dash["panels"] for p in (top, *top.get("panels", []))]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids are not unique"
    queries = [t["expr"] for p in panels for t in p.get("targets", [])]
    for p in panels:
        if p["type"] != "row":
            assert p["targets"] and p["datasource"]["uid"] == "${datasource}", p["title"]
    return queries + [v["query"]["query"] for v in dash["templating"]["list"] if v["type"] == "query"]


def test_every_panel_query_is_promql(tmp_path):
    """promtool parses each panel's query as a recording rule's, Grafana's variables given values."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for top in dash["panels"] for p in (top, *top.get("panels", [])) for t in p.get("targets", [])]
    assert exprs
    given = {"$window": "5m", "$__range": "1h"}
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"panel:query{i}", "expr": re.sub(r"\$\w+", lambda m: given.get(m.group(0), m.group(0)), e)}
        for i, e in enumerate(exprs)]}]}
    (tmp_path / "panels.yml").write_text(json.dumps(rules))        # JSON is YAML
    r = promtool("check", "rules", "panels.yml", cwd=tmp_path)
    assert r.returncode == 0 and f"{len(exprs)} rules found" in r.stdout, r.stdout + r.stderr


def published_names(text: str) -> set[str]:
    """Every sample's name and every family a scrape declares (# TYPE), also one without samples now (no outlier
    host, say)."""
    names = set(re.findall(r"^# TYPE (\S+) ", text, flags=re.M))
    names |= set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, flags=re.M))
    return names


def test_every_metric_a_rule_or_panel_names_is_in_a_real_scrape(fm, token_file):
    named = {m for text in (RULES.read_text(), *dashboard_queries()) for m in OURS.findall(text)}
    hosts = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]    # a ring: 4 pairs, as many as outliers need
    port = free_port()
    serves = start_serves(fm, hosts, port, token_file)
    metrics_port = free_port()
    # --slo publishes the SLO families; two pairs a round started --round-lead apart, the round start skew.
    watch = fm.popen("watch", "--hosts", ",".join(hosts), "--pattern", "ring", "--serve-port", port, "-t", "tcp",
                     "--experiment", "lat", "--poll", "event", "-n", "200", "--warmup", "20", "--slo", "p99<=10s",
                     "--token-file", token_file,
                     "--interval", "0.2", "--round-lead", "0.2", "--metrics-port", metrics_port)
    try:
        text, deadline = "", time.monotonic() + 60
        while not re.search(r"^fabmeter_sweeps_total [1-9]", text, flags=re.M):
            assert watch.poll() is None and time.monotonic() < deadline, "no sweep ended within 60 s"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:         # not listening yet
                pass
            time.sleep(0.2)
    finally:
        if watch.poll() is None:
            watch.send_signal(signal.SIGTERM)
        _, err = watch.communicate(timeout=30)
        stop_serves(serves)
    # Every pair measured: the outlier families need 4 judged links.
    assert re.search(r'^fabmeter_sweep_pairs\{result="ok"\} 4\.0$', text, flags=re.M), err
    missing = sorted(named - published_names(text))
    assert not missing, f"named by the rules or the dashboard, absent from watch's scrape: {missing}\n{err}"
    assert 'fabmeter_pair_up{' in text and "fabmeter_pair_outlier{" in text, text


def unit_root(tmp_path: Path) -> Path:
    """A root for systemd-analyze --root: the units, the system's own units, and an executable /usr/bin/fabmeter
    where the units expect it."""
    if not shutil.which("systemd-analyze") or not Path("/usr/lib/systemd/system").is_dir():
        pytest.skip("systemd-analyze or the system's units missing (Debian's systemd)")
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    shutil.copytree("/usr/lib/systemd/system", root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    fake = root / "usr" / "bin" / "fabmeter"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    for unit in UNITS:
        shutil.copy(unit, root / "etc" / "systemd" / "system" / unit.name)
    return root


def test_systemd_analyze_verifies_the_units(tmp_path):
    assert [u.name for u in UNITS] == ["fabmeter-serve.service", "fabmeter-watch.service"]
    root = unit_root(tmp_path)
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", f"--root={root}", *(u.name for u in UNITS)],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    # A misspelt key or a bad value is only a warning on stderr: none is accepted.
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr


CAPABILITIES = {"CAP_IPC_LOCK": 14, "CAP_NET_ADMIN": 12, "CAP_SYS_NICE": 23}    # linux/capability.h


def unit_setting(unit: Path, key: str) -> str:
    values = re.findall(rf"^{key}=(.*)$", unit.read_text(), flags=re.M)
    assert len(values) == 1, (unit.name, key, values)
    return values[0].strip()


def test_serve_runs_with_the_capabilities_its_unit_leaves(fm, token_file):
    """The serve unit's CapabilityBoundingSet and NoNewPrivileges, applied by setpriv(1) to a serve started as
    root: a udp run through it goes well (what it cannot do without a capability it does
    without, as a non-root serve does, and says nothing of it)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv (util-linux) to start a serve with fewer capabilities")
    unit = REPO / "contrib" / "systemd" / "fabmeter-serve.service"
    caps = unit_setting(unit, "CapabilityBoundingSet").split()
    assert unit_setting(unit, "NoNewPrivileges") == "yes"
    bounding = ",".join(["-all", *(f"+{c.removeprefix('CAP_').lower()}" for c in caps)])
    port = free_port()
    prefix = ("setpriv", f"--bounding-set={bounding}", f"--inh-caps={bounding}", "--no-new-privs", "--")
    serves = start_serves(fm, ["127.0.0.1"], port, token_file, prefixes=[prefix], relay_to="")
    try:
        status = Path(f"/proc/{serves[0].pid}/status").read_text()
        assert re.search(r"^NoNewPrivs:\s+1$", status, flags=re.M), status
        allowed = sum(1 << CAPABILITIES[c] for c in caps)
        assert int(re.search(r"^CapBnd:\s+(\w+)$", status, flags=re.M).group(1), 16) == allowed, status
        r = fm.run("lat", "-t", "udp", "--poll", "event", "-n", "200", "--warmup", "20",
                   "--server", f"127.0.0.1:{port}", "--token-file", token_file, "--json", timeout=60)
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    finally:
        stop_serves(serves)
