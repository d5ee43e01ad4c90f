"""rdma/test_rdma_report.py's alternated comparison, on results shaped as
the guest leaves them: rounds paired by row, medians per side, the ratio
against the target's direction (lat lower, bw higher), and the units
perftest prints (read and atomics not halved); and rdma/guest_report's
checks of each kind of case, on files shaped as the guest leaves them."""

from __future__ import annotations

import json
import os
import subprocess

from conftest import REPO, guest_report, script_module

cases, commands, perftest = (guest_report(kind) for kind in ("cases", "commands", "perftest"))


def report_module():
    return script_module("test_rdma_report_mod", "rdma/test_rdma_report.py")


def fm_lat(name, p50_ns):
    return {"name": name, "latency_ns": {"p50": p50_ns}}


def pt(name, **result):
    return {"name": name, "result_us": result}


def test_rounds_make_medians_and_ratios():
    m = report_module()
    results = [
        # RC send: fabmeter RTT/2 p50s 30, 50, 31 us -> median 31; perftest 30, 29, 40 -> 30.
        fm_lat("cmp-r1-fabmeter-lat-rc-send", 30000), pt("cmp-r1-perftest-lat-rc-send", t_typical=30.0),
        fm_lat("cmp-r2-fabmeter-lat-rc-send", 50000), pt("cmp-r2-perftest-lat-rc-send", t_typical=29.0),
        fm_lat("cmp-r3-fabmeter-lat-rc-send", 31000), pt("cmp-r3-perftest-lat-rc-send", t_typical=40.0),
        # A read's figure is the whole operation on both sides: fabmeter's RTT (2 x p50).
        fm_lat("cmp-r1-fabmeter-lat-rc-read", 20000), pt("cmp-r1-perftest-lat-rc-read", t_typical=41.0),
        # bw: messages per second against perftest's MsgRate in Mpps.
        {"name": "cmp-r1-fabmeter-bw-rc-write", "msg_rate": 90000.0},
        pt("cmp-r1-perftest-bw-rc-write", msg_rate_mpps=0.1),
        {"name": "lat-rc-send-raw-inline0-sig1-busy", "latency_ns": {"p50": 1.0}},  # not a comparison row
    ]
    rows = {r["row"]: r for r in m.comparison(results)}
    assert set(rows) == {"lat-rc-send", "lat-rc-read", "bw-rc-write"}
    send = rows["lat-rc-send"]
    assert send["rounds"] == 3 and send["fabmeter_median"] == 31.0 and send["perftest_median"] == 30.0
    assert abs(send["ratio"] - 31 / 30) < 1e-12 and send["at_target"] is False
    # Each round's own ratio, in round order: 30/30, 50/29, 31/40.
    assert send["round_ratios"] == [1.0, 50 / 29, 31 / 40]
    read = rows["lat-rc-read"]
    assert read["fabmeter_median"] == 40.0 and read["at_target"] is True  # 40 us vs 41 us
    bw = rows["bw-rc-write"]
    assert bw["kind"] == "bw" and abs(bw["ratio"] - 0.9) < 1e-12 and bw["at_target"] is False
    assert [r["row"] for r in m.comparison(results)] == ["lat-rc-read", "lat-rc-send", "bw-rc-write"]


def test_a_missing_side_has_no_ratio():
    m = report_module()
    (row,) = m.comparison([fm_lat("cmp-r1-fabmeter-lat-uc-write", 40000), {"name": "cmp-r1-perftest-lat-uc-write"}])
    assert row["perftest_median"] is None and row["ratio"] is None and row["at_target"] is None


def test_a_perftest_bw_round_of_rate_0_has_no_figure():
    # Seen in the guest: ib_write_bw exited 0 with "0.00 0.00 0.000000" for
    # 5000 messages; as 0 msg/s it dragged the peer's median down.
    m = report_module()
    results = [{"name": f"cmp-r{k}-fabmeter-bw-rc-write", "msg_rate": 20000.0} for k in (1, 2, 3)]
    results += [pt("cmp-r1-perftest-bw-rc-write", msg_rate_mpps=0.0), pt("cmp-r2-perftest-bw-rc-write", msg_rate_mpps=0.02),
                pt("cmp-r3-perftest-bw-rc-write", msg_rate_mpps=0.025)]
    (row,) = m.comparison(results)
    assert row["perftest"] == [None, 20000.0, 25000.0] and row["perftest_median"] == 22500.0
    assert row["round_ratios"] == [1.0, 0.8]  # round 1 has no peer figure: no ratio of its own
    assert abs(row["ratio"] - 20000 / 22500) < 1e-12


def test_perftest_bw_and_lat_lines_parse():
    lat = perftest.perftest_result(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
        "   99% percentile[usec]   99.9% percentile[usec] \n"
        " 32      2000          20.42          298.08       43.30    \t       42.28       \t24.81  \t\t214.04  \t\t298.08 \n")
    assert lat["t_typical"] == 43.30 and lat["p999"] == 298.08
    bw = perftest.perftest_result(
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
        " 1024       5000             6.52               6.31  \t\t   0.006461\n")
    assert bw == {"bytes": 1024, "iterations": 5000, "bw_peak_mb": 6.52, "bw_avg_mb": 6.31, "msg_rate_mpps": 0.006461}


