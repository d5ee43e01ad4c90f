// Sample storage for the hot path: allocated, touched and locked before the
// run, so recording a timestamp never faults or allocates.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fm {

class SampleBuf {
 public:
  SampleBuf() = default;
  explicit SampleBuf(size_t capacity);  // uint64 slots, zeroed
  SampleBuf(SampleBuf&& o) noexcept;
  SampleBuf& operator=(SampleBuf&& o) noexcept;
  SampleBuf(const SampleBuf&) = delete;
  ~SampleBuf();

  uint64_t* data() { return data_; }
  const uint64_t* data() const { return data_; }
  size_t capacity() const { return cap_; }
  bool locked() const { return locked_; }
  uint64_t& operator[](size_t i) { return data_[i]; }
  uint64_t operator[](size_t i) const { return data_[i]; }

 private:
  uint64_t* data_ = nullptr;
  size_t cap_ = 0;
  size_t bytes_ = 0;
  bool locked_ = false;
};

// A buffer for message payloads: page-aligned, prefaulted, locked.
class PayloadBuf {
 public:
  explicit PayloadBuf(size_t bytes);
  ~PayloadBuf();
  PayloadBuf(const PayloadBuf&) = delete;
  std::byte* data() { return data_; }
  size_t size() const { return bytes_; }

 private:
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace fm
