"""The mesh's outlier rule and drift list (python/fabmeter/mesh/outliers.py)
as pure functions: a uniform mesh flags nothing, one slow link flags that
link, one slow host flags that host; the identity fields that differ are
named with who holds which value; the summary, the text and mesh.json carry
them. Over four namespace hosts: a host whose every packet is delayed is
flagged and no other, and one interface's changed MTU is named in the
drift."""

from __future__ import annotations

import json
import subprocess

import pytest

from delay_line import delay_line
from fabmeter import envinfo
from fabmeter.mesh import outliers, output, patterns
from mesh_helpers import SMALL, run_ranks

HOSTS = [f"10.0.0.{i + 1}" for i in range(6)]


def mesh_pairs(n: int, p50_ns, experiment: str = "oneway", pattern: str = "all-to-all") -> list[dict]:
    """A pair per directed link of `pattern`, its p50 (bw: Gbit/s) from p50_ns(src, dst)."""
    out = []
    for src, dst in patterns.pairs(pattern, n):
        value = p50_ns(src, dst)
        out.append({"type": "pair", "src": src, "dst": dst, "status": "ok", "message": "",
                    "latency_ns": None if experiment == "bw" else {"p50": value, "p99": 2 * value},
                    "latency_kind": None if experiment == "bw" else "one-way",
                    "gbps": value if experiment == "bw" else None, "lost": 0})
    return out


def jitter(src: int, dst: int) -> float:
    """A deterministic spread of a few per cent, as real links have."""
    return 1.0 + 0.03 * (((src * 7 + dst * 3) % 5) - 2) / 2


@pytest.mark.parametrize("n", [3, 4, 6])
@pytest.mark.parametrize("experiment", ["oneway", "bw"])
def test_a_uniform_mesh_flags_nothing(n, experiment):
    base = 40_000.0 if experiment != "bw" else 9.4
    for p50 in (lambda s, d: base, lambda s, d: base * jitter(s, d),
                lambda s, d: base + (s * n + d) * 1e-6):       # all but equal: the MAD is ~0, the floor holds
        found = outliers.find(experiment, mesh_pairs(n, p50, experiment), HOSTS[:n])
        assert found["links"] == [] and found["hosts"] == [], found
        assert found["links_judged"] == n * (n - 1) and found["median"] == pytest.approx(base, rel=0.05)


def test_one_slow_link_flags_that_link_only():
    for n in (4, 6):
        pairs = mesh_pairs(n, lambda s, d: 40_000.0 * jitter(s, d) + 400_000.0 * ((s, d) == (1, 3)))
        found = outliers.find("oneway", pairs, HOSTS[:n])
        (link,) = found["links"]
        assert (link["src"], link["dst"], link["direction"]) == (1, 3, "slow"), found
        assert link["score"] > 3.5 and link["relative"] > 5 and link["figure"] > 400_000
        assert found["hosts"] == [], found     # one of host 1's 3 outgoing links, one of host 3's incoming


def test_one_slow_bw_link_is_low():
    pairs = mesh_pairs(4, lambda s, d: 9.4 * jitter(s, d) * (0.3 if (s, d) == (2, 0) else 1.0), "bw")
    found = outliers.find("bw", pairs, HOSTS[:4])
    assert [(x["src"], x["dst"], x["direction"]) for x in found["links"]] == [(2, 0, "slow")]
    assert found["links"][0]["score"] < 0 and found["rule"]["slow_is"] == "lower"


@pytest.mark.parametrize("n", [4, 5, 6])
def test_one_slow_host_flags_that_host(n):
    """Everything host 2 sends is delayed: its outgoing links, and no other, are outliers, and it is flagged as
    slow as a source; the other hosts, each with one slow incoming link of n - 1, are not."""
    pairs = mesh_pairs(n, lambda s, d: 40_000.0 * jitter(s, d) + 400_000.0 * (s == 2))
    found = outliers.find("oneway", pairs, HOSTS[:n])
    assert sorted((x["src"], x["dst"]) for x in found["links"]) == [(2, d) for d in range(n) if d != 2]
    assert all(x["direction"] == "slow" for x in found["links"])
    (host,) = found["hosts"]
    assert host["rank"] == 2 and host["host"] == HOSTS[2]
    assert host["sides"] == [{"side": "out", "direction": "slow", "flagged": n - 1, "links": n - 1}]


