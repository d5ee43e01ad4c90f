// CPU placement and the environment a result is recorded with.
#pragma once
#include <sched.h>

#include <string>
#include <vector>

#include "fabmeter/clock.hpp"
#include "fabmeter/fabric.hpp"
#include "fabmeter/results.hpp"

namespace fm {

// The CPUs in a set, in ascending order.
std::vector<int> cpu_list(const cpu_set_t& set);
// Pins the calling thread; usage error if the CPU does not exist or is not allowed.
void pin_to_cpu(int cpu);
// The CPUs this process may run on, as it started: before pin_to_cpu
// narrowed it to one (a messaging library's I/O threads go on another).
const std::vector<int>& usable_cpus();
// Same value on every process of one booted machine (network namespaces
// included): tells whether both ends share one TSC and one /dev/shm.
std::string host_id();
// What this end ran on: kernel, CPU, clock, pinning, compiler and libc, and
// the fabric (fabric.hpp) at `where`, whose warnings it also prints on stderr.
JsonObj engine_env(const Clock& clk, int cpu, const FabricWhere& where);

}  // namespace fm
