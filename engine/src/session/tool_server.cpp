#include "session/tool_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fabmeter/clock.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/remote_parse.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/signals.hpp"
#include "fabmeter/trust.hpp"

namespace fm {

namespace {

using nlohmann::json;

// Where a tool's binary may come from: system directories only (as sudo's
// secure_path), never the server's or the client's PATH.
constexpr const char* kToolDirs[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"};
constexpr const char* kToolPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr int64_t kReadyTimeoutNs = 20'000'000'000;  // a perftest server opens its device first (slow under TCG)
constexpr int kPollMs = 50;
constexpr int64_t kTermGraceNs = 1'000'000'000;      // SIGTERM, then SIGKILL to the group
constexpr int64_t kCmShowNs = 5'000'000'000;         // one `rdma res show` (a second or more under TCG)
constexpr size_t kKeptOutput = 4096;                  // the tool's last output, for a reason
constexpr size_t kMaxOutputLine = 300;
constexpr uint32_t kByeTimeoutMs = 5000;
constexpr size_t kMaxArgv = 64, kMaxArg = 256;
constexpr uint64_t kMaxInline = 1024;  // perftest -I: far above what a device inlines (it refuses past its own cap)

bool is_perftest(std::string_view t) { return t.rfind("ib_", 0) == 0; }

// What each tool's request may hold beyond "tool" and "lifetime_s".
std::vector<std::string_view> keys_of(std::string_view tool) {
  if (tool == "sockperf") return {"proto"};
  if (!is_perftest(tool)) return {};
  std::vector<std::string_view> k{"iters", "duration_s", "conn", "device", "ib_port", "gid_index", "mtu", "cm"};
  if (tool.rfind("ib_atomic_", 0) != 0) k.push_back("size");
  if (tool.rfind("ib_send_", 0) == 0 || tool.rfind("ib_write_", 0) == 0) k.push_back("inline");
  if (tool.ends_with("_bw")) k.push_back("bidir");
  return k;
}

// perftest's connection types per operation: send all three, write RC and
// UC, read and atomics RC only.
bool conn_allowed(std::string_view tool, std::string_view conn) {
  if (conn == "RC") return true;
  if (tool.rfind("ib_send_", 0) == 0) return conn == "UC" || conn == "UD";
  if (tool.rfind("ib_write_", 0) == 0) return conn == "UC";
  return false;
}

bool flag(const json& v, std::string_view key) {
  if (!v.is_boolean()) usage_error("tool request: " + std::string(key) + " must be true or false");
  return v.get<bool>();
}

uint64_t whole(const json& v, std::string_view key, uint64_t lo, uint64_t hi) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    usage_error("tool request: " + std::string(key) + " must be a whole number");
  const uint64_t x = v.get<uint64_t>();
  if (x < lo || x > hi)
    usage_error("tool request: " + std::string(key) + " " + std::to_string(x) + " is out of range (" +
                std::to_string(lo) + " .. " + std::to_string(hi) + ")");
  return x;
}

// An RDMA device's name, never a path: [A-Za-z0-9_.-], starting alphanumeric.
std::string device_name(const json& v) {
  if (!v.is_string()) usage_error("tool request: device must be a string");
  const std::string s = v.get<std::string>();
  const bool ok = !s.empty() && s.size() <= 64 && std::isalnum(static_cast<unsigned char>(s[0])) &&
                  std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-' || c == '.'; });
  if (!ok) usage_error("tool request: device '" + remote_excerpt(s) + "' is not an RDMA device name");
  return s;
}

std::string one_of(const json& v, std::string_view key, std::initializer_list<std::string_view> allowed) {
  if (v.is_string())
    for (std::string_view a : allowed)
      if (v.get<std::string>() == a) return std::string(a);
  std::string list;
  for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  usage_error("tool request: " + std::string(key) + " must be one of " + list);
}

// A free port on `addr` for both TCP and UDP right now (the tool binds it next).
uint16_t pick_port(const std::string& addr) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  if (getaddrinfo(addr.c_str(), "0", &hints, &res) != 0 || !res) runtime_error("tool: cannot use the address " + addr);
  uint16_t port = 0;
  for (int tries = 0; tries < 50 && port == 0; ++tries) {
    const int t = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (t >= 0 && ::bind(t, res->ai_addr, res->ai_addrlen) == 0 && getsockname(t, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      const uint16_t p = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                        : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      const int u = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (u >= 0 && ::bind(u, reinterpret_cast<sockaddr*>(&ss), len) == 0) port = p;
      if (u >= 0) ::close(u);
    }
    if (t >= 0) ::close(t);
  }
  freeaddrinfo(res);
  if (port == 0) runtime_error("tool: no free port on " + addr);
  return port;
}

// Whether a socket listens (tcp) or is bound (udp) on `port`: the kernel's
// /proc/net tables of this network namespace.
bool bound(const char* proto, uint16_t port) {
  for (const std::string& table : {std::string("/proc/net/") + proto, std::string("/proc/net/") + proto + "6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      // "  sl  local_address rem_address   st ..."; local_address is HEXADDR:HEXPORT
      std::string sl, local, remote, st;
      std::istringstream fields(line);
      if (!(fields >> sl >> local >> remote >> st)) continue;
      const size_t colon = local.rfind(':');
      if (colon == std::string::npos) continue;
      unsigned p = 0;
      const auto [end, ec] = std::from_chars(local.data() + colon + 1, local.data() + local.size(), p, 16);
      if (ec == std::errc() && p == port && (std::string_view(proto) != "tcp" || st == "0A")) return true;
    }
  }
  return false;
}

// A trusted executable of that name in kToolDirs, by its resolved path; "" if none.
std::string trusted_tool(const std::string& name) {
  for (const char* dir : kToolDirs) {
    const TrustedFile file(std::string(dir) + "/" + name);
    struct stat st {};
    if (file.refused().empty() && fstat(file.fd(), &st) == 0 && (st.st_mode & S_IXUSR)) return file.path();
  }
  return "";
}

// The tool's processes: a group of their own, led by the binary we started.
class ToolProcess {
 public:
  ToolProcess(const std::vector<std::string>& args, int cpu) {
    // Everything the child needs is built before fork: the session has a
    // heartbeat thread, so nothing that allocates may run between fork and exec.
    std::vector<char*> argv, envp{const_cast<char*>(kToolPath), const_cast<char*>("LC_ALL=C"), nullptr};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu >= 0) CPU_SET(cpu, &set);
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) sys_error("tool: pipe");
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0) sys_error("tool: /dev/null");
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // its orphans (qperf's per-test child) come to us to be reaped
    const pid_t parent = ::getpid();
    started_ns_ = monotonic_ns();
    pid_ = ::fork();
    if (pid_ < 0) sys_error("tool: fork");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the tool ends with its session
      if (::getppid() != parent) ::_exit(127);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int sig : {SIGPIPE, SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGALRM}) ::signal(sig, SIG_DFL);
      if (cpu >= 0) ::sched_setaffinity(0, sizeof set, &set);
      if (::dup2(null, 0) < 0 || ::dup2(out[1], 1) < 0 || ::dup2(out[1], 2) < 0) ::_exit(127);
      ::close_range(3, ~0U, 0);  // the control socket and the server's listener stay ours
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // whichever of the two runs first
    ::close(null);
    ::close(out[1]);
    out_ = out[0];
  }
  ~ToolProcess() { stop(); }
  ToolProcess(const ToolProcess&) = delete;

  // Reads what the tool wrote (keeping the last kKeptOutput bytes) for up
  // to `ms`; returns whether it is still running.
  bool pump(int ms) {
    if (out_ >= 0) {
      pollfd pfd{out_, POLLIN, 0};
      if (::poll(&pfd, 1, ms) > 0) {
        char chunk[4096];
        const ssize_t n = ::read(out_, chunk, sizeof chunk);
        if (n > 0) {
          output_.append(chunk, static_cast<size_t>(n));
          if (output_.size() > kKeptOutput) output_.erase(0, output_.size() - kKeptOutput);
        } else if (n == 0) {
          ::close(out_);
          out_ = -1;
        }
      }
    } else if (ms > 0) {
      ::poll(nullptr, 0, ms);
    }
    if (!ended_) {
      int status = 0;
      rusage ru{};
      if (::wait4(pid_, &status, WNOHANG, &ru) == pid_) leader_ended(status, ru);
    }
    return !ended_;
  }

  // SIGTERM to the group, SIGKILL after kTermGraceNs, every member reaped.
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    ::kill(-pid_, SIGTERM);
    const int64_t deadline = monotonic_ns() + kTermGraceNs;
    while (pump(10) && monotonic_ns() < deadline) {
    }
    ::kill(-pid_, SIGKILL);
    if (!ended_) {
      int status = 0;
      rusage ru{};
      while (::wait4(pid_, &status, 0, &ru) < 0 && errno == EINTR) {
      }
      leader_ended(status, ru);
    }
    // The leader's orphans were handed to us (the subreaper): reap them too.
    for (int round = 0; round < 200; ++round) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      rusage ru{};
      const pid_t got = ::wait4(-pid_, &status, WNOHANG, &ru);
      if (got < 0 && errno == ECHILD) break;
      if (got > 0) add(ru);
      else ::usleep(10000);
    }
    if (out_ >= 0) ::close(out_);
    out_ = -1;
  }

  pid_t pid() const { return pid_; }
  bool ended() const { return ended_; }
  bool reading() const { return out_ >= 0; }
  const std::string& output() const { return output_; }
  int status() const { return status_; }
  double user_s() const { return user_s_; }
  double system_s() const { return system_s_; }
  double window_s() const { return static_cast<double>((ended_ns_ ? ended_ns_ : monotonic_ns()) - started_ns_) / 1e9; }
  // The last line it printed, one printable line.
  std::string last_line() const {
    std::string_view s(output_);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
    const size_t nl = s.find_last_of('\n');
    std::string line = printable_line(nl == std::string_view::npos ? s : s.substr(nl + 1));
    if (line.size() > kMaxOutputLine) line.resize(kMaxOutputLine);
    return line;
  }

 private:
  void leader_ended(int status, const rusage& ru) {
    ended_ = true;
    ended_ns_ = monotonic_ns();
    status_ = status;
    add(ru);
  }
  void add(const rusage& ru) {
    user_s_ += static_cast<double>(ru.ru_utime.tv_sec) + ru.ru_utime.tv_usec / 1e6;
    system_s_ += static_cast<double>(ru.ru_stime.tv_sec) + ru.ru_stime.tv_usec / 1e6;
  }
  pid_t pid_ = -1;
  int out_ = -1;
  bool ended_ = false, stopped_ = false;
  int status_ = 0;
  int64_t started_ns_ = 0, ended_ns_ = 0;
  double user_s_ = 0, system_s_ = 0;
  std::string output_;
};

