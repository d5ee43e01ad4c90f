#include "fabmeter/signals.hpp"

#include <signal.h>

#include <initializer_list>

namespace fm {

volatile std::sig_atomic_t g_stop_signal = 0;

static void on_stop(int) { g_stop_signal = 1; }

void install_stop_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  // SIGHUP too: a daemon started from a terminal or by a service manager
  // gets it, and must end as cleanly as on SIGTERM.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

}  // namespace fm
