// rawpp_nanomsg: the minimal nanomsg ping-pong (NN_PAIR sockets, nn_send and
// nn_recv), the baseline for fabmeter's nanomsg transport. Usage in rawpp.hpp.
#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <nanomsg/tcp.h>

#include <cerrno>

#include "rawpp.hpp"

static const char* kTool = "rawpp_nanomsg";

static void recv_one(int s, char* buf, const rawpp::Args& a) {
  while (nn_recv(s, buf, a.size, a.busy ? NN_DONTWAIT : 0) < 0)
    if (nn_errno() != EAGAIN && nn_errno() != EINTR) rawpp::die(kTool, std::string("nn_recv: ") + nn_strerror(nn_errno()));
}

static void send_one(int s, const char* buf, const rawpp::Args& a) {
  if (nn_send(s, buf, a.size, 0) < 0) rawpp::die(kTool, std::string("nn_send: ") + nn_strerror(nn_errno()));
}

int main(int argc, char** argv) {
  rawpp::Args a = rawpp::parse(kTool, argc, argv);
  int s = nn_socket(AF_SP, NN_PAIR);
  int nodelay = 1, no_limit = -1;
  nn_setsockopt(s, NN_TCP, NN_TCP_NODELAY, &nodelay, sizeof nodelay);  // as fabmeter's nanomsg transport
  nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &no_limit, sizeof no_limit);  // default 1 MiB
  if ((a.server ? nn_bind(s, a.endpoint) : nn_connect(s, a.endpoint)) < 0)
    rawpp::die(kTool, std::string(a.endpoint) + ": " + nn_strerror(nn_errno()));
  std::vector<char> buf(a.size, 'x');

  rawpp::Timer t = rawpp::pingpong(kTool, a, [&] { send_one(s, buf.data(), a); }, [&] { recv_one(s, buf.data(), a); });
  rawpp::report(kTool, a, t, FM_NANOMSG_VERSION);
  nn_close(s);
  return 0;
}
