// Open-loop arrivals for `load`: the absolute send time of every request,
// in ns after the start of the point, fixed before the run by --arrivals,
// --rate and a seed. The sender compares the clock with these times and
// never with its own last send or a reply, so a slow reply or a late send
// cannot push the rest of the schedule back (coordinated omission): latency
// is measured from this intended time.
//
// Each kind has mean gap 1/rate:
//   poisson  exponential gaps (a Poisson process, Homa's and mutilate's default)
//   uniform  gaps uniform in [0, 2/rate] (mutilate's "uniform")
//   fixed    exactly i/rate, computed from i, so rounding never accumulates
// The first request is at the start (0 unless given).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "fabmeter/error.hpp"
#include "fabmeter/rng.hpp"

namespace fm {

enum class ArrivalKind { poisson, uniform, fixed };

inline ArrivalKind parse_arrivals(std::string_view s) {
  if (s == "poisson") return ArrivalKind::poisson;
  if (s == "uniform") return ArrivalKind::uniform;
  if (s == "fixed") return ArrivalKind::fixed;
  usage_error("--arrivals must be poisson, uniform or fixed, not '" + std::string(s) + "'");
}

inline const char* arrivals_name(ArrivalKind k) {
  return k == ArrivalKind::poisson ? "poisson" : k == ArrivalKind::uniform ? "uniform" : "fixed";
}

class Arrivals {
 public:
  static constexpr double kMaxRate = 1e9;  // one request per ns: beyond it times would collide

  // rate: requests/s; the first request at start_ns. n threads or
  // connections sharing a rate R each get rate R/n and a seed of their own;
  // with fixed arrivals also start_ns = k * 1e9 / R for the k-th, so together
  // they send every 1/R instead of n at a time.
  Arrivals(ArrivalKind kind, double rate, uint64_t seed, double start_ns = 0)
      : kind_(kind), gap_ns_(1e9 / rate), start_ns_(start_ns), rng_(seed), t_(start_ns) {
    if (!(rate > 0) || !(rate <= kMaxRate)) usage_error("--rate must be > 0 and <= 1e9 requests/s");
    if (!(start_ns >= 0)) usage_error("arrivals: start must be >= 0");
  }

  // The next request's send time, ns after the start: non-decreasing.
  uint64_t next() {
    double t;
    if (kind_ == ArrivalKind::fixed) {
      t = start_ns_ + static_cast<double>(i_) * gap_ns_;  // from i, never a running sum
    } else {
      // A running sum of drawn gaps: the schedule's own, not "now", so a late
      // sender catches up instead of shifting every later request. In double
      // ns: rounding moves the rate by ~1e-16, far below anything measured.
      t = t_;
      double u = rng_.uniform();
      t_ += kind_ == ArrivalKind::poisson ? -std::log1p(-u) * gap_ns_ : 2.0 * u * gap_ns_;
    }
    i_++;
    return static_cast<uint64_t>(std::llround(t));
  }

  uint64_t scheduled() const { return i_; }  // how many times next() has been called
  double gap_ns() const { return gap_ns_; }
  ArrivalKind kind() const { return kind_; }

 private:
  ArrivalKind kind_;
  double gap_ns_;
  double start_ns_;
  Rng rng_;
  uint64_t i_ = 0;
  double t_;
};

}  // namespace fm
