// Authenticated control frames. After the welcome of a session with a token,
// every frame either way (heartbeats included) ends with a tag: HMAC-SHA-256,
// under the session key (handshake.hpp's session_key), of
//   direction (1 byte: 1 client -> server, 2 server -> client)
//   | frame number in that direction (uint64, little-endian, from 0)
//   | type (1 byte) | body length (uint32, little-endian) | body
// The numbers are not sent: each end counts the frames it sent and verified,
// so a frame changed, replayed, reordered, cut short, lost before the next
// one, or sent back from the other direction fails the next verification.
// Tags are compared in constant time (CRYPTO_memcmp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

typedef struct evp_mac_ctx_st EVP_MAC_CTX;  // <openssl/types.h>'s, not all of OpenSSL's headers

namespace fm {

constexpr size_t kTagBytes = 32;

class FrameAuth {
 public:
  // `server`: this end is the server (it sends server -> client). Keys the
  // HMAC once per direction; each tag restarts that state from the key.
  FrameAuth(std::string_view key, bool server);

  // The tag of the next frame out; counts it. One caller at a time (Ctrl's send lock).
  std::string seal(uint8_t type, std::string_view body);
  // Checks the next frame in: "" (and counts it) or the one-line reason.
  // One caller at a time (the thread that reads the channel).
  std::string open(uint8_t type, std::string_view body, std::string_view tag);
  uint64_t verified() const { return received_; }

 private:
  struct FreeCtx {
    void operator()(EVP_MAC_CTX* c) const;
  };
  using Mac = std::unique_ptr<EVP_MAC_CTX, FreeCtx>;
  // Owned; seal() works in sealing_, open() in opening_, so a sender and a reader never share one.
  Mac sealing_, opening_;
  bool server_;
  uint64_t sent_ = 0, received_ = 0;
};

}  // namespace fm
