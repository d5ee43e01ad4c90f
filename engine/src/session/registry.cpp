// The transport table: the built-in transports' entries (generated
// fabmeter/transports.def) and the plugins' (plugin.hpp), loaded at first use.
//
// Loading rules (docs/security.md): a plugin is only ever looked for in the
// plugin directory (plugin_dir(): an absolute path from the engine's own
// location, or $FABMETER_PLUGIN_DIR, which must be absolute), under the
// fixed name libfabmeter-<transport>.so; never in the current directory, never
// under a name or path a client sent. Before any of its code can run, the file
// must be trusted (fabmeter/trust.hpp) and its tag section match this engine;
// it is then opened RTLD_NOW | RTLD_LOCAL through the descriptor that was
// checked, and its descriptor must match this engine (ABI, version, type
// sizes). Whatever fails makes that transport unavailable with the reason;
// nothing else.
#include "session/registry.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <sys/auxv.h>
#include <sys/wait.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "session/plugin.hpp"
#include "experiment/run_points.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/trust.hpp"

namespace fm {
namespace {

#define FM_TRANSPORT(name, cls, groups)                                    \
  std::string name##_port_facts(const std::string& device, unsigned port); \
  void name##_server_claim(Params& p, const ServerPlaces& at);             \
  double name##_queued_bytes(const Params& p, uint64_t size);              \
  FabricPort name##_fabric_port(const Params& p);                          \
  std::unique_ptr<HopEnd> name##_hop_end(const Params& p, Role role, Ctrl& ctrl, uint64_t max_msg);
#define FM_TRANSPORT_PLUGIN(name, groups, libs)
#define FM_TRANSPORT_ABSENT(name, groups, why)
}  // namespace
#include "fabmeter/transports.def"
namespace {
#undef FM_TRANSPORT
#define FM_TRANSPORT(name, cls, groups) \
  {#name, name##_caps, name##_points, name##_port_facts, name##_server_claim, name##_queued_bytes, name##_fabric_port, name##_hop_end},
constexpr TransportEntry kBuiltIn[] = {
#include "fabmeter/transports.def"
    {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr}};
#undef FM_TRANSPORT
#undef FM_TRANSPORT_PLUGIN
#undef FM_TRANSPORT_ABSENT

// Every other transport: a plugin, or left out of this build (and why).
struct PluginName {
  const char* name;
  const char* absent;  // nullptr: built as a plugin
};
#define FM_TRANSPORT(name, cls, groups)
#define FM_TRANSPORT_PLUGIN(name, groups, libs) {#name, nullptr},
#define FM_TRANSPORT_ABSENT(name, groups, why) {#name, why},
constexpr PluginName kPlugins[] = {
#include "fabmeter/transports.def"
    {nullptr, nullptr}};
#undef FM_TRANSPORT
#undef FM_TRANSPORT_PLUGIN
#undef FM_TRANSPORT_ABSENT

bool is_dir(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A library's constructors may change what the engine set up: libinfinipath's
// (libfabric's PSM provider) pins the process to CPUs while it calibrates and
// resets SIGINT, SIGTERM and others to their defaults. Kept and put back.
class ProcessState {
 public:
  ProcessState() {
    for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], nullptr, &actions_[i]);
    have_cpus_ = sched_getaffinity(0, sizeof cpus_, &cpus_) == 0;
  }
  ~ProcessState() {
    for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &actions_[i], nullptr);
    if (have_cpus_) sched_setaffinity(0, sizeof cpus_, &cpus_);
  }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGALRM,
                                     SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGFPE, SIGUSR1, SIGUSR2};
  struct sigaction actions_[std::size(kSignals)] {};
  cpu_set_t cpus_{};
  bool have_cpus_ = false;
};

// dlerror() names the loaded file (loaded_as) first when it is the plugin
// that fails; a library it needs that is missing is the reason, said without it.
std::string loader_reason(const std::string& loaded_as) {
  const char* e = dlerror();
  std::string why = e ? e : "dlopen failed";
  if (why.rfind(loaded_as + ": ", 0) == 0) why = why.substr(loaded_as.size() + 2);
  return why;
}

