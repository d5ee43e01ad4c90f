// The opening of a session (protocol 9), as iperf3 and OWAMP authenticate:
//   client -> server  hello      "9\n" host id "\n" client nonce (hex) "\n" relay "\n" tool "\n" cpus "\n"
//                                hop "\n" parameters
//   server -> client  challenge  server nonce (32 bytes; empty when the server has no token)
//   client -> server  auth       HMAC-SHA-256(token, "fabmeter-v2 client" | transcript)
//   server -> client  welcome    server proof (hex, or empty) "\n" host id "\n" environment
// transcript = client nonce | server nonce | SHA-256(hello); the server's
// proof also covers SHA-256 of the welcome body. The token never crosses the
// wire; proofs are compared in constant time. With a token, every frame
// after the welcome carries a tag under session_key (frame_auth.hpp). Every decoder here rejects
// malformed input with a one-line fm::Error and nothing else.
// relay is empty, or HOST[:PORT] of another server: the client asks this
// server to run the client role against that one and to carry the run's
// output back (relay.hpp; only to servers its operator allows).
// tool is empty, or a JSON object asking the server to start a peer tool's
// server side (session/tool_server.hpp); never both.
// cpus is empty, or "CLIENT,SERVER", each side empty or N+M+...: the CPUs the
// client asks for its relayed run (CLIENT, only with a relay target) and for
// the server's session (SERVER); each checked against what that serve may
// give (server_session.hpp's session_cpus). Never with a tool request.
// hop is empty, or a JSON object asking this host to forward the session to
// a server (session/forward.hpp's HopRequest; a serve only to servers its
// operator allows); never beside a relay target or a tool request.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace fm {

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 4096;
constexpr size_t kMaxHostId = 128;
constexpr size_t kMaxRelay = 300;  // HOST[:PORT]: a DNS name is at most 253 bytes
constexpr size_t kMaxToolLine = 1024;
constexpr size_t kMaxCpusLine = 1024;  // both sides' lists: a few hundred CPUs
constexpr size_t kMaxHopLine = 1024;

// The shared secret: `token_file` when given, else $FABMETER_TOKEN, else ""
// (no authentication). Refuses a file others may read, and secrets shorter
// than kMinTokenBytes. Trailing whitespace (a newline from echo) is dropped.
std::string load_token(const std::string& token_file);

std::string random_bytes(size_t n);  // RAND_bytes

// The hello's cpus: none asked for either side when both are empty.
struct SessionCpus {
  std::vector<int> client, server;
};

struct Hello {
  unsigned long version = 0;
  std::string host, nonce, relay, tool, hop, params;  // nonce raw; empty fields when the version is not ours
  SessionCpus cpus;
};
std::string encode_hello(const std::string& host, std::string_view nonce, std::string_view relay,
                         std::string_view tool, const SessionCpus& cpus, std::string_view hop,
                         std::string_view params);
// Only the version line is read when the version is not kProtocolVersion.
Hello decode_hello(std::string_view payload);

// Empty (no token on the server) or a nonce of kNonceBytes.
std::string decode_challenge(std::string_view payload);
std::string decode_auth(std::string_view payload);  // exactly kMacBytes

// The server's environment (its engine_env) as the client records it: a JSON
// object of bounded keys and values (decode_env), re-encoded on one line, so
// nothing a server writes there adds a line or a key to the client's output.
constexpr size_t kMaxEnvItems = 512;   // keys and values, all levels together
constexpr size_t kMaxEnvKey = 64;
constexpr int kMaxEnvDepth = 3;        // objects and arrays below the top one (env.fabric.netdev.rps_cpus)
constexpr size_t kMaxEnvString = 1024;
std::string decode_env(std::string_view json);

struct Welcome {
  std::string mac;   // raw, or empty when not authenticated
  std::string body;  // what the server proof covers: host id "\n" environment
  std::string host;
  std::string env;   // decode_env's: safe to splice into a JSON line
};
std::string encode_welcome(std::string_view mac, std::string_view body);
Welcome decode_welcome(std::string_view payload);

std::string client_proof(std::string_view token, std::string_view hello, std::string_view server_nonce);
std::string server_proof(std::string_view token, std::string_view hello, std::string_view server_nonce,
                         std::string_view welcome_body);
bool proof_matches(std::string_view expected, std::string_view got);  // CRYPTO_memcmp
// The key of the session's authenticated frames (frame_auth.hpp), both ends
// alike after the welcome: HKDF-SHA-256 of the token, salted with both
// nonces, its info the hello's and the welcome body's SHA-256.
std::string session_key(std::string_view token, std::string_view hello, std::string_view server_nonce,
                        std::string_view welcome_body);

}  // namespace fm
