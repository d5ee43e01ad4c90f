// Memory a run holds: regions to register (setup --what mr), and rings and
// sample storage mapped with every page in before use.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace fm {

// `bytes` of memory, anonymous and private (fd < 0) or the shared object `fd`,
// every page faulted in by this thread one at a time (a private page written,
// a shared one read: the other process's bytes stay as they are), then, with
// `locked`, mlock'ed where RLIMIT_MEMLOCK allows (*locked says whether).
// Not MAP_POPULATE, nor mlock over pages not yet in: those hold the process's
// address-space lock (mmap_lock) for the whole region, seconds for a GiB where
// a VM's host backs memory lazily, and any other thread that maps memory
// meanwhile waits as long: the control channel's heartbeat, at its first
// allocation, fell silent and the other end called this one frozen.
// MAP_FAILED (errno set) if the mapping fails.
void* map_faulted_in(size_t bytes, int fd, bool* locked);

// A region to register (setup --what mr): base pages, or huge pages where the
// machine gives them, faulted in before use so that a registration's time is
// the registration's, not the page faults'.
class Region {
 public:
  // huge = false: base pages, THP refused for the region (MADV_NOHUGEPAGE).
  // huge = true: hugetlbfs pages (MAP_HUGETLB) when enough are reserved and
  // free, else transparent huge pages (MADV_HUGEPAGE) when THP is not
  // "never"; kind() is then "hugetlb" or "thp", or nullptr with why().
  // Base pages that cannot be had (out of memory) are a runtime error.
  Region(size_t bytes, bool huge);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  void* data() const { return data_; }
  const char* kind() const { return kind_; }
  const std::string& why() const { return why_; }
  // Bytes of the region the kernel backs with huge pages (AnonHugePages of
  // its mapping for THP; the whole mapping for hugetlb; 0 for base pages).
  uint64_t huge_bytes() const { return huge_bytes_; }

 private:
  bool map_hugetlb(size_t bytes);
  bool map_thp(size_t bytes);
  void* map_ = nullptr;   // what munmap releases
  size_t map_bytes_ = 0;
  void* data_ = nullptr;
  const char* kind_ = nullptr;
  std::string why_;
  uint64_t huge_bytes_ = 0;
};

}  // namespace fm
