"""The load experiment: open-loop request/response.

Counts add up on every transport and poll mode; a server with a synthetic
service time saturates where the arithmetic says (1 / service time); a full
--max-outstanding sheds instead of sending late; the histogram a point
carries decodes with the hdrhistogram package to the point's own figures;
raw samples agree with the histogram to its resolution; between two
namespaces exactly the requests whose packet the kernel dropped are lost;
bad input gets one line and exit 2. Timing values are never asserted: the
saturation bounds are arithmetic (a server cannot answer faster than its
service time allows), with room for a loaded machine below them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import POLLS, TRANSPORTS, json_lines, need_transport, one_line_error
from test_samples import java_percentile
from lossy import lossy_pair  # noqa: F401  (the fixture)

KEYS = {"offered_rps", "achieved_rps", "achieved_gbps", "latency_ns", "service_latency_ns", "lag_ns",
        "outstanding_max", "shed", "lost", "slowdown", "server", "unloaded_ns", "latency_hist"}


@pytest.mark.parametrize("poll", POLLS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_transport_runs_a_point(fm, transport, poll):
    r = fm.run("load", "-t", transport, "--poll", poll, "--rate", "4000",
               "--count", "1000", "--warmup", "100", "--workload", "w1", "--max-size", "1K", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert KEYS <= set(p), KEYS - set(p)
    assert p["requests"] == 1000 and p["warmup_sent"] + p["warmup_shed"] == 100
    assert p["requests"] == p["sent"] + p["shed"] and p["sent"] == p["completed"] + p["lost"], p
    if transport != "udp":  # reliable: nothing may be lost
        assert p["lost"] == 0 and p["completed"] == p["sent"], p
    assert p["latency_ns"]["min"] >= p["service_latency_ns"]["min"] > 0
    assert p["lag_ns"]["min"] >= 0
    # The server answered every request it was sent, probes and warm-up included.
    assert p["server"]["requests"] >= p["completed"] + p["warmup_sent"] - p["warmup_lost"]
    assert sum(b["count"] for b in p["slowdown"]) == p["completed"]
    assert p["slowdown"][-1]["size_hi"] <= 1024 and p["clamped"] > 0  # 3 % of w1 is above 1 KiB: clamped to --max-size
    # The server's pools, where the transport reports them: occupancy over time, within capacity.
    pools = p["server"].get("pools")
    if transport in ("tcp", "udp", "ofi"):
        assert pools["unit"] == ("work requests" if transport == "ofi" else "bytes"), pools
        assert pools["samples"] > 0 and 0 < len(pools["series"]["t_us"]) <= pools["samples"]
        assert pools["rx_used_max"] <= pools["rx_capacity"] and max(pools["series"]["rx_used"]) <= pools["rx_used_max"]
        assert pools["series"]["t_us"] == sorted(pools["series"]["t_us"])
        if transport == "ofi":
            assert pools["rx_posted_min"] == pools["rx_capacity"] - pools["rx_used_max"]
    else:
        assert pools is None


def test_service_time_saturates_at_its_arithmetic(fm):
    # 20 us per request on one server thread: at most 50 000 replies/s. The
    # lower rate asks a fifth of that, so a server sharing its CPU still keeps up.
    service_ns, offered = 20_000, 100_000
    limit = 1e9 / service_ns
    r = fm.run("load", "-t", "shm", "--service-ns", str(service_ns), "--rate", f"{limit // 5:.0f},{offered}",
               "--duration", "0.4", "--max-outstanding", "4096", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    below, over = json_lines(r.stdout)
    for p in (below, over):
        assert p["service_latency_ns"]["min"] >= service_ns, p["service_latency_ns"]
    # Below the limit the server keeps up; above it the achieved rate is held at 1 / service time.
    assert below["achieved_rps"] > 0.8 * below["offered_rps"], below
    assert over["achieved_rps"] <= 1.05 * limit, over
    assert over["achieved_rps"] > 0.3 * limit, over
    assert over["knee"]["offered_rps"] is not None, over["knee"]  # the overloaded point is past the knee


def test_capacity_point_measures_the_service_limit(fm):
    service_ns = 50_000
    r = fm.run("load", "-t", "tcp", "--service-ns", str(service_ns), "--of-capacity", "0.5", "--duration", "0.3",
               "--json")
    assert r.returncode == 0, r.stderr
    capacity, half = json_lines(r.stdout)
    assert capacity["phase"] == "capacity" and half["phase"] == "open loop" and half["of_capacity"] == 0.5
    assert capacity["achieved_rps"] <= 1.05 * 1e9 / service_ns, capacity
    assert half["offered_rps"] == pytest.approx(0.5 * capacity["achieved_rps"], rel=1e-6)
    assert capacity["outstanding_max"] <= 256


def test_capacity_window_opens_after_the_warm_up(fm):
    """A warm-up longer than --duration (1000 requests x 200 us of service: 0.2 s, against 0.05 s; W4 and W5's
    megabyte requests do this over tcp) leaves the capacity point its whole window: it completes requests, so
    --of-capacity has a rate to scale."""
    r = fm.run("load", "-t", "shm", "--service-ns", "200000", "--of-capacity", "0.5", "--duration", "0.05", "--json")
    assert r.returncode == 0, r.stderr
    capacity, half = json_lines(r.stdout)
    assert capacity["warmup_sent"] == 1000 and capacity["completed"] > 0 and half["completed"] > 0


def test_full_window_sheds_instead_of_sending_late(fm):
    # One request in flight, 100 us each at the server, 20 000 due per second: most are shed.
    r = fm.run("load", "-t", "shm", "--service-ns", "100000", "--max-outstanding", "1", "--rate", "20000",
               "--count", "2000", "--warmup", "10", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["outstanding_max"] == 1
    assert p["requests"] == 2000 and p["shed"] > 1000 and p["sent"] + p["shed"] == 2000, p
    assert p["completed"] == p["sent"] and p["lost"] == 0


def test_overload_counts_what_was_shed(fm):
    """--of-capacity above 1 offers more than the capacity point achieved: the excess is shed (never sent late), the
    achieved rate stays at the service limit, and offered = sent + shed."""
    service_ns = 50_000
    r = fm.run("load", "-t", "shm", "--service-ns", str(service_ns), "--of-capacity", "0.5,2", "--duration", "0.3",
               "--max-outstanding", "8", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    capacity, half, double = json_lines(r.stdout)
    assert double["of_capacity"] == 2 and double["offered_rps"] == pytest.approx(2 * capacity["achieved_rps"], rel=1e-6)
    assert double["requests"] == double["sent"] + double["shed"] and double["shed"] > 0, double
    assert double["achieved_rps"] <= 1.05 * 1e9 / service_ns, double
    assert double["completed"] == double["sent"] and double["outstanding_max"] <= 8


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_closed_loop_clients(fm, transport):
    """--clients N: closed loop, a point per N, each client's --outstanding slots all in flight at the start
    (so the most in flight is exactly clients x outstanding), nothing shed, nothing late."""
    r = fm.run("load", "-t", transport, "--clients", "2,4,16", "--outstanding", "2", "--think-us", "20",
               "--threads", "2", "--conns", "2", "--server-threads", "2", "--duration", "0.3", "--json",
               timeout=120)
    assert r.returncode == 0, r.stderr
    points = json_lines(r.stdout)
    assert [p["clients"] for p in points] == [2, 4, 16]
    for p in points:
        assert p["phase"] == "closed loop" and p["arrivals"] == "closed loop" and p["shed"] == 0, p
        assert p["outstanding"] == 2 and p["think_us"] == 20 and p["completed"] == p["sent"] > 0, p
        assert p["outstanding_max"] == p["clients"] * 2, p
        assert p["offered_rps"] == p["achieved_rps"]


def test_report_draws_a_client_sweep(fm, tmp_path):
    r = fm.run("load", "-t", "shm", "--clients", "1,2,4", "--duration", "0.1", "--warmup", "10",
               "--out", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    assert "4 clients x 1 (closed)" in r.stdout
    r = fm.run("report", tmp_path / "run", "-o", tmp_path / "report.html")
    assert r.returncode == 0, r.stderr
    assert 'alt="load closed loop against clients"' in (tmp_path / "report.html").read_text()


def test_think_time_bounds_a_closed_loop_client(fm):
    """One client, one request in flight, 1 ms of think time: it cannot complete more than one request per
    (think time + fastest round trip); without the pause it would do hundreds of times that."""
    r = fm.run("load", "-t", "shm", "--clients", "1", "--think-us", "1000", "--duration", "0.3", "--warmup", "10",
               "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert 0 < p["achieved_rps"] <= 1.02e9 / (1e6 + p["latency_ns"]["min"]), p["achieved_rps"]
    assert p["outstanding_max"] == 1 and p["completed"] > 0, p


def test_open_loop_queues_as_md1_closed_loop_does_not(fm, tmp_path):
    """Poisson arrivals into a fixed service time D at utilisation rho wait, on average, rho D / (2 (1 - rho))
    ahead of service, and a share rho of them wait at all (M/D/1); one closed-loop client at the same
    throughput never finds a queue. A request's wait is its latency beyond the unloaded round trip's p50
    (which includes D). Judged robustly, as a shared machine stalls now and then: the share that waited more
    than D / 10 (M/D/1: 0.47), and the median of ten blocks' mean waits (a stall spoils one or two). D is 1 ms:
    the machine's own stalls queue requests too (other tasks' turns on the busy-polling ends' CPUs: in one
    second here 37 and 13 preemptions, 22 and 16 ms); at D = 100 us the median block wait read 2.3-3.8x the
    model's (6 runs of 6), at 1 ms 1.06-1.16x."""
    service_ns, rho = 1_000_000, 0.5
    rate = rho * 1e9 / service_ns
    md1_wait = rho * service_ns / (2 * (1 - rho))

    def run(name: str, *args) -> tuple[dict, np.ndarray]:
        r = fm.run("load", "-t", "shm", "--service-ns", str(service_ns), "--duration", "4", "--samples", "raw",
                   "--out", tmp_path / name, "--json", *args, timeout=120)
        assert r.returncode == 0, r.stderr
        (p,) = json_lines(r.stdout)
        return p, np.load(tmp_path / name / p["samples"]["latency_ns"]) - p["unloaded_ns"]["p50"]

    open_loop, open_wait = run("open", "--rate", f"{rate:.0f}", "--arrivals", "poisson")
    closed, closed_wait = run("closed", "--clients", "1", "--think-us", f"{(1e9 / rate - service_ns) / 1e3:.0f}")
    assert closed["achieved_rps"] == pytest.approx(open_loop["achieved_rps"], rel=0.3), (closed, open_loop)
    waited = {n: float(np.mean(w > service_ns / 10)) for n, w in (("open", open_wait), ("closed", closed_wait))}
    block = {n: float(np.median([b.mean() for b in np.array_split(w, 10)]))
             for n, w in (("open", open_wait), ("closed", closed_wait))}
    assert 0.35 <= waited["open"] <= 0.62 and waited["closed"] < 0.1, waited
    assert 0.6 * md1_wait <= block["open"] <= 2 * md1_wait and block["closed"] < 0.25 * md1_wait, (block, md1_wait)


