#include "fabmeter/handshake.hpp"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/error.hpp"

namespace fm {
namespace {

[[noreturn]] void malformed(const char* what, const std::string& why) {
  runtime_error(std::string("malformed ") + what + " from the other end: " + why);
}

std::string hex(std::string_view raw) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Lower-case hex of exactly `bytes` bytes, or malformed.
std::string unhex(std::string_view s, size_t bytes, const char* what) {
  if (s.size() != 2 * bytes) malformed(what, "expected " + std::to_string(2 * bytes) + " hex digits");
  std::string out(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) {
    int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) malformed(what, "not lower-case hex");
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

// Splits off the text up to the next '\n'; malformed when there is none.
std::string_view take_line(std::string_view& s, const char* what, const char* field) {
  auto nl = s.find('\n');
  if (nl == std::string_view::npos) malformed(what, std::string("no ") + field + " line");
  std::string_view line = s.substr(0, nl);
  s.remove_prefix(nl + 1);
  return line;
}

std::string check_host(std::string_view h, const char* what) {
  if (h.empty() || h.size() > kMaxHostId) malformed(what, "host id of " + std::to_string(h.size()) + " bytes");
  for (unsigned char c : h)
    if (c <= 0x20 || c >= 0x7f) malformed(what, "host id is not printable");
  return std::string(h);
}

std::string sha256(std::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return std::string(reinterpret_cast<char*>(md), sizeof md);
}

std::string hmac(std::string_view key, const std::string& msg) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
            msg.size(), md, &len) || len != kMacBytes)
    runtime_error("HMAC-SHA-256 failed (libcrypto)");
  return std::string(reinterpret_cast<char*>(md), len);
}

// Fixed-length fields after a distinct label: no two transcripts encode alike.
std::string transcript(const char* label, std::string_view hello, std::string_view server_nonce) {
  std::string t(label);
  t += '\0';
  t += decode_hello(hello).nonce;
  t += server_nonce;
  t += sha256(hello);
  return t;
}

std::string check_token(std::string token, const std::string& source) {
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' || token.back() == '\t'))
    token.pop_back();
  if (token.size() < kMinTokenBytes)
    usage_error(source + ": the token is " + std::to_string(token.size()) + " bytes, at least " +
                std::to_string(kMinTokenBytes) + " are needed (e.g. openssl rand -hex 32)");
  if (token.size() > kMaxTokenBytes)
    usage_error(source + ": the token is longer than " + std::to_string(kMaxTokenBytes) + " bytes");
  return token;
}

}  // namespace

std::string load_token(const std::string& token_file) {
  if (token_file.empty()) {
    const char* env = std::getenv("FABMETER_TOKEN");
    return env && *env ? check_token(env, "FABMETER_TOKEN") : std::string();
  }
  const std::string source = "--token-file " + token_file;
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer; this way
  // anything but a regular file is refused at once, by the check below.
  int fd = ::open(token_file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) usage_error("cannot open " + source + ": " + std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    usage_error(source + ": not a regular file");
  }
  if (st.st_mode & S_IROTH) {
    ::close(fd);
    usage_error(source + ": readable by every user; chmod o-r (or 600) it");
  }
  std::string token(kMaxTokenBytes + 2, '\0');
  size_t got = 0;
  while (got < token.size()) {
    ssize_t k = ::read(fd, token.data() + got, token.size() - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      ::close(fd);
      sys_error("cannot read " + source);
    }
    if (k == 0) break;
    got += static_cast<size_t>(k);
  }
  ::close(fd);
  token.resize(got);
  return check_token(std::move(token), source);
}

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1)
    runtime_error("no random bytes for a nonce (libcrypto RAND_bytes failed)");
  return out;
}

std::string encode_hello(const std::string& host, std::string_view nonce, std::string_view relay,
                         std::string_view tool, const SessionCpus& cpus, std::string_view hop,
                         std::string_view params) {
  const std::string cpus_line =
      cpus.client.empty() && cpus.server.empty() ? "" : cpu_list_text(cpus.client) + "," + cpu_list_text(cpus.server);
  return std::to_string(kProtocolVersion) + "\n" + host + "\n" + hex(nonce) + "\n" + std::string(relay) + "\n" +
         std::string(tool) + "\n" + cpus_line + "\n" + std::string(hop) + "\n" + std::string(params);
}