def test_a_host_slow_both_ways_from_five_hosts_on():
    """In and out: 2/n of the links. From 5 hosts on they are a minority and the host is flagged on both sides;
    with 4 they are half the links and the median itself moves (the rule's breakdown point, documented)."""
    pairs = mesh_pairs(5, lambda s, d: 40_000.0 * jitter(s, d) + 400_000.0 * (2 in (s, d)))
    (host,) = outliers.find("oneway", pairs, HOSTS[:5])["hosts"]
    assert host["rank"] == 2 and [s["side"] for s in host["sides"]] == ["out", "in"]


def test_failed_pairs_and_small_meshes_are_not_judged():
    pairs = mesh_pairs(4, lambda s, d: 40_000.0 + 400_000.0 * (s == 0))
    for p in pairs:
        if p["dst"] == 3:
            p["status"], p["latency_ns"] = "failed", None
    found = outliers.find("oneway", pairs, HOSTS[:4])
    assert found["links_judged"] == 9 and {(x["src"], x["dst"]) for x in found["links"]} == {(0, 1), (0, 2)}
    assert [h["rank"] for h in found["hosts"]] == [0]       # 2 of its 2 judged outgoing links
    few = outliers.find("oneway", mesh_pairs(2, lambda s, d: 1e3 * (1 + 100 * s)), HOSTS[:2])
    assert few["median"] is None and few["links"] == [] and few["links_judged"] == 2
    ring = outliers.find("oneway", mesh_pairs(6, lambda s, d: 4e4 + 4e5 * (s == 0), pattern="ring"), HOSTS)
    assert [(x["src"], x["dst"]) for x in ring["links"]] == [(0, 1)] and ring["hosts"] == []   # one link a side


def test_a_higher_floor_or_more_mads_let_a_noisy_link_pass():
    """--outlier-floor and --outlier-mads: a link 2.5 x the median is flagged by default, not with a floor of
    500 %; the rule says which figures it used."""
    pairs = mesh_pairs(4, lambda s, d: 10_000.0 * jitter(s, d) * (2.5 if (s, d) == (2, 1) else 1.0))
    assert [(x["src"], x["dst"]) for x in outliers.find("oneway", pairs, HOSTS[:4])["links"]] == [(2, 1)]
    found = outliers.find("oneway", pairs, HOSTS[:4], min_relative=5.0)
    assert found["links"] == [] and found["rule"]["min_relative_difference"] == 5.0 and "500 %" in found["rule"]["text"]
    assert outliers.find("oneway", pairs, HOSTS[:4], k=1e5)["links"] == []


def test_the_rule_is_stated():
    rule = outliers.rule("oneway")
    assert rule["k_mads"] == 3.5 and rule["min_relative_difference"] == 0.25 and rule["figure"] == "latency_p50_ns"
    assert "3.5 scaled MADs" in rule["text"] and "25 %" in rule["text"]


def env(**changes) -> dict:
    base = {key: None for key in envinfo.IDENTITY_KEYS}
    base.update(collected_by="rank", hostname="node", kernel_release="6.1.0-18-amd64", cpu_model="EPYC 7543",
                cpu_count=64, governor="performance", mtu=9000, numa_node=0)
    base.update(changes)
    return base


def test_drift_names_the_field_and_who_holds_which_value():
    envs = [env(hostname="a"), env(hostname="b", mtu=1500), env(hostname="c"), env(hostname="d", governor=None),
            None]
    d = outliers.drift(HOSTS[:5], envs, envinfo.IDENTITY_FIELDS)
    assert d["hosts_reporting"] == [0, 1, 2, 3]
    (mtu,) = d["fields"]                    # the hostname is not compared; an unknown governor is not a difference
    assert mtu["field"] == "mtu" and mtu["majority"] == 9000 and mtu["minority_ranks"] == [1]
    assert mtu["values"] == [{"value": 9000, "ranks": [0, 2, 3]}, {"value": 1500, "ranks": [1]}]
    assert mtu["unknown_ranks"] == [4]
    tie = outliers.drift(HOSTS[:2], [env(kernel_release="6.1"), env(kernel_release="6.6")], envinfo.IDENTITY_FIELDS)
    assert tie["fields"][0]["majority"] is None and tie["fields"][0]["minority_ranks"] == [0, 1]
    assert outliers.drift(HOSTS[:3], [env()] * 3, envinfo.IDENTITY_FIELDS)["fields"] == []


