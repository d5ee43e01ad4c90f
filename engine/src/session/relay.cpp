#include "session/relay.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "experiment/experiment.hpp"
#include "session/server_session.hpp"
#include "session/session_common.hpp"
#include "fabmeter/clock.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/remote_parse.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/signals.hpp"
#include "fabmeter/workload.hpp"

extern char** environ;

namespace fm {

namespace {

constexpr int kPollMs = 100;          // how often the relay looks at the client while the run goes on
constexpr uint32_t kByeTimeoutMs = 5000;
// A sample file travels in chunks of at most this much: all the relay holds of it.
constexpr size_t kSampleChunk = 1 << 20;
// A .npy file's header, beside its samples.
constexpr uint64_t kNpyHeaderBytes = 4096;
// What one point's sample files may bring, all together: a point's whole
// sample storage (the plan's own limit) and a header each.
constexpr uint64_t kMaxPointSampleBytes = static_cast<uint64_t>(kMaxSampleBytes) + kMaxSampleArrays * kNpyHeaderBytes;

// A sample file's name as the run names it (write_arrays: a stem and
// ".NAME.npy"): one plain name, never a path.
bool plain_file_name(std::string_view name) {
  if (name.empty() || name.size() > 255 || name[0] == '.' || !name.ends_with(".npy")) return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '-' || c == '_';
  });
}

// The sample files a point line names ("samples": {"rtt": FILE, ...}); none for any other line.
std::vector<std::string> sample_files(std::string_view line) {
  std::vector<std::string> files;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("samples") || !j["samples"].is_object()) return files;
  for (const auto& [name, file] : j["samples"].items())
    if (file.is_string()) files.push_back(file.get<std::string>());
  return files;
}

// A relayed line is written here as this client's own output, so it must be
// one line (no control character could start another) and, on stdout, one
// JSON object, as the engine prints.
void check_relayed_line(std::string_view line, bool json) {
  for (unsigned char c : line)
    if (c < 0x20 && c != '\t') runtime_error("relay: the run's output holds a control character: '" + remote_excerpt(line) + "'");
  if (json && !nlohmann::json::parse(line, nullptr, false).is_object())
    runtime_error("relay: the run's output is not a JSON object: '" + remote_excerpt(line) + "'");
}
constexpr int64_t kMaxStartLeadNs = 600'000'000'000;  // as run --start-at takes it

std::string self_exe() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) sys_error("relay: cannot find this engine's binary (/proc/self/exe)");
  return std::string(path, static_cast<size_t>(n));
}

// The relay's command line: every option that differs from its default, so
// the run sees exactly the parameters the client validated and sent.
// `target` empty: a series (--series), each run's server and start on its standard input.
// `cpus`: the run's (session_cpus') and those it asks of its server.
std::vector<std::string> run_args(const Params& p, const std::string& target, const SessionCpus& cpus,
                                  int64_t start_at, const std::string& out_dir) {
  std::vector<std::string> args{self_exe(), "run", p.experiment};
  if (target.empty()) args.push_back("--series");
  else args.insert(args.end(), {"--server", target});
  const Params defaults;
  for (const OptSpec& opt : option_table())
    if (opt.get(p) != opt.get(defaults)) args.push_back("--" + std::string(opt.name) + "=" + opt.get(p));
  if (!cpus.client.empty()) args.insert(args.end(), {"--cpu", cpu_list_text(cpus.client)});
  if (!cpus.server.empty()) args.insert(args.end(), {"--server-cpu", cpu_list_text(cpus.server)});
  if (start_at > 0) args.insert(args.end(), {"--start-at", std::to_string(start_at)});
  if (!out_dir.empty()) args.insert(args.end(), {"--out", out_dir});
  return args;
}

