#include "fabmeter/params.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

#include "fabmeter/error.hpp"
#include "fabmeter/peer_parse.hpp"

namespace fm {
namespace {

// "--burst-size" for the field burst_size: messages name the option as typed.
std::string flag(std::string_view key) {
  std::string f = "--" + std::string(key);
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

uint64_t parse_u64(std::string_view opt, std::string_view v) {
  // Accepts plain numbers and K/M/G suffixes (powers of two), e.g. 64K, 8M.
  uint64_t mult = 1;
  if (!v.empty()) {
    switch (v.back()) {
      case 'k': case 'K': mult = 1ull << 10; break;
      case 'm': case 'M': mult = 1ull << 20; break;
      case 'g': case 'G': mult = 1ull << 30; break;
    }
    if (mult != 1) v.remove_suffix(1);
  }
  uint64_t x = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size())
    usage_error(flag(opt) + ": expected a non-negative integer, got '" + std::string(v) + "'");
  if (x > UINT64_MAX / mult) usage_error(flag(opt) + ": value too large");
  return x * mult;
}

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

std::string join_list(const std::vector<uint64_t>& xs) {
  std::string s;
  for (uint64_t x : xs) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string one_of(std::string_view opt, std::string_view v, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed)
    if (v == a) return std::string(v);
  std::string list;
  for (const char* a : allowed) list += std::string(list.empty() ? "" : "|") + a;
  usage_error(flag(opt) + ": expected " + list + ", got '" + std::string(v) + "'");
}

#define U64(field) \
  [](Params& p, std::string_view v) { p.field = parse_u64(#field, v); }, \
  [](const Params& p) { return std::to_string(p.field); }
#define U32(field) \
  [](Params& p, std::string_view v) { \
    uint64_t x = parse_u64(#field, v); \
    if (x > UINT32_MAX) usage_error(flag(#field) + ": value too large"); \
    p.field = static_cast<uint32_t>(x); }, \
  [](const Params& p) { return std::to_string(p.field); }
#define DBL(field) \
  [](Params& p, std::string_view v) { p.field = parse_double(#field, v); }, \
  [](const Params& p) { return fmt_double(p.field); }
// A number, or "auto" (stored as `none`: the experiment or transport decides).
#define AUTO_NUM(field, none) \
  [](Params& p, std::string_view v) { \
    p.field = parse_auto<decltype(p.field)>(#field, v, none); }, \
  [](const Params& p) { return p.field == none ? std::string("auto") : std::to_string(p.field); }
#define FLAG(field) \
  [](Params& p, std::string_view v) { p.field = (v != "0" && v != "false"); }, \
  [](const Params& p) { return std::string(p.field ? "1" : "0"); }

std::vector<OptSpec> make_table() {
  return {
    {"transport", 't', "NAME", "all", "all", "transport (fabmeter-engine options lists those built in)",
     [](Params& p, std::string_view v) { p.transport = std::string(v); },
     [](const Params& p) { return p.transport; }},
    {"poll", 0, "MODE", "all", "all", "completion mode: busy (spin) or event (sleep until woken)",
     [](Params& p, std::string_view v) { p.poll = one_of("poll", v, {"busy", "event"}) == "busy" ? Poll::busy : Poll::event; },
     [](const Params& p) { return std::string(poll_name(p.poll)); }},
    {"size", 's', "BYTES", "lat,oneway,bw", "all", "message size in bytes (K/M suffixes allowed)", U64(size)},
    {"all", 'a', "", "lat,bw", "all", "sweep sizes 1 B .. --max-size by powers of two", FLAG(sweep)},
    {"max-size", 0, "BYTES", "lat,bw,check", "all", "largest size of the -a sweep or of check (capped by the transport)", U64(max_size)},
    {"iters", 'n', "N", "lat,bw", "all", "measured iterations (auto: lat 10000, bw 100000; fewer for sizes > 64 KiB)",
     AUTO_NUM(iters, 0)},
    {"duration", 0, "SEC", "lat,bw,stream", "all", "run for this many seconds instead of -n (stream: instead of --count; 0: off)", DBL(duration)},
    {"warmup", 0, "N", "lat,oneway,bw,stream", "all", "warm-up iterations, excluded and counted (auto: 1000, fewer for sizes > 64 KiB; stream: 0.1 s worth, at most 1000)",
     AUTO_NUM(warmup, -1)},
    {"bursts", 0, "B", "oneway", "all", "number of bursts", U64(bursts)},
    {"burst-size", 0, "N", "oneway", "all", "messages per burst", U64(burst_size)},
    {"pause-us", 0, "P", "oneway", "all", "pause between bursts, microseconds", DBL(pause_us)},
    {"threshold-us", 0, "T", "oneway", "all", "report the share of one-way latencies above this, microseconds", DBL(threshold_us)},
    {"bidir", 0, "", "bw", "all", "both ends send and receive at once", FLAG(bidir)},
    {"tx-depth", 0, "N", "bw", "all", "max sends posted but not completed (binds only on transports with send completions)", U32(tx_depth)},
    {"rq-depth", 0, "N", "all", "shm,verbs,ofi", "receive queue depth (shm: ring slots, rounded up to a power of two)", U32(rq_depth)},
    {"loss-timeout-ms", 0, "MS", "all", "all", "unreliable transports: a reply not seen after this long is counted lost", U32(loss_timeout_ms)},
    {"clock", 0, "SRC", "all", "all", "timestamp source: tsc (invariant TSC, falls back if absent) or monotonic",
     [](Params& p, std::string_view v) { p.clock = one_of("clock", v, {"tsc", "monotonic"}); },
     [](const Params& p) { return p.clock; }},
    {"timeout-ms", 0, "MS", "all", "all", "connect and control-channel timeout", U32(timeout_ms)},
    {"rate", 0, "HZ[,HZ...]", "stream", "all", "samples per second (100 .. 1000000); a list makes a sweep",
     [](Params& p, std::string_view v) { p.rate = parse_list("rate", v); },
     [](const Params& p) { return join_list(p.rate); }},
    {"values", 0, "K[,K...]", "stream", "all", "float64 values per sample (plus a 24-byte header); a list makes a sweep",
     [](Params& p, std::string_view v) { p.values = parse_list("values", v); },
     [](const Params& p) { return join_list(p.values); }},
    {"count", 0, "N", "stream", "all", "samples per point (auto: --duration, else one second's worth)",
     AUTO_NUM(count, 0)},
    {"timer", 0, "KIND", "stream", "all", "how the source waits for the next step: tsc (spin), timerfd or nanosleep",
     [](Params& p, std::string_view v) { p.timer = one_of("timer", v, {"tsc", "timerfd", "nanosleep"}); },
     [](const Params& p) { return p.timer; }},
    {"sink", 0, "WHERE", "stream", "all", "where the sink puts samples: memory, or file:PATH (CSV; the server writes it in its own --data-dir and sends it back, the client writes PATH)",
     [](Params& p, std::string_view v) {
       if (v != "memory" && (v.rfind("file:", 0) != 0 || v.size() == 5))
         usage_error("--sink: expected memory or file:PATH, got '" + std::string(v) + "'");
       p.sink = std::string(v); },
     [](const Params& p) { return p.sink; }},
    {"deadline-us", 0, "US", "stream", "all", "count samples slower than this as deadline misses (0: one period)", DBL(deadline_us)},
    {"service", 0, "TYPE", "all", "verbs", "verbs service type: rc, uc or ud",
     [](Params& p, std::string_view v) { p.service = one_of("service", v, {"rc", "uc", "ud"}); },
     [](const Params& p) { return p.service; }},
    {"op", 0, "OP", "all", "verbs,ofi", "send (send with immediate) or write (RDMA write with immediate)",
     [](Params& p, std::string_view v) { p.op = one_of("op", v, {"send", "write"}); },
     [](const Params& p) { return p.op; }},
    {"inline", 0, "N", "all", "verbs,ofi", "send inline (verbs IBV_SEND_INLINE, ofi fi_inject) up to N bytes", U32(inline_size)},
    {"signal-every", 0, "N", "all", "verbs,ofi", "one signaled send every N, the rest unsignaled (0: auto, sq-depth / 2)", U32(signal_every)},
    {"sq-depth", 0, "N", "all", "verbs,ofi", "send queue depth", U32(sq_depth)},
    {"rq-refill", 0, "N", "all", "verbs,ofi", "repost receives when this many are free (0: auto)", U32(rq_refill)},
    {"mtu", 0, "BYTES", "all", "verbs", "path MTU: 256, 512, 1024, 2048 or 4096 (0: the port's active MTU)", U32(mtu)},
    {"device", 0, "NAME", "all", "verbs", "RDMA device (default: the one holding the control connection's address, else the first; rdma_cm: the one it routes through)",
     [](Params& p, std::string_view v) { p.device = std::string(v); },
     [](const Params& p) { return p.device; }},
    {"port", 0, "N", "all", "verbs", "device port", U32(port)},
    {"gid-index", 0, "N", "all", "verbs", "GID table index, --cm raw (auto: the control address's GID, else the first RoCE v2 IPv4 GID, else 0)",
     AUTO_NUM(gid_index, -1)},
    {"cm", 0, "HOW", "all", "verbs", "connect with rdma_cm, or raw (QP numbers and GIDs over the control channel); auto: rdma_cm except for UC",
     [](Params& p, std::string_view v) { p.cm = one_of("cm", v, {"auto", "rdma_cm", "raw"}); },
     [](const Params& p) { return p.cm; }},
    {"provider", 0, "NAME", "all", "ofi", "libfabric provider: tcp, udp, shm, verbs, ...",
     [](Params& p, std::string_view v) { p.provider = std::string(v); },
     [](const Params& p) { return p.provider; }},
    {"ep", 0, "TYPE", "all", "ofi", "libfabric endpoint type: msg, rdm or dgram",
     [](Params& p, std::string_view v) { p.ep = one_of("ep", v, {"msg", "rdm", "dgram"}); },
     [](const Params& p) { return p.ep; }},
    {"endpoint", 0, "URL", "all", "zmq,nng,nanomsg", "where the server listens: tcp://HOST:PORT (HOST: the address the client reaches the server at, or *; PORT: * or 0 for a free one, else >= 1024) or ipc:// (one host; the server names the socket file); default: tcp on the control connection's address, free port. inproc:// is refused: the two ends are separate processes",
     [](Params& p, std::string_view v) { p.endpoint = std::string(v); },
     [](const Params& p) { return p.endpoint; }},
  };
}

}  // namespace

const std::vector<OptSpec>& option_table() {
  static const std::vector<OptSpec> table = make_table();
  return table;
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
    o->set(p, value);
  }
}

std::string encode_params(const Params& p) {
  std::string out = "experiment=" + p.experiment + "\n";
  for (const auto& o : option_table()) out += key_of(o.name) + "=" + o.get(p) + "\n";
  return out;
}

// A hello is a few hundred bytes; these bounds leave room for growth and
// stop a peer from making the server parse or keep more.
constexpr size_t kMaxParamsBytes = 16 << 10;
constexpr size_t kMaxParamLine = 1024;

Params decode_params(std::string_view text) {
  if (text.size() > kMaxParamsBytes)
    usage_error("peer sent " + std::to_string(text.size()) + " bytes of parameters (at most " +
                std::to_string(kMaxParamsBytes) + ")");
  Params p;
  std::vector<std::string_view> seen;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.size() > kMaxParamLine) usage_error("peer sent a parameter line of " + std::to_string(line.size()) + " bytes");
    for (char ch : line)
      if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) == 0x7f)
        usage_error("peer sent a control character in parameter line '" + peer_excerpt(line) + "'");
    auto eq = line.find('=');
    if (eq == std::string_view::npos) usage_error("peer sent a parameter line without '=': '" + peer_excerpt(line) + "'");
    std::string_view k = line.substr(0, eq), v = line.substr(eq + 1);
    const OptSpec* o = k == "experiment" ? nullptr : find_option(k);
    if (k != "experiment" && (!o || k != key_of(o->name)))
      usage_error("peer sent unknown parameter '" + peer_excerpt(k) + "' (version mismatch?)");
    // Keys are checked against the table first, so `seen` holds at most one entry per option.
    if (std::find(seen.begin(), seen.end(), k) != seen.end())
      usage_error("peer sent parameter '" + std::string(k) + "' twice");
    seen.push_back(k);
    if (o) o->set(p, v);
    else p.experiment = std::string(v);
  }
  return p;
}

bool in_list(const char* list, std::string_view item) {
  std::string_view s = list;
  if (s == "all") return true;
  while (!s.empty()) {
    auto c = s.find(',');
    if (s.substr(0, c) == item) return true;
    if (c == std::string_view::npos) break;
    s = s.substr(c + 1);
  }
  return false;
}

void validate(const Params& p) {
  if (!in_list(kExperiments, p.experiment))
    usage_error("unknown experiment '" + p.experiment + "' (expected " + kExperiments + ")");
  // An option that does not apply is refused rather than silently ignored.
  Params defaults;
  for (const auto& o : option_table()) {
    const bool named = std::find(p.given.begin(), p.given.end(), o.name) != p.given.end();
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
  if (p.experiment == "oneway") {
    if (p.bursts == 0 || p.burst_size == 0) usage_error("--bursts and --burst-size must be at least 1");
    if (p.bursts * p.burst_size > (1ull << 26)) usage_error("oneway: --bursts x --burst-size is limited to 67108864 messages");
  }
  if (p.experiment == "stream") {
    for (uint64_t r : p.rate)
      if (r < 1 || r > 10'000'000) usage_error("--rate must be between 1 and 10000000 Hz");
    for (uint64_t v : p.values)
      if (v < 1 || v > (1u << 20)) usage_error("--values must be between 1 and 1048576");
    if (p.count > 0 && p.duration > 0) usage_error("give either --count or --duration, not both");
  }
  if (p.tx_depth == 0) usage_error("--tx-depth must be at least 1");
  if (p.sq_depth == 0) usage_error("--sq-depth must be at least 1");
  if (p.rq_depth < 2 || p.rq_depth > (1u << 16)) usage_error("--rq-depth must be between 2 and 65536");
  if (p.timeout_ms == 0) usage_error("--timeout-ms must be at least 1");
  if (p.loss_timeout_ms == 0) usage_error("--loss-timeout-ms must be at least 1");
}

std::vector<uint64_t> sizes_for(const Params& p, uint64_t transport_max) {
  if (!p.sweep) return {p.size};
  std::vector<uint64_t> out;
  for (uint64_t s = 1; s <= p.max_size && s <= transport_max; s *= 2) out.push_back(s);
  return out;
}

static uint64_t default_iters(const Params& p) {
  if (p.iters) return p.iters;
  return p.experiment == "bw" ? 100000 : 10000;
}

uint64_t iters_for(const Params& p, uint64_t size) {
  if (p.experiment == "oneway") return p.bursts * p.burst_size;
  uint64_t n = default_iters(p);
  constexpr uint64_t kFull = 64 << 10;
  if (size > kFull) n = std::max<uint64_t>(std::min<uint64_t>(n, 100), n * kFull / size);
  return n;
}

uint64_t warmup_for(const Params& p, uint64_t size) {
  uint64_t w = p.warmup >= 0 ? static_cast<uint64_t>(p.warmup) : 1000;
  if (p.warmup < 0 && p.experiment != "oneway" && size > (64 << 10))
    w = std::max<uint64_t>(10, w * (64 << 10) / size);
  return w;
}

const char* poll_name(Poll p) { return p == Poll::busy ? "busy" : "event"; }

}  // namespace fm