def test_an_identity_from_another_host_is_held_to_its_shape():
    assert envinfo.valid_identity(env(mtu=1400))["mtu"] == 1400
    assert envinfo.valid_identity({"mtu": 1500, "extra": "x" * 10**5, "cpu_model": "y" * 1000}) == \
        {**{k: None for k in envinfo.IDENTITY_KEYS}, "mtu": 1500, "cpu_model": "y" * 256}
    assert envinfo.valid_identity({"mtu": [1500]}) is None and envinfo.valid_identity("x") is None
    engine = envinfo.identity_from_engine({"hostname": "h", "kernel": "6.1.0 #1 SMP", "cpu_model": "c",
                                           "glibc": "2.36", "clock_source": "tsc"})
    assert (engine["kernel_release"], engine["kernel_version"], engine["mtu"]) == ("6.1.0", "#1 SMP", None)
    netdev = {"name": "eth0", "mtu": 9000, "speed_mbps": 100000, "driver": "mlx5_core", "numa_node": None}
    engine = envinfo.identity_from_engine({"hostname": "h", "fabric": {"netdev": netdev}})
    assert (engine["interface"], engine["mtu"], engine["link_speed_mbps"], engine["nic_driver"]) == \
        ("eth0", 9000, 100000, "mlx5_core")
    assert envinfo.identity_from_engine({"fabric": {"netdev": "x"}})["mtu"] is None


def test_this_hosts_identity_records_the_interface_carrying_the_route():
    ident = envinfo.identity(["127.0.0.1"])
    assert ident["interface"] == "lo" and ident["mtu"] == int(open("/sys/class/net/lo/mtu").read())
    assert set(ident) == set(envinfo.IDENTITY_KEYS)
    assert envinfo.identity(["no-such-host.invalid"])["mtu"] is None     # not resolved: unknown, not guessed


def test_summary_text_and_mesh_json_carry_outliers_and_drift():
    summary = output.Summary(HOSTS[:4], "all-to-all", "scheduled", "oneway", {"transport": "udp"}, 0)
    for p in mesh_pairs(4, lambda s, d: 40_000.0 * jitter(s, d) + 400_000.0 * (s == 0)):
        summary.add(lambda _: None, p)
    summary.environments = [env(), env(), env(mtu=1400), None]
    line = summary.as_json()
    assert [h["rank"] for h in line["outliers"]["hosts"]] == [0]
    assert [f["field"] for f in line["drift"]["fields"]] == ["mtu"]
    text = output.matrix(line, summary.pairs)
    assert "host 0 10.0.0.1: slow as source (3 of 3 links)" in text, text
    assert "link 0->1" in text and "mtu: 9000 on 0 1; 1400 on 2; unknown on 3" in text, text
    doc = output.record(line, summary.pairs, "t0", "t1", ["fabmeter", "mesh"], {}, {})
    assert doc["outliers"] == line["outliers"] and doc["drift"] == line["drift"]
    assert not set(output.LIFTED) & set(doc["mesh"])
    assert [h["environment"] for h in doc["per_host"]] == line["environments"]


def test_scores_order_with_the_delay():
    """A larger delay gives a larger score; the same delay on every link of a pattern gives none."""
    scores = []
    for delay in (100_000.0, 400_000.0):
        pairs = mesh_pairs(4, lambda s, d: 40_000.0 * jitter(s, d) + delay * ((s, d) == (0, 1)))
        found = outliers.find("oneway", pairs, HOSTS[:4])
        scores.append(found["links"][0]["score"])
    assert scores[0] < scores[1]
    assert not outliers.find("oneway", mesh_pairs(4, lambda s, d: 440_000.0), HOSTS[:4])["links"]


