#include "fabmeter/params.hpp"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "fabmeter/error.hpp"
#include "fabmeter/remote_parse.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/stats.hpp"

namespace fm {
namespace {
// A whole number with an optional k/M/G/T suffix worth base^1 .. base^4.
uint64_t parse_suffixed(std::string_view option, std::string_view text, uint64_t base, const char* rule) {
  std::string_view v = text;
  uint64_t mult = 1;
  if (!v.empty()) {
    const char* suffixes = "kmgt";
    if (const char* at = std::strchr(suffixes, std::tolower(static_cast<unsigned char>(v.back()))); at && *at) {
      for (const char* s = suffixes; s <= at; ++s) mult *= base;
      v.remove_suffix(1);
    }
  }
  uint64_t x = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size())
    usage_error(std::string(option) + ": expected a non-negative integer (" + rule + "), got '" + std::string(text) + "'");
  if (x > UINT64_MAX / mult) usage_error(std::string(option) + ": value too large");
  return x * mult;
}
}  // namespace

uint64_t parse_count(std::string_view option, std::string_view text) {
  return parse_suffixed(option, text, 1000, "k/M/G/T suffixes: 10k = 10,000");
}

uint64_t parse_size(std::string_view option, std::string_view text) {
  return parse_suffixed(option, text, 1024, "K/M/G/T suffixes: 64K = 65,536");
}

