// load: the client's sizes: every request and its reply from the workload
// (or fixed), and the size buckets of the slowdown figures.
#pragma once
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "experiment/load/common.hpp"
#include "fabmeter/workload.hpp"

namespace fm {

constexpr int kSizeBuckets = 10;                 // slowdown: sizes by deciles of the workload

// Client side: the size of every request and its reply, and the size
// buckets of the slowdown figures (deciles of the workload's CDF, merged
// where they hold the same sizes; one bucket for a fixed size).
class LoadSizes {
 public:
  explicit LoadSizes(const Params& p) : req_(p.load.req_size), resp_(p.load.resp_size), max_(load_largest_message(p)) {
    if (p.load.workload.empty()) {
      buckets_.push_back({req_, 0, 1});
      return;
    }
    workload_.emplace(Workload::load(p.load.workload));
    for (int k = 1; k <= kSizeBuckets; ++k) {
      const double lo = (k - 1) / double(kSizeBuckets), hi = k / double(kSizeBuckets);
      const uint64_t top = clamp(workload_->at(std::nextafter(hi, 0.0)));
      if (!buckets_.empty() && buckets_.back().hi == top) buckets_.back().u_hi = hi;
      else buckets_.push_back({top, lo, hi});
    }
  }

  struct Bucket {
    uint64_t hi;        // largest request size in the bucket (the one below it holds smaller ones)
    double u_lo, u_hi;  // its share of the CDF
  };

  // A request size: from the workload (clamped to [8, the largest message]) or fixed.
  uint64_t draw(Rng& rng, uint64_t* clamped) const { return workload_ ? clamped_size(workload_->sample(rng), clamped) : req_; }
  // A request size within bucket b (the unloaded probes).
  uint64_t draw_in(int b, Rng& rng) const {
    if (!workload_) return req_;
    const Bucket& k = buckets_[b];
    uint64_t unused;
    return clamped_size(workload_->at(k.u_lo + rng.uniform() * (k.u_hi - k.u_lo)), &unused);
  }
  uint64_t reply(uint64_t req) const { return resp_ ? resp_ : req; }
  int bucket_of(uint64_t size) const {
    int b = 0;
    while (b + 1 < static_cast<int>(buckets_.size()) && size > buckets_[b].hi) ++b;
    return b;
  }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  uint64_t bucket_lo(int b) const { return b == 0 ? (workload_ ? clamp(workload_->min_size()) : req_) : buckets_[b - 1].hi + 1; }
  double mean_request() const { return workload_ ? workload_->mean_size() : static_cast<double>(req_); }

 private:
  uint64_t clamp(uint64_t s) const { return std::clamp<uint64_t>(s, kLoadMinMessage, max_); }
  uint64_t clamped_size(uint64_t s, uint64_t* clamped) const {
    const uint64_t c = clamp(s);
    *clamped += c != s;
    return c;
  }
  uint64_t req_, resp_, max_;
  std::optional<Workload> workload_;
  std::vector<Bucket> buckets_;
};

}  // namespace fm
