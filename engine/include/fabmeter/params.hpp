// The run's parameters: one struct per option group (the option table's
// `group` column, as fabtests groups its options), so each part of the engine
// receives only the groups it reads (a transport: its own, see
// transport.hpp). The option table below is the single source of the knob
// names: the engine CLI, the control-channel handshake, run.json and the
// Python CLI (which reads `fabmeter-engine options`) all use it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

namespace fm {

enum class Poll { busy, event };

// Every experiment the engine runs, as a list for in_list() and messages.
constexpr const char* kExperiments = "lat,oneway,bw,stream,check,load,setup";

// Options of every experiment and transport.
struct CommonOptions {
  static constexpr const char* kGroup = "common";
  static constexpr uint32_t kMaxFlows = 64;  // --flows: threads and connections each end runs at once
  std::string transport = "shm";    // one of available_transports()
  Poll poll = Poll::busy;            // --poll: both sides; after parsing, the receive side's (the loop follows it)
  Poll poll_recv = Poll::busy;       // receives: spin on the receive queue, or sleep on its event channel
  Poll poll_send = Poll::busy;       // send completions and waits for room: spin, or sleep on the send side's channel

  uint64_t size = 32;               // message size in bytes
  bool sweep = false;               // -a: 1 B .. max_size by powers of two
  uint64_t max_size = 8u << 20;     // upper end of the sweep
  uint64_t iters = 0;               // -n; 0 = the experiment's default
  double duration = 0;              // seconds; replaces -n when > 0
  int64_t warmup = -1;              // -1 = the experiment's default
  static constexpr uint64_t kDefaultWarmup = 1000;  // the most any experiment warms up with by default

  // Scheduled experiments (stream, load): lists make a sweep.
  std::vector<uint64_t> rate = {1000};   // stream: samples per second; load: requests per second
  uint64_t count = 0;               // samples or requests per point; 0 = auto (--duration, else 1 s worth)
  std::string samples = "auto";     // raw | hist | auto (load: hist, the rest raw)
  std::vector<double> percentiles;  // reported beside the fixed ones (stats.hpp); empty: none