def test_fi_pingpong_rows_compare_means():
    m = report_module()
    res = perftest.perftest_result("bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n"
                            "32      2k      =2k      125k        0.16s      0.82      39.14       0.03\n")
    assert res == {"usec_per_xfer": 39.14}
    (row,) = m.comparison([{"name": "cmp-r1-fabmeter-lat-ofi-verbs-msg", "latency_ns": {"p50": 1.0, "mean": 40000.0}},
                           {"name": "cmp-r1-fi_pingpong-lat-ofi-verbs-msg", "result_us": res}])
    assert row["peer"] == "fi_pingpong" and row["fabmeter_median"] == 40.0 and row["perftest_median"] == 39.14
    assert row["at_target"] is False


def test_a_comparison_round_perftest_could_not_time_fails_nothing(tmp_path):
    inf = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
           "   99% percentile[usec]   99.9% percentile[usec] \n"
           " 32      2000          inf            inf          inf      \t       inf         \t-nan   \t\tinf     \t\tinf\n")
    for name in ("cmp-r1-perftest-lat-uc-write", "pt-uc-write"):
        (tmp_path / f"{name}.cmd").write_text("ib_write_lat -c UC -s 32\n")
        (tmp_path / f"{name}.rc").write_text("0\n")
        (tmp_path / f"{name}.out").write_text(inf)
        (tmp_path / f"{name}.server.out").write_text(inf)
    problems, summary = perftest.check_perftest(str(tmp_path), "cmp-r1-perftest-lat-uc-write")
    assert problems == [] and "result_us" not in summary and "note" in summary
    problems, _ = perftest.check_perftest(str(tmp_path), "pt-uc-write")
    assert problems == ["no finite result line in perftest's output"]
    (tmp_path / "cmp-r1-perftest-lat-uc-write.rc").write_text("1\n")  # a peer that failed still fails
    problems, _ = perftest.check_perftest(str(tmp_path), "cmp-r1-perftest-lat-uc-write")
    assert problems and problems[0].startswith("exit 1")


def test_suite_case_needs_every_point_ok_and_a_report(tmp_path):
    """A suite run in the guest (`fabmeter suite --server`): its exit code, each
    point's status in index.json, and the report must all be there."""
    import json

    def case(name, rc="0", statuses=("ok", "ok"), report=True):
        res = tmp_path / f"{name}.results"
        res.mkdir()
        (tmp_path / f"{name}.cmd").write_text("fabmeter suite suites/perftest-parity.toml\n")
        (tmp_path / f"{name}.rc").write_text(rc + "\n")
        (tmp_path / f"{name}.err").write_text("boom\n" if rc != "0" else "")
        (tmp_path / f"{name}.report.rc").write_text("0\n")
        (res / "index.json").write_text(json.dumps(
            {"points": [{"id": f"p{i}", "status": s} for i, s in enumerate(statuses)]}))
        if report:
            (res / "report.html").write_text("<html></html>")
        return commands.check_suite(str(tmp_path), name)

    problems, summary = case("suite-good")
    assert problems == [] and summary["points"] == 2
    problems, _ = case("suite-failed-point", rc="1", statuses=("ok", "failed"))
    assert any("exited 1" in p for p in problems) and any("point p1: failed" in p for p in problems)
    problems, _ = case("suite-no-report", report=False)
    assert problems == ["fabmeter report wrote no report.html"]
    problems, _ = case("suite-empty", statuses=())
    assert problems == ["the suite ran no point"]


def test_ramcloud_load_case_needs_pools_overload_clients_and_the_tx_path(tmp_path):
    """suites/ramcloud-load.toml's verbs rows in the guest: besides a suite's
    checks, each row's pool sizes, offered rate past the capacity, the
    closed-loop points' clients, every point's server.tx and the report's
    three figures."""
    import json
    tx = {"waits": 3, "wait_ns_mean": 5e4, "polls": 3, "completions_per_poll": {"2": 3}, "mean_per_poll": 2.0,
          "poll_ns_mean": 6e3, "polls_empty": 0, "empty_poll_ns_mean": 0.0}

    def case(name, sq_depths=(8, 64), top=2.0, tx=tx, figures=commands.RAMCLOUD_FIGURES):
        res = tmp_path / f"{name}.results"
        res.mkdir()
        (tmp_path / f"{name}.cmd").write_text(f"fabmeter suite {tmp_path}/ramcloud-load-verbs.toml\n")
        (tmp_path / f"{name}.rc").write_text("0\n")
        (tmp_path / f"{name}.report.rc").write_text("0\n")
        rows = {f"sq{sq}": ({"rq_depth": 24, "sq_depth": sq},
                            [{"phase": "capacity", "of_capacity": None, "achieved_rps": 900.0, "server": {"tx": tx}}]
                            + [{"phase": "open loop", "of_capacity": f, "achieved_rps": 0.0 if f == 1.0 else 400.0,
                                "server": {"tx": tx}} for f in (0.5, 1.0, top)]) for sq in sq_depths}
        rows["clients"] = ({"rq_depth": 256, "sq_depth": 128},
                           [{"phase": "closed loop", "clients": n, "achieved_rps": 100.0 * n, "server": {"tx": tx}}
                            for n in (1, 8, 40)])
        for rid, (params, points) in rows.items():
            (res / rid).mkdir()
            (res / rid / "run.json").write_text(json.dumps({"config": {"params": params}, "points": points}))
        (res / "index.json").write_text(json.dumps({"points": [{"id": rid, "status": "ok"} for rid in rows]}))
        (res / "report.html").write_text("".join(f'<img alt="{alt} x" src="">' for alt in figures))
        return commands.check_ramcloud_load(str(tmp_path), name)

    problems, summary = case("good")
    assert problems == [] and summary["clients"] == [1, 8, 40] and summary["top_multiple"] == 2.0, problems
    problems, _ = case("one-pool", sq_depths=(8,))
    assert any("1 pool size" in p for p in problems), problems
    problems, _ = case("not-past-capacity", top=0.9)
    assert any("not past it" in p for p in problems), problems
    problems, _ = case("no-tx", tx=None)
    assert any("server.tx None" in p for p in problems), problems
    problems, _ = case("no-clients-figure", figures=commands.RAMCLOUD_FIGURES[:1])
    assert any("load closed loop against clients" in p for p in problems), problems


