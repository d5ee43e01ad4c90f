"""What `fabmeter watch` keeps of its sweeps and publishes: per directed pair
a handful of counters, fixed latency buckets and the last run's figures (no
samples, so memory stays flat however long it runs), as metric families of
prometheus_client, served over HTTP or written to a textfile.

The latency histogram's buckets are derived from the pair's first measured
minimum (the figure a busy machine disturbs least): the R10 preferred
numbers (1, 1.25, 1.6, 2, 2.5, 3.15, 4, 5, 6.3, 8 per decade) from one
decade below that minimum's decade to five above it (4.2 us: 100 ns to 100 ms),
then fixed for the life of the process (histogram_quantile() over a rate
window needs stable buckets). Each run adds its messages: from the
engine's HdrHistogram when the point carries one (`--samples hist`, which
watch asks for), else from the point's percentiles (min, p50, p90, p99,
p99.9, max) read as a piecewise-linear distribution. docs/cli.md lists
every metric.
"""

from __future__ import annotations

import bisect
import http.client
import io
import math
import re
import selectors
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Optional

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.utils import floatToGoString

from fabmeter import analysis, slo
from fabmeter.mesh import outliers
from fabmeter import hdr

LABELS = ("src", "dst", "transport", "experiment")
R10 = (1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0)
DECADES_BELOW, DECADES_ABOVE = 1, 5
QUANTILES = (("0", "min"), ("0.1", "p10"), ("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"), ("0.999", "p999"),
             ("0.9999", "p9999"), ("1", "max"))
CDF_POINTS = (("min", 0.0), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))
HIST_KEYS = (("latency_hist", 1.0), ("rtt_hist", 0.5))     # lat's latency_ns is RTT/2: its RTT histogram, halved
MAX_MESSAGE = 200


def bounds_for(min_s: float) -> tuple[float, ...]:
    """The bucket bounds (seconds) for a pair whose first run's minimum was `min_s`."""
    decade = math.floor(math.log10(max(min_s, 1e-9)))
    out = [round(m * 10.0 ** d, 12) for d in range(decade - DECADES_BELOW, decade + DECADES_ABOVE) for m in R10]
    return tuple(out) + (round(10.0 ** (decade + DECADES_ABOVE), 12),)


def _num(v) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _cpus(point: dict) -> dict:
    """Each end's CPUs, as its engine read its own affinity for the point's CPU cost: "0+1", or "unpinned" (every
    CPU of its machine); an end that said nothing, none."""
    out = {}
    cost = point.get("cpu") if isinstance(point.get("cpu"), dict) else {}
    for end in ("client", "server"):
        side = cost.get(end)
        if not isinstance(side, dict) or "cpus" not in side:
            continue
        listed = side["cpus"] if isinstance(side["cpus"], list) else []
        cpus = [c["cpu"] for c in listed if isinstance(c, dict) and isinstance(c.get("cpu"), int)]
        out[end] = "+".join(map(str, cpus)) if cpus else "unpinned"
    return out


