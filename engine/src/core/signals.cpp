#include "fabmeter/signals.hpp"

#include <signal.h>

namespace fm {

volatile std::sig_atomic_t g_stop_signal = 0;

static void on_stop(int) { g_stop_signal = 1; }

void install_stop_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace fm
