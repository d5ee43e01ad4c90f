// The control-channel frame reader. First byte: the frame type expected;
// second: log2 of the exchange limit; the rest is what the other end sends. The
// pure header check runs on it first; then Ctrl::recv/peek read the stream
// from a socketpair (EOF after the input) until it errors. Only fm::Error
// may come out; nothing may be allocated beyond the limits.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto expect = static_cast<fm::CtrlType>(1 + data[0] % fm::kCtrlTypeMax);
  const uint32_t max_frame = 1u << (data[1] % 24);
  data += 2;
  size -= 2;

  if (size >= fm::kFrameHeaderBytes) {
    fm::FrameHeader h;
    if (fm::check_frame_header(data, expect, max_frame, 0, &h).empty()) {
      const bool variable = h.type == fm::CtrlType::exchange;
      if (h.len > (variable ? max_frame : fm::kMaxWelcome)) std::abort();  // the check let a giant through
    }
  }

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  // Inputs are small (-max_len): the whole stream fits the socket buffer.
  size_t off = 0;
  while (off < size) {
    ssize_t k = ::write(sv[1], data + off, size - off);
    if (k <= 0) break;
    off += static_cast<size_t>(k);
  }
  ::close(sv[1]);
  fm::Ctrl ctrl(sv[0], 1000);
  ctrl.set_max_frame(max_frame);
  for (int i = 0; i < 64; ++i) {
    try {
      if (ctrl.peek() == fm::Ctrl::Peek::closed) break;
      std::string body = ctrl.recv(expect, "fuzz");
      if (body.size() > fm::kMaxWelcome && body.size() > max_frame) std::abort();
    } catch (const fm::Error&) {
      break;
    }
  }
  return 0;
}