Hello decode_hello(std::string_view s) {
  Hello h;
  std::string_view v = take_line(s, "hello", "version");
  if (v.empty() || v.size() > 9) malformed("hello", "bad version");
  for (char c : v) {
    if (c < '0' || c > '9') malformed("hello", "bad version");
    h.version = h.version * 10 + static_cast<unsigned long>(c - '0');
  }
  if (h.version != kProtocolVersion) return h;
  h.host = check_host(take_line(s, "hello", "host id"), "hello");
  h.nonce = unhex(take_line(s, "hello", "nonce"), kNonceBytes, "hello");
  const std::string_view relay = take_line(s, "hello", "relay");
  if (relay.size() > kMaxRelay) malformed("hello", "relay target of " + std::to_string(relay.size()) + " bytes");
  for (unsigned char c : relay)
    if (c <= 0x20 || c >= 0x7f) malformed("hello", "relay target is not printable");
  h.relay = std::string(relay);
  // Read as JSON (decode_tool_request) only after the client proved itself.
  const std::string_view tool = take_line(s, "hello", "tool");
  if (tool.size() > kMaxToolLine) malformed("hello", "tool request of " + std::to_string(tool.size()) + " bytes");
  if (!tool.empty() && !relay.empty()) malformed("hello", "both a relay target and a tool request");
  h.tool = std::string(tool);
  const std::string_view cpus = take_line(s, "hello", "cpus");
  if (cpus.size() > kMaxCpusLine) malformed("hello", "cpus of " + std::to_string(cpus.size()) + " bytes");
  if (!cpus.empty()) {
    const size_t comma = cpus.find(',');
    if (comma == std::string_view::npos) malformed("hello", "cpus without a comma");
    const auto side = [](std::string_view list) {
      const std::optional<std::vector<int>> parsed =
          list.empty() ? std::optional<std::vector<int>>(std::vector<int>{}) : parse_cpu_list(list);
      if (!parsed) malformed("hello", "cpus are not two lists N+M+...");
      return *parsed;
    };
    h.cpus.client = side(cpus.substr(0, comma));
    h.cpus.server = side(cpus.substr(comma + 1));
    if (!tool.empty()) malformed("hello", "cpus beside a tool request");
    if (!h.cpus.client.empty() && relay.empty()) malformed("hello", "cpus for a relayed run without a relay target");
  }
  // Read as JSON (decode_hop_request) only after the client proved itself.
  const std::string_view hop = take_line(s, "hello", "hop");
  if (hop.size() > kMaxHopLine) malformed("hello", "hop request of " + std::to_string(hop.size()) + " bytes");
  if (!hop.empty() && !(relay.empty() && tool.empty())) malformed("hello", "a hop request beside a relay target or a tool request");
  h.hop = std::string(hop);
  h.params = std::string(s);
  return h;
}

std::string decode_challenge(std::string_view payload) {
  if (!payload.empty() && payload.size() != kNonceBytes)
    malformed("challenge", "a nonce of " + std::to_string(payload.size()) + " bytes");
  return std::string(payload);
}

std::string decode_auth(std::string_view payload) {
  if (payload.size() != kMacBytes) malformed("authentication", "a proof of " + std::to_string(payload.size()) + " bytes");
  return std::string(payload);
}

std::string encode_welcome(std::string_view mac, std::string_view body) {
  return hex(mac) + "\n" + std::string(body);
}