@dataclass
class PairStats:
    """One directed pair's aggregates since watch started; `last` holds the last run's figures (empty when it
    failed)."""
    labels: tuple[str, str, str, str]
    up: Optional[int] = None             # None until its first run ends
    runs: int = 0
    failures: int = 0
    messages: int = 0
    lost: int = 0
    slo_misses: int = 0
    slo_met: Optional[int] = None
    bounds: Optional[tuple[float, ...]] = None
    buckets: list[int] = field(default_factory=list)   # per bound, not cumulative; the last one is +Inf
    count: int = 0
    sum_s: float = 0.0
    source: Optional[str] = None         # hdrhistogram | percentiles: where the last run's buckets came from
    last: dict = field(default_factory=dict)
    cpus: dict = field(default_factory=dict)    # end (client, server) -> the CPUs its last run ran on ("0+1")
    off_cpu: dict = field(default_factory=dict)  # end -> share of its last window its measuring thread was off its CPU
    off_cpu_words: Optional[str] = None          # analysis.off_cpu_words of the last run
    duration_s: Optional[float] = None
    finished_at: Optional[float] = None
    message: str = ""

    def failed(self, message: str, duration_s: float) -> None:
        self.runs += 1
        self.failures += 1
        self.up, self.last, self.cpus, self.slo_met = 0, {}, {}, None
        self.off_cpu, self.off_cpu_words = {}, None
        self.message = message[:MAX_MESSAGE]
        self.duration_s, self.finished_at = duration_s, time.time()

    def measured(self, point: dict, duration_s: float, objectives) -> Optional[dict]:
        """A run that went well; returns its SLO verdict when it missed (None otherwise)."""
        self.runs += 1
        self.up, self.message = 1, ""
        self.duration_s, self.finished_at = duration_s, time.time()
        last: dict = {}
        lat = point.get("latency_ns") if isinstance(point.get("latency_ns"), dict) else None
        if lat:
            for q, key in QUANTILES:
                v = _num(lat.get(key))
                if v is not None:
                    last[f"q{q}"] = v / 1e9
            self._add_latency(point, lat)
        lost = _num(point.get("lost"))
        sent = _num(point.get("sent"))
        iters = _num(point.get("iterations"))
        # Sent measured messages: oneway, stream and load say; bw's iterations are its sent ones; lat's
        # iterations are the round trips that came back.
        if sent is None and iters is not None:
            sent = iters if point.get("experiment") == "bw" else iters + (lost or 0)
        total = sent
        if total is not None:
            self.messages += int(total)
            self.lost += int(lost or 0)
            last["loss_ratio"] = (lost or 0) / total if total > 0 else 0.0
        gbps = _num(point.get("gbps", point.get("achieved_gbps")))
        if gbps is not None:
            last["bytes_per_second"] = gbps * 1e9 / 8
        clock = point.get("clock")
        if isinstance(clock, dict) and clock.get("method") in ("probe", "shared_tsc"):
            shared = clock["method"] == "shared_tsc"
            for key, name, scale in (("offset_ns", "clock_offset", 1e-9), ("error_bound_ns", "clock_bound", 1e-9),
                                     ("drift_ppm", "clock_drift", 1e-6)):
                v = 0.0 if shared else _num(clock.get(key))
                if v is not None:
                    last[name] = v * scale
        self.last = last
        self.cpus = _cpus(point)
        sides = dict(zip(("client", "server"), analysis.cpu_sides(point)))
        self.off_cpu = {end: share for end, side in sides.items()
                        if (share := analysis.off_cpu_share(side)) is not None}
        self.off_cpu_words = analysis.off_cpu_words(point)
        if objectives:
            verdict = slo.evaluate_point(objectives, point)
            self.slo_met = int(verdict["met"])
            if not verdict["met"]:
                self.slo_misses += 1
                return verdict
        return None

    def _add_latency(self, point: dict, lat: dict) -> None:
        if self.bounds is None:
            # A one-way minimum on fitted clocks may be 0 or below (within the fit's bound): the first figure
            # above 0 then.
            low = next((v for v in (_num(lat.get(k)) for k in ("min", "p50", "p90", "max")) if v and v > 0), None)
            if low is None:
                return
            self.bounds = bounds_for(low / 1e9)
            self.buckets = [0] * (len(self.bounds) + 1)
        for key, scale in HIST_KEYS:
            text = point.get(key)
            if isinstance(text, str):
                try:
                    added = self._add_hdr(text, scale, point.get(f"{key}_below"), point.get(f"{key}_above"))
                except hdr.HistogramError:
                    break           # a histogram we cannot read: the percentiles below
                self._add_sum(lat, added)
                self.source = "hdrhistogram"
                return
        n = _num(point.get("iterations"))
        if n is None or n <= 0 or any(_num(lat.get(k)) is None for k, _ in CDF_POINTS):
            return
        self._add_percentiles(lat, int(n))
        self._add_sum(lat, int(n))
        self.source = "percentiles"

    def _add_hdr(self, text: str, scale: float, below, above) -> int:
        added = [0] * len(self.buckets)
        for value_ns, count in hdr.values(text):
            added[bisect.bisect_left(self.bounds, value_ns * scale / 1e9)] += count
        added[0] += int(below) if isinstance(below, int) and below > 0 else 0      # below 0: the first bucket
        added[-1] += int(above) if isinstance(above, int) and above > 0 else 0     # beyond 10 s: +Inf only
        for i, c in enumerate(added):
            self.buckets[i] += c
        return sum(added)

    def _add_percentiles(self, lat: dict, n: int) -> None:
        xs = [lat[k] / 1e9 for k, _ in CDF_POINTS]
        fs = [f for _, f in CDF_POINTS]

        def cdf(b: float) -> float:
            if b < xs[0]:
                return 0.0
            for i in range(1, len(xs)):
                if b < xs[i]:
                    return fs[i - 1] + (fs[i] - fs[i - 1]) * (b - xs[i - 1]) / (xs[i] - xs[i - 1])
            return 1.0
        before = 0
        for i, b in enumerate(self.bounds):
            upto = round(cdf(b) * n)
            self.buckets[i] += upto - before
            before = upto
        self.buckets[-1] += n - before

    def _add_sum(self, lat: dict, n: int) -> None:
        mean = _num(lat.get("mean"))
        self.count += n
        if mean is not None:
            self.sum_s += mean / 1e9 * n


