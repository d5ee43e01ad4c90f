// Where a messaging library's own threads run (--io-cpu). libzmq, nng and
// nanomsg move bytes in threads of their own, which start on the CPU of the
// thread that creates them: beside a busy loop pinned there they get the CPU
// only when the scheduler takes it from the loop, and that wait (up to a
// time slice, milliseconds) becomes the run's tail. Each end learns where
// the other end's busy loop runs before its library starts its threads, picks a
// CPU for them, and tells the other end afterwards where they are (the client
// records both ends in run.json's granted.io_cpus).
#pragma once
#include <dirent.h>
#include <sched.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fabmeter/cpu.hpp"
#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/transport.hpp"

namespace fm::msg {

// The threads of this process now (/proc/self/task), in ascending order.
inline std::vector<pid_t> own_threads() {
  std::vector<pid_t> out;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The threads in `after` that are not in `before` (both sorted).
inline std::vector<pid_t> started_since(const std::vector<pid_t>& before, const std::vector<pid_t>& after) {
  std::vector<pid_t> out;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(out));
  return out;
}

// A library's threads live as long as the library's state: nng's and
// nanomsg's are per process, so a second socket starts none. `known` keeps
// those seen so far (still alive); `started` are the ones this socket started.
inline const std::vector<pid_t>& remember_threads(std::vector<pid_t>& known, const std::vector<pid_t>& started) {
  const std::vector<pid_t> now = own_threads();
  std::erase_if(known, [&](pid_t t) { return !std::binary_search(now.begin(), now.end(), t); });
  for (pid_t t : started)
    if (std::find(known.begin(), known.end(), t) == known.end()) known.push_back(t);
  return known;
}

class IoThreads {
 public:
  // Before the library starts its threads. `asked`: --io-cpu (auto, none or a
  // CPU). Exchanges with the other end where each end's busy loop runs (one
  // control-channel round trip), then picks cpu().
  IoThreads(const std::string& transport, const std::string& asked, const Use& use, Ctrl& ctrl)
      : transport_(transport), asked_(asked), role_(use.role) {
    const int mine = use.poll == Poll::busy ? pinned_cpu() : -1;
    if (mine >= 0) busy_.push_back(mine);
    const std::string remote = ctrl.exchange(nlohmann::json{{"host", host_id()}, {"busy_cpu", mine}}.dump(),
                                           "where the other end's busy loop runs");
    int theirs = -1;
    bool same_host = false;
    try {
      const auto j = nlohmann::json::parse(remote);
      theirs = j.at("busy_cpu").get<int>();
      same_host = j.at("host").get<std::string>() == host_id();
    } catch (const nlohmann::json::exception&) {
      runtime_error(transport_ + ": the other end's busy CPU is not {\"host\": string, \"busy_cpu\": int}");
    }
    if (theirs < -1 || theirs >= CPU_SETSIZE) runtime_error(transport_ + ": the other end sent an impossible busy CPU");
    if (same_host && theirs >= 0 && theirs != mine) busy_.push_back(theirs);

    const std::vector<int>& usable = usable_cpus();
    if (asked_ == "none") return;
    if (asked_ != "auto") {
      cpu_ = std::atoi(asked_.c_str());
      if (std::find(usable.begin(), usable.end(), cpu_) == usable.end())
        usage_error("--io-cpu: CPU " + asked_ + " is not one this " + role_name() + " may run on");
      return;
    }
    if (mine < 0) return;  // no busy loop here to keep clear of
    std::vector<int> spare;
    for (int c : usable)
      if (std::find(busy_.begin(), busy_.end(), c) == busy_.end()) spare.push_back(c);
    // Two ends on one host take opposite ends of the list: each I/O CPU its own where there are two.
    if (!spare.empty()) cpu_ = role_ == Role::client ? spare.front() : spare.back();
  }

  // The CPU for the library's threads; -1: where they start.
  int cpu() const { return cpu_; }

