// A client's tool request (the hello's tool line) on arbitrary bytes: only
// fm::Error may come out, and whatever is accepted must name a tool of the
// table and build an argv whose every argument is one of the table's words,
// a number or the server's own address and port.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "session/tool_server.hpp"
#include "fabmeter/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    const fm::ToolRequest r = fm::decode_tool_request(in);
    const auto& names = fm::tool_names();
    if (std::find(names.begin(), names.end(), r.tool) == names.end()) std::abort();
    if (r.lifetime_s < 1 || r.lifetime_s > fm::kMaxToolLifetimeS) std::abort();
    for (const std::string& a : fm::tool_argv(r, "/usr/bin/" + r.tool, "10.0.0.1", 4242)) {
      if (a.empty() || a.size() > 64) std::abort();
      if (a[0] == '/' && a != "/usr/bin/" + r.tool) std::abort();  // no path but the binary's
      for (unsigned char c : a)
        if (!std::isalnum(c) && c != '-' && c != '_' && c != '.' && c != '/') std::abort();
    }
  } catch (const fm::Error&) {
  }
  return 0;
}
