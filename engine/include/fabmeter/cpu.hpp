// CPU placement and the environment a result is recorded with.
#pragma once
#include <sched.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fabmeter/clock.hpp"
#include "fabmeter/fabric.hpp"
#include "fabmeter/results.hpp"

namespace fm {

// The CPUs in a set, in ascending order.
std::vector<int> cpu_list(const cpu_set_t& set);
// The most CPUs one --cpu list names.
constexpr size_t kMaxCpuList = 1024;
// "N" or "N+M+...": each CPU below CPU_SETSIZE, at most kMaxCpuList of them;
// nullopt for anything else (the caller says whose list it was).
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);
// The list as parse_cpu_list reads it ("0+1"); "" for none.
std::string cpu_list_text(const std::vector<int>& cpus);
// This process may run on exactly `cpus` (none: as it is); usage error if it cannot.
void allow_cpus(const std::vector<int>& cpus);
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
