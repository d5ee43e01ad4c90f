// Workload::parse on a user's CSV: only fm::Error may come out, and whatever
// it accepts is a distribution the sampler can use (a CDF rising to exactly
// 1, sizes and mean within the bounds, every draw a listed size).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fabmeter/error.hpp"
#include "fabmeter/workload.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  fm::Workload w;
  try {
    w = fm::Workload::parse(text, "fuzz.csv");
  } catch (const fm::Error&) {
    return 0;
  }
  if (w.points() == 0 || w.cdf(w.points() - 1) != 1.0) __builtin_trap();
  for (size_t i = 1; i < w.points(); i++)
    if (w.cdf(i) < w.cdf(i - 1) || w.length(i) <= w.length(i - 1)) __builtin_trap();
  if (w.max_size() > fm::Workload::kMaxLength || w.mean_size() < static_cast<double>(w.min_size()) * (1 - 1e-9) ||
      w.mean_size() > static_cast<double>(w.max_size()) * (1 + 1e-9))
    __builtin_trap();
  fm::Rng rng(size);
  for (int i = 0; i < 16; i++) {
    uint64_t s = w.sample(rng);
    bool listed = false;
    for (size_t j = 0; j < w.points() && !listed; j++) listed = w.length(j) == s;
    if (!listed) __builtin_trap();
  }
  return 0;
}