// fork + execve with stdout and stderr to pipes; everything the child needs
// is built before fork (the session has a heartbeat thread: nothing that
// allocates may run between fork and exec).
pid_t spawn(const std::vector<std::string>& args, const std::string& token, int in_r, int out_w, int err_w) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    if (std::string_view(*e).rfind("FABMETER_TOKEN=", 0) != 0) env_strings.emplace_back(*e);
  env_strings.push_back("FABMETER_TOKEN=" + token);
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) sys_error("relay: fork");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the run ends with its session
    if ((in_r >= 0 && ::dup2(in_r, 0) < 0) || ::dup2(out_w, 1) < 0 || ::dup2(err_w, 2) < 0) ::_exit(127);
    ::close_range(3, ~0U, 0);           // the control socket and the server's listener stay ours
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// Sends the sample files a point line named, each as "file NAME BYTES" and
// "data <bytes>" chunks, and removes it: the relay keeps none of them.
void send_samples(Ctrl& ctrl, const std::string& dir, std::string_view line) {
  for (const std::string& file : sample_files(line)) {
    if (!plain_file_name(file)) runtime_error("relay: the run named a sample file '" + remote_excerpt(file) + "'");
    const std::string path = dir + "/" + file;
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) sys_error("relay: the run's sample file " + path);
    ctrl.send(CtrlType::exchange, "file " + file + " " + std::to_string(st.st_size));
    std::string chunk;
    for (off_t left = st.st_size; left > 0;) {
      chunk.assign("data ");
      chunk.resize(5 + std::min<size_t>(kSampleChunk, static_cast<size_t>(left)));
      const ssize_t n = ::read(fd, chunk.data() + 5, chunk.size() - 5);
      if (n <= 0) {
        ::close(fd);
        sys_error("relay: reading the run's sample file " + path);
      }
      chunk.resize(5 + static_cast<size_t>(n));
      ctrl.send(CtrlType::exchange, chunk);
      left -= n;
    }
    ::close(fd);
    ::unlink(path.c_str());
  }
}

// Lines from one of the run's pipes, each sent as "<tag><line>"; with
// `samples_dir`, each point's sample files after its line.
struct LinePipe {
  int fd;
  const char* tag;
  std::string samples_dir;
  std::string pending;
  bool open = true;
  bool series = false;  // a series' run ends at its end line: its exit code
  int end_code = -1;

  void read_into(Ctrl& ctrl) {
    char chunk[65536];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) return;
      sys_error("relay: reading the run's output");
    }
    if (n == 0) {
      open = false;
      if (!pending.empty()) send_line(ctrl, pending);
      pending.clear();
      return;
    }
    pending.append(chunk, static_cast<size_t>(n));
    size_t from = 0;
    for (size_t nl; (nl = pending.find('\n', from)) != std::string::npos; from = nl + 1) {
      send_line(ctrl, std::string_view(pending).substr(from, nl - from));
      note_end(std::string_view(pending).substr(from, nl - from));
    }
    pending.erase(0, from);
    if (pending.size() > kMaxRelayLine) runtime_error("relay: the run wrote a line longer than the relay carries");
  }
  void send_line(Ctrl& ctrl, std::string_view line) const {
    if (line.size() > kMaxRelayLine) runtime_error("relay: the run wrote a line longer than the relay carries");
    ctrl.send(CtrlType::exchange, tag + std::string(line));
    if (!samples_dir.empty()) send_samples(ctrl, samples_dir, line);
  }
  void note_end(std::string_view line) {
    if (!series || line.size() > kMaxSeriesEndLine || line.find("\"end\"") == std::string_view::npos) return;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("type") && j["type"] == "end" && j.contains("code") && j["code"].is_number_unsigned() &&
        j["code"].get<uint64_t>() <= 255)
      end_code = static_cast<int>(j["code"].get<uint64_t>());
  }
};

}  // namespace