def test_mesh_case_needs_both_ranks_and_both_pairs(tmp_path):
    """A two-rank mesh in the guest: both exit codes 0, both directed pairs ok over verbs, none failed."""
    import json

    def case(name, rc="0", rc1="0", pairs=((0, 1), (1, 0)), status="ok", transport="verbs"):
        (tmp_path / f"{name}.cmd").write_text("fabmeter mesh --service rc\n")
        (tmp_path / f"{name}.rc").write_text(rc + "\n")
        (tmp_path / f"{name}.rank1.rc").write_text(rc1 + "\n")
        (tmp_path / f"{name}.err").write_text("")
        (tmp_path / f"{name}.rank1.err").write_text("rank 0 is gone\n" if rc1 != "0" else "")
        lines = [{"type": "pair", "src": s, "dst": d, "status": status, "message": ""} for s, d in pairs]
        lines.append({"type": "mesh", "transport": transport, "failed": sum(status != "ok" for _ in pairs)})
        (tmp_path / f"{name}.out").write_text("fabmeter: warning\n" + "\n".join(json.dumps(x) for x in lines))
        return commands.check_mesh(str(tmp_path), name)

    problems, summary = case("mesh-good")
    assert problems == [] and summary["pairs"] == 2
    problems, _ = case("mesh-rank1-died", rc1="3")
    assert problems == ["rank 1 exited 3: rank 0 is gone"]
    problems, _ = case("mesh-one-pair", pairs=((0, 1),))
    assert len(problems) == 1 and "want (0, 1) and (1, 0)" in problems[0]
    problems, _ = case("mesh-failed", status="failed")
    assert any("pair 0->1: failed" in p for p in problems) and any("mesh summary" in p for p in problems)
    problems, _ = case("mesh-tcp", transport="tcp")
    assert problems and "mesh summary" in problems[0]


def test_test_rdma_refuses_bad_rounds_before_building_the_guest():
    """--rounds takes 0..99 (0: no comparison); --compare-only
    or --control with no round is refused, as is an unknown option, an FM_STREAM_COUNT that is neither
    `suite` nor a count, and an FM_RDMA_CI other than 0 or 1. Each in one line with exit 2, before the guest is
    built (the checks come first, so this takes no time)."""
    def run(*args):
        return subprocess.run(["bash", str(REPO / "rdma" / "test-rdma.sh"), *args], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)

    for args, words in ((("--rounds", "100"), "wants 0..99"), (("--rounds", "x"), "wants 0..99"),
                        (("--rounds", "0", "--compare-only"), "at least one round"),
                        (("--control", "--rounds", "0"), "at least one round"), (("--contro",), "unknown option")):
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "guest" not in r.stdout
    for count in ("0", "x", "1e3", "suite1"):
        r = subprocess.run(["bash", str(REPO / "rdma" / "test-rdma.sh")], capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL, env={**os.environ, "FM_STREAM_COUNT": count})
        assert r.returncode == 2, (count, r.stdout, r.stderr)
        assert "FM_STREAM_COUNT wants" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "guest" not in r.stdout
    r = subprocess.run(["bash", str(REPO / "rdma" / "test-rdma.sh")], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL, env={**os.environ, "FM_RDMA_CI": "yes"})
    assert r.returncode == 2 and "FM_RDMA_CI wants 0 or 1" in r.stderr, (r.stdout, r.stderr)


def test_fabtests_bw_rows_compare_message_rates(tmp_path):
    """fi_msg_bw and fi_rma_bw print their table as fi_pingpong does; a bw
    row's rate is 1e6 / usec/xfer (Mxfers/sec has 2 decimals: 0.02 in the
    guest), and the peer column is named after the tool."""
    m = report_module()
    out = ("bytes   iters   total       time     MB/sec    usec/xfer   Mxfers/sec\n"
           "1k      5k      4.8m        0.23s     22.01      46.52       0.02\n")
    (tmp_path / "cmp-r1-fi_rma_bw-bw-ofi-verbs-write-imm.cmd").write_text("fi_rma_bw -p verbs -e msg -o writedata\n")
    (tmp_path / "cmp-r1-fi_rma_bw-bw-ofi-verbs-write-imm.rc").write_text("0\n")
    (tmp_path / "cmp-r1-fi_rma_bw-bw-ofi-verbs-write-imm.out").write_text(out)
    problems, peer = perftest.check_perftest(str(tmp_path), "cmp-r1-fi_rma_bw-bw-ofi-verbs-write-imm")
    assert problems == [] and peer["result_us"] == {"usec_per_xfer": 46.52}
    (row,) = m.comparison([{"name": "cmp-r1-fabmeter-bw-ofi-verbs-write-imm", "msg_rate": 22000.0}, peer])
    assert row["peer"] == "fi_rma_bw" and row["kind"] == "bw"
    assert abs(row["perftest_median"] - 1e6 / 46.52) < 1e-9
    assert abs(row["ratio"] - 22000 * 46.52 / 1e6) < 1e-12 and row["at_target"] is True


