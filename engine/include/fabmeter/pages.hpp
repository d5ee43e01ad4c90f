// Memory to register (setup --what mr): a region of base pages, or of huge
// pages where the machine gives them, touched before use so that a
// registration's time is the registration's, not the page faults'.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace fm {

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
