// load: what the server saw in a point, added over its threads, as it
// travels to the client (encode, decode: untrusted there) and as run.json
// shows it.
#pragma once
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "experiment/load/common.hpp"
#include "experiment/load/tx_path.hpp"

namespace fm {

constexpr int kMaxBatch = 64;          // completions per poll: 1 .. 63, then 64 and more
constexpr double kPoolSampleNs = 1e6;  // the server samples its pools this often at first ...
constexpr size_t kPoolSeries = 1024;   // ... keeping this many samples, every other one dropped when full

// The transport's pools where it reports them (transport.hpp's optional pools()).
template <Transport T>
std::optional<Pools> pools_of(const T& t) {
  if constexpr (requires { t.pools(); }) return t.pools();
  else return std::nullopt;
}

// Pool occupancy as the server saw it: the extremes over every thread, and
// over time for the first thread's connections.
struct PoolRecord {
  uint64_t unit = 0;                    // 0 none, 1 work requests, 2 bytes
  uint64_t rx_capacity = 0, tx_capacity = 0, rx_max = 0, tx_max = 0, rx_sum = 0, tx_sum = 0, samples = 0;
  std::vector<std::array<uint64_t, 3>> series;  // {us since the point started, rx used, tx used}

  static uint64_t unit_code(const char* unit) { return std::string_view(unit) == "bytes" ? 2 : 1; }
  static const char* unit_name(uint64_t code) { return code == 2 ? "bytes" : code == 1 ? "work requests" : "none"; }
};

// Server -> client after the point: what the server saw, added over its threads.
struct LoadServerStats {
  uint64_t requests = 0, malformed = 0, empty_polls = 0;
  uint64_t per_poll[kMaxBatch] = {};  // [n-1]: polls of a connection that returned n requests (the last: 64 and more)
  bool tx_timed = false;              // send completions reported and --tx-stamps on: `tx` below means something
  TxRecord tx;
  std::vector<uint64_t> per_thread;   // requests each server thread answered (load_server fills it)

  PoolRecord pools;