# Each end's environment as a guest run's start line gives it: the client on rxe0, the server on rxe1.
START = {"type": "start", "env": {"fabric": {"rdma": {"device": "rxe0", "port_state": "ACTIVE"}}},
         "server_env": {"fabric": {"rdma": {"device": "rxe1", "port_state": "ACTIVE"}}}}


def test_a_bidir_plain_write_client_s_writes_carry_its_credits(tmp_path):
    """In --bidir each plain write of 16 B or more carries its writer's credit:
    a client whose writes carried none fails the guest's check however few
    went alone, while one whose writes carried some passes however many went
    alone (the guest's timing decides that); 8 B writes carry none and are
    not held to it. And with fixed sizes a slot is the payload rounded up to 64 B."""
    import json

    def case(name, size, credit_writes, carried, slot=None, iterations=2000, passive=False):
        slot = slot or -(-size // 64) * 64
        (tmp_path / f"{name}.cmd").write_text(f"fabmeter-engine run bw -s {size} --op write --bidir"
                                              f"{' --passive-rx' if passive else ''}\n")
        (tmp_path / f"{name}.rc").write_text("0\n")
        (tmp_path / f"{name}.server.rc").write_text("0\n")
        (tmp_path / f"{name}.err").write_text("")
        lines = [START,
                 {"type": "point", "experiment": "bw", "size": size, "iterations": iterations, "warmup": 100,
                  "lost": 0, "gbps": 0.3, "bidir": True, "size_spread": 0, "credit_writes": credit_writes,
                  "credits_carried": carried, **({"measured_at": "sender"} if passive else {})},
                 {"type": "transport", "granted": {"op": "write", "service": "rc", "cm": "rdma_cm", "post_list": 1,
                                                   "device": "rxe0", "write_credits": "...", "rq_refill": 64,
                                                   "recv_slot_bytes": slot, "passive_rx": passive}},
                 {"type": "end", "status": "ok"}]
        (tmp_path / f"{name}.out").write_text("\n".join(json.dumps(x) for x in lines))
        return cases.check_fabmeter(str(tmp_path), name)[0]

    assert case("carried", 1024, 1, 31) == []
    assert case("passive-receivers-give-no-credit", 1024, 0, 0, passive=True) == []
    assert case("a-slow-guest's-many-alone", 1024, 11, 21) == []
    (problem,) = case("not-carried", 1024, 3, 0)
    assert "no credit carried by a write" in problem and "3 credit writes" in problem
    assert case("too-small-to-carry", 8, 32, 0) == []
    (problem,) = case("trailer-room", 1024, 0, 30, slot=1088)
    assert "slots of 1088 B, expected 1024" in problem


def test_a_passive_receiver_is_granted_and_sends_nothing_back(tmp_path):
    """--passive-rx: the transport must say passive_rx, and the point must be
    measured at the sender with no credit writes; a run whose transport
    ignored the flag (polled, credits) fails the check."""
    import json

    def case(name, granted_passive, credit_writes, measured_at):
        (tmp_path / f"{name}.cmd").write_text("fabmeter-engine run bw -s 1024 --op write --passive-rx\n")
        for f, text in ((".rc", "0\n"), (".server.rc", "0\n"), (".err", "")):
            (tmp_path / f"{name}{f}").write_text(text)
        granted = {"op": "write", "service": "rc", "cm": "rdma_cm", "post_list": 1, "device": "rxe0",
                   "rq_refill": 64, "recv_slot_bytes": 1024, "passive_rx": granted_passive}
        if not granted_passive:
            granted["write_credits"] = "..."
        lines = [START,
                 {"type": "point", "experiment": "bw", "size": 1024, "iterations": 2000, "warmup": 100, "lost": 0,
                  "gbps": 0.3, "bidir": False, "size_spread": 0, "credit_writes": credit_writes,
                  "measured_at": measured_at},
                 {"type": "transport", "granted": granted}, {"type": "end", "status": "ok"}]
        (tmp_path / f"{name}.out").write_text("\n".join(json.dumps(x) for x in lines))
        return cases.check_fabmeter(str(tmp_path), name)[0]

    assert case("passive", True, 0, "sender (one-sided: where the answers arrive)") == []
    problems = case("ignored", False, 3, "receiver")
    assert any("granted passive_rx = False, expected True" in p for p in problems)
    assert any("credit_writes 3" in p and "'receiver'" in p for p in problems)


def test_the_printed_table_shows_each_rows_spread_of_round_ratios(capsys):
    m = report_module()
    results = [fm_lat("cmp-r1-fabmeter-lat-rc-send", 30000), pt("cmp-r1-perftest-lat-rc-send", t_typical=30.0),
               fm_lat("cmp-r2-fabmeter-lat-rc-send", 33000), pt("cmp-r2-perftest-lat-rc-send", t_typical=30.0),
               fm_lat("cmp-r1-fabmeter-lat-uc-send", 30000), {"name": "cmp-r1-perftest-lat-uc-send"}]
    m.print_comparison(m.comparison(results), None)
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("lat-")}
    assert "1.00-1.10" in lines["lat-rc-send"].split()
    assert lines["lat-uc-send"].split()[4:6] == ["-", "-"]  # no peer figure: no ratio, no spread


