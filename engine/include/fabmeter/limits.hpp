// Machine limits measured beside every benchmark: what no transport between
// these two CPUs can beat.
#pragma once
#include "fabmeter/results.hpp"

namespace fm {

// One cache line bounced between threads pinned to cpu_a and cpu_b, n round
// trips; reports RTT/2 statistics and the cost of one timestamp.
JsonObj measure_limits(int cpu_a, int cpu_b, uint64_t n);

}  // namespace fm