  uint32_t loss_timeout_ms = 200;   // unreliable transports: reply considered lost
  std::string clock = "tsc";        // tsc | monotonic
  uint32_t timeout_ms = 5000;       // connect and control-channel waits
  double gap_us = 0;                // lat, oneway: pause between consecutive messages
  double spin_us = 0;               // event mode: poll this long before sleeping (0: sleep at once)
  uint32_t flows = 1;               // lat, bw: connections, each driven by a thread of its own (experiment/flows.hpp)
  std::string what = "connect";     // setup: connect | mr | all
  bool operator==(const CommonOptions&) const = default;
};

struct OnewayOptions {
  static constexpr const char* kGroup = "oneway";
  uint64_t bursts = 10;
  uint64_t burst_size = 1000;
  double pause_us = 100;
  double threshold_us = 10;
  std::string time_thread = "auto";  // t_send's thread: auto, off or a CPU (experiment/time_thread.hpp)
  bool operator==(const OnewayOptions&) const = default;
};

struct BwOptions {
  static constexpr const char* kGroup = "bw";
  bool bidir = false;
  uint32_t tx_depth = 128;          // sends in flight: the transport's send window (transport.hpp's Use)
  double series_ms = 1;             // width of the receiver's arrival bins (throughput over time); doubles past 512 bins
  uint32_t size_spread = 0;         // percent: each message's size uniform in -s +- this (0: all -s)
  bool operator==(const BwOptions&) const = default;
};

// Lists make a grid of points.
struct StreamOptions {
  static constexpr const char* kGroup = "stream";
  std::vector<uint64_t> values = {1};    // float64 values per sample
  std::string timer = "tsc";             // tsc | timerfd | nanosleep
  std::string sink = "memory";           // memory | file:PATH
  double deadline_us = 0;                // 0 = one period
  bool per_step = false;                 // the point lists every measured step's send lateness and latency
  static constexpr uint64_t kMaxPerStep = 2048;  // steps a point may list: its line fits a mesh frame (64 KiB)
  bool operator==(const StreamOptions&) const = default;
};

// load: open-loop request/response (experiment/load.hpp).
struct LoadOptions {
  static constexpr const char* kGroup = "load";
  static constexpr uint64_t kMaxOutstanding = 1'000'000;  // a slot index fits the request's tag (load/common.hpp)
  std::string arrivals = "poisson";      // poisson | uniform | fixed
  std::vector<double> of_capacity;       // multiples of the measured capacity (above 1: overload); replaces --rate when set
  std::vector<uint64_t> clients;         // closed loop: a point per client count; replaces --rate when set
  uint64_t outstanding = 1;              // closed loop: requests each client keeps in flight
  double think_us = 0;                   // closed loop: a client's pause between a reply and its next request
  uint64_t req_size = 32;                // request bytes (without --workload)
  uint64_t resp_size = 0;                // response bytes; 0 = auto: as large as its request (echo)
  std::string workload;                  // w1..w5 or a CSV file (client side only); "" = --req-size
  uint64_t max_outstanding = 256;        // requests in flight per client; past it a request is shed
  uint32_t conns = 1;                    // connections (one transport each)
  uint32_t threads = 1;                  // client threads, the connections dealt among them
  uint32_t server_threads = 1;
  static constexpr uint32_t kMaxServerThreads = 64;
  std::string server_rx = "own";         // own: each server thread reads connections of its own; shared: all of them
  double service_ns = 0;                 // the server's busy-wait per request (a synthetic service time)
  std::string tx_stamps = "on";          // on | off: the server times its transmit path (load/tx_path.hpp's TxRecord)
  uint64_t seed = 1;                     // arrivals and sizes
  bool operator==(const LoadOptions&) const = default;
};

// Transports with a receive queue of their own (shm's ring, verbs, ofi).
struct QueueOptions {
  static constexpr const char* kGroup = "queue";
  uint32_t rq_depth = 256;          // receive queue depth (shm: ring slots)
  bool operator==(const QueueOptions&) const = default;
};

// RDMA-class transports (verbs, ofi).
struct RdmaOptions {
  static constexpr const char* kGroup = "rdma";
  std::string op = "send";          // send | write-imm | write | read | atomic-fadd | atomic-cswap
  uint32_t inline_size = 0;         // --inline: send inline up to this many bytes
  uint32_t signal_every = 0;        // 0 = auto: sq_depth / 2
  uint32_t sq_depth = 128;
  uint32_t rq_refill = 0;           // repost receives when this many are free; 0 = auto
  std::vector<std::string> ops;     // bw: several ops at once, a connection each per flow (empty: --op alone)
  bool operator==(const RdmaOptions&) const = default;
};

struct VerbsOptions {
  static constexpr const char* kGroup = "verbs";
  std::string service = "rc";       // rc | uc | ud
  uint32_t mtu = 0;                 // 0 = the port's active MTU
  std::string device;               // "" = the first device
  uint32_t port = 1;                // device port
  int32_t gid_index = -1;           // -1 = auto
  std::string cm = "auto";          // rdma_cm | raw | auto
  uint32_t post_list = 1;           // bw: work requests per ibv_post_send
  bool passive_rx = false;          // bw, --op write on rc: the receiver takes no part, the writer counts its acks
  bool operator==(const VerbsOptions&) const = default;
};

struct OfiOptions {
  static constexpr const char* kGroup = "ofi";
  std::string provider = "tcp";     // libfabric provider
  std::string ep = "msg";           // endpoint type: msg | rdm | dgram
  bool operator==(const OfiOptions&) const = default;
};

// Messaging libraries (zmq, nng, nanomsg).
struct MessagingOptions {
  static constexpr const char* kGroup = "messaging";
  std::string endpoint;             // tcp://HOST:PORT or ipc://PATH; "" = tcp next to the control channel
  std::string io_cpu = "auto";      // where the library's own threads run: auto | none | a CPU number (msg/io_threads.hpp)
  bool operator==(const MessagingOptions&) const = default;
};

// tcp's own.
struct TcpOptions {
  static constexpr const char* kGroup = "tcp";
  std::string cc;                   // TCP_CONGESTION of the data sockets, both ends; "" = each end's kernel default
  bool operator==(const TcpOptions&) const = default;
};

// The common group is the base, so the options every part reads stay p.size,
// p.poll, ...; each other group is a member named as the group.
struct Params : CommonOptions {
  std::string experiment;           // one of kExperiments
  OnewayOptions oneway;
  BwOptions bw;
  StreamOptions stream;
  LoadOptions load;
  QueueOptions queue;
  RdmaOptions rdma;
  VerbsOptions verbs;
  OfiOptions ofi;
  MessagingOptions messaging;
  TcpOptions tcp;

