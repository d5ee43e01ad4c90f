"""Each shipped suite against the study it reproduces (its seed).

The tables below are the seeds' parameters, written from the studies (the
suite files name the table or figure of each block): sizes, rates, counts,
service types, inline, signaling, MTU, connection setup. A suite whose
expanded points drift from them fails here. Points a suite adds beyond its
seed (other transports, for comparison) are outside these tables.
"""

from __future__ import annotations

import pytest

from conftest import REPO
from fabmeter.engine import engine_info
from fabmeter.suite import read as suite

K = 1024
POW2 = lambda lo, hi: [1 << i for i in range(lo.bit_length() - 1, hi.bit_length())]  # noqa: E731


@pytest.fixture(scope="module")
def info(engine) -> dict:
    return engine_info(str(engine))


def points(info, name):
    s = suite.read(REPO / "suites" / f"{name}.toml", info)
    return [(p, p.params(s.options)) for p in s.points]


# --- the thesis, "Custom one-way host channel adapter benchmark" -------------
# (service, poll, op, inline, signal_every, size, bursts, burst_size, gap_us, pinned); every
# send signaled is 1, one in sq_depth/2 is 0 (auto); event runs unpinned.
def thesis_oneway_seed() -> set[tuple]:
    rows = set()
    base = dict(poll="busy", op="send", inline=0, sig=0, size=32, bursts=25, burst_size=8000, gap=0)

    def row(service, **kw):
        r = {**base, **kw}
        for gap in ((0, 5.5) if r["burst_size"] == 2730 else (r["gap"],)):   # a:oneway_message_size_wait
            rows.add((service, r["poll"], r["op"], r["inline"], r["sig"], r["size"], r["bursts"], r["burst_size"],
                      gap, r["poll"] == "busy"))

    for service in ("rc", "uc", "ud"):
        for poll in ("busy", "event"):                      # tab:oneway_settings_event, _busy
            row(service, poll=poll)
            row(service, poll=poll, bursts=1, gap=1e6)      # intermediate pauses: 1 x 8000, 1 s apart
        for inline in (0, 188):                             # tab:oneway_settings_inline
            row(service, inline=inline)
    for service in ("rc", "uc"):                            # tab:oneway_settings_rdma
        for op in ("send", "write-imm"):
            for inline in (0, 188):
                row(service, op=op, inline=inline)
    for service, ops in (("rc", ("send", "write-imm")), ("uc", ("send", "write-imm")), ("ud", ("send",))):
        for op in ops:
            for sig in (1, 0):                              # tab:oneway_settings_unsignaled_inline (+ rdma)
                row(service, op=op, inline=188, sig=sig)
            top = 4 * K if service == "ud" else 32 * K      # tab:oneway_settings_message_size
            for size in POW2(8, top):
                row(service, op=op, size=size, bursts=10, burst_size=2730)
            for size in POW2(8, 256):                       # inline to 256 B (a:oneway_message_size_inline)
                row(service, op=op, inline=256, size=size, bursts=10, burst_size=2730)
    return rows


def test_thesis_oneway_matches_the_thesis(info):
    got = {(q["service"], q["poll"], q["op"], q["inline"], q["signal_every"], q["size"], q["bursts"],
            q["burst_size"], q["gap_us"], p.cpus != "none") for p, q in points(info, "thesis-oneway")
           if p.transport == "verbs"}
    assert got == thesis_oneway_seed()
    assert all(q["threshold_us"] == 10 for _, q in points(info, "thesis-oneway"))


# --- the thesis, "VILLASnode node-type benchmark" -----------------------------
STREAM_RATES = {100, 2500, 25000, 100000}       # named in the text; 100 Hz .. 100 kHz
STREAM_VALUES = [1, 2, 4, 8, 16, 32, 64]        # 1 .. 64 values per sample
STREAM_SAMPLES = 250000                          # "for every rate, 250000 samples were sent"
# transport/service -> the values swept (fig:rate_size_3d_*, a:shmem_3d: the grid; the comparisons: 8)
STREAM_SEED = {("verbs", "rc"): STREAM_VALUES, ("verbs", "uc"): STREAM_VALUES, ("verbs", "ud"): STREAM_VALUES,
               ("shm", None): STREAM_VALUES, ("zmq", None): [8], ("nanomsg", None): [8]}


def test_thesis_stream_matches_the_thesis(info):
    got = {}
    for p, q in points(info, "thesis-stream"):
        assert q["count"] == STREAM_SAMPLES and q["timer"] == "tsc" and q["poll"] == "busy"
        assert STREAM_RATES <= set(q["rate"]) and min(q["rate"]) == 100 and max(q["rate"]) == 100000
        got[(p.transport, q["service"] if p.transport == "verbs" else None)] = list(q["values"])
        if p.transport == "verbs":                  # samples up to 188 B inline, S = D_SQ / 2
            assert q["inline"] == 188 and q["signal_every"] == 0
    assert {k: got.get(k) for k in STREAM_SEED} == STREAM_SEED