// Whether process `pid` holds an rdma_cm listener on `port` (perftest -R opens no
// socket /proc/net would show): the kernel's cm_ids as iproute2's rdma lists them.
bool cm_listening(const std::string& rdma, pid_t pid, uint16_t port) {
  ToolProcess show({rdma, "-j", "res", "show", "cm_id", "src-port", std::to_string(port), "pid", std::to_string(pid)}, -1);
  const int64_t by = monotonic_ns() + kCmShowNs;
  while ((show.pump(kPollMs) || show.reading()) && monotonic_ns() < by) {
  }
  const json ids = json::parse(show.output(), nullptr, false);
  return ids.is_array() && std::any_of(ids.begin(), ids.end(), [&](const json& id) {
           const json addr = id.is_object() ? id.value("src-addr", json()) : json();  // ADDRESS:PORT
           return addr.is_string() && addr.get<std::string>().ends_with(":" + std::to_string(port)) &&
                  id.value("state", json()) == json("LISTEN") && id.value("pid", json()) == json(pid);
         });
}

std::string end_frame(const ToolProcess& tool, const std::string& why) {
  json end{{"end", true}, {"why", why}, {"user_s", tool.user_s()}, {"system_s", tool.system_s()},
           {"window_s", tool.window_s()}, {"output", tool.last_line()}};
  const int st = tool.status();
  end["exit"] = WIFEXITED(st) ? json(WEXITSTATUS(st)) : json(nullptr);
  end["signal"] = WIFSIGNALED(st) ? json(WTERMSIG(st)) : json(nullptr);
  return end.dump();
}

