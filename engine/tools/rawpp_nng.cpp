// rawpp_nng: the minimal nng ping-pong (pair1 sockets, nng_send and
// nng_recv), the baseline for fabmeter's nng transport. Usage in rawpp.hpp.
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "rawpp.hpp"

static const char* kTool = "rawpp_nng";

static void check(int rv, const std::string& what) {
  if (rv != 0) rawpp::die(kTool, what + ": " + nng_strerror(rv));
}

static void recv_one(nng_socket s, char* buf, const rawpp::Args& a) {
  for (;;) {
    size_t len = a.size;
    int rv = nng_recv(s, buf, &len, a.busy ? NNG_FLAG_NONBLOCK : 0);
    if (rv == 0) return;
    if (rv != NNG_EAGAIN) check(rv, "nng_recv");
  }
}

int main(int argc, char** argv) {
  rawpp::Args a = rawpp::parse(kTool, argc, argv);
  nng_socket s;
  check(nng_pair1_open(&s), "nng_pair1_open");
  check(nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 0), "NNG_OPT_RECVMAXSZ");  // no limit (default 1 MiB)
  // The dialer retries in the background until the server listens.
  check(a.server ? nng_listen(s, a.endpoint, nullptr, 0) : nng_dial(s, a.endpoint, nullptr, NNG_FLAG_NONBLOCK),
        a.endpoint);
  std::vector<char> buf(a.size, 'x');

  rawpp::Timer t = rawpp::pingpong(
      kTool, a, [&] { check(nng_send(s, buf.data(), a.size, 0), "nng_send"); }, [&] { recv_one(s, buf.data(), a); });
  rawpp::report(kTool, a, t, nng_version());
  nng_close(s);
  return 0;
}
