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

}  // namespace

std::string FrameAuth::tag(bool from_server, uint64_t number, uint8_t type, std::string_view body) const {
  std::string head;
  head += static_cast<char>(from_server ? 2 : 1);
  put_le(head, number, 8);
  head += static_cast<char>(type);
  put_le(head, body.size(), 4);
  char digest_name[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
                               OSSL_PARAM_construct_end()};
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(hmac_algorithm()), EVP_MAC_CTX_free);
  unsigned char out[kTagBytes];
  size_t len = 0;
  if (!ctx ||
      !EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(key_.data()), key_.size(), params) ||
      !EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(head.data()), head.size()) ||
      !EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(body.data()), body.size()) ||
      !EVP_MAC_final(ctx.get(), out, &len, sizeof out) || len != kTagBytes)
    runtime_error("HMAC-SHA-256 failed (libcrypto)");
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string FrameAuth::seal(uint8_t type, std::string_view body) {
  std::string t = tag(server_, sent_, type, body);
  ++sent_;
  return t;
}

std::string FrameAuth::open(uint8_t type, std::string_view body, std::string_view got) {
  const std::string want = tag(!server_, received_, type, body);
  if (got.size() != want.size() || CRYPTO_memcmp(want.data(), got.data(), want.size()) != 0)
    return "control frame " + std::to_string(received_) + " from " + (server_ ? "the client" : "the server") +
           " failed authentication (its tag does not match: changed, replayed, out of order or after a lost frame)";
  ++received_;
  return {};
}

}  // namespace fm
