// decode_params on what a client's hello carries (the server decodes it
// before anything else): only fm::Error may come out, and whatever decodes
// and validates must survive an encode/decode round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fabmeter/error.hpp"
#include "fabmeter/params.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  fm::Params p;
  try {
    p = fm::decode_params(text);
    fm::validate(p);
  } catch (const fm::Error&) {
    return 0;
  }
  const std::string once = fm::encode_params(p);
  if (fm::encode_params(fm::decode_params(once)) != once) __builtin_trap();
  // What the server computes from the parameters before it allocates.
  (void)fm::sizes_for(p, 8u << 20);
  return 0;
}
