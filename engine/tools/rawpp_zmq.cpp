// rawpp_zmq: the minimal ZeroMQ ping-pong (PAIR sockets, zmq_send and
// zmq_recv), the baseline for fabmeter's zmq transport. Usage in rawpp.hpp.
#include <zmq.h>

#include <cerrno>

#include "rawpp.hpp"

static const char* kTool = "rawpp_zmq";

static void recv_one(void* s, char* buf, const rawpp::Args& a) {
  while (zmq_recv(s, buf, a.size, a.busy ? ZMQ_DONTWAIT : 0) < 0)
    if (errno != EAGAIN && errno != EINTR) rawpp::die(kTool, std::string("zmq_recv: ") + zmq_strerror(errno));
}

static void send_one(void* s, const char* buf, const rawpp::Args& a) {
  if (zmq_send(s, buf, a.size, 0) < 0) rawpp::die(kTool, std::string("zmq_send: ") + zmq_strerror(errno));
}

int main(int argc, char** argv) {
  rawpp::Args a = rawpp::parse(kTool, argc, argv);
  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_PAIR);
  if ((a.server ? zmq_bind(s, a.endpoint) : zmq_connect(s, a.endpoint)) != 0)
    rawpp::die(kTool, std::string(a.endpoint) + ": " + zmq_strerror(errno));
  std::vector<char> buf(a.size, 'x');

  rawpp::Timer t = rawpp::pingpong(kTool, a, [&] { send_one(s, buf.data(), a); }, [&] { recv_one(s, buf.data(), a); });
  int major, minor, patch;
  zmq_version(&major, &minor, &patch);
  rawpp::report(kTool, a, t, std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch));
  zmq_close(s);
  zmq_ctx_term(ctx);
  return 0;
}