class WatchState:
    """Every pair's aggregates and the sweeps' figures, read by the collector while the loop writes them."""

    def __init__(self, pairs: list[tuple[str, str]], transport: str, experiment: str, info: dict,
                 hosts: list[str], interval_s: float, with_slo: bool):
        self.lock = threading.Lock()
        self.pairs = {(s, d): PairStats((s, d, transport, experiment)) for s, d in pairs}
        self.hosts = {h: None for h in hosts}        # host -> 1/0 its serve answered the last check
        self.info, self.interval_s, self.with_slo = info, interval_s, with_slo
        self.sweeps = 0
        self.sweep_duration_s: Optional[float] = None
        self.sweep_ok = self.sweep_failed = 0
        self.sweep_finished_at: Optional[float] = None
        self.round_skew_s: Optional[float] = None
        self.hosts_list, self.experiment = list(hosts), experiment
        self.outliers: Optional[dict] = None        # mesh/outliers.py's verdict on the last sweep
        self.warning: Optional[str] = None          # the last sweep's analysis.crowded_cpus warning

    def judge_outliers(self) -> None:
        """The outlier rule (mesh/outliers.py, as a mesh run states it) over every pair's last run; the
        caller holds the lock."""
        rank = {h: i for i, h in enumerate(self.hosts_list)}
        pairs = []
        for (s, d), p in self.pairs.items():
            if not p.up or s not in rank or d not in rank:
                continue
            p50 = p.last.get("q0.5")
            gbps = p.last.get("bytes_per_second")
            pairs.append({"status": "ok", "src": rank[s], "dst": rank[d],
                          "latency_ns": {"p50": None if p50 is None else p50 * 1e9},
                          "gbps": None if gbps is None else gbps * 8 / 1e9})
        self.outliers = outliers.find(self.experiment, pairs, self.hosts_list)