// How a plugin's facts (its descriptor, or its tag section) differ from this
// engine's; "" if they do not.
std::string tag_differs(const PluginTag& theirs, const char* name) {
  const PluginTag mine = plugin_tag(name);
  if (theirs.abi != mine.abi)
    return "plugin ABI " + std::to_string(theirs.abi) + ", this engine's is " + std::to_string(mine.abi);
  if (theirs.descriptor_size != mine.descriptor_size ||
      std::strncmp(theirs.engine_version, mine.engine_version, sizeof mine.engine_version) != 0)
    return "built for engine " + std::string(theirs.engine_version, strnlen(theirs.engine_version, 15)) +
           ", this is " + kEngineVersion;
  if (theirs.params_size != mine.params_size || theirs.ctx_size != mine.ctx_size ||
      theirs.caps_size != mine.caps_size || theirs.string_size != mine.string_size)
    return "built against other engine headers (type sizes differ): rebuild it with this engine";
  if (std::strncmp(theirs.name, mine.name, sizeof mine.name) != 0)
    return "it is the plugin of '" + std::string(theirs.name, strnlen(theirs.name, 15)) + "'";
  return "";
}

bool read_at(int fd, void* buf, size_t n, uint64_t off) {
  return pread(fd, buf, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
}

// The plugin's tag section (plugin.hpp), read from the open file (path names
// it) without loading it.
std::string check_tag(int fd, const std::string& path, const char* name) {
  Elf64_Ehdr eh{};
  if (!read_at(fd, &eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return "invalid ELF header";
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
      eh.e_shnum > 4096 || eh.e_shstrndx >= eh.e_shnum)
    return path + ": not an ELF object of this machine's kind";
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  if (!read_at(fd, sections.data(), sections.size() * sizeof(Elf64_Shdr), eh.e_shoff))
    return path + ": truncated ELF section table";
  const Elf64_Shdr& names_at = sections[eh.e_shstrndx];
  if (names_at.sh_size == 0 || names_at.sh_size > (1u << 20)) return path + ": corrupt ELF section names";
  std::string names(names_at.sh_size, '\0');
  if (!read_at(fd, names.data(), names.size(), names_at.sh_offset)) return path + ": truncated ELF section names";
  names.back() = '\0';
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_name >= names.size() || std::strcmp(names.c_str() + sh.sh_name, kTagSection) != 0) continue;
    PluginTag tag{};
    if (sh.sh_size < sizeof tag || !read_at(fd, &tag, sizeof tag, sh.sh_offset) ||
        std::memcmp(tag.magic, "fabmeter-plugin", 16) != 0)
      return path + ": refused: its " + kTagSection + " section is corrupt";
    const std::string why = tag_differs(tag, name);
    return why.empty() ? "" : path + ": refused: " + why;
  }
  return path + ": not a fabmeter plugin (no " + kTagSection + " section)";
}

// The dynamic loader this engine runs under (its PT_INTERP).
std::string interpreter() {
  const auto* phdr = reinterpret_cast<const Elf64_Phdr*>(getauxval(AT_PHDR));
  const size_t n = getauxval(AT_PHNUM);
  if (!phdr) return "";
  uintptr_t bias = 0;
  for (size_t i = 0; i < n; ++i)
    if (phdr[i].p_type == PT_PHDR) bias = reinterpret_cast<uintptr_t>(phdr) - phdr[i].p_vaddr;
  for (size_t i = 0; i < n; ++i)
    if (phdr[i].p_type == PT_INTERP) return reinterpret_cast<const char*>(bias + phdr[i].p_vaddr);
  return "";
}

