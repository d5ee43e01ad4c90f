#include "fabmeter/cpu_cost.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "fabmeter/cpu.hpp"
#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"

namespace fm {

namespace {

double tv_s(const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6; }

// /proc/stat whole: one read of a few KiB, never on a hot path.
std::string read_proc_stat() {
  std::string text;
  const int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buf[16384];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return text;
}

// The "cpuN" lines of `want` (sorted as given); a CPU the file lacks is left out.
std::vector<CpuStatTimes> parse_stat(const std::string& text, const std::vector<int>& want) {
  static const double tick_s = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::vector<CpuStatTimes> out;
  for (int cpu : want) {
    const std::string tag = "\ncpu" + std::to_string(cpu) + " ";
    const size_t at = text.find(tag);
    if (at == std::string::npos) continue;
    const char* s = text.c_str() + at + tag.size();
    double v[8] = {};
    for (double& x : v) {
      char* end = nullptr;
      x = static_cast<double>(std::strtoull(s, &end, 10)) * tick_s;
      s = end;
    }
    out.push_back({cpu, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]});
  }
  return out;
}

double nonneg(double v) { return v > 0 ? v : 0; }

// The calling thread's time runnable but waiting for a CPU (schedstat's
// second field, ns): what other work on its CPU took from a busy loop.
double run_delay_s() {
  const int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char* end = nullptr;
  std::strtoull(buf, &end, 10);
  const char* s = end;
  const unsigned long long wait = std::strtoull(s, &end, 10);
  return end == s ? -1 : static_cast<double>(wait) * 1e-9;
}

// The calling thread's CPU time, exact to the call (schedstat's first field
// lags by up to a tick); on a VM, time the hypervisor took is not in it.
double thread_cpu_s() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

std::vector<int> pinned_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return {};
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (CPU_COUNT(&set) >= online) return {};
  return cpu_list(set);
}

namespace {

int64_t mono_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void read_usage(CpuSnapshot& s) {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  s.user_s = tv_s(ru.ru_utime);
  s.system_s = tv_s(ru.ru_stime);
  s.voluntary = ru.ru_nvcsw;
  s.involuntary = ru.ru_nivcsw;
  s.run_delay_s = run_delay_s();
  s.on_cpu_s = thread_cpu_s();
  rusage rt{};
  s.sleeps = getrusage(RUSAGE_THREAD, &rt) == 0 ? rt.ru_nvcsw : -1;
}

}  // namespace

CpuSnapshot cpu_snapshot(const std::vector<int>& cpus, bool closing) {
  CpuSnapshot s;
  if (closing) {
    s.mono_ns = mono_now_ns();
    read_usage(s);
    if (!cpus.empty()) s.cpus = parse_stat(read_proc_stat(), cpus);
    s.read_ns = mono_now_ns() - s.mono_ns;
  } else {
    const int64_t from = mono_now_ns();
    if (!cpus.empty()) s.cpus = parse_stat(read_proc_stat(), cpus);
    read_usage(s);
    s.mono_ns = mono_now_ns();
    s.read_ns = s.mono_ns - from;
  }
  return s;
}

void CpuWindow::open_point() {
  if (!cpus_known_) {
    cpus_ = pinned_cpus();
    cpus_known_ = true;
  }
  window_ = "point";
  per_ = "message";
  units_ = bytes_ = 0;
  read_ns_ = 0;
  flows_ = 0;
  ended_ = false;
  start_ = cpu_snapshot(cpus_);
}

void CpuWindow::add_flow(const CpuWindow& flow) {
  if (!flow.ended_) return;
  if (!flows_++) {
    *this = flow;
    flows_ = 1;
    units_ = bytes_ = 0;
  } else {
    if (flow.start_.mono_ns < start_.mono_ns) start_ = flow.start_;
    if (flow.stop_.mono_ns > stop_.mono_ns) stop_ = flow.stop_;
    if (flow.window_ != window_) window_ = "point";
    read_ns_ += flow.read_ns_;
  }
  units_ += flow.units_;
  bytes_ += flow.bytes_;
  cpus_.clear();
  start_.run_delay_s = stop_.run_delay_s = start_.on_cpu_s = stop_.on_cpu_s = -1;
  start_.sleeps = stop_.sleeps = -1;
  ended_ = true;
}

void CpuWindow::begin(const char* window) {
  window_ = window;
  start_ = cpu_snapshot(cpus_);
}

void CpuWindow::end(uint64_t units, const char* per, uint64_t bytes) {
  stop_ = cpu_snapshot(cpus_, true);
  read_ns_ = start_.read_ns + stop_.read_ns;
  units_ = units;
  per_ = per;
  bytes_ = bytes;
  ended_ = true;
}