class Collector:
    """The metric families, built from WatchState at each scrape (docs/cli.md lists them)."""

    def __init__(self, state: WatchState):
        self.state = state

    def describe(self):
        return []           # no checks at registration: collect() only ever runs at a scrape

    def collect(self):
        st = self.state
        with st.lock:
            yield from self._global(st)
            yield from self._pairs(st)

    def _global(self, st: WatchState):
        yield InfoMetricFamily("fabmeter_watch", "what this watch runs", value=st.info)
        yield GaugeMetricFamily("fabmeter_watch_interval_seconds", "the interval between sweep starts",
                                value=st.interval_s, unit="seconds")
        yield CounterMetricFamily("fabmeter_sweeps", "sweeps finished (every pair run once)", value=st.sweeps)
        if st.sweep_duration_s is not None:
            yield GaugeMetricFamily("fabmeter_sweep_duration_seconds", "wall time of the last sweep",
                                    value=st.sweep_duration_s, unit="seconds")
            yield GaugeMetricFamily("fabmeter_sweep_last_timestamp_seconds", "when the last sweep ended (Unix time)",
                                    value=st.sweep_finished_at, unit="seconds")
            pairs = GaugeMetricFamily("fabmeter_sweep_pairs", "pairs of the last sweep by result", labels=["result"])
            pairs.add_metric(["ok"], st.sweep_ok)
            pairs.add_metric(["failed"], st.sweep_failed)
            yield pairs
        if st.round_skew_s is not None:
            yield GaugeMetricFamily("fabmeter_sweep_round_start_skew_seconds",
                                    "the last sweep's largest round start skew (the pairs' start instants apart)",
                                    value=st.round_skew_s, unit="seconds")
        if st.warning:
            warning = GaugeMetricFamily("fabmeter_watch_warning", "the machine, not the fabric, sets the last "
                                        "sweep's figures: label warning says why (value 1; absent when not)",
                                        labels=["warning"])
            warning.add_metric([st.warning], 1)
            yield warning
        hosts = GaugeMetricFamily("fabmeter_host_up", "1: the host's fabmeter serve took a connection before the "
                                  "last sweep; 0: it did not (its pairs failed)", labels=["host"])
        for h, up in st.hosts.items():
            if up is not None:
                hosts.add_metric([h], up)
        yield hosts

    def _pairs(self, st: WatchState):
        fam = {
            "up": GaugeMetricFamily("fabmeter_pair_up", "1: the pair's last run went well; 0: it failed",
                                    labels=LABELS),
            "runs": CounterMetricFamily("fabmeter_pair_runs", "runs of the pair", labels=LABELS),
            "failures": CounterMetricFamily("fabmeter_pair_failures", "runs of the pair that failed", labels=LABELS),
            "lat": HistogramMetricFamily("fabmeter_pair_latency_seconds", "latency of every measured message of "
                                         "every run (one-way; lat: RTT/2; load: RTT from the intended send); buckets "
                                         "fixed from the first run's minimum", labels=LABELS, unit="seconds"),
            "source": GaugeMetricFamily("fabmeter_pair_latency_source", "where the last run's histogram counts came "
                                        "from: hdrhistogram (exact to 3 digits) or percentiles (interpolated)",
                                        labels=[*LABELS, "source"]),
            "q": GaugeMetricFamily("fabmeter_pair_last_latency_seconds", "the last run's latency percentiles "
                                   "(quantile 0: min, 1: max), as the engine computed them", labels=[*LABELS, "quantile"],
                                   unit="seconds"),
            "messages": CounterMetricFamily("fabmeter_pair_messages", "measured messages sent (arrived or lost)",
                                            labels=LABELS),
            "lost": CounterMetricFamily("fabmeter_pair_lost_messages", "measured messages lost", labels=LABELS),
            "loss": GaugeMetricFamily("fabmeter_pair_last_loss_ratio", "the last run's lost / sent", labels=LABELS),
            "tput": GaugeMetricFamily("fabmeter_pair_last_throughput_bytes_per_second", "the last run's payload "
                                      "throughput (bw; load: achieved)", labels=LABELS),
            "offset": GaugeMetricFamily("fabmeter_pair_clock_offset_seconds", "the last run's fitted offset of the "
                                        "destination's clock (oneway, stream; 0 on a shared clock)", labels=LABELS,
                                        unit="seconds"),
            "bound": GaugeMetricFamily("fabmeter_pair_clock_error_bound_seconds", "the last run's guaranteed bound "
                                       "of that fit's error", labels=LABELS, unit="seconds"),
            "drift": GaugeMetricFamily("fabmeter_pair_clock_drift_ratio", "the last run's fitted drift of the "
                                       "destination's clock (1e-6 = 1 ppm)", labels=LABELS),
            "cpus": GaugeMetricFamily("fabmeter_pair_cpus", "the CPUs each end of the pair's last run ran on, as "
                                      "its engine read them (label cpus: 0+1, or unpinned; value 1)",
                                      labels=[*LABELS, "end", "cpus"]),
            "off_cpu": GaugeMetricFamily("fabmeter_pair_last_off_cpu_ratio", "the share of the last run's window "
                                         "each end's busy measuring thread was kept off its CPU (another task, the "
                                         f"hypervisor); above {analysis.OFF_CPU_SHARE} the figures hold its absence",
                                         labels=[*LABELS, "end"]),
            "dur": GaugeMetricFamily("fabmeter_pair_run_duration_seconds", "wall time of the pair's last run",
                                     labels=LABELS, unit="seconds"),
            "ts": GaugeMetricFamily("fabmeter_pair_last_run_timestamp_seconds", "when the pair's last run ended "
                                    "(Unix time)", labels=LABELS, unit="seconds"),
        }
        if st.with_slo:
            fam["slo"] = CounterMetricFamily("fabmeter_pair_slo_misses", "runs that missed an --slo objective",
                                             labels=LABELS)
            fam["slo_met"] = GaugeMetricFamily("fabmeter_pair_slo_met", "1: the last run met every --slo objective",
                                               labels=LABELS)
        flagged = {}
        if st.outliers is not None and st.outliers["median"] is not None:
            for link in st.outliers["links"]:
                flagged[(st.hosts_list[link["src"]], st.hosts_list[link["dst"]])] = link
            fam["outlier"] = GaugeMetricFamily("fabmeter_pair_outlier", "1: the pair's last figure lies outside the "
                                               "other pairs' by the mesh's outlier rule (docs/cli.md), slow or fast; "
                                               "0: within", labels=[*LABELS, "direction"])
            fam["score"] = GaugeMetricFamily("fabmeter_pair_outlier_score", "the pair's last figure minus the "
                                             "median of all pairs, in scaled median absolute deviations (MADs)",
                                             labels=LABELS)
            hosts = GaugeMetricFamily("fabmeter_host_outlier", "1: most of the host's links on that side (out: as "
                                      "the source, in: as the destination) are outliers in that direction",
                                      labels=["host", "side", "direction"])
            for h in st.outliers["hosts"]:
                for side in h["sides"]:
                    hosts.add_metric([h["host"], side["side"], side["direction"]], 1)
            fam["hosts"] = hosts
        for p in st.pairs.values():
            if p.up is None:
                continue
            lb = list(p.labels)
            link = flagged.get(p.labels[:2])
            if "outlier" in fam and p.up:
                fam["outlier"].add_metric([*lb, link["direction"] if link else ""], 1 if link else 0)
                if link and link["score"] is not None:
                    fam["score"].add_metric(lb, link["score"])
            fam["up"].add_metric(lb, p.up)
            fam["runs"].add_metric(lb, p.runs)
            fam["failures"].add_metric(lb, p.failures)
            for end, cpus in p.cpus.items():
                fam["cpus"].add_metric([*lb, end, cpus], 1)
            for end, share in p.off_cpu.items():
                fam["off_cpu"].add_metric([*lb, end], share)
            fam["dur"].add_metric(lb, p.duration_s)
            fam["ts"].add_metric(lb, p.finished_at)
            if p.messages or p.lost:
                fam["messages"].add_metric(lb, p.messages)
                fam["lost"].add_metric(lb, p.lost)
            if p.bounds is not None and p.count:
                cum, out = 0, []
                for b, c in zip(p.bounds, p.buckets):
                    cum += c
                    out.append((floatToGoString(b), cum))
                out.append(("+Inf", cum + p.buckets[-1]))
                fam["lat"].add_metric(lb, out, sum_value=p.sum_s)
            if p.source and p.up:
                fam["source"].add_metric([*lb, p.source], 1)
            for q, _ in QUANTILES:
                if f"q{q}" in p.last:
                    fam["q"].add_metric([*lb, q], p.last[f"q{q}"])
            for key, name in (("loss_ratio", "loss"), ("bytes_per_second", "tput"), ("clock_offset", "offset"),
                              ("clock_bound", "bound"), ("clock_drift", "drift")):
                if key in p.last:
                    fam[name].add_metric(lb, p.last[key])
            if st.with_slo:
                fam["slo"].add_metric(lb, p.slo_misses)
                if p.slo_met is not None:
                    fam["slo_met"].add_metric(lb, p.slo_met)
        yield from fam.values()


