#include "fabmeter/frame_auth.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <memory>

#include "fabmeter/error.hpp"

namespace fm {
namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>(v >> (8 * i));
}

EVP_MAC* hmac_algorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);  // fetched once: thread-safe, never freed
  if (!mac) runtime_error("HMAC is not available (libcrypto)");
  return mac;
}

// An HMAC-SHA-256 state under `key`.
EVP_MAC_CTX* keyed(std::string_view key) {
  char digest_name[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
                               OSSL_PARAM_construct_end()};
  EVP_MAC_CTX* c = EVP_MAC_CTX_new(hmac_algorithm());
  if (!c || !EVP_MAC_init(c, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params)) {
    EVP_MAC_CTX_free(c);
    runtime_error("HMAC-SHA-256 failed (libcrypto)");
  }
  return c;
}

// The tag of one frame (frame_auth.hpp's layout), computed in `mac`, which
// restarts from its key: without a key EVP_MAC_init reuses the one it has,
// at a fifth of the cost of a state set up anew per frame.
std::string tag(EVP_MAC_CTX* mac, bool from_server, uint64_t number, uint8_t type, std::string_view body) {
  std::string head;
  head += static_cast<char>(from_server ? 2 : 1);
  put_le(head, number, 8);
  head += static_cast<char>(type);
  put_le(head, body.size(), 4);
  unsigned char out[kTagBytes];
  size_t len = 0;
  if (!EVP_MAC_init(mac, nullptr, 0, nullptr) ||
      !EVP_MAC_update(mac, reinterpret_cast<const unsigned char*>(head.data()), head.size()) ||
      !EVP_MAC_update(mac, reinterpret_cast<const unsigned char*>(body.data()), body.size()) ||
      !EVP_MAC_final(mac, out, &len, sizeof out) || len != kTagBytes)
    runtime_error("HMAC-SHA-256 failed (libcrypto)");
  return std::string(reinterpret_cast<char*>(out), len);
}

}  // namespace

void FrameAuth::FreeCtx::operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }

FrameAuth::FrameAuth(std::string_view key, bool server) : sealing_(keyed(key)), opening_(keyed(key)), server_(server) {}

std::string FrameAuth::seal(uint8_t type, std::string_view body) {
  std::string t = tag(sealing_.get(), server_, sent_, type, body);
  ++sent_;
  return t;
}

std::string FrameAuth::open(uint8_t type, std::string_view body, std::string_view got) {
  const std::string want = tag(opening_.get(), !server_, received_, type, body);
  if (got.size() != want.size() || CRYPTO_memcmp(want.data(), got.data(), want.size()) != 0)
    return "control frame " + std::to_string(received_) + " from " + (server_ ? "the client" : "the server") +
           " failed authentication (its tag does not match: changed, replayed, out of order or after a lost frame)";
  ++received_;
  return {};
}

}  // namespace fm