namespace {

// "--burst-size" for the field burst_size: messages name the option as typed.
std::string flag(std::string_view key) {
  std::string f = "--" + std::string(key);
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

uint64_t parse_u64(std::string_view opt, std::string_view v) { return parse_count(flag(opt), v); }

// A number or the word auto (returned as `none`). The number `none` itself
// is refused: "-n 0" must not quietly mean auto.
template <class T>
T parse_auto(std::string_view opt, std::string_view v, T none) {
  if (v == "auto") return none;
  const uint64_t x = parse_u64(opt, v);
  if (x > static_cast<uint64_t>(std::numeric_limits<T>::max())) usage_error(flag(opt) + ": value too large");
  if (static_cast<T>(x) == none)
    usage_error(flag(opt) + ": expected a number of at least 1 or auto, got '" + std::string(v) + "'");
  return static_cast<T>(x);
}

double parse_double(std::string_view opt, std::string_view v) {
  std::string s(v);
  char* end = nullptr;
  double x = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(x) || x < 0)
    usage_error(flag(opt) + ": expected a non-negative number, got '" + s + "'");
  return x;
}

std::string fmt_double(double x) {
  std::ostringstream o;
  o.precision(17);
  o << x;
  return o.str();
}

std::vector<uint64_t> parse_list(std::string_view opt, std::string_view v) {
  std::vector<uint64_t> out;
  while (true) {
    auto c = v.find(',');
    out.push_back(parse_u64(opt, v.substr(0, c)));
    if (c == std::string_view::npos) break;
    v = v.substr(c + 1);
  }
  return out;
}

std::vector<double> parse_double_list(std::string_view opt, std::string_view v) {
  std::vector<double> out;
  while (true) {
    auto c = v.find(',');
    out.push_back(parse_double(opt, v.substr(0, c)));
    if (c == std::string_view::npos) break;
    v = v.substr(c + 1);
  }
  return out;
}

std::string join_list(const std::vector<double>& xs) {
  std::string s;
  for (double x : xs) s += (s.empty() ? "" : ",") + fmt_double(x);
  return s;
}

std::string join_list(const std::vector<uint64_t>& xs) {
  std::string s;
  for (uint64_t x : xs) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

const OptSpec* find_by_key(std::string_view key);

// A value of a choice option: one of the values its table row lists.
std::string one_of(std::string_view key, std::string_view v) {
  const char* values = find_by_key(key)->values;
  if (in_list(values, v)) return std::string(v);
  std::string list(values);
  std::replace(list.begin(), list.end(), ',', '|');
  usage_error(flag(key) + ": expected " + list + ", got '" + std::string(v) + "'");
}

// Setters and getters of p's group G (params.hpp: one struct per group).
#define U64(G, field) \
  .set = [](Params& p, std::string_view v) { group_of<G>(p).field = parse_u64(#field, v); }, \
  .get = [](const Params& p) { return std::to_string(group_of<G>(p).field); }
#define U32(G, field) \
  .set = [](Params& p, std::string_view v) { \
    uint64_t x = parse_u64(#field, v); \
    if (x > UINT32_MAX) usage_error(flag(#field) + ": value too large"); \
    group_of<G>(p).field = static_cast<uint32_t>(x); }, \
  .get = [](const Params& p) { return std::to_string(group_of<G>(p).field); }
#define DBL(G, field) \
  .set = [](Params& p, std::string_view v) { group_of<G>(p).field = parse_double(#field, v); }, \
  .get = [](const Params& p) { return fmt_double(group_of<G>(p).field); }
// A number, or "auto" (stored as `none`: the experiment or transport decides).
#define AUTO_NUM(G, field, none) \
  .set = [](Params& p, std::string_view v) { \
    group_of<G>(p).field = parse_auto<decltype(group_of<G>(p).field)>(#field, v, none); }, \
  .get = [](const Params& p) { return group_of<G>(p).field == none ? std::string("auto") : std::to_string(group_of<G>(p).field); }
#define FLAG(G, field) \
  .set = [](Params& p, std::string_view v) { group_of<G>(p).field = (v != "0" && v != "false"); }, \
  .get = [](const Params& p) { return std::string(group_of<G>(p).field ? "1" : "0"); }
// One of the option's `values`.
#define CHOICE(G, field) \
  .set = [](Params& p, std::string_view v) { group_of<G>(p).field = one_of(#field, v); }, \
  .get = [](const Params& p) { return group_of<G>(p).field; }
#define TEXT(G, field) \
  .set = [](Params& p, std::string_view v) { group_of<G>(p).field = std::string(v); }, \
  .get = [](const Params& p) { return group_of<G>(p).field; }
#define LIST(G, field) \
  .set = [](Params& p, std::string_view v) { \
    group_of<G>(p).field = v.empty() ? std::vector<uint64_t>{} : parse_list(#field, v); }, \
  .get = [](const Params& p) { return join_list(group_of<G>(p).field); }
// A list of numbers; empty is off (the default of --of-capacity, --percentiles).
#define DBL_LIST(G, field) \
  .set = [](Params& p, std::string_view v) { \
    group_of<G>(p).field = v.empty() ? std::vector<double>{} : parse_double_list(#field, v); }, \
  .get = [](const Params& p) { return join_list(group_of<G>(p).field); }

using T = OptType;
using Com = CommonOptions;
using Oneway = OnewayOptions;
using Bw = BwOptions;
using Stream = StreamOptions;
using Load = LoadOptions;
using Queue = QueueOptions;
using Rdma = RdmaOptions;
using Verbs = VerbsOptions;
using Ofi = OfiOptions;
using Msg = MessagingOptions;
using Tcp = TcpOptions;

std::vector<OptSpec> make_table() {
  return {
    // The order is the one of --help, run.json and suite ids; `group` says
    // which part of the engine reads each option, and so (the groups each
    // fm_transport line lists) which transports it applies to.
    {.name = "transport", .short_name = 't', .metavar = "NAME", .type = T::choice,
     .help = "transport (fabmeter-engine options lists those built in)", TEXT(Com, transport)},
    {.name = "poll", .metavar = "MODE", .type = T::choice, .values = "busy,event",
     .help = "completion mode: busy (spin) or event (sleep until woken)",
     .set = [](Params& p, std::string_view v) { p.poll = one_of("poll", v) == "busy" ? Poll::busy : Poll::event; },
     .get = [](const Params& p) { return std::string(poll_name(p.poll)); }},
    {.name = "poll-recv", .metavar = "MODE", .type = T::choice, .values = "busy,event",
     .help = "the receive side alone: busy (spin on the receive queue) or event (sleep on its channel); default: --poll",
     .set = [](Params& p, std::string_view v) { p.poll_recv = one_of("poll_recv", v) == "busy" ? Poll::busy : Poll::event; },
     .get = [](const Params& p) { return std::string(poll_name(p.poll_recv)); }},
    {.name = "poll-send", .metavar = "MODE", .type = T::choice, .values = "busy,event",
     .help = "the send side alone (its completions and waits for room): busy (spin) or event (sleep on the send "
             "completion channel); default: --poll",
     .set = [](Params& p, std::string_view v) { p.poll_send = one_of("poll_send", v) == "busy" ? Poll::busy : Poll::event; },
     .get = [](const Params& p) { return std::string(poll_name(p.poll_send)); }},
    {.name = "spin-us", .metavar = "US", .type = T::duration, .unit = "us",
     .help = "event mode: poll this long for a message before sleeping, microseconds (spin, then sleep; 0: sleep at once)",
     DBL(Com, spin_us)},
    {.name = "size", .short_name = 's', .metavar = "BYTES", .type = T::size, .unit = "B", .scope = "lat,oneway,bw,setup",
     .help = "message size in bytes (setup: the bytes --what mr registers, at most 1 GiB)", U64(Com, size)},
    {.name = "all", .short_name = 'a', .type = T::flag, .scope = "lat,bw,setup",
     .help = "sweep sizes 1 B .. --max-size by powers of two (setup: 4 KiB .. --max-size)", FLAG(Com, sweep)},
    {.name = "max-size", .metavar = "BYTES", .type = T::size, .unit = "B", .scope = "lat,bw,check,load,setup",
     .help = "largest size of the -a sweep or of check (capped by the transport); load --workload: given, larger workload sizes are clamped to it and counted; not given, the workload runs whole, refused where the transport cannot carry its largest request",
     U64(Com, max_size)},
    {.name = "iters", .short_name = 'n', .metavar = "N", .type = T::count, .accepts_auto = true, .scope = "lat,bw,setup",
     .help = "measured iterations (auto: lat 10000, bw 100000, setup 200 repetitions; fewer for sizes > 64 KiB)", AUTO_NUM(Com, iters, 0)},
    {.name = "duration", .metavar = "SEC", .type = T::duration, .unit = "s", .scope = "lat,bw,stream,load",
     .help = "run for this many seconds instead of -n (stream, load: per point, instead of --count; 0: off)", DBL(Com, duration)},
    {.name = "warmup", .metavar = "N", .type = T::count, .accepts_auto = true, .scope = "lat,oneway,bw,stream,load,setup",
     .help = "warm-up iterations, excluded and counted (auto: 1000, fewer for sizes > 64 KiB; stream, load: 0.1 s worth, at most 1000; setup: 10 repetitions)",
     AUTO_NUM(Com, warmup, -1)},
    {.name = "bursts", .metavar = "B", .group = "oneway", .type = T::count, .scope = "oneway",
     .help = "number of bursts", U64(Oneway, bursts)},
    {.name = "burst-size", .metavar = "N", .group = "oneway", .type = T::count, .scope = "oneway",
     .help = "messages per burst", U64(Oneway, burst_size)},
    {.name = "pause-us", .metavar = "P", .group = "oneway", .type = T::duration, .unit = "us", .scope = "oneway",
     .help = "pause between bursts, microseconds", DBL(Oneway, pause_us)},
    {.name = "gap-us", .metavar = "G", .group = "common", .type = T::duration, .unit = "us", .scope = "lat,oneway",
     .help = "pause between consecutive messages (lat: round trips), microseconds, as perftest's --latency_gap (oneway: within a burst; --pause-us follows the burst)",
     DBL(Com, gap_us)},
    {.name = "flows", .metavar = "N", .group = "common", .type = T::count, .scope = "lat,bw",
     .help = "N connections at once, each driven by a thread of its own (on its own CPU where --cpus names a list per end), started together; reported per flow and in aggregate, with Jain's fairness index",
     U32(Com, flows)},
    {.name = "what", .metavar = "COST", .type = T::choice, .values = "connect,mr,all", .scope = "setup",
     .help = "setup: connect (a new connection of the transport, each timed: its whole connect), mr (memory registration and deregistration by size, with and without huge pages; transports that register memory) or all (both; mr left out where the transport registers none)",
     CHOICE(Com, what)},
    {.name = "threshold-us", .metavar = "T", .group = "oneway", .type = T::duration, .unit = "us", .scope = "oneway",
     .help = "report the share of one-way latencies above this, microseconds", DBL(Oneway, threshold_us)},
    {.name = "time-thread", .metavar = "CPU", .group = "oneway", .type = T::text, .scope = "oneway",
     .help = "t_send, the moment the device read a send's payload (verbs, ofi; not inline): a thread keeps writing the clock into every payload posted and not yet read, on a CPU of its own: auto (the lowest CPU neither end is pinned to; none left: t_send is null, with the reason), off, or a CPU number",
     .set = [](Params& p, std::string_view v) {
       if (v == "auto" || v == "off") {
         p.oneway.time_thread = std::string(v);
         return;
       }
       const uint64_t cpu = parse_u64("time_thread", v);
       if (cpu >= CPU_SETSIZE) usage_error("--time-thread: expected auto, off or a CPU number, got '" + std::string(v) + "'");
       p.oneway.time_thread = std::to_string(cpu); },
     .get = [](const Params& p) { return p.oneway.time_thread; }},
    {.name = "bidir", .group = "bw", .type = T::flag, .scope = "bw",
     .help = "both ends send and receive at once", FLAG(Bw, bidir)},
    {.name = "tx-depth", .metavar = "N", .group = "bw", .type = T::count, .scope = "bw",
     .help = "max sends posted but not completed (binds only on transports with send completions)", U32(Bw, tx_depth)},
    {.name = "series-ms", .metavar = "MS", .group = "bw", .type = T::duration, .unit = "ms", .scope = "bw",
     .help = "throughput over time: the receiver counts arrivals in bins this wide from the end of the warm-up (the width doubles while a run would need more than 512 bins)",
     DBL(Bw, series_ms)},
    {.name = "size-spread", .metavar = "PCT", .group = "bw", .type = T::count, .unit = "%", .scope = "bw",
     .help = "vary each message's size uniformly within -s +- PCT % (0 .. 90; drawn once from a fixed seed, the same every run; Gbit/s from the mean of the sizes sent)",
     U32(Bw, size_spread)},
    {.name = "rq-depth", .metavar = "N", .group = "queue", .type = T::count,
     .help = "receive queue depth (shm: ring slots, rounded up to a power of two)", U32(Queue, rq_depth)},
    {.name = "loss-timeout-ms", .metavar = "MS", .type = T::duration, .unit = "ms",
     .help = "unreliable transports: a reply not seen after this long is counted lost", U32(Com, loss_timeout_ms)},
    {.name = "clock", .metavar = "SRC", .type = T::choice, .values = "tsc,monotonic",
     .help = "timestamp source: tsc (the invariant TSC, the CPU's time stamp counter; pinned lat and bw also take one without the bit, tsc_cpu; else clock_gettime) or monotonic",
     CHOICE(Com, clock)},
    {.name = "timeout-ms", .metavar = "MS", .type = T::duration, .unit = "ms",
     .help = "connect and control-channel timeout", U32(Com, timeout_ms)},
    {.name = "rate", .metavar = "HZ[,HZ...]", .type = T::list, .unit = "Hz", .values = "rate", .scope = "stream,load",
     .help = "stream: samples per second; load: requests per second (1 .. 10000000); a list makes a sweep",
     LIST(Com, rate)},
    {.name = "values", .metavar = "K[,K...]", .group = "stream", .type = T::list, .values = "count", .scope = "stream",
     .help = "float64 values per sample (plus a 24-byte header); a list makes a sweep", LIST(Stream, values)},
    {.name = "count", .metavar = "N", .type = T::count, .accepts_auto = true, .scope = "stream,load",
     .help = "samples (stream) or requests (load) per point (auto: --duration, else one second's worth)",
     AUTO_NUM(Com, count, 0)},
    {.name = "timer", .metavar = "KIND", .group = "stream", .type = T::choice, .values = "tsc,timerfd,nanosleep",
     .scope = "stream", .help = "how the source waits for the next step: tsc (spin), timerfd or nanosleep", CHOICE(Stream, timer)},
    {.name = "sink", .metavar = "WHERE", .group = "stream", .type = T::text, .scope = "stream",
     .help = "where the sink puts samples: memory, or file:PATH (CSV; the server writes it in its own --data-dir and sends it back, the client writes PATH)",
     .set = [](Params& p, std::string_view v) {
       if (v != "memory" && (v.rfind("file:", 0) != 0 || v.size() == 5))
         usage_error("--sink: expected memory or file:PATH, got '" + std::string(v) + "'");
       p.stream.sink = std::string(v); },
     .get = [](const Params& p) { return p.stream.sink; }},
    {.name = "deadline-us", .metavar = "US", .group = "stream", .type = T::duration, .unit = "us", .scope = "stream",
     .help = "count samples slower than this as deadline misses (0: one period)", DBL(Stream, deadline_us)},
    {.name = "per-step", .group = "stream", .type = T::flag, .scope = "stream",
     .help = "the point lists every measured step's send lateness and one-way latency, ns (null: missed or lost), as step_late_ns and step_latency_ns; at most 2048 steps a point, warm-up included",
     FLAG(Stream, per_step)},
    {.name = "of-capacity", .metavar = "F[,F...]", .group = "load", .type = T::list, .values = "number", .scope = "load",
     .help = "the offered rate as multiples of the path's capacity (0 < F <= 10; above 1 offers more than the path carries: what is shed, sent and completed is counted; the capacity is measured first, closed loop at --max-outstanding); replaces --rate",
     DBL_LIST(Load, of_capacity)},
    {.name = "clients", .metavar = "N[,N...]", .group = "load", .type = T::list, .values = "count", .scope = "load",
     .help = "closed loop: N clients (1 .. 4096), each with --outstanding requests in flight and a new one as soon as one completes (after --think-us), dealt among the client threads; a list makes a sweep; replaces --rate",
     LIST(Load, clients)},
    {.name = "outstanding", .metavar = "K", .group = "load", .type = T::count, .scope = "load",
     .help = "closed loop (--clients): requests each client keeps in flight", U64(Load, outstanding)},
    {.name = "think-us", .metavar = "US", .group = "load", .type = T::duration, .unit = "us", .scope = "load",
     .help = "closed loop (--clients): a client's pause between a reply and its next request, microseconds",
     DBL(Load, think_us)},
    {.name = "arrivals", .metavar = "KIND", .group = "load", .type = T::choice, .values = "poisson,uniform,fixed",
     .scope = "load", .help = "send times: poisson (exponential gaps), uniform (gaps in [0, 2/rate]) or fixed (every 1/rate)",
     CHOICE(Load, arrivals)},
    {.name = "req-size", .metavar = "BYTES", .group = "load", .type = T::size, .unit = "B", .scope = "load",
     .help = "request size, at least 8 (its sequence number and response size ride in it); not with --workload",
     U64(Load, req_size)},
    {.name = "resp-size", .metavar = "BYTES", .group = "load", .type = T::size, .unit = "B", .accepts_auto = true,
     .scope = "load", .help = "response size, at least 8 (auto: as large as its request)", AUTO_NUM(Load, resp_size, 0)},
    {.name = "workload", .metavar = "NAME", .group = "load", .type = T::text, .scope = "load",
     .help = "request sizes drawn from a size distribution: w1..w5 (Homa's, built in) or a CSV file of length_bytes,weight rows (read by the client only)",
     TEXT(Load, workload)},
    {.name = "max-outstanding", .metavar = "N", .group = "load", .type = T::count, .scope = "load",
     .help = "requests in flight per client thread; a request due while this many are outstanding is shed (counted, never sent late)",
     U64(Load, max_outstanding)},
    {.name = "conns", .metavar = "N", .group = "load", .type = T::count, .scope = "load",
     .help = "connections (one transport each), dealt round-robin among the client's and the server's threads",
     U32(Load, conns)},
    {.name = "threads", .metavar = "N", .group = "load", .type = T::count, .scope = "load",
     .help = "client threads; each sends its share of the rate on its own connections", U32(Load, threads)},
    {.name = "server-threads", .metavar = "N", .group = "load", .type = T::count, .scope = "load",
     .help = "server threads, each serving its own connections (--server-rx own) or all of them (shared)",
     U32(Load, server_threads)},
    {.name = "server-rx", .metavar = "KIND", .group = "load", .type = T::choice, .values = "own,shared",
     .scope = "load",
     .help = "how the server's threads receive: own (each reads connections of its own) or shared (every thread reads every connection's socket, as receiver threads sharing one port: udp, each datagram to the thread that reads it; tcp, one whole message at a time under a lock; udp and tcp only)",
     CHOICE(Load, server_rx)},
    {.name = "service-ns", .metavar = "NS", .group = "load", .type = T::duration, .unit = "ns", .scope = "load",
     .help = "the server busy-waits this long per request before it replies (a synthetic service time)",
     DBL(Load, service_ns)},
    {.name = "tx-stamps", .metavar = "MODE", .group = "load", .type = T::choice, .values = "on,off", .scope = "load",
     .help = "on: a server whose send queue is full times its wait for a free buffer and each poll for send completions (server.tx); off: it waits unstamped and server.tx is null (what the stamps cost: docs/performance.md)",
     CHOICE(Load, tx_stamps)},
    {.name = "samples", .metavar = "KIND", .type = T::choice, .values = "auto,raw,hist", .scope = "lat,oneway,stream,load",
     .help = "raw: every latency, saved as .npy (--out), percentiles exact; hist: a log-linear histogram (HdrHistogram layout, 3 significant digits, bounded memory, merged across threads), encoded in the point; auto: load hist, the others raw",
     CHOICE(Com, samples)},
    {.name = "percentiles", .metavar = "Q[,Q...]", .type = T::list, .values = "number", .scope = "lat,oneway,stream,load",
     .help = "percentiles to report beside min, p10, p50, p90, p99, p99.9, p99.99 and max, e.g. 75,99.999 (0 < Q < 100, at most 4 decimals, up to 8; keys as p75, p99999); the terminal tables show these instead of the fixed ones",
     DBL_LIST(Com, percentiles)},
    {.name = "seed", .metavar = "N", .group = "load", .type = T::count, .scope = "load",
     .help = "seed of the send times and sizes (the same seed, the same schedule)", U64(Load, seed)},
    {.name = "service", .metavar = "TYPE", .group = "verbs", .type = T::choice, .values = "rc,uc,ud",
     .help = "verbs service type: rc (reliable connected), uc (unreliable connected) or ud (unreliable datagram)", CHOICE(Verbs, service)},
    {.name = "op", .metavar = "OP", .group = "rdma", .type = T::choice, .values = "send,write-imm,write,read,atomic-fadd,atomic-cswap",
     .help = "send: send with immediate; write-imm: RDMA write with immediate into the receiver's ring (the thesis' way); write: plain RDMA write, the receiver polls the slot's last byte (perftest's ib_write_lat; verbs, busy polling; bw --passive-rx: its receiver takes no part, as ib_write_bw's); read, atomic-fadd, atomic-cswap: one-sided, the server's CPU takes no part (verbs rc, lat and bw; atomics move 8 B)",
     CHOICE(Rdma, op)},
    {.name = "inline", .metavar = "N", .group = "rdma", .type = T::size, .unit = "B",
     .help = "send inline (verbs IBV_SEND_INLINE, ofi fi_inject) up to N bytes", U32(Rdma, inline_size)},
    {.name = "signal-every", .metavar = "N", .group = "rdma", .type = T::count,
     .help = "one signaled send every N, the rest unsignaled (0: auto, sq-depth / 2)", U32(Rdma, signal_every)},
    {.name = "sq-depth", .metavar = "N", .group = "rdma", .type = T::count,
     .help = "send queue depth", U32(Rdma, sq_depth)},
    {.name = "rq-refill", .metavar = "N", .group = "rdma", .type = T::count,
     .help = "repost receives when this many are free (0: auto)", U32(Rdma, rq_refill)},
    {.name = "ops", .metavar = "OP[,OP...]", .group = "rdma", .type = T::text, .scope = "bw",
     .help = "several --op values at once between one client and one server, each op on a queue pair and thread of its own, --flows of each (verbs; a single op is --op that op); reported per op and summed (dapltest's concurrent SR, RR and RW: --ops send,read,write)",
     .set = [](Params& p, std::string_view v) {
       std::vector<std::string> ops;
       for (size_t at = 0; !v.empty() && at != std::string_view::npos;) {
         const size_t comma = v.find(',', at);
         ops.emplace_back(v.substr(at, comma - at));
         if (!in_list(find_by_key("op")->values, ops.back()))
           usage_error("--ops: '" + ops.back() + "' is no --op (" + find_by_key("op")->values + ")");
         if (std::count(ops.begin(), ops.end(), ops.back()) > 1) usage_error("--ops names " + ops.back() + " twice (--flows runs more of one op)");
         at = comma == std::string_view::npos ? comma : comma + 1;
       }
       p.rdma.ops = std::move(ops);
     },
     .get = [](const Params& p) {
       std::string s;
       for (const std::string& op : p.rdma.ops) s += (s.empty() ? "" : ",") + op;
       return s;
     }},
    {.name = "mtu", .metavar = "BYTES", .group = "verbs", .type = T::size, .unit = "B",
     .help = "path MTU (maximum transmission unit): 256, 512, 1024, 2048 or 4096 (0: the port's active MTU)", U32(Verbs, mtu)},
    {.name = "device", .metavar = "NAME", .group = "verbs", .type = T::text,
     .help = "RDMA device (default: the one holding the control connection's address, else the first; rdma_cm: the one it routes through)",
     TEXT(Verbs, device)},
    {.name = "port", .metavar = "N", .group = "verbs", .type = T::count,
     .help = "device port", U32(Verbs, port)},
    {.name = "gid-index", .metavar = "N", .group = "verbs", .type = T::count, .accepts_auto = true,
     .help = "GID (global identifier: the port's address) table index, --cm raw (auto: the control address's GID, else the first RoCE v2 IPv4 GID, else 0)",
     AUTO_NUM(Verbs, gid_index, -1)},
    {.name = "cm", .metavar = "HOW", .group = "verbs", .type = T::choice, .values = "auto,rdma_cm,raw",
     .help = "connect with rdma_cm, or raw (QP (queue pair) numbers and GIDs over the control channel); auto: rdma_cm except for UC",
     CHOICE(Verbs, cm)},
    {.name = "post-list", .metavar = "N", .group = "verbs", .type = T::count, .scope = "bw",
     .help = "post sends in chained lists of N work requests, one ibv_post_send (one doorbell) per list, as perftest's -l",
     U32(Verbs, post_list)},
    {.name = "passive-rx", .group = "verbs", .type = T::flag, .scope = "bw",
     .help = "--op write on rc: the receiver takes no part, as perftest's ib_write_bw server; the writer overwrites the receiver's ring without credits and the rate is its acknowledged writes (measured at the sender)",
     FLAG(Verbs, passive_rx)},
    {.name = "provider", .metavar = "NAME", .group = "ofi", .type = T::text,
     .help = "libfabric provider: tcp, udp, shm, verbs, ...", TEXT(Ofi, provider)},
    {.name = "ep", .metavar = "TYPE", .group = "ofi", .type = T::choice, .values = "msg,rdm,dgram",
     .help = "libfabric endpoint type: msg, rdm or dgram", CHOICE(Ofi, ep)},
    {.name = "endpoint", .metavar = "URL", .group = "messaging", .type = T::text,
     .help = "where the server listens: tcp://HOST:PORT (HOST: the address the client reaches the server at, or *; PORT: * or 0 for a free one, else >= 1024) or ipc:// (one host; the server names the socket file); default: tcp on the control connection's address, free port. inproc:// is refused: the two ends are separate processes",
     TEXT(Msg, endpoint)},
    {.name = "io-cpu", .metavar = "CPU", .group = "messaging", .type = T::text,
     .help = "where each end runs the library's own I/O threads: a CPU number, none (where they start: the end's pinned CPU), or auto: busy polling on a pinned CPU, a CPU of the process's set that no busy loop of this host uses (the client the lowest, the server the highest), else none; event mode or unpinned, none. run.json's granted.io_cpus says where they ran and whether they shared a busy loop's CPU",
     .set = [](Params& p, std::string_view v) {
       if (v != "auto" && v != "none") {
         const uint64_t cpu = parse_u64("io_cpu", v);
         if (cpu >= CPU_SETSIZE) usage_error("--io-cpu: no CPU " + std::string(v));
         p.messaging.io_cpu = std::to_string(cpu);
       } else {
         p.messaging.io_cpu = std::string(v);
       } },
     .get = [](const Params& p) { return p.messaging.io_cpu; }},
    {.name = "tcp-cc", .metavar = "NAME", .group = "tcp", .type = T::text,
     .help = "the TCP congestion control of the data connection, set on its socket at both ends (TCP_CONGESTION); a name the kernel does not offer is refused with its list (tcp_available_congestion_control); default: each end's kernel default. run.json's fabric block records each end's",
     .set = [](Params& p, std::string_view v) {
       // A kernel name (TCP_CA_NAME_MAX 16 with its NUL): letters, digits, '_', '-'.
       if (v.size() > 15 || v.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string_view::npos)
         usage_error("--tcp-cc: expected a congestion control's name (e.g. cubic, reno), got '" + std::string(v) + "'");
       p.tcp.cc = std::string(v); },
     .get = [](const Params& p) { return p.tcp.cc; }},
  };
}

}  // namespace

const std::vector<OptSpec>& option_table() {
  static const std::vector<OptSpec> table = [] {
    std::vector<OptSpec> t = make_table();
    for (OptSpec& o : t) o.transports = transports_reading(o.group);
    return t;
  }();
  return table;
}

const std::vector<TransportDecl>& declared_transports() {
  // Generated by CMake: FM_TRANSPORT(name, Class, "groups") for each
  // transport built in, FM_TRANSPORT_PLUGIN(name, "groups", "libraries") for
  // each plugin, FM_TRANSPORT_ABSENT(name, "groups", "why") for the others.
  static const std::vector<TransportDecl> list = {
#define FM_TRANSPORT(name, cls, groups) {#name, groups},
#define FM_TRANSPORT_PLUGIN(name, groups, libs) {#name, groups},
#define FM_TRANSPORT_ABSENT(name, groups, why) {#name, groups},
#include "fabmeter/transports.def"
#undef FM_TRANSPORT
#undef FM_TRANSPORT_PLUGIN
#undef FM_TRANSPORT_ABSENT
  };
  return list;
}

std::string transports_reading(std::string_view group) {
  std::string out;
  for (const TransportDecl& t : declared_transports())
    if (in_list(t.groups, group)) out += (out.empty() ? "" : ",") + std::string(t.name);
  return out.empty() ? "all" : out;
}

namespace {
const OptSpec* find_by_key(std::string_view key) {
  for (const auto& o : option_table())
    if (key_of(o.name) == key) return &o;
  return nullptr;
}
}  // namespace

const char* type_name(OptType t) {
  switch (t) {
    case OptType::size: return "size";
    case OptType::count: return "count";
    case OptType::duration: return "duration";
    case OptType::choice: return "choice";
    case OptType::list: return "list";
    case OptType::flag: return "flag";
    case OptType::text: return "text";
  }
  return "text";
}

std::string typed_value(const OptSpec& o, const Params& p) {
  const std::string v = o.get(p);
  switch (o.type) {
    case OptType::flag: return v == "1" ? "true" : "false";
    case OptType::list: return "[" + v + "]";
    case OptType::size: case OptType::count: case OptType::duration:
      return v == "auto" ? "\"auto\"" : v;
    case OptType::choice: case OptType::text: return json_quote(v);
  }
  return json_quote(v);
}

std::string params_json(const Params& p) {
  JsonObj j;
  j.add("experiment", p.experiment);
  for (const auto& o : option_table()) j.add_raw(key_of(o.name), typed_value(o, p));
  return j.str();
}

std::string key_of(const char* option_name) {
  std::string k(option_name);
  std::replace(k.begin(), k.end(), '-', '_');
  return k;
}

const OptSpec* find_option(std::string_view name) {
  for (const auto& o : option_table()) {
    if (name == o.name || key_of(o.name) == name) return &o;
    if (name.size() == 1 && o.short_name == name[0]) return &o;
  }
  return nullptr;
}

void parse_options(Params& p, const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    std::string_view name, value;
    bool has_value = false;
    if (a.rfind("--", 0) == 0) {
      name = a.substr(2);
      if (auto eq = name.find('='); eq != std::string_view::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
    } else if (a.size() == 2 && a[0] == '-') {
      name = a.substr(1);
    } else {
      usage_error("unexpected argument '" + std::string(a) + "'");
    }
    const OptSpec* o = find_option(name);
    if (!o) usage_error("unknown option '" + std::string(a) + "'");
    p.given.emplace_back(o->name);
    if (*o->metavar == '\0') {
      o->set(p, has_value ? value : "1");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) usage_error("option --" + std::string(o->name) + " needs a value");
      value = args[++i];
    }
    // A size's suffixes are binary (64K = 65,536 B); the setter reads every other number as a count.
    if (o->type == OptType::size && !(o->accepts_auto && value == "auto"))
      o->set(p, std::to_string(parse_size("--" + std::string(o->name), value)));
    else
      o->set(p, value);
  }
  // --poll sets both sides, --poll-recv and --poll-send each their own, in
  // any order; the other end gets the values. The loop follows the receive side.
  if (!p.named("poll-recv")) p.poll_recv = p.poll;
  if (!p.named("poll-send")) p.poll_send = p.poll;
  p.poll = p.poll_recv;
}

std::string encode_params(const Params& p) {
  std::string out = "experiment=" + p.experiment + "\n";
  for (const auto& o : option_table()) out += key_of(o.name) + "=" + o.get(p) + "\n";
  return out;
}

// A hello is a few hundred bytes; these bounds leave room for growth and
// stop a remote end from making the server parse or keep more.
constexpr size_t kMaxParamsBytes = 16 << 10;
constexpr size_t kMaxParamLine = 1024;

Params decode_params(std::string_view text) {
  if (text.size() > kMaxParamsBytes)
    usage_error("the other end sent " + std::to_string(text.size()) + " bytes of parameters (at most " +
                std::to_string(kMaxParamsBytes) + ")");
  Params p;
  std::vector<std::string_view> seen;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.size() > kMaxParamLine) usage_error("the other end sent a parameter line of " + std::to_string(line.size()) + " bytes");
    for (char ch : line)
      if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) == 0x7f)
        usage_error("the other end sent a control character in parameter line '" + remote_excerpt(line) + "'");
    auto eq = line.find('=');
    if (eq == std::string_view::npos) usage_error("the other end sent a parameter line without '=': '" + remote_excerpt(line) + "'");
    std::string_view k = line.substr(0, eq), v = line.substr(eq + 1);
    const OptSpec* o = k == "experiment" ? nullptr : find_option(k);
    if (k != "experiment" && (!o || k != key_of(o->name)))
      usage_error("the other end sent unknown parameter '" + remote_excerpt(k) + "' (version mismatch?)");
    // Keys are checked against the table first, so `seen` holds at most one entry per option.
    if (std::find(seen.begin(), seen.end(), k) != seen.end())
      usage_error("the other end sent parameter '" + std::string(k) + "' twice");
    seen.push_back(k);
    if (o) o->set(p, v);
    else p.experiment = std::string(v);
  }
  return p;
}

void validate(const Params& p) {
  if (!in_list(kExperiments, p.experiment))
    usage_error("unknown experiment '" + p.experiment + "' (expected " + kExperiments + ")");
  // An option that does not apply is refused rather than silently ignored.
  Params defaults;
  for (const auto& o : option_table()) {
    const bool named = p.named(o.name);
    if (!named && o.get(p) == o.get(defaults)) continue;
    if (!in_list(o.scope, p.experiment))
      usage_error("--" + std::string(o.name) + " does not apply to '" + p.experiment + "' (only to " + o.scope + ")");
    if (!in_list(o.transports, p.transport))
      usage_error("--" + std::string(o.name) + " does not apply to transport '" + p.transport + "' (only to " +
                  o.transports + ")");
  }
  if (p.size == 0) usage_error("--size must be at least 1 byte");
  if (p.sweep && p.max_size == 0) usage_error("--max-size must be at least 1 byte");
  if (p.iters > 0 && p.duration > 0) usage_error("give either -n or --duration, not both");
  if (p.flows < 1 || p.flows > CommonOptions::kMaxFlows) usage_error("--flows must be between 1 and " + std::to_string(CommonOptions::kMaxFlows));
  if (!p.rdma.ops.empty() && (p.named("op") || p.rdma.op != RdmaOptions{}.op)) usage_error("give --op or --ops, not both");
  if (p.flows * ops_of(p.rdma).size() > CommonOptions::kMaxFlows)
    usage_error("--flows " + std::to_string(p.flows) + " of each of " + std::to_string(p.rdma.ops.size()) +
                " --ops: more than " + std::to_string(CommonOptions::kMaxFlows) + " connections");
  if (p.bw.tx_depth == 0) usage_error("--tx-depth must be at least 1");
  if (p.bw.series_ms < 0.01 || p.bw.series_ms > 3.6e6) usage_error("--series-ms must be between 0.01 and 3600000");
  if (p.bw.size_spread > 90) usage_error("--size-spread must be 0 .. 90 (percent)");
  if (p.rdma.sq_depth == 0) usage_error("--sq-depth must be at least 1");
  if (p.queue.rq_depth < 2 || p.queue.rq_depth > (1u << 16)) usage_error("--rq-depth must be between 2 and 65536");
  if (p.timeout_ms == 0) usage_error("--timeout-ms must be at least 1");
  if (!(p.spin_us >= 0 && p.spin_us <= 1e6)) usage_error("--spin-us must be between 0 and 1000000 (one second)");
  if (p.spin_us > 0 && p.poll != Poll::event) usage_error("--spin-us applies to --poll event (busy mode never sleeps)");
  if (p.poll_recv != p.poll_send && !in_list("lat,oneway", p.experiment))
    usage_error("--poll-recv and --poll-send differ: only lat and oneway poll the two sides apart (" + p.experiment +
                " follows --poll)");
  if (p.poll != p.poll_recv) usage_error("--poll and --poll-recv differ (--poll is both sides: give --poll-recv alone)");
  check_percentiles(p.percentiles);
  if (p.loss_timeout_ms == 0) usage_error("--loss-timeout-ms must be at least 1");
}

std::vector<uint64_t> sizes_for(const Params& p, uint64_t transport_max) {
  if (!p.sweep) return {p.size};
  std::vector<uint64_t> out;
  for (uint64_t s = 1; s <= p.max_size && s <= transport_max; s *= 2) out.push_back(s);
  return out;
}

const char* poll_name(Poll p) { return p == Poll::busy ? "busy" : "event"; }

std::vector<std::string> ops_of(const RdmaOptions& r) { return r.ops.empty() ? std::vector<std::string>{r.op} : r.ops; }

std::string op_option(const RdmaOptions& r) {
  if (r.ops.empty()) return "--op " + r.op;
  Params p;
  p.rdma = r;
  return "--ops " + find_option("ops")->get(p);
}

Params for_connection(const Params& p, uint32_t conn) {
  if (p.rdma.ops.empty()) return p;
  Params c = p;
  c.rdma.op = p.rdma.ops[conn % p.rdma.ops.size()];
  c.rdma.ops.clear();
  return c;
}

}  // namespace fm
