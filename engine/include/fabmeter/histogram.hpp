// A bounded-memory, mergeable latency histogram with HdrHistogram's layout,
// so hours of samples at millions per second fit in a fixed few hundred KiB
// and any HdrHistogram library reads what fabmeter writes.
//
// Layout (as HdrHistogram): values are integers (the load experiment records
// ns). Bucket 0 holds [0, sub_bucket_count) units with unit resolution; each
// further bucket covers twice the range of the previous one with the same
// number of (half) sub-buckets, so every value is kept to `digits`
// significant decimal digits. A unit is 2^floor(log2(lowest)). With the
// defaults (1 ns .. 10 s, 3 digits) that is 25 * 1024 counts = 200 KiB.
//
// Values outside [0, highest] are not dropped: they are counted in two
// open-ended buckets at the ends (below(), above()), take part in count(),
// min(), max(), mean() and percentile ranks, and a percentile whose rank
// falls there reports the exact min() or max(). The HdrHistogram encoding
// cannot hold them, so encode() carries only the in-range counts and the
// caller reports below()/above() beside it.
#pragma once
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "fabmeter/stats.hpp"

namespace fm {

struct HistogramConfig {
  int64_t lowest = 1;                   // lowest discernible value, >= 1
  int64_t highest = 10'000'000'000;     // highest trackable value, >= 2 * lowest (10 s in ns)
  int digits = 3;                       // significant decimal digits, 1..5
};

class Histogram {
 public:
  // Throws fm::Error (usage) on a config HdrHistogram would refuse. Allocates
  // and zeroes (so touches) all counts here, never in record().
  explicit Histogram(const HistogramConfig& cfg = {});

  // The hot path: O(1), no allocation, no branch but the range check.
  // Returns false for a value outside [0, highest] (counted all the same).
  [[gnu::always_inline]] bool record(int64_t v) {
    if (v < 0 || v > cfg_.highest) [[unlikely]]
      return record_outside(v);
    counts_[index_of(v)]++;
    in_range_++;
    sum_ += v;
    if (v < min_) min_ = v;
    if (v > max_) max_ = v;
    return true;
  }
  bool record(int64_t v, uint64_t n);  // n samples of value v (merging, tests)

  // Adds other's samples (threads, connections, hosts). Same config: the
  // counts are added one to one; otherwise each of other's buckets is
  // re-recorded at its lowest equivalent value (as HdrHistogram's add).
  void merge(const Histogram& other);
  void reset();

  uint64_t count() const { return in_range_ + below_ + above_; }
  uint64_t below() const { return below_; }   // values < 0
  uint64_t above() const { return above_; }   // values > highest
  int64_t min() const { return count() ? min_ : 0; }  // exact, not bucketed
  int64_t max() const { return count() ? max_ : 0; }
  double mean() const;  // exact (a running sum), not from bucket midpoints
  double stdev() const;  // population, from the buckets' middles (see summarize)

  // HdrHistogram's getValueAtPercentile (the Java reference): the rank is
  // ceil(p/100 * count) (at least 1) and the answer the highest value
  // equivalent to the bucket where the cumulative count reaches it (the
  // lowest one for p == 0). p is clamped to [0, 100].
  int64_t value_at_percentile(double p) const;

  // The standard V2 compressed form, base64 ("HISTF..."): what
  // HdrHistogram's decodeFromCompressedByteBuffer / hdrhistogram.decode read.
  std::string encode() const;

  // Bucket arithmetic, exposed for tests and for readers of the layout.
  int64_t lowest_equivalent(int64_t v) const;
  int64_t highest_equivalent(int64_t v) const { return lowest_equivalent(v) + equivalent_range(v) - 1; }
  int64_t equivalent_range(int64_t v) const;  // width of v's bucket
  size_t counts_len() const { return counts_.size(); }
  size_t bytes() const { return counts_.size() * sizeof(uint64_t); }
  const HistogramConfig& config() const { return cfg_; }

 private:
  [[gnu::always_inline]] size_t index_of(int64_t v) const {
    // Smallest power of two containing v, never below the first bucket's span.
    int pow2ceiling = 64 - std::countl_zero(static_cast<uint64_t>(v) | sub_bucket_mask_);
    int bucket = pow2ceiling - unit_magnitude_ - (sub_bucket_half_count_magnitude_ + 1);
    int sub = static_cast<int>(v >> (bucket + unit_magnitude_));
    return static_cast<size_t>(((bucket + 1) << sub_bucket_half_count_magnitude_) + (sub - sub_bucket_half_count_));
  }
  int64_t value_at_index(size_t i) const;
  bool record_outside(int64_t v);

  HistogramConfig cfg_;
  int unit_magnitude_ = 0;
  int sub_bucket_half_count_magnitude_ = 0;
  int sub_bucket_half_count_ = 0;
  int sub_bucket_count_ = 0;
  uint64_t sub_bucket_mask_ = 0;
  std::vector<uint64_t> counts_;
  uint64_t in_range_ = 0, below_ = 0, above_ = 0;
  __int128 sum_ = 0;  // exact for any count of any int64 values: mean() never overflows
  int64_t min_ = INT64_MAX, max_ = INT64_MIN;
};

// The usual percentile object (stats.hpp's Summary, to_json) from a
// histogram: count, min, max and mean exact, percentiles as
// value_at_percentile but never above max, stdev from the buckets' middles (HdrHistogram's
// getStdDeviation), with the values out of range taken at min() and max().
Summary summarize(const Histogram& h);

}  // namespace fm
