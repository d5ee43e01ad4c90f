// Every decoder of what the other end sends after the hello: the stamp reports
// (oneway, stream, check), bw and load counts, the end-of-point count, numbers
// (ports, clock probes and the server's UDP probe stamps) and the stream sink's samples. The first byte picks
// the decoder; only fm::Error may come out, nothing may be read out of bounds.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "experiment/bw.hpp"
#include "experiment/check.hpp"
#include "experiment/load.hpp"
#include "experiment/oneway.hpp"
#include "experiment/stream.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/remote_parse.hpp"

namespace {

// Sums the stamps so an out-of-bounds pointer is read (and caught by ASan).
uint64_t touch(const uint64_t* p, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

template <class Header>
void stamp_report(const std::string& blob, uint64_t total) {
  Header h;
  const uint64_t* t = fm::read_stamp_report(blob, total, &h, "fuzz");
  volatile uint64_t sink = touch(t, total);
  (void)sink;
  if constexpr (std::is_same_v<Header, fm::SinkReport>) fm::check_sink_report(h);
}

// The sink's hot path: messages of lengths taken from the input, each in a
// buffer of exactly its length.
void sink_samples(std::string_view in) {
  if (in.size() < 2) return;
  static const fm::Clock clk(false);
  const uint64_t values = 1 + static_cast<uint8_t>(in[0]) % 8;
  const uint64_t total = 1 + static_cast<uint8_t>(in[1]) % 64;
  in.remove_prefix(2);
  fm::Sink sink("memory", clk, values);
  std::vector<uint64_t> t_recv(total);
  fm::SinkReport r{};
  uint64_t last_seq = 0;
  while (!in.empty()) {
    const size_t len = std::min<size_t>(static_cast<uint8_t>(in[0]), in.size() - 1);
    std::vector<std::byte> msg(len);
    if (len) std::memcpy(msg.data(), in.data() + 1, len);
    in.remove_prefix(1 + len);
    fm::sink_arrival(msg.data(), static_cast<uint32_t>(len), 1, total, t_recv.data(), sink, r, last_seq);
  }
  if (r.received > total) __builtin_trap();
}

// Every third of our probes lost, the rest 10 us round trips.
void probe_stamps(const std::string& blob, uint64_t probes) {
  std::vector<fm::ProbeStamps> mine(probes);
  for (uint64_t i = 0; i < probes; ++i)
    mine[i] = i % 3 ? fm::ProbeStamps{1e6 * i, 1e6 * i + 1e4} : fm::ProbeStamps{NAN, NAN};
  uint64_t dropped = 0;
  (void)fm::read_probe_stamps(blob, mine, &dropped);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t which = data[0];
  // The count the caller expects (its own, so small here): the report must match it.
  const uint64_t total = data[1];
  const std::string blob(reinterpret_cast<const char*>(data + 2), size - 2);
  try {
    switch (which % 10) {
      case 0: stamp_report<fm::OnewayReport>(blob, total); break;
      case 1: stamp_report<fm::SinkReport>(blob, total); break;
      case 2: (void)fm::read_check_report(blob, total); break;
      case 3: (void)fm::BwSide::decode(blob); break;
      case 4: (void)fm::parse_remote_u64(blob, "count"); break;
      case 5: (void)fm::parse_remote_u64(blob, "port", 65535); break;
      case 6:
        // The second byte odd: the server's stamps after a UDP burst, against that many probes of ours.
        if (total & 1) probe_stamps(blob, total / 2 % 64 + 1);
        else (void)fm::read_probe_answer(blob, 0, 1e9);
        break;
      case 7: sink_samples(blob); break;
      case 9: (void)fm::LoadServerStats::decode(blob); break;
      case 8: {
        // A valid-length report around fuzzed stamps and counts.
        std::string r(sizeof(fm::OnewayReport) + total * 8, '\0');
        std::memcpy(r.data(), blob.data(), std::min(r.size(), blob.size()));
        stamp_report<fm::OnewayReport>(r, total);
        break;
      }
    }
  } catch (const fm::Error&) {
  }
  return 0;
}