def test_the_rounds_tell_a_row_ahead_behind_or_level(capsys):
    """The median round ratio's distribution-free interval: 5 rounds take their whole range (93.75 %), 9 drop
    the lowest and highest (96 %), 4 are too few; a row whose interval spans 1.00 is level, whatever its
    ratio of medians says."""
    m = report_module()
    assert m.stats.median_interval([1.0, 1.1, 0.9, 1.2]) is None
    lo, hi, cover = m.stats.median_interval([1.02, 0.97, 1.10, 1.01, 1.05])
    assert (lo, hi) == (0.97, 1.10) and cover == 1 - 2 / 32
    lo, hi, cover = m.stats.median_interval([0.5, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 9.0])
    assert (lo, hi) == (1.01, 1.07) and abs(cover - (1 - 2 * 10 / 512)) < 1e-12
    tells = lambda interval, bw: m.TELLS[m.stats.verdict(interval, bw)]  # noqa: E731
    assert tells((1.01, 1.07, 0.96), bw=True) == "ahead" and tells((1.01, 1.07, 0.96), bw=False) == "behind"
    assert tells((0.90, 0.99, 0.96), bw=False) == "ahead" and tells((0.97, 1.10, 0.94), bw=False) == "level"
    # lat rc send: 5 rounds each 2-5 % slower, behind by the rounds; lat rc write: behind by its medians
    # (31 vs 30) but its rounds fall on both sides: level; bw rc read: 5 rounds each ahead.
    fm_send, fm_write, fm_read = [31, 31.5, 31.2, 30.6, 30.9], [31, 29, 33, 31, 28], [105, 110, 101, 104, 120]
    pt_send, pt_write, pt_read = [30, 30, 30, 30, 30], [30, 30, 30, 32, 29], [100, 100, 100, 100, 100]
    results = []
    for i in range(5):
        results += [fm_lat(f"cmp-r{i + 1}-fabmeter-lat-rc-send", fm_send[i] * 1000),
                    pt(f"cmp-r{i + 1}-perftest-lat-rc-send", t_typical=pt_send[i]),
                    fm_lat(f"cmp-r{i + 1}-fabmeter-lat-rc-write", fm_write[i] * 1000),
                    pt(f"cmp-r{i + 1}-perftest-lat-rc-write", t_typical=pt_write[i]),
                    {"name": f"cmp-r{i + 1}-fabmeter-bw-rc-read", "msg_rate": fm_read[i] * 1000.0},
                    pt(f"cmp-r{i + 1}-perftest-bw-rc-read", msg_rate_mpps=pt_read[i] / 1000)]
    rows = {r["row"]: r for r in m.comparison(results)}
    assert rows["lat-rc-send"]["tells"] == "behind" and rows["lat-rc-send"]["at_target"] is False
    assert rows["lat-rc-write"]["tells"] == "level" and rows["lat-rc-write"]["at_target"] is False
    assert rows["bw-rc-read"]["tells"] == "ahead" and rows["bw-rc-read"]["at_target"] is True
    assert rows["bw-rc-read"]["round_ratio_interval"][:2] == [1.01, 1.2]
    m.print_comparison(list(rows.values()), None)
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("lat-", "bw-"))}
    assert lines["lat-rc-write"][6] == "level" and lines["lat-rc-send"][6] == "behind"
    assert "1 of 3 rows at target; 2 behind, of which 1 level by their rounds. By the rounds: 1 ahead, 1 level, " \
           "1 behind." in out


def test_a_control_run_puts_the_peer_in_fabmeters_column(capsys):
    """test-rdma.sh --control: each row's peer also runs as cmp-rN-control-ROW, whose figures are read as the
    peer's (perftest's t_typical, fabtests' usec/xfer) and stand in fabmeter's column; the table says so."""
    m = report_module()
    results = [pt("cmp-r1-control-lat-rc-read", t_typical=27.0), pt("cmp-r1-perftest-lat-rc-read", t_typical=30.0),
               pt("cmp-r1-control-bw-rc-send", msg_rate_mpps=0.025), pt("cmp-r1-perftest-bw-rc-send", msg_rate_mpps=0.02),
               pt("cmp-r1-control-bw-ofi-verbs-send", usec_per_xfer=40.0),
               pt("cmp-r1-fi_msg_bw-bw-ofi-verbs-send", usec_per_xfer=50.0)]
    rows = {r["row"]: r for r in m.comparison(results)}
    assert rows["lat-rc-read"]["fabmeter_median"] == 27.0 and abs(rows["lat-rc-read"]["ratio"] - 0.9) < 1e-12
    assert rows["bw-rc-send"]["fabmeter_median"] == 25000.0 and abs(rows["bw-rc-send"]["ratio"] - 1.25) < 1e-12
    assert rows["bw-ofi-verbs-send"]["peer"] == "fi_msg_bw" and abs(rows["bw-ofi-verbs-send"]["ratio"] - 1.25) < 1e-12
    assert all(r["control"] for r in rows.values())
    m.print_comparison(list(rows.values()), None)
    assert "CONTROL (test-rdma.sh --control)" in capsys.readouterr().out
    plain = m.comparison([fm_lat("cmp-r1-fabmeter-lat-rc-read", 13500), pt("cmp-r1-perftest-lat-rc-read", t_typical=30.0)])
    assert plain[0]["control"] is False and plain[0]["fabmeter_median"] == 27.0
    m.print_comparison(plain, None)
    assert "CONTROL" not in capsys.readouterr().out


