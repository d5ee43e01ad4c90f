// The other end's clock on ours, from round-trip probes: offset and drift, fitted
// over the whole run, with a guaranteed error bound.
//
// A probe is sent at local time s, stamped by the other end at p on arrival, and
// answered after the other end's turnaround a; its answer arrives at local time r.
// The two one-way delays add up to d = (r - s) - a. If they are equal, the
// other end stamped at local time s + d/2 and the offset (remote - local) was
// p - s - d/2; whatever their split, the truth lies within +- d/2 of that.
// Probes can never see that split (path asymmetry): only its bound.
//
// Queueing only ever adds delay, so the probe with the smallest d of each
// window is the one closest to the truth (the min filter, as Huygens keeps
// its purest probes); offset(t) = offset + drift * (t - ref) is fitted by
// least squares over those, around a reference time inside the run so that
// absolute nanoseconds (1e14 and more) never enter the fit. The bound holds
// between the first and the last kept probe, not beyond: correct only what
// the probes bracket.
//
// What a real clock can do bounds what the other end's replies may say; a fit
// beyond it is a fault or a lie, never a figure (implausible_fit):
// - every reading within kMaxClockNs of 0 (an int64 of ns with a margin),
//   so neither the offset nor its application to any stamp can overflow;
// - |drift| <= kMaxClockDrift (500 ppm), plus the tilt the fit's own bound
//   allows over its span (2 error_bound_ns / span_ns): crystal oscillators
//   run within ~100 ppm of each other and NTP slews a clock by at most 500
//   ppm;
// - each kept probe's reading within the largest kept round trip of where
//   the fit puts it: readings that bracket a real clock's line within half
//   their round trips leave a fit no further from any of them;
// - no message arriving, on our clock, before it was sent by more than
//   twice the fit's bound and kStampSlackNs (implausible_arrival).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fm {

inline constexpr double kMaxClockNs = 0x1p62;     // ~146 years
inline constexpr double kMaxClockDrift = 500e-6;  // 500 ppm
// Stamps taken on different CPUs disagree by tens of ns (vCPUs' clocks).
inline constexpr double kStampSlackNs = 1000;
// How a refused fit's one line begins.
inline constexpr const char* kImplausibleClock = "the server's clock replies are implausible: ";

// All times in ns; local times on our clock, remote times on the other end's.
struct ClockProbe {
  double sent_ns;        // local, before the probe left
  double remote_ns;        // the other end, when the probe arrived there
  double received_ns;    // local, when the answer arrived
  double turnaround_ns;  // the other end, from its arrival stamp to its answer (0 if not reported)
  double delay_ns() const { return received_ns - sent_ns - turnaround_ns; }
};

struct ClockFit {
  double ref_ns = 0;          // local time the offset is given at (mean of the kept probes' times)
  double offset_ns = 0;       // remote - local at ref_ns
  double drift = 0;           // d(offset)/d(local time): 1e-6 is 1 ppm
  double error_bound_ns = 0;  // over the span: the largest (half delay + residual) of the kept probes
  double span_ns = 0;         // first to last kept probe
  uint64_t probes = 0;        // probes taken
  uint64_t kept = 0;          // probes the fit uses (one per window)

  double offset_at(double local_ns) const { return offset_ns + drift * (local_ns - ref_ns); }
  // The local time at which our clock read what the other end's read `remote_ns`.
  double to_local(double remote_ns) const { return ref_ns + (remote_ns - ref_ns - offset_ns) / (1 + drift); }
  double drift_ppm() const { return drift * 1e6; }
};

class ClockEstimator {
 public:
  // Into the current window.
  void add(const ClockProbe& probe);
  // Ends the current window: its lowest-delay probe is kept for the fit.
  void close_window();
  // Offset and drift over the kept probes (drift 0 with fewer than two).
  ClockFit fit() const;
  const std::vector<ClockProbe>& kept() const { return kept_; }

 private:
  std::optional<ClockProbe> best_;  // of the current window
  std::vector<ClockProbe> kept_;
  uint64_t probes_ = 0;
};

// The other end's reading of its clock (ns) a real clock could give.
bool plausible_reading(double ns);
// Why `f`, fitted over `kept`, is no real clock; empty if it may be.
std::string implausible_fit(const ClockFit& f, std::span<const ClockProbe> kept);
// Why a message that took `one_way_ns` by `f` shows the fit is no real
// clock (it arrived before it was sent); empty if it may be.
std::string implausible_arrival(const ClockFit& f, double one_way_ns);

}  // namespace fm
