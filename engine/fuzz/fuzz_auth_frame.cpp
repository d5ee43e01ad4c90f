// The authenticated frame reader (frame_auth.hpp): header, tag and frame
// number checks on a client's channel after the welcome. First byte: the
// frame type expected; second: log2 of the exchange limit; third: how many
// leading frames the server's end seals (each: a type byte, a length byte,
// that many body bytes), so that the fuzzer reaches past the first tag; the
// rest goes as it is. The pure header check runs on the raw bytes first.
// Only fm::Error may come out; nothing may be allocated beyond the limits.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/frame_auth.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const auto expect = static_cast<fm::CtrlType>(1 + data[0] % fm::kCtrlTypeMax);
  const uint32_t max_frame = 1u << (data[1] % 24);
  unsigned sealed = data[2] % 4;
  data += 3;
  size -= 3;

  if (size >= fm::kFrameHeaderBytes) {
    fm::FrameHeader h;
    if (fm::check_frame_header(data, expect, max_frame, fm::kTagBytes, &h).empty() &&
        h.len > std::max(max_frame, fm::kMaxWelcome))
      std::abort();  // the check let a giant through
  }

  const std::string key(32, 'k');
  fm::FrameAuth server(key, true);
  std::string stream;
  size_t off = 0;
  for (; sealed > 0 && off + 2 <= size; --sealed) {
    const uint8_t type = data[off];
    const size_t n = std::min<size_t>(data[off + 1], size - off - 2);
    const std::string body(reinterpret_cast<const char*>(data) + off + 2, n);
    const std::string tag = server.seal(type, body);
    const uint32_t len = static_cast<uint32_t>(n + tag.size());
    stream += {char(len), char(len >> 8), char(len >> 16), char(len >> 24), char(type)};
    stream += body + tag;
    off += 2 + n;
  }
  stream.append(reinterpret_cast<const char*>(data) + off, size - off);

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  // Inputs are small (-max_len): the whole stream fits the socket buffer.
  for (size_t at = 0; at < stream.size();) {
    const ssize_t k = ::write(sv[1], stream.data() + at, stream.size() - at);
    if (k <= 0) break;
    at += static_cast<size_t>(k);
  }
  ::close(sv[1]);
  fm::Ctrl ctrl(sv[0], 1000);
  ctrl.set_max_frame(max_frame);
  ctrl.authenticate(key, false);
  for (int i = 0; i < 64; ++i) {
    try {
      if (ctrl.peek() == fm::Ctrl::Peek::closed) break;
      const std::string body = ctrl.recv(expect, "fuzz");
      if (body.size() > std::max(max_frame, fm::kMaxWelcome)) std::abort();
    } catch (const fm::Error&) {
      break;
    }
  }
  return 0;
}
