#include "session/server_dirs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string_view>
#include <vector>

#include "fabmeter/error.hpp"

namespace fm {

namespace {

// The names in the directory open at `fd`, without "." and "..".
std::vector<std::string> entries(int fd) {
  std::vector<std::string> names;
  const int own = ::dup(fd);  // fdopendir takes its descriptor
  DIR* listing = own >= 0 ? fdopendir(own) : nullptr;
  if (!listing) {
    if (own >= 0) ::close(own);
    return names;
  }
  rewinddir(listing);  // the offset is shared with `fd`
  while (dirent* entry = readdir(listing))
    if (std::string_view(entry->d_name) != "." && std::string_view(entry->d_name) != "..")
      names.emplace_back(entry->d_name);
  closedir(listing);
  return names;
}

void remove_tree(int at, const char* name, int depth);

// Removes what is in the directory open at `fd`: files, and subdirectories
// `depth` levels deep. A symbolic link is removed, never followed.
void empty_dir(int fd, int depth) {
  for (const std::string& name : entries(fd))
    if (unlinkat(fd, name.c_str(), 0) != 0 && errno == EISDIR && depth > 0) remove_tree(fd, name.c_str(), depth - 1);
}

// Removes directory `name` (relative to `at`) and what is in it, as empty_dir.
// Absent, or a symbolic link, is left alone.
void remove_tree(int at, const char* name, int depth) {
  const int fd = ::openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  empty_dir(fd, depth);
  ::close(fd);
  unlinkat(at, name, AT_REMOVEDIR);
}

// A server's private directories in $TMPDIR carry its pid, so that a later
// server can tell whether their owner is gone: PREFIX PID-XXXXXX (mkdtemp).
constexpr std::string_view kDataPrefix = "fabmeter-data-", kIpcPrefix = "fabmeter-ipc-";
constexpr size_t kTempSuffix = 7;  // "-XXXXXX"

std::optional<pid_t> pid_of(std::string_view digits) {
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  if (ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) return std::nullopt;
  return pid;
}

// The server pid in the name of a server's private directory; none for any other name.
std::optional<pid_t> temp_dir_owner(std::string_view name) {
  for (std::string_view prefix : {kDataPrefix, kIpcPrefix}) {
    if (!name.starts_with(prefix) || name.size() <= prefix.size() + kTempSuffix) continue;
    const std::string_view suffix = name.substr(name.size() - kTempSuffix);
    if (suffix[0] != '-' || !std::all_of(suffix.begin() + 1, suffix.end(), [](unsigned char c) { return std::isalnum(c) != 0; }))
      return std::nullopt;
    return pid_of(name.substr(prefix.size(), name.size() - prefix.size() - kTempSuffix));
  }
  return std::nullopt;
}

// The session pid in the name of a session's directory: "session-PID" (data) or "PID" (ipc).
std::optional<pid_t> session_dir_pid(std::string_view name) {
  constexpr std::string_view prefix = "session-";
  return pid_of(name.starts_with(prefix) ? name.substr(prefix.size()) : name);
}

// The program name of a process that runs ("" for one that is gone or a
// zombie): "PID (COMM) STATE ..." in /proc/PID/stat.
std::string running_comm(const std::string& proc) {
  std::ifstream f("/proc/" + proc + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open || close + 2 >= stat.size()) return "";
  const char state = stat[close + 2];
  return state == 'Z' || state == 'X' ? "" : stat.substr(open + 1, close - open - 1);
}

// Whether `pid` is a live engine like this one (a server or its session). A
// pid since reused by another program is not; without /proc every pid is, so
// nothing is removed on a guess.
bool engine_alive(pid_t pid) { return running_comm(std::to_string(pid)) == running_comm("self"); }

// Removes what servers killed without cleaning up (SIGKILL) left in `base`:
// private directories of theirs (by name; real directories, of our user)
// whose server is no live engine any more, nor any session named in them.
void remove_stale_dirs(const std::string& base) {
  const int at = ::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (at < 0) return;
  for (const std::string& name : entries(at)) {
    const std::optional<pid_t> owner = temp_dir_owner(name);
    if (!owner || engine_alive(*owner)) continue;
    const int fd = ::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    const std::vector<std::string> sessions = entries(fd);
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && std::none_of(sessions.begin(), sessions.end(), [](const std::string& s) {
          const std::optional<pid_t> pid = session_dir_pid(s);
          return pid && engine_alive(*pid);
        })) {
      empty_dir(fd, 1);
      unlinkat(at, name.c_str(), AT_REMOVEDIR);
    }
    ::close(fd);
  }
  ::close(at);
}

std::string make_temp(std::string pattern, mode_t mode) {
  if (!mkdtemp(pattern.data())) sys_error("cannot create a private directory " + pattern);
  ::chmod(pattern.c_str(), mode);
  return pattern;
}

}  // namespace

void remove_own_dir(const std::string& dir) { remove_tree(AT_FDCWD, dir.c_str(), 0); }

std::string session_data_dir(const ServerOptions& o, pid_t pid) { return o.data_dir + "/session-" + std::to_string(pid); }
std::string session_ipc_dir(const ServerOptions& o, pid_t pid) { return o.ipc_root + "/" + std::to_string(pid); }

void clean_after(const ServerOptions& o, pid_t pid) {
  remove_own_dir(session_data_dir(o, pid));
  remove_own_dir(session_ipc_dir(o, pid));
  const std::string prefix = "fabmeter-" + std::to_string(pid) + "-";
  if (DIR* listing = opendir("/dev/shm")) {
    while (dirent* entry = readdir(listing)) {
      struct stat st {};
      if (std::string_view(entry->d_name).rfind(prefix, 0) == 0 &&
          fstatat(dirfd(listing), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == geteuid())
        shm_unlink(("/" + std::string(entry->d_name)).c_str());
    }
    closedir(listing);
  }
}

ServerDirs::ServerDirs(ServerOptions& o) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp ? tmp : "/tmp";
  remove_stale_dirs(base);
  const std::string mine = std::to_string(getpid()) + "-XXXXXX";
  if (o.data_dir.empty()) {
    own_data_ = make_temp(base + "/" + std::string(kDataPrefix) + mine, 0700);
    o.data_dir = own_data_;
  } else {
    if (::mkdir(o.data_dir.c_str(), 0700) != 0 && errno != EEXIST) sys_error("--data-dir: cannot create " + o.data_dir);
    char* real = realpath(o.data_dir.c_str(), nullptr);
    if (!real) sys_error("--data-dir: " + o.data_dir);
    o.data_dir = real;
    std::free(real);
  }
  // Clients of other users must reach the ipc sockets inside: search, no listing.
  ipc_root_ = make_temp(base + "/" + std::string(kIpcPrefix) + mine, 0711);
  o.ipc_root = ipc_root_;
}

ServerDirs::~ServerDirs() {
  ::rmdir(ipc_root_.c_str());
  if (!own_data_.empty()) ::rmdir(own_data_.c_str());  // only if empty
}

}  // namespace fm