// A number of the server's end frame: finite, non-negative, bounded.
double seconds_of(const json& v, const char* key) {
  if (!v.contains(key) || !v[key].is_number() || !std::isfinite(v[key].get<double>()) || v[key].get<double>() < 0 ||
      v[key].get<double>() > 1e7)
    runtime_error(std::string("tool: the server's end report has no valid ") + key);
  return v[key].get<double>();
}

json remote_json(const std::string& frame, const char* what) {
  json j = json::parse(frame, nullptr, false);
  if (j.is_discarded() || !j.is_object()) runtime_error(std::string("tool: the server's ") + what + " is not a JSON object");
  return j;
}

std::string remote_text(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string()) return "";
  std::string s = printable_line(j[key].get<std::string>());
  if (s.size() > kMaxOutputLine) s.resize(kMaxOutputLine);
  return s;
}

}  // namespace

const std::vector<std::string>& tool_names() {
  static const std::vector<std::string> names = {
      "sockperf",     "qperf",       "iperf3",       "ib_send_lat",   "ib_send_bw", "ib_write_lat",
      "ib_write_bw",  "ib_read_lat", "ib_read_bw",   "ib_atomic_lat", "ib_atomic_bw"};
  return names;
}

ToolRequest decode_tool_request(std::string_view text) {
  if (text.size() > kMaxToolRequest)
    usage_error("tool request of " + std::to_string(text.size()) + " bytes (at most " + std::to_string(kMaxToolRequest) + ")");
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) usage_error("tool request: not a JSON object");
  ToolRequest r;
  if (!j.contains("tool") || !j["tool"].is_string()) usage_error("tool request: no tool named");
  r.tool = j["tool"].get<std::string>();
  const std::vector<std::string>& names = tool_names();
  if (std::find(names.begin(), names.end(), r.tool) == names.end()) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    usage_error("tool request: '" + remote_excerpt(r.tool) + "' is not a tool this server starts (" + list + ")");
  }
  const std::vector<std::string_view> keys = keys_of(r.tool);
  for (const auto& [key, v] : j.items()) {
    if (key == "tool") continue;
    if (key == "lifetime_s") {
      r.lifetime_s = static_cast<uint32_t>(whole(v, key, 1, kMaxToolLifetimeS));
    } else if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      usage_error("tool request: " + r.tool + " takes no argument '" + remote_excerpt(key) + "'");
    } else if (key == "proto") {
      r.proto = one_of(v, key, {"tcp", "udp"});
    } else if (key == "size") {
      r.size = whole(v, key, 1, 8u << 20);
    } else if (key == "iters") {
      r.iters = whole(v, key, 1, 100'000'000);
    } else if (key == "duration_s") {
      r.duration_s = static_cast<uint32_t>(whole(v, key, 1, kMaxToolLifetimeS));
    } else if (key == "conn") {
      r.conn = one_of(v, key, {"RC", "UC", "UD"});
      if (!conn_allowed(r.tool, r.conn)) usage_error("tool request: " + r.tool + " does not run over " + r.conn);
    } else if (key == "device") {
      r.device = device_name(v);
    } else if (key == "ib_port") {
      r.ib_port = static_cast<uint32_t>(whole(v, key, 1, 255));
    } else if (key == "gid_index") {
      r.gid_index = static_cast<int32_t>(whole(v, key, 0, 255));
    } else if (key == "mtu") {
      r.mtu = static_cast<uint32_t>(whole(v, key, 256, 4096));
      if (r.mtu & (r.mtu - 1)) usage_error("tool request: mtu must be 256, 512, 1024, 2048 or 4096");
    } else if (key == "inline") {
      r.inline_size = static_cast<uint32_t>(whole(v, key, 0, kMaxInline));
    } else if (key == "bidir") {
      r.bidir = flag(v, key);
    } else if (key == "cm") {
      r.cm = one_of(v, key, {"raw", "rdma_cm"});
    }
  }
  if (r.cm == "rdma_cm" && r.conn == "UC") usage_error("tool request: rdma_cm cannot connect UC (perftest -R refuses it)");
  if (r.tool == "sockperf" && r.proto.empty()) usage_error("tool request: sockperf needs proto (tcp or udp)");
  if (r.iters && r.duration_s) usage_error("tool request: iters or duration_s, not both (perftest's -n or -D)");
  return r;
}

