#include "fabmeter/clock_sync.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fm {

namespace {
// When the other end stamped, on our clock, and the offset then: symmetric delays assumed.
double local_time(const ClockProbe& p) { return p.sent_ns + p.delay_ns() / 2; }
double offset_of(const ClockProbe& p) { return p.remote_ns - local_time(p); }
}  // namespace

void ClockEstimator::add(const ClockProbe& probe) {
  ++probes_;
  if (!best_ || probe.delay_ns() < best_->delay_ns()) best_ = probe;
}

void ClockEstimator::close_window() {
  if (best_) kept_.push_back(*best_);
  best_.reset();
}

ClockFit ClockEstimator::fit() const {
  ClockFit f;
  f.probes = probes_;
  f.kept = kept_.size();
  if (kept_.empty()) return f;
  const double n = static_cast<double>(kept_.size());
  // Centre both axes (times around their mean, offsets around the first) so
  // the sums stay small numbers whatever the clocks read.
  const double y0 = offset_of(kept_.front());
  double mean_t = 0, mean_y = 0;
  for (const ClockProbe& p : kept_) {
    mean_t += (local_time(p) - local_time(kept_.front())) / n;
    mean_y += (offset_of(p) - y0) / n;
  }
  f.ref_ns = local_time(kept_.front()) + mean_t;
  double stt = 0, sty = 0;
  for (const ClockProbe& p : kept_) {
    const double t = local_time(p) - f.ref_ns, y = offset_of(p) - y0 - mean_y;
    stt += t * t;
    sty += t * y;
  }
  f.drift = stt > 0 ? sty / stt : 0;
  f.offset_ns = y0 + mean_y;
  f.span_ns = local_time(kept_.back()) - local_time(kept_.front());  // windows come in time order
  // At each kept probe the truth lies within half its delay of its offset,
  // and the fit within its residual of that offset; between probes both
  // are lines, so the largest sum bounds the error over the whole span.
  for (const ClockProbe& p : kept_)
    f.error_bound_ns = std::max(f.error_bound_ns, std::max(0.0, p.delay_ns()) / 2 +
                                                      std::abs(offset_of(p) - f.offset_at(local_time(p))));
  return f;
}

namespace {
std::string format(const char* fmt, double a, double b = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}
}  // namespace

bool plausible_reading(double ns) { return std::isfinite(ns) && std::abs(ns) <= kMaxClockNs; }

std::string implausible_fit(const ClockFit& f, std::span<const ClockProbe> kept) {
  if (!plausible_reading(f.offset_ns)) return format("an offset of %.6g ns", f.offset_ns);
  // The fitted line is within the bound of the truth at both ends of its
  // span, so its slope within 2 bound / span of the true drift.
  const double tilt = f.span_ns > 0 ? 2 * f.error_bound_ns / f.span_ns : 0;
  if (!(std::abs(f.drift) <= kMaxClockDrift + tilt))
    return format("a drift of %.6g ppm (a real clock's is within %.0f ppm)", f.drift_ppm(), kMaxClockDrift * 1e6);
  double widest = 0;
  for (const ClockProbe& p : kept) widest = std::max(widest, p.delay_ns());
  for (const ClockProbe& p : kept) {
    const double residual = std::abs(offset_of(p) - f.offset_at(local_time(p)));
    if (!(residual <= widest + 1))  // 1 ns: the readings' printed digits
      return format("a reading %.6g ns off the fit, beyond the probes' round trip of %.6g ns", residual, widest);
  }
  return "";
}

std::string implausible_arrival(const ClockFit& f, double one_way_ns) {
  const double least = -(2 * f.error_bound_ns + kStampSlackNs);
  if (one_way_ns >= least) return "";
  return format("by the fit a message arrived %.6g ns before it was sent (the fit's bound: %.6g ns)", -one_way_ns,
                f.error_bound_ns);
}

}  // namespace fm
