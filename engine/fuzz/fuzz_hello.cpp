// The handshake decoders (hello, challenge, auth, welcome) on arbitrary
// bytes; the first byte picks one. Only fm::Error may come out. A hello that
// decodes is also run through the proofs as the server would; a welcome's
// environment that decodes must be one JSON object on one line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/handshake.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t which = data[0] % 4;
  std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (which) {
      case 0: {
        fm::Hello h = fm::decode_hello(in);
        if (h.version != fm::kProtocolVersion) break;
        if (h.nonce.size() != fm::kNonceBytes || h.host.empty() || h.host.size() > fm::kMaxHostId) std::abort();
        const std::string token = "fuzz-token-of-enough-bytes";
        const std::string nonce(fm::kNonceBytes, '\x5a');
        const std::string proof = fm::client_proof(token, in, nonce);
        if (!fm::proof_matches(proof, proof) || fm::proof_matches(proof, fm::client_proof("another-token-xxxxx", in, nonce)))
          std::abort();
        break;
      }
      case 1:
        if (std::string n = fm::decode_challenge(in); !n.empty() && n.size() != fm::kNonceBytes) std::abort();
        break;
      case 2:
        if (fm::decode_auth(in).size() != fm::kMacBytes) std::abort();
        break;
      case 3: {
        fm::Welcome w = fm::decode_welcome(in);
        if (!w.mac.empty() && w.mac.size() != fm::kMacBytes) std::abort();
        if (w.env.size() < 2 || w.env.front() != '{' || w.env.back() != '}') std::abort();
        for (unsigned char c : w.env)
          if (c < 0x20) std::abort();
        break;
      }
    }
  } catch (const fm::Error&) {
  }
  return 0;
}
