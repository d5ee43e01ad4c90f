#include "experiment/stream_sink.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <memory>

#include "fabmeter/error.hpp"

namespace fm {

namespace {
constexpr size_t kRingBytes = 64ull << 20;
constexpr size_t kOutBuf = 4ull << 20;
}  // namespace

Sink::Sink(const std::string& spec, const Clock& clk, uint64_t values)
    : clk_(clk), values_(values), rec_bytes_(24 + 8 * values) {
  if (spec == "memory") return;
  path_ = spec.substr(5);  // "file:PATH"
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) sys_error("stream sink: cannot open " + path_);
  rec_.resize(rec_bytes_);
  size_t slot = shm::slot_size_for(rec_bytes_);
  uint32_t count = 2;
  while (static_cast<size_t>(count) * 2 * slot <= kRingBytes) count *= 2;
  ring_mem_ = std::make_unique<PayloadBuf>(static_cast<size_t>(count) * slot);
  ring_ = shm::RingProducer(ring_mem_->data(), count, slot, &head_);
  reader_ = shm::RingConsumer(ring_mem_->data(), count, slot, &head_);
  std::string header = "seq,origin_ns,recv_ns";
  for (uint64_t j = 0; j < values; ++j) header += ",v" + std::to_string(j);
  header += "\n";
  if (::write(fd_, header.data(), header.size()) != static_cast<ssize_t>(header.size())) sys_error("write " + path_);
  file_bytes_ = header.size();
  writer_ = std::thread([this] { write_loop(); });
}

Sink::~Sink() {
  if (writer_.joinable()) {
    done_.store(true, std::memory_order_release);
    writer_.join();
  }
  if (fd_ >= 0) ::close(fd_);
}

// Formats records as CSV into a large buffer and writes it out in big chunks.
void Sink::write_loop() {
  std::vector<char> out(kOutBuf);
  size_t used = 0;
  auto flush = [&] {
    size_t off = 0;
    while (off < used) {
      ssize_t k = ::write(fd_, out.data() + off, used - off);
      if (k <= 0) return;  // disk full or similar: the byte count in the report shows it
      off += static_cast<size_t>(k);
    }
    file_bytes_ += used;
    used = 0;
  };
  const size_t max_line = 3 * 21 + values_ * 32 + 1;
  for (;;) {
    const shm::SlotHeader* s = reader_.peek();
    if (!s) {
      if (done_.load(std::memory_order_acquire) && !reader_.peek()) break;
      std::this_thread::yield();
      continue;
    }
    const uint64_t t0 = clk_.ticks();
    // Drain everything there is before looking at the clock again.
    do {
      const std::byte* p = shm::RingConsumer::payload(s);
      uint64_t rec[3];
      std::memcpy(rec, p, sizeof rec);
      if (kOutBuf - used < max_line) flush();
      char* w = out.data() + used;
      char* end = out.data() + kOutBuf;
      w = std::to_chars(w, end, rec[0]).ptr;
      *w++ = ',';
      w = std::to_chars(w, end, static_cast<uint64_t>(clk_.ticks_to_mono_ns(rec[1]))).ptr;
      *w++ = ',';
      w = std::to_chars(w, end, static_cast<uint64_t>(clk_.ticks_to_mono_ns(rec[2]))).ptr;
      for (uint64_t j = 0; j < values_; ++j) {
        double v;
        std::memcpy(&v, p + 24 + 8 * j, 8);
        *w++ = ',';
        w = std::to_chars(w, end, v).ptr;
      }
      *w++ = '\n';
      used = static_cast<size_t>(w - out.data());
      ++records_;
      reader_.pop();
    } while ((s = reader_.peek()));
    busy_ns_ += clk_.to_ns(static_cast<double>(clk_.ticks() - t0));
  }
  const uint64_t t0 = clk_.ticks();
  flush();
  busy_ns_ += clk_.to_ns(static_cast<double>(clk_.ticks() - t0));
}

void Sink::finish(SinkReport& r) {
  r.to_file = writer_.joinable();
  if (!r.to_file) return;
  done_.store(true, std::memory_order_release);
  writer_.join();
  r.file_bytes = file_bytes_;
  r.sample_bytes = records_ * rec_bytes_;
  r.stalls = stalls_;
  r.write_busy_ns = busy_ns_;
}

}  // namespace fm
