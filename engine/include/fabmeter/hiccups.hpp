// The machine's hiccups: times a CPU stopped running our code (an interrupt,
// the hypervisor, an SMI, another thread), seen by a thread per CPU that
// only reads the TSC.
#pragma once
#include <cstdint>
#include <vector>

#include "fabmeter/clock.hpp"
#include "fabmeter/results.hpp"

namespace fm {

struct HiccupOptions {
  std::vector<int> cpus;  // empty: every CPU the process may run on
  int fifo = 0;           // > 0: the readers run SCHED_FIFO at this priority, so no ordinary task preempts them
  double seconds = 1.0;
  // Below the 200-300 µs of an SMI, above the 5-50 µs a guest's timer
  // interrupt takes (docs/cli.md has the figures).
  double threshold_us = 100.0;
};

// A reader pinned to each of o.cpus spins on clk.ticks() for o.seconds;
// every gap between two reads longer than o.threshold_us is kept (its CPU,
// start and length; the first kMaxListedGaps per CPU listed, every one
// counted), and the gaps that overlap in time on every CPU at once (two
// readers or more) are flagged: the SMI signature, all cores stopped.
JsonObj measure_hiccups(const Clock& clk, const HiccupOptions& o);

}  // namespace fm