namespace {

// Checks the environment's shape while nlohmann's parser reads it, and stops
// it at the first value out of bounds: an object of keys [a-z0-9_] whose
// values are scalars, objects or arrays, nested at most kMaxEnvDepth levels
// below it; strings of at most kMaxEnvString bytes; at most kMaxEnvItems keys
// and values in all.
class EnvShape final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string why;

  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t) override { return scalar(); }
  bool number_unsigned(number_unsigned_t) override { return scalar(); }
  bool number_float(number_float_t v, const string_t&) override { return std::isfinite(v) ? scalar() : no("a number out of range"); }
  bool string(string_t& v) override { return v.size() > kMaxEnvString ? no("a string of " + std::to_string(v.size()) + " bytes") : scalar(); }
  bool binary(binary_t&) override { return no("binary data"); }
  bool start_object(std::size_t) override { return open(); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return depth_ == 0 ? no("an array, not an object") : open(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    if (k.empty() || k.size() > kMaxEnvKey) return no("a key of " + std::to_string(k.size()) + " bytes");
    for (char c : k)
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return no("a key that is not [a-z0-9_]");
    return counted();
  }
  bool parse_error(std::size_t at, const std::string&, const nlohmann::detail::exception&) override {
    return no("not JSON (at byte " + std::to_string(at) + ")");
  }

 private:
  int depth_ = 0;
  size_t items_ = 0;

  bool no(std::string reason) {
    if (why.empty()) why = std::move(reason);
    return false;
  }
  bool counted() { return ++items_ <= kMaxEnvItems || no("more than " + std::to_string(kMaxEnvItems) + " keys and values"); }
  bool scalar() { return depth_ > 0 ? counted() : no("not an object"); }
  bool open() {
    return ++depth_ <= 1 + kMaxEnvDepth || no("nested deeper than " + std::to_string(kMaxEnvDepth) + " levels");
  }
  bool close() { return --depth_, true; }
};

}  // namespace

std::string decode_env(std::string_view s) {
  EnvShape shape;
  if (!nlohmann::json::sax_parse(s, &shape) || !shape.why.empty())
    malformed("environment", shape.why.empty() ? "not a JSON object" : shape.why);
  // Re-encoded by the library: one line, every string escaped.
  return nlohmann::json::parse(s).dump();
}

Welcome decode_welcome(std::string_view s) {
  Welcome w;
  std::string_view mac = take_line(s, "welcome", "proof");
  if (!mac.empty()) w.mac = unhex(mac, kMacBytes, "welcome");
  w.body = std::string(s);
  w.host = check_host(take_line(s, "welcome", "host id"), "welcome");
  w.env = decode_env(s);
  return w;
}

std::string client_proof(std::string_view token, std::string_view hello, std::string_view server_nonce) {
  return hmac(token, transcript("fabmeter-v2 client", hello, server_nonce));
}

std::string server_proof(std::string_view token, std::string_view hello, std::string_view server_nonce,
                         std::string_view welcome_body) {
  return hmac(token, transcript("fabmeter-v2 server", hello, server_nonce) + sha256(welcome_body));
}

std::string session_key(std::string_view token, std::string_view hello, std::string_view server_nonce,
                        std::string_view welcome_body) {
  const std::string salt = decode_hello(hello).nonce + std::string(server_nonce);
  const std::string info = "fabmeter-v7 session" + std::string(1, '\0') + sha256(hello) + sha256(welcome_body);
  unsigned char key[kMacBytes];
  std::unique_ptr<EVP_KDF, decltype(&EVP_KDF_free)> kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr), EVP_KDF_free);
  std::unique_ptr<EVP_KDF_CTX, decltype(&EVP_KDF_CTX_free)> ctx(kdf ? EVP_KDF_CTX_new(kdf.get()) : nullptr,
                                                                 EVP_KDF_CTX_free);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(token.data()), token.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()), salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
      OSSL_PARAM_construct_end()};
  if (!ctx || EVP_KDF_derive(ctx.get(), key, sizeof key, params) != 1) runtime_error("HKDF-SHA-256 failed (libcrypto)");
  return std::string(reinterpret_cast<char*>(key), sizeof key);
}

bool proof_matches(std::string_view expected, std::string_view got) {
  return expected.size() == got.size() && CRYPTO_memcmp(expected.data(), got.data(), got.size()) == 0;
}

}  // namespace fm
