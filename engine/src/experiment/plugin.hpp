// The plugin boundary: a transport built as a shared object of its own
// (libfabmeter-<name>.so, in the engine's plugin directory) exports one C
// symbol, kPluginSymbol, returning this descriptor. The engine dlopens the
// plugin at the transport's first use (experiment/registry.cpp) and takes the
// two functions of its table entry from it; the measuring loops live in the
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

namespace fm {

constexpr uint32_t kPluginAbi = 1;
constexpr const char* kPluginSymbol = "fabmeter_transport_plugin";

struct PluginDescriptor {
  uint32_t abi;               // kPluginAbi: first, so any plugin's can be read
  uint32_t descriptor_size;   // sizeof(PluginDescriptor)
  const char* engine_version; // kEngineVersion the plugin was built against
  uint32_t params_size, ctx_size, caps_size, string_size;
  const char* name;           // the transport
  Caps (*caps)(const Params&);
  Status (*points)(const Params&, Ctx&, const std::string&, JsonObj*);
};

// What a plugin built now would say, but for its name and functions.
inline constexpr PluginDescriptor plugin_descriptor(const char* name, Caps (*caps)(const Params&),
                                                    Status (*points)(const Params&, Ctx&, const std::string&, JsonObj*)) {
  return {kPluginAbi, sizeof(PluginDescriptor), kEngineVersion, sizeof(Params), sizeof(Ctx), sizeof(Caps),
          sizeof(std::string), name, caps, points};
}

}  // namespace fm
