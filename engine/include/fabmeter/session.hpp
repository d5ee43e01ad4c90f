// One client/server session: handshake, transport set-up, the measured
// points, and the end. main.cpp only parses the command line and calls these.
#pragma once
#include <string>

#include "fabmeter/params.hpp"
#include "fabmeter/transport.hpp"

namespace fm {

// Reported by `options` and in every run's start line.
constexpr const char* kEngineVersion = "0.1.0";

struct ClientOptions {
  std::string server;   // HOST[:PORT]
  std::string out_dir;  // raw samples go here when set
  int cpu = -1;
  std::string token;    // shared secret (load_token); empty: none
};

struct ServerOptions {
  std::string bind = "127.0.0.1";
  uint16_t port = 18515;  // kDefaultPort
  int cpu = -1;
  bool once = false;
  std::string token;    // shared secret (load_token); empty: clients are not authenticated
};

// Return the process exit code: 0 ok, 3 runtime failure, 130 interrupted.
int run_client(const Params& p, const ClientOptions& o);
int run_server(const ServerOptions& o);

// Capabilities of a transport by name, for validation before connecting.
Caps transport_caps(const Params& p);
// The transports built into this binary, comma-separated.
std::string available_transports();

}  // namespace fm
