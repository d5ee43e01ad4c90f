#include "fabmeter/samples.hpp"

#include <sys/mman.h>

#include <utility>

#include "fabmeter/error.hpp"
#include "fabmeter/pages.hpp"

namespace fm {
namespace {

void* map_locked(size_t bytes, bool* locked) {
  if (bytes == 0) bytes = 4096;
  // mlock can fail without privileges; the pages are in anyway, so go on and record it.
  void* p = map_faulted_in(bytes, -1, locked);
  if (p == MAP_FAILED) sys_error("cannot allocate " + std::to_string(bytes) + " bytes of sample storage");
  return p;
}

}  // namespace

SampleBuf::SampleBuf(size_t capacity) : cap_(capacity), bytes_(capacity * sizeof(uint64_t)) {
  // Plans are checked against kMaxSampleBytes first; a size that wraps would map too little.
  if (capacity > SIZE_MAX / sizeof(uint64_t)) runtime_error("sample storage of " + std::to_string(capacity) + " slots");
  data_ = static_cast<uint64_t*>(map_locked(bytes_, &locked_));
}
SampleBuf::SampleBuf(SampleBuf&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), cap_(o.cap_), bytes_(o.bytes_), locked_(o.locked_) {}
SampleBuf& SampleBuf::operator=(SampleBuf&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(cap_, o.cap_);
  std::swap(bytes_, o.bytes_);
  std::swap(locked_, o.locked_);
  return *this;
}
SampleBuf::~SampleBuf() {
  if (data_) munmap(data_, bytes_ ? bytes_ : 4096);
}

PayloadBuf::PayloadBuf(size_t bytes) : bytes_(bytes) {
  bool locked;
  data_ = static_cast<std::byte*>(map_locked(bytes, &locked));
}
PayloadBuf::~PayloadBuf() { munmap(data_, bytes_ ? bytes_ : 4096); }

}  // namespace fm