  void add(const LoadServerStats& o) {
    requests += o.requests, malformed += o.malformed, empty_polls += o.empty_polls;
    for (int i = 0; i < kMaxBatch; ++i) per_poll[i] += o.per_poll[i];
    tx_timed |= o.tx_timed;
    tx.add(o.tx);
    PoolRecord& p = pools;
    const PoolRecord& q = o.pools;
    p.unit = std::max(p.unit, q.unit);
    p.rx_capacity += q.rx_capacity, p.tx_capacity += q.tx_capacity, p.rx_max += q.rx_max, p.tx_max += q.tx_max;
    p.rx_sum += q.rx_sum, p.tx_sum += q.tx_sum, p.samples = std::max(p.samples, q.samples);
    if (p.series.empty()) p.series = q.series;  // the first thread's
  }
  std::string encode() const {
    std::string s = std::to_string(requests) + " " + std::to_string(malformed) + " " + std::to_string(empty_polls);
    for (uint64_t n : per_poll) s += " " + std::to_string(n);
    s += tx_timed ? " 1" : " 0";
    for (int i = 0; i < TxRecord::kFields; ++i) s += " " + std::to_string(tx.field(i));
    const PoolRecord& p = pools;
    for (uint64_t n : {p.unit, p.rx_capacity, p.tx_capacity, p.rx_max, p.tx_max, p.rx_sum, p.tx_sum, p.samples,
                       static_cast<uint64_t>(p.series.size())})
      s += " " + std::to_string(n);
    for (const auto& row : p.series)
      for (uint64_t n : row) s += " " + std::to_string(n);
    s += " " + std::to_string(per_thread.size());
    for (uint64_t n : per_thread) s += " " + std::to_string(n);
    return s;
  }
  // The largest encode(): 20 digits and a space per number.
  static constexpr uint64_t kMaxEncoded =
      (3 + kMaxBatch + 1 + TxRecord::kFields + 9 + 3 * kPoolSeries + 1 + LoadOptions::kMaxServerThreads) * 21;
  // Every number checked, the series' length bounded before it is read:
  // the other end's text is untrusted.
  static LoadServerStats decode(std::string_view s) {
    LoadServerStats st;
    auto next = [&](uint64_t max = UINT64_MAX) {
      if (s.empty()) runtime_error("load: the server's counts end early");
      const size_t sp = s.find(' ');
      const uint64_t v = parse_remote_u64(s.substr(0, sp), "load server counts", max);
      s = sp == std::string_view::npos ? std::string_view{} : s.substr(sp + 1);
      return v;
    };
    st.requests = next(), st.malformed = next(), st.empty_polls = next();
    for (uint64_t& n : st.per_poll) n = next();
    st.tx_timed = next(1) == 1;
    for (int i = 0; i < TxRecord::kFields; ++i) st.tx.field(i) = next();
    PoolRecord& p = st.pools;
    p.unit = next(2);
    for (uint64_t* f : {&p.rx_capacity, &p.tx_capacity, &p.rx_max, &p.tx_max, &p.rx_sum, &p.tx_sum, &p.samples}) *f = next();
    p.series.resize(next(kPoolSeries));
    for (auto& row : p.series)
      for (uint64_t& n : row) n = next();
    st.per_thread.resize(next(LoadOptions::kMaxServerThreads));
    for (uint64_t& n : st.per_thread) n = next();
    if (!s.empty()) runtime_error("load: the server's counts have extra fields: '" + remote_excerpt(s) + "'");
    return st;
  }
  JsonObj json() const {
    JsonObj per, o;
    uint64_t polls = 0, sum = 0;
    for (int i = 0; i < kMaxBatch; ++i) {
      if (!per_poll[i]) continue;
      per.add(i + 1 == kMaxBatch ? std::to_string(kMaxBatch) + "+" : std::to_string(i + 1), per_poll[i]);
      polls += per_poll[i];
      sum += per_poll[i] * static_cast<uint64_t>(i + 1);
    }
    std::string threads;
    for (uint64_t n : per_thread) threads += (threads.empty() ? "" : ",") + std::to_string(n);
    o.add("requests", requests).add_raw("requests_per_thread", "[" + threads + "]")
        .add("malformed", malformed).add("empty_polls", empty_polls)
        .add("completions_per_poll", per).add("mean_per_poll", polls ? static_cast<double>(sum) / static_cast<double>(polls) : 0.0);
    if (tx_timed) o.add("tx", tx.json());
    else o.add_raw("tx", "null");
    const PoolRecord& p = pools;
    if (!p.unit) return o;
    auto column = [&](int k) {
      std::string a;
      for (const auto& row : p.series) a += (a.empty() ? "" : ",") + std::to_string(row[k]);
      return "[" + a + "]";
    };
    const double n = static_cast<double>(std::max<uint64_t>(p.samples, 1));
    JsonObj series, po;
    series.add_raw("t_us", column(0)).add_raw("rx_used", column(1)).add_raw("tx_used", column(2));
    po.add("unit", PoolRecord::unit_name(p.unit)).add("rx_capacity", p.rx_capacity).add("tx_capacity", p.tx_capacity)
        .add("rx_used_max", p.rx_max).add("tx_used_max", p.tx_max)
        .add("rx_used_mean", static_cast<double>(p.rx_sum) / n).add("tx_used_mean", static_cast<double>(p.tx_sum) / n)
        .add("samples", p.samples).add("series", series);
    // Receives the transport holds posted at the worst moment seen (verbs, ofi).
    if (p.unit == 1) po.add("rx_posted_min", p.rx_capacity - std::min(p.rx_capacity, p.rx_max));
    o.add("pools", po);
    return o;
  }
};

}  // namespace fm