  // Options named on this end's command line, so one given at its default
  // value is still checked for applying (the other end only sees values).
  std::vector<std::string> given;
  bool named(std::string_view option) const { return std::find(given.begin(), given.end(), option) != given.end(); }
};

// Every group but common, in the order a transport's constructor takes
// those it reads. A new group: its struct, its member above, its entry here.
inline constexpr std::tuple kGroupMembers{&Params::oneway, &Params::bw,   &Params::stream,
                                          &Params::load,   &Params::queue, &Params::rdma,
                                          &Params::verbs,  &Params::ofi,  &Params::messaging,
                                          &Params::tcp};

template <class>
struct GroupsOf;
template <class... G>
struct GroupsOf<std::tuple<G Params::*...>> {
  using type = std::tuple<CommonOptions, G...>;
};
// Every group's struct: CommonOptions, OnewayOptions, ...
using OptionGroups = GroupsOf<std::remove_const_t<decltype(kGroupMembers)>>::type;

// The group G of p: group_of<RdmaOptions>(p) is p.rdma.
template <class G, class P>
auto& group_of(P& p) {
  if constexpr (std::is_same_v<G, CommonOptions>)
    return static_cast<std::conditional_t<std::is_const_v<P>, const CommonOptions&, CommonOptions&>>(p);
  else
    return p.*std::get<G Params::*>(kGroupMembers);
}

// What kind of value an option takes: the Python CLI builds argparse, the
// suite schema and typed run.json values from this, never by guessing.
enum class OptType {
  size,      // bytes, K/M/G suffixes (powers of two)
  count,     // a whole number
  duration,  // a time in `unit` (s, ms, us)
  choice,    // one of `values`
  list,      // comma list of `item`
  flag,      // present or not
  text,      // free text (a name or an address)
};

struct OptSpec {
  const char* name;            // long name, with '-' (the JSON/TOML key uses '_')
  char short_name = 0;         // 0 if none
  const char* metavar = "";    // "" for flags
  const char* group = CommonOptions::kGroup;  // the kGroup of one of OptionGroups
  OptType type = OptType::text;
  const char* unit = "";       // B, s, ms, us, Hz or ""
  const char* values = "";     // choice: its values ("busy,event"); list: the item type ("rate")
  bool accepts_auto = false;   // the word auto: the experiment or transport decides
  const char* scope = "all";   // experiments it applies to: "all" or "lat,oneway"
  std::string transports = "all";  // transports it applies to, from the group (transports_reading)
  const char* help = "";
  std::function<void(Params&, std::string_view)> set;
  std::function<std::string(const Params&)> get;
};

const char* type_name(OptType t);
// The option's value in p as typed JSON (number, bool, string, "auto" or a list).
std::string typed_value(const OptSpec& o, const Params& p);
// Every option's typed value plus the experiment: the start line's and
// run.json's `params`.
std::string params_json(const Params& p);

const std::vector<OptSpec>& option_table();
const OptSpec* find_option(std::string_view name_or_short);

// Parses --name value / --name=value / -s value / flags into p. Unknown
// options and bad values are usage errors.
void parse_options(Params& p, const std::vector<std::string>& args);
// key=value lines (control channel) <-> Params.
std::string encode_params(const Params& p);
Params decode_params(std::string_view text);
// Impossible combinations and out-of-range values; throws usage_error.
void validate(const Params& p);

// The two rules of suffixed numbers (python/fabmeter/options.py has the same):
// a count's suffixes are decimal (10k = 10,000, 1M = 1,000,000), a size's
// binary (64K = 65,536 bytes); k/M/G/T in either case. A usage error naming
// `option` otherwise.
uint64_t parse_count(std::string_view option, std::string_view text);
uint64_t parse_size(std::string_view option, std::string_view text);

// "all" or a comma list; constexpr: the transport registry's groups are compile-time lists.
constexpr bool in_list(std::string_view list, std::string_view item) {
  if (list == "all") return true;
  while (!list.empty()) {
    const auto comma = list.find(',');
    if (list.substr(0, comma) == item) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

// The transports with the option groups each reads beyond common: every
// fm_transport line of engine/CMakeLists.txt, built in or not.
struct TransportDecl {
  const char* name;
  const char* groups;  // comma list of kGroup names
};
const std::vector<TransportDecl>& declared_transports();
// The transports an option of `group` applies to: those that read it, or
// "all" for a group no transport reads (common and the experiments' own).
std::string transports_reading(std::string_view group);

// Sizes of this run: one, or the sweep up to min(max_size, transport_max).
std::vector<uint64_t> sizes_for(const Params& p, uint64_t transport_max);
// Iterations and warm-up for one size: large messages get fewer, as fabtests.

const char* poll_name(Poll p);

// --ops, else --op: the ops of a point, and the option that named them (for messages).
std::vector<std::string> ops_of(const RdmaOptions& r);
std::string op_option(const RdmaOptions& r);
// p for connection `conn` of a point: with --ops, op ops[conn mod count] as its --op.
Params for_connection(const Params& p, uint32_t conn);
std::string key_of(const char* option_name);  // "tx-depth" -> "tx_depth"

}  // namespace fm