std::vector<std::string> tool_argv(const ToolRequest& r, const std::string& binary, const std::string& addr,
                                   uint16_t port) {
  const std::string p = std::to_string(port);
  if (r.tool == "sockperf") {
    std::vector<std::string> a{binary, "server", "-i", addr, "-p", p};
    if (r.proto == "tcp") a.push_back("--tcp");
    return a;
  }
  if (r.tool == "qperf") return {binary, "--listen_port", p};  // it serves every test a client asks for
  if (r.tool == "iperf3") return {binary, "-s", "-1", "-B", addr, "-p", p};
  // perftest: the server takes the test's parameters too (they must match the client's).
  std::vector<std::string> a{binary, "-p", p, "-F"};
  if (!r.device.empty()) a.insert(a.end(), {"-d", r.device});
  if (r.ib_port) a.insert(a.end(), {"-i", std::to_string(r.ib_port)});
  if (r.gid_index >= 0) a.insert(a.end(), {"-x", std::to_string(r.gid_index)});
  if (!r.conn.empty()) a.insert(a.end(), {"-c", r.conn});
  if (r.mtu) a.insert(a.end(), {"-m", std::to_string(r.mtu)});
  if (r.inline_size) a.insert(a.end(), {"-I", std::to_string(r.inline_size)});
  if (r.bidir) a.push_back("-b");
  if (r.cm == "rdma_cm") a.push_back("-R");
  if (r.size) a.insert(a.end(), {"-s", std::to_string(r.size)});
  if (r.iters) a.insert(a.end(), {"-n", std::to_string(r.iters)});
  if (r.duration_s) a.insert(a.end(), {"-D", std::to_string(r.duration_s)});
  return a;
}

