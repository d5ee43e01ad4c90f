// Result output: a tiny JSON object builder for the engine's JSON Lines, and
// a .npy writer so numpy/pandas read raw samples without a custom parser.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace fm {

class JsonObj {
 public:
  JsonObj& add(std::string_view key, double v);
  JsonObj& add(std::string_view key, uint64_t v);
  JsonObj& add(std::string_view key, int64_t v);
  JsonObj& add(std::string_view key, int v) { return add(key, static_cast<int64_t>(v)); }
  JsonObj& add(std::string_view key, unsigned v) { return add(key, static_cast<uint64_t>(v)); }
  JsonObj& add(std::string_view key, bool v);
  JsonObj& add(std::string_view key, const char* v) { return add(key, std::string_view(v)); }
  JsonObj& add(std::string_view key, std::string_view v);
  JsonObj& add(std::string_view key, const std::string& v) { return add(key, std::string_view(v)); }
  JsonObj& add(std::string_view key, const JsonObj& v);
  JsonObj& add_raw(std::string_view key, std::string_view json);  // already-serialised value
  std::string str() const { return "{" + body_ + "}"; }
  bool empty() const { return body_.empty(); }

 private:
  void key(std::string_view k);
  std::string body_;
};

std::string json_quote(std::string_view s);

// Writes a 1-D little-endian float64 array as NPY v1.0.
void write_npy_f64(const std::string& path, const double* data, size_t n);

// One JSON line on stdout, flushed (the orchestrator reads it as it comes).
void emit_line(const JsonObj& o);

}  // namespace fm
