#include "fabmeter/cpu.hpp"

#include <gnu/libc-version.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fabmeter/error.hpp"

namespace fm {

std::vector<int> cpu_list(const cpu_set_t& set) {
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

const std::vector<int>& usable_cpus() {
  static const std::vector<int> cpus = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof set, &set) == 0 ? cpu_list(set) : std::vector<int>{};
  }();
  return cpus;
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  for (size_t from = 0;;) {
    const size_t plus = text.find('+', from);
    const std::string_view one = text.substr(from, plus == std::string_view::npos ? std::string_view::npos : plus - from);
    if (one.empty() || one.size() > 4 || cpus.size() >= kMaxCpuList) return std::nullopt;
    int c = 0;
    for (char d : one) {
      if (d < '0' || d > '9') return std::nullopt;
      c = c * 10 + (d - '0');
    }
    if (c >= CPU_SETSIZE) return std::nullopt;
    cpus.push_back(c);
    if (plus == std::string_view::npos) return cpus;
    from = plus + 1;
  }
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string out;
  for (int c : cpus) out += (out.empty() ? "" : "+") + std::to_string(c);
  return out;
}

void allow_cpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  usable_cpus();  // taken before this narrows it
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) usage_error("cannot run on CPUs " + cpu_list_text(cpus));
}

void pin_to_cpu(int cpu) {
  if (cpu < 0) return;
  usable_cpus();  // taken before the pin narrows it
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    usage_error("cannot pin to CPU " + std::to_string(cpu) + " (this machine has " +
                std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " online CPUs)");
}

std::string host_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  // A skewed clock (FABMETER_CLOCK_SKEW) shares nothing with the other end's.
  if (clock_skew_from_env()) id += "+clock-skew";
  return id;
}

JsonObj engine_env(const Clock& clk, int cpu, const FabricWhere& where) {
  utsname u{};
  uname(&u);
  std::string model;
  std::ifstream ci("/proc/cpuinfo");
  for (std::string line; std::getline(ci, line);)
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  JsonObj o;
  o.add("hostname", u.nodename)
      .add("kernel", std::string(u.release) + " " + u.version)
      .add("cpu_model", model)
      .add("cpu", cpu)
      .add("clock_source", clk.source_name())
      .add("tsc_invariant", Clock::tsc_invariant())
      .add("tsc_ghz", clk.tsc_ghz())
      .add("timestamp_cost_ns", clk.timestamp_cost_ns())
      .add("compiler", __VERSION__)
      .add("glibc", gnu_get_libc_version());
  // The network namespace (its inode): two ends on one host in two namespaces are two places on a path.
  struct stat ns{};
  if (stat("/proc/self/ns/net", &ns) == 0)
    o.add("netns", static_cast<uint64_t>(ns.st_ino));
  else
    o.add_raw("netns", "null");
  const std::string fabric = fabric_json(where);
  o.add_raw("fabric", fabric);
  // Parsed into a local: a range-for over a temporary's member would outlive the temporary.
  const nlohmann::json facts = nlohmann::json::parse(fabric);
  for (const auto& w : facts.value("warnings", nlohmann::json::array()))
    std::fprintf(stderr, "fabmeter-engine: warning: %s\n", w.get<std::string>().c_str());
  if (const std::optional<ClockSkew> skew = clock_skew_from_env())
    o.add("clock_skew", JsonObj().add("offset_ns", skew->offset_ns).add("drift_ppm", skew->drift_ppm));
  return o;
}

}  // namespace fm