def registry_for(state: WatchState) -> CollectorRegistry:
    """Our families and the process' own (process_resident_memory_bytes, ...), nothing else."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(state))
    ProcessCollector(registry=registry)
    return registry


# --- publishing ------------------------------------------------------------------

MAX_CONNECTIONS = 64        # at once; a new one closes the oldest still sending its request (if none: refused)
IDLE_TIMEOUT_S = 5.0        # for a request's head to arrive whole, and for each write of its answer to progress
MAX_HEAD_BYTES = 8192       # request line and headers; beyond: 431
BACKLOG = 128               # connections the kernel queues before the loop accepts them
POLL_S = 0.2                # the loop's timeouts and stop() are looked at this often
_HEAD_END = re.compile(rb"\r?\n\r?\n")


def only_metrics(app):
    """The metrics at / and /metrics, for GET and HEAD; nothing of the request reaches the exposition but its
    Accept and Accept-Encoding headers (no path, no query: the library's name[] filter is dropped)."""
    def serve(environ, start_response):
        if environ.get("PATH_INFO") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"fabmeter watch serves its metrics at /metrics only\n"]
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")])
            return [b"GET or HEAD\n"]
        environ = {**environ, "QUERY_STRING": "", "REQUEST_METHOD": "GET"}
        return app(environ, start_response)
    return serve


class _Connection:
    def __init__(self, sock: socket.socket, now: float):
        self.sock = sock
        self.head = bytearray()
        self.answer: Optional[memoryview] = None       # set once the request is read: what is left to send
        self.deadline = now + IDLE_TIMEOUT_S