# --- the benchmarking-tools paper -------------------------------------------
# verbs: (experiment, service, bidir, max_size, inline, tx_depth, signal_every, rq_depth) with
# MTU 4096, raw QPs, 1000 iterations everywhere (perftest's ib_send_lat / ib_send_bw defaults)
PAPER_VERBS = {("lat", s, False, 8 * K * K, 236, None, None, None) for s in ("rc", "uc")} \
    | {("lat", "ud", False, 4 * K, 188, None, None, None)} \
    | {("bw", s, b, 8 * K * K if s != "ud" else 4 * K, 0, 128, 100, 512) for s in ("rc", "uc", "ud")
       for b in (False, True)}
# sockets (Tables 5-8): (experiment, transport, max_size)
PAPER_SOCKETS = {("lat", "udp", 32 * K), ("lat", "tcp", 32 * K), ("bw", "udp", 32 * K)}
# the paper's own tools (tool, test, transport, size, iters or seconds): ib_send_lat RC at 1000 iterations
# (Tables 2-3), qperf udp_lat and tcp_lat at its 2 s (Tables 6 and 8), every power of two from 4 B
PAPER_TOOLS = {("perftest", "ib_send_lat", "verbs", s, 1000) for s in POW2(4, 8 * K * K)} \
    | {("qperf", None, t, s, 2) for t in ("udp", "tcp") for s in POW2(4, 32 * K)}


def test_paper_lat_bw_matches_the_paper(info):
    got_verbs, got_sockets, got_tools = set(), set(), set()
    for p, q in points(info, "paper-lat-bw"):
        if p.tool:
            assert q["experiment"] == "lat", p.id
            got_tools.add((p.tool, q["tests"], p.transport, q["size"],
                           q["iters"] if p.tool == "perftest" else q["duration"]))
            continue
        assert q["all"] is True                     # 1 B .. max_size: the paper's 4 B .. max_size within
        if p.transport == "verbs":
            assert (q["mtu"], q["cm"], q["iters"]) == (4096, "raw", 1000), p.id
            bw = q["experiment"] == "bw"
            got_verbs.add((q["experiment"], q["service"], q["bidir"], q["max_size"], q["inline"],
                           q["tx_depth"] if bw else None, q["signal_every"] if bw else None,
                           q["rq_depth"] if bw else None))
        elif p.transport in ("udp", "tcp") and not q["bidir"]:
            got_sockets.add((q["experiment"], p.transport, q["max_size"]))
    assert got_verbs == PAPER_VERBS
    assert PAPER_SOCKETS <= got_sockets
    assert got_tools == PAPER_TOOLS


# --- the uDAPL study ----------------------------------------------------------
UDAPL_SIZES = POW2(1 * K, 128 * K)              # every table: 1K .. 128K
PATTERNS = ("all-to-all", "fixed-target", "one-to-all", "all-to-one")


def udapl_seed() -> set[tuple]:
    """(transport, op, pattern, schedule, size, rq_depth, tx_depth, size_spread)."""
    rows = set()
    for tr, op, top in (("tcp", None, 128 * K), ("udp", None, 32 * K), ("verbs", "send", 128 * K),
                        ("verbs", "write-imm", 128 * K)):   # tab:ScheduleMessageTransfer, tab:ScheduleRDMATransfer
        rows |= {(tr, op, pat, "scheduled", s, None, None, 0) for pat in PATTERNS for s in UDAPL_SIZES if s <= top}
    for tr, ops in (("shm", (None,)), ("verbs", ("send", "write-imm"))):   # tab:ChaoticTransfer
        rows |= {(tr, op, "all-to-all", "chaotic", s, q, 10, 0) for op in ops for q in (11, 20, 100)
                 for s in UDAPL_SIZES}
    for tr, op in (("shm", None), ("verbs", "send")):     # chaotic, sizes +-50 %
        rows |= {(tr, op, "all-to-all", "chaotic", s, q, 10, 50) for q in (11, 20, 100) for s in UDAPL_SIZES}
    return rows


def test_udapl_patterns_matches_the_study(info):
    got = set()
    for p, q in points(info, "udapl-patterns"):
        chaotic = p.mesh["schedule"] == "chaotic"
        got.add((p.transport, q["op"] if p.transport == "verbs" else None, p.mesh["pattern"], p.mesh["schedule"], q["size"],
                 q["rq_depth"] if chaotic else None, q["tx_depth"] if chaotic else None, q["size_spread"]))
        if chaotic and p.transport == "verbs":
            assert q["sq_depth"] == 10
        assert p.mesh["mesh_experiment"] == "bw" and q["series_ms"] == 1
    assert got == udapl_seed()


# --- Homa's workload study ----------------------------------------------------
HOMA_WORKLOADS = {"w1", "w2", "w3", "w4", "w5"}


def test_homa_load_runs_the_workloads_whole(info):
    got = set()
    for p, q in points(info, "homa-load"):
        # Poisson arrivals at fractions of the capacity, by request count; no max_size: never clamped
        assert q["arrivals"] == "poisson" and q["of_capacity"] == [0.2, 0.5, 0.8] and q["count"] >= 10000, p.id
        assert "max_size" not in p.options, p.id
        got.add((p.transport, q["workload"]))
    assert got == {(t, w) for t in ("shm", "tcp") for w in HOMA_WORKLOADS}
