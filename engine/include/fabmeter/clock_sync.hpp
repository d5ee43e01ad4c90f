// A peer's clock on ours, from round-trip probes: offset and drift, fitted
// over the whole run, with a guaranteed error bound.
//
// A probe is sent at local time s, stamped by the peer at p on arrival, and
// answered after the peer's turnaround a; its answer arrives at local time r.
// The two one-way delays add up to d = (r - s) - a. If they are equal, the
// peer stamped at local time s + d/2 and the offset (peer - local) was
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
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace fm {

// All times in ns; local times on our clock, peer times on the peer's.
struct ClockProbe {
  double sent_ns;        // local, before the probe left
  double peer_ns;        // peer, when the probe arrived there
  double received_ns;    // local, when the answer arrived
  double turnaround_ns;  // peer, from its arrival stamp to its answer (0 if not reported)
  double delay_ns() const { return received_ns - sent_ns - turnaround_ns; }
};

struct ClockFit {
  double ref_ns = 0;          // local time the offset is given at (mean of the kept probes' times)
  double offset_ns = 0;       // peer - local at ref_ns
  double drift = 0;           // d(offset)/d(local time): 1e-6 is 1 ppm
  double error_bound_ns = 0;  // over the span: the largest (half delay + residual) of the kept probes
  double span_ns = 0;         // first to last kept probe
  uint64_t probes = 0;        // probes taken
  uint64_t kept = 0;          // probes the fit uses (one per window)

  double offset_at(double local_ns) const { return offset_ns + drift * (local_ns - ref_ns); }
  // The local time at which our clock read what the peer's read `peer_ns`.
  double to_local(double peer_ns) const { return ref_ns + (peer_ns - ref_ns - offset_ns) / (1 + drift); }
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

 private:
  std::optional<ClockProbe> best_;  // of the current window
  std::vector<ClockProbe> kept_;
  uint64_t probes_ = 0;
};

}  // namespace fm