void CpuWindow::close_point(uint64_t units) {
  if (ended_) return;
  window_ = "point";
  end(units, per_);
}

JsonObj CpuWindow::side() const {
  const double window_s = nonneg(static_cast<double>(stop_.mono_ns - start_.mono_ns) * 1e-9);
  const double user = nonneg(stop_.user_s - start_.user_s), sys = nonneg(stop_.system_s - start_.system_s);
  const double cpu = user + sys;
  JsonObj o;
  o.add("window", window_).add("window_s", window_s).add("user_s", user).add("system_s", sys).add("cpu_s", cpu);
  if (window_s > 0) o.add("utilization", cpu / window_s);
  else o.add_raw("utilization", "null");
  o.add("voluntary_switches", stop_.voluntary - start_.voluntary)
      .add("involuntary_switches", stop_.involuntary - start_.involuntary);
  // The thread's figures within the window: the snapshots read them just outside it.
  double on_cpu = -1;
  if (start_.on_cpu_s >= 0 && stop_.on_cpu_s >= 0) {
    on_cpu = std::min(nonneg(stop_.on_cpu_s - start_.on_cpu_s), window_s);
    o.add("on_cpu_s", on_cpu);
  } else {
    o.add_raw("on_cpu_s", "null");
  }
  if (start_.run_delay_s >= 0 && stop_.run_delay_s >= 0)
    o.add("run_delay_s", std::min(nonneg(stop_.run_delay_s - start_.run_delay_s), window_s - std::max(on_cpu, 0.0)));
  else o.add_raw("run_delay_s", "null");
  if (start_.sleeps >= 0 && stop_.sleeps >= 0) o.add("sleeps", stop_.sleeps - start_.sleeps);
  else o.add_raw("sleeps", "null");
  o.add("read_ns", read_ns_).add("per", per_).add("count", units_);
  if (units_) o.add("per_message_ns", cpu * 1e9 / static_cast<double>(units_));
  else o.add_raw("per_message_ns", "null");
  if (bytes_) o.add("service_demand_us_per_kb", cpu * 1e6 / (static_cast<double>(bytes_) / 1024));
  else o.add_raw("service_demand_us_per_kb", "null");
  if (cpus_.empty() || start_.cpus.size() != stop_.cpus.size()) {
    o.add_raw("cpus", "null");
    return o;
  }
  std::string list = "[";
  for (size_t i = 0; i < start_.cpus.size(); ++i) {
    const CpuStatTimes &a = start_.cpus[i], &b = stop_.cpus[i];
    const double u = nonneg(b.user + b.nice - a.user - a.nice), s = nonneg(b.system - a.system);
    const double irq = nonneg(b.irq - a.irq), soft = nonneg(b.softirq - a.softirq);
    const double idle = nonneg(b.idle - a.idle), wait = nonneg(b.iowait - a.iowait), steal = nonneg(b.steal - a.steal);
    const double total = u + s + irq + soft + idle + wait + steal;
    JsonObj c;
    c.add("cpu", b.cpu).add("user_s", u).add("system_s", s).add("irq_s", irq).add("softirq_s", soft)
        .add("idle_s", idle);
    if (total > 0) c.add("busy", (u + s + irq + soft + steal) / total);
    else c.add_raw("busy", "null");
    list += (i ? ", " : "") + c.str();
  }
  o.add_raw("cpus", list + "]");
  return o;
}