def test_transmit_path_is_timed_where_sends_complete(fm, engine, tmp_path):
    """A server whose send queue fills (one send deep, 1 MiB replies over libfabric's shm provider, whose sends
    complete only when the client has copied them) waits for free buffers: every wait, every poll for send
    completions (with and without any) is counted and timed, the completions per poll add up; the report
    draws it. A transport without send completions has no such path: `tx` is null."""
    need_transport("ofi")
    r = fm.run("load", "-t", "ofi", "--provider", "shm", "--ep", "rdm", "--sq-depth", "1", "--rq-depth", "4",
               "--resp-size", "1M", "--rate", "500,2000", "--duration", "0.2", "--warmup", "2", "--json",
               "--out", tmp_path / "run", timeout=120)
    assert r.returncode == 0, r.stderr
    points = json_lines(r.stdout)
    tx = points[-1]["server"]["tx"]
    assert tx["waits"] > 0 and tx["polls"] > 0 and tx["wait_ns_total"] > 0, tx
    assert sum(int(n) * c for n, c in tx["completions_per_poll"].items()) == tx["completions"], tx
    assert sum(tx["completions_per_poll"].values()) == tx["polls"]
    assert tx["mean_per_poll"] == pytest.approx(tx["completions"] / tx["polls"])
    assert tx["wait_ns_mean"] * tx["waits"] == pytest.approx(tx["wait_ns_total"])
    r = fm.run("report", tmp_path / "run", "-o", tmp_path / "report.html")
    assert r.returncode == 0, r.stderr
    assert 'alt="load transmit path"' in (tmp_path / "report.html").read_text()
    r = fm.run("load", "-t", "tcp", "--rate", "2000", "--count", "200", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["server"]["tx"] is None


def test_tx_stamps_switch_the_transmit_path_record(fm, engine, tmp_path):
    """--tx-stamps off: a server whose every reply waits for a send buffer (as above, closed loop) serves every
    request unstamped and reports server.tx null, not zeros; by default (on) the same run stamps its waits.
    run.json records which."""
    need_transport("ofi")
    for stamps in ("off", None):
        r = fm.run("load", "-t", "ofi", "--provider", "shm", "--ep", "rdm", "--sq-depth", "1", "--rq-depth", "4",
                   "--resp-size", "64K", "--clients", "2", "--duration", "0.1", "--warmup", "2",
                   *(["--tx-stamps", stamps] if stamps else []), "--json", "--out", tmp_path / str(stamps),
                   timeout=120)
        assert r.returncode == 0, r.stderr
        (p,) = json_lines(r.stdout)
        assert p["server"]["requests"] > 0 and p["achieved_rps"] > 0, p["server"]
        tx = p["server"]["tx"]
        assert tx is None if stamps == "off" else tx["waits"] > 0 and tx["wait_ns_total"] > 0, tx
        params = json.loads((tmp_path / str(stamps) / "run.json").read_text())["config"]["params"]
        assert params["tx_stamps"] == (stamps or "on")


def test_threads_and_connections(fm):
    r = fm.run("load", "-t", "tcp", "--conns", "4", "--threads", "2", "--server-threads", "2", "--rate", "20000",
               "--count", "4000", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert (p["conns"], p["threads"], p["server_threads"]) == (4, 2, 2)
    assert p["requests"] == 4000 and p["completed"] == p["sent"], p


def test_histogram_decodes_to_the_points_figures(fm, tmp_path):
    hdrh = pytest.importorskip("hdrh.histogram")
    # A window as large as the count: nothing is shed however starved the machine is.
    r = fm.run("load", "-t", "shm", "--rate", "50000", "--count", "20000", "--max-outstanding", "20000",
               "--samples", "raw", "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    h = hdrh.HdrHistogram.decode(p["latency_hist"])
    assert (p["latency_hist_below"], p["latency_hist_above"]) == (0, 0)  # a round trip, never below 0
    assert h.get_total_count() == p["completed"] == 20000
    for key, q in (("p50", 50), ("p99", 99), ("p999", 99.9)):
        assert p["latency_ns"][key] == java_percentile(h, q, p["latency_ns"]), key
    # The raw samples: every completed request, and the histogram's percentile
    # is the nearest-rank sample to its 3 significant digits.
    lat = np.load(tmp_path / p["samples"]["latency_ns"])
    assert len(lat) == 20000 and len(np.load(tmp_path / p["samples"]["size_bytes"])) == 20000
    nearest = np.sort(lat)[int(np.ceil(0.99 * len(lat))) - 1]
    assert abs(p["latency_ns"]["p99"] - nearest) <= max(1.0, nearest * 2e-3), (p["latency_ns"]["p99"], nearest)
    assert p["latency_ns"]["max"] == lat.max() and p["latency_ns"]["min"] == lat.min()


def test_a_workload_runs_whole(fm, engine):
    """No --max-size: W5's requests up to 29.4 MB travel as they are, none clamped."""
    r = fm.run("load", "-t", "tcp", "--workload", "w5", "--rate", "200", "--count", "300", "--warmup", "10", "--json")
    assert r.returncode == 0, r.stderr
    (p,) = json_lines(r.stdout)
    assert p["clamped"] == 0 and p["slowdown"][-1]["size_hi"] == 29400000, p["slowdown"][-1]
    assert p["completed"] == 300


def test_a_workload_the_transport_cannot_carry_is_refused(fm, engine):
    """udp carries 65507 B: W5 would lose 52.8 % of its requests and 99.5 % of its bytes to clamping."""
    r = fm.run("load", "-t", "udp", "--workload", "w5", "--rate", "100", "--count", "10")
    assert r.returncode == 2
    line = one_line_error(r.stderr)
    assert "workload w5" in line and "65507 B" in line, line
    assert "52.8 % of its requests and 99.5 % of its bytes" in line, line


def test_same_seed_same_schedule(fm):
    runs = []
    for _ in range(2):
        r = fm.run("load", "-t", "shm", "--workload", "w3", "--max-size", "64K", "--rate", "20000", "--count", "3000",
                   "--max-outstanding", "3000", "--seed", "7", "--json")
        assert r.returncode == 0, r.stderr
        (p,) = json_lines(r.stdout)
        runs.append(p)
    # The sizes are drawn from the seed: the same requests fall in each size bucket.
    assert [b["count"] for b in runs[0]["slowdown"]] == [b["count"] for b in runs[1]["slowdown"]]
    assert runs[0]["clamped"] == runs[1]["clamped"]


@pytest.mark.parametrize("percent", [1])
def test_lost_is_what_the_kernel_dropped(fm, lossy_pair, percent):
    with lossy_pair.server(fm) as port:
        lossy_pair.drop("udp", percent)
        p = lossy_pair.client(fm, port, "load", "-t", "udp", "--rate", "20000", "--count", "10000",
                              "--loss-timeout-ms", "50")
    d = lossy_pair.dropped()
    print({k: p.get(k) for k in ("sent", "completed", "lost", "warmup_lost", "probes_lost", "stale_replies")}, d)
    assert d["rule"] > 0, d
    # One dropped datagram (request or reply) is one request without its reply.
    assert p["lost"] + p["warmup_lost"] + p["probes_lost"] == d["rule"] + d["rule_warmup"] + d["other"], (p, d)
    assert p["stale_replies"] == 0


@pytest.mark.parametrize("args, says", [
    (["--rate", "0"], "--rate must be between"),
    (["--of-capacity", "10.5"], "--of-capacity must be a multiple of the capacity"),
    (["--of-capacity", "0"], "--of-capacity must be a multiple of the capacity"),
    (["--clients", "0"], "--clients must be between 1 and 4096"),
    (["--clients", "2", "--rate", "1000"], "one of --rate, --of-capacity and --clients"),
    (["--clients", "2", "--of-capacity", "0.5"], "one of --rate, --of-capacity and --clients"),
    (["--clients", "1", "--conns", "2", "--threads", "2"], "--clients must be at least --threads"),
    (["--outstanding", "4"], "closed loop only"),
    (["--clients", "2", "--think-us", "2000000"], "--think-us must be between"),
    (["--req-size", "4"], "--req-size must be at least 8"),
    (["--req-size", "64", "--workload", "w1"], "either --req-size or --workload"),
    (["--threads", "2"], "--threads and --server-threads must be between 1 and --conns"),
    (["--poll", "event", "--conns", "2", "--threads", "1", "--server-threads", "1"], "event mode sleeps on one connection"),
    (["--workload", "w9"], "w9"),
    (["--arrivals", "bursty"], "--arrivals"),
])
def test_bad_input_one_line_exit_2(fm, args, says):
    r = fm.run("load", "-t", "shm", *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert says in one_line_error(r.stderr)


@pytest.mark.parametrize("rows, says", [
    ("length_bytes,weight\n100,1\n50,1\n", "must increase"),
    ("length_bytes,weight\n100,0\n200,0\n", "weight"),
    ("size,weight\n100,1\n", "header"),
    ("", "header"),
])
def test_workload_file_that_is_not_a_cdf(fm, tmp_path, rows, says):
    f = tmp_path / "w.csv"
    f.write_text(rows)
    r = fm.run("load", "-t", "shm", "--workload", str(f))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert says in one_line_error(r.stderr)
    assert str(f) in r.stderr