# Isolated messages (a burst of one, 2 ms apart): each one-way latency is one wake-up, not a place in a queue
# behind its burst, so the links' p50s agree within tens of microseconds on 2 loaded CPUs.
ISOLATED = ["--bursts", "120", "--burst-size", "1", "--pause-us", "2000", "--warmup", "10", "-s", "32",
            "--poll", "event"]
HOST_DELAY_US = 400
# The rule's floor for this machine: at a load average of 5 from other work an undelayed link's p50 came out
# 2.5 x the links' median (26 us against 10 us; by the MADs, score +11.8: the default rule rightly flags it),
# while the delayed links sit 20 x or more above it. A floor of +500 % lies between the two.
NOISY_FLOOR = ["--outlier-floor", "500"]


def test_a_slow_host_is_flagged_and_no_other(fm, four_hosts, token_file, tmp_path):
    """Every udp packet host 0 sends is delayed by 400 us: its three outgoing links, and no other link, are
    outliers by the stated rule, and host 0 is flagged as a slow source; the other hosts are not flagged."""
    (ns_a, _), *_ = four_hosts
    hosts = [addr for _, addr in four_hosts]
    with delay_line(ns_a, HOST_DELAY_US, ["-p", "udp"]):
        rc, out, err, others = run_ranks(fm, hosts, ["-t", "udp", "--schedule", "scheduled", "--token-file",
                                                     token_file, "--out", tmp_path, *ISOLATED, *NOISY_FLOOR],
                                         [("ip", "netns", "exec", ns) for ns, _ in four_hosts])
    assert rc == 0 and others == {1: 0, 2: 0, 3: 0}, err
    doc = json.loads((tmp_path / "mesh.json").read_text())
    found = doc["outliers"]
    scores = {(p["src"], p["dst"]): round(((p["latency_ns"]["p50"] - found["median"]) / found["scaled_mad"]), 1)
              for p in doc["pairs"]}
    print("median us", found["median"] / 1e3, "scaled MAD us", found["scaled_mad"] / 1e3, "scores", scores)
    print(out)
    assert found["rule"]["min_relative_difference"] == 5 and found["rule"]["k_mads"] == 3.5
    assert sorted((x["src"], x["dst"]) for x in found["links"]) == [(0, 1), (0, 2), (0, 3)], found
    assert all(x["direction"] == "slow" and x["figure"] >= 0.8 * HOST_DELAY_US * 1e3 for x in found["links"])
    assert [(h["rank"], h["sides"]) for h in found["hosts"]] == \
        [(0, [{"side": "out", "direction": "slow", "flagged": 3, "links": 3}])], found
    assert "host 0 10." in out and "slow as source (3 of 3 links)" in out, out      # the section under the matrix


def test_a_changed_mtu_is_named_in_the_drift(fm, four_hosts, token_file, tmp_path):
    """Host 2's interface at MTU 1400, the others at 1500: each rank records the MTU of the interface its route
    to the other ranks takes, and the drift list names host 2 and the field, and nothing else (one machine)."""
    (ns_c, _) = four_hosts[2]
    hosts = [addr for _, addr in four_hosts]
    dev = subprocess.run(["ip", "-n", ns_c, "-o", "route", "get", hosts[0]], capture_output=True, text=True,
                         check=True).stdout.split(" dev ")[1].split()[0]
    subprocess.run(["ip", "-n", ns_c, "link", "set", "dev", dev, "mtu", "1400"], check=True)
    rc, out, err, _ = run_ranks(fm, hosts, ["-t", "udp", "--pattern", "ring", "--schedule", "chaotic",
                                            "--token-file", token_file, "--out", tmp_path, *SMALL],
                                [("ip", "netns", "exec", ns) for ns, _ in four_hosts])
    assert rc == 0, err
    doc = json.loads((tmp_path / "mesh.json").read_text())
    envs = [h["environment"] for h in doc["per_host"]]
    assert [e["mtu"] for e in envs] == [1500, 1500, 1400, 1500] and envs[2]["interface"] == dev, envs
    assert doc["drift"]["hosts_reporting"] == [0, 1, 2, 3]
    (mtu,) = doc["drift"]["fields"]
    assert mtu["field"] == "mtu" and mtu["majority"] == 1500 and mtu["minority_ranks"] == [2], mtu
    assert "mtu: 1500 on 0 1 3; 1400 on 2" in out, out