  // The library's threads; `pin`: set their affinity here (else the library
  // did, as libzmq's context option does).
  void adopt(const std::vector<pid_t>& threads, bool pin) {
    threads_ = threads;
    if (!pin || cpu_ < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_, &set);
    for (pid_t t : threads_)
      if (sched_setaffinity(t, sizeof set, &set) != 0 && errno != ESRCH)
        sys_error(transport_ + ": cannot move the library's thread " + std::to_string(t) + " to CPU " +
                  std::to_string(cpu_));
  }

  // At the end of connect, in place of its barrier: each end tells the other
  // where its library's threads are (read back from the kernel).
  void exchange_where(Ctrl& ctrl, const char* what) {
    const nlohmann::json mine = side();
    nlohmann::json remote;
    try {
      remote = nlohmann::json::parse(ctrl.exchange(mine.dump(), what));
    } catch (const nlohmann::json::exception&) {
      runtime_error(transport_ + ": the other end's I/O thread placement is not JSON");
    }
    remote_ = nlohmann::json::object();
    try {
      remote_["cpus"] = remote_cpus(remote.at("cpus"));
      remote_["busy_cpus"] = remote_cpus(remote.at("busy_cpus"));
      remote_["threads"] = remote.at("threads").get<uint32_t>();
      remote_["thread_ids"] = remote.at("thread_ids").get<std::vector<uint32_t>>();
      remote_["shares_busy_cpu"] = remote.at("shares_busy_cpu").get<bool>();
    } catch (const nlohmann::json::exception&) {
      runtime_error(transport_ + ": the other end's I/O thread placement lacks a field or has one of the wrong type");
    }
    if (remote_["thread_ids"].size() > kMaxThreads || remote_["threads"].get<uint32_t>() > kMaxThreads)
      runtime_error(transport_ + ": the other end names more I/O threads than a library starts");
    local_ = mine;
  }

  // run.json's granted.io_cpus: --io-cpu as asked and each end's side.
  void describe(JsonObj& o) const {
    nlohmann::json j{{"asked", asked_}};
    j[role_name()] = local_;
    j[role_ == Role::client ? "server" : "client"] = remote_;
    o.add_raw("io_cpus", j.dump());
  }

 private:
  static constexpr size_t kMaxThreads = 1024;

  const char* role_name() const { return role_ == Role::client ? "client" : "server"; }

  // The calling thread's CPU if it is pinned to one, else -1.
  static int pinned_cpu() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return -1;
    return cpu_list(set).front();
  }

  // A list of CPU numbers from the other end, each one that can exist.
  std::vector<int> remote_cpus(const nlohmann::json& j) const {
    auto v = j.get<std::vector<int>>();
    if (v.size() > CPU_SETSIZE) runtime_error(transport_ + ": the other end names more CPUs than a machine has");
    for (int c : v)
      if (c < 0 || c >= CPU_SETSIZE) runtime_error(transport_ + ": the other end names CPU " + std::to_string(c));
    return v;
  }

  // This end: the CPUs its library's threads may run on (the union of their
  // affinities as the kernel has them), which of them a busy loop of this
  // host uses, and the threads.
  nlohmann::json side() const {
    cpu_set_t all;
    CPU_ZERO(&all);
    std::vector<uint32_t> ids;
    for (pid_t t : threads_) {
      cpu_set_t set;
      CPU_ZERO(&set);
      if (sched_getaffinity(t, sizeof set, &set) != 0) continue;  // ended meanwhile
      CPU_OR(&all, &all, &set);
      ids.push_back(static_cast<uint32_t>(t));
    }
    const std::vector<int> cpus = cpu_list(all);
    bool shares = false;
    for (int c : cpus) shares = shares || std::find(busy_.begin(), busy_.end(), c) != busy_.end();
    return {{"cpus", cpus}, {"busy_cpus", busy_}, {"threads", ids.size()}, {"thread_ids", ids},
            {"shares_busy_cpu", shares}};
  }

  std::string transport_;
  std::string asked_;
  Role role_;
  std::vector<int> busy_;        // CPUs of this host's busy loops: ours, and the other end's on the same host
  int cpu_ = -1;
  std::vector<pid_t> threads_;
  nlohmann::json local_ = nlohmann::json::object();
  nlohmann::json remote_ = nlohmann::json::object();
};

}  // namespace fm::msg