class MetricsServer:
    """An HTTP server of the registry's metrics: one thread, one selectors loop, so a flood of connections costs
    neither threads nor memory. One request per connection, answered and closed; at most MAX_CONNECTIONS open,
    each closed after IDLE_TIMEOUT_S without its request or without progress of its answer; a request head over
    MAX_HEAD_BYTES is answered 431."""

    def __init__(self, registry: CollectorRegistry, bind: str, port: int):
        self.app = only_metrics(make_wsgi_app(registry))
        self.listener = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind((bind, port))
            self.listener.listen(BACKLOG)
        except OSError:
            self.listener.close()
            raise
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.open: dict[socket.socket, _Connection] = {}    # oldest first
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="metrics", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
        for c in list(self.open.values()):
            self._close(c)
        self.selector.close()
        self.listener.close()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            for key, _ in self.selector.select(timeout=POLL_S):
                if key.fileobj is self.listener:
                    self._accept()
                    continue
                c = key.data
                try:
                    self._write(c) if c.answer is not None else self._read(c)
                except OSError:                 # the peer reset it, or went away
                    self._close(c)
            now = time.monotonic()
            for c in [c for c in self.open.values() if c.deadline <= now]:
                self._close(c)

    def _accept(self) -> None:
        while True:
            if len(self.open) >= MAX_CONNECTIONS:
                oldest = next((c for c in self.open.values() if c.answer is None), None)
                if oldest is not None:
                    self._close(oldest)
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:                     # out of descriptors: let others close first
                self.stopping.wait(POLL_S)
                return
            if len(self.open) >= MAX_CONNECTIONS:   # every one is being answered: refused
                sock.close()
                continue
            sock.setblocking(False)
            c = _Connection(sock, time.monotonic())
            self.open[sock] = c
            self.selector.register(sock, selectors.EVENT_READ, c)

    def _read(self, c: _Connection) -> None:
        data = c.sock.recv(MAX_HEAD_BYTES + 1)
        if not data:
            self._close(c)
            return
        c.head += data
        end = _HEAD_END.search(c.head)
        if end is None and len(c.head) <= MAX_HEAD_BYTES:
            return
        if end is None or end.end() > MAX_HEAD_BYTES:
            self._answer(c, "431 Request Header Fields Too Large", [("Content-Type", "text/plain")],
                         f"a request head is at most {MAX_HEAD_BYTES} bytes\n".encode(), False)
            return
        self._respond(c, bytes(c.head[:end.start()]))

    def _respond(self, c: _Connection, head: bytes) -> None:
        line, _, rest = head.partition(b"\n")
        parts = line.decode("latin-1").strip().split(" ")
        try:
            headers = http.client.parse_headers(io.BytesIO(rest + b"\r\n\r\n"))
        except http.client.HTTPException:
            headers = None
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or headers is None:
            self._answer(c, "400 Bad Request", [("Content-Type", "text/plain")], b"bad request\n", False)
            return
        method, target, _ = parts
        path, _, query = target.partition("?")
        environ = {"REQUEST_METHOD": method, "PATH_INFO": urllib.parse.unquote(path, "latin-1"),
                   "QUERY_STRING": query}
        for name in ("Accept", "Accept-Encoding"):
            if name in headers:
                environ["HTTP_" + name.upper().replace("-", "_")] = headers[name]
        said: list = []
        try:
            body = b"".join(self.app(environ, lambda status, hdrs, exc_info=None: said.extend((status, hdrs))))
        except Exception as e:      # noqa: BLE001 -- a collector's failure answers this scrape, never ends the loop
            said, body = ["500 Internal Server Error", [("Content-Type", "text/plain")]], f"{e}\n".encode()
        self._answer(c, said[0], said[1], body, method != "HEAD")

    def _answer(self, c: _Connection, status: str, headers: list, body: bytes, with_body: bool) -> None:
        lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers if k.lower() != "content-length"),
                 f"Content-Length: {len(body)}", "Connection: close", "", ""]
        c.answer = memoryview("\r\n".join(lines).encode("latin-1") + (body if with_body else b""))
        c.deadline = time.monotonic() + IDLE_TIMEOUT_S
        self.selector.modify(c.sock, selectors.EVENT_WRITE, c)
        self._write(c)

    def _write(self, c: _Connection) -> None:
        try:
            sent = c.sock.send(c.answer)
        except BlockingIOError:
            return
        c.answer = c.answer[sent:]
        c.deadline = time.monotonic() + IDLE_TIMEOUT_S
        if not c.answer:
            self._close(c)

    def _close(self, c: _Connection) -> None:
        if self.open.pop(c.sock, None) is not None:
            self.selector.unregister(c.sock)
            c.sock.close()


def write_textfile(path: str, registry: CollectorRegistry) -> None:
    """PATH replaced whole (a temporary file beside it, then rename(2)): a reader sees the old or the new."""
    write_to_textfile(path, registry)