def test_t_send_is_checked_inside_its_stamps_and_absent_for_inline(tmp_path):
    """The guest's t_send cases: t_subm <= t_send <= t_recv (both stages' minima >= 0), inline sends
    with no t_send and the reason, and a -tsend case without one only where no CPU was left for it."""
    (tmp_path / "_nproc").write_text("3\n")
    stamped = {"size": 32, "iterations": 1000, "t_send_missed": 10, "latency_ns": {"p50": 9000.0},
               "send_ns": {"min": 100.0, "p50": 4000.0}, "latency_send_ns": {"min": 50.0, "p50": 5000.0}}
    cmd = "fabmeter-engine run oneway -s 32 --service rc"
    assert cases.check_t_send(str(tmp_path), "oneway-rc-send-tsend", cmd, stamped, {}) == []
    before = {**stamped, "send_ns": {"min": -5.0, "p50": 1.0}}
    assert "outside [t_subm, t_recv]" in cases.check_t_send(str(tmp_path), "x-tsend", cmd, before, {})[0]
    after = {**stamped, "latency_send_ns": {"min": -1.0, "p50": 1.0}}
    assert cases.check_t_send(str(tmp_path), "x-tsend", cmd, after, {})
    inline_cmd = cmd + " --inline 64"
    absent = {"size": 32, "send_ns": None, "latency_send_ns": None, "t_send_absent": "inline sends: the payload ..."}
    assert cases.check_t_send(str(tmp_path), "x-inline64-tsend", inline_cmd, absent, {}) == []
    assert cases.check_t_send(str(tmp_path), "x-inline64-tsend", inline_cmd, stamped, {}), "inline with a number"
    no_cpu = {"size": 32, "send_ns": None, "t_send_absent": "no CPU of its own for the time thread: ..."}
    assert cases.check_t_send(str(tmp_path), "x-tsend", cmd, no_cpu, {}), "3 CPUs: the thread had one"
    beaten = {"size": 32, "send_ns": None, "t_send_absent": "no message carried a stamp written after its post: ..."}
    assert cases.check_t_send(str(tmp_path), "x-tsend", cmd, beaten, {}) == [], "judged over all cases by main()"
    (tmp_path / "_nproc").write_text("2\n")
    assert cases.check_t_send(str(tmp_path), "x-tsend", cmd, no_cpu, {}) == []


def test_suite_rows_keep_the_suites_count_and_say_how_long_its_messages_take():
    """thesis-stream's three verbs rows, each with the seconds its messages take at its rates (count samples of
    every values at each rate): the suite's own 250 000 unless a count replaces it, which test-rdma.sh sizes the
    guest's timeout by."""
    def rows(*count):
        r = subprocess.run([str(REPO / ".venv" / "bin" / "python"), str(REPO / "rdma" / "suite_rows.py"),
                            str(REPO / "suites" / "thesis-stream.toml"), "verbs", *count],
                           capture_output=True, text=True, timeout=60, check=True)
        return [line.split("\t") for line in r.stdout.splitlines()]

    full, short = rows(), rows("1000")
    assert [r[0] for r in full] == [r[0] for r in short] and len(full) == 3
    per_values = sum(1 / rate for rate in (100, 1000, 2500, 10000, 25000, 100000))
    for (_, seconds, args), (_, short_seconds, short_args) in zip(full, short):
        assert "--count 250000" in args and "--count 1000" in short_args
        assert int(seconds) == round(250000 * per_values * 7) and int(short_seconds) == round(1000 * per_values * 7)


def test_an_ofi_case_reports_the_libfabric_it_ran_on(tmp_path):
    """An ofi case's libfabric is any release's MAJOR.MINOR (the guest's own, 1.x on bookworm, 2.x elsewhere);
    on fabtests' libfabric (NAME.libfabric, written by the guest driver) it must be that one's."""
    import json

    def case(name, reported, ran_on=None):
        (tmp_path / f"{name}.cmd").write_text("fabmeter-engine run bw -t ofi --provider verbs --ep msg -s 1K\n")
        for f, text in ((".rc", "0\n"), (".server.rc", "0\n"), (".err", "")):
            (tmp_path / f"{name}{f}").write_text(text)
        if ran_on:
            (tmp_path / f"{name}.libfabric").write_text(f"libfabric {ran_on} (Debian trixie source {ran_on}-1)\n")
        start = {"type": "start", "env": {"fabric": {"rdma": {"device": "rxe0", "libfabric": reported}}}}
        lines = [start, {"type": "point", "experiment": "bw", "size": 1024, "iterations": 5000, "lost": 0,
                  "gbps": 0.3},
                 {"type": "transport", "granted": {"domain": "rxe0"}}, {"type": "end", "status": "ok"}]
        (tmp_path / f"{name}.out").write_text("\n".join(json.dumps(x) for x in lines))
        return cases.check_fabmeter(str(tmp_path), name)[0]

    assert case("guest-1", "1.17") == []
    assert case("guest-2", "2.1") == []
    assert case("fabtests-2", "2.1", ran_on="2.1.0") == []
    for name, reported, ran_on in (("fabtests-other", "1.17", "2.1.0"), ("no-version", None, None),
                                   ("not-a-version", "v2", None)):
        problems = case(name, reported, ran_on)
        assert len(problems) == 1 and "libfabric" in problems[0], (name, problems)