// Whether every library the plugin needs can be found, as `ld.so --list`
// says (the loader maps them and runs none of their code); "" if so.
std::string check_libraries(const std::string& path) {
  const std::string ld = interpreter();
  if (ld.empty()) return "";  // the load will tell
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) return "";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  std::string arg0 = ld, list = "--list", file = path;
  char* argv[] = {arg0.data(), list.data(), file.data(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, ld.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(err[1]);
  std::string text;
  if (rc == 0) {
    char buf[512];
    for (ssize_t got; (got = read(err[0], buf, sizeof buf)) != 0;) {
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 || text.size() > 4096) break;
      text.append(buf, static_cast<size_t>(got));
    }
  }
  close(err[0]);
  if (rc != 0) return "";
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const std::string prefix = path + ": error while loading shared libraries: ";
  if (text.rfind(prefix, 0) == 0) text = text.substr(prefix.size());
  return text.empty() ? "the dynamic loader refuses it" : text.substr(0, text.find('\n'));
}

struct Loaded {
  bool tried = false;
  TransportEntry entry{};
  std::string reason;  // empty: entry is usable
};

std::string load(const PluginName& plugin, TransportEntry* entry) {
  std::string dir;
  try {
    dir = plugin_dir();
  } catch (const Error& e) {
    return e.what();
  }
  const std::string path = dir + "/libfabmeter-" + plugin.name + ".so";
  if (access(path.c_str(), F_OK) != 0) {
    if (plugin.absent) return std::string("not built (") + plugin.absent + ")";
    return "no plugin " + path;
  }
  TrustedFile file(path);
  if (!file.refused().empty()) return path + ": refused: " + file.refused();
  if (std::string why = check_tag(file.fd(), path, plugin.name); !why.empty()) return why;
  // Loaded through the checked descriptor, which stays open: the loader knows
  // a library by this name, so the number must not name another plugin later.
  const int fd = file.release();
  const std::string loaded_as = "/proc/self/fd/" + std::to_string(fd);
  void* handle;
  {
    ProcessState keep;
    handle = dlopen(loaded_as.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (!handle) {
    const std::string why = loader_reason(loaded_as);
    close(fd);
    return why;
  }
  dlerror();
  void* sym = dlsym(handle, kPluginSymbol);
  if (!sym) {
    dlclose(handle);
    return path + ": not a fabmeter plugin (no symbol " + kPluginSymbol + ")";
  }
  const auto* d = reinterpret_cast<const PluginDescriptor* (*)()>(sym)();
  std::string why;
  if (!d) why = "its descriptor is missing";
  else if (d->abi != kPluginAbi) why = tag_differs(PluginTag{{}, d->abi, 0, 0, 0, 0, 0, {}, {}}, plugin.name);
  else {
    PluginTag t{{}, d->abi, d->descriptor_size, d->params_size, d->ctx_size, d->caps_size, d->string_size, {}, {}};
    if (d->engine_version) std::strncpy(t.engine_version, d->engine_version, sizeof t.engine_version - 1);
    if (d->name) std::strncpy(t.name, d->name, sizeof t.name - 1);
    why = tag_differs(t, plugin.name);
    if (why.empty() &&
        (!d->caps || !d->points || !d->port_facts || !d->server_claim || !d->queued_bytes || !d->fabric_port ||
         !d->hop_end))
      why = "its descriptor has no entry functions";
  }
  // A refused plugin stays mapped: its libraries' constructors have run and
  // may have registered what an unload would leave dangling.
  if (!why.empty()) return path + ": refused: " + why;
  *entry = {plugin.name, d->caps, d->points, d->port_facts, d->server_claim, d->queued_bytes, d->fabric_port, d->hop_end};
  return "";
}

std::map<std::string, Loaded>& load_cache() {
  static std::map<std::string, Loaded> cache;
  return cache;
}

Loaded& loaded_if_tried(const PluginName& plugin) { return load_cache()[plugin.name]; }

Loaded& loaded(const PluginName& plugin) {
  Loaded& l = load_cache()[plugin.name];
  if (!l.tried) {
    l.tried = true;
    l.reason = load(plugin, &l.entry);
  }
  return l;
}

// Whether the plugin could be used, without loading it: the file, its tag,
// its libraries. A plugin already loaded (or refused at load) says that instead.
const std::string& usable_reason(const PluginName& plugin) {
  static std::map<std::string, std::string> probed;
  static std::map<std::string, bool> done;
  if (Loaded& l = loaded_if_tried(plugin); l.tried) return l.reason;
  std::string& why = probed[plugin.name];
  if (done[plugin.name]) return why;
  done[plugin.name] = true;
  std::string dir;
  try {
    dir = plugin_dir();
  } catch (const Error& e) {
    return why = e.what();
  }
  const std::string path = dir + "/libfabmeter-" + plugin.name + ".so";
  if (access(path.c_str(), F_OK) != 0)
    return why = plugin.absent ? std::string("not built (") + plugin.absent + ")" : "no plugin " + path;
  const TrustedFile file(path);
  if (!file.refused().empty()) return why = path + ": refused: " + file.refused();
  if (why = check_tag(file.fd(), path, plugin.name); why.empty()) why = check_libraries(file.path());
  return why;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::string plugin_dir() {
  if (const char* env = std::getenv("FABMETER_PLUGIN_DIR"); env && *env) {
    if (env[0] != '/') usage_error(std::string("FABMETER_PLUGIN_DIR must be an absolute path, got '") + env + "'");
    return env;
  }
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "(cannot read /proc/self/exe: no plugin directory)";
  std::string bindir(exe, static_cast<size_t>(n));
  bindir.erase(bindir.rfind('/'));
  if (is_dir(bindir + "/plugins")) return bindir + "/plugins";
  const std::string installed = bindir + "/../lib/fabmeter";
  char resolved[PATH_MAX];
  return realpath(installed.c_str(), resolved) ? std::string(resolved) : installed;
}

const TransportEntry& entry_for(const std::string& name) {
  for (const TransportEntry* e = kBuiltIn; e->name; ++e)
    if (name == e->name) return *e;
  for (const PluginName* p = kPlugins; p->name; ++p) {
    if (name != p->name) continue;
    Loaded& l = loaded(*p);
    if (!l.reason.empty()) usage_error(name + ": unavailable: " + l.reason);
    return l.entry;
  }
  usage_error("unknown transport '" + name + "' (available: " + joined(usable_transports()) + ")");
}

std::vector<std::string> known_transports() {
  std::vector<std::string> out;
  for (const TransportEntry* e = kBuiltIn; e->name; ++e) out.push_back(e->name);
  for (const PluginName* p = kPlugins; p->name; ++p) out.push_back(p->name);
  return out;
}

std::vector<std::string> usable_transports() {
  std::vector<std::string> out;
  for (const TransportEntry* e = kBuiltIn; e->name; ++e) out.push_back(e->name);
  for (const PluginName* p = kPlugins; p->name; ++p)
    if (usable_reason(*p).empty()) out.push_back(p->name);
  return out;
}

bool is_plugin(const std::string& name) {
  for (const PluginName* p = kPlugins; p->name; ++p)
    if (name == p->name && !p->absent) return true;
  return false;
}

std::optional<std::vector<std::string>> transport_devices(const std::string& name) {
  if (name != "verbs") return std::nullopt;
  std::vector<std::string> devices;
  std::error_code ec;  // no /sys/class/infiniband: no RDMA device
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/infiniband", ec))
    devices.push_back(e.path().filename().string());
  std::sort(devices.begin(), devices.end());
  return devices;
}

std::vector<std::pair<std::string, std::string>> unusable_transports() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const PluginName* p = kPlugins; p->name; ++p)
    if (const std::string& why = usable_reason(*p); !why.empty()) out.emplace_back(p->name, why);
  return out;
}

Caps transport_caps(const Params& p) { return entry_for(p.transport).caps(p); }

std::string available_transports() {
  std::string names;
  for (const auto& n : usable_transports()) names += (names.empty() ? "" : ",") + n;
  return names;
}

}  // namespace fm
