// One parameter struct for every experiment and transport (as UCX perftest).
// The option table below is the single source of the knob names: the engine
// CLI, the control-channel handshake, run.json and the Python CLI (which
// reads `fabmeter-engine options`) all use it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace fm {

enum class Poll { busy, event };

// Every experiment the engine runs, as a list for in_list() and messages.
constexpr const char* kExperiments = "lat,oneway,bw,stream,check";

struct Params {
  std::string experiment;           // lat | oneway | bw
  std::string transport = "shm";    // shm | tcp | udp
  Poll poll = Poll::busy;

  uint64_t size = 32;               // message size in bytes
  bool sweep = false;               // -a: 1 B .. max_size by powers of two
  uint64_t max_size = 8u << 20;     // upper end of the sweep
  uint64_t iters = 0;               // -n; 0 = the experiment's default
  double duration = 0;              // seconds; replaces -n when > 0
  int64_t warmup = -1;              // -1 = the experiment's default

  // oneway
  uint64_t bursts = 10;
  uint64_t burst_size = 1000;
  double pause_us = 100;
  double threshold_us = 10;

  // bw
  bool bidir = false;
  uint32_t tx_depth = 128;

  // transport knobs
  uint32_t rq_depth = 256;          // receive queue depth (shm: ring slots)
  uint32_t loss_timeout_ms = 200;   // unreliable transports: reply considered lost

  std::string clock = "tsc";        // tsc | monotonic
  uint32_t timeout_ms = 5000;       // connect and control-channel waits

  // stream (lists make a grid of points)
  std::vector<uint64_t> rate = {1000};   // samples per second
  std::vector<uint64_t> values = {1};    // float64 values per sample
  uint64_t count = 0;                    // samples per point; 0 = auto (--duration, else 1 s worth)
  std::string timer = "tsc";             // tsc | timerfd | nanosleep
  std::string sink = "memory";           // memory | file:PATH
  double deadline_us = 0;                // 0 = one period

  // RDMA-class transports (verbs, ofi)
  std::string service = "rc";       // verbs: rc | uc | ud
  std::string op = "send";          // send | write (RDMA write with immediate)
  uint32_t inline_size = 0;         // --inline: send inline up to this many bytes
  uint32_t signal_every = 0;        // 0 = auto: sq_depth / 2
  uint32_t sq_depth = 128;
  uint32_t rq_refill = 0;           // repost receives when this many are free; 0 = auto
  uint32_t mtu = 0;                 // 0 = the port's active MTU
  std::string device;               // "" = the first device
  uint32_t port = 1;                // device port
  int32_t gid_index = -1;           // -1 = auto
  std::string cm = "auto";          // rdma_cm | raw | auto
  std::string provider = "tcp";     // ofi provider
  std::string ep = "msg";           // ofi endpoint type: msg | rdm | dgram

  // Options named on this end's command line, so one given at its default
  // value is still checked for applying (the peer only sees values).
  std::vector<std::string> given;

  // messaging libraries (zmq, nng, nanomsg)
  std::string endpoint;             // tcp://HOST:PORT or ipc://PATH; "" = tcp next to the control channel
};

// What kind of value an option takes: the Python CLI builds argparse, the
// suite schema and typed run.json values from this, never by guessing.
enum class OptType {
  size,      // bytes, K/M/G suffixes (powers of two)
  count,     // a whole number
  duration,  // a time in `unit` (s, ms, us)
  rate,      // per second (Hz)
  choice,    // one of `values`
  list,      // comma list of `item`
  flag,      // present or not
  text,      // free text (a name or an address)
};

struct OptSpec {
  const char* name;            // long name, with '-' (the JSON/TOML key uses '_')
  char short_name = 0;         // 0 if none
  const char* metavar = "";    // "" for flags
  const char* group = "common";  // common | oneway | bw | stream | rdma | verbs | ofi | messaging
  OptType type = OptType::text;
  const char* unit = "";       // B, s, ms, us, Hz or ""
  const char* values = "";     // choice: its values ("busy,event"); list: the item type ("rate")
  bool accepts_auto = false;   // the word auto: the experiment or transport decides
  const char* scope = "all";   // experiments it applies to: "all" or "lat,oneway"
  const char* transports = "all";  // transports it applies to: "all" or "verbs,ofi"
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

bool in_list(const char* list, std::string_view item);  // "all" or comma list

// Sizes of this run: one, or the sweep up to min(max_size, transport_max).
std::vector<uint64_t> sizes_for(const Params& p, uint64_t transport_max);
// Iterations and warm-up for one size: large messages get fewer, as fabtests.
uint64_t iters_for(const Params& p, uint64_t size);
uint64_t warmup_for(const Params& p, uint64_t size);

const char* poll_name(Poll p);
std::string key_of(const char* option_name);  // "tx-depth" -> "tx_depth"

}  // namespace fm