def test_narrowed_suites_are_suites(tmp_path):
    """rdma/narrow_suite.py: CI's first point of a suite reads as the suite's first point alone (its id
    names fewer axes); ramcloud-load's verbs tables, in CI's mode fewer and shorter."""
    from fabmeter.engine import engine_info, find_engine
    from fabmeter.suite import read as suite
    narrow = script_module("narrow_suite_mod", "rdma/narrow_suite.py")
    info = engine_info(find_engine())
    for name in ("perftest-parity", "paper-lat-bw", "thesis-oneway"):
        out = tmp_path / f"{name}.toml"
        narrow.main("first", str(REPO / "suites" / f"{name}.toml"), str(out))
        whole, first = suite.read(REPO / "suites" / f"{name}.toml", info), suite.read(out, info)
        assert first.name == whole.name and len(first.points) == 1, name
        (one,), want = first.points, whole.points[0]
        assert (one.experiment, one.transport, one.options) == (want.experiment, want.transport, want.options), name
    for ci in ("0", "1"):
        out = tmp_path / f"ramcloud-{ci}.toml"
        narrow.main("verbs", str(REPO / "suites" / "ramcloud-load.toml"), str(out), ci)
        s = suite.read(out, info)
        assert s.name == "ramcloud-load-verbs" and {p.transport for p in s.points} == {"verbs"}
        assert all(p.options["duration"] == (0.2 if ci == "1" else 1) for p in s.points)
    assert len(suite.read(tmp_path / "ramcloud-1.toml", info).points) < len(suite.read(tmp_path / "ramcloud-0.toml", info).points)


def test_doctor_parity_case_needs_every_row_judged_over_every_round(tmp_path):
    """`fabmeter doctor --parity` in the guest: exit 0, a finding per row with its verdict and evidence, fabmeter
    measured in every round (perftest may lose rounds to its clock under TCG), no tool process left."""
    import json
    rows = ("parity.lat.32", "parity.lat.65536", "parity.bw.32", "parity.bw.65536")

    def case(name, rc="0", rounds=5, ran=5, verdict="within", left="", checks=rows, lost=""):
        (tmp_path / f"{name}.cmd").write_text(f"fabmeter doctor --server --parity --rounds {rounds}\n")
        (tmp_path / f"{name}.rc").write_text(rc + "\n")
        (tmp_path / f"{name}.err").write_text("")
        (tmp_path / f"{name}.left").write_text(left)
        findings = [{"check": c, "severity": "ok" if verdict == "within" else "warn", "evidence": "5 rounds of ...",
                     "summary": f"send lat: {verdict}: fabmeter 1 vs perftest 1, over {ran} of {rounds} rounds{lost}"}
                    for c in checks]
        (tmp_path / f"{name}.out").write_text(json.dumps({"findings": [
            {"check": "memlock", "severity": "ok", "summary": "", "evidence": "x"}, *findings]}))
        return commands.check_doctor(str(tmp_path), name)

    problems, summary = case("good")
    assert problems == [] and len(summary["parity"]) == 4
    assert case("slower", verdict="fabmeter slower by 12 %")[0] == []
    assert case("ci", rounds=1, ran=1, verdict="cannot tell")[0] == []
    assert case("perftest-lost-a-round", ran=4, lost=" (fabmeter measured 5, perftest 4)")[0] == []
    problems, _ = case("fabmeter-lost-a-round", ran=4, lost=" (fabmeter measured 4, perftest 5)")
    assert len(problems) == 4 and "over 4 of 5 rounds" in problems[0]
    problems, _ = case("no-verdict", verdict="something else")
    assert len(problems) == 4
    problems, _ = case("a-row-missing", checks=rows[:3])
    assert problems == [f"parity findings {sorted(rows[:3])}"]
    problems, _ = case("exit-4", rc="4")
    assert problems[0].startswith("fabmeter doctor exited 4")
    problems, _ = case("left", left="123 ib_send_bw")
    assert problems == ["tool processes left: 123 ib_send_bw"]


def test_pytest_case_needs_its_tests_passed_and_none_skipped(tmp_path):
    for name, rc, last, ok in (("passed", "0", "1 passed, 11 deselected in 207.93s", True),
                               ("skipped", "0", "1 skipped, 11 deselected in 2.00s", False),
                               ("failed", "1", "1 failed, 11 deselected in 99.00s", False)):
        (tmp_path / f"{name}.cmd").write_text("pytest tests/test_doctor.py -k rxe\n")
        (tmp_path / f"{name}.rc").write_text(rc + "\n")
        (tmp_path / f"{name}.out").write_text(f".\n{last}\n")
        problems, _ = commands.check_pytest(str(tmp_path), name)
        assert (problems == []) == ok, (name, problems)