std::string check_tool(const ToolRequest& r, const ServerOptions& o) {
  if (o.token.empty())
    usage_error("this server starts peer tools only for authenticated clients (serve --token-file F or FABMETER_TOKEN)");
  if (o.max_duration > 0 && r.lifetime_s > o.max_duration)
    usage_error("tool request: lifetime_s " + std::to_string(r.lifetime_s) + " is over the server's --max-duration");
  if (!r.device.empty()) {
    struct stat st {};
    if (::stat(("/sys/class/infiniband/" + r.device).c_str(), &st) != 0)
      usage_error("tool request: no RDMA device '" + r.device + "' on this server");
  }
  if (r.cm == "rdma_cm" && trusted_tool("rdma").empty())
    usage_error("tool request: rdma_cm: this server sees perftest's listener with iproute2's rdma, not installed here");
  // Only a trusted file (fabmeter/trust.hpp), run by its resolved path: that
  // path's directories are trusted too, so nobody else can swap it before exec.
  const std::string binary = trusted_tool(r.tool);
  if (!binary.empty()) return binary;
  usage_error(r.tool + " is not installed on this server (looked in /usr/local/sbin, /usr/local/bin, /usr/sbin, "
              "/usr/bin, /sbin, /bin)");
}

int serve_tool(Ctrl& ctrl, const ToolRequest& r, const std::string& binary, const ServerOptions& o) {
  const std::string addr = ctrl.local_addr();
  const uint16_t port = pick_port(addr);
  const std::vector<std::string> args = tool_argv(r, binary, addr, port);
  const char* proto = r.proto == "udp" ? "udp" : "tcp";
  const std::string rdma = r.cm == "rdma_cm" ? trusted_tool("rdma") : "";  // check_tool found it
  const int64_t deadline = monotonic_ns() + int64_t{r.lifetime_s} * 1'000'000'000;
  ToolProcess tool(args, o.cpu);
  std::string why;
  bool stop_asked = false;
  try {
    RemoteWatch watch(ctrl);
    const int64_t ready_by = std::min(deadline, monotonic_ns() + kReadyTimeoutNs);
    bool ready = false;
    while (!ready && tool.pump(kPollMs) && monotonic_ns() < ready_by && !stop_requested()) {
      watch.check("the tool's client");
      ready = rdma.empty() ? bound(proto, port) : cm_listening(rdma, tool.pid(), port);
    }
    if (ready) {
      ctrl.send(CtrlType::exchange, json{{"ready", true}, {"port", port}, {"argv", args}}.dump());
    } else {
      const std::string reason = tool.ended() ? r.tool + " ended before it listened: " + tool.last_line()
                                              : r.tool + " did not listen on port " + std::to_string(port) + " in time";
      ctrl.send(CtrlType::exchange, json{{"ready", false}, {"reason", reason}}.dump());
      why = "not_ready";
    }
    while (why.empty()) {
      if (!tool.pump(kPollMs)) why = "exited";
      else if (monotonic_ns() >= deadline) why = "lifetime";
      else if (stop_requested()) why = "server_stopping";
      else if (ctrl.peek() == Ctrl::Peek::message) {
        const std::string frame = ctrl.recv(CtrlType::exchange, "the tool's client");
        if (frame != "stop") runtime_error("tool: expected 'stop' from the client, got '" + remote_excerpt(frame) + "'");
        stop_asked = true;
        why = "stopped";
      } else {
        watch.check("the tool's client");
      }
    }
  } catch (...) {
    tool.stop();
    throw;
  }
  tool.stop();
  ctrl.send(CtrlType::exchange, end_frame(tool, why));
  ctrl.set_timeout_ms(kByeTimeoutMs);
  if (!stop_asked) {
    const std::string frame = ctrl.recv(CtrlType::exchange, "the tool's client's stop");
    if (frame != "stop") runtime_error("tool: expected 'stop' from the client, got '" + remote_excerpt(frame) + "'");
  }
  ctrl.recv(CtrlType::bye, "end of the tool's session");
  return 0;
}

