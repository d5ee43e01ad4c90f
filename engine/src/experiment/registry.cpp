// The transport table: the built-in transports' entries (generated
// fabmeter/transports.def) and the plugins' (plugin.hpp), loaded at first use.
//
// Loading rules (docs/security.md): a plugin is only ever looked for in the
// plugin directory (plugin_dir(): an absolute path from the engine's own
// location, or $FABMETER_PLUGIN_DIR, which must be absolute), under the
// fixed name libfabmeter-<transport>.so; never in the current directory, never
// under a name or path a client sent. It is opened RTLD_NOW | RTLD_LOCAL, and
// its descriptor must match this engine (ABI, version, type sizes). Whatever
// fails makes that transport unavailable with the reason; nothing else.
#include "experiment/registry.hpp"

#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "experiment/plugin.hpp"
#include "experiment/run_points.hpp"
#include "fabmeter/error.hpp"

namespace fm {
namespace {

#define FM_TRANSPORT(name, cls, groups) {#name, name##_caps, name##_points},
#define FM_TRANSPORT_PLUGIN(name, groups, libs)
#define FM_TRANSPORT_ABSENT(name, groups, why)
constexpr TransportEntry kBuiltIn[] = {
#include "fabmeter/transports.def"
    {nullptr, nullptr, nullptr}};
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

// dlerror() names the plugin's path first when it is the plugin that fails;
// a library it needs that is missing is the reason, said without the path.
std::string loader_reason(const std::string& path) {
  const char* e = dlerror();
  std::string why = e ? e : "dlopen failed";
  if (why.rfind(path + ": ", 0) == 0) why = why.substr(path.size() + 2);
  return why;
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
  void* handle;
  {
    ProcessState keep;
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (!handle) return loader_reason(path);
  dlerror();
  void* sym = dlsym(handle, kPluginSymbol);
  if (!sym) {
    dlclose(handle);
    return path + ": not a fabmeter plugin (no symbol " + kPluginSymbol + ")";
  }
  const auto* d = reinterpret_cast<const PluginDescriptor* (*)()>(sym)();
  const PluginDescriptor mine = plugin_descriptor(plugin.name, nullptr, nullptr);
  std::string why;
  if (!d) why = "its descriptor is missing";
  else if (d->abi != kPluginAbi)
    why = "plugin ABI " + std::to_string(d->abi) + ", this engine's is " + std::to_string(kPluginAbi);
  else if (d->descriptor_size != mine.descriptor_size || !d->engine_version ||
           std::strcmp(d->engine_version, kEngineVersion) != 0)
    why = std::string("built for engine ") + (d->engine_version ? d->engine_version : "?") + ", this is " +
          kEngineVersion;
  else if (d->params_size != mine.params_size || d->ctx_size != mine.ctx_size || d->caps_size != mine.caps_size ||
           d->string_size != mine.string_size)
    why = "built against other engine headers (type sizes differ): rebuild it with this engine";
  else if (!d->name || std::strcmp(d->name, plugin.name) != 0)
    why = std::string("it is the plugin of '") + (d->name ? d->name : "?") + "'";
  else if (!d->caps || !d->points)
    why = "its descriptor has no entry functions";
  if (!why.empty()) {
    // Never dlclose a library whose code may have registered anything: only
    // the refused plugin's own handle goes, its constructors have run anyway.
    return path + ": refused: " + why;
  }
  *entry = {plugin.name, d->caps, d->points};
  return "";
}

Loaded& loaded(const PluginName& plugin) {
  static std::map<std::string, Loaded> cache;
  Loaded& l = cache[plugin.name];
  if (!l.tried) {
    l.tried = true;
    l.reason = load(plugin, &l.entry);
  }
  return l;
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
    if (loaded(*p).reason.empty()) out.push_back(p->name);
  return out;
}

bool is_plugin(const std::string& name) {
  for (const PluginName* p = kPlugins; p->name; ++p)
    if (name == p->name && !p->absent) return true;
  return false;
}

std::vector<std::pair<std::string, std::string>> unusable_transports() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const PluginName* p = kPlugins; p->name; ++p)
    if (const Loaded& l = loaded(*p); !l.reason.empty()) out.emplace_back(p->name, l.reason);
  return out;
}

Caps transport_caps(const Params& p) { return entry_for(p.transport).caps(p); }

std::string available_transports() {
  std::string names;
  for (const auto& n : usable_transports()) names += (names.empty() ? "" : ",") + n;
  return names;
}

}  // namespace fm
