// The transport table (registry.cpp): the transports built into the engine
// (shm, tcp, udp: they need nothing beyond libc) and those that are plugins,
// each a shared object loaded at its first use (plugin.hpp).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "experiment/common.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/transport.hpp"

namespace fm {

class HopEnd;  // experiment/forward.hpp

struct TransportEntry {
  const char* name;
  Caps (*caps)(const Params&);
  Status (*points)(const Params&, Ctx&, const std::string&, JsonObj*);
  // A JSON object of what the transport's library says of an RDMA device's
  // port (fabric.hpp's FabricWhere::port_facts), "" if it has nothing to say.
  std::string (*port_facts)(const std::string& device, unsigned port);
  // The session's hooks (transport.hpp; no-ops for a transport without
  // them): the client's options of the transport as the server rewrites
  // them before anything opens them, what the transport holds per
  // connection beyond the payload buffers for messages of `size` bytes, and
  // the RDMA port its options name (the fabric facts).
  void (*server_claim)(Params& p, const ServerPlaces& at);
  double (*queued_bytes)(const Params& p, uint64_t size);
  FabricPort (*fabric_port)(const Params& p);
  // One end of a forwarding hop, connected over `ctrl` in `role`
  // (experiment/forward.hpp: an end only the session's hop code uses).
  std::unique_ptr<HopEnd> (*hop_end)(const Params& p, Role role, Ctrl& ctrl, uint64_t max_msg);
};

// The entry of a transport, its plugin loaded if it is one; a usage error
// (exit 2) naming the reason if there is no such transport or its plugin
// cannot be used ("nng: unavailable: libnng.so.1: cannot open shared object file ...").
const TransportEntry& entry_for(const std::string& name);

// Every transport this engine knows of, in the registry's order.
std::vector<std::string> known_transports();
// Those that can run here ... (a plugin not loaded yet is checked without
// loading it: its file, its tag section, and `ld.so --list` for its
// libraries; loading runs the libraries' constructors, 0.2 s for libfabric's)
std::vector<std::string> usable_transports();
// ... and the others, each with its reason. A plugin that passes the check
// may still be refused when loaded (an undefined symbol): the run then
// exits 2 with that reason.
std::vector<std::pair<std::string, std::string>> unusable_transports();

// True if the transport is built as a plugin (loaded or not).
bool is_plugin(const std::string& name);

// For a transport that runs only over an RDMA device (verbs): the kernel's
// RDMA devices here (/sys/class/infiniband, as libibverbs lists them), empty
// when there are none, so its library can be present with nothing to run on.
// nullopt for the others.
std::optional<std::vector<std::string>> transport_devices(const std::string& name);

// Where plugins are looked for: $FABMETER_PLUGIN_DIR (an absolute path),
// else <bindir>/plugins (the build tree), else <bindir>/../lib/fabmeter (an
// installed tree), bindir being the engine's own directory (/proc/self/exe).
std::string plugin_dir();

}  // namespace fm
