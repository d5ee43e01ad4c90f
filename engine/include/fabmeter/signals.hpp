// Ctrl-C, SIGTERM and SIGHUP set one flag that every loop looks at; the handler can
// reach nothing else, so this is the engine's only global state.
#pragma once
#include <csignal>

namespace fm {

extern volatile std::sig_atomic_t g_stop_signal;
inline bool stop_requested() { return g_stop_signal != 0; }
// Installs the handler without SA_RESTART, so blocking calls return EINTR.
void install_stop_handler();

}  // namespace fm