void check_relay(const std::string& target, const Params& p, const ServerOptions& o) {
  check_onward(target, o.relay_to, o, "--relay-to", "relay");
  // The run is a client on this host: nothing the remote client names may be a file here.
  if (p.stream.sink != "memory")
    usage_error("--sink file:PATH names a file on the relay host: a relayed stream keeps its samples in memory");
  const std::vector<std::string> builtin = Workload::builtin_names();
  if (!p.load.workload.empty() && std::find(builtin.begin(), builtin.end(), p.load.workload) == builtin.end())
    usage_error("--workload: a relayed run takes only the built-in workloads (a file would be read on the relay host)");
  if (p.messaging.endpoint.rfind("ipc://", 0) == 0)
    usage_error("--endpoint ipc:// names a path on the relay host");
}

namespace {

// The client's pings (each answered with this host's clock), then its
// "start NS[ WORD]": the start on this clock and the word after it.
struct RelayStart {
  int64_t at = 0;
  std::string word;
};
RelayStart read_start(Ctrl& ctrl) {
  for (int pings = 0;; ++pings) {
    const std::string frame = ctrl.recv(CtrlType::exchange, "relay start");
    if (frame == "ping" && pings < kRelayPings) {
      ctrl.send(CtrlType::exchange, std::to_string(monotonic_ns()));
      continue;
    }
    if (frame.rfind("start ", 0) != 0)
      runtime_error("relay: expected 'start NS' from the client, got '" + remote_excerpt(frame) + "'");
    std::string_view when = std::string_view(frame).substr(6);
    RelayStart start;
    if (const size_t space = when.find(' '); space != std::string_view::npos) {
      start.word = when.substr(space);
      when = when.substr(0, space);
      if (start.word != kSamplesWord && start.word != kSeriesWord)
        runtime_error("relay: expected 'start NS[ samples| series]', got '" + remote_excerpt(frame) + "'");
    }
    start.at = static_cast<int64_t>(parse_remote_u64(when, "relay start time", monotonic_ns() + kMaxStartLeadNs));
    return start;
  }
}

// The run on this host: its process, its output pipes and, for a series, its input.
struct Child {
  pid_t pid = -1;
  int in = -1;
  LinePipe pipes[2] = {{-1, "out ", {}, {}}, {-1, "err ", {}, {}}};

