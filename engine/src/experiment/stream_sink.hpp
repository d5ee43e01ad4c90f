// Where the stream's sink puts samples. memory: checks each sample's values
// and keeps nothing else. file:PATH: hands each sample to a writer thread
// through an in-process SPSC ring, so write(2) never sits between two
// receives; a full ring stalls the receiver and is counted. During the run
// the writer only captures raw records (memcpy and large writes keep up
// with GiB/s); the CSV is formatted from that capture after the point,
// because formatting doubles (~30 ns a value here) could not keep up.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <memory>
#include <vector>
#include <cstring>

#include "fabmeter/clock.hpp"
#include "experiment/common.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/samples.hpp"
#include "transport/shm/shm_ring.hpp"

namespace fm {

// Sink -> source after a stream point (sent over the control channel).
struct SinkReport {
  ClockInfo clock;        // the sink's clock, for mapping its stamps across hosts
  uint64_t total, received, duplicated, reordered, corrupted;
  double recv_span_ns;
  uint64_t file_bytes, sample_bytes, stalls;
  double write_busy_ns;   // time the writer spent capturing during the run
  double csv_ns;          // formatting the CSV after the point
  uint32_t to_file, reserved;

  JsonObj sink_json() const {
    JsonObj o;
    o.add("kind", to_file ? "file" : "memory");
    if (to_file) {
      double mib = static_cast<double>(sample_bytes) / (1 << 20);
      o.add("file_bytes", file_bytes).add("sample_bytes", sample_bytes).add("stalls", stalls)
          .add("write_busy_s", write_busy_ns / 1e9)
          .add("write_capacity_mib_s", write_busy_ns > 0 ? mib / (write_busy_ns / 1e9) : 0.0)
          .add("csv_after_run_s", csv_ns / 1e9);
    }
    return o;
  }
};

// A file sink runs on the server, in the server's own directory; after the
// point the server sends the CSV back over the control channel as exchange
// frames of 1 .. kSinkChunk bytes, in order, SinkReport::file_bytes in all,
// and removes its copy. The client writes them to its own PATH (temp file +
// rename), so nothing the client names is ever a path on the server.
constexpr size_t kSinkChunk = 1u << 20;
void send_sink_file(Ctrl& ctrl, const std::string& path, uint64_t bytes);
struct SinkCopy {
  uint64_t bytes;
  double seconds;
};
SinkCopy receive_sink_file(Ctrl& ctrl, const std::string& path, uint64_t bytes, uint64_t max_bytes);
// The longest CSV a point of `total` steps of `values` values can make.
uint64_t sink_csv_max_bytes(uint64_t total, uint64_t values);

// The value the source puts in slot j of step k; the sink checks it.
inline double stream_value(uint64_t k, uint64_t j) { return static_cast<double>(k) + 0.25 * static_cast<double>(j); }

class Sink {
 public:
  Sink(const std::string& spec, const Clock& clk, uint64_t values);
  ~Sink();
  Sink(const Sink&) = delete;

  // Returns false when the sample's length or values are not what the source sent.
  [[gnu::always_inline]] bool take(uint64_t seq, uint64_t origin, uint64_t recv, const std::byte* vals,
                                   uint32_t n, uint32_t len) {
    if (n != values_ || len != 24 + 8 * values_) return false;
    if (!writer_.joinable()) {
      for (uint64_t j = 0; j < n; ++j) {
        double v;
        std::memcpy(&v, vals + 8 * j, 8);
        if (v != stream_value(seq, j)) return false;
      }
      return true;
    }
    uint64_t rec[3] = {seq, origin, recv};
    std::memcpy(rec_.data(), rec, sizeof rec);
    std::memcpy(rec_.data() + sizeof rec, vals, 8 * n);
    while (!ring_.push(rec_.data(), static_cast<uint32_t>(rec_bytes_), 0)) {
      ++stalls_;
      cpu_relax();
    }
    return true;
  }

  void finish(SinkReport& r);
  const std::string& path() const { return path_; }

 private:
  void capture_loop();
  void write_csv();

  const Clock& clk_;
  uint64_t values_;
  size_t rec_bytes_;
  std::string path_;
  std::string capture_path_;  // raw records during the run
  int fd_ = -1;
  std::vector<std::byte> rec_;
  std::unique_ptr<PayloadBuf> ring_mem_;
  shm::RingHead head_{};
  shm::RingProducer ring_;
  shm::RingConsumer reader_;
  std::atomic<bool> done_{false};
  std::thread writer_;
  uint64_t stalls_ = 0;
  uint64_t file_bytes_ = 0, records_ = 0;
  double busy_ns_ = 0, csv_ns_ = 0;
};

}  // namespace fm