namespace {

[[noreturn]] void bad(const std::string& why) { runtime_error("the server's cpu_cost frame: " + why); }

// A finite number in [0, max], or null where `nullable`.
nlohmann::json number(const nlohmann::json& o, const char* key, double max, bool nullable = false) {
  const auto it = o.find(key);
  if (it == o.end()) bad(std::string("no ") + key);
  if (it->is_null() && nullable) return nullptr;
  if (!it->is_number()) bad(std::string(key) + " is not a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0 || v > max) bad(std::string(key) + " out of range");
  return v;
}

// A whole number in [0, max], or null where `nullable`.
nlohmann::json count(const nlohmann::json& o, const char* key, double max, bool nullable = false) {
  const nlohmann::json n = number(o, key, max, nullable);
  if (n.is_null()) return nullptr;
  const double v = n.get<double>();
  if (v != std::floor(v)) bad(std::string(key) + " is not a whole number");
  return static_cast<uint64_t>(v);
}

std::string one_of(const nlohmann::json& o, const char* key, std::initializer_list<const char*> allowed) {
  const auto it = o.find(key);
  if (it == o.end() || !it->is_string()) bad(std::string(key) + " is not a string");
  for (const char* a : allowed)
    if (it->get<std::string>() == a) return a;
  bad(std::string(key) + " is not one of the known values");
}

void only_keys(const nlohmann::json& o, size_t n, const char* what) {
  if (!o.is_object()) bad(std::string(what) + " is not an object");
  if (o.size() != n) bad(std::string(what) + " has unknown or missing fields");
}

// Two printings of one value (%.10g) agree to this much.
bool same(double a, double b) { return std::abs(a - b) <= 1e-9 + 1e-8 * std::max(std::abs(a), std::abs(b)); }

// The fields against each other and the plan: each alone in range proves
// nothing (cpu_s 1e9 in a 0.05 s window).
void check_whole(const nlohmann::json& side, const CpuSidePlan& plan) {
  const double window = side["window_s"].get<double>(), cpu = side["cpu_s"].get<double>();
  if (!same(cpu, side["user_s"].get<double>() + side["system_s"].get<double>()))
    bad("cpu_s is not user_s + system_s");
  if (cpu > window * plan.threads + kCpuTickS)
    bad("cpu_s " + std::to_string(cpu) + " is more than " + std::to_string(plan.threads) + " threads can spend in " +
        std::to_string(window) + " s");
  const nlohmann::json& util = side["utilization"];
  if (window > 0 ? util.is_null() || !same(util.get<double>(), cpu / window) : !util.is_null())
    bad("utilization is not cpu_s / window_s");
  const uint64_t count = side["count"].get<uint64_t>();
  if (count > plan.max_count)
    bad("count " + std::to_string(count) + " is more than the point's " + std::to_string(plan.max_count));
  const nlohmann::json& per = side["per_message_ns"];
  if (count ? per.is_null() || !same(per.get<double>(), cpu * 1e9 / static_cast<double>(count)) : !per.is_null())
    bad("per_message_ns is not cpu_s / count");
  const double on_cpu = side["on_cpu_s"].is_null() ? 0 : side["on_cpu_s"].get<double>();
  const double delay = side["run_delay_s"].is_null() ? 0 : side["run_delay_s"].get<double>();
  if (on_cpu + delay > window * (1 + 1e-8) + 1e-9) bad("on_cpu_s + run_delay_s is more than window_s");
}

}  // namespace

std::string decode_cpu_side(std::string_view frame, const CpuSidePlan& plan) {
  if (frame.size() > kMaxCpuFrame) bad("too long");
  nlohmann::json j = nlohmann::json::parse(frame, nullptr, false);
  if (j.is_discarded()) bad("not JSON");
  only_keys(j, 17, "the side");
  constexpr double kMaxS = 1e9, kMaxCount = 9007199254740992.0;  // 2^53: exact in a double
  nlohmann::json out;
  out["window"] = one_of(j, "window", {kMeasured, kWithWarmup, "point"});
  out["window_s"] = number(j, "window_s", kMaxS);
  out["user_s"] = number(j, "user_s", kMaxS);
  out["system_s"] = number(j, "system_s", kMaxS);
  out["cpu_s"] = number(j, "cpu_s", kMaxS);
  out["utilization"] = number(j, "utilization", 1e6, true);
  out["voluntary_switches"] = count(j, "voluntary_switches", kMaxCount);
  out["involuntary_switches"] = count(j, "involuntary_switches", kMaxCount);
  out["run_delay_s"] = number(j, "run_delay_s", kMaxS, true);
  out["on_cpu_s"] = number(j, "on_cpu_s", kMaxS, true);
  out["sleeps"] = count(j, "sleeps", kMaxCount, true);
  out["read_ns"] = count(j, "read_ns", kMaxCount);
  out["per"] = one_of(j, "per", {"round_trip", "message", "request"});
  out["count"] = count(j, "count", kMaxCount);
  out["per_message_ns"] = number(j, "per_message_ns", 1e15, true);
  out["service_demand_us_per_kb"] = number(j, "service_demand_us_per_kb", 1e15, true);
  check_whole(out, plan);
  const auto cpus = j.find("cpus");
  if (cpus == j.end()) bad("no cpus");
  if (cpus->is_null()) {
    out["cpus"] = nullptr;
  } else {
    if (!cpus->is_array() || cpus->size() > 1024) bad("cpus is not a list of at most 1024");
    out["cpus"] = nlohmann::json::array();
    for (const nlohmann::json& c : *cpus) {
      only_keys(c, 7, "a cpu");
      out["cpus"].push_back({{"cpu", count(c, "cpu", CPU_SETSIZE)}, {"user_s", number(c, "user_s", kMaxS)},
                             {"system_s", number(c, "system_s", kMaxS)}, {"irq_s", number(c, "irq_s", kMaxS)},
                             {"softirq_s", number(c, "softirq_s", kMaxS)}, {"idle_s", number(c, "idle_s", kMaxS)},
                             {"busy", number(c, "busy", 1, true)}});
    }
  }
  return out.dump();
}

}  // namespace fm