def test_ops_cases_need_every_op_measured_and_their_sum(tmp_path):
    """bw --ops in the guest: each op counted and rated, the flows running the
    ops in turn, the point's figures the ops' sum; a case where an op measured
    nothing, or whose sum is off, fails."""
    import json

    def case(name, ops, flows=1, iterations=(3000, 2000, 1000), sum_off=0):
        (tmp_path / f"{name}.cmd").write_text(f"fabmeter-engine run bw -s 1024 --ops {','.join(ops)}"
                                              f"{f' --flows {flows}' if flows > 1 else ''}\n")
        for f, text in ((".rc", "0\n"), (".server.rc", "0\n"), (".err", "")):
            (tmp_path / f"{name}{f}").write_text(text)
        per_op = [{"op": op, "flows": flows, "iterations": n, "bytes": n * 1024, "gbps": n * 1e-4,
                   "msg_rate": n * 10.0, "measured_at": "receiver"} for op, n in zip(ops, iterations)]
        each = [{"flow": i, "op": ops[i % len(ops)], "iterations": iterations[i % len(ops)] // flows,
                 "bytes": iterations[i % len(ops)] // flows * 1024, "lost": 0} for i in range(flows * len(ops))]
        lines = [START,
                 {"type": "point", "experiment": "bw", "size": 1024, "warmup": 100, "lost": 0, "bidir": False,
                  "iterations": sum(iterations) + sum_off, "bytes": sum(iterations) * 1024,
                  "gbps": sum(o["gbps"] for o in per_op), "msg_rate": sum(o["msg_rate"] for o in per_op),
                  "ops": per_op, "flows": each},
                 {"type": "transport", "granted": {"op": ops[0], "service": "rc", "cm": "rdma_cm", "post_list": 1,
                                                   "device": "rxe0", "connections": flows * len(ops)}},
                 {"type": "end", "status": "ok"}]
        (tmp_path / f"{name}.out").write_text("\n".join(json.dumps(x) for x in lines))
        return cases.check_fabmeter(str(tmp_path), name)[0]

    assert case("three", ["send", "read", "write"]) == []
    assert case("three-flows2", ["send", "read", "write"], flows=2) == []
    problems = case("idle-read", ["send", "read", "write"], iterations=(3000, 0, 1000))
    assert any("read measured nothing" in p for p in problems), problems
    problems = case("off", ["send", "read", "write"], sum_off=5)
    assert any("do not add up" in p for p in problems), problems


def test_a_hop_case_needs_both_round_trips_and_their_difference(tmp_path):
    """test-rdma-guest.sh's hop cases (`fabmeter lat -t verbs --via-hop` through `fabmeter-engine forward`): the run
    and the hop exit 0 and run.json's hop block carries direct, through and added = through - direct."""
    import json

    def case(name, added, hop_rc="0"):
        (tmp_path / f"{name}.cmd").write_text("fabmeter hop lat -t verbs --to-transport shm\n")
        (tmp_path / f"{name}.rc").write_text("0\n")
        (tmp_path / f"{name}.hop.rc").write_text(hop_rc + "\n")
        (tmp_path / f"{name}.hop.err").write_text("fabmeter-engine: error: boom\n" if hop_rc != "0" else "")
        (tmp_path / f"{name}.results").mkdir()
        point = {"size": 32, "direct_rtt_ns": {"p50": 100000.0}, "through_rtt_ns": {"p50": 160000.0},
                 "hop_added_rtt_ns": {"p50": added}}
        (tmp_path / f"{name}.results" / "run.json").write_text(json.dumps({"hop": {"rounds": [[point]]}}))
        return commands.check_hop(str(tmp_path), name)

    problems, summary = case("good", 60000.0)
    assert problems == [] and summary["added_p50_ns"] == 60000.0
    problems, _ = case("wrong", 50000.0)
    assert problems and "not through" in problems[0]
    problems, _ = case("hopfailed", 60000.0, hop_rc="1")
    assert problems and problems[0].startswith("the hop exited 1")


def test_a_peers_case_over_rdma_cm_needs_perftest_to_have_run_it_so(tmp_path):
    """`fabmeter peers --server ... --cm rdma_cm` in the guest: perftest's banner must say rdma_cm QPs (its point's
    cm) for every test, as for the other knobs; and a run of selected cases (FM_RDMA_CASES) owes no fault section."""
    name = "peers-server-rdma-cm-ud"
    (tmp_path / f"{name}.cmd").write_text(
        "fabmeter peers --server --transports verbs --out /r --tools perftest -n 200 --duration 2 "
        "--bw-size 512 --service ud --cm rdma_cm --tests ib_send_lat,ib_send_bw\n")
    (tmp_path / f"{name}.rc").write_text("0\n")
    (tmp_path / f"{name}.left").write_text("")

    def points(cm):
        common = {"type": "point", "service": "UD", "cm": cm, "cpu": {"server": {"window_s": 4.7}}}
        return [{**common, "variant": "ib_send_lat", "experiment": "lat", "latency_ns": {"p50": 134880.0},
                 "server_command": ["/usr/bin/ib_send_lat", "-c", "UD", "-R"]},
                {**common, "variant": "ib_send_bw", "experiment": "bw", "gbps": 0.010237, "iterations": 5000,
                 "tool_cpu": {"cpu_util_pct": 57.3}, "server_command": ["/usr/bin/ib_send_bw", "-c", "UD", "-R"]}]

    (tmp_path / f"{name}.out").write_text("".join(json.dumps(p) + "\n" for p in points("rdma_cm")))
    assert commands.check_peers_server(str(tmp_path), name)[0] == []
    (tmp_path / f"{name}.out").write_text("".join(json.dumps(p) + "\n" for p in points("raw")))
    problems, _ = commands.check_peers_server(str(tmp_path), name)
    assert len(problems) == 2 and all("'cm': 'rdma_cm'" in p for p in problems), problems

    out = tmp_path / "out"
    raw = out / "raw"
    raw.mkdir(parents=True)
    for f in tmp_path.glob(f"{name}.*"):
        (raw / f.name).write_bytes(f.read_bytes())
    (raw / f"{name}.out").write_text("".join(json.dumps(p) + "\n" for p in points("rdma_cm")))
    (raw / "_finished").write_text("1\n")
    script = REPO / "rdma" / "test_rdma_report.py"
    whole = subprocess.run(["python3", str(script), str(out)], capture_output=True, text=True)
    assert whole.returncode == 1 and "FAIL faults: the guest ran no fault section" in whole.stdout
    (raw / "_selected").write_text("^peers-server-rdma-cm\n")
    some = subprocess.run(["python3", str(script), str(out)], capture_output=True, text=True)
    assert some.returncode == 0 and "only the cases matching '^peers-server-rdma-cm' ran" in some.stdout, some.stdout
