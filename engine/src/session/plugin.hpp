// The plugin boundary: a transport built as a shared object of its own
// (libfabmeter-<name>.so, in the engine's plugin directory) exports one C
// symbol, kPluginSymbol, returning this descriptor. The engine dlopens the
// plugin at the transport's first use (session/registry.cpp) and takes the
// functions of its table entry from it; the measuring loops live in the
// plugin (its generated run_points_<name>.cpp), instantiated for its class,
// so the data path makes no indirect call per message.
//
// The functions take the engine's C++ types (Params, Ctx, JsonObj) and call
// back into the engine's own code, which the engine exports: a plugin works
// only with the engine it was built with. kPluginAbi is bumped whenever the
// descriptor's layout or the entry functions' signatures change; the engine
// version and the sizes of the types crossing the boundary are checked as
// well, and a plugin that differs in any is refused with the reason.
#pragma once
#include <cstdint>
#include <string>

#include "experiment/common.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/session.hpp"
#include "fabmeter/transport.hpp"
#include <memory>

namespace fm {

class HopEnd;  // experiment/forward.hpp

constexpr uint32_t kPluginAbi = 4;
constexpr const char* kPluginSymbol = "fabmeter_transport_plugin";

struct PluginDescriptor {
  uint32_t abi;               // kPluginAbi: first, so any plugin's can be read
  uint32_t descriptor_size;   // sizeof(PluginDescriptor)
  const char* engine_version; // kEngineVersion the plugin was built against
  uint32_t params_size, ctx_size, caps_size, string_size;
  const char* name;           // the transport
  Caps (*caps)(const Params&);
  Status (*points)(const Params&, Ctx&, const std::string&, JsonObj*);
  std::string (*port_facts)(const std::string&, unsigned);
  void (*server_claim)(Params&, const ServerPlaces&);
  double (*queued_bytes)(const Params&, uint64_t);
  FabricPort (*fabric_port)(const Params&);
  std::unique_ptr<HopEnd> (*hop_end)(const Params&, Role, Ctrl&, uint64_t);
};

// The same facts as plain data in a section of their own (kTagSection), so
// `options` and `transports` can check a plugin without loading it (loading
// runs its libraries' constructors: libfabric's PSM providers take 0.2 s).
constexpr const char* kTagSection = ".fabmeter_plugin";
struct PluginTag {
  char magic[16];             // "fabmeter-plugin"
  uint32_t abi, descriptor_size, params_size, ctx_size, caps_size, string_size;
  char engine_version[16];
  char name[16];
};

constexpr PluginTag plugin_tag(const char* name) {
  PluginTag t{"fabmeter-plugin", kPluginAbi, sizeof(PluginDescriptor), sizeof(Params), sizeof(Ctx), sizeof(Caps),
              sizeof(std::string), {}, {}};
  for (size_t i = 0; i + 1 < sizeof t.engine_version && kEngineVersion[i]; ++i) t.engine_version[i] = kEngineVersion[i];
  for (size_t i = 0; i + 1 < sizeof t.name && name[i]; ++i) t.name[i] = name[i];
  return t;
}

// What a plugin built now would say, but for its name and functions.
inline constexpr PluginDescriptor plugin_descriptor(const char* name, Caps (*caps)(const Params&),
                                                    Status (*points)(const Params&, Ctx&, const std::string&, JsonObj*),
                                                    std::string (*port_facts)(const std::string&, unsigned),
                                                    void (*server_claim)(Params&, const ServerPlaces&),
                                                    double (*queued_bytes)(const Params&, uint64_t),
                                                    FabricPort (*fabric_port)(const Params&),
                                                    std::unique_ptr<HopEnd> (*hop_end)(const Params&, Role, Ctrl&, uint64_t)) {
  return {kPluginAbi, sizeof(PluginDescriptor), kEngineVersion, sizeof(Params), sizeof(Ctx), sizeof(Caps),
          sizeof(std::string), name, caps, points, port_facts, server_claim, queued_bytes, fabric_port, hop_end};
}

}  // namespace fm
