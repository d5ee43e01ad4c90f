#include "fabmeter/pages.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fabmeter/error.hpp"

namespace fm {
namespace {

constexpr size_t kBasePage = 4096;
constexpr size_t kThpBytes = 2u << 20;  // x86-64's PMD size: what THP maps at once

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// A /proc/meminfo figure in kB (0 when absent).
uint64_t meminfo_kb(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':')
      return std::strtoull(line.c_str() + n + 1, nullptr, 10);
  return 0;
}

// THP's mode: the bracketed word of .../transparent_hugepage/enabled ("" if none).
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t a = text.find('['), b = text.find(']');
  return a != std::string::npos && b != std::string::npos && b > a ? text.substr(a + 1, b - a - 1) : "";
}

// AnonHugePages of the mapping holding addr, in bytes (/proc/self/smaps).
uint64_t anon_huge_bytes(const void* addr) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  bool inside = false;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::strtoull(line.c_str() + 14, nullptr, 10) << 10;
  }
  return 0;
}

// A fault on every page. Private anonymous memory is written (a read would
// map the shared zero page), a zero where there is nothing yet; a shared
// object's page is read (the fault puts it in, and the other process may be
// writing it, e.g. a ring's header).
void touch(void* p, size_t bytes, bool shared) {
  auto* b = static_cast<volatile char*>(p);
  for (size_t i = 0; i < bytes; i += kBasePage)
    if (shared) (void)b[i];
    else b[i] = 0;
}

}  // namespace

void* map_faulted_in(size_t bytes, int fd, bool* locked) {
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS : MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return m;
  touch(m, bytes, fd >= 0);
  if (locked) *locked = mlock(m, bytes) == 0;  // every page in: the lock is held only to mark them
  return m;
}

Region::Region(size_t bytes, bool huge) {
  if (!huge) {
    map_bytes_ = round_up(bytes, kBasePage);
    map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      sys_error("setup: cannot map " + std::to_string(bytes) + " bytes to register");
    }
    madvise(map_, map_bytes_, MADV_NOHUGEPAGE);  // THP "always" would otherwise make them huge
    touch(map_, map_bytes_, false);
    data_ = map_;
    kind_ = "base";
    return;
  }
  if (map_hugetlb(bytes) || map_thp(bytes)) touch(data_, bytes, false);
  if (kind_ && std::strcmp(kind_, "thp") == 0) {
    huge_bytes_ = anon_huge_bytes(data_);
    if (huge_bytes_ == 0) {
      why_ = "THP (" + thp_mode() + ") gave this mapping no huge page (AnonHugePages 0: memory fragmented?)";
      kind_ = nullptr;
    }
  }
}

bool Region::map_hugetlb(size_t bytes) {
  const uint64_t page = meminfo_kb("Hugepagesize") << 10;
  const uint64_t free_pages = meminfo_kb("HugePages_Free");
  const size_t need = page ? round_up(bytes, page) : 0;
  if (!page || free_pages * page < need) {
    why_ = "hugetlb: " + std::to_string(free_pages) + " huge pages free of " + std::to_string(page >> 10) +
           " KiB, " + std::to_string(page ? need / page : 0) + " needed (vm.nr_hugepages)";
    return false;
  }
  void* m = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  if (m == MAP_FAILED) {
    why_ = std::string("hugetlb: mmap MAP_HUGETLB: ") + std::strerror(errno);
    return false;
  }
  map_ = data_ = m;
  map_bytes_ = need;
  kind_ = "hugetlb";
  huge_bytes_ = need;
  return true;
}

bool Region::map_thp(size_t bytes) {
  const std::string mode = thp_mode();
  if (mode != "always" && mode != "madvise") {
    why_ += "; THP: " + (mode.empty() ? std::string("not in this kernel") : "'" + mode + "'");
    return false;
  }
  // Aligned to the huge page, and whole huge pages: a smaller or unaligned
  // region could not be mapped huge at all.
  const size_t want = round_up(bytes, kThpBytes);
  map_bytes_ = want + kThpBytes;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    why_ += std::string("; THP: mmap: ") + std::strerror(errno);
    return false;
  }
  data_ = reinterpret_cast<void*>(round_up(reinterpret_cast<uintptr_t>(map_), kThpBytes));
  if (madvise(data_, want, MADV_HUGEPAGE) != 0) {
    why_ += std::string("; THP: madvise MADV_HUGEPAGE: ") + std::strerror(errno);
    return false;
  }
  kind_ = "thp";
  return true;
}

Region::~Region() {
  if (map_) munmap(map_, map_bytes_);
}

}  // namespace fm
