#include "experiment/stream_sink.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

#include "fabmeter/error.hpp"

namespace fm {

namespace {
constexpr size_t kRingBytes = 64ull << 20;
constexpr size_t kChunk = 4ull << 20;

// write(2) all of it; false on error (disk full shows in the byte counts).
bool write_all(int fd, const char* p, size_t n) {
  while (n) {
    ssize_t k = ::write(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
}  // namespace

Sink::Sink(const std::string& spec, const Clock& clk, uint64_t values)
    : clk_(clk), values_(values), rec_bytes_(24 + 8 * values) {
  if (spec == "memory") return;
  path_ = spec.substr(5);  // "file:PATH"
  capture_path_ = path_ + ".capture";
  // The server's own fresh directory: a name already there is not ours to reuse.
  fd_ = ::open(capture_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0) sys_error("stream sink: cannot open " + capture_path_);
  rec_.resize(rec_bytes_);
  size_t slot = shm::slot_size_for(rec_bytes_);
  uint32_t count = 2;
  while (static_cast<size_t>(count) * 2 * slot <= kRingBytes) count *= 2;
  ring_mem_ = std::make_unique<PayloadBuf>(static_cast<size_t>(count) * slot);
  ring_ = shm::RingProducer(ring_mem_->data(), count, slot, &head_);
  reader_ = shm::RingConsumer(ring_mem_->data(), count, slot, &head_);
  writer_ = std::thread([this] { capture_loop(); });
}

Sink::~Sink() {
  if (writer_.joinable()) {
    done_.store(true, std::memory_order_release);
    writer_.join();
  }
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(capture_path_.c_str());
  }
}

// During the run: raw records, copied into large chunks and written out.
void Sink::capture_loop() {
  std::vector<char> out(kChunk);
  size_t used = 0;
  for (;;) {
    const shm::SlotHeader* s = reader_.peek();
    if (!s) {
      if (done_.load(std::memory_order_acquire) && !reader_.peek()) break;
      std::this_thread::yield();
      continue;
    }
    const uint64_t t0 = clk_.ticks();
    do {
      if (kChunk - used < rec_bytes_) {
        write_all(fd_, out.data(), used);
        used = 0;
      }
      std::memcpy(out.data() + used, shm::RingConsumer::payload(s), rec_bytes_);
      used += rec_bytes_;
      ++records_;
      reader_.pop();
    } while ((s = reader_.peek()));
    busy_ns_ += clk_.to_ns(static_cast<double>(clk_.ticks() - t0));
  }
  const uint64_t t0 = clk_.ticks();
  write_all(fd_, out.data(), used);
  busy_ns_ += clk_.to_ns(static_cast<double>(clk_.ticks() - t0));
}

// After the point: the capture as CSV (sequence, origin and receive time in
// CLOCK_MONOTONIC_RAW ns, then the values).
void Sink::write_csv() {
  const uint64_t t0 = clk_.ticks();
  int out_fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out_fd < 0) sys_error("stream sink: cannot open " + path_);
  std::string header = "seq,origin_ns,recv_ns";
  for (uint64_t j = 0; j < values_; ++j) header += ",v" + std::to_string(j);
  header += "\n";
  write_all(out_fd, header.data(), header.size());
  file_bytes_ = header.size();

  const size_t per_read = std::max<size_t>(1, kChunk / rec_bytes_) * rec_bytes_;
  std::vector<char> in(per_read), out(kChunk);
  const size_t max_line = 3 * 21 + values_ * 32 + 1;
  size_t used = 0;
  auto flush = [&] {
    write_all(out_fd, out.data(), used);
    file_bytes_ += used;
    used = 0;
  };
  ::lseek(fd_, 0, SEEK_SET);
  for (;;) {
    ssize_t got = ::read(fd_, in.data(), per_read);
    if (got <= 0) break;
    for (size_t off = 0; off + rec_bytes_ <= static_cast<size_t>(got); off += rec_bytes_) {
      const char* p = in.data() + off;
      uint64_t rec[3];
      std::memcpy(rec, p, sizeof rec);
      if (kChunk - used < max_line) flush();
      char* w = out.data() + used;
      char* end = out.data() + kChunk;
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
    }
  }
  flush();
  // What is really there (a full disk shortens it), which is what is sent back.
  struct stat st {};
  if (::fstat(out_fd, &st) == 0) file_bytes_ = static_cast<uint64_t>(st.st_size);
  if (::close(out_fd) != 0) sys_error("stream sink: writing " + path_);
  csv_ns_ = clk_.to_ns(static_cast<double>(clk_.ticks() - t0));
}

void Sink::finish(SinkReport& r) {
  r.to_file = writer_.joinable();
  if (!r.to_file) return;
  done_.store(true, std::memory_order_release);
  writer_.join();
  write_csv();
  r.file_bytes = file_bytes_;
  r.sample_bytes = records_ * rec_bytes_;
  r.stalls = stalls_;
  r.write_busy_ns = busy_ns_;
  r.csv_ns = csv_ns_;
}

uint64_t sink_csv_max_bytes(uint64_t total, uint64_t values) {
  const uint64_t header = 21 + values * 22;
  return header + total * (3 * 21 + values * 32 + 1);
}

void send_sink_file(Ctrl& ctrl, const std::string& path, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) sys_error("stream sink: cannot reopen " + path);
  std::string chunk(std::min<uint64_t>(kSinkChunk, bytes), '\0');
  uint64_t sent = 0;
  try {
    while (sent < bytes) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(kSinkChunk, bytes - sent));
      size_t got = 0;
      while (got < want) {
        ssize_t k = ::read(fd, chunk.data() + got, want - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) runtime_error("stream sink: " + path + " is shorter than written");
        got += static_cast<size_t>(k);
      }
      ctrl.send(CtrlType::exchange, std::string_view(chunk.data(), want));
      sent += want;
    }
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  ::close(fd);
  ::unlink(path.c_str());  // sent: the server keeps no copy
}

SinkCopy receive_sink_file(Ctrl& ctrl, const std::string& path, uint64_t bytes, uint64_t max_bytes) {
  if (bytes > max_bytes)
    runtime_error("stream sink: the server announced a " + std::to_string(bytes) + " B file, more than this point can make (" +
                  std::to_string(max_bytes) + " B)");
  const uint64_t t0 = Clock::mono_ns();
  // PATH is either the old file or the whole new one.
  ReplacingFile file(path);
  uint64_t got = 0;
  while (got < bytes) {
    std::string chunk = ctrl.recv(CtrlType::exchange, "stream sink file");
    if (chunk.empty() || chunk.size() > kSinkChunk || chunk.size() > bytes - got)
      runtime_error("stream sink: a malformed chunk of the sink file from the server");
    if (!file.write(chunk.data(), chunk.size())) sys_error("stream sink: writing " + file.temp_path());
    got += chunk.size();
  }
  file.commit();
  return {bytes, static_cast<double>(Clock::mono_ns() - t0) / 1e9};
}

}  // namespace fm