int run_tool_client(Ctrl& ctrl) {
  Heartbeat beat(ctrl);  // the server stops the tool when we fall silent
  const json ready = remote_json(ctrl.recv(CtrlType::exchange, "the tool's start"), "tool start");
  const bool listening = ready.contains("ready") && ready["ready"].is_boolean() && ready["ready"].get<bool>();
  JsonObj line;
  line.add("type", "ready").add("ready", listening);
  if (listening) {
    if (!ready.contains("port") || !ready["port"].is_number_unsigned() || ready["port"].get<uint64_t>() == 0 ||
        ready["port"].get<uint64_t>() > 65535)
      runtime_error("tool: the server's start report has no valid port");
    if (!ready.contains("argv") || !ready["argv"].is_array() || ready["argv"].empty() || ready["argv"].size() > kMaxArgv)
      runtime_error("tool: the server's start report has no valid argv");
    json argv = json::array();
    for (const json& a : ready["argv"]) {
      if (!a.is_string() || a.get<std::string>().size() > kMaxArg || printable_line(a.get<std::string>()) != a.get<std::string>())
        runtime_error("tool: the server's start report has an argument that is not one printable line");
      argv.push_back(a);
    }
    line.add("port", ready["port"].get<uint64_t>()).add_raw("server_argv", argv.dump());
  } else {
    line.add("reason", remote_text(ready, "reason"));
  }
  emit_line(line);
  RemoteWatch watch(ctrl);
  std::string end_text;
  bool stdin_open = listening;
  while (stdin_open && !stop_requested()) {
    pollfd pfd{0, POLLIN, 0};
    if (::poll(&pfd, 1, kPollMs) > 0) {
      char junk[512];
      const ssize_t n = ::read(0, junk, sizeof junk);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) stdin_open = false;
    }
    if (ctrl.peek() == Ctrl::Peek::message) {
      end_text = ctrl.recv(CtrlType::exchange, "the tool's end");
      break;
    }
    watch.check("the server's tool");
  }
  ctrl.send(CtrlType::exchange, "stop");
  ctrl.set_timeout_ms(10000);  // the server's stop: SIGTERM, a second's grace, SIGKILL
  if (end_text.empty()) end_text = ctrl.recv(CtrlType::exchange, "the tool's end");
  const json end = remote_json(end_text, "end report");
  JsonObj out;
  out.add("type", "end").add("why", remote_text(end, "why"));
  for (const char* key : {"exit", "signal"}) {
    if (end.contains(key) && end[key].is_number_integer() && end[key].get<int64_t>() >= 0 && end[key].get<int64_t>() <= 255)
      out.add(key, end[key].get<int64_t>());
    else
      out.add_raw(key, "null");
  }
  out.add("user_s", seconds_of(end, "user_s")).add("system_s", seconds_of(end, "system_s"))
      .add("window_s", seconds_of(end, "window_s")).add("output", remote_text(end, "output"));
  emit_line(out);
  ctrl.say_bye();
  return listening ? 0 : 3;
}

}  // namespace fm