  void start(const std::vector<std::string>& args, const std::string& token, bool series, const std::string& out_dir) {
    int out[2], err[2], in[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || (series && ::pipe2(in, O_CLOEXEC) != 0))
      sys_error("relay: pipe");
    pid = spawn(args, token, in[0], out[1], err[1]);
    ::close(out[1]);
    ::close(err[1]);
    if (series) ::close(in[0]);
    this->in = in[1];
    pipes[0] = {out[0], "out ", out_dir, {}, true, series};
    pipes[1] = {err[0], "err ", {}, {}};
  }
  // Relays the run's output until it ends: its process exits or, in a
  // series, its end line comes. Returns the run's exit code.
  int relay(Ctrl& ctrl) {
    bool stopping = false;
    RemoteWatch watch(ctrl);
    while ((pipes[0].open || pipes[1].open) && pipes[0].end_code < 0) {
      pollfd pfd[2] = {{pipes[0].open ? pipes[0].fd : -1, POLLIN, 0}, {pipes[1].open ? pipes[1].fd : -1, POLLIN, 0}};
      if (::poll(pfd, 2, kPollMs) < 0 && errno != EINTR) sys_error("relay: poll");
      if (stop_requested() && !stopping) {  // Ctrl-C, SIGTERM or --max-duration: the run ends as ours would
        ::kill(pid, SIGTERM);
        stopping = true;
      }
      watch.check("the relaying client");
      for (int i = 0; i < 2; ++i)
        if (pfd[i].revents) pipes[i].read_into(ctrl);
    }
    if (pipes[0].end_code >= 0) {
      const int code = pipes[0].end_code;
      pipes[0].end_code = -1;
      return code;
    }
    return reap(0);
  }
  // Ends the process (`sig`, 0: it ends by itself) and returns its exit code.
  int reap(int sig) {
    if (in >= 0) ::close(in);
    in = -1;
    if (pid < 0) return 0;
    if (sig) ::kill(pid, sig);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
    for (LinePipe& l : pipes)
      if (l.fd >= 0) ::close(l.fd);
    pipes[0].fd = pipes[1].fd = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

// A series' target goes to the run's standard input as a word of a line:
// only the characters of a host and port, so that nothing a client sends
// there can start another word or line (split_host_port reads past a "]").
void check_series_target(const std::string& target) {
  const bool plain = std::all_of(target.begin(), target.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '%' || c == '_';
  });
  if (!plain || target.empty() || target.size() > kMaxSeriesLine / 2)
    usage_error("relay: a series' target must be HOST[:PORT], got '" + remote_excerpt(target) + "'");
}

// The watchdog again for the next run of a series (serve_one's handler stays).
void rearm_watchdog(const ServerOptions& o) {
  if (o.max_duration <= 0) return;
  const double after_s = o.max_duration + kWatchdogGraceS;
  itimerval it{};
  it.it_value.tv_sec = static_cast<time_t>(after_s);
  it.it_value.tv_usec = static_cast<suseconds_t>((after_s - std::floor(after_s)) * 1e6);
  ::setitimer(ITIMER_REAL, &it, nullptr);
}

// A series: one run process for every run of the session, each run's
// server and start written to its standard input.
int serve_series(Ctrl& ctrl, const Params& p, std::string target, RelayStart start, const SessionCpus& cpus,
                 const ServerOptions& o) {
  Child child;
  try {
    for (uint32_t runs = 1;; ++runs) {
      check_series_target(target);
      if (child.pid < 0) child.start(run_args(p, "", cpus, 0, ""), o.token, true, "");
      const std::string line = target + " " + std::to_string(start.at) + "\n";
      if (::write(child.in, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
        sys_error("relay: writing to the run");  // a line of at most kMaxSeriesLine: one write
      const int code = child.relay(ctrl);
      ctrl.send(CtrlType::exchange, "exit " + std::to_string(code));
      if (stop_requested()) return code;  // Ctrl-C or the watchdog: no next run
      // Between runs the client may wait for its next round: alive (its
      // heartbeats), within the watchdog, which each run sets again.
      ctrl.expect_heartbeats(kSilenceMs);
      ctrl.set_timeout_ms(UINT32_MAX);
      const std::string next = ctrl.recv(CtrlType::exchange, "the series' next run");
      if (next == "done") {
        child.reap(0);
        ctrl.set_timeout_ms(kByeTimeoutMs);
        ctrl.recv(CtrlType::bye, "end of the relayed series");
        return 0;
      }
      if (next.rfind(kRelayNextWord, 0) != 0)
        runtime_error("relay: expected 'next HOST[:PORT]' or 'done', got '" + remote_excerpt(next) + "'");
      if (runs >= kMaxRelayRuns)
        usage_error("this server runs at most " + std::to_string(kMaxRelayRuns) + " runs in one relay session");
      target = next.substr(kRelayNextWord.size());
      check_series_target(target);
      check_relay(target, p, o);
      rearm_watchdog(o);
      ctrl.set_timeout_ms(p.timeout_ms);
      start = read_start(ctrl);
      if (!start.word.empty()) runtime_error("relay: a series' next run takes 'start NS' only");
    }
  } catch (...) {
    child.reap(SIGKILL);
    throw;
  }
}

}  // namespace

int serve_relay(Ctrl& ctrl, const Params& p, const std::string& target, const SessionCpus& cpus,
                const ServerOptions& o) {
  const RelayStart start = read_start(ctrl);
  if (start.word == kSeriesWord) return serve_series(ctrl, p, target, start, cpus, o);
  // The run's samples go to the session's own directory (removed with the
  // session, as the server removes every session's), and on to the client.
  std::string out_dir;
  if (start.word == kSamplesWord) {
    out_dir = o.data_dir + "/session-" + std::to_string(::getpid());
    if (::mkdir(out_dir.c_str(), 0700) != 0) sys_error("relay: cannot create the session's directory " + out_dir);
  }
  Child child;
  int code;
  try {
    child.start(run_args(p, target, cpus, start.at, out_dir), o.token, false, out_dir);
    code = child.relay(ctrl);
  } catch (...) {
    child.reap(SIGKILL);
    throw;
  }
  if (!out_dir.empty()) ::rmdir(out_dir.c_str());
  ctrl.send(CtrlType::exchange, "exit " + std::to_string(code));
  ctrl.set_timeout_ms(kByeTimeoutMs);
  ctrl.recv(CtrlType::bye, "end of the relayed run");
  return code;
}

namespace {

// The client's side of a relayed run's samples: exactly the files the point
// line just relayed named, each once, never over a file already in --out,
// at most kMaxSampleArrays files and kMaxPointSampleBytes in all, written
// under --out (as NAME.part, linked to NAME when whole). A named file that
// has not come by the next line or the run's exit ends the run (exit 3).
class SampleReceiver {
 public:
  explicit SampleReceiver(const std::string& out_dir) : dir_(out_dir) {
    if (!dir_.empty() && ::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) sys_error("cannot create " + dir_);
  }
  void expect(std::string_view line) {
    if (dir_.empty()) return;
    all_received();
    expected_ = sample_files(line);
    if (expected_.size() > kMaxSampleArrays)
      runtime_error("relay: the run's point names " + std::to_string(expected_.size()) + " sample files, more than " +
                    std::to_string(kMaxSampleArrays));
    for (auto it = expected_.begin(); it != expected_.end(); ++it)
      if (std::find(it + 1, expected_.end(), *it) != expected_.end())
        runtime_error("relay: the run's point names the sample file '" + remote_excerpt(*it) + "' twice");
    bytes_left_ = kMaxPointSampleBytes;
  }
  // Every file the last point named came.
  void all_received() const {
    if (!expected_.empty())
      runtime_error("relay: the run's point named the sample file '" + remote_excerpt(expected_.front()) +
                    "', which never came");
  }
  // `header`: "NAME BYTES"; the data frames follow.
  void receive(Ctrl& ctrl, std::string_view header) {
    const size_t space = header.rfind(' ');
    const std::string name(header.substr(0, space == std::string_view::npos ? 0 : space));
    const auto it = std::find(expected_.begin(), expected_.end(), name);
    if (dir_.empty() || it == expected_.end() || !plain_file_name(name))
      runtime_error("relay: a sample file the run's point did not name: '" + remote_excerpt(header) + "'");
    expected_.erase(it);
    uint64_t left = parse_remote_u64(header.substr(space + 1), "relay: sample file size", bytes_left_);
    bytes_left_ -= left;
    const std::string path = dir_ + "/" + name, part = path + ".part";
    const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) sys_error("cannot write " + part);
    try {
      while (left > 0) {
        const std::string frame = ctrl.recv(CtrlType::exchange, "the relayed run's samples");
        if (frame.rfind("data ", 0) != 0 || frame.size() - 5 > left)
          runtime_error("relay: expected " + std::to_string(left) + " more bytes of " + name);
        for (size_t at = 5; at < frame.size();) {
          const ssize_t n = ::write(fd, frame.data() + at, frame.size() - at);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) sys_error("cannot write " + part);
          at += static_cast<size_t>(n);
        }
        left -= frame.size() - 5;
      }
    } catch (...) {
      ::close(fd);
      ::unlink(part.c_str());
      throw;
    }
    // A link, not a rename: it never replaces a file already there.
    const bool whole = ::close(fd) == 0 && ::link(part.c_str(), path.c_str()) == 0;
    const int error = errno;
    ::unlink(part.c_str());
    errno = error;
    if (!whole) sys_error("cannot write " + path);
  }

 private:
  std::string dir_;
  std::vector<std::string> expected_;
  uint64_t bytes_left_ = 0;  // of the point's kMaxPointSampleBytes
};

}  // namespace

int run_relayed(Ctrl& ctrl, const ClientOptions& o, bool series, uint32_t run) {
  // --start-at is on our clock; the relay needs it on its own: the offset
  // from the ping with the shortest round trip (within half of it).
  int64_t start_there = 0;
  if (o.start_at_ns) {
    int64_t best = INT64_MAX, offset = 0;
    for (int i = 0; i < kRelayPings; ++i) {
      const int64_t t0 = monotonic_ns();
      ctrl.send(CtrlType::exchange, "ping");
      const int64_t there = static_cast<int64_t>(
          parse_remote_u64(ctrl.recv(CtrlType::exchange, "the relay's clock"), "relay clock", INT64_MAX));
      const int64_t t1 = monotonic_ns();
      if (t1 - t0 < best) {
        best = t1 - t0;
        offset = there - (t0 + (t1 - t0) / 2);
      }
    }
    start_there = std::max<int64_t>(1, o.start_at_ns + offset);
    // The run's point lines stamp times on the relay's clock (started_mono_ns): this puts them on ours.
    JsonObj relay;
    relay.add("type", "relay").add("via", o.via).add("clock_offset_ns", offset).add("clock_error_ns", (best + 1) / 2);
    if (series) relay.add("run", run);
    emit_line(relay);
  } else if (series) {
    emit_line(JsonObj().add("type", "relay").add("via", o.via).add("run", run));
  }
  const std::string_view word = series ? (run == 1 ? kSeriesWord : "") : o.out_dir.empty() ? "" : kSamplesWord;
  ctrl.send(CtrlType::exchange, "start " + std::to_string(start_there) + std::string(word));
  bool ended = false;  // a series' run printed its end line (with its code)
  SampleReceiver samples(o.out_dir);
  // The run may go on for long between lines: its heartbeats, not a timeout, say the relay is alive.
  ctrl.set_max_frame(kMaxRelayLine + 8);
  ctrl.set_timeout_ms(UINT32_MAX);
  for (;;) {
    std::string frame;
    try {
      frame = ctrl.recv(CtrlType::exchange, "the relayed run's output");
    } catch (const Error&) {
      if (stop_requested()) return 130;  // the relay kills the run when we close
      throw;
    }
    const std::string_view v(frame);
    if (v.rfind("out ", 0) == 0 || v.rfind("err ", 0) == 0) {
      std::FILE* to = v[0] == 'o' ? stdout : stderr;
      check_relayed_line(v.substr(4), to == stdout);
      std::fwrite(v.data() + 4, 1, v.size() - 4, to);
      std::fputc('\n', to);
      std::fflush(to);
      if (to == stdout) samples.expect(v.substr(4));
      if (to == stdout && series && v.find("\"end\"") != std::string_view::npos) {
        const nlohmann::json j = nlohmann::json::parse(v.substr(4), nullptr, false);
        ended = ended || (j.is_object() && j.contains("type") && j["type"] == "end");  // any shape: the other end's line
      }
    } else if (v.rfind("file ", 0) == 0) {
      samples.receive(ctrl, v.substr(5));
    } else if (v.rfind("exit ", 0) == 0) {
      samples.all_received();
      const uint64_t code = parse_remote_u64(v.substr(5), "relayed exit code", 255);
      if (series && !ended)  // the run died before its end line: the series' reader still gets one
        emit_line(JsonObj().add("type", "end").add("status", "failed")
                      .add("message", "the relayed run ended with " + std::to_string(code) + " before its end line")
                      .add("code", code));
      if (!series) ctrl.say_bye();  // a series says bye after its last run
      return static_cast<int>(code);
    } else {
      runtime_error("relay: unexpected frame '" + remote_excerpt(v) + "'");
    }
  }
}

}  // namespace fm
