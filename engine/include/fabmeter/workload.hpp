// Message-size workloads for `load`: a discrete size distribution read from
// a CSV file, sampled by inverse CDF with a seeded generator. The project
// ships Homa's W1-W5 (data/workloads/, compiled into the engine), and a user
// may give their own file, so parsing is bounded and every error names the
// line.
//
// File format (UTF-8/ASCII text, at most kMaxFileBytes):
//   # comment lines and blank lines anywhere
//   length_bytes,weight          <- the header, first non-comment line
//   8,0.31                       <- a size and its relative weight
//   ...                          <- sizes strictly increasing, 1..kMaxLength
// Weights are relative (they need not sum to 1): finite, >= 0, not all 0.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fabmeter/rng.hpp"

namespace fm {

class Workload {
 public:
  static constexpr size_t kMaxFileBytes = 1 << 20;
  static constexpr size_t kMaxPoints = 100'000;
  static constexpr uint64_t kMaxLength = 1ull << 30;  // 1 GiB: far above any workload, bounds buffers

  // Parses the CSV text; `origin` names it in errors ("FILE:LINE: ...").
  // Throws fm::Error (usage) on anything that is not such a distribution.
  static Workload parse(std::string_view text, const std::string& origin);
  // "w1".."w5" (built in) or the path of a CSV file.
  static Workload load(const std::string& spec);
  // The built-in names, for --help and errors.
  static std::vector<std::string> builtin_names();

  // Inverse CDF: the first size whose cumulative weight exceeds a uniform
  // draw. O(log points), no allocation.
  uint64_t sample(Rng& rng) const;
  // The size at cumulative probability u in [0, 1): sample() with a given draw.
  uint64_t at(double u) const;

  const std::string& name() const { return name_; }
  double mean_size() const { return mean_; }
  uint64_t min_size() const { return lengths_.front(); }
  uint64_t max_size() const { return lengths_.back(); }
  size_t points() const { return lengths_.size(); }
  uint64_t length(size_t i) const { return lengths_[i]; }
  double cdf(size_t i) const { return cdf_[i]; }  // P(size <= length(i)), the last is 1
  // The share of requests larger than `limit`, and of the bytes they carry:
  // what clamping the workload to `limit` would change.
  struct Share {
    double messages = 0, bytes = 0;
  };
  Share share_above(uint64_t limit) const;

 private:
  std::string name_;
  std::vector<uint64_t> lengths_;
  std::vector<double> cdf_;
  double mean_ = 0;
};

}  // namespace fm
